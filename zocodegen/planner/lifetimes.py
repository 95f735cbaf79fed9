"""Which tensors need arena bytes, for how long, and which of them may share bytes.

Lifetimes are inclusive op-index intervals: a tensor exists from the op that writes it (tensors
nobody writes, i.e. graph inputs, from op 0, since they must exist before the first op runs) to
the last op that reads it. Graph outputs and ``keep_alive`` tensors live to the last op.

Sharing ("aliasing") follows the contract of the C kernels: a RESHAPE output is a view of its
input, and a few element-wise kernels may write their output over one input that dies there.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..ir import Graph, Op
from ..ops.table import OPS
from .scratch import computes_row_by_row

# How much sharing a plan uses; the planner tries several and keeps the smallest arena.
# "element-wise" leaves convolutions out: one computed in place needs its ring of rows,
# which can cost more than it saves.
ALIAS_MODES = ("in-place", "element-wise", "reshape", "none")


def align_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def activation_names(graph: Graph) -> tuple[str, ...]:
    """Every non-constant tensor, in a stable order: inputs, op outputs, then any others."""
    seen: dict[str, None] = {}
    for name in graph.inputs:
        seen.setdefault(name, None)
    for op in graph.ops:
        for name in op.outputs:
            seen.setdefault(name, None)
    for name in graph.tensors:
        seen.setdefault(name, None)
    return tuple(n for n in seen if n in graph.tensors and graph.tensors[n].data is None)


def last_op_index(graph: Graph) -> int:
    return max(len(graph.ops) - 1, 0)


def tensor_lifetimes(graph: Graph, keep_alive: Iterable[str] = ()) -> dict[str, tuple[int, int]]:
    """Inclusive (first, last) op index of every activation tensor."""
    end = last_op_index(graph)
    acts = activation_names(graph)
    producer: dict[str, int] = {}
    last_use: dict[str, int] = {}
    for index, op in enumerate(graph.ops):
        for name in op.inputs:
            if name:
                last_use[name] = index
        for name in op.outputs:
            producer.setdefault(name, index)
    pinned = set(graph.outputs) | set(keep_alive)
    lifetimes = {}
    for name in acts:
        first = producer.get(name, 0)
        last = end if name in pinned else max(first, last_use.get(name, first))
        lifetimes[name] = (first, last)
    return lifetimes


def allows_in_place(graph: Graph, op: Op) -> bool:
    """Whether the op's kernel may write its output over one of its inputs, as its row says
    (``in_place``: same bytes, element by element or after a full read, as SOFTMAX does;
    convolutions row by row through a ring, scratch.py). RESHAPE is a view, handled apart."""
    row = OPS.get(op.type)
    if row is None or row.in_place is None or len(op.outputs) != 1:
        return False
    return bool(row.in_place(graph, op))


def in_place_input(graph: Graph, op: Op) -> tuple[str, ...]:
    """The inputs an in-place op may overwrite: a convolution only its activation input
    (which may be larger than the output), the others any input of the output's size."""
    if computes_row_by_row(op):
        return (op.inputs[0],)
    size = graph.tensors[op.outputs[0]].nbytes
    return tuple(n for n in dict.fromkeys(n for n in op.inputs if n)
                 if graph.tensors[n].nbytes == size)


def reshape_may_alias(graph: Graph, op: Op) -> bool:
    """A RESHAPE whose output can be a view of its (activation) input."""
    if op.type != "RESHAPE" or not op.inputs or len(op.outputs) != 1:
        return False
    src, dst = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
    if src.data is not None or src.nbytes != dst.nbytes:
        return False
    return not (op.inputs[0] in graph.inputs and op.inputs[0] in graph.outputs)


@dataclass(frozen=True)
class AliasGroups:
    """Tensors that share one buffer, and the ops that made them share."""

    groups: tuple[tuple[str, ...], ...]  # each sorted by lifetime start
    ops: tuple[str, ...]  # op names computed in place or as a view, in execution order


class _UnionFind:
    def __init__(self, names: Iterable[str]) -> None:
        self.parent = {n: n for n in names}

    def find(self, name: str) -> str:
        root = name
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[name] != root:
            self.parent[name], name = root, self.parent[name]
        return root

    def union(self, a: str, b: str) -> None:
        self.parent[self.find(b)] = self.find(a)


def alias_groups(graph: Graph, lifetimes: Mapping[str, tuple[int, int]],
                 keep_alive: Iterable[str] = (), mode: str = "in-place",
                 separate_ops: frozenset[int] = frozenset()) -> AliasGroups:
    """Group tensors that share bytes under ``mode`` (see ``ALIAS_MODES``).

    In-place needs the whole group of the overwritten input to die at the op, so a value that
    is still read later under another (reshaped) name is never clobbered. Of two candidates the
    one whose group started later is overwritten, which keeps the merged lifetime short.
    Ops in ``separate_ops`` (indices) never compute in place.
    """
    if mode not in ALIAS_MODES:
        raise ValueError(f"unknown alias mode {mode!r}; choose one of {ALIAS_MODES}")
    uf = _UnionFind(lifetimes)
    span = {n: lifetimes[n] for n in lifetimes}  # root -> (first, last) of its group
    protected = set(graph.inputs) | set(graph.outputs) | set(keep_alive)
    tainted = {n for n in lifetimes if n in protected}  # roots of groups holding protected
    ops: list[str] = []

    def merge(a: str, b: str) -> None:
        ra, rb = uf.find(a), uf.find(b)
        if ra == rb:
            return
        first = min(span[ra][0], span[rb][0])
        last = max(span[ra][1], span[rb][1])
        taint = ra in tainted or rb in tainted
        uf.union(ra, rb)
        root = uf.find(ra)
        span[root] = (first, last)
        if taint:
            tainted.add(root)

    if mode != "none":
        for index, op in enumerate(graph.ops):
            if reshape_may_alias(graph, op) and op.outputs[0] in lifetimes:
                merge(op.inputs[0], op.outputs[0])
                ops.append(op.name)
            elif (mode in ("in-place", "element-wise") and index not in separate_ops
                  and allows_in_place(graph, op)
                  and (mode == "in-place" or not computes_row_by_row(op))):
                out = op.outputs[0]
                candidates = []
                for name in in_place_input(graph, op):
                    if name not in lifetimes:
                        continue
                    root = uf.find(name)
                    if root in tainted or span[root][1] != index:
                        continue
                    candidates.append((-span[root][0], name))
                if candidates:
                    merge(min(candidates)[1], out)
                    ops.append(op.name)

    members: dict[str, list[str]] = {}
    for name in lifetimes:
        members.setdefault(uf.find(name), []).append(name)
    groups = tuple(tuple(sorted(m, key=lambda n: (lifetimes[n][0], lifetimes[n][1])))
                   for m in members.values())
    return AliasGroups(groups=groups, ops=tuple(ops))
