"""CIFAR-10-C's corruptions (Hendrycks & Dietterich, ICLR 2019), for the paper-scale task.

Written here from the published definitions and the per-severity parameters of the CIFAR-10-C
release (its ``make_cifar_c.py`` tables: :data:`PARAMS`), with numpy, scipy and Pillow only
(the original uses scikit-image, OpenCV and ImageMagick). The images are float32 NHWC RGB in
[0, 1] and every corruption returns that range.

CIFAR-10-C's images are 32x32; ours are 32·f pixels wide (f = 2 at 64x64, 4 at 128x128). A
parameter measured in pixels (blur radii and sigmas, glass-blur displacement, snow-flake zoom
and streak length, elastic-transform lengths) is multiplied by f, and noise is drawn per CIFAR
pixel (one value per f x f block), so the corruption covers the same share of the image as on
CIFAR-10 -- what the paper sees when it upsamples CIFAR-10-C to 128x128. Amplitudes (noise,
brightness, contrast, saturation, fog strength), ratios (zoom, pixelate) and the JPEG quality
are used as published. docs/scale.md lists the tables.

Frost (needs the release's frost photos) and spatter (OpenCV's Canny and distance transform)
are left out.
"""
from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
from scipy import ndimage

#: CIFAR-10-C's parameters, severity 1..5 (meanings at each function).
PARAMS: dict[str, tuple] = {
    "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),
    "shot_noise": (500, 250, 100, 75, 50),
    "impulse_noise": (0.01, 0.02, 0.03, 0.05, 0.07),
    "speckle_noise": (0.06, 0.10, 0.12, 0.16, 0.20),
    "gaussian_blur": (0.4, 0.6, 0.7, 0.8, 1.0),
    "glass_blur": ((0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2)),
    "defocus_blur": ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)),
    "motion_blur": ((6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)),
    "zoom_blur": (1.06, 1.11, 1.16, 1.21, 1.26),
    "snow": ((0.1, 0.2, 1, 0.6, 8, 3, 0.95), (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
             (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9), (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
             (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8)),
    "fog": ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)),
    "brightness": (0.05, 0.1, 0.15, 0.2, 0.3),
    "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),
    "saturate": ((0.3, 0), (0.1, 0), (1.5, 0), (2, 0.1), (2.5, 0.2)),
    "elastic_transform": ((0, 0, 0.08), (0.05, 0.2, 0.07), (0.08, 0.06, 0.06),
                          (0.1, 0.04, 0.05), (0.1, 0.03, 0.03)),
    "pixelate": (0.95, 0.9, 0.85, 0.75, 0.65),
    "jpeg_compression": (80, 65, 58, 50, 40),
}
SEVERITIES = (1, 2, 3, 4, 5)
#: CIFAR-10-C's image side, the unit of its pixel-sized parameters.
CIFAR_SIDE = 32
Corruption = Callable[[np.ndarray, object, np.random.Generator, float], np.ndarray]


# ----------------------------------------------------------------------------- helpers
def _blur_hw(x: np.ndarray, sigma: float, mode: str = "nearest") -> np.ndarray:
    """Gaussian blur over H and W of (N, H, W, C) (scikit-image's ``gaussian``: truncated
    at 4 sigma, edge pixels repeated)."""
    if sigma <= 0:
        return x
    return ndimage.gaussian_filter(x, sigma=(0, sigma, sigma, 0), mode=mode, truncate=4.0)


def rgb_to_hsv(x: np.ndarray) -> np.ndarray:
    """RGB in [0, 1] -> HSV in [0, 1] (hue as a fraction of the turn), any leading shape."""
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    v = x.max(axis=-1)
    delta = v - x.min(axis=-1)
    s = np.where(v > 0, delta / np.where(v > 0, v, 1), 0.0)
    d = np.where(delta > 0, delta, 1)
    h = np.where(v == r, (g - b) / d, np.where(v == g, 2.0 + (b - r) / d, 4.0 + (r - g) / d))
    h = np.where(delta > 0, (h / 6.0) % 1.0, 0.0)
    return np.stack([h, s, v], axis=-1)


