"""Every option acts or is refused (issue 62): a walk over every command's options. Each
option the parser defines is either flipped here, one at a time, on its command's cheapest
invocation (with the options it needs, its context), or listed in EXEMPT with the reason it
writes nothing different (it only prints, only changes speed, needs a device, or names the
command's own input or output). A flipped option must change what the command writes, or
be refused in one line; so must the same option without its context. A new option fails
test_every_option_is_walked_or_exempt until it is placed here.

What is compared is what the command writes, not its record of the options it was given:
simulate's checkpoints, metrics.csv, confusion.csv and run.json without its "config"; every
file of a build but manifest.json; pack's image; infer's outputs.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import FIXTURES
from zocodegen import datasets
from zocodegen.cli import main
from zocodegen.frontends import load_model
from zocodegen.training.folders import InputSpec
from zocodegen.cli_options import build_parser

DIGITS = FIXTURES / "digits_cnn.tflite"  # 8x8x1 int8 in, 10 classes
FLOAT_IN = FIXTURES / "onnx_qdq_int8.onnx"  # float32 (3, 16, 16) in, then QuantizeLinear

#: command -> its cheapest invocation that writes something (tokens grouped per option, so a
#: flip's context can drop one); OUT is replaced by a fresh output per run
BASE: dict[str, list[tuple[str, ...]]] = {
    "simulate": [("M",), ("--data", "D"), ("-o", "OUT"), ("--steps", "4"), ("--queries", "2"),
                 ("--lr", "0.01"), ("--guard-every", "2")],
    "build": [("M",), ("--target", "native"), ("-o", "OUT")],
    "pack": [("PICS",), ("-o", "OUT"), ("--model", "M")],
    "infer": [("M",), ("--input", "PHOTO"), ("--output", "OUT")],
}
TRAIN = [("--train", "full")]
INT8 = [("--estimator", "int8")]
SPARSE = [("--train", "sparse")]
SPLIT = [("--estimator", "split"), ("--lr", "0.1")]  # at 0.01 its 4 steps round to zero

#: (command, option) -> (the flip, its context, options of the base the context drops)
FLIPS: dict[tuple[str, str], tuple[list[str], list[tuple[str, ...]], tuple[str, ...]]] = {
    ("simulate", "--target"): (["--target", "stm32f746"], [], ()),
    ("simulate", "--train"): (["--train", "sparse"], [], ()),
    ("simulate", "--eval-every"): (["--eval-every", "2"], [], ()),
    ("simulate", "--steps"): (["--steps", "5"], [], ()),
    # one epoch is the default length: two must differ
    ("simulate", "--epochs"): (["--epochs", "2"], [], ("--steps",)),
    ("simulate", "--lr"): (["--lr", "0.02"], [], ()),
    ("simulate", "--guard-every"): (["--guard-every", "1"], [], ()),
    ("simulate", "--r-max"): (["--r-max", "3"], INT8, ("--lr",)),
    ("simulate", "--p-zero"): (["--p-zero", "0.1"], INT8, ("--lr",)),
    ("simulate", "--b-zo"): (["--b-zo", "3"], INT8, ("--lr",)),
    ("simulate", "--b-bp"): (["--b-bp", "3"], INT8 + [("--bp-layers", "1")], ("--lr",)),
    ("simulate", "--cutoff"): (["--cutoff", "1"], SPLIT, ()),
    ("simulate", "--inner-queries"): (["--inner-queries", "3"], SPLIT, ()),
    ("simulate", "--blocks"): (["--blocks", "2"], SPARSE + [("--block", "0")], ()),
    ("simulate", "--block"): (["--block", "1"], SPARSE, ()),
    ("simulate", "--trial-samples"): (["--trial-samples", "8"], SPARSE, ()),
    ("simulate", "--trial-held-out"): (["--trial-held-out", "8"], SPARSE, ()),
    ("build", "--emulate"): (["--emulate", "stm32h7b3"], [], ()),
    ("build", "--as-library"): (["--as-library"], [("--target", "stm32f746")], ("--target",)),
    ("build", "--train"): (["--train", "full"], [], ()),
    ("build", "--data-source"): (["--data-source", "sdcard"], TRAIN, ()),
    ("build", "--recompute"): (["--recompute", "on"], [("M_PATCH",)] + TRAIN
                               + [("--estimator", "wp")], ("M",)),
    ("build", "--patches"): (["--patches", "on"], [("M_PATCH",)], ("M",)),
    ("build", "--input-quantize"): (["--input-quantize", "host"], [("M_FLOAT",)], ("M",)),
    ("build", "--baud"): (["--baud", "9600"], [("--target", "stm32f746")], ("--target",)),
    ("build", "--r-max"): (["--r-max", "3"], TRAIN + INT8, ()),
    ("build", "--p-zero"): (["--p-zero", "0.1"], TRAIN + INT8, ()),
    ("build", "--b-zo"): (["--b-zo", "3"], TRAIN + INT8, ()),
    ("build", "--b-bp"): (["--b-bp", "3"], TRAIN + INT8 + [("--bp-layers", "1")], ()),
    ("build", "--cutoff"): (["--cutoff", "1"], TRAIN + [("--estimator", "split")], ()),
    ("build", "--inner-queries"): (["--inner-queries", "3"], TRAIN
                                   + [("--estimator", "split")], ()),
    ("build", "--blocks"): (["--blocks", "2"], [("--train", "sparse")], ()),
    ("build", "--block"): (["--block", "1"], [("--train", "sparse")], ()),
    ("build", "--trial-samples"): (["--trial-samples", "8"], [("--train", "sparse")], ()),
    ("build", "--trial-held-out"): (["--trial-held-out", "8"], [("--train", "sparse")], ()),
    # a replay rebuilds the cosine schedule from the build's T: --steps given
    ("build", "--record-scalars"): (["--record-scalars"], TRAIN + [
        ("--estimator", "wp"), ("--no-guard",), ("--lr", "0.01"), ("--steps", "4")], ()),
    ("build", "--query-batch"): (["--query-batch", "2"], TRAIN + [("--no-scales",)], ()),
    ("pack", "--shuffle"): (["--shuffle", "1"], [], ()),
    ("pack", "--checkpoint-kb"): (["--checkpoint-kb", "64"], [], ()),
    ("pack", "--val-fraction"): (["--val-fraction", "0.6"], [], ()),
    # the 36 pictures cannot spare 16 held-out records; the 200 digits of DATA.npz hold
    # none out unless asked, and 0.1 of what val leaves is 18
    ("pack", "--held-out-fraction"): (["--held-out-fraction", "0.1"], [("D",)], ("PICS",)),
    ("pack", "--labels"): (["--labels", "LABELS"], [], ()),
    ("pack", "--normalize"): (["--normalize=-1..1"], [], ()),
    ("pack", "--resize"): (["--resize", "stretch"], [], ()),
    ("pack", "--preprocess"): (["--preprocess", "HOOK"], [], ()),
    ("pack", "--classes"): (["--classes", "2,1,0"], [], ()),
    ("infer", "--data"): (["--data", "IMG_0255"], [], ()),
    # a build trains at Q = 50 (52 ms a step on the default board): 0.2 s is 3 steps
    ("build", "--budget"): (["--budget", "0.2s"], TRAIN, ()),
}
#: The training options a build takes with --train full, flipped as simulate's
_TRAINING = {"--queries": ["--queries", "3"], "--batch": ["--batch", "2"],
             "--no-guard": ["--no-guard"], "--guard-samples": ["--guard-samples", "17"],
             "--schedule": ["--schedule", "constant"], "--seed": ["--seed", "2"],
             "--estimator": ["--estimator", "wp"], "--perturbation": ["--perturbation",
                                                                      "pool:255"],
             "--distribution": ["--distribution", "uniform"], "--scales": ["--no-scales"],
             "--two-sided": ["--two-sided"], "--max-step": ["--max-step", "1"],
             "--no-scaling": ["--no-scaling"], "--no-gnorm-scaling": ["--no-gnorm-scaling"],
             "--no-quant-scaling": ["--no-quant-scaling"], "--bp-layers": ["--bp-layers", "1"],
             "--layers": ["--layers", "0"], "--patience": ["--patience", "1"],
             "--budget": ["--budget", "0.01s"]}
for _option, _flip in _TRAINING.items():
    FLIPS.setdefault(("simulate", _option), (_flip, [], ()))
    FLIPS.setdefault(("build", _option), (_flip, TRAIN, ()))
for _option in ("--steps", "--lr", "--guard-every"):
    FLIPS.setdefault(("build", _option), (["--lr", "0.02"] if _option == "--lr" else
                                          [_option, "7"], TRAIN, ()))

#: Options that write nothing different by design, and why.
INPUT_OUTPUT = "the command's own input or output"
EXEMPT: dict[tuple[str, str], str] = {
    **{(c, o): INPUT_OUTPUT for c, o in (
        ("simulate", "model"), ("simulate", "--data"), ("simulate", "--output"),
        ("build", "model"), ("build", "--target"), ("build", "--output"),
        ("pack", "data"), ("pack", "--output"), ("pack", "--model"), ("infer", "model"),
        ("infer", "--input"), ("infer", "--output"), ("inspect", "model"),
        ("export", "model"), ("export", "checkpoint"), ("export", "--output"))},
    ("simulate", "--resume"): "acts on an existing RUN: continues it (test_contract rows)",
    ("simulate", "--force"): "acts on an existing RUN: deletes it first (test_contract rows)",
    ("simulate", "--mode"): "the old spelling of --train, refused by name (suppressed)",
    ("simulate", "--query-batch"): "how many query forwards a device evaluates together: "
                                    "the same run (bit-exact), at another speed; it only "
                                    "turns --scales' default off, which --scales names",
    ("simulate", "--record-scalars"): "refused: the simulator has no device to send sums "
                                      "(test_contract_options)",
    ("build", "--epochs"): "refused: a build cannot count epochs (test_contract's row)",
    **{(c, "--force"): "acts on an existing output: replaces a file that is not the "
                       "command's own (tests/test_contract_outputs.py)"
       for c in ("infer", "pack", "export")},
    ("build", "--force"): "acts on an existing DIR: replaces what a build wrote",
    ("infer", "--preprocess"): "photos only, which infer prints rather than writes: the "
                               "inputs of files packed through a hook, refused for an image "
                               "of decoded photos (test_pack_folders.py's "
                               "test_infer_on_a_folder_packed_through_a_hook)",
    ("infer", "--engine"): "the engines are bit-exact by design: the same outputs, other "
                           "speed (tests/test_codegen_bitexact.py, test_emulated.py)",
    ("infer", "--target"): "the board whose budget a native/qemu build stands for: the same "
                           "outputs (bit-exact), a build that may not fit",
    ("infer", "--patches"): "patch-based inference computes the same outputs (bit-exact, "
                            "tests/test_patches.py) in less SRAM",
    ("infer", "--input-quantize"): "who quantizes the float input: the same outputs "
                                   "(bit-exact), fewer bytes on the link",
    ("inspect", "--target"): "inspect prints only",
    ("inspect", "--json"): "inspect prints only",
    ("inspect", "--layers"): "inspect prints only (test_board_fit: its answer follows them)",
}
#: Commands not walked: each needs a device, firmware running for seconds to minutes, or a
#: fleet of them; or it only prints. Their refusals are rows of tests/test_contract*.py.
COMMANDS_NOT_WALKED = {
    "train": "a device run (firmware for seconds to minutes); tests/test_contract_device.py",
    "monitor": "prints a device's lines only", "flash": "uploads to a board only",
    "replay": "its options are its inputs and output (--check only compares)",
    "device-time": "prints only", "fleet serve": "a Flower server and devices",
    "fleet join": "a Flower device", "fleet local": "a fleet of firmware runs",
    "card write": "--yes only skips a question", "card read": "--force acts on an existing "
                                                              "RUN",
}


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """'build' -> its parser, 'fleet local' -> its parser, ... every leaf command."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(_commands(sub, f"{prefix}{name} "))
    return found or {prefix.strip(): parser}


