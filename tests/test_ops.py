"""The op table (zocodegen/ops/table.py, docs/layout.md): every row keeps the rules a stage
relies on, every kernel a generator calls exists in C, and the planner asks the row rather
than a list of op names of its own."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES
from zocodegen.codegen.model_code import model_code
from zocodegen.frontends import load_model
from zocodegen.ir import Graph, Op, Quantization, Tensor
from zocodegen.ops import table
from zocodegen.ops.table import OP_TYPES, OPS, TRAINABLE_OP_TYPES
from zocodegen.planner import allows_in_place, plan_arena
from zocodegen.planner.patches import patchable
from zocodegen.planner.scratch import kernel_scratch

REPO = Path(__file__).resolve().parents[1]
DESIGN_ORDER = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "MUL",
                "AVERAGE_POOL_2D", "MAX_POOL_2D", "MEAN", "PAD", "RESHAPE", "TRANSPOSE",
                "CONCATENATION", "SOFTMAX", "LOG_SOFTMAX", "RESIZE_NEAREST_NEIGHBOR", "QUANTIZE",
                "DEQUANTIZE")
MODELS = ("digits_cnn.tflite", "digits_resnet.tflite", "edge_ops.tflite", "multi_op.tflite",
          "mcunet_tiny.tflite", "onnx_qdq_int8.onnx", "onnx_qop_uint8.onnx")


def test_the_table_has_design_md_ops_in_order():
    assert OP_TYPES == DESIGN_ORDER
    assert TRAINABLE_OP_TYPES == ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")


@pytest.mark.parametrize("name", DESIGN_ORDER)
def test_a_row_keeps_the_rules_stages_rely_on(name):
    row = OPS[name]
    assert row.name == name and all(isinstance(o, str) for o in row.options)
    assert callable(row.output_shape) and callable(row.reference) and callable(row.generate)
    if row.trainable:  # zeroth-order and BP training both need these
        assert row.pre_activation is not None and row.backward is not None
        assert row.macs is not table.OPS["ADD"].macs  # a weighted op counts its MACs
    if row.ring_rows is not None:
        assert row.in_place is not None  # a ring is a way of running in place
    if row.backward is not None:
        assert re.fullmatch(r"ZO_BP_[A-Z_]+", row.backward)


def _declared_kernels() -> set[str]:
    header = (REPO / "templates" / "kernels" / "zo_kernels.h").read_text()
    return set(re.findall(r"\b(zo_\w+)\s*\(", header))


def test_every_kernel_a_generator_calls_is_declared_in_c():
    declared = _declared_kernels()
    seen: set[str] = set()
    for name in MODELS:
        graph = load_model(FIXTURES / name)
        code = model_code(graph, plan_arena(graph))
        for layer in code.layers:
            seen.add(layer.op_type)
            for call in layer.calls:
                assert call.function in declared, (name, layer.op_type, call.function)
    # every row is exercised: a new op comes with a fixture model that contains it
    assert seen == set(OP_TYPES), sorted(set(OP_TYPES) - seen)


def _conv_graph() -> Graph:
    """A 3x3 CONV_2D that keeps its size: scratch, in place through a ring, patchable."""
    q = Quantization(np.array([0.05], np.float32), np.array([0]))
    tensors = {
        "x": Tensor("x", (1, 6, 6, 2), np.dtype(np.int8), q),
        "w": Tensor("w", (2, 3, 3, 2), np.dtype(np.int8), q, np.ones((2, 3, 3, 2), np.int8)),
        "y": Tensor("y", (1, 6, 6, 2), np.dtype(np.int8), q),
    }
    op = Op("CONV_2D", "conv", ("x", "w"), ("y",),
            {"stride": (1, 1), "dilation": (1, 1), "padding": (1, 1, 1, 1),
             "activation": "NONE"})
    return Graph("g", "tflite", tensors, [op], ["x"], ["y"])


def test_the_planner_asks_the_row(monkeypatch):
    graph = _conv_graph()
    op = graph.ops[0]
    assert kernel_scratch(graph)[0] == OPS["CONV_2D"].scratch_bytes(graph, op)
    assert allows_in_place(graph, op) and patchable(graph, op)
    changed = dataclasses.replace(OPS["CONV_2D"], scratch_bytes=lambda g, o: 1234,
                                  in_place=None, ring_rows=None, window=None)
    monkeypatch.setitem(OPS, "CONV_2D", changed)
    assert kernel_scratch(graph) == {0: 1234}
    assert not allows_in_place(graph, op)
    assert not patchable(graph, op)
