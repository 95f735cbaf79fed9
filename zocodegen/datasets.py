"""The digits data of the "does it learn?" experiment (issue 4).

The question is whether zeroth-order training on the device actually improves a pre-trained
INT8 model. That needs real data with a real domain shift, reproducible on any machine
without a download:

* the 8x8 handwritten digits that scikit-learn ships inside its package (1797 images,
  values 0..16, ten classes of about 180 images each);
* a fixed, seeded, stratified split into **pretrain** (clean, about 50 %: the model of
  ``tests/fixtures/digits_cnn.tflite`` is trained on it), **adapt** (about 30 %, corrupted:
  the data the device trains on) and **test** (about 20 %, corrupted: held out; its clean
  version is kept for reporting);
* a domain shift (:func:`corrupt`) that costs the pre-trained model a clear share of its
  accuracy and that a model can still learn: every image is rotated by 15..25 degrees in a
  random direction and gets Gaussian sensor noise.

The grid experiment "in the paper's shape" (docs/experiment.md, ``benchmarks/experiment.py``)
asks the same question over several kinds of shift, as CIFAR-10-C does for CIFAR-10: four
corruption **families** (:data:`FAMILIES`: sensor noise, blur, fog, JPEG-like compression) at
two **severities** each (:func:`corrupt_family`), applied to the same adapt and test splits
(:func:`load_family_split`, :func:`family_npz`).

Everything here is pure numpy (scikit-learn only loads the images), deterministic given the
seed, and independent of TensorFlow, so the fixture generator (TF venv), the test-suite and
the training experiments see the same arrays.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .files import atomic_writer

#: Largest pixel value of the digits images; the model's float input is ``pixel / PIXEL_MAX``.
PIXEL_MAX = 16.0
#: Fractions of every class that go to pretrain and adapt; the rest is the test split.
SPLIT_FRACTIONS = (0.5, 0.3)
#: Default domain shift: rotation magnitude range (degrees) and noise std (pixel units).
MIN_ANGLE = 15.0
MAX_ANGLE = 25.0
NOISE_STD = 2.0
# Severity parameters of the corruption families (see FAMILY_PARAMS).
NOISE_SEV1, NOISE_SEV2 = 4.0, 6.0
BLUR_SEV1, BLUR_SEV2 = 0.8, 1.0
FOG_SEV1, FOG_SEV2 = 0.25, 0.35
JPEG_SEV1, JPEG_SEV2 = 3.0, 4.0

# Independent random streams derived from the one user seed (numpy SeedSequence entropy).
_SPLIT_STREAM, _ADAPT_STREAM, _TEST_STREAM = 1, 2, 3


def _load_raw() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits: images (1797, 8, 8) float32 in 0..16 and int64 labels."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("the digits data needs scikit-learn (pip install scikit-learn); it "
                          "ships the 8x8 digits inside the package, no download") from exc
    digits = load_digits()
    return digits.images.astype(np.float32), digits.target.astype(np.int64)


def stratified_split(labels: np.ndarray, fractions: tuple[float, ...],
                     rng: np.random.Generator) -> list[np.ndarray]:
    """Indices of ``len(fractions) + 1`` disjoint parts, each class divided in the given
    proportions (rounded per class; the last part takes the remainder), each part shuffled.

    Written here rather than taken from scikit-learn so that the split cannot change with a
    scikit-learn release: the experiment's numbers must be comparable over time.
    """
    parts: list[list[np.ndarray]] = [[] for _ in range(len(fractions) + 1)]
    for cls in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == cls))
        start = 0
        for k, frac in enumerate(fractions):
            stop = start + int(round(frac * idx.size))
            parts[k].append(idx[start:stop])
            start = stop
        parts[-1].append(idx[start:])
    return [rng.permutation(np.concatenate(p)) for p in parts]


def rotate(images: np.ndarray, angles_deg: np.ndarray) -> np.ndarray:
    """Rotate each image about its centre by its angle (degrees, counter-clockwise as
    displayed with row 0 at the top), bilinear sampling, zero outside the image.

    Implemented with numpy (inverse mapping of every output pixel) so the package needs no
    scipy/OpenCV just for this.
    """
    images = np.asarray(images, dtype=np.float32)
    n, h, w = images.shape
    theta = np.deg2rad(np.asarray(angles_deg, dtype=np.float64)).reshape(n, 1, 1)
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    yy, xx = np.meshgrid(np.arange(h, dtype=np.float64) - cy,
                         np.arange(w, dtype=np.float64) - cx, indexing="ij")
    # Output pixel (y, x) takes the input at R(-theta) (y, x); with y pointing down, a
    # counter-clockwise rotation on screen maps (x, y) -> (x cos + y sin, -x sin + y cos).
    cos, sin = np.cos(theta), np.sin(theta)
    src_x = cos * xx - sin * yy + cx
    src_y = sin * xx + cos * yy + cy
    x0 = np.floor(src_x).astype(np.int64)
    y0 = np.floor(src_y).astype(np.int64)
    fx = src_x - x0
    fy = src_y - y0
    batch = np.arange(n).reshape(n, 1, 1)
    out = np.zeros((n, h, w), dtype=np.float64)
    for dy, wy in ((0, 1.0 - fy), (1, fy)):
        for dx, wx in ((0, 1.0 - fx), (1, fx)):
            yi, xi = y0 + dy, x0 + dx
            inside = (yi >= 0) & (yi < h) & (xi >= 0) & (xi < w)
            vals = images[batch, np.clip(yi, 0, h - 1), np.clip(xi, 0, w - 1)]
            out += np.where(inside, vals, 0.0) * wy * wx
    return out.astype(np.float32)


def corrupt(images: np.ndarray, seed: int, *, min_angle: float = MIN_ANGLE,
            max_angle: float = MAX_ANGLE, noise_std: float = NOISE_STD) -> np.ndarray:
    """The domain shift: rotate every image by a random angle whose magnitude is uniform in
    ``[min_angle, max_angle]`` degrees and whose direction is random, add Gaussian noise of
    ``noise_std`` (pixel units, images are 0..16) and clip back to 0..16.

    The defaults take the pre-trained digits CNN from about 97 % to about 66 % test accuracy
    (a shift a user would notice) while the digits stay recognisable, so training on the
    shifted data has something to gain. Deterministic given ``seed``; returns float32 (N, 8, 8).
    """
    images = np.asarray(images, dtype=np.float32)
    rng = np.random.default_rng(seed)
    n = images.shape[0]
    magnitude = rng.uniform(min_angle, max_angle, size=n)
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    rotated = rotate(images, sign * magnitude)
    noisy = rotated + rng.normal(0.0, noise_std, size=rotated.shape)
    return np.clip(noisy, 0.0, PIXEL_MAX).astype(np.float32)


#: The corruption families of the grid experiment, CIFAR-10-C's four groups on 8x8 digits.
FAMILIES = ("noise", "blur", "fog", "digital")
#: Severities of every family (1: moderate, 2: strong).
SEVERITIES = (1, 2)
#: Per family, the parameter of each severity: noise: Gaussian std in pixel values (images
#: are 0..16); blur: Gaussian kernel std in pixels; fog: the haze's share of the blend
#: (contrast falls to ``1 - share``); digital: JPEG-like DCT quantisation step (pixel values).
#: Chosen so that both pre-trained int8 digits models (~97 % clean test accuracy) drop to
#: roughly 75-88 % (severity 1) and 57-70 % (severity 2) on the test split: a shift worth
#: adapting to, far from chance (10 %). tests/fixtures/README.md ("ceilings") lists them.
FAMILY_PARAMS: dict[str, tuple[float, float]] = {
    "noise": (NOISE_SEV1, NOISE_SEV2),
    "blur": (BLUR_SEV1, BLUR_SEV2),
    "fog": (FOG_SEV1, FOG_SEV2),
    "digital": (JPEG_SEV1, JPEG_SEV2),
}


def gaussian_noise(images: np.ndarray, std: float, rng: np.random.Generator) -> np.ndarray:
    """Sensor noise: i.i.d. Gaussian of ``std`` (pixel units) on every pixel, background
    included, clipped to 0..16."""
    noisy = images + rng.normal(0.0, std, size=images.shape)
    return np.clip(noisy, 0.0, PIXEL_MAX).astype(np.float32)


def gaussian_blur(images: np.ndarray, std: float) -> np.ndarray:
    """Out-of-focus optics: separable Gaussian blur of ``std`` pixels (kernel radius
    ``ceil(2 std)``), zero outside the image like the dark border of the digits."""
    radius = int(np.ceil(2.0 * std))
    taps = np.exp(-0.5 * (np.arange(-radius, radius + 1) / std) ** 2)
    taps /= taps.sum()
    n, h, w = images.shape
    padded = np.pad(images.astype(np.float64), ((0, 0), (radius, radius), (radius, radius)))
    rows = sum(t * padded[:, k:k + h, :] for k, t in enumerate(taps))
    out = sum(t * rows[:, :, k:k + w] for k, t in enumerate(taps))
    return out.astype(np.float32)


def smooth_field(n: int, h: int, w: int, rng: np.random.Generator, grid: int = 3) -> np.ndarray:
    """Per image a smooth random field in [0, 1]: uniform noise on a ``grid`` x ``grid``
    lattice, bilinearly interpolated to (h, w) and stretched to the full range, i.e. the
    low-frequency patches of haze that CIFAR-10-C's fog draws with a plasma fractal."""
    coarse = rng.random((n, grid, grid))
    ys = np.linspace(0.0, grid - 1.0, h)
    xs = np.linspace(0.0, grid - 1.0, w)
    y0 = np.minimum(np.floor(ys).astype(np.int64), grid - 2)
    x0 = np.minimum(np.floor(xs).astype(np.int64), grid - 2)
    fy = (ys - y0)[None, :, None]
    fx = (xs - x0)[None, None, :]
    top = coarse[:, y0][:, :, x0] * (1 - fx) + coarse[:, y0][:, :, x0 + 1] * fx
    bottom = coarse[:, y0 + 1][:, :, x0] * (1 - fx) + coarse[:, y0 + 1][:, :, x0 + 1] * fx
    field = top * (1 - fy) + bottom * fy
    lo = field.min(axis=(1, 2), keepdims=True)
    hi = field.max(axis=(1, 2), keepdims=True)
    return (field - lo) / np.maximum(hi - lo, 1e-12)


