"""The command-line contract (docs/contract.md), one table for every command: bad input or a
fault -> exit 2, one line on stderr naming the problem, no traceback, and nothing the command
was given or would overwrite is changed.

Each row: (name, arguments, expected words of the message, files that must stay unchanged).
Arguments and files name the workspace's files by key: M the digits model, D its DATA.npz, X an
input batch, RUN an existing simulate run, IMG a packed image, CK the run's checkpoint.
Rows run in-process (``main``), so the table of ~200 cases costs seconds.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, assert_refused, digits_workspace
from zocodegen.cli import main
from zocodegen.formats.image import pack_image
from zocodegen.training import checkpoint, runner
from zocodegen.training.metrics import read_metrics



@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("contract")
    x = digits_workspace(root)
    np.save(root / "x.npy", x[:2])
    np.save(root / "xf.npy", np.full((2, 8, 8, 1), np.nan, np.float32))
    np.savez(root / "dnan.npz", x=np.full((4, 8, 8, 1), np.inf, np.float32),
             y=np.zeros(4, np.int64))
    (root / "text.npz").write_text("not a zip")
    run = root / "run"
    assert main(["simulate", str(root / "m.tflite"), "--data", str(root / "d.npz"), "-o",
                 str(run), "--steps", "2", "--queries", "2", "--no-guard", "--lr", "0.01",
                 "--eval-every", "1"]) == 0
    (root / "garbage_run").mkdir()
    shutil.copy(run / "checkpoint.bin", root / "garbage_run" / "checkpoint.bin")
    (root / "garbage_run" / "run.json").write_text("{not json")
    (root / "orphan_run").mkdir()
    shutil.copy(run / "checkpoint.bin", root / "orphan_run" / "checkpoint.bin")
    (root / "file").write_text("a file, not a folder")
    (root / "nullcfg_run").mkdir()  # a run.json whose "config" is null
    (root / "nullcfg_run" / "run.json").write_text(json.dumps(
        {**json.loads((run / "run.json").read_text()), "config": None}))
    runs = _runs_and_devices(root, run)
    return {"M": root / "m.tflite", "D": root / "d.npz", "X": root / "x.npy",
            "XF": root / "xf.npy", "DNAN": root / "dnan.npz", "TEXT": root / "text.npz",
            "IMG": root / "d.img", "RUN": run, "CK": run / "checkpoint.bin",
            "BEST": run / "best.bin", "CSV": run / "metrics.csv", "JSON": run / "run.json",
            "GARBAGE": root / "garbage_run", "ORPHAN": root / "orphan_run",
            "FILE": root / "file", "ROOT": root, "NULLCFG": root / "nullcfg_run", **runs,
            **_labels_hooks_messages(root), **_second_sweep(root, run)}


def _runs_and_devices(root: Path, run: Path) -> dict[str, Path]:
    """Issue 47's inputs: a run whose checkpoint is past its --steps (copied from a longer
    run), a run whose metrics.csv is garbage, a build a fleet can train, an image packed for
    another model, and test data with a label outside the model's classes."""
    past = root / "past_run"
    assert main(["simulate", str(root / "m.tflite"), "--data", str(root / "d.npz"), "-o",
                 str(past), "--steps", "1", "--queries", "2", "--no-guard", "--lr", "0.01",
                 "--eval-every", "1"]) == 0
    shutil.copy(run / "checkpoint.bin", past / "checkpoint.bin")
    csv_run = root / "csv_run"
    shutil.copytree(run, csv_run)
    (csv_run / "metrics.csv").write_text("not,a metrics file\n\x01\x02\n")
    assert main(["build", str(root / "m.tflite"), "--target", "native", "--train", "full",
                 "--no-guard", "--lr", "0.01", "--steps", "100", "-o",
                 str(root / "fleet_fw")]) == 0
    data = np.load(root / "d.npz")
    pack_image(root / "other.img", data["x"], data["y"], num_classes=10,
               model_sha256=hashlib.sha256(b"another model").digest())
    np.savez(root / "bad_labels.npz", x=data["x"], y=data["y"], x_test=data["x"][:3],
             y_test=np.array([0, 99, 1]))
    return {"PAST": past, "PAST_CK": past / "checkpoint.bin", "CSV_RUN": csv_run,
            "CSV_RUN_LOG": csv_run / "metrics.csv", "FLEET_FW": root / "fleet_fw",
            "OTHER_IMG": root / "other.img", "BAD_LABELS": root / "bad_labels.npz"}


