"""Issue 62, one way in (docs/contract.md, "What a command reads"): every file a command reads
is opened by zocodegen.files' one opener, which takes regular files only and at most a size per
kind. Each row is a defect of the issue's sweep: a FIFO where a file is expected (it blocked
forever), a link to /dev/zero (read to MemoryError), a card status record whose identity is
garbage (exit 1), class names that do not fit the model (printed as right), an image packed
for another model, a field trainer given to `train`. Each must end in exit 2 and one line
naming the path (or the option to use), within a timeout: the commands run as subprocesses,
so a hang fails its row instead of the suite."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, REPO, assert_refused
from zocodegen.cli import main
from zocodegen.formats import field
from zocodegen.formats.image import SECTOR_BYTES, read_header
from zocodegen.training.labels import sidecar_path

MODEL = FIXTURES / "digits_cnn.tflite"
TIMEOUT = 60  # seconds; each refusal takes about one (the interpreter's start)


def _zocodegen(args: list, cwd: Path) -> subprocess.CompletedProcess:
    """The command line in a process of its own; a hang (a blocked open or read) fails."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    try:
        return subprocess.run([sys.executable, "-m", "zocodegen", *map(str, args)], cwd=cwd,
                              env=env, capture_output=True, text=True, timeout=TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"zocodegen {' '.join(map(str, args))} hung (killed after {TIMEOUT} s)")


def _png(path: Path) -> Path:
    from PIL import Image
    Image.fromarray((np.arange(64).reshape(8, 8) * 4).astype(np.uint8)).save(path)
    return path


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> dict[str, Path]:
    """The digits model, its data packed with --model (room for a field run), a guarded
    simulate run of it with best.bin, an export of it with its labels sidecar, a photo, and a
    field-trainer project (`build --data-source sdcard`, generated, not compiled)."""
    root = tmp_path_factory.mktemp("inputs")
    model = root / "m.tflite"
    shutil.copy(MODEL, model)
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, size=(60, 8, 8, 1)).astype(np.int8)
    np.savez(root / "d.npz", x=x[:30], y=rng.integers(0, 10, 30), x_val=x[30:50],
             y_val=rng.integers(0, 10, 20), x_test=x[50:], y_test=rng.integers(0, 10, 10))
    image = root / "t.img"
    assert main(["pack", str(root / "d.npz"), "--model", str(model), "-o", str(image)]) == 0
    run = root / "run"
    assert main(["simulate", str(model), "--data", str(image), "-o", str(run), "--steps", "4",
                 "--queries", "2", "--lr", "0.01", "--guard-every", "2"]) == 0
    assert (run / "best.bin").is_file()
    assert main(["export", str(model), str(run / "checkpoint.bin"), "-o",
                 str(root / "tuned.tflite")]) == 0
    assert sidecar_path(root / "tuned.tflite").is_file()
    field_fw = root / "field_fw"
    assert main(["build", str(model), "--target", "native", "--train", "full", "--no-guard",
                 "--lr", "0.01", "--data-source", "sdcard", "-o", str(field_fw)]) == 0
    return {"ROOT": root, "M": model, "D": root / "d.npz", "IMG": image, "RUN": run,
            "TUNED": root / "tuned.tflite", "PHOTO": _png(root / "a.png"),
            "FIELD_FW": field_fw}


def _fifo(path: Path) -> Path:
    if os.path.lexists(path):
        os.unlink(path)
    os.mkfifo(path)
    return path


def _link_to_zero(path: Path) -> Path:
    if os.path.lexists(path):
        os.unlink(path)
    path.symlink_to("/dev/zero")
    return path


def _too_large(path: Path, size: int) -> Path:
    """A sparse regular file of ``size`` bytes (nothing is written to disk)."""
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def _and(args: list, *prepared: object) -> list:
    """``args``, once ``prepared`` (the files the row puts in place) is made."""
    return args


def _run_copy(ws: dict, tmp: Path) -> Path:
    run = tmp / "run"
    shutil.copytree(ws["RUN"], run)
    return run


