"""Images at any depth (issue 62): every Pillow mode `pack` and `infer --input PHOTO` can meet
is made into the same model input as its 8-bit equivalent, through the one decoding both
share (training/folders.py). Before, a 16-bit PNG became all 127 and a float TIFF all -128:
Pillow's convert("L") clips such values instead of scaling them."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import FIXTURES, assert_refused
from zocodegen.cli import main
from zocodegen.frontends import load_model
from zocodegen.training.folders import InputSpec, input_maker
from zocodegen.formats.image import read_image

GREY_MODEL = FIXTURES / "digits_cnn.tflite"  # 8x8x1 int8
RGB_MODEL = FIXTURES / "scale_model.tflite"  # 64x64x3 int8
RNG = np.random.default_rng(62)
#: 8-bit pixels of a 10x12 image (not the models' sizes: crop and resize run too)
RGB = RNG.integers(0, 256, (10, 12, 3), dtype=np.uint8)
GREY = RNG.integers(0, 256, (10, 12), dtype=np.uint8)
ALPHA = RNG.integers(0, 256, (10, 12), dtype=np.uint8)


YCC = RNG.integers(64, 192, (10, 12, 3), dtype=np.uint8)  # in the RGB gamut


def _jfif_rgb(ycc: np.ndarray) -> np.ndarray:
    """JFIF's YCbCr -> RGB (ITU-T T.871 section 7), in float, rounded."""
    y, cb, cr = (ycc[..., k].astype(np.float64) for k in range(3))
    rgb = np.stack([y + 1.402 * (cr - 128), y - 0.344136 * (cb - 128) - 0.714136 * (cr - 128),
                    y + 1.772 * (cb - 128)], axis=-1)
    return np.clip(np.floor(rgb + 0.5), 0, 255).astype(np.uint8)


def _paletted(alpha: bool) -> tuple[Image.Image, Image.Image]:
    """A P (or PA) image and its 8-bit RGB equivalent, looked up from its palette by numpy."""
    image = Image.fromarray(RGB).quantize(64)
    palette = np.array(image.getpalette()[:3 * 256], np.uint8).reshape(-1, 3)
    equivalent = Image.fromarray(palette[np.asarray(image)])
    if alpha:
        image = image.convert("PA")
        image.putalpha(Image.fromarray(ALPHA))
    return image, equivalent


def _cases() -> dict[str, tuple[Image.Image, Image.Image, str, int]]:
    """mode -> (an image of that mode, its 8-bit L or RGB equivalent made without Pillow's
    conversion of that mode, the file format keeping the mode, LSBs of rounding allowed)."""
    rgba = np.dstack([RGB, ALPHA])
    cmyk = np.dstack([255 - RGB, np.zeros_like(GREY)])  # K = 0: C, M, Y are 255 - R, G, B
    cases = {
        "1": (Image.fromarray(GREY > 127), Image.fromarray(np.where(GREY > 127, 255, 0)
                                                           .astype(np.uint8)), "png", 0),
        "L": (Image.fromarray(GREY), Image.fromarray(GREY), "png", 0),
        "P": (*_paletted(False), "png", 0),
        "PA": (*_paletted(True), "tiff", 0),
        "RGB": (Image.fromarray(RGB), Image.fromarray(RGB), "png", 0),
        "RGBA": (Image.fromarray(rgba, "RGBA"), Image.fromarray(RGB), "png", 0),
        "LA": (Image.fromarray(np.dstack([GREY, ALPHA]), "LA"), Image.fromarray(GREY), "png",
               0),
        "CMYK": (Image.fromarray(cmyk, "CMYK"), Image.fromarray(RGB), "tiff", 0),
        # JPEG's YCbCr (JFIF's full-range BT.601): Pillow's fixed-point inverse rounds
        "YCbCr": (Image.fromarray(YCC, "YCbCr"), Image.fromarray(_jfif_rgb(YCC)), "tiff", 1),
        "I;16": (Image.fromarray(GREY.astype(np.uint16) * 257), Image.fromarray(GREY), "png",
                 0),
        "I;16B": (Image.frombytes("I;16B", (12, 10), (GREY.astype(">u2") * 257).tobytes()),
                  Image.fromarray(GREY), "tiff", 0),
        "I;16 <<8": (Image.fromarray(GREY.astype(np.uint16) << 8), Image.fromarray(GREY),
                     "png", 0),
        "I": (Image.fromarray(GREY.astype(np.int32) * 257), Image.fromarray(GREY), "tiff", 0),
        "F": (Image.fromarray(GREY.astype(np.float32) / 255), Image.fromarray(GREY), "tiff", 0),
    }
    return cases


