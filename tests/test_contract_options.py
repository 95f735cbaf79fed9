"""Issue 62's options and messages, as rows of the contract (docs/contract.md): an option the
command would silently ignore is refused in one line naming it, and each message the issue
found unclear or misleading names what it means. Every row failed on the main branch the
issue was filed against.

Rows are the shape of tests/test_contract.py's: (name, arguments, words of the one-line
refusal, workspace files that must stay unchanged); arguments name workspace files by key.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, assert_refused, digits_workspace
from test_contract import _argv, _digest
from zocodegen.cli import main

FIXED = ["--no-guard", "--lr", "0.01"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("options")
    digits_workspace(root)
    board_run = root / "board_run"
    assert main(["simulate", str(root / "m.tflite"), "--data", str(root / "d.npz"), "-o",
                 str(board_run), "--steps", "2", "--queries", "2", *FIXED, "--target",
                 "stm32f746"]) == 0
    assert main(["build", str(root / "m.tflite"), "--target", "native", "--train", "full",
                 *FIXED, "--steps", "100", "-o", str(root / "fleet_fw")]) == 0
    (root / "file").write_text("a file, not a folder")
    (root / "card_dir").mkdir()
    linked = root / "linked_fw"  # a project whose src/ the user replaced by a link to a file
    assert main(["build", str(root / "m.tflite"), "--target", "native", "-o", str(linked)]) == 0
    shutil.rmtree(linked / "src")
    (linked / "src").symlink_to(root / "file")
    killed = root / "killed_run"  # kill -9 before the first checkpoint: run.json, metrics.csv
    assert main(["simulate", str(root / "m.tflite"), "--data", str(root / "d.npz"), "-o",
                 str(killed), "--steps", "2", "--queries", "2", *FIXED]) == 0
    for name in ("checkpoint.bin", "curves.png", "confusion.csv"):
        (killed / name).unlink()
    return {"M": root / "m.tflite", "D": root / "d.npz", "IMG": root / "d.img",
            "FILE": root / "file", "CARD_DIR": root / "card_dir", "LINKED": linked,
            "KILLED": killed, "KILLED_JSON": killed / "run.json",
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
    ("build --recompute with --train none", BUILD + ["--target", "native", "--recompute",
     "on"], ("--recompute", "--train none"), ()),
    ("build --epochs names the option", BUILD + ["--target", "native", "--train", "full",
     "--epochs", "2"], ("--epochs 2", "--steps"), ()),
    # unclear or misleading messages
    ("'' as a file name (not '.')", ["pack", "D", "-o", ""], ("--output", "got ''"), ()),
    ("'' as --data", ["simulate", "M", "--data", "", "-o", "ROOT/new_run"], ("--data",
     "got ''"), ()),
    ("card read of a directory (not 'Is a directory: 3')", ["card", "read", "CARD_DIR", "-o",
     "ROOT/card_run"], ("card_dir is a directory",), ()),
    ("build -o under a file names the file", BUILD + ["--target", "native", "-o",
     "FILE/sub"], ("/file is a file, not a directory",), ("FILE",)),
    ("build over a src that links to a file names it", BUILD + ["--target", "native", "-o",
     "LINKED", "--force"], ("linked_fw/src: File exists",), ("LINKED", "FILE")),
    ("simulate -o under a file names the file", SIM + ["--steps", "2", "-o", "FILE/sub"],
     ("/file is a file, not a directory",), ("FILE",)),
    ("--resume after a kill -9 before the first checkpoint", SIM[:4] + ["-o", "KILLED",
     "--resume", "--steps", "2", "--queries", "2", *FIXED], ("no checkpoint.bin",
     "stopped before its first", "--force"), ("KILLED", "KILLED_JSON")),
    ("no --resume after a kill -9 before the first checkpoint", SIM[:4] + ["-o", "KILLED",
     "--steps", "2", "--queries", "2", *FIXED], ("stopped before its first checkpoint",
     "--force"), ("KILLED", "KILLED_JSON")),
    ("fleet local --steps-per-round 2^32 advises no --steps beyond the maximum", ["fleet",
     "local", "M", "--build", "FLEET_FW", "--native", "FLEET_FW", "--images", "IMG", "-o",
     "ROOT/fleet", "--steps-per-round", "4294967296"], ("21474836480 steps",
     "fewer --rounds or --steps-per-round"), ()),
    ("--as-library with --record-scalars says drop it", BUILD + ["--target", "stm32f746",
     "--as-library", "--train", "full", *FIXED, "--record-scalars", "--estimator", "wp",
     "--steps", "100"],  # the cosine schedule's replay needs T, refused before
     ("drop --record-scalars",), ()),
]


@pytest.mark.parametrize("name, args, words, unchanged", ROWS, ids=[r[0] for r in ROWS])
def test_issue_62_rows(workspace, capsys, name, args, words, unchanged):
    before = {key: _digest(workspace[key]) for key in unchanged}
    listing = sorted(p.name for p in workspace["ROOT"].iterdir())
    code = main(_argv(args, workspace))
    assert_refused(code, capsys.readouterr().err, words)
    assert {key: _digest(workspace[key]) for key in unchanged} == before
    assert sorted(p.name for p in workspace["ROOT"].iterdir()) == listing


@pytest.mark.parametrize("words", [("add no",), ("--steps 2147", "or more")])
def test_old_wordings_are_gone(workspace, capsys, words):
    """The as-library refusal said "add no --record-scalars"; the fleet advised a --steps
    beyond its maximum."""
    for args in (ROWS_BY_NAME["--as-library with --record-scalars says drop it"],
                 ROWS_BY_NAME["fleet local --steps-per-round 2^32 advises no --steps beyond "
                              "the maximum"]):
        main(_argv(args, workspace))
        err = capsys.readouterr().err
        assert not all(word in err for word in words), err


ROWS_BY_NAME = {name: args for name, args, _, _ in ROWS}


def test_resuming_a_finished_run_says_so(workspace, tmp_path, capsys):
    """Resuming a run at its last step printed "loss nan -> nan"."""
    args = ["simulate", str(workspace["M"]), "--data", str(workspace["D"]), "-o",
            str(tmp_path / "run"), "--steps", "2", "--queries", "2", *FIXED]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args + ["--resume"]) == 0
    err = capsys.readouterr().err
    assert "nan" not in err and "had finished (step 2 of 2): no steps left" in err, err


def test_an_onnx_model_trained_with_the_defaults_exports_to_onnx(tmp_path, capsys):
    """--scales is on by default where it applies, but export cannot write trained scales into
    an ONNX model: an ONNX run with the defaults could not be exported, and nothing said so
    before training. ONNX models train no scales by default."""
    model = FIXTURES / "onnx_qdq_int8.onnx"
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "d.npz", x=rng.normal(0, 1, (8, 3, 16, 16)).astype(np.float32),
             y=rng.integers(0, 10, 8))
    assert main(["simulate", str(model), "--data", str(tmp_path / "d.npz"), "-o",
                 str(tmp_path / "run"), "--steps", "2", "--queries", "2", *FIXED,
                 "--layers", "0"]) == 0  # (the FC layer's bias is computed: not exportable)
    assert main(["export", str(model), str(tmp_path / "run" / "checkpoint.bin"), "-o",
                 str(tmp_path / "tuned.onnx")]) == 0, capsys.readouterr().err
    capsys.readouterr()


@pytest.mark.usefixtures("module_build_cache")
def test_card_read_says_what_a_field_run_did_not_measure_or_lost(tmp_path, capsys):
    """A field run stopped before its first measurement printed "last test accuracy 0 of 40
    (0.0%)"; one whose two checkpoint copies are damaged read as "no checkpoint yet", exit 0."""
    from test_field import LR_AUTO, _boot, _native, _pack
    from zocodegen.formats import field
    from zocodegen.formats.image import SECTOR_BYTES, read_header
    image = _pack(tmp_path, "digits", False)
    exe = _native(LR_AUTO)
    stopped = tmp_path / "stopped.img"  # a damaged test record: stopped at the first evaluation
    raw = bytearray(image.read_bytes())
    raw[read_header(image).record_lba("test", 0) * SECTOR_BYTES] ^= 0xFF
    stopped.write_bytes(bytes(raw))
    assert _boot(exe, stopped).returncode == 1
    assert main(["card", "read", str(stopped), "-o", str(tmp_path / "r1")]) == 0
    out = capsys.readouterr().out
    assert "accuracy 0 of 40" not in out and "no test accuracy measured" in out, out
    done = tmp_path / "done.img"  # a completed run, both copies of its checkpoint damaged
    shutil.copy(image, done)
    assert _boot(exe, done).returncode == 0
    start = read_header(done).checkpoint_lba * SECTOR_BYTES
    raw = bytearray(done.read_bytes())
    area = raw[start:start + read_header(done).checkpoint_sectors * SECTOR_BYTES]
    slot = field.read_area(bytes(area)).status.slot * SECTOR_BYTES
    for k in (field.RUN, field.RUN_COPY):
        raw[start + k * slot + 64] ^= 0xFF
    done.write_bytes(bytes(raw))
    code = main(["card", "read", str(done), "-o", str(tmp_path / "r2")])
    assert_refused(code, capsys.readouterr().err, ("done.img", "both copies", "damaged"))
    assert not (tmp_path / "r2").exists() and done.read_bytes() == bytes(raw)
