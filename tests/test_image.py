"""The SD-card-style data image: zocodegen/formats/image.py (packer, reader) against the C reader of
templates/train/ (zo_image.c; zo_crc32.c from templates/link/) behind the block device
backends that only this test builds (generated firmware reads its image over the host link).

Python: round trips, the exact header offsets, every DataError. C: tests/data/
image_reader_main.c reads every record of packed images and answers over the platform.h byte
stream; built natively (blockdev_stdio.c) with -Werror, once more with ASan/UBSan, and for
QEMU mps2-an500 (blockdev_semihosting.c) with the board files of qemu/board/. Both readers
refuse a record with a flipped bit by its own CRC-32, and version-1 images.
"""
from __future__ import annotations

import os
import re
import selectors
import shutil
import struct
import subprocess
import tempfile
import time
import zlib
from pathlib import Path

import jinja2
import numpy as np
import pytest

from zocodegen.errors import DataError, UserError
from zocodegen.formats import image as zi
from zocodegen.formats import status
from zocodegen.formats.image import ImageLayout, pack_image, read_header, read_image, verify_image
from zocodegen.host.trainer import RECORD_PROBLEMS
from zocodegen.qemu import runner

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "templates" / "train"
LINK = REPO / "templates" / "link"  # zo_crc32.c / .h: the host link's frames use it too
DRIVER_C = REPO / "tests" / "data" / "image_reader_main.c"
PLATFORM_H = REPO / "templates" / "project" / "platform.h"
NATIVE_PLATFORM = REPO / "templates" / "platform" / "native" / "platform_native.c"
BOARD = runner.BOARD_DIR
DOC = REPO / "docs" / "image.md"

TRAIN_SOURCES = ("zo_blockdev.h", "zo_bytes.h", "zo_crc32.h", "zo_crc32.c", "zo_image.h",
                 "zo_image.c")
