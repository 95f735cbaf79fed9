"""QUANTIZE and DEQUANTIZE -> zo_quantize.c."""
from __future__ import annotations

import numpy as np

from ...ir import Op
from ...numerics import quantize_multiplier
from ...reference.common import in_quant, out_quant
from .common import Call, LayerCode, LayerContext, fields


def _size(ctx: LayerContext, name: str) -> int:
    return int(np.prod(ctx.graph.tensor(name).shape, dtype=np.int64))


def quantize(op: Op, ctx: LayerContext) -> LayerCode:
    g = ctx.graph
    qo = out_quant(g, op)
    size = _size(ctx, op.inputs[0])
    if g.tensor(op.inputs[0]).dtype == np.float32:
        params = fields(size=size, scale=qo.scalar_scale, zero_point=qo.scalar_zero_point)
        call = Call("zo_quantize_f32_s8", "zo_quantize_params", params,
                    (ctx.input(op, 0), ctx.output(op)))
        return LayerCode("float32 -> int8", (call,))
    qi = in_quant(g, op)
    m, e = quantize_multiplier(np.float64(qi.scalar_scale) / np.float64(qo.scalar_scale))
    params = fields(size=size, input_offset=-qi.scalar_zero_point,
                    output_offset=qo.scalar_zero_point, multiplier=m, shift=e)
    call = Call("zo_requantize_s8", "zo_quantize_params", params,
                (ctx.input(op, 0), ctx.output(op)))
    return LayerCode("int8 -> int8", (call,))


def dequantize(op: Op, ctx: LayerContext) -> LayerCode:
    qi = in_quant(ctx.graph, op)
    params = fields(size=_size(ctx, op.inputs[0]), scale=qi.scalar_scale,
                    zero_point=qi.scalar_zero_point)
    call = Call("zo_dequantize_s8_f32", "zo_quantize_params", params,
                (ctx.input(op, 0), ctx.output(op)))
    return LayerCode("int8 -> float32", (call,))