def fog(images: np.ndarray, share: float, rng: np.random.Generator) -> np.ndarray:
    """Fog / low contrast: the image keeps ``1 - share`` of its contrast and is blended with a
    bright, patchy haze (:func:`smooth_field`, between half and full white)."""
    n, h, w = images.shape
    haze = PIXEL_MAX * (0.5 + 0.5 * smooth_field(n, h, w, rng))
    out = (1.0 - share) * images + share * haze
    return np.clip(out, 0.0, PIXEL_MAX).astype(np.float32)


def dct_matrix(n: int) -> np.ndarray:
    """The orthonormal DCT-II matrix D (n x n): coefficients of a block X are D X D^T."""
    k = np.arange(n).reshape(-1, 1)
    i = np.arange(n).reshape(1, -1)
    d = np.cos(np.pi * (2 * i + 1) * k / (2 * n)) * np.sqrt(2.0 / n)
    d[0] /= np.sqrt(2.0)
    return d


def jpeg_like(images: np.ndarray, step: float) -> np.ndarray:
    """Digital compression: each 8x8 image is one JPEG block; its DCT coefficients are
    rounded to multiples of ``step * (1 + u + v)`` (coarser for higher frequencies, the
    shape of JPEG's quantisation tables) and transformed back, which leaves JPEG's ringing
    and blocky gradients. Deterministic (no randomness)."""
    n, h, w = images.shape
    dh, dw = dct_matrix(h), dct_matrix(w)
    q = step * (1.0 + np.arange(h).reshape(-1, 1) + np.arange(w).reshape(1, -1))
    coeffs = dh @ images.astype(np.float64) @ dw.T
    rounded = np.round(coeffs / q) * q
    out = dh.T @ rounded @ dw
    return np.clip(out, 0.0, PIXEL_MAX).astype(np.float32)


