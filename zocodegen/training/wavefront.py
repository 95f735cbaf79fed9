"""The simulator's forwards on the fast kernels (reference/fast.py), and the query forwards of
a training step batched across layers.

The device estimates layer after layer, each layer's Q queries running the network from that
layer on. Within a step those forwards are independent: each reads the clean forward's
activations before its layer and the step's parameters from its layer on (updates of the
earlier layers never reach them; DESIGN.md section 4, "global update"). So the simulator
runs them as one pass over the ops, a "wavefront": at each op, one batch holds the rows of
every query group that has started, and a group starting later joins with copies of the
clean activations - exactly the rows its own forward would have read. Kernels treat rows
independently, so every row gets the integers its own forward gets.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..ir import Graph, Op
from ..reference.fast import Network, network
from . import scales

if TYPE_CHECKING:  # (annotations only: the plan reads the estimator rows built on this)
    from .plan_types import TrainingPlan

#: Values per activation tensor a wave may hold (float32; a few such tensors live at once).
WAVE_ELEMENTS = 1 << 23


@dataclass(frozen=True)
class QueryGroup:
    """One layer's perturbed copies of the network, each run on the step's N samples:
    ``weights`` - the layer's op runs with copy v's weights (WP; variant-major rows), or
    ``nodes`` - the op's output is copy v's (NP; rows v N + n)."""

    op_index: int
    weights: np.ndarray | None = None  # (V, *weight shape) int8
    nodes: np.ndarray | None = None  # (V * N, *output shape[1:]) int8

    def rows(self, n: int) -> int:
        return len(self.weights) * n if self.weights is not None else len(self.nodes)


def _tile(value: np.ndarray, copies: int, axis: int) -> np.ndarray:
    """``copies`` copies of ``value`` one after the other along ``axis``."""
    reps = [1] * value.ndim
    reps[axis] = copies
    return np.tile(value, reps)


def _value(graph: Graph, env: dict, name: str) -> np.ndarray | None:
    """An input's value: from ``env``, else the graph's constant; None for an absent one."""
    if not name:
        return None
    return env[name] if name in env else graph.tensor(name).data


def _filter_scales(env: dict, op: Op) -> np.ndarray | None:
    """A trainable op's filter scales when the run trains them (--scales), else None."""
    return env.get(scales.key(op.inputs[1])) if op.type in scales.SCALED_OP_TYPES else None