def _long(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each option's name as the tables write it: its first long spelling (-o ->
    --output), a positional's dest."""
    return {a.dest: next((s for s in a.option_strings if s.startswith("--")), a.dest)
            for a in parser._actions if a.dest not in ("help", "version")}


def test_every_option_is_walked_or_exempt():
    commands = _commands(build_parser())
    unplaced, stale = [], []
    placed = set(FLIPS) | set(EXEMPT)
    for name, parser in commands.items():
        if name in COMMANDS_NOT_WALKED:
            continue
        for option in _long(parser).values():
            if (name, option) not in placed:
                unplaced.append((name, option))
    for command, option in placed:
        if option not in _long(commands[command]).values():
            stale.append((command, option))
    assert set(commands) >= set(COMMANDS_NOT_WALKED)
    assert not unplaced, f"options neither flipped nor exempt (with a reason): {unplaced}"
    assert not stale, f"entries for options the commands do not have: {stale}"


# ----------------------------------------------------------------------------- the walk
@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("walk")
    rng = np.random.default_rng(0)
    # digits that train (random inputs saturate the loss: no update moves a parameter)
    digits = datasets.digits_npz(root / "all.npz", InputSpec.of(load_model(DIGITS)).quant)
    np.savez(root / "d.npz", x=digits["x"][:200], y=digits["y"][:200],
             x_test=digits["x_test"][:40], y_test=digits["y_test"][:40])
    pics = root / "pics"
    for c in range(3):
        (pics / str(c)).mkdir(parents=True)
        for k in range(12):  # 36 images, not square: crop and stretch differ
            Image.fromarray(rng.integers(0, 256, (8, 12), dtype=np.uint8), "L").save(
                pics / str(c) / f"{k}.png")
    (root / "labels.csv").write_text("\n".join(f"{c}/{k}.png,{(c + k) % 3}" for c in range(3)
                                               for k in range(12)))
    (root / "hook.py").write_text("import numpy as np\nfrom PIL import Image\n"
                                  "def f(path):\n"
                                  "    return np.asarray(Image.open(path).resize((8, 8)),"
                                  " np.float32)[..., None] / 255 * 0.5\n")
    assert main(["pack", str(pics), "-o", str(root / "p0255.img"), "--model", str(DIGITS),
                 "--normalize", "0..255"]) == 0
    return {"M": DIGITS, "D": root / "d.npz", "PICS": pics, "LABELS": root / "labels.csv",
            "HOOK": f"{root / 'hook.py'}:f", "PHOTO": pics / "0" / "0.png",
            "IMG_0255": root / "p0255.img", "M_FLOAT": FLOAT_IN,
            "M_PATCH": FIXTURES / "mcunet_tiny.tflite", "ROOT": root}