def hsv_to_rgb(x: np.ndarray) -> np.ndarray:
    """Inverse of :func:`rgb_to_hsv`."""
    h, s, v = x[..., 0], x[..., 1], x[..., 2]
    i = np.floor(h * 6.0)
    f = h * 6.0 - i
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    i = i.astype(np.int64) % 6
    choices = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)]
    return np.stack([np.choose(i, [c[k] for c in choices]) for k in range(3)], axis=-1)


def _zoom_axis(h: int, zoom: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source positions of a clipped zoom along one axis of length ``h``: the centre
    ceil(h / zoom) samples are stretched to round(side zoom) (scipy.ndimage.zoom's mapping:
    first and last samples aligned) and the middle ``h`` kept. Returns the lower index, the
    upper index and the weight of the upper one (linear interpolation)."""
    side = int(np.ceil(h / zoom))
    top = (h - side) // 2
    zoomed = int(round(side * zoom))
    trim = (zoomed - h) // 2
    pos = (np.arange(h) + trim) * ((side - 1) / max(zoomed - 1, 1))
    lo = np.minimum(np.floor(pos).astype(np.int64), side - 1)
    hi = np.minimum(lo + 1, side - 1)
    return top + lo, top + hi, pos - lo


def clipped_zoom(img: np.ndarray, zoom: float, axes: tuple[int, int] = (0, 1)) -> np.ndarray:
    """Zoom into the centre of ``img`` by ``zoom`` >= 1 over the two square ``axes``
    (bilinear) and crop back to the input size, as CIFAR-10-C's ``clipped_zoom`` does with
    ``scipy.ndimage.zoom(order=1)``; vectorised, so a batch shares one pass."""
    out = np.asarray(img)
    out = out if out.dtype in (np.float32, np.float64) else out.astype(np.float64)
    for axis in axes:
        lo, hi, w = _zoom_axis(out.shape[axis], zoom)
        shape = [1] * out.ndim
        shape[axis] = -1
        w = w.reshape(shape).astype(out.dtype)
        out = np.take(out, lo, axis=axis) * (1 - w) + np.take(out, hi, axis=axis) * w
    return out


def motion_kernel_taps(radius: float, sigma: float, angle_deg: float
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ImageMagick's motion blur (``MotionBlurImage``) as taps: 2 ceil(radius) + 1 weights
    exp(-i^2 / 2 sigma^2), i = 0, 1, ..., normalised, at whole-pixel offsets i (cos, sin) of
    the angle (rounded), all on one side of the pixel: a streak. Returns (weights, dy, dx)."""
    width = int(2 * np.ceil(radius) + 1)
    i = np.arange(width, dtype=np.float64)
    weights = np.exp(-i * i / (2.0 * max(sigma, 1e-12) ** 2))
    weights /= weights.sum()
    a = np.deg2rad(angle_deg)
    dx = np.ceil(i * np.cos(a) - 0.5).astype(np.int64)
    dy = np.ceil(i * np.sin(a) - 0.5).astype(np.int64)
    return weights, dy, dx


def motion_blur_image(img: np.ndarray, radius: float, sigma: float, angle: float) -> np.ndarray:
    """:func:`motion_kernel_taps` applied to (H, W[, C]), edge pixels repeated outside."""
    h, w = img.shape[:2]
    weights, dy, dx = motion_kernel_taps(radius, sigma, angle)
    pad = int(max(np.abs(dy).max(), np.abs(dx).max()))
    widths = ((pad, pad), (pad, pad)) + ((0, 0),) * (img.ndim - 2)
    padded = np.pad(img, widths, mode="edge")
    out = np.zeros(img.shape, np.float64)
    for wt, oy, ox in zip(weights, dy, dx):
        if wt >= 1e-12:
            out += wt * padded[pad + oy:pad + oy + h, pad + ox:pad + ox + w]
    return out


def plasma_fractal(size: int, decay: float, rng: np.random.Generator) -> np.ndarray:
    """A (size, size) diamond-square height map in [0, 1], ``size`` a power of two, periodic.

    As CIFAR-10-C's fog draws it: the first corner is 0; each level sets the square centres
    to the mean of their four corners and then the edge midpoints to the mean of their four
    neighbours, each plus ``wibble * U(-wibble, wibble)``, with wibble = 100 at the top level
    divided by ``decay`` per level."""
    m = np.zeros((size, size))
    step, wibble = size, 100.0
    while step >= 2:
        half = step // 2
        corners = m[0::step, 0::step]
        sq = corners + np.roll(corners, -1, axis=0)
        sq = sq + np.roll(sq, -1, axis=1)
        m[half::step, half::step] = sq / 4 + wibble * rng.uniform(-wibble, wibble, sq.shape)
        centres = m[half::step, half::step]
        corners = m[0::step, 0::step]
        row_mid = (centres + np.roll(centres, 1, axis=0)) + (corners + np.roll(corners, -1, 1))
        m[0::step, half::step] = row_mid / 4 + wibble * rng.uniform(-wibble, wibble,
                                                                    row_mid.shape)
        col_mid = (centres + np.roll(centres, 1, axis=1)) + (corners + np.roll(corners, -1, 0))
        m[half::step, 0::step] = col_mid / 4 + wibble * rng.uniform(-wibble, wibble,
                                                                    col_mid.shape)
        step //= 2
        wibble /= decay
    m -= m.min()
    return m / m.max()


def _to_uint8(img: np.ndarray) -> np.ndarray:
    return np.clip(np.round(img * 255.0), 0, 255).astype(np.uint8)


# ----------------------------------------------------------------------------- noise
# Noise is drawn per CIFAR pixel: one value per channel for each f x f block (f rounded), the
# grain of CIFAR-10-C's noise in the paper's upsampled images; at f = 1 it is per pixel.
def _grain(f: float) -> int:
    return max(1, int(round(f)))


def _up(grid: np.ndarray, k: int, shape: tuple[int, ...]) -> np.ndarray:
    """Per-block values (N, h/k, w/k, C) repeated over their k x k blocks, cut to ``shape``."""
    return grid.repeat(k, axis=1).repeat(k, axis=2)[:, :shape[1], :shape[2]]


def _grid_shape(shape: tuple[int, ...], k: int) -> tuple[int, ...]:
    return (shape[0], -(-shape[1] // k), -(-shape[2] // k), shape[3])


def _block_mean(x: np.ndarray, k: int) -> np.ndarray:
    """Mean of every k x k block (edge pixels repeated to fill the last ones)."""
    n, h, w, c = x.shape
    gh, gw = -(-h // k), -(-w // k)
    padded = np.pad(x, ((0, 0), (0, gh * k - h), (0, gw * k - w), (0, 0)), mode="edge")
    return padded.reshape(n, gh, k, gw, k, c).mean(axis=(2, 4))


def gaussian_noise(x: np.ndarray, c: float, rng: np.random.Generator, f: float) -> np.ndarray:
    """x + N(0, c^2) per CIFAR pixel and channel."""
    k = _grain(f)
    return x + _up(rng.normal(0.0, c, _grid_shape(x.shape, k)), k, x.shape)


def shot_noise(x: np.ndarray, c: float, rng: np.random.Generator, f: float) -> np.ndarray:
    """Photon noise of c photons at full scale, Poisson(x c) / c per CIFAR pixel: each block
    gets the deviation of Poisson(c m) / c from its mean m."""
    k = _grain(f)
    mean = _block_mean(x, k)
    return x + _up(rng.poisson(mean * c) / c - mean, k, x.shape)


def impulse_noise(x: np.ndarray, c: float, rng: np.random.Generator, f: float) -> np.ndarray:
    """Salt and pepper: each value (CIFAR pixel and channel) is replaced with probability c,
    by 1 or 0 with equal chance (scikit-image's ``random_noise(mode='s&p')``)."""
    k = _grain(f)
    grid = _grid_shape(x.shape, k)
    flipped = _up(rng.random(grid) <= c, k, x.shape)
    salt = _up(rng.random(grid) <= 0.5, k, x.shape)
    return np.where(flipped, salt.astype(x.dtype), x)


def speckle_noise(x: np.ndarray, c: float, rng: np.random.Generator, f: float) -> np.ndarray:
    """x + x N(0, c^2), the Gaussian drawn per CIFAR pixel and channel."""
    k = _grain(f)
    return x + x * _up(rng.normal(0.0, c, _grid_shape(x.shape, k)), k, x.shape)


# ----------------------------------------------------------------------------- blur
def gaussian_blur(x: np.ndarray, c: float, rng: np.random.Generator, f: float) -> np.ndarray:
    """Gaussian blur of sigma c (CIFAR pixels)."""
    return _blur_hw(x, c * f)


def glass_blur(x: np.ndarray, c: tuple, rng: np.random.Generator, f: float) -> np.ndarray:
    """Frosted glass: blur (sigma c0), then ``c2`` passes that visit the pixels from the
    bottom-right inwards and swap each with a neighbour at a random offset in [-d, d) in
    both axes (d = c1 CIFAR pixels), then blur again. Images of the batch draw their own
    offsets; each image's swaps are sequential as in the definition."""
    sigma, delta, passes = c[0] * f, int(round(c[1] * f)), c[2]
    out = np.floor(_blur_hw(x, sigma) * 255.0) / 255.0  # the original goes through uint8
    n, h, w = x.shape[:3]
    batch = np.arange(n)
    for _ in range(passes):
        for r in range(h - delta, delta, -1):
            offsets = rng.integers(-delta, delta, size=(w - 2 * delta, 2, n))
            for j, col in enumerate(range(w - delta, delta, -1)):
                dy, dx = offsets[j]
                here = out[batch, r, col].copy()
                out[batch, r, col] = out[batch, r + dy, col + dx]
                out[batch, r + dy, col + dx] = here
    return _blur_hw(out, sigma)


def defocus_kernel(radius: float, alias: float, f: float) -> np.ndarray:
    """CIFAR-10-C's defocus disk: the pixels within ``radius`` of the centre of a 17x17 grid
    (wider when the radius exceeds 8), normalised, anti-aliased by a Gaussian of sigma
    ``alias`` over 2 round(f) + 1 taps per axis (OpenCV's 3x3 at CIFAR scale, mirrored
    borders), then cut to its non-zero support (which changes no result)."""
    half = 8 if radius <= 8 else int(np.ceil(radius))
    grid = np.arange(-half, half + 1)
    yy, xx = np.meshgrid(grid, grid, indexing="ij")
    disk = (xx ** 2 + yy ** 2 <= radius ** 2).astype(np.float64)
    disk /= disk.sum()
    ksize = 3 if f <= 1 else 2 * int(round(f)) + 1
    k = np.arange(ksize) - (ksize - 1) / 2
    taps = np.exp(-k ** 2 / (2 * alias ** 2))
    taps /= taps.sum()
    smooth = ndimage.correlate1d(disk, taps, axis=0, mode="mirror")
    smooth = ndimage.correlate1d(smooth, taps, axis=1, mode="mirror")
    rows = np.flatnonzero(smooth.any(axis=1))
    cols = np.flatnonzero(smooth.any(axis=0))
    return smooth[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]


def defocus_blur(x: np.ndarray, c: tuple, rng: np.random.Generator, f: float) -> np.ndarray:
    """Defocus: correlation with :func:`defocus_kernel` of radius c0 and anti-aliasing
    sigma c1 (CIFAR pixels), mirrored borders (OpenCV's BORDER_REFLECT_101)."""
    kernel = defocus_kernel(c[0] * f, c[1] * f, f)
    return ndimage.correlate(x, kernel[None, :, :, None], mode="mirror")


def motion_blur(x: np.ndarray, c: tuple, rng: np.random.Generator, f: float) -> np.ndarray:
    """Camera shake: ImageMagick's motion blur of radius c0 and sigma c1 (CIFAR pixels) at an
    angle uniform in [-45, 45] degrees per image."""
    angles = rng.uniform(-45.0, 45.0, len(x))
    return np.stack([motion_blur_image(img, c[0] * f, c[1] * f, a) for img, a in zip(x, angles)])


def zoom_blur(x: np.ndarray, c: float, rng: np.random.Generator, f: float) -> np.ndarray:
    """Zooming while exposing: the mean of the image and its centre zooms by
    ``numpy.arange(1, c, 0.01)``, as published (floating point makes that 7, 12, 16, 21 and
    26 zooms, up to 1.06, 1.11, 1.15, 1.20 and 1.25)."""
    zooms = np.arange(1.0, c, 0.01)
    planes = np.ascontiguousarray(x.transpose(1, 2, 0, 3), np.float32)  # rows gather fast
    acc = planes.copy()
    for z in zooms:
        acc += clipped_zoom(planes, z)
    return (acc / (len(zooms) + 1)).transpose(2, 0, 1, 3)


# ----------------------------------------------------------------------------- weather
def snow(x: np.ndarray, c: tuple, rng: np.random.Generator, f: float) -> np.ndarray:
    """Snow: a Gaussian layer N(c0, c1^2), zoomed by c2 (flakes c2 CIFAR pixels wide), zero
    below c3, streaked by motion blur (radius c4, sigma c5, angle in [-135, -45] degrees);
    the image whitened (c6 x + (1 - c6) max(x, 1.5 gray + 0.5)) and the layer added twice
    (as drawn and rotated by 180 degrees)."""
    n, h = x.shape[0], x.shape[1]
    gray = x @ np.array([0.299, 0.587, 0.114])
    out = np.empty_like(x)
    for k in range(n):
        layer = rng.normal(c[0], c[1], (h, h))
        layer = clipped_zoom(layer, c[2] * f)
        layer[layer < c[3]] = 0
        layer = np.floor(np.clip(layer, 0, 1) * 255.0) / 255.0  # the original's 8-bit PNG
        layer = motion_blur_image(layer, c[4] * f, c[5] * f, rng.uniform(-135.0, -45.0))
        layer = np.round(layer * 255.0) / 255.0
        img = c[6] * x[k] + (1 - c[6]) * np.maximum(x[k], gray[k][:, :, None] * 1.5 + 0.5)
        out[k] = img + layer[:, :, None] + np.rot90(layer, 2)[:, :, None]
    return out


def fog(x: np.ndarray, c: tuple, rng: np.random.Generator, f: float) -> np.ndarray:
    """Fog: x + c0 * a plasma fractal (:func:`plasma_fractal`, decay c1), rescaled by
    max / (max + c0) so the brightest pixel keeps its value."""
    h = x.shape[1]
    size = 1 << int(np.ceil(np.log2(max(h, CIFAR_SIDE))))
    out = np.empty_like(x)
    for k, img in enumerate(x):
        top = img.max()
        haze = plasma_fractal(size, c[1], rng)[:h, :h, None]
        out[k] = (img + c[0] * haze) * top / (top + c[0])
    return out


def brightness(x: np.ndarray, c: float, rng: np.random.Generator, f: float) -> np.ndarray:
    """Brightness: the HSV value plus c."""
    hsv = rgb_to_hsv(x)
    hsv[..., 2] = np.clip(hsv[..., 2] + c, 0, 1)
    return hsv_to_rgb(hsv)


# ----------------------------------------------------------------------------- digital
def contrast(x: np.ndarray, c: float, rng: np.random.Generator, f: float) -> np.ndarray:
    """Contrast: (x - m) c + m with m each channel's mean over the image."""
    means = x.mean(axis=(1, 2), keepdims=True)
    return (x - means) * c + means


def saturate(x: np.ndarray, c: tuple, rng: np.random.Generator, f: float) -> np.ndarray:
    """Saturation: the HSV saturation times c0 plus c1."""
    hsv = rgb_to_hsv(x)
    hsv[..., 1] = np.clip(hsv[..., 1] * c[0] + c[1], 0, 1)
    return hsv_to_rgb(hsv)


def _affine_from_points(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The 2x3 matrix A with A [x, y, 1]^T = dst for the three (x, y) points of src."""
    a = np.column_stack([src, np.ones(3)])
    return np.linalg.solve(a, dst).T


def elastic_transform(x: np.ndarray, c: tuple, rng: np.random.Generator, f: float
                      ) -> np.ndarray:
    """Elastic: a random affine warp (three points around the centre, ±c2 moves, mirrored
    borders), then a displacement field of uniform noise smoothed by a Gaussian of sigma c1
    and scaled by c0 (all three fractions of the image side), bilinear, reflected borders."""
    n, h, w = x.shape[:3]
    alpha, sigma, shift = c[0] * h, c[1] * h, c[2] * h
    centre = np.float64(h // 2)
    sq = min(h, w) // 3
    src = np.array([[centre + sq, centre + sq], [centre + sq, centre - sq],
                    [centre - sq, centre - sq]])
    rows, cols = np.meshgrid(np.arange(h, dtype=np.float64), np.arange(w, dtype=np.float64),
                             indexing="ij")
    out = np.empty_like(x)
    for k, img in enumerate(x):
        dst = src + rng.uniform(-shift, shift, src.shape)
        fwd = np.vstack([_affine_from_points(src, dst), [0, 0, 1]])
        inv = np.linalg.inv(fwd)  # output (x, y) -> input (x, y)
        matrix = np.array([[inv[1, 1], inv[1, 0]], [inv[0, 1], inv[0, 0]]])  # (row, col)
        offset = np.array([inv[1, 2], inv[0, 2]])
        warped = np.stack([ndimage.affine_transform(img[:, :, ch], matrix, offset, order=1,
                                                    mode="mirror") for ch in range(3)], -1)
        fields = []
        for _ in range(2):
            noise = rng.uniform(-1, 1, (h, w))
            smooth = ndimage.gaussian_filter(noise, sigma, mode="reflect", truncate=3.0) \
                if sigma > 0 else noise
            fields.append(smooth * alpha)
        dx, dy = fields
        coords = np.stack([rows + dy, cols + dx])
        out[k] = np.stack([ndimage.map_coordinates(warped[:, :, ch], coords, order=1,
                                                   mode="reflect") for ch in range(3)], -1)
    return out


def pixelate(x: np.ndarray, c: float, rng: np.random.Generator, f: float) -> np.ndarray:
    """Pixelate: box-downsample to c times the side and box-upsample back (Pillow BOX)."""
    from PIL import Image
    h = x.shape[1]
    small = int(h * c)
    out = np.empty_like(x)
    for k, img in enumerate(x):
        im = Image.fromarray(_to_uint8(img)).resize((small, small), Image.BOX)
        out[k] = np.asarray(im.resize((h, h), Image.BOX), np.float32) / 255.0
    return out


def jpeg_compression(x: np.ndarray, c: int, rng: np.random.Generator, f: float) -> np.ndarray:
    """JPEG at quality c (Pillow's encoder, its default 4:2:0 chroma subsampling)."""
    from PIL import Image
    out = np.empty_like(x)
    for k, img in enumerate(x):
        buf = io.BytesIO()
        Image.fromarray(_to_uint8(img)).save(buf, format="JPEG", quality=int(c))
        buf.seek(0)
        with Image.open(buf) as im:
            out[k] = np.asarray(im.convert("RGB"), np.float32) / 255.0
    return out


CORRUPTIONS: dict[str, Corruption] = {
    "gaussian_noise": gaussian_noise, "shot_noise": shot_noise,
    "impulse_noise": impulse_noise, "speckle_noise": speckle_noise,
    "gaussian_blur": gaussian_blur, "glass_blur": glass_blur, "defocus_blur": defocus_blur,
    "motion_blur": motion_blur, "zoom_blur": zoom_blur,
    "snow": snow, "fog": fog, "brightness": brightness,
    "contrast": contrast, "saturate": saturate, "elastic_transform": elastic_transform,
    "pixelate": pixelate, "jpeg_compression": jpeg_compression,
}
#: The names, grouped as CIFAR-10-C groups them (noise, blur, weather, digital).
NAMES = tuple(CORRUPTIONS)


def corrupt(x: np.ndarray, name: str, severity: int, rng: np.random.Generator) -> np.ndarray:
    """``x`` (N, H, W, 3) float in [0, 1] under corruption ``name`` at ``severity`` 1..5,
    randomness from ``rng``; float32, clipped to [0, 1]. ValueError naming the choices for
    an unknown name or severity."""
    if name not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {name!r}; choose from {', '.join(NAMES)}")
    if severity not in SEVERITIES:
        raise ValueError(f"severity must be 1..5, got {severity}")
    x = np.asarray(x, np.float64)
    if x.ndim != 4 or x.shape[-1] != 3 or x.shape[1] != x.shape[2]:
        raise ValueError(f"expected square RGB images (N, H, H, 3), got {list(x.shape)}")
    factor = x.shape[1] / CIFAR_SIDE
    out = CORRUPTIONS[name](x, PARAMS[name][severity - 1], rng, factor)
    return np.clip(out, 0.0, 1.0).astype(np.float32)
