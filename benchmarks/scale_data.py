"""The images of the paper-scale benchmark task (docs/scale.md): MNIST-M-style digits.

The paper adapts an ImageNet-pre-trained MCUNet (128x128 input) to CIFAR-10-C. Neither
CIFAR-10 nor a pre-trained MCUNet can be downloaded here, so this module builds an offline
task of the same shape from what installed packages ship:

* the 1797 8x8 handwritten digit **glyphs** of scikit-learn (``load_digits``), drawn as
  smooth strokes (cubic-spline upsampling of the 8x8 grid, a soft threshold) at a random
  size, position and small rotation;
* three natural colour **photos**: scikit-learn's ``china.jpg`` and ``flower.jpg``
  (``load_sample_images``) and matplotlib's ``grace_hopper.jpg`` (its ``sample_data``);
* Ganin & Lempitsky's MNIST-M blend (2015): each output pixel is the absolute difference
  ``|background - mask * colour|`` of a random photo crop and the digit mask times a random
  stroke colour, so the digit is the photo's local inversion: no constant foreground or
  background colour the model could key on.

Splits never share a glyph: the glyphs are divided (stratified by class) into pretrain (50 %),
adapt (25 %) and test (25 %) sets, and each photo is cut into a 3x4 grid of tiles of which
8 serve the pretrain backgrounds, 2 the adapt and 2 the test backgrounds. Pretraining renders
every pretrain glyph :data:`PRETRAIN_VARIANTS` times; the adapt and test splits are
:data:`ADAPT_COUNT` and :data:`TEST_COUNT` renders of their glyphs (the paper's 1000 adapt
images). Everything is fixed by :data:`RENDER_SEED`: the geometry of image k of a split is drawn
before rasterization, so the 64x64 and the 128x128 renders show the same scene.

Images are float32 NHWC RGB in [0, 1]; the models take that range (:func:`quantize` maps it to
their int8 input). Only numpy, scipy, Pillow, scikit-learn and matplotlib are used, so the
TensorFlow fixture script and the project's venv render the same arrays.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from zocodegen.datasets import stratified_split  # noqa: E402  (pure numpy)

#: The only seed of the rendering: glyph split, tile split and every image's geometry.
RENDER_SEED = 0
#: Output resolutions: the 64x64 model and the paper's 128x128.
SIZES = (64, 128)
#: Class-stratified shares of the 1797 glyphs for pretrain and adapt; test gets the rest.
GLYPH_FRACTIONS = (0.5, 0.25)
#: Renders per pretrain glyph (898 glyphs -> 17,960 pretraining images).
PRETRAIN_VARIANTS = 20
#: Images of the adapt split (the paper's 1000 training images) and of the test split.
ADAPT_COUNT = 1000
TEST_COUNT = 1000
#: Each photo is cut into TILE_ROWS x TILE_COLS tiles; per photo the first entries of a seeded
#: permutation go to pretrain, adapt and test backgrounds in these numbers.
TILE_ROWS, TILE_COLS = 3, 4
TILES_PER_SPLIT = {"pretrain": 8, "adapt": 2, "test": 2}
SPLITS = ("pretrain", "adapt", "test")
#: Digit box side as a fraction of the image side, and the rotation bound (degrees).
DIGIT_SIZE = (0.4, 0.75)
MAX_ROTATION = 20.0
#: Background crop side as a fraction of the tile's shorter side.
CROP_SIZE = (0.5, 1.0)
#: Soft threshold of the upsampled glyph (values / 16): below LO transparent, above HI full.
MASK_LO, MASK_HI = 0.45, 0.65
#: Range of every channel of the random stroke colour.
COLOUR = (0.25, 1.0)
# Stream ids of numpy SeedSequence([RENDER_SEED, stream]).
_GLYPH_STREAM, _TILE_STREAM = 1, 2
_PARAM_STREAM = {"pretrain": 10, "adapt": 11, "test": 12}
_PAD = 3  # zero border around a glyph so the cubic spline ends in background


@lru_cache(maxsize=1)
def glyphs() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits: (1797, 8, 8) float64 in 0..16 and int64 labels."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    return digits.images.astype(np.float64), digits.target.astype(np.int64)


@lru_cache(maxsize=1)
def glyph_split() -> dict[str, np.ndarray]:
    """Disjoint glyph indices per split (class-stratified, seeded, each part shuffled)."""
    _, labels = glyphs()
    rng = np.random.default_rng(np.random.SeedSequence([RENDER_SEED, _GLYPH_STREAM]))
    parts = stratified_split(labels, GLYPH_FRACTIONS, rng)
    return dict(zip(SPLITS, parts))


def _photo_paths() -> list[Path]:
    """The three photos, found inside the installed packages (no download)."""
    import matplotlib
    import sklearn.datasets
    images = Path(sklearn.datasets.__file__).parent / "images"
    mpl = Path(matplotlib.get_data_path()) / "sample_data"
    return [images / "china.jpg", images / "flower.jpg", mpl / "grace_hopper.jpg"]


@lru_cache(maxsize=1)
def photos() -> tuple[np.ndarray, ...]:
    """The photos as uint8 RGB arrays (H, W, 3)."""
    from PIL import Image
    out = []
    for path in _photo_paths():
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing (it ships with scikit-learn or "
                                    "matplotlib; reinstall the package)")
        with Image.open(path) as im:
            out.append(np.asarray(im.convert("RGB")))
    return tuple(out)


@lru_cache(maxsize=1)
def tiles() -> dict[str, list[tuple[int, int, int, int, int]]]:
    """Per split, its background tiles as (photo, top, left, height, width)."""
    rng = np.random.default_rng(np.random.SeedSequence([RENDER_SEED, _TILE_STREAM]))
    out: dict[str, list[tuple[int, int, int, int, int]]] = {s: [] for s in SPLITS}
    for p, photo in enumerate(photos()):
        h, w = photo.shape[0] // TILE_ROWS, photo.shape[1] // TILE_COLS
        order = rng.permutation(TILE_ROWS * TILE_COLS)
        start = 0
        for split in SPLITS:
            for t in order[start:start + TILES_PER_SPLIT[split]]:
                out[split].append((p, int(t // TILE_COLS) * h, int(t % TILE_COLS) * w, h, w))
            start += TILES_PER_SPLIT[split]
    return out


def split_count(split: str) -> int:
    """Number of images of ``split``."""
    if split == "pretrain":
        return PRETRAIN_VARIANTS * len(glyph_split()["pretrain"])
    return {"adapt": ADAPT_COUNT, "test": TEST_COUNT}[split]


@dataclass(frozen=True)
class SceneParams:
    """The geometry and colours of every image of a split, independent of the resolution
    (lengths are fractions of the image side)."""
    glyph: np.ndarray      # index into glyphs()
    digit: np.ndarray      # digit box side
    angle: np.ndarray      # radians, counter-clockwise on screen
    centre: np.ndarray     # (N, 2) box centre (row, col)
    colour: np.ndarray     # (N, 3) stroke colour
    tile: np.ndarray       # index into tiles()[split]
    crop: np.ndarray       # (N, 3) crop side / tile's shorter side, top and left offsets in [0, 1)
    flip: np.ndarray       # mirror the background left-right
    channels: np.ndarray   # (N, 3) permutation of the background's RGB channels


@lru_cache(maxsize=len(SPLITS))
def scene_params(split: str) -> SceneParams:
    """Every image's scene of ``split``, drawn once from its own seeded stream."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {SPLITS}")
    rng = np.random.default_rng(np.random.SeedSequence([RENDER_SEED, _PARAM_STREAM[split]]))
    n = split_count(split)
    pool = glyph_split()[split]
    glyph = rng.permutation(np.resize(pool, n))  # every glyph as evenly as n allows
    digit = rng.uniform(*DIGIT_SIZE, n)
    angle = np.deg2rad(rng.uniform(-MAX_ROTATION, MAX_ROTATION, n))
    # the box's centre keeps its unrotated square inside the image
    centre = 0.5 + (rng.random((n, 2)) - 0.5) * (1.0 - digit)[:, None]
    colour = rng.uniform(*COLOUR, (n, 3))
    tile = rng.integers(0, len(tiles()[split]), n)
    crop = np.column_stack([rng.uniform(*CROP_SIZE, n), rng.random(n), rng.random(n)])
    flip = rng.random(n) < 0.5
    channels = np.array([rng.permutation(3) for _ in range(n)])
    return SceneParams(glyph, digit, angle, centre, colour, tile, crop, flip, channels)