HOOKS = """import sys
import numpy as np
def text(path): return np.full((8, 8, 1), "a")
def thing(path): return object()
def bye(path): raise SystemExit("bye")
def exit0(path): sys.exit(0)
def complex_(path): return np.ones((8, 8, 1), complex)
def huge(path): return np.full((8, 8, 1), 1e300)
"""


def _png_header(width: int, height: int) -> bytes:
    """A PNG that claims width x height greyscale pixels: Pillow refuses it on opening."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0,
                                                                   0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def _labels_hooks_messages(root: Path) -> dict[str, Path]:
    """Issue 47's inputs for labels, hooks and messages: a folder of images, labels files
    with a label outside the model or of no kind, a class folder named -1, hooks that
    misbehave, a decompression bomb, a FIFO, a symlink loop, an ONNX model with a dangling
    input, and a guarded run whose best.bin is damaged."""
    import os
    import onnx
    from PIL import Image
    pics = root / "pics"
    rng = np.random.default_rng(1)
    for c in range(3):
        (pics / str(c)).mkdir(parents=True)
        for k in range(2):
            Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8), "L").save(
                pics / str(c) / f"{k}.png")
    rows = [f"{c}/{k}.png,{c}" for c in range(3) for k in range(2)]
    (root / "neg.csv").write_text("file,label\n" + "\n".join(rows[:-1] + ["2/1.png,-1"]))
    (root / "big.csv").write_text("\n".join(rows[:-1] + ["2/1.png,99"]))
    (root / "null.json").write_text(json.dumps({"0/0.png": 0, "1/0.png": None}))
    (root / "list.json").write_text(json.dumps({"0/0.png": [1, 2]}))
    shutil.copytree(pics, root / "negpics")
    (root / "negpics" / "2").rename(root / "negpics" / "-1")
    (root / "hk.py").write_text(HOOKS)
    (root / "bombs" / "0").mkdir(parents=True)
    (root / "bombs" / "0" / "bomb.png").write_bytes(_png_header(20000, 20000))
    os.mkfifo(root / "fifo.tflite")
    os.symlink(root / "loop_b.tflite", root / "loop_a.tflite")
    os.symlink(root / "loop_a.tflite", root / "loop_b.tflite")
    model = onnx.load(str(FIXTURES / "onnx_qdq_int8.onnx"))
    model.graph.node[1].input[0] = "dangling"
    onnx.save(model, str(root / "dangling.onnx"))
    x = rng.integers(-128, 128, size=(200, 8, 8, 1)).astype(np.int8)
    np.savez(root / "d200.npz", x=x, y=rng.integers(0, 10, 200))
    guarded = root / "guarded_run"
    assert main(["simulate", str(root / "m.tflite"), "--data", str(root / "d200.npz"), "-o",
                 str(guarded), "--steps", "2", "--queries", "2", "--lr", "0.01"]) == 0
    (guarded / "best.bin").write_bytes(b"damaged")
    return {"PICS": pics, "NEG_CSV": root / "neg.csv", "BIG_CSV": root / "big.csv",
            "NULL_JSON": root / "null.json", "LIST_JSON": root / "list.json",
            "NEGPICS": root / "negpics", "HOOKS": root / "hk.py", "BOMBS": root / "bombs",
            "FIFO": root / "fifo.tflite", "LOOP": root / "loop_a.tflite",
            "DANGLING": root / "dangling.onnx", "D200": root / "d200.npz", "GUARDED": guarded}


def _second_sweep(root: Path, run: Path) -> dict[str, Path]:
    """Issue 47's second sweep: a run whose metrics.csv is a FIFO, run.json files whose
    options are of the wrong kind, training builds whose manifest.json is a list or lost
    its model, and a labels file and a hook that fit the folder of images."""
    import os
    fifo_run = root / "fifo_run"
    shutil.copytree(run, fifo_run)
    (fifo_run / "metrics.csv").unlink()
    os.mkfifo(fifo_run / "metrics.csv")
    record = json.loads((run / "run.json").read_text())
    runs = {}
    for key, edit in (("BOOLCFG", {"batch": True}), ("STRCFG", {"layers": "abc"})):
        runs[key] = root / key.lower()
        runs[key].mkdir()
        (runs[key] / "run.json").write_text(json.dumps(
            {**record, "config": {**record["config"], **edit}}))
    manifest = json.loads((root / "fleet_fw" / "manifest.json").read_text())
    del manifest["model"]
    for key, text in (("LISTFW", "[]"), ("NOMODELFW", json.dumps(manifest))):
        runs[key] = root / key.lower()
        shutil.copytree(root / "fleet_fw", runs[key])
        (runs[key] / "manifest.json").write_text(text)
    (root / "good.csv").write_text("\n".join(f"{c}/{k}.png,{c}" for c in range(3)
                                             for k in range(2)))
    (root / "zeros.py").write_text("import numpy as np\n"
                                   "def f(path): return np.zeros((8, 8, 1), np.float32)\n")
    return {"FIFO_RUN": fifo_run, "GOOD_CSV": root / "good.csv", "ZEROS": root / "zeros.py",
            **runs}


# ------------------------------------------------------------------------------ the table
SIM = ["simulate", "M", "--data", "D", "-o", "ROOT/new_run", "--steps", "2", "--queries", "2"]
BUILD = ["build", "M", "--target", "native", "-o", "ROOT/fw", "--train", "full"]
PACK = ["pack", "D", "-o", "ROOT/new.img"]
INFER = ["infer", "M", "--input", "X", "--output", "ROOT/y.npy"]
TRAIN = ["train", "--native", "ROOT/nofw", "--image", "IMG", "-o", "ROOT/train_run"]
FLEET = ["fleet", "local", "M", "--build", "ROOT/nofw", "--native", "ROOT/nofw", "--images",
         "IMG", "-o", "ROOT/fleet"]
FLEET47 = ["fleet", "local", "M", "--build", "FLEET_FW", "--native", "FLEET_FW"]
PACK47 = ["pack", "PICS", "-o", "ROOT/p.img", "--model", "M"]
REPLAY = ["replay", "M", "--build", "ROOT/nofw", "--scalars", "ROOT/none.bin", "-o",
          "ROOT/replayed.bin"]

ROWS: list[tuple[str, list[str], tuple[str, ...], tuple[str, ...]]] = [
    # issue 31's defects
    ("1 replay over its own --check", ["replay", "M", "--build", "ROOT/nofw", "--scalars",
     "ROOT/none.bin", "-o", "CK", "--check", "CK"], ("is the --check file",), ("CK",)),
    ("1 replay over its scalars", ["replay", "M", "--build", "ROOT/nofw", "--scalars", "CK",
     "-o", "CK"], ("is the --scalars file",), ("CK",)),
    ("2 simulate over an existing run", SIM[:4] + ["-o", "RUN", "--steps", "2"],
     ("holds a run", "--resume", "--force"), ("CK", "CSV", "JSON")),
    ("2 simulate --no-guard over an existing run", SIM[:4] + ["-o", "RUN", "--no-guard"],
     ("holds a run",), ("CK", "CSV", "JSON")),
    ("3/9 resume with a damaged run.json", SIM[:4] + ["-o", "GARBAGE", "--resume"],
     ("run.json is damaged", "--force"), ()),
    ("3/9 resume without run.json", SIM[:4] + ["-o", "ORPHAN", "--resume"],
     ("run.json is missing", "--force"), ()),
    ("4 resume with other options", SIM[:4] + ["-o", "RUN", "--resume", "--steps", "2",
     "--queries", "7", "--no-guard", "--lr", "0.01"], ("other inputs or options",
     "--queries 2 -> 7"), ("CK", "CSV", "JSON")),
    ("4 resume with other data", ["simulate", "M", "--data", "IMG", "-o", "RUN", "--resume",
     "--steps", "2", "--queries", "2", "--no-guard", "--lr", "0.01"],
     ("other inputs or options", "data_sha256"), ("CK", "CSV", "JSON")),
    ("4 resume and force", SIM + ["--resume", "--force"], ("choose one",), ()),
    ("5 build --lr inf", BUILD + ["--lr", "inf"], ("--lr must be a number",), ()),
    ("5 build --lr 1e40", BUILD + ["--lr", "1e40"], ("--lr must be a number",), ()),
    ("5 simulate --lr inf", SIM + ["--lr", "inf"], ("--lr must be a number",), ()),
    ("5 simulate --lr nan", SIM + ["--lr", "nan"], ("--lr must be a number",), ()),
    ("5 simulate --lr -1", SIM + ["--lr", "-1"], ("--lr must be a number",), ()),
    ("5 simulate --max-step inf", SIM + ["--max-step", "inf"], ("--max-step",), ()),
    ("7 infer NaN input", ["infer", "M", "--input", "XF", "--output", "ROOT/y.npy"],
     ("float32",), ("XF",)),
    ("7 pack infinite x", ["pack", "DNAN", "-o", "ROOT/nan.img"], ("NaN or infinite",),
     ("DNAN",)),
    ("7 simulate infinite x", ["simulate", "M", "--data", "DNAN", "-o", "ROOT/nan_run"],
     ("float32",), ("DNAN",)),
    ("8 export over its model", ["export", "M", "CK", "-o", "M"], ("is the MODEL file",),
     ("M", "CK")),
    ("8 export over its checkpoint", ["export", "M", "CK", "-o", "CK"],
     ("is the CHECKPOINT file",), ("M", "CK")),
    ("8 infer over its input", ["infer", "M", "--input", "X", "--output", "X"],
     ("is the --input file",), ("X",)),
    ("8 infer over its model", ["infer", "M", "--input", "X", "--output", "M"],
     ("is the MODEL file",), ("M", "X")),
    ("8 pack over its data", ["pack", "D", "-o", "D"], ("overwrite",), ("D",)),
    ("9 train --timeout 0", TRAIN + ["--timeout", "0"], ("--timeout",), ("IMG",)),
    ("9 train --timeout -5", TRAIN + ["--timeout", "-5"], ("--timeout",), ("IMG",)),
    ("12 --block in full mode", SIM + ["--block", "1"], ("--block", "sparse"), ()),
    ("12 --blocks in full mode", BUILD + ["--blocks", "2"], ("--blocks", "sparse"), ()),
    ("12 --eval-every -1", SIM + ["--eval-every", "-1"], ("--eval-every",), ()),
    ("12 training options with --train none", ["build", "M", "--target", "native", "-o",
     "ROOT/fw", "--queries", "5"], ("--queries", "--train none"), ()),
    ("12 --resume without a run", SIM + ["--resume"], ("no checkpoint.bin",), ()),
    ("12 monitor --duration -1", ["monitor", "--port", "loop://", "--duration", "-1"],
     ("--duration",), ()),
    ("13 usage error is one line", ["simulate", "M"], ("--data",), ()),
    ("13 unknown command", ["frobnicate"], ("invalid choice",), ()),
    ("13 text file as .npz", ["pack", "TEXT", "-o", "ROOT/t.img"], ("not a readable",),
     ("TEXT",)),
    ("13 --query-batch 0", SIM + ["--query-batch", "0"], ("--query-batch", "at least 1"), ()),
    ("13 a directory as MODEL", ["inspect", "ROOT"], ("is a directory", ".tflite"), ()),
    ("13 a directory as the model to export", ["export", "ROOT", "CK", "-o", "ROOT/o.tflite"],
     ("is a directory",), ("CK",)),
    ("13 export -o a folder", ["export", "M", "CK", "-o", "ROOT"], ("is a directory",),
     ("M", "CK")),
    ("14 unwritable output folder", ["pack", "D", "-o", "FILE/d.img"], ("cannot write",),
     ("D", "FILE")),
    ("14 export into a file's folder", ["export", "M", "CK", "-o", "FILE/x.tflite"],
     ("cannot write",), ("M", "CK", "FILE")),
    # files that are missing or not what they claim
    ("missing model", ["inspect", "ROOT/nope.tflite"], ("nope.tflite",), ()),
    ("text as model", ["inspect", "TEXT"], ("text.npz",), ("TEXT",)),
    ("data as model", ["inspect", "D"], ("d.npz",), ("D",)),
    ("missing data", ["simulate", "M", "--data", "ROOT/nope.npz"], ("nope.npz",), ()),
    ("missing checkpoint", ["export", "M", "ROOT/nope.bin", "-o", "ROOT/o.tflite"],
     ("nope.bin",), ("M",)),
    ("garbage checkpoint", ["export", "M", "FILE", "-o", "ROOT/o.tflite"], ("file",),
     ("M", "FILE")),
    ("missing input batch", ["infer", "M", "--input", "ROOT/nope.npy", "--output",
     "ROOT/y.npy"], ("nope.npy",), ("M",)),
    ("missing image", TRAIN[:3] + ["--image", "ROOT/nope.img"], ("nope.img",), ()),
    ("missing build for flash", ["flash", "ROOT/nofw"], ("nofw",), ()),
    ("missing build for replay", REPLAY, ("nofw",), ()),
    ("export wrong suffix", ["export", "M", "CK", "-o", "ROOT/o.onnx"], (".tflite",),
     ("M", "CK")),
    ("unknown target", ["build", "M", "--target", "esp32"], ("invalid choice",), ()),
    ("unknown estimator", SIM + ["--estimator", "backprop"], ("invalid choice",), ()),
    ("unknown engine", INFER + ["--engine", "gpu"], ("invalid choice",), ()),
    ("--p-zero text", SIM + ["--estimator", "int8", "--p-zero", "lots"], ("--p-zero",), ()),
    ("--p-zero 1", SIM + ["--estimator", "int8", "--p-zero", "1"], ("--p-zero",), ()),
    ("--layers garbage", SIM + ["--layers", "a-b"], ("--layers",), ()),
    ("--block garbage", SIM + ["--train", "sparse", "--block", "x"], ("--block",), ()),
    ("--blocks garbage", SIM + ["--train", "sparse", "--blocks", "many"], ("--blocks",), ()),
    ("--bp-layers garbage", SIM + ["--bp-layers", "all"], ("--bp-layers",), ()),
    ("--perturbation garbage", SIM + ["--perturbation", "pool:x"], ("pool",), ()),
    ("--epochs with build", BUILD + ["--epochs", "2"], ("--steps",), ()),
    ("mezo on the device", BUILD + ["--estimator", "mezo"], ("simulator",), ()),
    ("record-scalars with guard", BUILD + ["--record-scalars"], ("--no-guard",), ()),
    ("simulate -o a file", SIM[:4] + ["-o", "FILE"], ("not a directory",), ("FILE",)),
    # issue 47: runs and devices
    ("47/6 resume onto a garbage metrics.csv", SIM[:4] + ["-o", "CSV_RUN", "--resume",
     "--steps", "2", "--queries", "2", "--no-guard", "--lr", "0.01"],
     ("metrics.csv", "--force"), ("CSV_RUN", "CSV_RUN_LOG")),
    ("47/7 resume a checkpoint past --steps", SIM[:4] + ["-o", "PAST", "--resume", "--steps",
     "1", "--queries", "2", "--no-guard", "--lr", "0.01"],
     ("at step 2", "beyond the 1 steps", "--force"), ("PAST", "PAST_CK")),
    ("47/9 fleet local with an image for another model", FLEET47 + ["--images", "IMG",
     "OTHER_IMG", "-o", "ROOT/fleet"], ("other.img", "another model"), ("OTHER_IMG",)),
    ("47/9 fleet local --test with a label out of range", FLEET47 + ["--images", "IMG",
     "--test", "BAD_LABELS", "-o", "ROOT/fleet"], ("label 99",), ("BAD_LABELS",)),
    # issue 47: numbers
    ("47/4 build --steps 2^32", BUILD + ["--steps", "4294967296"], ("--steps", "4294967295"),
     ()),
    ("47/4 build --guard-every 2^32", BUILD + ["--guard-every", "4294967296"],
     ("--guard-every", "4294967295"), ()),
    ("47/4 build --guard-samples 2^32", BUILD + ["--guard-samples", "4294967296"],
     ("--guard-samples", "4294967295"), ()),
    ("47/4 build --lr 1e-300", BUILD + ["--lr", "1e-300"], ("--lr", "float32"), ()),
    ("47/10 build --blocks 1000", BUILD[:-1] + ["sparse", "--blocks", "1000"],
     ("--blocks 1000", "at most --blocks 4"), ()),
    ("47/12 device-time --baud -1", ["device-time", "RUN", "--target", "stm32f746", "--baud",
     "-1"], ("--baud",), ("JSON",)),
    ("47/13 build --baud 0", ["build", "M", "--target", "stm32f746", "-o", "ROOT/fw",
     "--baud", "0"], ("--baud",), ()),
    ("47/13 device-time --baud 0", ["device-time", "RUN", "--target", "stm32f746", "--baud",
     "0"], ("--baud",), ("JSON",)),
    ("47/16 device-time on a run.json whose config is null", ["device-time", "NULLCFG",
     "--target", "stm32f746"], ("run.json", "not a run's record"), ("NULLCFG",)),
    # issue 47: labels, hooks, API, messages
    ("47/5 --labels with -1", PACK47 + ["--labels", "NEG_CSV"],
     ("neg.csv: row 7 (2/1.png)", "label -1 outside 0..9"), ("NEG_CSV",)),
    ("47/5 --labels with 99", PACK47 + ["--labels", "BIG_CSV"],
     ("big.csv: row 6 (2/1.png)", "label 99 outside 0..9"), ("BIG_CSV",)),
    ("47/5 --labels JSON null", PACK47 + ["--labels", "NULL_JSON"],
     ('"1/0.png"', "the label null is neither"), ("NULL_JSON",)),
    ("47/5 --labels JSON list", PACK47 + ["--labels", "LIST_JSON"],
     ('"0/0.png"', "the label [1, 2] is neither"), ("LIST_JSON",)),
    ("47/5 a class folder named -1", ["pack", "NEGPICS", "-o", "ROOT/p.img", "--model", "M"],
     ("negpics/-1", "label -1 outside 0..9"), ()),
    *[(f"47/17 a hook {does}", PACK47 + ["--preprocess", f"ROOT/hk.py:{name}"],
       (f"hk.py:{name}", *words), ("HOOKS",)) for does, name, words in (
        ("returning strings", "text", ("not an array of real numbers",)),
        ("returning an object", "thing", ("returned object",)),
        ("raising SystemExit", "bye", ("sys.exit('bye')",)),
        ("calling sys.exit(0)", "exit0", ("sys.exit(0)",)),
        ("returning complex numbers", "complex_", ("complex128",)),
        ("returning numbers beyond float32", "huge", ("beyond float32",)))],
    ("47/21 a hook module not importable", PACK47 + ["--preprocess", "nomodule:f"],
     ("no module named 'nomodule'", "working directory"), ()),
    ("47/21 a decompression bomb", ["pack", "BOMBS", "-o", "ROOT/p.img", "--model", "M"],
     ("bomb.png", "MAX_IMAGE_PIXELS"), ()),
    ("47/21 a FIFO as the model", ["inspect", "FIFO"], ("named pipe",), ()),
    ("47/21 /dev/null as the model", ["inspect", "/dev/null"], ("character device",), ()),
    ("47/21 a symlink loop as the model", ["inspect", "LOOP"], ("loop of symbolic links",), ()),
    ("47/21 a model as --data", SIM[:2] + ["--data", "M", "-o", "ROOT/new_run"],
     ("m.tflite", "does not start as a .npy or .npz"), ("M",)),
    ("47/21 a checkpoint as --input", ["infer", "M", "--input", "CK", "--output",
     "ROOT/y.npy"], ("checkpoint.bin", "does not start as a .npy or .npz"), ("CK",)),
    ("47/21 a FIFO as --data", SIM[:2] + ["--data", "FIFO", "-o", "ROOT/new_run"],
     ("named pipe",), ()),
    ("47/21 an ONNX model with a dangling input", ["inspect", "DANGLING"],
     ("dangling.onnx", "dangling"), ("DANGLING",)),
    ("47/21 train --timeout 1e-300", TRAIN + ["--timeout", "1e-300"],
     ("--timeout", "at least 1"), ()),
    ("47/21 resume with a damaged best.bin", ["simulate", "M", "--data", "D200", "-o",
     "GUARDED", "--steps", "2", "--queries", "2", "--lr", "0.01", "--resume"],
     ("best.bin", "--force"), ("GUARDED",)),
    # issue 47: a second sweep
    ("47b pack -o a FIFO", ["pack", "D", "-o", "FIFO"], ("-o", "named pipe"), ()),
    ("47b export -o a FIFO", ["export", "M", "CK", "-o", "FIFO"], ("named pipe",), ()),
    ("47b resume onto a FIFO metrics.csv", SIM[:4] + ["-o", "FIFO_RUN", "--resume",
     "--steps", "2", "--queries", "2", "--no-guard", "--lr", "0.01", "--eval-every", "1"],
     ("metrics.csv", "named pipe"), ()),
    ("47b device-time: a count that is true", ["device-time", "BOOLCFG", "--target",
     "stm32f746"], ("run.json", "--batch must be an integer"), ("BOOLCFG",)),
    ("47b device-time: layers that are text", ["device-time", "STRCFG", "--target",
     "stm32f746"], ("run.json", "--layers must be a list"), ("STRCFG",)),
    ("47b replay: a manifest.json that is a list", ["replay", "M", "--build", "LISTFW",
     "--scalars", "ROOT/none.bin", "-o", "ROOT/replayed.bin"], ("not a training build",),
     ("LISTFW",)),
    ("47b replay: a manifest.json without its model", ["replay", "M", "--build", "NOMODELFW",
     "--scalars", "ROOT/none.bin", "-o", "ROOT/replayed.bin"],
     ("manifest.json is damaged", "model"), ("NOMODELFW",)),
    ("47b pack -o its --labels file", PACK47[:2] + ["-o", "GOOD_CSV", "--model", "M",
     "--labels", "GOOD_CSV"], ("--labels", "overwrite"), ("GOOD_CSV",)),
    ("47b pack -o its --preprocess file", PACK47[:2] + ["-o", "ZEROS", "--model", "M",
     "--preprocess", "ROOT/zeros.py:f"], ("--preprocess", "overwrite"), ("ZEROS",)),
    ("47b fleet local: a manifest.json that is a list", ["fleet", "local", "M", "--build",
     "LISTFW", "--native", "LISTFW", "--images", "IMG", "-o", "ROOT/fleet"],
     ("not a training build",), ("LISTFW",)),
]

# every numeric option of every command, with values outside its range or not numbers
_NUMERIC = [
    (SIM, "--steps", ("0", "-3", "x", "1.5")), (SIM, "--epochs", ("0", "-1", "x")),
    (SIM, "--queries", ("0", "-1", "x")), (SIM, "--batch", ("0", "-2", "x")),
    (SIM, "--guard-every", ("-1", "x")), (SIM, "--guard-samples", ("0", "x")),
    (SIM, "--seed", ("-1", "4294967296", "x")), (SIM, "--cutoff", ("-1", "x")),
    (SIM, "--inner-queries", ("0", "65", "x")), (SIM, "--r-max", ("0", "128", "x")),
    (SIM, "--b-zo", ("0", "9", "x")), (SIM, "--b-bp", ("0", "9", "x")),
    (SIM, "--query-batch", ("-1", "x")), (SIM, "--max-step", ("-1", "nan", "200", "x")),
    (SIM, "--trial-samples", ("0", "x")), (SIM, "--eval-every", ("0", "x")),
    (BUILD, "--steps", ("0", "x")), (BUILD, "--queries", ("0", "x")),
    (BUILD, "--batch", ("0", "x")), (BUILD, "--seed", ("-1", "x")),
    (BUILD, "--max-step", ("inf", "-0.5")), (BUILD, "--query-batch", ("0",)),
    (PACK, "--shuffle", ("-1", "x")), (PACK, "--checkpoint-kb", ("-1", "x")),
    (PACK, "--val-fraction", ("-0.1", "nan", "inf", "x")),
    (TRAIN, "--steps", ("0", "-1", "x")), (TRAIN, "--checkpoint-every", ("0", "x")),
    (TRAIN, "--timeout", ("nan", "inf", "x")),
    (["monitor", "--port", "loop://"], "--duration", ("0", "nan", "x")),
    (FLEET, "--rounds", ("0", "x")), (FLEET, "--steps-per-round", ("0", "x")),
    (FLEET, "--min-devices", ("0", "x")), (FLEET, "--wait", ("-1", "inf")),
    (FLEET, "--deadline", ("0", "nan")),
    (["fleet", "serve", "M", "--build", "ROOT/nofw"], "--listen-port", ("0", "70000", "x")),
]
for base, option, values in _NUMERIC:
    for value in values:
        ROWS.append((f"{base[0]} {option} {value}", base + [option, value],
                     (option.lstrip("-"),), ()))


def _argv(args: list[str], ws: dict[str, Path]) -> list[str]:
    out = []
    for a in args:
        key, _, rest = a.partition("/")
        out.append(str(ws[key] / rest) if rest and key in ws else str(ws.get(a, a)))
    return out


def _digest(path: Path) -> str:
    if path.is_dir():
        return "dir:" + ",".join(sorted(p.name for p in path.iterdir()))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_table_covers_every_command():
    commands = {row[1][0] for row in ROWS} | {" ".join(row[1][:2]) for row in ROWS
                                              if row[1][0] == "fleet"}
    assert {"inspect", "infer", "build", "simulate", "pack", "train", "monitor", "export",
            "replay", "flash", "fleet local", "fleet serve"} <= commands
    assert len(ROWS) >= 150, len(ROWS)


@pytest.mark.parametrize("name, args, words, unchanged", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input_is_refused_in_one_line_and_loses_nothing(workspace, capsys, name, args,
                                                            words, unchanged):
    before = {key: _digest(workspace[key]) for key in unchanged}
    listing = sorted(p.name for p in workspace["ROOT"].iterdir())
    code = main(_argv(args, workspace))
    assert_refused(code, capsys.readouterr().err, words)
    assert {key: _digest(workspace[key]) for key in unchanged} == before
    # nothing new beside the inputs (a refused command writes nothing)
    assert sorted(p.name for p in workspace["ROOT"].iterdir()) == listing


def test_force_starts_a_run_anew_and_resume_continues_it(workspace, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(workspace["RUN"], run)
    base = ["simulate", str(workspace["M"]), "--data", str(workspace["D"]), "-o", str(run),
            "--queries", "2", "--no-guard", "--lr", "0.01", "--eval-every", "1"]
    assert main(base + ["--steps", "3", "--force"]) == 0
    record = json.loads((run / "run.json").read_text())
    assert record["config"]["steps"] == 3 and not (run / "best.bin").exists()
    assert main(base + ["--steps", "3", "--resume"]) == 0
    capsys.readouterr()


def test_resume_after_an_interruption_logs_every_step_once(workspace, tmp_path, monkeypatch,
                                                          capsys):
    """Issue 47 #6: steps logged after the last checkpoint (Ctrl-C at step 3, the checkpoint
    at step 2) are computed again on --resume; metrics.csv (and curves.png and TensorBoard,
    drawn from its rows) hold each step once, as `train`'s do."""
    real = runner.simulator.run

    def interrupted(*args, **kwargs):
        for k, record in enumerate(real(*args, **kwargs)):
            if k == 3:
                raise KeyboardInterrupt
            yield record
    run = tmp_path / "run"
    base = ["simulate", str(workspace["M"]), "--data", str(workspace["D"]), "-o", str(run),
            "--steps", "6", "--queries", "2", "--no-guard", "--lr", "0.01", "--eval-every", "2"]
    monkeypatch.setattr(runner.simulator, "run", interrupted)
    assert main(base) == 130
    monkeypatch.undo()
    logged = [row.step for row in read_metrics(run / "metrics.csv")]
    assert max(logged) > checkpoint.load(run / "checkpoint.bin").step
    assert main(base + ["--resume"]) == 0
    steps = [row.step for row in read_metrics(run / "metrics.csv")]
    assert steps == sorted(set(steps)) and steps[-1] == 6, steps
    capsys.readouterr()


