"""CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED -> zo_conv.c / zo_fully_connected.c."""
from __future__ import annotations

import numpy as np

from ...ir import Graph, Op
from ...ops.conv import in_place_rows, uses_im2col
from ...reference.conv import requant_params
from .common import (Call, ConstArray, LayerCode, LayerContext, channel_arrays,
                     describe_padding, fields)


def _weight_arrays(op: Op, ctx: LayerContext, bias_for_training_only: bool = False
                   ) -> tuple[ConstArray, ...]:
    w = ctx.graph.tensor(op.inputs[1])
    arrays = [ConstArray(f"{ctx.symbol}_weights", "int8_t", np.asarray(w.data).reshape(-1),
                         f"'{w.name}' {list(w.shape)} int8")]
    if len(op.inputs) > 2 and op.inputs[2]:
        b = ctx.graph.tensor(op.inputs[2])
        arrays.append(ConstArray(f"{ctx.symbol}_bias", "int32_t", np.asarray(b.data).reshape(-1),
                                 f"'{b.name}' {list(b.shape)} int32",
                                 training_only=bias_for_training_only))
    return tuple(arrays)


def _bias_arg(op: Op, ctx: LayerContext) -> str:
    return f"{ctx.symbol}_bias" if len(op.inputs) > 2 and op.inputs[2] else "NULL"


def folded_bias(graph: Graph, op: Op) -> np.ndarray:
    """CONV_2D's bias with the input offset folded in: bias + input_offset * sum of each
    output channel's weights (zo_conv.c), wrapped to int32 like the kernels' sums."""
    w = np.asarray(graph.tensor(op.inputs[1]).data, dtype=np.int64)
    sums = w.reshape(w.shape[0], -1).sum(axis=1)
    bias = (np.asarray(graph.tensor(op.inputs[2]).data, dtype=np.int64).reshape(-1)
            if len(op.inputs) > 2 and op.inputs[2] else np.zeros_like(sums))
    folded = bias + requant_params(graph, op).input_offset * sums
    return ((folded + 2**31) % 2**32 - 2**31).astype(np.int64)


def conv_kernel(graph: Graph, op: Op) -> str:
    """The kernel variant a convolution layer runs (zo_conv.c, zo_depthwise.c)."""
    if op.type == "DEPTHWISE_CONV_2D":
        return ("zo_depthwise_conv2d_c4_s8" if op.options.get("depth_multiplier", 1) == 1
                else "zo_depthwise_conv2d_s8")
    return "zo_conv2d_im2col_s8" if uses_im2col(graph, op) else "zo_conv2d_1x1_s8"


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
    scratch = (f"(int8_t *)({ctx.storage} + {ctx.plan.scratch_offsets[ctx.index]})"
               if ctx.index in ctx.plan.scratch_offsets else "NULL")
    params += fields(right_shift_only=bool(np.all(np.asarray(p.shift) < 0)), scratch=scratch)
    function = conv_kernel(g, op)
    # output over input, row by row through a ring
    ring_rows = in_place_rows(g, op) if op.name in ctx.plan.in_place_ops else None
    if ring_rows:
        params += fields(row_kernel=function, ring_rows=ring_rows)
    summary = (f"{kh}x{kw} stride {op.options['stride'][0]}x{op.options['stride'][1]}, "
               f"{describe_padding(op)}, {op.options['activation']}")
    if depthwise and op.options.get("depth_multiplier", 1) != 1:
        summary += f", depth multiplier {op.options['depth_multiplier']}"
    summary += f"; {function}"
    if ring_rows:
        summary += f" in place (zo_conv_in_place_s8, ring of {ring_rows} rows)"
        function = "zo_conv_in_place_s8"
    arrays = _weight_arrays(op, ctx, bias_for_training_only=not depthwise)
    if depthwise:
        bias = _bias_arg(op, ctx)
    else:
        bias = f"{ctx.symbol}_folded"
        arrays += (ConstArray(bias, "int32_t", folded_bias(g, op),
                              "bias + input_offset * sum of the channel's weights (zo_conv.c)"),)
    call = Call(function, "zo_conv_params", params,
                (ctx.input(op, 0), f"{ctx.symbol}_weights", bias, ctx.output(op)))
    return LayerCode(summary, (call,), arrays + channel_arrays(ctx, p.multiplier, p.shift))


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
