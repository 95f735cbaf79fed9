"""A damaged data image is never trained on (docs/image.md "What a reader checks"):

* the host checks every record's CRC-32 and every split's before `train` serves an image or
  `simulate` reads one, and refuses a flipped bit with one line naming the split and record,
  exit status 2;
* an image of format version 1 (records without a CRC) is refused with "re-run `zocodegen
  pack`";
* when a record goes bad after the host's check (what an SD card can do), the firmware's
  reader refuses it by itself, and `train` names the split and record the device reported.
"""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES
from zocodegen.cli import main
from zocodegen.frontends import load_model
from zocodegen.formats import image as zi
from zocodegen.host import trainer
from zocodegen.host.blocks import ImageBlocks
from zocodegen.formats.image import read_header
from zocodegen.training import checkpoint

MODEL = FIXTURES / "digits_cnn.tflite"
TRAIN = ["--steps", "4", "--queries", "4", "--batch", "2", "--lr", "0.01", "--no-guard"]


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    """Digits-shaped records (64 input bytes, label at 64, CRC at 68): 80 in DATA.npz (20 set
    aside as val, two per class), 6 test; packed for the model."""
    graph = load_model(MODEL)
    shape = tuple(graph.tensor(graph.inputs[0]).shape[1:])
    rng = np.random.default_rng(8)
    root = tmp_path_factory.mktemp("data")
    np.savez(root / "d.npz", x=rng.integers(-128, 128, (80,) + shape).astype(np.int8),
             y=np.arange(80) % 10, x_test=rng.integers(-128, 128, (6,) + shape).astype(np.int8),
             y_test=np.arange(6))
    assert main(["pack", str(root / "d.npz"), "-o", str(root / "d.img"), "--model",
                 str(MODEL), "--val-fraction", "0.25"]) == 0
    assert read_header(root / "d.img").count("val") == 20
    return root / "d.img"


def _flip(src: Path, dst: Path, split: str, index: int, at: int) -> Path:
    """A copy of ``src`` with one bit of byte ``at`` of a record flipped."""
    raw = bytearray(src.read_bytes())
    raw[read_header(src).record_lba(split, index) * 512 + at] ^= 0x20
    dst.write_bytes(bytes(raw))
    return dst


def _refused(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("zocodegen: error:"), err
    return err


def _simulate(data: Path, run: Path) -> list[str]:
    return ["simulate", str(MODEL), "--data", str(data), "-o", str(run), *TRAIN]


def _train(data: Path, run: Path) -> list[str]:
    """`train` at a port nobody listens on: the image is checked before any connection."""
    return ["train", "--port", "socket://127.0.0.1:9", "--image", str(data), "-o", str(run)]


@pytest.mark.parametrize("split, index, at", [("train", 3, 10), ("train", 29, 64),
                                              ("val", 2, 71), ("test", 5, 0)],
                         ids=["train-input", "train-label", "val-crc", "test-input"])
def test_host_refuses_a_flipped_bit(image, tmp_path, capsys, split, index, at):
    bad = _flip(image, tmp_path / "bad.img", split, index, at)
    for argv in (_simulate(bad, tmp_path / "run"), _train(bad, tmp_path / "run")):
        err = _refused(capsys, argv)
        assert f"{bad}: {split} record {index} is corrupted" in err, err
        assert "pack the image again" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_host_refuses_a_version_1_image(image, tmp_path, capsys):
    raw = bytearray(image.read_bytes())
    struct.pack_into("<I", raw, zi.OFF_VERSION, 1)
    struct.pack_into("<I", raw, zi.OFF_HEADER_CRC, zi.header_crc32(raw[:512]))
    old = tmp_path / "old.img"
    old.write_bytes(bytes(raw))
    for argv in (_simulate(old, tmp_path / "run"), _train(old, tmp_path / "run")):
        err = _refused(capsys, argv)
        assert "image format version 1 is older" in err and "re-run `zocodegen pack`" in err
    assert not (tmp_path / "run").exists()


# ---- the device's own check --------------------------------------------------------------

class DamagedCard(ImageBlocks):
    """The image as a failing card returns it: the file passes the host's check, then one bit
    of an input byte of the record at sector ``lba`` is flipped in every read of it."""

    def __init__(self, path: Path, lba: int):
        super().__init__(path)
        self.damaged = lba

    def read(self, lba: int, count: int) -> tuple[int, bytes]:
        status, data = super().read(lba, count)
        if status == 0 and lba <= self.damaged < lba + count:
            data = bytearray(data)
            data[(self.damaged - lba) * 512 + 5] ^= 0x01
        return status, bytes(data)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fw") / "fw"
    assert main(["build", str(MODEL), "--target", "native", "--train", "full", *TRAIN,
                 "-o", str(out)]) == 0
    return out


@pytest.mark.parametrize("split, index, when, saved", [
    ("train", 3, "training", 1),                  # T: step 1 reads train records 2 and 3
    ("test", 4, "measuring test accuracy", None),  # A: before training, every test record
])
def test_device_refuses_a_record_that_goes_bad(image, project, tmp_path, capsys, monkeypatch,
                                               split, index, when, saved):
    """The device stops at the bad record; what was checkpointed before it stays."""
    layout = read_header(image)
    assert layout.sectors_per_record == 1
    sector = layout.record_lba(split, index)
    monkeypatch.setattr(trainer, "ImageBlocks", lambda path: DamagedCard(path, sector))
    err = _refused(capsys, ["train", "--native", str(project), "--image", str(image), "-o",
                            str(tmp_path / "run")])
    assert (f"{when} failed on the device: {split} record {index} of {image} does not match "
            "its CRC-32 (ZO_IMAGE_ERR_RECORD_CRC)") in err, err
    ckpt = tmp_path / "run" / "checkpoint.bin"
    assert (checkpoint.load(ckpt).step if ckpt.exists() else None) == saved