def family_param(family: str, severity: int) -> float:
    """The parameter of ``family`` at ``severity`` (:data:`FAMILY_PARAMS`); ValueError naming
    the valid choices otherwise."""
    if family not in FAMILY_PARAMS:
        raise ValueError(f"unknown corruption family {family!r}; choose from {FAMILIES}")
    if severity not in SEVERITIES:
        raise ValueError(f"severity must be one of {SEVERITIES}, got {severity!r}")
    return FAMILY_PARAMS[family][severity - 1]


def corrupt_family(images: np.ndarray, family: str, severity: int, seed: int) -> np.ndarray:
    """``images`` (N, 8, 8), pixel values 0..16, under one corruption ``family`` of
    :data:`FAMILIES` at ``severity`` 1 or 2 (:data:`FAMILY_PARAMS`).

    Deterministic given ``seed`` (the families without randomness ignore it); returns float32
    (N, 8, 8) clipped to 0..16.
    """
    param = family_param(family, severity)
    images = np.asarray(images, dtype=np.float32)
    rng = np.random.default_rng(seed)
    if family == "noise":
        return gaussian_noise(images, param, rng)
    if family == "blur":
        return gaussian_blur(images, param)
    if family == "fog":
        return fog(images, param, rng)
    return jpeg_like(images, param)


