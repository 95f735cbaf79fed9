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

Everything here is pure numpy (scikit-learn only loads the images), deterministic given the
seed, and independent of TensorFlow, so the fixture generator (TF venv), the test-suite and
the training experiments see the same arrays.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

#: Largest pixel value of the digits images; the model's float input is ``pixel / PIXEL_MAX``.
PIXEL_MAX = 16.0
#: Fractions of every class that go to pretrain and adapt; the rest is the test split.
SPLIT_FRACTIONS = (0.5, 0.3)
#: Default domain shift: rotation magnitude range (degrees) and noise std (pixel units).
MIN_ANGLE = 15.0
MAX_ANGLE = 25.0
NOISE_STD = 2.0

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
    images, labels = _load_raw()
    ss = np.random.SeedSequence([seed, _SPLIT_STREAM])
    pre, ada, tst = stratified_split(labels, SPLIT_FRACTIONS, np.random.default_rng(ss))
    adapt_seed = int(np.random.SeedSequence([seed, _ADAPT_STREAM]).generate_state(1)[0])
    test_seed = int(np.random.SeedSequence([seed, _TEST_STREAM]).generate_state(1)[0])
    return {
        "x_pretrain": images[pre], "y_pretrain": labels[pre],
        "x_adapt": corrupt(images[ada], adapt_seed), "y_adapt": labels[ada],
        "x_test": corrupt(images[tst], test_seed), "y_test": labels[tst],
        "x_clean_test": images[tst], "y_clean_test": labels[tst].copy(),
    }


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


def digits_npz(path: str | Path, model_input_quant: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """Write the experiment's ``DATA.npz`` (DESIGN.md section 8) and return its arrays.

    ``x``/``y``: the corrupted adapt split (what the device trains on), ``x_test``/``y_test``:
    the corrupted test split (accuracy is reported on it), ``x_clean_test``/``y_clean_test``:
    the clean test split (to show how much of the clean accuracy training recovers). Images
    are int8 (N, 8, 8, 1) in the model's input quantization ``model_input_quant`` (an IR
    ``Quantization`` or a ``(scale, zero_point)`` pair); labels are int64.
    """
    scale, zero_point = _scale_zero_point(model_input_quant)
    split = load_digits_split(seed)
    arrays = {
        "x": quantize_images(split["x_adapt"], scale, zero_point),
        "y": split["y_adapt"].astype(np.int64),
        "x_test": quantize_images(split["x_test"], scale, zero_point),
        "y_test": split["y_test"].astype(np.int64),
        "x_clean_test": quantize_images(split["x_clean_test"], scale, zero_point),
        "y_clean_test": split["y_clean_test"].astype(np.int64),
    }
    path = Path(path)
    with path.open("wb") as fh:
        np.savez(fh, **arrays)
    return arrays


__all__ = ["PIXEL_MAX", "corrupt", "digits_npz", "load_digits_split", "quantize_images",
           "rotate", "stratified_split", "to_unit"]
