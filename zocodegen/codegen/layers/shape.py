"""PAD, RESHAPE, TRANSPOSE, CONCATENATION, RESIZE_NEAREST_NEIGHBOR -> zo_shape.c."""
from __future__ import annotations

import numpy as np

from ...ir import Op
from ...numerics import quantize_multiplier
from ...reference.common import in_quant, out_quant, output_range
from ...reference.shape_ops import nearest_indices
from .common import Call, ConstArray, LayerCode, LayerContext, fields, shape4, strides4


def pad(op: Op, ctx: LayerContext) -> LayerCode:
    g = ctx.graph
    shape = g.tensor(op.inputs[0]).shape
    lead = [(0, 0)] * (4 - len(shape))
    paddings = lead + [tuple(p) for p in op.options["paddings"]]
    params = fields(in_shape=shape4(shape), before=[p[0] for p in paddings],
                    after=[p[1] for p in paddings],
                    pad_value=out_quant(g, op).scalar_zero_point)
    call = Call("zo_pad_s8", "zo_pad_params", params, (ctx.input(op, 0), ctx.output(op)))
    return LayerCode(f"paddings {[list(p) for p in op.options['paddings']]}", (call,))


def reshape(op: Op, ctx: LayerContext) -> LayerCode:
    src, dst = op.inputs[0], op.outputs[0]
    if ctx.graph.tensor(src).data is None and ctx.plan.offsets[src] == ctx.plan.offsets[dst]:
        return LayerCode("", note="output aliases the input: no code")
    size = int(np.prod(ctx.graph.tensor(dst).shape)) * np.dtype(ctx.graph.tensor(dst).dtype).itemsize
    call = Call("zo_copy_bytes", "zo_copy_params", fields(bytes=size),
                (ctx.input(op, 0), ctx.output(op)))
    return LayerCode("copy", (call,), ctx.constant_inputs(op))


def transpose(op: Op, ctx: LayerContext) -> LayerCode:
    g = ctx.graph
    in_shape = g.tensor(op.inputs[0]).shape
    perm = list(op.options["perm"])
    lead = 4 - len(perm)
    perm4 = list(range(lead)) + [p + lead for p in perm]
    in_strides = strides4(in_shape)
    params = fields(out_shape=shape4(g.tensor(op.outputs[0]).shape),
                    in_strides=[in_strides[p] for p in perm4])
    call = Call("zo_transpose_s8", "zo_transpose_params", params,
                (ctx.input(op, 0), ctx.output(op)))
    return LayerCode(f"perm {perm}", (call,))


def concatenation(op: Op, ctx: LayerContext) -> LayerCode:
    g = ctx.graph
    out_shape = g.tensor(op.outputs[0]).shape
    axis = op.options["axis"]
    outer = int(np.prod(out_shape[:axis], dtype=np.int64))
    inner = int(np.prod(out_shape[axis + 1:], dtype=np.int64))
    qo = out_quant(g, op)
    lo, hi = output_range(g, op)
    calls, start = [], 0
    for k, name in enumerate(op.inputs):
        qi = in_quant(g, op, k)
        in_inner = g.tensor(name).shape[axis] * inner
        same = (qi.scalar_scale == qo.scalar_scale
                and qi.scalar_zero_point == qo.scalar_zero_point)
        m, e = (0, 0) if same else quantize_multiplier(np.float64(qi.scalar_scale)
                                                       / np.float64(qo.scalar_scale))
        params = fields(outer=outer, out_inner=out_shape[axis] * inner, in_inner=in_inner,
                        out_start=start, requantize=not same,
                        input_offset=-qi.scalar_zero_point, output_offset=qo.scalar_zero_point,
                        multiplier=m, shift=e, act_min=lo, act_max=hi)
        calls.append(Call("zo_concat_part_s8", "zo_concat_part_params", params,
                          (ctx.input(op, k), ctx.output(op))))
        start += in_inner
    return LayerCode(f"{len(op.inputs)} inputs on axis {axis}", tuple(calls),
                     ctx.constant_inputs(op))


def resize_nearest_neighbor(op: Op, ctx: LayerContext) -> LayerCode:
    g = ctx.graph
    x, y = g.tensor(op.inputs[0]), g.tensor(op.outputs[0])
    ac, hp = op.options["align_corners"], op.options["half_pixel_centers"]
    rows = nearest_indices(x.shape[1], y.shape[1], ac, hp)
    cols = nearest_indices(x.shape[2], y.shape[2], ac, hp)
    arrays = (ConstArray(f"{ctx.symbol}_rows", "int32_t", rows, "source row per output row"),
              ConstArray(f"{ctx.symbol}_cols", "int32_t", cols, "source column per output column"))
    params = fields(batches=x.shape[0], in_h=x.shape[1], in_w=x.shape[2], channels=x.shape[3],
                    out_h=y.shape[1], out_w=y.shape[2], row_index=f"{ctx.symbol}_rows",
                    col_index=f"{ctx.symbol}_cols")
    call = Call("zo_resize_nearest_s8", "zo_resize_params", params,
                (ctx.input(op, 0), ctx.output(op)))
    return LayerCode(f"align_corners {ac}, half_pixel_centers {hp}", (call,), arrays)