#: The file backends (templates/field: the field trainer's cards on native and QEMU).
TEST_BLOCKDEVS = ("blockdev_stdio.c", "blockdev_semihosting.c")
READER_SOURCES = ("zo_image.c", "zo_crc32.c")
WARN = ["-std=c99", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-Wpedantic",
        "-Wconversion", "-Wshadow", "-ffp-contract=off"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer"]
TIMEOUT = 30.0


def template_path(name: str) -> Path:
    """Where one of TRAIN_SOURCES lives: templates/train/ or templates/link/."""
    return TRAIN / name if (TRAIN / name).exists() else LINK / name


def c_constants(*names: str) -> dict[str, int]:
    """`#define NAME value` integer constants of templates/train headers."""
    out = {}
    for name in names:
        text = template_path(name).read_text()
        for key, value in re.findall(r"#define\s+(ZO_\w+)\s+\(?(-?(?:0x)?[0-9A-Fa-f]+)u?\)?",
                                     text):
            out[key] = int(value, 0)
    return out


C = {**c_constants("zo_image.h", "zo_blockdev.h"),
     **{s.name: s.code for s in status.CODES.values()},
     **{sub.ok: 0 for sub in status.SUBSYSTEMS}}
SPLIT = {"train": 0, "val": 1, "test": 2}


# ---- Python: packing and reading -------------------------------------------------------

def sample_data(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, size=(13, 2, 255), dtype=np.int8)
    y = rng.integers(0, 10, size=13)
    xv = rng.integers(-128, 128, size=(4, 2, 255), dtype=np.int8)
    yv = rng.integers(0, 10, size=4).astype(np.uint8)
    xt = rng.integers(-128, 128, size=(6, 2, 255), dtype=np.int8)
    yt = rng.integers(0, 10, size=6).astype(np.int32)
    return dict(x=x, y=y, x_val=xv, y_val=yv, x_test=xt, y_test=yt)


def test_round_trip_and_exact_layout(tmp_path):
    data = sample_data()
    sha = bytes(range(32))
    path = tmp_path / "a.img"
    layout = pack_image(path, data["x"], data["y"], x_val=data["x_val"], y_val=data["y_val"],
                        x_test=data["x_test"], y_test=data["y_test"], num_classes=10,
                        input_scale=0.0078125, input_zero_point=-1, checkpoint_bytes=3000,
                        model_sha256=sha)
    # 510 input bytes + 4 label bytes + 4 CRC bytes = 518: two sectors per record, the label
    # across the boundary
    assert (layout.input_bytes, layout.record_bytes, layout.sectors_per_record) == (510, 518, 2)
    assert layout.splits == {"train": (1, 13), "val": (27, 4), "test": (35, 6)}
    assert (layout.checkpoint_lba, layout.checkpoint_sectors) == (47, 6)
    assert layout.image_sectors == 53 and path.stat().st_size == 53 * 512
    assert layout.record_lba("val", 3) == 27 + 3 * 2
    with pytest.raises(IndexError):
        layout.record_lba("val", 4)

    raw = path.read_bytes()
    h = raw[:512]
    assert h[0:8] == b"ZOIMG01\0"
    u32 = lambda off: struct.unpack_from("<I", h, off)[0]   # noqa: E731
    assert u32(8) == 2 and u32(16) == 512 and u32(20) == 1 and u32(24) == 53
    assert u32(28) == 2 and [u32(32 + 4 * i) for i in range(4)] == [2, 255, 0, 0]
    assert u32(48) == 1 and u32(52) == 510 and u32(56) == 510 and u32(60) == 518
    assert u32(64) == 2 and u32(68) == 10
    assert struct.unpack_from("<f", h, 72)[0] == 0.0078125
    assert struct.unpack_from("<i", h, 76)[0] == -1
    assert [u32(80 + 16 * k) for k in range(3)] == [1, 27, 35]
    assert [u32(84 + 16 * k) for k in range(3)] == [13, 4, 6]
    assert u32(128) == 47 and u32(132) == 6 and h[144:176] == sha
    assert u32(136) == 514                                 # the record's CRC-32
    assert h[176:] == bytes(336) and u32(92) == 0 and u32(140) == 0
    zeroed = h[:12] + bytes(4) + h[16:]
    assert u32(12) == zlib.crc32(zeroed)
    # records: input bytes, int32 LE label, CRC-32 of both, zero padding; the split CRC over
    # input + label (over their CRCs too it would be the same for any records of this size)
    body = b""
    for i in range(13):
        rec = raw[(1 + 2 * i) * 512:(3 + 2 * i) * 512]
        assert rec[:510] == data["x"][i].tobytes()
        assert struct.unpack_from("<i", rec, 510)[0] == data["y"][i]
        assert struct.unpack_from("<I", rec, 514)[0] == zlib.crc32(rec[:514])
        assert rec[518:] == bytes(1024 - 518)
        body += rec[:514]
    assert u32(88) == zlib.crc32(body) == layout.split_crc32["train"]
    assert raw[47 * 512:] == bytes(6 * 512)

    back, arrays = read_image(path)
    assert back == layout and read_header(path) == layout
    assert sorted(arrays) == ["x", "x_test", "x_val", "y", "y_test", "y_val"]
    for key, value in data.items():
        assert arrays[key].dtype == (np.int8 if key.startswith("x") else np.int32)
        np.testing.assert_array_equal(arrays[key], value)
    assert back.input_scale == 0.0078125 and back.input_zero_point == -1


@pytest.mark.parametrize("dtype, shape", [(np.uint8, (7,)), (np.float32, (3, 50)),
                                          (np.int8, (1, 2, 16, 16))],
                         ids=["uint8-rank1", "float32-rank2", "int8-rank4"])
def test_round_trip_dtypes(tmp_path, dtype, shape):
    rng = np.random.default_rng(3)
    if dtype == np.float32:
        x = rng.standard_normal((9,) + shape).astype(np.float32)
        x[0, 0, 0] = np.float32(-0.0)
    else:
        x = rng.integers(0, 256, size=(9,) + shape).astype(dtype)
    y = np.array([0, 1, 2, 3, 4, 0, 1, 2, 5])
    layout = pack_image(tmp_path / "d.img", x, y, x_test=x[:2], y_test=y[:2])
    assert layout.num_classes == 6                     # largest label + 1
    assert layout.input_shape == shape and layout.dtype == np.dtype(dtype).name
    assert layout.input_scale is None and layout.input_zero_point is None
    assert layout.splits["val"] == (0, 0) and layout.checkpoint_sectors == 0
    assert layout.model_sha256 == bytes(32)
    back, arrays = read_image(tmp_path / "d.img")
    assert back == layout and sorted(arrays) == ["x", "x_test", "y", "y_test"]
    assert arrays["x"].dtype == dtype
    assert arrays["x"].tobytes() == x.tobytes()         # bit-exact, -0.0 included
    np.testing.assert_array_equal(arrays["y"], y)


def test_big_endian_float_input_is_stored_little_endian(tmp_path):
    x = np.arange(6, dtype=">f4").reshape(2, 3)
    pack_image(tmp_path / "be.img", x, np.array([0, 1]))
    raw = (tmp_path / "be.img").read_bytes()
    assert raw[512:524] == np.arange(3, dtype="<f4").tobytes()
    _, arrays = read_image(tmp_path / "be.img")
    np.testing.assert_array_equal(arrays["x"], x)


def test_model_hash_as_hex_and_layout_from_header(tmp_path):
    sha = "ab" * 32
    layout = pack_image(tmp_path / "h.img", np.zeros((1, 4), np.int8), np.array([0]),
                        model_sha256=sha, num_classes=3)
    assert layout.model_sha256 == bytes.fromhex(sha)
    assert ImageLayout.from_header(layout.header_sector()) == read_header(tmp_path / "h.img")
    held = pack_image(tmp_path / "v.img", np.zeros((1, 4), np.int8), np.array([0]),
                      x_val=np.zeros((5, 4), np.int8), y_val=np.arange(5), held_out=2)
    assert read_header(tmp_path / "v.img") == held and (held.held_out, held.checked_val) == (2, 3)
    assert struct.unpack_from("<I", held.header_sector(), zi.OFF_HELD_OUT)[0] == 2


def _err(tmp_path, **kwargs):
    kw = dict(x=np.zeros((4, 3), np.int8), y=np.array([0, 1, 2, 1]))
    kw.update(kwargs)
    x, y = kw.pop("x"), kw.pop("y")
    path = tmp_path / "bad.img"
    with pytest.raises(DataError) as info:
        pack_image(path, x, y, **kw)
    message = str(info.value)
    assert "\n" not in message and message
    assert not path.exists(), "nothing is written for bad data"
    return message


@pytest.mark.parametrize("kwargs, match", [
    (dict(y=np.array([0, 1, 2])), "x has 4 samples but y has 3"),
    (dict(x_val=np.zeros((2, 3), np.int8), y_val=np.array([0])), "x_val has 2 samples"),
    (dict(x=np.zeros((0, 3), np.int8), y=np.zeros(0, np.int64)), "train split .* is empty"),
    (dict(x_test=np.zeros((0, 3), np.int8), y_test=np.zeros(0, int)), "test split .* empty"),
    (dict(y=np.array([0, 1, -1, 1])), r"labels in \[-1, 1\], outside \[0, num_classes\)"),
    (dict(num_classes=2), r"labels in \[0, 2\], outside \[0, 2\)"),
    (dict(x_val=np.zeros((1, 3), np.int8), y_val=np.array([5]), num_classes=5), "y_val"),
    (dict(num_classes=0), "num_classes must be at least 1"),
    (dict(x=np.zeros((4, 3), np.float64)), "x has dtype float64; it must be int8, uint8"),
    (dict(x=np.zeros((4, 3), np.int16)), "x has dtype int16"),
    (dict(y=np.array([0.0, 1.0, 2.0, 1.0])), "y has dtype float64; labels must be integers"),
    (dict(y=np.array([True, False, True, True])), "labels must be integers"),
    (dict(x=np.zeros(4, np.int8)), r"x has shape \(4,\); it must be \(N, \*input shape\)"),
    (dict(x=np.zeros((4, 1, 1, 1, 1, 1), np.int8)), "input rank of 1..4"),
    (dict(x=np.zeros((4, 0), np.int8)), "input dims must be non-zero"),
    (dict(y=np.zeros((4, 1), int)), "labels must be a vector"),
    (dict(x_val=np.zeros((2, 4), np.int8), y_val=np.array([0, 1])),
     r"x_val has samples of shape \(4,\) int8, but x has \(3,\) int8"),
    (dict(x_test=np.zeros((2, 3), np.uint8), y_test=np.array([0, 1])),
     r"x_test has samples of shape \(3,\) uint8, but x has \(3,\) int8"),
    (dict(x_val=np.zeros((2, 3), np.int8)), "x_val is given without y_val"),
    (dict(y_test=np.array([0, 1])), "y_test is given without x_test"),
    (dict(input_scale=0.5), "give both or neither"),
    (dict(input_scale=-1.0, input_zero_point=0), "positive float32"),
    (dict(input_scale=0.5, input_zero_point=2**31), "does not fit in int32"),
    (dict(checkpoint_bytes=-1), "checkpoint_bytes must be >= 0"),
    (dict(model_sha256=b"short"), "model_sha256 must be 32 bytes"),
    (dict(model_sha256="xyz"), "model_sha256 must be 32 bytes"),
    (dict(held_out=1), r"held_out must be in \[0, 0\]"),
    (dict(x_val=np.zeros((2, 3), np.int8), y_val=np.array([0, 1]), held_out=3),
     r"held_out must be in \[0, 2\]"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_pack_rejects_bad_data(tmp_path, kwargs, match):
    assert re.search(match, _err(tmp_path, **kwargs))


def test_pack_unwritable_path_is_a_user_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(UserError, match="cannot write .*file") as info:
        pack_image(tmp_path / "file" / "a.img", np.zeros((1, 2), np.int8), np.array([0]))
    assert not isinstance(info.value, DataError)
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_pack_makes_a_missing_folder_as_every_command_does(tmp_path):
    pack_image(tmp_path / "new" / "a.img", np.zeros((1, 2), np.int8), np.array([0]))
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["a.img"]


def test_pack_requires_the_train_split(tmp_path):
    with pytest.raises(DataError, match="x is given without y"):
        pack_image(tmp_path / "n.img", np.zeros((1, 2), np.int8), None)


@pytest.fixture
def small_image(tmp_path) -> tuple[Path, ImageLayout]:
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, size=(20, 7), dtype=np.uint8)
    y = rng.integers(0, 4, size=20)
    path = tmp_path / "small.img"
    return path, pack_image(path, x, y, x_test=x[:3], y_test=y[:3], checkpoint_bytes=512)


def _patch(path: Path, offset: int, data: bytes, fix_crc: bool) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset:offset + len(data)] = data
    if fix_crc:
        struct.pack_into("<I", raw, 12, zi.header_crc32(raw[:512]))
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("offset, data, fix_crc, match", [
    (0, b"ZOIMG02\0", False, r"not a zocodegen data image \(bad magic"),
    (300, b"\x01", False, "header CRC mismatch"),
    (12, b"\0\0\0\0", False, "header CRC mismatch"),
    (8, struct.pack("<I", 1), True, r"version 1 is older .*re-run `zocodegen pack`"),
    (8, struct.pack("<I", 3), True, "version 3 is newer than this zocodegen's 2"),
    (16, struct.pack("<I", 4096), True, "sector size 4096"),
    (28, struct.pack("<I", 5), True, "input rank 5"),
    (36, struct.pack("<I", 3), True, "input dims"),
    (48, struct.pack("<I", 9), True, "dtype code 9"),
    (52, struct.pack("<I", 8), True, "input_bytes 8"),
    (60, struct.pack("<I", 12), True, "record layout"),
    (136, struct.pack("<I", 8), True, "record layout"),
    (64, struct.pack("<I", 2), True, "sectors_per_record 2"),
    (68, struct.pack("<I", 0), True, "num_classes is 0"),
    (84, struct.pack("<I", 100), True, r"train \(sectors 1\.\.100\) lies outside"),
    (128, struct.pack("<I", 0), True, "checkpoint area"),
    (108, struct.pack("<I", 1), True, "1 held-out records, the val split has 0"),
], ids=["magic", "crc-body", "crc-field", "old-version", "new-version", "sector-size", "rank",
        "dims", "dtype", "input-bytes", "record-bytes", "record-crc-offset",
        "sectors-per-record", "classes", "split-range", "checkpoint-range", "held-out"])
@pytest.mark.parametrize("check", [read_image, verify_image])
def test_read_rejects_bad_headers(small_image, offset, data, fix_crc, match, check):
    path, _ = small_image
    _patch(path, offset, data, fix_crc)
    with pytest.raises(DataError, match=match) as info:
        check(path)
    assert "\n" not in str(info.value)


def _with_record_crc(path: Path, layout: ImageLayout, split: str, index: int) -> None:
    """Make the record's CRC-32 match its (changed) input and label again."""
    start = layout.record_lba(split, index) * 512
    raw = path.read_bytes()
    crc = zlib.crc32(raw[start:start + layout.record_crc_offset])
    _patch(path, start + layout.record_crc_offset, struct.pack("<I", crc), False)


@pytest.mark.parametrize("check", [read_image, verify_image])
def test_read_rejects_truncated_and_corrupted_records(small_image, tmp_path, check):
    path, layout = small_image
    good = path.read_bytes()
    path.write_bytes(good[:-1])
    with pytest.raises(DataError, match=r"truncated: .* the header says 12800 \(25 sectors\)"):
        check(path)
    path.write_bytes(good[:100])
    with pytest.raises(DataError, match="truncated: 100 bytes"):
        check(path)
    path.write_bytes(b"")
    with pytest.raises(DataError, match="truncated: 0 bytes"):
        check(path)
    # one flipped bit anywhere in a record's input, label or CRC: that record is named
    for split, index, at in [("train", 5, 3), ("train", 19, 7), ("test", 2, 9), ("train", 0, 14)]:
        path.write_bytes(good)
        offset = layout.record_lba(split, index) * 512 + at
        _patch(path, offset, bytes([good[offset] ^ 0x10]), fix_crc=False)
        with pytest.raises(DataError, match=rf"{path}: {split} record {index} is corrupted "
                                            r"\(stored CRC-32 0x[0-9a-f]{8}, computed .*\): "
                                            "pack the image again$"):
            check(path)
    # a bad label under a matching record CRC; records that are each fine but swapped
    path.write_bytes(good)
    _patch(path, layout.record_lba("train", 2) * 512 + 7, struct.pack("<i", 4), False)
    _with_record_crc(path, layout, "train", 2)
    with pytest.raises(DataError, match=r"train record 2 has label 4, outside \[0, 4\)"):
        check(path)
    raw = bytearray(good)
    first, second = (layout.record_lba("test", k) * 512 for k in (0, 1))
    raw[first:first + 512], raw[second:second + 512] = good[second:second + 512], \
        good[first:first + 512]
    path.write_bytes(bytes(raw))
    with pytest.raises(DataError, match="CRC mismatch in the test split"):
        check(path)
    path.write_bytes(good)
    _patch(path, 512 * layout.checkpoint_lba, b"checkpoint", False)  # not covered by CRCs
    check(path)
    path.write_bytes(good)
    _patch(path, layout.record_lba("test", 0) * 512 + 20, b"\xff", False)    # padding
    check(path)
    with pytest.raises(DataError, match="cannot read image"):
        check(tmp_path / "missing.img")


# ---- format table: Python, C and docs/image.md agree -----------------------------------

def test_offsets_agree_between_python_c_and_docs():
    c_src = (TRAIN / "zo_image.c").read_text()
    c_offsets = {k: int(v) for k, v in re.findall(r"#define ZO_OFF_(\w+) (\d+)u", c_src)}
    py_offsets = {k[4:]: v for k, v in vars(zi).items()
                  if k.startswith("OFF_") and isinstance(v, int)}
    assert c_offsets == py_offsets
    doc = DOC.read_text()
    doc_offsets: dict[str, int] = {}
    for off, name in re.findall(r"^\|\s*(\d+)\s*\|\s*\d+\s*\|[^|]*\|\s*`(\w+)", doc, re.M):
        doc_offsets.setdefault(name.upper(), int(off))      # splits[0].first_lba -> SPLITS
    for name, off in py_offsets.items():
        assert doc_offsets.get(name) == off, (name, off, doc_offsets.get(name))
    assert C["ZO_SECTOR_BYTES"] == zi.SECTOR_BYTES
    assert C["ZO_IMAGE_VERSION"] == zi.FORMAT_VERSION == 2
    assert (C["ZO_IMAGE_LABEL_BYTES"], C["ZO_IMAGE_RECORD_CRC_BYTES"]) == \
        (zi.LABEL_BYTES, zi.RECORD_CRC_BYTES)
    # the DONE statuses the host turns into "<split> record <index> ..." (host/trainer.py)
    assert set(RECORD_PROBLEMS) == {C["ZO_IMAGE_ERR_RECORD_CRC"], C["ZO_IMAGE_ERR_LABEL"]}
    assert {C["ZO_IMAGE_DTYPE_INT8"], C["ZO_IMAGE_DTYPE_UINT8"],
            C["ZO_IMAGE_DTYPE_FLOAT32"]} == {zi.DTYPE_CODES[n] for n in zi.DTYPE_CODES}
    assert C["ZO_IMAGE_DTYPE_FLOAT32"] == zi.DTYPE_CODES["float32"]
    assert [C["ZO_SPLIT_TRAIN"], C["ZO_SPLIT_VAL"], C["ZO_SPLIT_TEST"]] == [0, 1, 2]


def test_train_templates_are_plain_c():
    """They are rendered by Jinja2 with the rest of the project: rendering changes nothing."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([str(TRAIN), str(LINK)]),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    for name in TRAIN_SOURCES:
        assert env.get_template(name).render() == template_path(name).read_text(), name


# ---- the C reader ----------------------------------------------------------------------

def render_train(dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([str(TRAIN), str(LINK)]),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    for name in TRAIN_SOURCES:
        (dst / name).write_text(env.get_template(name).render())
    (dst / "zo_status.h").write_text(status.c_header())
    for name in TEST_BLOCKDEVS:
        shutil.copy(REPO / "templates" / "field" / name, dst / name)
    return dst


def build_native(root: Path, name: str, extra: list[str]) -> Path:
    src = render_train(root / "train")
    exe = root / name
    cmd = (["cc"] + WARN + extra + ["-I", str(src), "-I", str(PLATFORM_H.parent),
                                    str(DRIVER_C), str(NATIVE_PLATFORM),
                                    str(src / "blockdev_stdio.c")]
           + [str(src / s) for s in READER_SOURCES] + ["-o", str(exe)])
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return exe


QEMU_MAKEFILE = """\
include src/platform/qemu/platform.mk
SRCS := src/main.c src/train/zo_image.c src/train/zo_crc32.c \\
        src/train/blockdev_semihosting.c $(QEMU_SRCS)
build/reader.elf: $(SRCS) $(QEMU_LDSCRIPT)
\t@mkdir -p $(dir $@)
\t$(QEMU_CC) $(QEMU_CFLAGS) $(EXTRA_CFLAGS) $(QEMU_LDFLAGS) $(SRCS) $(QEMU_LDLIBS) -o $@
"""


def build_qemu(root: Path) -> Path:
    """The generated-project layout of test_qemu_board.py, plus src/train/ and its headers."""
    qdir = root / "src" / "platform" / "qemu"
    qdir.mkdir(parents=True)
    inc = root / "include"
    inc.mkdir()
    shutil.copy(PLATFORM_H, inc / "platform.h")
    src = render_train(root / "src" / "train")
    for header in src.glob("*.h"):
        shutil.move(str(header), inc / header.name)
    for name in ("startup_mps2.c", "platform_mps2.c", "platform.mk"):
        shutil.copy(BOARD / name, qdir / name)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(BOARD)),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    (qdir / "mps2_an500.ld").write_text(env.get_template("mps2_an500.ld.j2").render(
        flash_bytes=1048576, ram_bytes=262144, stack_bytes=8192))
    shutil.copy(DRIVER_C, root / "src" / "main.c")
    (root / "Makefile").write_text(QEMU_MAKEFILE)
    done = subprocess.run(["make", "-s", "-C", str(root),
                           "EXTRA_CFLAGS=-Werror -Wpedantic -Wconversion -Wshadow"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return root / "build" / "reader.elf"


class NativeSession:
    """The native driver as a subprocess, with deadline-bounded exact reads."""

    def __init__(self, exe: Path):
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, bufsize=0)
        self._buf = bytearray()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.proc.stdout, selectors.EVENT_READ)

    def _stderr_text(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

    def write(self, data: bytes) -> None:
        self.proc.stdin.write(data)

    def read(self, n: int) -> bytes:
        deadline = time.monotonic() + TIMEOUT
        while len(self._buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"driver timed out ({len(self._buf)} of {n} bytes)")
            if not self._sel.select(left):
                continue
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                self.proc.wait()
                raise AssertionError(f"driver exited ({self.proc.returncode}) after "
                                     f"{len(self._buf)} of {n} bytes: {self._stderr_text()}")
            self._buf += chunk
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def wait(self) -> int:
        code = self.proc.wait(TIMEOUT)
        assert self._stderr_text() == "", self._stderr_text()   # sanitizer reports land here
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._sel.close()
        self.proc.stdin.close()
        self.proc.stdout.close()
        self._stderr.close()


class Reader:
    """The driver's protocol (tests/data/image_reader_main.c)."""

    FIELDS = 26

    def __init__(self, session):
        self.s = session
        assert self.s.read(4) == b"ZOIR"
        self.input_bytes = 0

    def _i32(self, n: int = 1) -> list[int]:
        return list(struct.unpack(f"<{n}i", self.s.read(4 * n)))

    def _expect(self, cmd: bytes) -> None:
        got = self.s.read(1)
        assert got == cmd, (got, cmd)

    def attach(self, path: Path) -> tuple[int, int, list[int], bytes]:
        name = str(path).encode()
        self.s.write(b"A" + struct.pack("<I", len(name)) + name)
        self._expect(b"A")
        attach_rc, open_rc = self._i32(2)
        fields = list(struct.unpack(f"<{self.FIELDS}I", self.s.read(4 * self.FIELDS)))
        sha = self.s.read(32)
        self.input_bytes = fields[9]
        return attach_rc, open_rc, fields, sha

    def sample(self, split: int, index: int) -> tuple[int, int, int, bytes]:
        self.s.write(b"S" + struct.pack("<BI", split, index))
        self._expect(b"S")
        rc, label, bd_rc = self._i32(3)
        return rc, label, bd_rc, self.s.read(self.input_bytes)

    def label_only(self, split: int, index: int) -> tuple[int, int]:
        self.s.write(b"L" + struct.pack("<BI", split, index))
        self._expect(b"L")
        rc, label = self._i32(2)
        return rc, label

    def dump(self, counts: list[int]) -> list[tuple[int, int, bytes]]:
        self.s.write(b"D")
        self._expect(b"D")
        out = []
        for _ in range(sum(counts)):
            rc, label = self._i32(2)
            out.append((rc, label, self.s.read(self.input_bytes)))
        return out

    def last_read(self) -> tuple[int, int, int]:
        """read_rc, read_split, read_index: what the last zo_image_read_sample recorded."""
        self.s.write(b"F")
        self._expect(b"F")
        rc, split = self._i32(2)
        return rc, split, struct.unpack("<I", self.s.read(4))[0]

    def verify(self, split: int) -> int:
        self.s.write(b"V" + bytes([split]))
        self._expect(b"V")
        return self._i32()[0]

    def expect(self, input_bytes: int, classes: int) -> tuple[int, int]:
        self.s.write(b"E" + struct.pack("<II", input_bytes, classes))
        self._expect(b"E")
        a, b = self._i32(2)
        return a, b

    def crc(self, init: int, data: bytes) -> int:
        self.s.write(b"C" + struct.pack("<II", init, len(data)) + data)
        self._expect(b"C")
        return struct.unpack("<I", self.s.read(4))[0]

    def write_sectors(self, lba: int, data: bytes) -> int:
        assert len(data) % 512 == 0
        self.s.write(b"W" + struct.pack("<II", lba, len(data) // 512) + data)
        self._expect(b"W")
        return self._i32()[0]

    def read_sectors(self, lba: int, count: int) -> tuple[int, bytes]:
        self.s.write(b"R" + struct.pack("<II", lba, count))
        self._expect(b"R")
        rc = self._i32()[0]
        return rc, self.s.read(512 * count)

    def quit(self) -> None:
        self.s.write(b"Q")
        assert self.s.wait() == 0


needs_arm = pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None or shutil.which("make") is None
    or runner.find_qemu() is None,
    reason="arm-none-eabi-gcc, make or qemu-system-arm is missing (sudo apt-get install "
           "gcc-arm-none-eabi libnewlib-arm-none-eabi make qemu-system-arm)")
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no host C compiler (cc)")

BACKENDS = [pytest.param("native", marks=needs_cc),
            pytest.param("native-asan", marks=needs_cc),
            pytest.param("qemu", marks=needs_arm)]


@pytest.fixture(scope="module")
def executables(tmp_path_factory):
    cache: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in cache:
            root = tmp_path_factory.mktemp(kind)
            if kind == "native":
                cache[kind] = build_native(root, "reader", [])
            elif kind == "native-asan":
                cache[kind] = build_native(root, "reader-asan", SANITIZE)
            else:
                cache[kind] = build_qemu(root)
        return cache[kind]
    return get


@pytest.fixture
def reader(request, executables):
    kind = request.param
    exe = executables(kind)
    session = (runner.QemuSession(exe, timeout=TIMEOUT) if kind == "qemu"
               else NativeSession(exe))
    try:
        yield Reader(session)
    finally:
        session.close()


def packed_images(root: Path) -> list[tuple[Path, ImageLayout, dict]]:
    """Images whose records exercise every way a record meets the sector boundaries."""
    rng = np.random.default_rng(11)
    specs = [  # (x, classes, extra)
        (sample_data(1), dict(num_classes=10, input_scale=0.5, input_zero_point=-3,
                              checkpoint_bytes=3000, model_sha256=bytes(range(1, 33)))),
        (dict(x=rng.standard_normal((9, 3, 50)).astype(np.float32), y=np.arange(9) % 7,
              x_test=rng.standard_normal((2, 3, 50)).astype(np.float32), y_test=[6, 0]), {}),
        (dict(x=rng.integers(0, 256, (20, 7)).astype(np.uint8), y=np.arange(20) % 3), {}),
        (dict(x=rng.integers(-128, 128, (5, 1, 2, 16, 16)).astype(np.int8),
              y=np.array([1, 0, 1, 1, 0]), x_val=np.full((1, 1, 2, 16, 16), -128, np.int8),
              y_val=[1]), dict(checkpoint_bytes=1)),
        (dict(x=rng.integers(-128, 128, (4, 1500)).astype(np.int8), y=np.array([0, 2, 1, 2])),
         dict(num_classes=1000)),
        # the record's CRC-32 across a sector boundary; a record that fills its sector exactly
        (dict(x=rng.integers(0, 256, (3, 506)).astype(np.uint8), y=np.array([1, 0, 1]),
              x_test=rng.integers(0, 256, (2, 506)).astype(np.uint8), y_test=[0, 0]), {}),
        (dict(x=rng.integers(-128, 128, (2, 504)).astype(np.int8), y=np.array([3, 2])), {}),
    ]
    out = []
    for k, (arrays, extra) in enumerate(specs):
        path = root / f"img{k}.img"
        arrays = {key: np.asarray(v) for key, v in arrays.items()}
        x, y = arrays.pop("x"), arrays.pop("y")
        layout = pack_image(path, x, y, **arrays, **extra)
        out.append((path, layout, dict(x=x, y=y, **arrays)))
    return out


def expected_fields(layout: ImageLayout) -> list[int]:
    dims = list(layout.input_shape) + [0] * (4 - len(layout.input_shape))
    scale = layout.input_scale if layout.input_scale is not None else 0.0
    fields = [zi.FORMAT_VERSION, 1 if layout.input_scale is not None else 0,
              layout.image_sectors,
              len(layout.input_shape), *dims, zi.DTYPE_CODES[layout.dtype], layout.input_bytes,
              layout.record_bytes, layout.sectors_per_record, layout.num_classes,
              struct.unpack("<I", struct.pack("<f", scale))[0],
              (layout.input_zero_point or 0) & 0xFFFFFFFF]
    for name in zi.SPLITS:
        first, count = layout.splits[name]
        fields += [first, count, layout.split_crc32[name]]
    return fields + [layout.checkpoint_lba, layout.checkpoint_sectors]


@pytest.mark.parametrize("reader", BACKENDS, indirect=True)
def test_c_reader_reads_every_record(reader, tmp_path):
    # before any image is open
    assert reader.sample(0, 0)[0] == C["ZO_IMAGE_ERR_NOT_OPEN"]
    for path, layout, arrays in packed_images(tmp_path):
        attach_rc, open_rc, fields, sha = reader.attach(path)
        assert (attach_rc, open_rc) == (0, 0), path.name
        assert fields == expected_fields(layout) and sha == layout.model_sha256
        counts = [layout.count(name) for name in zi.SPLITS]
        records = reader.dump(counts)
        _, back = read_image(path)
        i = 0
        for name in zi.SPLITS:
            xkey, ykey = zi.SPLIT_KEYS[name]
            if xkey not in arrays:
                continue
            x = np.asarray(arrays[xkey])
            x = x.astype(x.dtype.newbyteorder("<"))
            for k in range(layout.count(name)):
                rc, label, data = records[i]
                i += 1
                assert rc == 0 and label == arrays[ykey][k] == back[ykey][k], (name, k)
                assert data == x[k].tobytes() == back[xkey][k].tobytes(), (path.name, name, k)
            assert reader.verify(SPLIT[name]) == 0
        # one record directly, the label alone, and the errors for bad split / index
        rc, label, bd_rc, data = reader.sample(0, layout.count("train") - 1)
        assert (rc, label, bd_rc) == (0, arrays["y"][-1], 0)
        assert data == np.asarray(arrays["x"])[-1].tobytes()
        assert reader.label_only(0, 1) == (0, arrays["y"][1])
        assert reader.sample(3, 0)[0] == C["ZO_IMAGE_ERR_SPLIT"]
        assert reader.sample(0, layout.count("train"))[0] == C["ZO_IMAGE_ERR_INDEX"]
        assert reader.verify(7) == C["ZO_IMAGE_ERR_SPLIT"]
        assert reader.expect(layout.input_bytes, layout.num_classes) == (0, 0)
        assert reader.expect(layout.input_bytes + 1, layout.num_classes - 1) == \
            (C["ZO_IMAGE_ERR_INPUT_SIZE"], C["ZO_IMAGE_ERR_CLASSES"])
    reader.quit()


@pytest.mark.parametrize("reader", BACKENDS, indirect=True)
def test_c_crc32_matches_zlib(reader):
    rng = np.random.default_rng(2)
    assert reader.crc(0, b"123456789") == 0xCBF43926 == zlib.crc32(b"123456789")
    for n in (0, 1, 3, 511, 512, 513, 4096):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        init = int(rng.integers(0, 2**32))
        assert reader.crc(0, data) == zlib.crc32(data)
        assert reader.crc(init, data) == zlib.crc32(data, init), n
    # chaining: crc(crc(a), b) == crc(a + b)
    a, b = b"zeroth-order", bytes(range(256))
    assert reader.crc(reader.crc(0, a), b) == zlib.crc32(a + b)
    reader.quit()


@pytest.mark.parametrize("reader", BACKENDS, indirect=True)
def test_c_reader_rejects_corrupted_images(reader, small_image, tmp_path):
    path, layout = small_image
    good = path.read_bytes()
    cases = [  # (offset, bytes, fix the header CRC, expected zo_image_open result)
        (0, b"X", False, "ZO_IMAGE_ERR_MAGIC"),
        (7, b"!", True, "ZO_IMAGE_ERR_MAGIC"),
        (300, b"\x01", False, "ZO_IMAGE_ERR_CRC"),
        (12, b"\x00", False, "ZO_IMAGE_ERR_CRC"),
        (24, struct.pack("<I", 3), False, "ZO_IMAGE_ERR_CRC"),
        (8, struct.pack("<I", 1), True, "ZO_IMAGE_ERR_VERSION"),     # pack it again
        (8, struct.pack("<I", 3), True, "ZO_IMAGE_ERR_VERSION"),
        (16, struct.pack("<I", 4096), True, "ZO_IMAGE_ERR_FORMAT"),
        (28, struct.pack("<I", 0), True, "ZO_IMAGE_ERR_FORMAT"),
        (36, struct.pack("<I", 1), True, "ZO_IMAGE_ERR_FORMAT"),
        (48, struct.pack("<I", 0), True, "ZO_IMAGE_ERR_FORMAT"),
        (52, struct.pack("<I", 8), True, "ZO_IMAGE_ERR_FORMAT"),
        (56, struct.pack("<I", 8), True, "ZO_IMAGE_ERR_FORMAT"),
        (60, struct.pack("<I", 12), True, "ZO_IMAGE_ERR_FORMAT"),
        (64, struct.pack("<I", 2), True, "ZO_IMAGE_ERR_FORMAT"),
        (136, struct.pack("<I", 7), True, "ZO_IMAGE_ERR_FORMAT"),   # record CRC offset
        (68, struct.pack("<I", 0), True, "ZO_IMAGE_ERR_FORMAT"),
        (84, struct.pack("<I", 0xFFFFFFFF), True, "ZO_IMAGE_ERR_FORMAT"),
        (112, struct.pack("<I", 0), True, "ZO_IMAGE_ERR_FORMAT"),    # test split at LBA 0
        (132, struct.pack("<I", 2), True, "ZO_IMAGE_ERR_FORMAT"),
        (108, struct.pack("<I", 1), True, "ZO_IMAGE_ERR_FORMAT"),    # held out of no val
    ]
    for k, (offset, data, fix_crc, expected) in enumerate(cases):
        bad = tmp_path / f"bad{k}.img"
        bad.write_bytes(good)
        _patch(bad, offset, data, fix_crc)
        attach_rc, open_rc, _, _ = reader.attach(bad)
        assert (attach_rc, open_rc) == (0, C[expected]), (offset, data, expected)
        assert reader.sample(0, 0)[0] == C["ZO_IMAGE_ERR_NOT_OPEN"]

    # shorter than one sector: the header read fails
    short = tmp_path / "short.img"
    short.write_bytes(good[:100])
    assert reader.attach(short)[:2] == (0, C["ZO_IMAGE_ERR_IO"])
    # missing file: attach fails and the previous file is detached
    assert reader.attach(tmp_path / "missing.img")[0] == C["ZO_BLOCKDEV_ERR_OPEN"]
    assert reader.read_sectors(0, 1)[0] == C["ZO_BLOCKDEV_ERR_NOT_ATTACHED"]

    # truncated inside the records: the header opens, the lost record fails with the
    # block device's range error, the others still read
    trunc = tmp_path / "trunc.img"
    last_train = layout.record_lba("train", layout.count("train") - 1)
    trunc.write_bytes(good[:last_train * 512])
    assert reader.attach(trunc)[:2] == (0, 0)
    assert reader.sample(0, 0)[0] == 0
    rc, _, bd_rc, _ = reader.sample(0, layout.count("train") - 1)
    assert (rc, bd_rc) == (C["ZO_IMAGE_ERR_IO"], C["ZO_BLOCKDEV_ERR_RANGE"])
    assert reader.verify(0) == C["ZO_IMAGE_ERR_IO"]

    # a label outside [0, num_classes) under a matching record CRC, and a changed input byte:
    # the record CRC refuses the second by itself, the split CRCs catch both
    bad = tmp_path / "label.img"
    bad.write_bytes(good)
    lba = layout.record_lba("train", 2)
    _patch(bad, lba * 512 + layout.input_bytes, struct.pack("<i", layout.num_classes), False)
    _with_record_crc(bad, layout, "train", 2)
    _patch(bad, layout.record_lba("test", 1) * 512, b"\xAA", False)
    assert reader.attach(bad)[:2] == (0, 0)
    rc, label, _, _ = reader.sample(0, 2)
    assert (rc, label) == (C["ZO_IMAGE_ERR_LABEL"], layout.num_classes)
    assert reader.label_only(0, 2) == (C["ZO_IMAGE_ERR_LABEL"], layout.num_classes)
    assert reader.last_read() == (C["ZO_IMAGE_ERR_LABEL"], 0, 2)
    assert reader.sample(2, 1)[:2] == (C["ZO_IMAGE_ERR_RECORD_CRC"], -1)   # label not written
    assert reader.last_read() == (C["ZO_IMAGE_ERR_RECORD_CRC"], 2, 1)
    assert reader.sample(2, 0)[0] == 0 and reader.last_read() == (0, 2, 0)
    assert reader.verify(0) == C["ZO_IMAGE_ERR_SPLIT_CRC"]
    assert reader.verify(2) == C["ZO_IMAGE_ERR_SPLIT_CRC"]
    assert reader.verify(1) == 0                                     # absent split: empty
    reader.quit()


@pytest.mark.parametrize("reader", BACKENDS, indirect=True)
def test_c_reader_refuses_a_flipped_bit_in_any_record(reader, tmp_path):
    """One flipped bit anywhere in a record's input (the sectors read straight into the
    caller's buffer and those through the scratch sector), label or CRC: zo_image_read_sample
    alone answers ZO_IMAGE_ERR_RECORD_CRC, with or without an input buffer, and records which
    record it was; the records around it and a flip in the padding read as before."""
    for path, layout, arrays in packed_images(tmp_path)[4:]:  # 1500, 506 and 504 input bytes
        good = path.read_bytes()
        ib, last = layout.input_bytes, layout.count("train") - 1
        # input start, a sector past the first (1500 only), input end, label, CRC
        for at in [0, ib - 1, ib, ib + 3, ib + 4, ib + 7] + ([600] if ib > 600 else []):
            for bit in (0, 7):
                offset = layout.record_lba("train", last) * 512 + at
                path.write_bytes(good[:offset] + bytes([good[offset] ^ (1 << bit)])
                                 + good[offset + 1:])
                assert reader.attach(path)[:2] == (0, 0)
                assert reader.sample(0, last)[0] == C["ZO_IMAGE_ERR_RECORD_CRC"], (ib, at)
                assert reader.last_read() == (C["ZO_IMAGE_ERR_RECORD_CRC"], 0, last)
                assert reader.label_only(0, last)[0] == C["ZO_IMAGE_ERR_RECORD_CRC"]
                rc, label, _, data = reader.sample(0, last - 1)
                assert (rc, label) == (0, arrays["y"][last - 1])
                assert data == arrays["x"][last - 1].tobytes()
        padding = layout.record_lba("train", last) * 512 + layout.record_bytes
        if padding % 512:
            path.write_bytes(good[:padding] + b"\xff" + good[padding + 1:])
            assert reader.attach(path)[:2] == (0, 0)
            assert reader.sample(0, last)[:2] == (0, arrays["y"][last])
    reader.quit()


@pytest.mark.parametrize("reader", BACKENDS, indirect=True)
def test_c_blockdev_writes_the_checkpoint_area(reader, tmp_path):
    path, layout, arrays = packed_images(tmp_path)[0]
    assert reader.attach(path)[:2] == (0, 0)
    rng = np.random.default_rng(4)
    payload = rng.integers(0, 256, 2 * 512, dtype=np.uint8).tobytes()
    lba = layout.checkpoint_lba + 1
    assert reader.write_sectors(lba, payload) == 0
    assert reader.read_sectors(lba, 2) == (0, payload)
    assert reader.read_sectors(lba, 0) == (0, b"")
    assert reader.write_sectors(lba, b"") == 0
    assert reader.read_sectors(layout.image_sectors, 1)[0] == C["ZO_BLOCKDEV_ERR_RANGE"]
    assert reader.read_sectors(layout.image_sectors - 1, 2)[0] == C["ZO_BLOCKDEV_ERR_RANGE"]
    assert reader.read_sectors(0, 1) == (0, path.read_bytes()[:512])
    # the host sees the write at once (the backends flush), and the data is untouched
    raw = path.read_bytes()
    assert raw[lba * 512:(lba + 2) * 512] == payload and len(raw) == layout.image_bytes
    _, back = read_image(path)
    np.testing.assert_array_equal(back["x"], arrays["x"])
    reader.quit()


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="root may write read-only files")
@pytest.mark.parametrize("reader", BACKENDS, indirect=True)
def test_c_blockdev_read_only_image(reader, small_image):
    path, _ = small_image
    path.chmod(0o444)
    try:
        assert reader.attach(path)[:2] == (0, 0)
        assert reader.sample(0, 0)[0] == 0
        assert reader.write_sectors(1, bytes(512)) == C["ZO_BLOCKDEV_ERR_READ_ONLY"]
        reader.quit()
    finally:
        path.chmod(0o644)
