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

from conftest import FIXTURES
from zocodegen.cli import main

DIGITS = FIXTURES / "digits_cnn.tflite"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("contract")
    shutil.copy(DIGITS, root / "m.tflite")
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, size=(30, 8, 8, 1)).astype(np.int8)
    np.savez(root / "d.npz", x=x, y=rng.integers(0, 10, 30), x_test=x[:9],
             y_test=rng.integers(0, 10, 9))
    np.save(root / "x.npy", x[:2])
    np.save(root / "xf.npy", np.full((2, 8, 8, 1), np.nan, np.float32))
    np.savez(root / "dnan.npz", x=np.full((4, 8, 8, 1), np.inf, np.float32),
             y=np.zeros(4, np.int64))
    (root / "text.npz").write_text("not a zip")
    assert main(["pack", str(root / "d.npz"), "-o", str(root / "d.img")]) == 0
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
    return {"M": root / "m.tflite", "D": root / "d.npz", "X": root / "x.npy",
            "XF": root / "xf.npy", "DNAN": root / "dnan.npz", "TEXT": root / "text.npz",
            "IMG": root / "d.img", "RUN": run, "CK": run / "checkpoint.bin",
            "BEST": run / "best.bin", "CSV": run / "metrics.csv", "JSON": run / "run.json",
            "GARBAGE": root / "garbage_run", "ORPHAN": root / "orphan_run",
            "FILE": root / "file", "ROOT": root}


# ------------------------------------------------------------------------------ the table
SIM = ["simulate", "M", "--data", "D", "-o", "ROOT/new_run", "--steps", "2", "--queries", "2"]
BUILD = ["build", "M", "--target", "native", "-o", "ROOT/fw", "--train", "full"]
PACK = ["pack", "D", "-o", "ROOT/new.img"]
INFER = ["infer", "M", "--input", "X", "--output", "ROOT/y.npy"]
TRAIN = ["train", "--native", "ROOT/nofw", "--image", "IMG", "-o", "ROOT/train_run"]
FLEET = ["fleet", "local", "M", "--build", "ROOT/nofw", "--native", "ROOT/nofw", "--images",
         "IMG", "-o", "ROOT/fleet"]
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
    ("--block garbage", SIM + ["--mode", "sparse", "--block", "x"], ("--block",), ()),
    ("--blocks garbage", SIM + ["--mode", "sparse", "--blocks", "many"], ("--blocks",), ()),
    ("--bp-layers garbage", SIM + ["--bp-layers", "all"], ("--bp-layers",), ()),
    ("--perturbation garbage", SIM + ["--perturbation", "pool:x"], ("pool",), ()),
    ("--epochs with build", BUILD + ["--epochs", "2"], ("--steps",), ()),
    ("mezo on the device", BUILD + ["--estimator", "mezo"], ("simulator",), ()),
    ("record-scalars with guard", BUILD + ["--record-scalars"], ("--no-guard",), ()),
    ("simulate -o a file", SIM[:4] + ["-o", "FILE"], ("not a directory",), ("FILE",)),
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
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2, (code, captured.err)
    assert "Traceback" not in captured.err
    assert len(lines) == 1 and lines[0].startswith("zocodegen: error: "), captured.err
    for word in words:
        assert word in lines[0], (word, lines[0])
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