def _split(seed: int, shift: Callable[[np.ndarray, int], np.ndarray]) -> dict[str, np.ndarray]:
    """The seeded stratified split with ``shift(images, stream_seed)`` applied to the adapt
    and the test images, each with its own random stream (so the held-out corruption is not
    the one the device trained on); keys as in :func:`load_digits_split`."""
    images, labels = _load_raw()
    ss = np.random.SeedSequence([seed, _SPLIT_STREAM])
    pre, ada, tst = stratified_split(labels, SPLIT_FRACTIONS, np.random.default_rng(ss))
    adapt_seed = int(np.random.SeedSequence([seed, _ADAPT_STREAM]).generate_state(1)[0])
    test_seed = int(np.random.SeedSequence([seed, _TEST_STREAM]).generate_state(1)[0])
    return {
        "x_pretrain": images[pre], "y_pretrain": labels[pre],
        "x_adapt": shift(images[ada], adapt_seed), "y_adapt": labels[ada],
        "x_test": shift(images[tst], test_seed), "y_test": labels[tst],
        "x_clean_test": images[tst], "y_clean_test": labels[tst].copy(),
    }


def load_digits_split(seed: int = 0) -> dict[str, np.ndarray]:
    """The experiment's data, fixed by ``seed``.

    Images are float32 (N, 8, 8) with pixel values 0..16 (corrupted ones are clipped to that
    range), labels int64 (N,). Keys:

    * ``x_pretrain``/``y_pretrain``: clean, ~50 % (what the fixture model is trained on);
    * ``x_adapt``/``y_adapt``: corrupted, ~30 % (on-device training data);
    * ``x_test``/``y_test``: corrupted, ~20 % (held out);
    * ``x_clean_test``/``y_clean_test``: the same test images before the corruption.

    The adapt and test splits are corrupted with independent random streams, so the held-out
    rotations and noise are not those the device trained on.
    """
    return _split(seed, corrupt)


