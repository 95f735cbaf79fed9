"""--bp-layers (ElasticZO's hybrid): the back-propagated head's descriptors for
``src/training.c`` (pure): where each tensor's int8 copy and int32 error live in the gradient
region, and each op's backward factors as quantized multipliers (templates/train/zo_backprop.h).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph
from ..numerics import quantize_multiplier
from ..ops.table import OPS
from ..planner import ArenaPlan
from ..planner.lifetimes import align_up
from ..reference.common import output_range
from ..training.backprop import Head, backward_factors
from ..training.plan_types import TrainingPlan
from .model_code import ModelCode

NO_ERROR = "ZO_BP_NONE"


@dataclass(frozen=True)
class BpOpCode:
    """One zo_bp_op (zo_backprop.h)."""

    op: int
    op_name: str
    kind: str
    propagate: bool
    layer_symbol: str | None  # FC / CONV / DEPTHWISE: the trained layer's symbol
    lo: int
    hi: int
    out_count: int
    out_copy: int
    out_error: int
    in_count: int
    in_copy: tuple[int, int]
    in_error: tuple[str, str]
    multipliers: tuple[int, ...]
    shifts: tuple[int, ...]
    geometry_type: str | None  # zo_pool_params / zo_mean_params (FC / CONV: the layer's)
    geometry: tuple[tuple[str, str], ...]

    @property
    def geometry_pointers(self) -> tuple[str, str, str, str]:
        """zo_bp_op's .conv, .fc, .pool and .mean: the one its kind reads."""
        slot = {"ZO_BP_CONV": 0, "ZO_BP_DEPTHWISE": 0, "ZO_BP_FC": 1, "ZO_BP_AVERAGE_POOL": 2,
                "ZO_BP_MAX_POOL": 2, "ZO_BP_MEAN": 3}.get(self.kind)
        own = (f"&{self.layer_symbol}_geometry" if slot in (0, 1)
               else f"&bp_{self.op}_geometry")
        return tuple(own if k == slot else "NULL" for k in range(4))


@dataclass(frozen=True)
class BpCopy:
    after_op: int
    arena_offset: int
    bytes: int
    copy_offset: int


@dataclass(frozen=True)
class HeadCode:
    """zo_bp_head of the build (the same head in every block's zo_train_model)."""

    ops: tuple[BpOpCode, ...]
    copies: tuple[BpCopy, ...]
    first_op: int
    last_op: int
    error_words: int
    scaled_offset: int
    scaled_words: int
    accumulator_offset: int
    accumulator_words: int
    copy_offset: int
    logits_multiplier: int
    logits_shift: int

    @property
    def words(self) -> int:
        """The gradient-region words back-propagation needs (plan.backprop_bytes())."""
        return self.copy_offset // 4 + sum(align_up(c.bytes, 4) for c in self.copies) // 4



def head_code(graph: Graph, arena: ArenaPlan, code: ModelCode, plan: TrainingPlan,
              symbols: dict[int, str]) -> HeadCode:
    """The head's descriptors: where each tensor's int8 copy and int32 error live in the
    gradient region, and each op's backward factors as quantized multipliers."""
    hd: Head = plan.head
    error_at, words = {}, 0
    for name, count in zip(hd.error_tensors, hd.error_counts):
        error_at[name] = words
        words += count
    scaled_offset = words
    accumulator_offset = scaled_offset + hd.scaled_count
    accumulator_words = (sum(layer.d_w for layer in plan.bp_layers)
                         if plan.config.batch > 1 or plan.config.integer_only else 0)
    copy_offset = 4 * (accumulator_offset + accumulator_words)
    made = {name: k for k in hd.ops for name in graph.ops[k].outputs}
    copy_at, copies, pos = {}, [], 0
    for name, size in sorted(zip(hd.saved, hd.saved_bytes), key=lambda t: made.get(t[0], -1)):
        copy_at[name] = pos
        copies.append(BpCopy(made.get(name, -1), arena.offsets[name], size, copy_offset + pos))
        pos += align_up(size, 4)
    ops = []
    for k in hd.ops:
        op = graph.ops[k]
        # the activation input; ADD: each input j, as backward_factors orders them
        inputs = op.inputs if op.type == "ADD" else op.inputs[:1]
        pairs = [quantize_multiplier(float(r)) for r in backward_factors(graph, op)]
        lo, hi = output_range(graph, op) if op.type != "RESHAPE" else (-129, 128)
        geometry_type, geometry = None, ()
        if op.type in ("AVERAGE_POOL_2D", "MAX_POOL_2D", "MEAN"):
            call = code.layers[k].calls[0]
            geometry_type, geometry = call.params_type, call.params
        in_copy = [copy_offset + copy_at.get(n, 0) for n in inputs] + [0, 0]
        in_error = [str(error_at[n]) + "u" if n in error_at else NO_ERROR
                    for n in inputs] + [NO_ERROR, NO_ERROR]
        ops.append(BpOpCode(
            k, op.name, OPS[op.type].backward, hd.propagates(graph, k), symbols.get(k), lo, hi,
            graph.tensor(op.outputs[0]).size, copy_offset + copy_at[op.outputs[0]],
            error_at[op.outputs[0]], graph.tensor(op.inputs[0]).size,
            (in_copy[0], in_copy[1]), (in_error[0], in_error[1]),
            tuple(p[0] for p in pairs), tuple(p[1] for p in pairs), geometry_type, geometry))
    lm, ls = quantize_multiplier(float(np.float64(graph.tensor(plan.logits).quant.scalar_scale)))
    return HeadCode(tuple(ops), tuple(copies), hd.first_op, hd.ops[-1], words, scaled_offset,
                    hd.scaled_count, accumulator_offset, accumulator_words, copy_offset, lm, ls)
