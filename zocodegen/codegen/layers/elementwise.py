"""ADD and MUL -> zo_elementwise.c (4-D broadcasting by zero strides)."""
from __future__ import annotations

from ...ir import Op
from ...reference.common import in_quant, out_quant, output_range
from ...reference.elementwise import ADD_LEFT_SHIFT, add_params, mul_multiplier
from .common import Call, LayerCode, LayerContext, fields, shape4, strides4


def _broadcast_strides(in_shape, out_shape) -> list[int]:
    """Element strides of an input walked in the output's index space (0 where broadcast)."""
    ins, outs = shape4(in_shape), shape4(out_shape)
    return [0 if ins[k] == 1 and outs[k] != 1 else s for k, s in enumerate(strides4(in_shape))]


def _geometry(op: Op, ctx: LayerContext) -> dict:
    g = ctx.graph
    out_shape = g.tensor(op.outputs[0]).shape
    return dict(out_shape=shape4(out_shape),
                in1_strides=_broadcast_strides(g.tensor(op.inputs[0]).shape, out_shape),
                in2_strides=_broadcast_strides(g.tensor(op.inputs[1]).shape, out_shape))


def add(op: Op, ctx: LayerContext) -> LayerCode:
    p = add_params(ctx.graph, op)
    (m1, e1), (m2, e2) = p.input_multipliers
    params = fields(**_geometry(op, ctx),
                    input1_offset=p.input_offsets[0], input2_offset=p.input_offsets[1],
                    input1_multiplier=m1, input1_shift=e1, input2_multiplier=m2, input2_shift=e2,
                    left_shift=ADD_LEFT_SHIFT, output_multiplier=p.output_multiplier[0],
                    output_shift=p.output_multiplier[1], output_offset=p.output_offset,
                    act_min=p.act_min, act_max=p.act_max)
    call = Call("zo_add_s8", "zo_elementwise_params", params,
                (ctx.input(op, 0), ctx.input(op, 1), ctx.output(op)))
    return LayerCode(op.options["activation"], (call,), ctx.constant_inputs(op))


def mul(op: Op, ctx: LayerContext) -> LayerCode:
    g = ctx.graph
    q1, q2, qo = in_quant(g, op, 0), in_quant(g, op, 1), out_quant(g, op)
    m, e = mul_multiplier(g, op)
    lo, hi = output_range(g, op)
    params = fields(**_geometry(op, ctx),
                    input1_offset=-q1.scalar_zero_point, input2_offset=-q2.scalar_zero_point,
                    output_multiplier=m, output_shift=e, output_offset=qo.scalar_zero_point,
                    act_min=lo, act_max=hi)
    call = Call("zo_mul_s8", "zo_elementwise_params", params,
                (ctx.input(op, 0), ctx.input(op, 1), ctx.output(op)))
    return LayerCode(op.options["activation"], (call,), ctx.constant_inputs(op))
