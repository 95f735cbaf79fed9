"""Sparse training (issue 6, DESIGN.md section 4.5): blocks of nearly equal parameter bytes,
the block trials and their choice in the simulator, and the firmware's command B doing the
same trials through the host link: the chosen block, the trial results and the final
checkpoint are the simulator's, byte for byte."""
from __future__ import annotations

import itertools
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES
from zocodegen.cli import main
from zocodegen.datasets import digits_npz
from zocodegen.frontends import load_model
from zocodegen.training import checkpoint, simulator
from zocodegen.training.config import TrainConfig
from zocodegen.training.plan import partition_blocks, sparse_blocks, training_plans

HAVE_QEMU = bool(shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm"))
NEEDS_QEMU = pytest.mark.skipif(not HAVE_QEMU, reason="needs arm-none-eabi-gcc and "
                                                      "qemu-system-arm (scripts/setup.sh)")
MODEL = FIXTURES / "digits_cnn.tflite"
#: Options where the trials disagree and a block other than 0 wins (block 3, +1; with the
#: adaptive estimator, the default when they were chosen).
TRAIN = ["--train", "sparse", "--steps", "10", "--queries", "20", "--lr", "0.01", "--no-guard",
         "--trial-samples", "64", "--estimator", "adaptive"]
SIMULATE = TRAIN  # the same options: build and simulate share their names
#: A shorter run for QEMU, where every instruction is emulated.
TRAIN_QEMU = ["--train", "sparse", "--steps", "4", "--queries", "6", "--lr", "0.003", "--no-guard",
              "--trial-samples", "8"]


@given(st.lists(st.integers(1, 50), min_size=1, max_size=9), st.integers(1, 5))
@settings(max_examples=150, deadline=None)
def test_partition_is_consecutive_and_optimal(sizes, blocks):
    """Consecutive, non-empty, covering; and no split into that many blocks has a smaller
    largest block (brute force over every cut)."""
    bounds = partition_blocks(sizes, blocks)
    assert bounds[0][0] == 0 and bounds[-1][1] == len(sizes)
    assert all(a < b for a, b in bounds)
    assert all(bounds[k][1] == bounds[k + 1][0] for k in range(len(bounds) - 1))
    assert len(bounds) == min(blocks, len(sizes))
    worst = max(sum(sizes[a:b]) for a, b in bounds)
    best = min(
        max(sum(sizes[a:b]) for a, b in zip((0,) + cuts, cuts + (len(sizes),)))
        for cuts in itertools.combinations(range(1, len(sizes)), len(bounds) - 1))
    assert worst == best


def test_blocks_balance_parameter_bytes():
    """mcunet_tiny's blocks: 4 consecutive groups, the largest no bigger than needed."""
    graph = load_model(FIXTURES / "mcunet_tiny.tflite")
    blocks = sparse_blocks(graph, TrainConfig(mode="sparse"))
    assert len(blocks) == 4
    assert [i for b in blocks for i in b] == list(range(sum(len(b) for b in blocks)))
    plans = training_plans(graph, TrainConfig(mode="sparse"))
    sizes = [p.parameter_bytes for p in plans]
    total = sum(sizes)
    assert max(sizes) < total / 2, sizes
    # a fixed block is the same plan as that block of --block auto
    fixed = training_plans(graph, TrainConfig(mode="sparse", block=2))
    assert [l.op_index for l in fixed[0].layers] == [l.op_index for l in plans[2].layers]


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    """The corrupted digits packed for the model (the README experiment's data)."""
    root = tmp_path_factory.mktemp("digits")
    graph = load_model(MODEL)
    digits_npz(root / "digits.npz", graph.tensor(graph.inputs[0]).quant)
    assert main(["pack", str(root / "digits.npz"), "-o", str(root / "digits.img"),
                 "--model", str(MODEL)]) == 0
    return root / "digits.img"


def _simulate(run: Path, image: Path, train: list[str], every: int) -> Path:
    assert main(["simulate", str(MODEL), "--data", str(image), "-o", str(run), "--train",
                 *train[1:], "--eval-every", str(every)]) == 0
    return run


@pytest.fixture(scope="module")
def small_image(tmp_path_factory, image) -> Path:
    """40 training and 20 test records of the digits: QEMU measures accuracy record by
    record over the link."""
    root = image.parent
    arrays = dict(np.load(root / "digits.npz"))
    np.savez(root / "small.npz", x=arrays["x"][:40], y=arrays["y"][:40],
             x_test=arrays["x_test"][:20], y_test=arrays["y_test"][:20])
    assert main(["pack", str(root / "small.npz"), "-o", str(root / "small.img"),
                 "--model", str(MODEL)]) == 0
    return root / "small.img"


@pytest.fixture(scope="module")
def simulated(tmp_path_factory, image) -> Path:
    return _simulate(tmp_path_factory.mktemp("sim") / "run", image, TRAIN, 5)


def test_simulator_selects_the_best_block_then_trains_it(tmp_path, image, simulated):
    """run.json holds the trial results; the block with the lowest held-out loss wins;
    training it from the flash parameters is exactly the `--block K` run."""
    selection = json.loads((simulated / "run.json").read_text())["selection"]
    losses = selection["loss_q16"]
    assert selection["block"] == int(np.argmin(losses)) != 0
    assert len(set(losses)) == len(losses), "the trials should disagree on this data"
    fixed = tmp_path / "fixed"
    assert main(["simulate", str(MODEL), "--data", str(image), "-o", str(fixed), *SIMULATE,
                 "--block", str(selection["block"])]) == 0
    assert (fixed / "checkpoint.bin").read_bytes() == \
        (simulated / "checkpoint.bin").read_bytes()


def test_trials_restore_the_original_parameters(image):
    """Each trial starts from the flash parameters: trials run alone or after the others
    give the same held-out count."""
    graph = load_model(MODEL)
    from zocodegen.training.data import load_dataset
    data = load_dataset(image, graph, 10)
    config = TrainConfig(steps=10, queries=20, lr=0.003, mode="sparse", trial_samples=32)
    plans = training_plans(graph, config)
    together = simulator.select_block(graph, plans, data.x, data.y)
    alone = [simulator.select_block(graph, (plan,), data.x, data.y).correct[0]
             for plan in plans]
    assert list(together.correct) == alone


def _simulated_lines(selection: dict) -> str:
    """The simulator's trial lines, from what its run.json kept of them."""
    from zocodegen.training.guard import Score
    from zocodegen.training.runner import trial_line
    chosen = simulator.BlockSelection(
        selection["samples"], selection["held_out"],
        Score(selection["baseline_correct"], selection["baseline_loss_q16"]),
        tuple(map(Score, selection["correct"], selection["loss_q16"])))
    return "\n".join(trial_line(k, chosen, s) for k, s in enumerate(chosen.scores))


def _trial_lines(text: str) -> list[tuple[str, ...]]:
    """(block, baseline correct, correct, baseline mean loss, mean loss) per trial line."""
    return re.findall(r"block (\d+): \d+ trial records; held-out (\d+) -> (\d+) of \d+ "
                      r"correct, mean loss ([\d.]+) -> ([\d.]+)", text)


@pytest.mark.parametrize("engine", [pytest.param("native", id="native"),
                                    pytest.param("qemu", id="qemu-256KB", marks=NEEDS_QEMU)])
@pytest.mark.parametrize("scales", [pytest.param([], id="biases"),
                                    pytest.param(["--estimator", "np-channel", "--scales"],
                                                 id="scales")])
def test_device_selects_and_trains_like_the_simulator(engine, scales, tmp_path, image,
                                                      small_image, simulated, capsys):
    """Firmware built for the 256 KB budget (QEMU: the linker holds it) runs command B:
    the same trial counts, the same block, then a checkpoint byte-identical to the
    simulator's; resuming loads the checkpoint into its block without new trials. With
    --scales the trained block's layers run through parameters aimed at its SRAM
    multipliers, and every other block's at flash."""
    train = (TRAIN if engine == "native" else TRAIN_QEMU) + scales
    if engine == "qemu":
        image = small_image
    if engine == "qemu" or scales:
        simulated = _simulate(tmp_path / "sim", image, train, 2)
    capsys.readouterr()
    project = tmp_path / "fw"
    assert main(["build", str(MODEL), "--target", engine, "--emulate", "stm32f746", *train,
                 "-o", str(project)]) == 0
    run = tmp_path / "run"
    half = str(int(train[train.index("--steps") + 1]) // 2)
    assert main(["train", f"--{engine}", str(project), "--image", str(image), "-o", str(run),
                 "--steps", half, "--checkpoint-every", half]) == 0
    out = capsys.readouterr().out
    selection = json.loads((simulated / "run.json").read_text())["selection"]
    assert _trial_lines(out) == _trial_lines(_simulated_lines(selection)) != []
    assert json.loads((run / "run.json").read_text())["block"] == selection["block"]
    assert checkpoint.load(run / "checkpoint.bin").step == int(half)
    # a second invocation continues the run from its checkpoint: no trials again
    assert main(["train", f"--{engine}", str(project), "--image", str(image), "-o", str(run),
                 "--checkpoint-every", half]) == 0
    assert _trial_lines(capsys.readouterr().out) == []
    assert (run / "checkpoint.bin").read_bytes() == (simulated / "checkpoint.bin").read_bytes()


def test_training_before_selection_is_refused(tmp_path, image, capsys):
    """A host that skips B gets the firmware's own status, named."""
    from zocodegen.projects import cached_build
    from zocodegen.host.devices import Firmware
    from zocodegen.formats.link import Command, train
    from zocodegen.formats.status import code
    from zocodegen.host.devices import LaunchedDevice
    from zocodegen.host.blocks import ImageBlocks
    from zocodegen.host.link.server import DeviceSession, HostLink

    config = TrainConfig(steps=4, queries=2, mode="sparse", trial_samples=4)
    device = LaunchedDevice(Firmware("native", cached_build(MODEL, "native", train=config),
                                     icount=False))
    blocks = ImageBlocks(image)
    try:
        session = DeviceSession(HostLink(device.connect(), 20), blocks)
        session.hello()
        assert session.identity.selects_block
        assert session.run(Command.OPEN.value).done.status == 0
        assert session.run(train(1)).done.status == code("ZO_TRAIN_ERR_NO_BLOCK")
        assert session.run(Command.SAVE.value).done.status == code("ZO_TRAIN_ERR_NO_BLOCK")
        done = session.run(Command.SELECT.value).done
        assert done.status == 0 and 0 <= done.value < 4
        assert session.run(train(1)).done.status == 0
        device.finish(session)
    finally:
        device.close()
        blocks.close()


def test_one_training_record_is_refused_before_the_trials(tmp_path, capsys):
    """Block trials need a trial and a held-out record: one line, exit 2, on the host."""
    graph = load_model(MODEL)
    x = np.zeros((1,) + tuple(graph.tensor(graph.inputs[0]).shape[1:]), np.int8)
    np.savez(tmp_path / "one.npz", x=x, y=np.zeros(1, np.int64))
    assert main(["pack", str(tmp_path / "one.npz"), "-o", str(tmp_path / "one.img"),
                 "--model", str(MODEL)]) == 0
    project = tmp_path / "fw"
    assert main(["build", str(MODEL), "--target", "native", "--train", "sparse", "--no-guard",
                 "--lr", "0.01", "-o", str(project)]) == 0
    capsys.readouterr()
    assert main(["train", "--native", str(project), "--image", str(tmp_path / "one.img"),
                 "-o", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "1 train record" in err and "Traceback" not in err
    assert not (tmp_path / "run" / "checkpoint.bin").exists()
