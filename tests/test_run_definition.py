"""One definition of a training run (issue 49): every command names and defaults the TRAIN
options as TrainConfig does, and `simulate MODEL --target T` trains exactly the run
`build MODEL --target T --train MODE` puts on the board: the same TrainConfig (the build's
fit search picks the mode, blocks and every auto choice for both), and a checkpoint byte
for byte the firmware's."""
from __future__ import annotations

import argparse
import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES
from zocodegen.cli import main
from zocodegen.cli_options import build_parser, train_config
from zocodegen.datasets import digits_npz
from zocodegen.frontends import load_model
from zocodegen.host.device_time import recorded_target
from zocodegen.training.config import (BLOCKS_FIT, COMMAND_LINE_QUERIES, LAYERS_FIRST,
                                       TrainConfig)

#: The commands that define a run, and what each option may differ in, with why: build's
#: --train defaults to an inference-only build (simulate has none to run), and build must
#: name its target (a simulation need not fit any board).
RUN_COMMANDS = ("build", "simulate")
DIFFERENCES = {("--train", "default"), ("--target", "required"), ("--target", "choices"),
               ("--train", "choices"), ("--target", "help"), ("--train", "help")}


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Long option -> action, without the hidden ones (an old spelling kept as a refusal)."""
    return {a.option_strings[-1]: a for a in parser._actions
            if a.option_strings and a.help != argparse.SUPPRESS}


def test_no_option_has_two_names_or_two_defaults():
    """An option of build and simulate has one name, one default, one range and one help;
    device-time's --target is the same board list; each TRAIN option's default is
    TrainConfig's."""
    commands = _commands()
    options = {name: _options(commands[name]) for name in RUN_COMMANDS}
    by_dest: dict[str, set[str]] = {}
    for name in RUN_COMMANDS:
        for flag, action in options[name].items():
            by_dest.setdefault(action.dest, set()).add(flag)
    assert {d: f for d, f in by_dest.items() if len(f) > 1} == {}
    shared = options["build"].keys() & options["simulate"].keys()
    assert {"--train", "--target", "--queries", "--steps", "--blocks", "--lr"} <= shared
    for flag in sorted(shared - {"--output", "--force"}):  # a project folder is not a run's
        a, b = options["build"][flag], options["simulate"][flag]
        for what in ("default", "required", "choices", "help", "metavar"):
            if (flag, what) not in DIFFERENCES:
                assert getattr(a, what) == getattr(b, what), (flag, what)
    assert options["simulate"]["--train"].default == "auto"
    assert set(options["simulate"]["--train"].choices) < set(options["build"]["--train"].choices)
    device_time = _options(commands["device-time"])["--target"]
    assert device_time.choices == options["simulate"]["--target"].choices
    # the default run of both commands is TrainConfig's, with the guard, --lr auto, the
    # scales, --layers first and Q = 20 (the command line's defaults, docs/training.md) and
    # the board's choices left to its fit
    run = TrainConfig(mode="auto", blocks=BLOCKS_FIT, guard=True, lr_auto=True, scales=True,
                      layers=LAYERS_FIRST, queries=COMMAND_LINE_QUERIES)
    parser = build_parser()
    model = str(FIXTURES / "digits_cnn.tflite")  # train_config reads its format (ONNX: no scales)
    for argv in (["simulate", model, "--data", "d"], ["build", model, "--target", "stm32f746"]):
        args = parser.parse_args(argv)
        args.train = "auto"  # build's default, none, is an inference build
        assert train_config(args) == run, argv
    assert run.queries == options["build"]["--queries"].default == 20


def test_old_spelling_is_refused_by_name(tmp_path, capsys):
    assert main(["simulate", str(FIXTURES / "digits_cnn.tflite"), "--data", "x.npz",
                 "-o", str(tmp_path / "run"), "--mode", "sparse"]) == 2
    assert "--mode is now --train" in capsys.readouterr().err


def _digits_image(root: Path) -> Path:
    model = FIXTURES / "digits_cnn.tflite"
    graph = load_model(model)
    digits_npz(root / "digits.npz", graph.tensor(graph.inputs[0]).quant)
    assert main(["pack", str(root / "digits.npz"), "-o", str(root / "digits.img"),
                 "--model", str(model)]) == 0
    return root / "digits.img"


def _random_image(root: Path, model: Path, records: int) -> Path:
    """Random records of the model's input, labels of its classes."""
    graph = load_model(model)
    x = graph.tensor(graph.inputs[0])
    rng = np.random.default_rng(0)
    data = rng.integers(-128, 128, size=(records,) + tuple(x.shape[1:])).astype(np.int8)
    classes = graph.tensor(graph.outputs[0]).size
    np.savez(root / "random.npz", x=data, y=np.arange(records) % classes)
    assert main(["pack", str(root / "random.npz"), "-o", str(root / "random.img"),
                 "--model", str(model)]) == 0
    return root / "random.img"


def _config(record: dict) -> dict:
    """The TrainConfig fields of a run.json's config or a manifest's training section."""
    return {f.name: record[f.name] for f in fields(TrainConfig)}


@pytest.mark.parametrize("model,options,mode", [
    # the defaults, a short run: full training fits the F746
    pytest.param("digits_cnn.tflite", ["--steps", "6"], "full", id="digits"),
    # every layer's full training does not fit the F746: sparse in the default blocks, the
    # block chosen on the device (a short run at a small Q: the simulator runs MCUNet's
    # 64x64 layers)
    pytest.param("mcunet_in1.tflite", ["--steps", "2", "--queries", "2", "--no-guard", "--lr",
                                       "0.01", "--layers", "all"], "sparse", id="mcunet_in1"),
    # its default run, the first layers (0-5), fits whole
    pytest.param("mcunet_in1.tflite", ["--steps", "2", "--queries", "2", "--no-guard", "--lr",
                                       "0.01"], "full", id="mcunet_in1-first"),
])
def test_simulate_target_is_the_boards_run(model, options, mode, tmp_path, capsys):
    path = FIXTURES / model
    image = (_digits_image(tmp_path) if model.startswith("digits")
             else _random_image(tmp_path, path, 10))
    sim = tmp_path / "sim"
    assert main(["simulate", str(path), "--data", str(image), "-o", str(sim), "--target",
                 "stm32f746", *options]) == 0
    printed = "".join(capsys.readouterr())
    record = json.loads((sim / "run.json").read_text())
    assert record["target"] == "stm32f746" and record["config"]["mode"] == mode
    assert f"--train auto: {mode}" in printed, printed
    assert recorded_target(sim) == "stm32f746"  # `device-time RUN` needs no --target
    board = tmp_path / "board"
    assert main(["build", str(path), "--target", "stm32f746", "--train", mode, *options,
                 "-o", str(board)]) == 0
    manifest = json.loads((board / "manifest.json").read_text())["training"]
    assert _config(manifest) == _config(record["config"])
    native = tmp_path / "native"
    assert main(["build", str(path), "--target", "native", "--emulate", "stm32f746",
                 "--train", mode, *options, "-o", str(native)]) == 0
    assert _config(json.loads((native / "manifest.json").read_text())["training"]) == \
        _config(record["config"])
    run = tmp_path / "run"
    assert main(["train", "--native", str(native), "--image", str(image), "-o", str(run)]) == 0
    assert (run / "checkpoint.bin").read_bytes() == (sim / "checkpoint.bin").read_bytes()
