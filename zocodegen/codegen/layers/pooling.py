"""AVERAGE_POOL_2D, MAX_POOL_2D and MEAN -> zo_pooling.c."""
from __future__ import annotations

import numpy as np

from ...ir import Op
from ...reference.common import in_quant, out_quant, output_range
from ...reference.pooling import mean_multiplier
from .common import Call, LayerCode, LayerContext, describe_padding, fields, shape4


def pool_2d(op: Op, ctx: LayerContext) -> LayerCode:
    g = ctx.graph
    x, y = g.tensor(op.inputs[0]), g.tensor(op.outputs[0])
    lo, hi = output_range(g, op)
    top, _, left, _ = op.options["padding"]
    fh, fw = op.options["filter"]
    params = fields(batches=x.shape[0], in_h=x.shape[1], in_w=x.shape[2], channels=x.shape[3],
                    out_h=y.shape[1], out_w=y.shape[2], filter_h=fh, filter_w=fw,
                    stride_h=op.options["stride"][0], stride_w=op.options["stride"][1],
                    pad_top=top, pad_left=left, act_min=lo, act_max=hi)
    function = "zo_average_pool_s8" if op.type == "AVERAGE_POOL_2D" else "zo_max_pool_s8"
    call = Call(function, "zo_pool_params", params, (ctx.input(op, 0), ctx.output(op)))
    summary = (f"{fh}x{fw} stride {op.options['stride'][0]}x{op.options['stride'][1]}, "
               f"{describe_padding(op)}, {op.options['activation']}")
    return LayerCode(summary, (call,))


def mean(op: Op, ctx: LayerContext) -> LayerCode:
    g = ctx.graph
    shape = g.tensor(op.inputs[0]).shape
    lead = 4 - len(shape)
    axes = sorted(op.options["axes"])
    reduce = [int(k - lead in axes) for k in range(4)]
    count = int(np.prod([shape[a] for a in axes], dtype=np.int64))
    qi, qo = in_quant(g, op), out_quant(g, op)
    multiplier, shift = mean_multiplier(qi.scalar_scale, qo.scalar_scale, count)
    params = fields(in_shape=shape4(shape), reduce=reduce, count=count,
                    input_zero_point=qi.scalar_zero_point, output_offset=qo.scalar_zero_point,
                    multiplier=multiplier, shift=shift)
    call = Call("zo_mean_s8", "zo_mean_params", params, (ctx.input(op, 0), ctx.output(op)))
    return LayerCode(f"over axes {axes}, keep_dims {op.options['keep_dims']}", (call,))
