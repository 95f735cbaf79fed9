"""CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED -> zo_conv.c / zo_fully_connected.c."""
from __future__ import annotations

import numpy as np

from ...ir import Op
from ...reference.conv import requant_params
from .common import (Call, ConstArray, LayerCode, LayerContext, channel_arrays,
                     describe_padding, fields)


def _weight_arrays(op: Op, ctx: LayerContext) -> tuple[ConstArray, ...]:
    w = ctx.graph.tensor(op.inputs[1])
    arrays = [ConstArray(f"{ctx.symbol}_weights", "int8_t", np.asarray(w.data).reshape(-1),
                         f"'{w.name}' {list(w.shape)} int8")]
    if len(op.inputs) > 2 and op.inputs[2]:
        b = ctx.graph.tensor(op.inputs[2])
        arrays.append(ConstArray(f"{ctx.symbol}_bias", "int32_t", np.asarray(b.data).reshape(-1),
                                 f"'{b.name}' {list(b.shape)} int32"))
    return tuple(arrays)


def _bias_arg(op: Op, ctx: LayerContext) -> str:
    return f"{ctx.symbol}_bias" if len(op.inputs) > 2 and op.inputs[2] else "NULL"


def conv_2d(op: Op, ctx: LayerContext) -> LayerCode:
    g = ctx.graph
    x, w, y = g.tensor(op.inputs[0]), g.tensor(op.inputs[1]), g.tensor(op.outputs[0])
    p = requant_params(g, op)
    depthwise = op.type == "DEPTHWISE_CONV_2D"
    kh, kw = w.shape[1], w.shape[2]
    top, _, left, _ = op.options["padding"]
    params = fields(
        batches=x.shape[0], in_h=x.shape[1], in_w=x.shape[2], in_c=x.shape[3],
        out_h=y.shape[1], out_w=y.shape[2], out_c=y.shape[3], k_h=kh, k_w=kw,
        stride_h=op.options["stride"][0], stride_w=op.options["stride"][1],
        dilation_h=op.options["dilation"][0], dilation_w=op.options["dilation"][1],
        pad_top=top, pad_left=left, depth_multiplier=op.options.get("depth_multiplier", 1),
        input_offset=p.input_offset, output_offset=p.output_offset,
        act_min=p.act_min, act_max=p.act_max,
        multiplier=f"{ctx.symbol}_multiplier", shift=f"{ctx.symbol}_shift")
    function = "zo_depthwise_conv2d_s8" if depthwise else "zo_conv2d_s8"
    call = Call(function, "zo_conv_params", params,
                (ctx.input(op, 0), f"{ctx.symbol}_weights", _bias_arg(op, ctx), ctx.output(op)))
    summary = (f"{kh}x{kw} stride {op.options['stride'][0]}x{op.options['stride'][1]}, "
               f"{describe_padding(op)}, {op.options['activation']}")
    if depthwise and op.options.get("depth_multiplier", 1) != 1:
        summary += f", depth multiplier {op.options['depth_multiplier']}"
    return LayerCode(summary, (call,), _weight_arrays(op, ctx)
                     + channel_arrays(ctx, p.multiplier, p.shift))


def fully_connected(op: Op, ctx: LayerContext) -> LayerCode:
    g = ctx.graph
    x, w = g.tensor(op.inputs[0]), g.tensor(op.inputs[1])
    p = requant_params(g, op)
    out_features, in_features = w.shape
    rows = int(np.prod(x.shape)) // in_features
    multiplier = np.broadcast_to(p.multiplier, (out_features,))
    shift = np.broadcast_to(p.shift, (out_features,))
    params = fields(rows=rows, in_features=in_features, out_features=out_features,
                    input_offset=p.input_offset, output_offset=p.output_offset,
                    act_min=p.act_min, act_max=p.act_max,
                    multiplier=f"{ctx.symbol}_multiplier", shift=f"{ctx.symbol}_shift")
    call = Call("zo_fully_connected_s8", "zo_fc_params", params,
                (ctx.input(op, 0), f"{ctx.symbol}_weights", _bias_arg(op, ctx), ctx.output(op)))
    summary = f"{in_features} -> {out_features}, {op.options['activation']}"
    return LayerCode(summary, (call,), _weight_arrays(op, ctx)
                     + channel_arrays(ctx, multiplier, shift))