def forward(graph: Graph, env: dict[str, np.ndarray], start: int, stop: int,
            keep: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """Ops ``start..stop`` on int8 values (step_parts.forward): ``env`` holds the activations
    the ops read and the trainable parameters (possibly with a variant axis: variant v owns
    the v-th share of the batch rows). Returns ``env`` extended with every output, or only
    with those named in ``keep`` (the others are never converted back to int8)."""
    net = network(graph)
    values: dict[str, np.ndarray] = {}
    computed: list[str] = []
    for k in range(start, stop + 1):
        op = graph.ops[k]
        args = [_value(graph, env, name) for name in op.inputs]
        for i in net.activation_inputs(op):
            name = op.inputs[i]
            if name and name not in values:
                values[name] = net.to_engine(name, args[i])
            args[i] = values.get(name)
        outs = net.run(k, args, filter_scales=_filter_scales(env, op))
        values.update(zip(op.outputs, outs))
        computed += op.outputs
    out = dict(env)
    out.update({name: net.to_int8(name, values[name]) for name in computed
                if keep is None or name in keep})
    return out


def pre_activation(graph: Graph, op_index: int, env: dict[str, np.ndarray]) -> np.ndarray:
    """z of trainable op ``op_index`` on ``env``'s values (its op row's pre_activation): the
    requantized output before the fused activation's clamp, int64 in the output's shape."""
    net = network(graph)
    op = graph.ops[op_index]
    return net.pre_activation(op_index, _Wave(net, env, len(env[op.inputs[0]]))
                              .args(op_index, None), _filter_scales(env, op))


class _Wave:
    """The engine-form values of one wavefront: each tensor holds the rows of the groups that
    had started when it was computed, and is topped up with clean copies on use."""

    def __init__(self, net: Network, env: dict[str, np.ndarray], n: int):
        self.net, self.env, self.n = net, env, n
        self.values: dict[str, np.ndarray] = {}
        self._clean: dict[str, np.ndarray] = {}

    def clean(self, name: str) -> np.ndarray:
        if name not in self._clean:
            self._clean[name] = self.net.to_engine(name, _value(self.net.graph, self.env,
                                                                     name))
        return self._clean[name]

    def rows(self, name: str, rows: int) -> np.ndarray:
        axis = self.net.rows_axis(name)
        have = self.values.get(name)
        missing = rows - (0 if have is None else have.shape[axis])
        if missing:
            top = _tile(self.clean(name), missing // self.n, axis)
            have = top if have is None else np.concatenate([have, top], axis=axis)
            self.values[name] = have
        return have

    def args(self, k: int, rows: int | None) -> list:
        """Op k's arguments: activations with ``rows`` rows (None: the clean ones)."""
        op = self.net.graph.ops[k]
        args = [_value(self.net.graph, self.env, name) for name in op.inputs]
        for i in self.net.activation_inputs(op):
            name = op.inputs[i]
            if name:  # a constant operand broadcasts over the rows
                constant = self.net.graph.tensor(name).is_constant
                args[i] = self.clean(name) if rows is None or constant else self.rows(name,
                                                                                     rows)
        return args


def query_logits(graph: Graph, plan: TrainingPlan, env: dict[str, np.ndarray], n: int,
                 groups: list[QueryGroup]) -> tuple[np.ndarray, list[slice]]:
    """The int8 logits of every group's rows (V N of them, variant-major, N samples each
    time) and where each group's are, in the order of ``groups`` (one group per op).
    ``env``: the clean forward's activations (N samples) and the step's parameters."""
    wave = _Wave(network(graph), env, n)
    by_op = {g.op_index: g for g in groups}
    last_use = {name: k for k, op in enumerate(graph.ops[:plan.logits_op + 1])
                for name in op.inputs}
    rows = 0
    for k in range(min(by_op), plan.logits_op + 1):
        op, group = graph.ops[k], by_op.get(k)
        for name in [name for name in wave.values if last_use.get(name, -1) < k
                     and name != plan.logits]:  # its memory serves the next outputs
            del wave.values[name]
        if group is not None:  # the group's rows join after the others
            extra, tail = None, None
            if group.weights is not None:
                extra = wave.args(k, None)
                extra[1] = group.weights
            else:
                tail = wave.net.to_engine(op.outputs[0], group.nodes)
            outs = wave.net.run(k, wave.args(k, rows) if rows else None, (extra, tail),
                                _filter_scales(env, op))
            rows += group.rows(n)
        elif rows:
            outs = wave.net.run(k, wave.args(k, rows), filter_scales=_filter_scales(env, op))
        else:
            continue
        wave.values.update(zip(op.outputs, outs))
    found, at = {}, 0
    for op_index in sorted(by_op):
        size = by_op[op_index].rows(n)
        found[op_index], at = slice(at, at + size), at + size
    logits = wave.net.to_int8(plan.logits, wave.rows(plan.logits, rows))
    return logits, [found[g.op_index] for g in groups]


def waves(graph: Graph, plan: TrainingPlan, groups: list[tuple[int, int]]) -> list[int]:
    """How many of the query groups (forward order; op index and rows of each) each
    wavefront takes in turn: as many as keep every activation under WAVE_ELEMENTS values."""
    per_row = np.array([max(int(np.prod(graph.tensor(name).shape[1:], dtype=np.int64))
                            for name in op.outputs) for op in graph.ops[:plan.logits_op + 1]])
    sizes: list[int] = []
    active = np.zeros_like(per_row)
    for op_index, rows in groups:
        added = np.zeros_like(per_row)
        added[op_index:] = rows
        if sizes and ((active + added) * per_row).max() <= WAVE_ELEMENTS:
            sizes[-1] += 1
            active += added
        else:
            sizes.append(1)
            active = added
    return sizes