def _tuned_copy(ws: dict, tmp: Path) -> Path:
    model = tmp / "tuned.tflite"
    shutil.copy(ws["TUNED"], model)
    shutil.copy(sidecar_path(ws["TUNED"]), sidecar_path(model))
    return model


def _sidecar(ws: dict, tmp: Path, names: object) -> Path:
    model = _tuned_copy(ws, tmp)
    record = json.loads(sidecar_path(model).read_text())
    sidecar_path(model).write_text(json.dumps({**record, "class_names": names}))
    return model


def _garbage_identity_card(ws: dict, tmp: Path) -> Path:
    """A copy of the image whose status record verifies (magic, version, CRC) but whose
    identity (the firmware's HELLO) is garbage."""
    card = tmp / "card.img"
    shutil.copy(ws["IMG"], card)
    layout = read_header(card)
    area = layout.checkpoint_sectors
    sector = bytearray(SECTOR_BYTES)
    sector[:8] = field.MAGIC
    for name, value in (("version", field.VERSION), ("sequence", 1), ("state", 1),
                        ("steps", 10), ("every", 2)):
        offset, fmt = field.STATUS_FIELDS[name]
        struct.pack_into("<" + fmt, sector, offset, value)
    sector[field.OFF_IDENTITY:field.OFF_IDENTITY + field.IDENTITY_BYTES] = (
        b"garbage!" * 16)[:field.IDENTITY_BYTES]
    struct.pack_into("<I", sector, field.OFF_STATUS_CRC, zlib.crc32(bytes(sector[:508])))
    with open(card, "r+b") as f:
        f.seek((layout.checkpoint_lba + area - field.STATUS_SECTORS) * SECTOR_BYTES)
        f.write(bytes(sector))
    return card


def _resume(ws: dict, tmp: Path) -> list:
    return ["simulate", ws["M"], "--data", ws["IMG"], "-o", _run_copy(ws, tmp), "--steps",
            "4", "--queries", "2", "--lr", "0.01", "--guard-every", "2", "--resume"]


