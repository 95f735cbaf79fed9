"""SOFTMAX and LOG_SOFTMAX -> zo_softmax.c (parameters from TFLite's Prepare, as the
reference derives them)."""
from __future__ import annotations

import numpy as np

from ...ir import Op
from ...reference.softmax import LogSoftmaxParams, op_params
from .common import Call, LayerCode, LayerContext, fields


def softmax(op: Op, ctx: LayerContext) -> LayerCode:
    shape = ctx.graph.tensor(op.inputs[0]).shape
    depth = shape[-1] if shape else 1
    p = op_params(ctx.graph, op)
    extra = {}
    if isinstance(p, LogSoftmaxParams):
        extra = dict(reverse_scaling_divisor=p.reverse_scaling_divisor,
                     reverse_scaling_right_shift=p.reverse_scaling_right_shift)
    params = fields(rows=int(np.prod(shape, dtype=np.int64)) // depth, depth=depth,
                    input_multiplier=p.input_multiplier, input_left_shift=p.input_left_shift,
                    diff_min=p.diff_min, **extra)
    function = "zo_softmax_s8" if op.type == "SOFTMAX" else "zo_log_softmax_s8"
    call = Call(function, "zo_softmax_params", params, (ctx.input(op, 0), ctx.output(op)))
    return LayerCode(f"{depth} classes", (call,))