def _argv(tokens: list[str], ws: dict, out: Path) -> list[str]:
    return [str(out) if t == "OUT" else str(ws.get(t, t)) for t in tokens]


def _invocation(command: str, context: list[tuple[str, ...]], drop: tuple[str, ...]
                ) -> list[str]:
    """The base with its context: a context's option replaces the base's of that name, and a
    model in the context (M_...) replaces the base's model."""
    models = [g for g in context if g[0].startswith("M_")]
    named = {g[0] for g in context}
    groups = [g for g in BASE[command] if g[0] not in drop and g[0] not in named
              and not (models and g[0] == "M")]
    rest = [g for g in context if g not in models]
    return [command] + [t for g in models + groups + rest for t in g]


def _written(command: str, out: Path) -> dict[str, str]:
    """What the command wrote, as name -> digest (not its record of the options)."""
    def digest(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()
    if not out.exists():
        return {}
    if out.is_file():
        return {out.name: digest(out.read_bytes())}
    found = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        rel = str(path.relative_to(out))
        if command == "build" and rel == "manifest.json":
            continue
        if command == "simulate":
            if rel == "run.json":
                record = json.loads(path.read_text())
                for key in ("config", "model", "data"):
                    record.pop(key, None)
                found[rel] = digest(json.dumps(record, sort_keys=True).encode())
            elif rel in ("checkpoint.bin", "best.bin", "metrics.csv", "confusion.csv"):
                found[rel] = digest(path.read_bytes())
            continue
        found[rel] = digest(path.read_bytes())
    return found


_RUNS: dict[tuple[str, ...], tuple[int, dict[str, str], str]] = {}


def _run(argv: list[str], ws: dict, out: Path, capsys) -> tuple[int, dict[str, str], str]:
    """The command's exit status, what it wrote and its stderr; each invocation runs once
    (a reference is shared by the flips of its context)."""
    if tuple(argv) not in _RUNS:
        code = main(_argv(argv, ws, out))
        _RUNS[tuple(argv)] = code, _written(argv[0], out), capsys.readouterr().err
    return _RUNS[tuple(argv)]


OUTPUTS = {"simulate": "run", "build": "fw", "pack": "p.img", "infer": "y.npy"}


@pytest.mark.slow
@pytest.mark.parametrize("command, option", sorted(FLIPS), ids=[f"{c} {o}" for c, o in
                                                                 sorted(FLIPS)])
def test_an_accepted_option_changes_what_the_command_writes(inputs, tmp_path, capsys,
                                                            command, option):
    flip, context, drop = FLIPS[(command, option)]
    reference = _invocation(command, context, drop)
    code, before, err = _run(reference, inputs, tmp_path / "a" / OUTPUTS[command], capsys)
    assert code == 0 and before, (reference, err)
    cases = [(reference, "in its context")]
    if context or drop:
        cases.append((_invocation(command, [], ()), "without its context"))
    for base, where in cases:
        out = tmp_path / where.replace(" ", "_") / OUTPUTS[command]
        code, after, err = _run(base + flip, inputs, out, capsys)
        if code == 2:  # refused: one line naming the option
            assert len(err.strip().splitlines()) == 1 and option in err, (flip, where, err)
            assert where != "in its context", (flip, err)
            continue
        assert code == 0, (flip, where, err)
        base_written = before if where == "in its context" else _run(
            base, inputs, tmp_path / "base" / OUTPUTS[command], capsys)[1]
        assert after != base_written, (f"{command} {' '.join(flip)} ({where}) was accepted "
                                       "and changed nothing the command writes")