# Each row: (name, make(ws, tmp) -> arguments, words the one line must hold).
Row = tuple[str, Callable[[dict, Path], list], tuple[str, ...]]
ROWS: list[Row] = [
    ("card write FIFO x.img",
     lambda ws, t: ["card", "write", _fifo(t / "in.img"), t / "x.img"], ("in.img", "FIFO")),
    ("card read FIFO -o R",
     lambda ws, t: ["card", "read", _fifo(t / "card.img"), "-o", t / "R"],
     ("card.img", "FIFO")),
    ("card read /dev/zero link -o R",
     lambda ws, t: ["card", "read", _link_to_zero(t / "card.img"), "-o", t / "R"],
     ("card.img", "character device")),
    ("build -o DIR whose manifest.json is a FIFO",
     lambda ws, t: _and(["build", ws["M"], "--target", "native", "-o", t / "fw"],
                        (t / "fw").mkdir(), _fifo(t / "fw" / "manifest.json")),
     ("manifest.json", "FIFO")),
    ("build -o DIR whose manifest.json links to /dev/zero",
     lambda ws, t: _and(["build", ws["M"], "--target", "native", "-o", t / "fw"],
                        (t / "fw").mkdir(), _link_to_zero(t / "fw" / "manifest.json")),
     ("manifest.json", "character device")),
    ("build -o DIR whose manifest.json is larger than any manifest",
     lambda ws, t: _and(["build", ws["M"], "--target", "native", "-o", t / "fw"],
                        (t / "fw").mkdir(), _too_large(t / "fw" / "manifest.json", 1 << 34)),
     ("manifest.json", "larger than")),
    ("infer MODEL whose MODEL.labels.json is a FIFO",
     lambda ws, t: _and(["infer", _tuned_copy(ws, t), "--input", ws["PHOTO"]],
                        _fifo(sidecar_path(t / "tuned.tflite"))),
     ("tuned.tflite.labels.json", "FIFO")),
    ("infer MODEL whose MODEL.labels.json links to /dev/zero",
     lambda ws, t: _and(["infer", _tuned_copy(ws, t), "--input", ws["PHOTO"]],
                        _link_to_zero(sidecar_path(t / "tuned.tflite"))),
     ("tuned.tflite.labels.json", "character device")),
    ("infer --data FIFO",
     lambda ws, t: ["infer", ws["M"], "--input", ws["PHOTO"], "--data", _fifo(t / "d.img")],
     ("d.img", "FIFO")),
    ("export MODEL FIFO",
     lambda ws, t: ["export", ws["M"], _fifo(t / "ck.bin"), "-o", t / "out.tflite"],
     ("ck.bin", "FIFO")),
    ("export with RUN/run.json a FIFO",
     lambda ws, t: _and(["export", ws["M"], _run_copy(ws, t) / "checkpoint.bin", "-o",
                         t / "out.tflite"], _fifo(t / "run" / "run.json")),
     ("run.json", "FIFO")),
    ("export with the data path run.json records a FIFO",
     lambda ws, t: _and(["export", ws["M"], _run_copy(ws, t) / "checkpoint.bin", "-o",
                         t / "out.tflite"], _record_data(t / "run", _fifo(t / "data.img"))),
     ("data.img", "FIFO")),
    ("simulate --resume with RUN/best.bin a FIFO",
     lambda ws, t: _and(_resume(ws, t), _fifo(t / "run" / "best.bin")),
     ("best.bin", "FIFO")),
    ("simulate --resume with RUN/run.json a FIFO",
     lambda ws, t: _and(_resume(ws, t), _fifo(t / "run" / "run.json")),
     ("run.json", "FIFO")),
    ("card read of a status record with a garbage identity",
     lambda ws, t: ["card", "read", _garbage_identity_card(ws, t), "-o", t / "R"],
     ("card.img", "status record", "identity")),
    ("labels sidecar with more names than the model has classes",
     lambda ws, t: ["infer", _sidecar(ws, t, [f"c{k}" for k in range(50)]), "--input",
                    ws["PHOTO"]],
     ("tuned.tflite.labels.json", "50 class names", "10")),
    ("labels sidecar whose names are not strings",
     lambda ws, t: ["infer", _sidecar(ws, t, list(range(10))), "--input", ws["PHOTO"]],
     ("tuned.tflite.labels.json", "class_names")),
    ("labels sidecar whose names are one string",
     lambda ws, t: ["infer", _sidecar(ws, t, "abcdefghij"), "--input", ws["PHOTO"]],
     ("tuned.tflite.labels.json", "class_names")),
    ("infer --data an image packed for another model",
     lambda ws, t: ["infer", ws["M"], "--input", ws["PHOTO"], "--data", _other_image(ws, t)],
     ("other.img", "another model")),
    ("train --native a field trainer",
     lambda ws, t: ["train", "--native", ws["FIELD_FW"], "--image", ws["IMG"], "-o", t / "R"],
     ("field_fw", "--data-source sdcard", "card write")),
]


def _record_data(run: Path, data: Path) -> Path:
    record = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**record, "data": str(data)}))
    return data


def _other_image(ws: dict, tmp: Path) -> Path:
    """The digits data packed for another model (the header's model sha256 differs)."""
    other = tmp / "other.tflite"
    other.write_bytes(ws["M"].read_bytes() + b"\0")  # the same graph, another file
    image = tmp / "other.img"
    assert main(["pack", str(ws["D"]), "--model", str(other), "-o", str(image)]) == 0
    return image


@pytest.mark.parametrize("name, make, words", ROWS, ids=[r[0] for r in ROWS])
def test_a_bad_input_is_refused_in_one_line(ws, tmp_path, name, make, words):
    args = make(ws, tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    done = _zocodegen(args, cwd=tmp_path)
    assert_refused(done.returncode, done.stderr, words)
    assert done.stdout == "", done.stdout  # refused before anything is printed
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written

