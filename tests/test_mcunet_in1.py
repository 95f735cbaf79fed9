"""The MCUNet-in1-class fixture (``tests/fixtures/mcunet_in1.tflite``, built by
``tests/fixtures/generate.py mcunet_in1``): an MCUNet-style classifier of about 0.45 M
parameters whose point is the paper's memory budgets -- full training fits the stm32h7b3 and not
the stm32f746, sparse training (one of four parameter blocks) fits the stm32f746. These tests
pin the architecture and the size down. Bit-exactness (TFLite interpreter == numpy reference
== native C == QEMU, every layer) comes from the shared chains: the fixture is in
``conftest.FIXTURE_TFLITE``.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import FIXTURES
from zocodegen.cli import main
from zocodegen.frontends import load_model
from zocodegen.ops.table import TRAINABLE_OP_TYPES
from zocodegen.planner import plan_arena

MODEL = FIXTURES / "mcunet_in1.tflite"
ARENA_LIMIT = 96 * 1024  # MCUNet-in1's activation budget


@pytest.fixture(scope="module")
def graph():
    return load_model(MODEL)


def trainable(graph):
    return [op for op in graph.ops if op.type in TRAINABLE_OP_TYPES]


def parameters(graph, op) -> int:
    """Weights + biases of a trainable layer (what the estimator perturbs in WP mode)."""
    return sum(graph.tensor(n).size for n in op.inputs[1:3] if n)


def test_parameter_count_and_no_dominant_layer(graph):
    counts = [parameters(graph, op) for op in trainable(graph)]
    total = sum(counts)
    assert 400_000 <= total <= 500_000, total
    # a 4-way consecutive split by parameters can be balanced: no layer holds a quarter
    assert max(counts) <= total // 4, (max(counts), total)
    assert MODEL.stat().st_size < 700_000


def test_mcunet_architecture(graph):
    inp, out = graph.tensor(graph.inputs[0]), graph.tensor(graph.outputs[0])
    assert inp.dtype == np.int8 and inp.shape == (1, 64, 64, 3)
    assert out.dtype == np.int8 and out.shape == (1, 10)
    types = [op.type for op in graph.ops]
    assert set(types) == {"CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "MEAN", "FULLY_CONNECTED",
                          "SOFTMAX"}
    assert types[-3:] == ["MEAN", "FULLY_CONNECTED", "SOFTMAX"]
    stem = graph.ops[0]
    assert stem.type == "CONV_2D" and stem.options["stride"] == (2, 2)
    assert graph.tensor(stem.inputs[1]).shape[1:3] == (3, 3)
    for op in trainable(graph):  # int8 activations, per-channel int8 weights
        w = graph.tensor(op.inputs[1])
        assert w.dtype == np.int8 and w.quant.per_channel, op.name
        assert graph.tensor(op.outputs[0]).dtype == np.int8, op.name
    # inverted residual blocks: 1x1 expand (x3..x6) -> depthwise 3x3/5x5 -> 1x1 project
    blocks = 0
    for k, op in enumerate(graph.ops):
        if op.type != "DEPTHWISE_CONV_2D":
            continue
        blocks += 1
        expand, project = graph.ops[k - 1], graph.ops[k + 1]
        assert expand.type == project.type == "CONV_2D", op.name
        we, wd, wp = (graph.tensor(o.inputs[1]).shape for o in (expand, op, project))
        assert we[1:3] == wp[1:3] == (1, 1), op.name
        assert wd[1] == wd[2] and wd[1] in (3, 5), op.name
        assert we[0] in range(3 * we[3], 6 * we[3] + 1), f"{op.name}: expansion {we[0]}/{we[3]}"
        assert op.options["stride"] in ((1, 1), (2, 2)), op.name
    assert blocks == 14
    assert types.count("ADD") == 8
    assert sum(op.options["stride"] == (2, 2) for op in graph.ops
               if op.type == "DEPTHWISE_CONV_2D") == 4


def test_arena_and_training_memory_budgets(graph, tmp_path, capsys):
    """The fixture's purpose: full training on the stm32h7b3 (all parameters in SRAM), refused
    on the stm32f746 (256 KB), where sparse training of one block fits."""
    assert plan_arena(graph).arena_bytes <= ARENA_LIMIT

    def build(target, train):
        code = main(["build", str(MODEL), "--target", target, "--train", train,
                     "--layers", "all", "-o", str(tmp_path / f"{target}_{train}")])
        return code, capsys.readouterr()

    def sram(target, train):
        report = json.loads((tmp_path / f"{target}_{train}" / "memory_report.json").read_text())
        return report["sram"]

    code, _ = build("stm32h7b3", "full")
    assert code == 0
    full = sram("stm32h7b3", "full")
    assert full["fits"] and 256 * 1024 < full["total_bytes"] <= full["budget_bytes"], full

    code, captured = build("stm32f746", "full")
    assert code == 2, captured.out
    assert "256.0 KB" in captured.err and "trainable parameters" in captured.err, captured.err
    # the refusal names the mode that fits, with what it needs
    assert "sparse training fits: --train sparse (the device picks one of 4 blocks; " \
        in captured.err, captured.err
    code = main(["build", str(MODEL), "--target", "stm32f746", "--train", "sparse",
                 "--blocks", "2", "--layers", "all", "-o", str(tmp_path / "halves")])
    err = capsys.readouterr().err
    # (4 blocks with the default np-channel, 3 with adaptive: the gradient regions live in
    # dead arena bytes, docs/memory.md)
    assert code == 2 and "smaller blocks fit: --train sparse --blocks 4 (" in err, err
    assert "--estimator adaptive --no-scales (it keeps a copy of the weights where CH " \
        "keeps two of the " \
        "outputs) fits as --train sparse --blocks 3 (" in err, err

    code, captured = build("stm32f746", "sparse")
    assert code == 0, captured.err
    sparse = sram("stm32f746", "sparse")
    assert sparse["fits"] and sparse["total_bytes"] <= 256 * 1024, sparse
