"""Checks that a frontend's graph obeys the IR contract before anything runs it.

Everything downstream (reference kernels, planner, code generator) trusts these facts, so a
malformed or unsupported model fails here with the op and field named instead of crashing
somewhere deep inside a kernel.
"""
from __future__ import annotations

import numpy as np

from ..errors import ModelError, UnsupportedOpError
from ..ir import Graph, Op, Tensor
from ..ops.table import OPS

MAX_ELEMENTS = 1 << 26  # no MCU model has a 64M-element tensor; guards against absurd shapes


def validate(graph: Graph, where: str) -> None:
    if not graph.ops:
        raise ModelError(f"{where}: the graph has no operators")
    available = set(graph.inputs) | {n for n, t in graph.tensors.items() if t.is_constant}
    for name in graph.inputs:
        t = graph.tensor(name)
        if t.dtype not in (np.int8, np.float32):
            raise UnsupportedOpError(f"{where}: input '{name}' has type {t.dtype}; "
                                     "int8 or float32 inputs are supported")
    for t in graph.tensors.values():
        if t.size > MAX_ELEMENTS:
            raise ModelError(f"{where}: tensor '{t.name}' has shape {list(t.shape)}, "
                             f"over {MAX_ELEMENTS} elements")
    for index, op in enumerate(graph.ops):
        at = f"{where}: op {index} {op.type} '{op.name}'"
        row = OPS[op.type]
        missing = set(row.options) - set(op.options)
        if missing:
            raise ModelError(f"{at}: missing options {sorted(missing)}")
        for name in op.inputs:
            if name and name not in available:
                raise ModelError(f"{at}: input '{name}' is used before any op produces it")
        _check_types(graph, op, at)
        _check_shapes(graph, op, at)
        if row.parameters is not None:
            try:
                row.parameters(graph, op)
            except ModelError as exc:
                raise ModelError(f"{where}: {exc}") from None
        available.update(op.outputs)
    for name in graph.outputs:
        if name not in available:
            raise ModelError(f"{where}: graph output '{name}' is never produced")


def _act(graph: Graph, name: str, at: str, role: str) -> Tensor:
    t = graph.tensor(name)
    if t.dtype == np.float32:
        raise UnsupportedOpError(
            f"{at}: {role} '{name}' is float32: the model is not fully integer-quantized; "
            "convert it with full-integer INT8 quantization (TFLite converter with a "
            "representative dataset, or onnxruntime.quantization.quantize_static)")
    if t.dtype != np.int8:
        raise UnsupportedOpError(f"{at}: {role} '{name}' has type {t.dtype}; only int8 "
                                 "activations are supported")
    if t.quant is None or t.quant.per_channel:
        raise ModelError(f"{at}: {role} '{name}' needs per-tensor quantization parameters")
    if not -128 <= t.quant.scalar_zero_point <= 127:
        raise ModelError(f"{at}: {role} '{name}' zero point {t.quant.scalar_zero_point} "
                         "is outside int8")
    return t


def _check_types(graph: Graph, op: Op, at: str) -> None:
    if op.type == "QUANTIZE":
        src = graph.tensor(op.inputs[0])
        if src.dtype == np.int8:
            _act(graph, op.inputs[0], at, "input")
        elif src.dtype != np.float32:
            raise UnsupportedOpError(f"{at}: quantizing from {src.dtype} is not supported")
        _act(graph, op.outputs[0], at, "output")
        return
    if op.type == "DEQUANTIZE":
        _act(graph, op.inputs[0], at, "input")
        if graph.tensor(op.outputs[0]).dtype != np.float32:
            raise UnsupportedOpError(f"{at}: dequantizing to "
                                     f"{graph.tensor(op.outputs[0]).dtype} is not supported")
        return
    if len(op.outputs) != 1:
        raise ModelError(f"{at}: expected one output, got {len(op.outputs)}")
    _act(graph, op.outputs[0], at, "output")
    row = OPS[op.type]
    if row.weights is not None:
        if len(op.inputs) < 2 or not op.inputs[1]:
            raise ModelError(f"{at}: missing weights")
        _act(graph, op.inputs[0], at, "input")
        _check_weights(graph, op, at)
        return
    n_inputs = len(op.inputs) if row.inputs is None else row.inputs
    if len(op.inputs) < n_inputs or not all(op.inputs[:n_inputs]):
        raise ModelError(f"{at}: expected {n_inputs} inputs, got {len(op.inputs)}")
    for name in op.inputs[:n_inputs]:
        _act(graph, name, at, "input")


def _check_weights(graph: Graph, op: Op, at: str) -> None:
    w = graph.tensor(op.inputs[1])
    if w.dtype == np.float32:
        _act(graph, op.inputs[1], at, "weights")  # raises the "not quantized" message
    if w.data is None or w.dtype != np.int8 or w.quant is None:
        raise UnsupportedOpError(f"{at}: weights '{w.name}' must be constant int8 with "
                                 f"quantization parameters (got {w.dtype}, "
                                 f"{'constant' if w.data is not None else 'not constant'})")
    if np.any(w.quant.zero_point != 0):
        raise UnsupportedOpError(f"{at}: weights '{w.name}' are asymmetric (zero point "
                                 f"{int(w.quant.zero_point.flat[0])}); symmetric int8 "
                                 "weights are required")
    layout = OPS[op.type].weights
    rank = layout.rank
    if len(w.shape) != rank:
        raise ModelError(f"{at}: weights '{w.name}' must be {rank}-D, got {list(w.shape)}")
    channel_axis = layout.channel_axis
    if w.quant.per_channel and w.quant.axis != channel_axis:
        raise UnsupportedOpError(f"{at}: weights '{w.name}' are quantized along axis "
                                 f"{w.quant.axis}, expected the output-channel axis "
                                 f"{channel_axis}")
    out_channels = w.shape[channel_axis]
    if len(op.inputs) > 2 and op.inputs[2]:
        b = graph.tensor(op.inputs[2])
        if b.data is None or b.dtype != np.int32 or b.size != out_channels:
            raise UnsupportedOpError(f"{at}: bias '{b.name}' must be constant int32 with "
                                     f"{out_channels} values (got {b.dtype} "
                                     f"{list(b.shape)})")


def _check_shapes(graph: Graph, op: Op, at: str) -> None:
    ins = [graph.tensor(n).shape if n else None for n in op.inputs]
    out = graph.tensor(op.outputs[0]).shape
    expected = OPS[op.type].output_shape(graph, op, ins, out, at)
    if expected is not None and tuple(expected) != tuple(out):
        raise ModelError(f"{at}: output '{op.outputs[0]}' has shape {list(out)}, the op's "
                         f"inputs give {list(expected)}")
