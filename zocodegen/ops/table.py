"""The op table: one row per IR op, the one place that says what an op is to every stage.

Adding an op is one row here plus the code the row names: its reference kernel
(``reference/``), its generator (``codegen/layers/``), its C kernel (``templates/kernels/``),
the rules below when it has a new shape/in-place/window behaviour, and the frontends that
read it from a model file (docs/layout.md, "Adding an op"). The order is DESIGN.md's.
"""
from __future__ import annotations

from ..codegen.layers import conv as gen_conv
from ..codegen.layers import elementwise as gen_elementwise
from ..codegen.layers import pooling as gen_pooling
from ..codegen.layers import quantize as gen_quantize
from ..codegen.layers import shape as gen_shape
from ..codegen.layers import softmax as gen_softmax
from ..reference import conv, elementwise, fully_connected, pooling, quantize, shape_ops, softmax
from ..ir import Graph, Op
from . import rules
from .conv import (conv_in_place, conv_macs, conv_scratch_bytes, conv_shape, conv_window,
                   fully_connected_macs, fully_connected_shape, in_place_rows)
from .spec import OpSpec, WeightLayout

ROWS = (
    OpSpec("CONV_2D", ("stride", "dilation", "padding", "activation"), conv_shape,
           conv.conv_2d, gen_conv.conv_2d,
           weights=WeightLayout(4, 0, "ZO_TRAIN_CONV", (0, 2, 3, 1)), macs=conv_macs,
           pre_activation=conv.conv_2d_pre_activation, scratch_bytes=conv_scratch_bytes,
           in_place=conv_in_place, ring_rows=in_place_rows, window=conv_window,
           backward="ZO_BP_CONV"),
    OpSpec("DEPTHWISE_CONV_2D",
           ("stride", "dilation", "padding", "depth_multiplier", "activation"), conv_shape,
           conv.conv_2d, gen_conv.conv_2d,
           weights=WeightLayout(4, 3, "ZO_TRAIN_DEPTHWISE", (1, 2, 3, 0)), macs=conv_macs,
           pre_activation=conv.conv_2d_pre_activation, in_place=conv_in_place,
           ring_rows=in_place_rows, window=conv_window, backward="ZO_BP_DEPTHWISE"),
    OpSpec("FULLY_CONNECTED", ("activation",), fully_connected_shape,
           fully_connected.fully_connected, gen_conv.fully_connected,
           weights=WeightLayout(2, 0, "ZO_TRAIN_FC", None), macs=fully_connected_macs,
           pre_activation=fully_connected.fully_connected_pre_activation,
           backward="ZO_BP_FC"),
    OpSpec("ADD", ("activation",), rules.broadcast_shape, elementwise.add,
           gen_elementwise.add, inputs=2, in_place=rules.any_same_shape_input,
           backward="ZO_BP_ADD"),
    OpSpec("MUL", ("activation",), rules.broadcast_shape, elementwise.mul,
           gen_elementwise.mul, inputs=2, in_place=rules.any_same_shape_input),
    OpSpec("AVERAGE_POOL_2D", ("filter", "stride", "padding", "activation"), rules.pool_shape,
           pooling.average_pool_2d, gen_pooling.pool_2d, window=rules.pool_window,
           backward="ZO_BP_AVERAGE_POOL"),
    OpSpec("MAX_POOL_2D", ("filter", "stride", "padding", "activation"), rules.pool_shape,
           pooling.max_pool_2d, gen_pooling.pool_2d, window=rules.pool_window,
           backward="ZO_BP_MAX_POOL"),
    OpSpec("MEAN", ("axes", "keep_dims"), rules.mean_shape, pooling.mean, gen_pooling.mean,
           backward="ZO_BP_MEAN"),
    OpSpec("PAD", ("paddings",), rules.pad_shape, shape_ops.pad, gen_shape.pad,
           window=rules.pad_window),
    OpSpec("RESHAPE", (), rules.reshape_shape, shape_ops.reshape, gen_shape.reshape,
           backward="ZO_BP_RESHAPE"),
    OpSpec("TRANSPOSE", ("perm",), rules.transpose_shape, shape_ops.transpose,
           gen_shape.transpose),
    OpSpec("CONCATENATION", ("axis", "activation"), rules.concatenation_shape,
           shape_ops.concatenation, gen_shape.concatenation, inputs=None),
    OpSpec("SOFTMAX", ("beta",), rules.same_shape, softmax.softmax, gen_softmax.softmax,
           parameters=softmax.op_params, in_place=rules.always),
    OpSpec("LOG_SOFTMAX", (), rules.same_shape, softmax.log_softmax, gen_softmax.softmax,
           parameters=softmax.op_params, in_place=rules.always),
    OpSpec("RESIZE_NEAREST_NEIGHBOR", ("align_corners", "half_pixel_centers"),
           rules.resize_shape, shape_ops.resize_nearest_neighbor,
           gen_shape.resize_nearest_neighbor),
    OpSpec("QUANTIZE", (), rules.same_shape, quantize.quantize, gen_quantize.quantize,
           in_place=rules.int8_to_int8, window=rules.point_window),
    OpSpec("DEQUANTIZE", (), rules.same_shape, quantize.dequantize, gen_quantize.dequantize),
)

OPS: dict[str, OpSpec] = {row.name: row for row in ROWS}

#: Every op the IR knows, in the order DESIGN.md lists them.
OP_TYPES: tuple[str, ...] = tuple(OPS)
#: Ops whose parameters training may update.
TRAINABLE_OP_TYPES: tuple[str, ...] = tuple(name for name, row in OPS.items() if row.trainable)


def macs(graph: Graph, op: Op) -> int:
    """Multiply-accumulates of one inference of ``op`` (0 for the planner's stand-in ops)."""
    return OPS[op.type].macs(graph, op) if op.type in OPS else 0