def _digit_mask(glyph: np.ndarray, size: int, digit: float, angle: float,
                centre: np.ndarray) -> np.ndarray:
    """The digit's coverage (size, size) in [0, 1]: the 8x8 glyph as a cubic spline sampled
    through the inverse of the box's similarity transform, then soft-thresholded."""
    from scipy.ndimage import map_coordinates
    padded = np.pad(glyph, _PAD)
    pix = (np.arange(size) + 0.5) / size                       # pixel centres in [0, 1]
    rows, cols = np.meshgrid(pix - centre[0], pix - centre[1], indexing="ij")
    cos, sin = np.cos(angle), np.sin(angle)
    # rotate the offset back by -angle (screen rows point down), then to glyph pixels
    u = (cos * rows + sin * cols) / digit
    v = (-sin * rows + cos * cols) / digit
    coords = np.stack([u * 8 + 4 - 0.5 + _PAD, v * 8 + 4 - 0.5 + _PAD])
    value = map_coordinates(padded, coords, order=3, mode="nearest") / 16.0
    return np.clip((value - MASK_LO) / (MASK_HI - MASK_LO), 0.0, 1.0)


def _background(split: str, k: int, size: int, p: SceneParams) -> np.ndarray:
    """The crop of image ``k``: a square of its tile, resampled to (size, size, 3) in [0, 1]."""
    from PIL import Image
    photo_id, top, left, th, tw = tiles()[split][int(p.tile[k])]
    side = p.crop[k, 0] * min(th, tw)
    y0 = top + p.crop[k, 1] * (th - side)
    x0 = left + p.crop[k, 2] * (tw - side)
    im = _pil_photo(photo_id)
    crop = im.resize((size, size), Image.BILINEAR, box=(x0, y0, x0 + side, y0 + side))
    out = np.asarray(crop, dtype=np.float32) / 255.0
    if p.flip[k]:
        out = out[:, ::-1]
    return out[:, :, p.channels[k]]