CASES = _cases()


@pytest.mark.parametrize("model", [GREY_MODEL, RGB_MODEL], ids=["grey", "rgb"])
@pytest.mark.parametrize("mode", list(CASES))
def test_every_mode_is_preprocessed_as_its_8_bit_equivalent(mode, model, tmp_path):
    image, equivalent, fmt, tolerance = CASES[mode]
    path, reference = tmp_path / f"image.{fmt}", tmp_path / "equivalent.png"
    image.save(path)
    equivalent.save(reference)
    with Image.open(path) as opened:  # the file keeps the mode under test
        assert opened.mode == mode.split()[0], opened.mode
    make, _ = input_maker(InputSpec.of(load_model(model)))
    got, want = make(path).astype(np.int16), make(reference).astype(np.int16)
    assert np.abs(got - want).max() <= tolerance, (mode, np.abs(got - want).max())
    assert len(np.unique(got)) > 8  # not blank


def test_16_bit_png_packs_and_infers_as_its_8_bit_equivalent(tmp_path, capsys):
    """The issue's repro: `pack` of a folder of 16-bit PNGs, and `infer` on one of them."""
    for name, image in (("deep", Image.fromarray(GREY.astype(np.uint16) * 257)),
                        ("flat", Image.fromarray(GREY))):
        for c in range(2):
            (tmp_path / name / str(c)).mkdir(parents=True)
            image.save(tmp_path / name / str(c) / "a.png")
    images = {}
    for name in ("deep", "flat"):
        out = tmp_path / f"{name}.img"
        assert main(["pack", str(tmp_path / name), "-o", str(out), "--model", str(GREY_MODEL),
                     "--val-fraction", "0"]) == 0
        images[name] = read_image(out)[1]["x"]
    assert np.array_equal(images["deep"], images["flat"])
    assert len(np.unique(images["deep"])) > 8
    outputs = {}
    for name in ("deep", "flat"):
        assert main(["infer", str(GREY_MODEL), "--input", str(tmp_path / name / "0" / "a.png"),
                     "--output", str(tmp_path / f"{name}.npy")]) == 0
        outputs[name] = np.load(tmp_path / f"{name}.npy")
    assert np.array_equal(outputs["deep"], outputs["flat"])
    capsys.readouterr()


@pytest.mark.parametrize("what, image, words", [
    ("a float image beyond 0..1", Image.fromarray(GREY.astype(np.float32)),
     ("mode F", "read as 0..1")),
    ("a float image holding NaN", Image.fromarray(np.full((10, 12), np.nan, np.float32)),
     ("mode F", "nan")),
    ("a 32-bit image beyond 16 bits", Image.fromarray(GREY.astype(np.int32) << 16),
     ("mode I", "0..65535")),
    ("an L*a*b* image", Image.fromarray(RGB).convert("LAB"), ("mode LAB", "save it as RGB"))])
def test_images_out_of_range_are_refused_in_one_line(what, image, words, tmp_path, capsys):
    (tmp_path / "data" / "0").mkdir(parents=True)
    image.save(tmp_path / "data" / "0" / "a.tiff")
    code = main(["pack", str(tmp_path / "data"), "-o", str(tmp_path / "o.img"), "--model",
                 str(GREY_MODEL)])
    assert_refused(code, capsys.readouterr().err, ("a.tiff", *words))
    assert not (tmp_path / "o.img").exists()
