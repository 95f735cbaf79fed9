"""Issue 62's options and messages, as rows of the contract (docs/contract.md): an option the
command would silently ignore is refused in one line naming it, and each message the issue
found unclear or misleading names what it means. Every row failed on the main branch the
issue was filed against.

Rows are the shape of tests/test_contract.py's: (name, arguments, words of the one-line
refusal, workspace files that must stay unchanged); arguments name workspace files by key.
"""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, assert_refused
from zocodegen.cli import main

DIGITS = FIXTURES / "digits_cnn.tflite"
FIXED = ["--no-guard", "--lr", "0.01"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("options")
    shutil.copy(DIGITS, root / "m.tflite")
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, size=(30, 8, 8, 1)).astype(np.int8)
    np.savez(root / "d.npz", x=x, y=rng.integers(0, 10, 30), x_test=x[:9],
             y_test=rng.integers(0, 10, 9))
    assert main(["pack", str(root / "d.npz"), "-o", str(root / "d.img")]) == 0
    board_run = root / "board_run"
    assert main(["simulate", str(root / "m.tflite"), "--data", str(root / "d.npz"), "-o",
                 str(board_run), "--steps", "2", "--queries", "2", *FIXED, "--target",
                 "stm32f746"]) == 0
    assert main(["build", str(root / "m.tflite"), "--target", "native", "--train", "full",
                 *FIXED, "--steps", "100", "-o", str(root / "fleet_fw")]) == 0
    return {"M": root / "m.tflite", "D": root / "d.npz", "IMG": root / "d.img",
            "ROOT": root, "BOARD_RUN": board_run, "BOARD_JSON": board_run / "run.json",
            "BOARD_CK": board_run / "checkpoint.bin", "FLEET_FW": root / "fleet_fw"}


SIM = ["simulate", "M", "--data", "D", "-o", "ROOT/new_run", "--queries", "2", *FIXED]
BUILD = ["build", "M", "-o", "ROOT/fw"]

ROWS: list[tuple[str, list[str], tuple[str, ...], tuple[str, ...]]] = [
    # options silently ignored
    ("simulate --steps with --epochs", SIM + ["--steps", "3", "--epochs", "1"],
     ("--steps 3", "--epochs 1", "give one"), ()),
    ("--lr with --estimator int8", SIM[:-3] + ["--no-guard", "--estimator", "int8", "--lr",
     "50", "--steps", "2"], ("--lr 50", "int8", "no learning rate"), ()),
    ("build --lr with --estimator int8", BUILD + ["--target", "native", "--train", "full",
     "--no-guard", "--estimator", "int8", "--lr", "0.01"], ("--lr 0.01", "int8"), ()),
    ("simulate --record-scalars", SIM[:-3] + ["--no-guard", "--lr", "0.01", "--estimator",
     "wp", "--steps", "2", "--record-scalars"], ("--record-scalars", "replay"), ()),
    ("simulate --target with a simulator-only estimator", SIM + ["--steps", "2", "--target",
     "stm32f746", "--estimator", "mezo"], ("--estimator mezo", "--target stm32f746"), ()),
    ("--layers ''", SIM + ["--steps", "2", "--layers", ""], ("--layers ''", "names no layer"),
     ()),
    ("--layers ','", BUILD + ["--target", "native", "--train", "full", "--layers", ","],
     ("--layers ','", "names no layer"), ()),
    ("build --target native --baud", BUILD + ["--target", "native", "--baud", "9600"],
     ("--baud 9600", "native"), ()),
    ("build --target qemu --baud", BUILD + ["--target", "qemu", "--baud", "9600"],
     ("--baud 9600", "qemu"), ()),
    ("build --emulate with a board --target", BUILD + ["--target", "stm32f746", "--emulate",
     "stm32h7b3"], ("--emulate stm32h7b3", "--target stm32f746"), ()),
    ("build --emulate (the default board) with a board --target", BUILD + ["--target",
     "stm32h7b3", "--emulate", "stm32f746"], ("--emulate stm32f746", "--target stm32h7b3"),
     ()),
    ("simulate --resume with another --target", ["simulate", "M", "--data", "D", "-o",
     "BOARD_RUN", "--queries", "2", *FIXED, "--steps", "2", "--target", "stm32h7b3",
     "--resume"], ("--target stm32f746 -> stm32h7b3",), ("BOARD_JSON", "BOARD_CK")),
    ("simulate --resume without the run's --target", ["simulate", "M", "--data", "D", "-o",
     "BOARD_RUN", "--queries", "2", *FIXED, "--steps", "2", "--resume"],
     ("--target stm32f746 -> (none)",), ("BOARD_JSON", "BOARD_CK")),
    ("fleet local --min-devices beyond its images", ["fleet", "local", "M", "--build",
     "FLEET_FW", "--native", "FLEET_FW", "--images", "IMG", "-o", "ROOT/fleet",
     "--min-devices", "5"], ("--min-devices 5", "--images", "(1)"), ("IMG",)),
]


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


@pytest.mark.parametrize("name, args, words, unchanged", ROWS, ids=[r[0] for r in ROWS])
def test_issue_62_rows(workspace, capsys, name, args, words, unchanged):
    before = {key: _digest(workspace[key]) for key in unchanged}
    listing = sorted(p.name for p in workspace["ROOT"].iterdir())
    code = main(_argv(args, workspace))
    assert_refused(code, capsys.readouterr().err, words)
    assert {key: _digest(workspace[key]) for key in unchanged} == before
    assert sorted(p.name for p in workspace["ROOT"].iterdir()) == listing