@lru_cache(maxsize=3)
def _pil_photo(photo_id: int):
    from PIL import Image
    return Image.fromarray(photos()[photo_id])


def render(split: str, size: int, indices: np.ndarray | None = None
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Images ``indices`` (default: all) of ``split`` at ``size`` x ``size``: float32
    (N, size, size, 3) in [0, 1], int64 labels and int64 glyph indices."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size}")
    p = scene_params(split)
    idx = np.arange(len(p.glyph)) if indices is None else np.asarray(indices, dtype=np.int64)
    images, labels = glyphs()
    x = np.empty((len(idx), size, size, 3), np.float32)
    for row, k in enumerate(idx):
        mask = _digit_mask(images[p.glyph[k]], size, p.digit[k], p.angle[k], p.centre[k])
        bg = _background(split, int(k), size, p)
        x[row] = np.abs(bg - mask[:, :, None] * p.colour[k].astype(np.float32))
    return x, labels[p.glyph[idx]].copy(), p.glyph[idx].copy()


def quantize(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """Float images -> int8 with TFLite's float -> int8 rule (a QUANTIZE op's result):
    ``clamp(round(x / scale) + zero_point, -128, 127)``, division in float32, rounding half
    away from zero. With the fixtures' scale 1/255 and zero point -128 a pixel value p/255
    becomes p - 128."""
    scaled = (np.asarray(x, np.float32) / np.float32(scale)).astype(np.float64)
    rounded = np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)
    return np.clip(rounded.astype(np.int64) + int(zero_point), -128, 127).astype(np.int8)