def load_family_split(family: str, severity: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The split of :func:`load_digits_split` (same images in every part), with the adapt and
    test images under :func:`corrupt_family` instead of the rotation + noise shift: one cell
    of the grid experiment."""
    family_param(family, severity)  # refuse a bad cell before loading anything
    return _split(seed, lambda images, s: corrupt_family(images, family, severity, s))


def to_unit(images: np.ndarray) -> np.ndarray:
    """The model's float input: (N, 8, 8, 1) float32 in [0, 1] (pixel / 16)."""
    images = np.asarray(images, dtype=np.float32)
    return (images / np.float32(PIXEL_MAX)).reshape(*images.shape[:3], 1)


def quantize_images(images: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """Digits images (pixel values 0..16) -> the model's int8 input, (N, 8, 8, 1).

    The float input is ``pixel / 16``; it is quantized with TFLite's float -> int8 rule
    (``AffineQuantize``): ``clamp(round(x / scale) + zero_point, -128, 127)`` with the division
    in float32 and rounding half away from zero, i.e. exactly what a QUANTIZE op at the
    model's input would compute.
    """
    x = to_unit(images)
    scaled = (x / np.float32(scale)).astype(np.float64)
    rounded = np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)
    return np.clip(rounded.astype(np.int64) + int(zero_point), -128, 127).astype(np.int8)


def _scale_zero_point(quant: Any) -> tuple[float, int]:
    """Accept an IR ``Quantization``, a ``(scale, zero_point)`` pair or a TFLite interpreter's
    ``"quantization"`` entry."""
    if hasattr(quant, "scalar_scale"):
        return float(quant.scalar_scale), int(quant.scalar_zero_point)
    scale, zero_point = quant
    return float(np.asarray(scale).reshape(-1)[0]), int(np.asarray(zero_point).reshape(-1)[0])


def _write_npz(path: str | Path, model_input_quant: Any,
               split: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """DATA.npz of a split (see :func:`digits_npz`), quantized for the model's input."""
    scale, zero_point = _scale_zero_point(model_input_quant)
    arrays = {
        "x": quantize_images(split["x_adapt"], scale, zero_point),
        "y": split["y_adapt"].astype(np.int64),
        "x_test": quantize_images(split["x_test"], scale, zero_point),
        "y_test": split["y_test"].astype(np.int64),
        "x_clean_test": quantize_images(split["x_clean_test"], scale, zero_point),
        "y_clean_test": split["y_clean_test"].astype(np.int64),
    }
    with atomic_writer(Path(path)) as fh:
        np.savez(fh, **arrays)
    return arrays


def digits_npz(path: str | Path, model_input_quant: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """Write the experiment's ``DATA.npz`` (DESIGN.md section 8) and return its arrays.

    ``x``/``y``: the corrupted adapt split (what the device trains on), ``x_test``/``y_test``:
    the corrupted test split (accuracy is reported on it), ``x_clean_test``/``y_clean_test``:
    the clean test split (to show how much of the clean accuracy training recovers). Images
    are int8 (N, 8, 8, 1) in the model's input quantization ``model_input_quant`` (an IR
    ``Quantization`` or a ``(scale, zero_point)`` pair); labels are int64.
    """
    return _write_npz(path, model_input_quant, load_digits_split(seed))


def digits_folder(root: str | Path, seed: int = 0, upscale: int = 1) -> dict[str, int]:
    """The experiment's corrupted adapt and test images as a folder of PNG files, the way a
    user's camera data arrives (docs/your-model.md): ``root/{train,test}/<digit>/<k>.png``,
    8-bit greyscale (pixel * 255 / 16), each pixel repeated ``upscale`` times per axis.
    Returns the file count per split."""
    from PIL import Image

    split = load_digits_split(seed)
    counts = {}
    for name, key in (("train", "adapt"), ("test", "test")):
        images, labels = split[f"x_{key}"], split[f"y_{key}"]
        for k, (image, label) in enumerate(zip(images, labels)):
            folder = Path(root) / name / str(int(label))
            folder.mkdir(parents=True, exist_ok=True)
            pixels = np.rint(image * (255.0 / PIXEL_MAX)).astype(np.uint8)
            pixels = pixels.repeat(upscale, axis=0).repeat(upscale, axis=1)
            Image.fromarray(pixels, "L").save(folder / f"{k:04d}.png")
        counts[name] = len(labels)
    return counts


def family_npz(path: str | Path, model_input_quant: Any, family: str, severity: int,
               seed: int = 0) -> dict[str, np.ndarray]:
    """:func:`digits_npz` for one grid cell: the adapt and test splits under corruption
    ``family`` at ``severity`` (:func:`load_family_split`); same keys, dtypes and shapes."""
    return _write_npz(path, model_input_quant, load_family_split(family, severity, seed))


__all__ = ["FAMILIES", "FAMILY_PARAMS", "PIXEL_MAX", "SEVERITIES", "corrupt", "corrupt_family",
           "dct_matrix", "digits_folder", "digits_npz", "family_npz", "family_param", "fog",
           "gaussian_blur",
           "gaussian_noise", "jpeg_like", "load_digits_split", "load_family_split",
           "quantize_images", "rotate", "smooth_field", "stratified_split", "to_unit"]


def fleet_shares(count: int, model_input_quant: Any, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """The fleet experiment's devices (docs/fleet.md): device k holds every count-th image of
    the adapt split from k on (disjoint shares), and the whole test split, both under
    corruption family k mod 4 at severity 1 + (k // 4) mod 2, each with its own random
    stream. Keys as DATA.npz's (``x``, ``y``, ``x_test``, ``y_test``, int8 for the model's
    input) plus ``name`` ("fog-1", ...)."""
    scale, zero_point = _scale_zero_point(model_input_quant)
    split = load_digits_split(seed)
    shares = []
    for k in range(count):
        family, severity = FAMILIES[k % len(FAMILIES)], 1 + (k // len(FAMILIES)) % 2
        mine = np.arange(k, len(split["y_adapt"]), count)

        def shifted(images: np.ndarray, stream: int) -> np.ndarray:
            corrupted = corrupt_family(images, family, severity, 100 * k + stream)
            return quantize_images(corrupted, scale, zero_point)
        shares.append({"name": f"{family}-{severity}", "x": shifted(split["x_adapt"][mine], 1),
                       "y": split["y_adapt"][mine].astype(np.int64),
                       "x_test": shifted(split["x_test"], 2),
                       "y_test": split["y_test"].astype(np.int64)})
    return shares