def test_full_disk_leaves_no_run_and_odd_names_still_plot(workspace, tmp_path, monkeypatch,
                                                         capsys):
    """Issue 47 #22: a simulate refused by a full disk (ENOSPC injected at its first file)
    leaves no RUN folder, nor the folders it made above it; #14: a model whose file name is
    not UTF-8 is simulated, curves.png drawn."""
    import errno
    import os
    real = os.open

    def full(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and "run" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, flags, *args, **kwargs)
    base = ["--data", str(workspace["D"]), "--steps", "2", "--queries", "2", "--no-guard",
            "--lr", "0.01"]
    monkeypatch.setattr(os, "open", full)
    assert main(["simulate", str(workspace["M"]), "-o", str(tmp_path / "a" / "run"),
                 *base]) == 2
    monkeypatch.undo()
    assert "No space left" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()
    model = tmp_path / "bad\udcff.tflite"  # the bytes b"bad\xff.tflite"
    shutil.copy(workspace["M"], model)
    assert main(["simulate", str(model), "-o", str(tmp_path / "odd"), *base]) == 0
    assert (tmp_path / "odd" / "curves.png").is_file()
    capsys.readouterr()


def test_a_run_in_use_by_another_process_is_refused(workspace, tmp_path, capsys):
    """Issue 47, second sweep: two processes on one RUN would both write its checkpoints
    and run.json; the second is refused in one line while the first holds RUN/.lock."""
    import fcntl
    import os
    run = tmp_path / "run"
    shutil.copytree(workspace["RUN"], run)
    before = {p.name: _digest(p) for p in run.iterdir()}
    resume = ["simulate", str(workspace["M"]), "--data", str(workspace["D"]), "-o", str(run),
              "--steps", "2", "--queries", "2", "--no-guard", "--lr", "0.01",
              "--eval-every", "1", "--resume"]
    held = os.open(run / ".lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        code = main(resume)
    finally:
        os.close(held)
    assert_refused(code, capsys.readouterr().err,
                   (str(run), "in use by another zocodegen process"))
    assert {p.name: _digest(p) for p in run.iterdir() if p.name != ".lock"} == before
    assert main(resume) == 0  # the lock is the process's: released, the run goes on
    assert not (run / ".lock").exists()
    capsys.readouterr()


def test_ctrl_c_while_the_commands_load_is_one_line(monkeypatch, capsys):
    """Issue 47, second sweep: Ctrl-C in the second or more `zocodegen` takes to load its
    modules printed a traceback (or numpy's ImportError, exit 1); it is one line, 130."""
    import os
    import signal
    import sys
    import types
    from zocodegen import launch

    class Loading(types.ModuleType):
        @property
        def main(self):
            os.kill(os.getpid(), signal.SIGINT)  # pressed while the module loads
            return lambda argv: pytest.fail("the command ran after Ctrl-C")
    monkeypatch.setitem(sys.modules, "zocodegen.cli", Loading("zocodegen.cli"))
    assert launch.main(["inspect", "m.tflite"]) == 130
    assert capsys.readouterr().err == "zocodegen: interrupted\n"
