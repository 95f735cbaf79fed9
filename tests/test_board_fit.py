"""`inspect MODEL --target BOARD` answers "can I train this on my board?" (issue 49): its
fit lines are the build's own plans, and its step-time estimate (zocodegen/board_fit.py,
no QEMU) is within 15 % of what `device-time` measures under QEMU -icount."""
from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from conftest import FIXTURES
from zocodegen import api
from zocodegen.board_fit import clock_hz, step_instructions
from zocodegen.cli import main
from zocodegen.codegen.fit import fit
from zocodegen.codegen.project import BuildOptions, plan_project
from zocodegen.frontends import load_model
from zocodegen.planner import BudgetError
from zocodegen.training.config import BLOCKS_FIT, TrainConfig

DIGITS = FIXTURES / "digits_cnn.tflite"
SCALE = FIXTURES / "scale_model.tflite"  # the MCUNet-class model of docs/scale.md
#: A training step's instructions under QEMU -icount at Q = 2 and Q = 3, as `device-time`
#: measures them (host/device_time.py step_instructions; measured 2026-11-28, adaptive on
#: the working tree of a1c096c, the default np-channel on that of 45c5eee): device-time's
#: step at Q is q2 + (q3 - q2)(Q - 2).
ADAPTIVE = {"estimator": "adaptive"}
MEASURED = [(DIGITS, "stm32f746", ADAPTIVE, 1_233_240, 1_525_840),
            (DIGITS, "stm32f746", {"batch": 2, **ADAPTIVE}, 2_146_640, 2_728_800),
            (SCALE, "stm32f746", {"mode": "sparse", "block": 0, **ADAPTIVE}, 465_698_920,
             666_377_600),
            (SCALE, "stm32f746", {"mode": "sparse", "block": 2, **ADAPTIVE}, 32_853_360,
             35_485_480),
            (SCALE, "stm32h7b3", ADAPTIVE, 547_052_600, 765_241_480),
            (DIGITS, "stm32f746", {}, 1_223_840, 1_420_440),
            (DIGITS, "stm32f746", {"batch": 2}, 2_149_000, 2_543_040),
            (SCALE, "stm32f746", {"mode": "sparse", "block": 0}, 458_771_000, 650_389_440),
            (SCALE, "stm32f746", {"mode": "sparse", "block": 2}, 32_913_400, 35_575_600),
            (SCALE, "stm32h7b3", {}, 540_372_280, 749_624_400)]
HAVE_QEMU = bool(shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm"))


def _estimate(model, board: str, config: TrainConfig) -> float:
    """The estimated instructions of one step of ``config`` built for ``board``."""
    device, options = fit(load_model(model), BuildOptions("native", board, config))
    return step_instructions(device, plan_project(device, options).training)


@pytest.mark.parametrize("model,board,options,q2,q3", MEASURED,
                         ids=[f"{m.stem}-{b}-{'-'.join(map(str, o.values())) or 'full'}"
                              for m, b, o, *_ in MEASURED])
def test_step_estimate_is_within_15_percent_of_device_time(model, board, options, q2, q3):
    for queries in (50, 20):
        measured = q2 + (q3 - q2) * (queries - 2)
        estimate = _estimate(model, board, TrainConfig(queries=queries, **options))
        assert abs(estimate / measured - 1) < 0.15, (queries, estimate, measured)


@pytest.mark.parametrize("model,modes", [(DIGITS, ("full", "full", "sparse")),
                                         (SCALE, ("sparse", None, "sparse"))],
                         ids=["digits", "scale"])
def test_fit_lines_are_the_builds_plans(model, modes):
    """Each line's SRAM is the plan `build --target stm32f746 --train MODE` makes (or the
    build refuses what the line says does not fit); the mode it answers is `--train
    auto`'s, the one `simulate --target` trains."""
    found = api.inspect(model, target="stm32f746").board_fit
    auto, fitting_full, fitting_sparse = modes
    assert found.chosen.mode == auto
    # the command line's run: the guard, --lr auto and the scales on
    run = TrainConfig(mode="auto", blocks=BLOCKS_FIT, guard=True, lr_auto=True, scales=True)
    graph = load_model(model)
    for line in found.modes:
        train = None if line.mode == "inference" else replace(run, mode=line.mode)
        options = BuildOptions("stm32f746", "stm32f746", train)
        if line.fits:
            device, options = fit(graph, options)
            plan = plan_project(device, options)
            assert line.sram_bytes == plan.placement.total
            assert line.flash_data_bytes == plan.code.flash_bytes
        else:
            with pytest.raises(BudgetError):
                plan_project(*fit(graph, options))
    assert [m.fits for m in found.modes[1:]] == [fitting_full is not None,
                                                 fitting_sparse is not None]
    _, chosen = fit(graph, BuildOptions("stm32f746", "stm32f746", run))
    assert chosen.train.mode == auto


def test_inspect_target_answers_first(capsys):
    assert main(["inspect", str(SCALE), "--target", "stm32f746"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("trains on the stm32f746: sparse training fits"), lines[0]
    assert "full" in lines[2] and "DOES NOT FIT" in lines[2]
    assert any("a step at Q = 50" in line for line in lines[:7])
    assert main(["inspect", str(SCALE), "--target", "stm32f746", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["board_fit"]
    assert data["train_auto"] == "sparse"
    assert [m["mode"] for m in data["modes"]] == ["inference", "full", "sparse"]


@pytest.mark.skipif(not HAVE_QEMU, reason="needs arm-none-eabi-gcc and qemu-system-arm")
def test_step_estimate_against_a_fresh_measurement():
    """The estimate against device-time's own measurement of the digits CNN's default step
    on the F746 (two QEMU runs of a few seconds, the builds cached)."""
    from zocodegen.host.device_time import step_seconds
    config = TrainConfig()
    measured = step_seconds(DIGITS, "stm32f746", config)
    estimate = _estimate(DIGITS, "stm32f746", config) / clock_hz("stm32f746")
    assert abs(estimate / measured - 1) < 0.15, (estimate, measured)
