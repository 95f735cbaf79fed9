"""An independent check of an arena plan, by simulating what the generated code does.

It does not reuse the planner's lifetimes or groups: it walks the ops, tracks which tensors
still hold their value in the arena, and reports a tensor read after something else wrote over
its bytes, an output written over an input the kernel is still reading (other than the in-place
and view cases the kernels allow), or a graph output / keep-alive tensor lost at the end.
"""
from __future__ import annotations

from dataclasses import replace

from ..ir import Graph
from .plans import ArenaPlan
from .lifetimes import allows_in_place
from .patches import planning_view
from .scratch import kernel_scratch


class PlanError(AssertionError):
    """The plan would corrupt a value: a planner bug, never a user error."""


def plan_problems(graph: Graph, plan: ArenaPlan) -> list[str]:
    """Everything wrong with ``plan`` for ``graph`` (empty when it is sound). A patched plan
    is checked on its planning view, and each class of patches on its own patch graph."""
    if plan.patches is not None:
        problems = plan_problems(planning_view(graph, plan.patches), replace(plan, patches=None))
        for k, patch_class in enumerate(plan.patches.classes):
            problems += [f"patch class {k}: {p}"
                         for p in plan_problems(patch_class.graph, patch_class.plan)]
            if patch_class.plan.arena_bytes > plan.patches.workspace_bytes:
                problems.append(f"patch class {k} needs {patch_class.plan.arena_bytes} B, "
                                f"more than the workspace ({plan.patches.workspace_bytes} B)")
        return problems
    acts = [n for n, t in graph.tensors.items() if t.data is None]
    problems = []
    span = {}
    for name in acts:
        if name not in plan.offsets:
            problems.append(f"{name}: no offset")
            continue
        offset, nbytes = plan.offsets[name], graph.tensors[name].nbytes
        if offset < 0 or offset % plan.alignment:
            problems.append(f"{name}: offset {offset} is not aligned to {plan.alignment}")
        if offset + nbytes > plan.arena_bytes:
            problems.append(f"{name}: bytes {offset}..{offset + nbytes} exceed the arena "
                            f"({plan.arena_bytes})")
        span[name] = (offset, offset + nbytes)
    if problems:
        return problems

    def overlap(a: str, b: str) -> bool:
        return span[a][0] < span[b][1] and span[b][0] < span[a][1] and a != b

    end = len(graph.ops)
    needed_until = {n: -1 for n in acts}  # last op index that reads the value
    for index, op in enumerate(graph.ops):
        for name in op.inputs:
            if name in needed_until:
                needed_until[name] = index
    for name in set(graph.outputs) | set(plan.keep_alive):
        if name in needed_until:
            needed_until[name] = end
    producer: dict[str, int] = {}
    for index, op in enumerate(graph.ops):
        for name in op.outputs:
            producer.setdefault(name, index)
    produced = set(producer)
    born = [n for n in acts if n not in produced]  # graph inputs: present before op 0
    valid = set(born)
    lost: set[str] = set()  # reported once, not at every later op
    for i, a in enumerate(born):
        for b in born[i + 1:]:
            if overlap(a, b):
                problems.append(f"graph inputs {a} and {b} overlap")

    scratch = kernel_scratch(graph, frozenset(plan.in_place_ops))
    for index, op in enumerate(graph.ops):
        reads = [n for n in dict.fromkeys(op.inputs) if n in span]
        if index in scratch:
            problems.extend(_scratch_problems(graph, plan, index, scratch[index], span, valid,
                                              needed_until))
        for name in reads:
            if name not in valid and name not in lost:
                problems.append(f"op {op.name} reads {name} after its bytes were overwritten")
        writes = [n for n in op.outputs if n in span]
        for out in writes:
            for name in reads:
                if not overlap(out, name):
                    continue
                same = span[out] == span[name]
                view = op.type == "RESHAPE" and same
                in_place = (same and allows_in_place(graph, op)
                            and name not in graph.inputs)
                if not (view or in_place):
                    problems.append(f"op {op.name} writes {out} over its input {name}")
            for other in writes:
                if other != out and overlap(out, other):
                    problems.append(f"op {op.name} writes {out} and {other} over each other")
        for out in writes:
            source = op.inputs[0] if op.inputs else ""
            if op.type == "RESHAPE" and source in span and span[source] == span[out]:
                if source in valid:  # a view: no bytes are written
                    valid.add(out)
                continue
            valid = {n for n in valid if not overlap(n, out)}
            valid.add(out)
        for name in acts:
            alive = name in valid or needed_until[name] <= index
            if not alive and producer.get(name, -1) <= index and name not in lost:
                lost.add(name)
                problems.append(f"op {op.name} overwrites {name}, which is still needed "
                                f"(until op index {needed_until[name]})")
    for name in graph.outputs:
        if name in span and name not in valid and name not in lost:
            problems.append(f"graph output {name} was overwritten before the end")
    return problems


def _scratch_problems(graph: Graph, plan: ArenaPlan, index: int, nbytes: int,
                      span: dict[str, tuple[int, int]], valid: set[str],
                      needed_until: dict[str, int]) -> list[str]:
    """The kernel's scratch of op ``index`` may cover only bytes nobody needs: not its own
    operands, not a value still to be read."""
    op = graph.ops[index]
    if index not in plan.scratch_offsets:
        return [f"op {op.name}: no scratch offset ({nbytes} bytes needed)"]
    start = plan.scratch_offsets[index]
    end = start + nbytes
    if start < 0 or end > plan.arena_bytes:
        return [f"op {op.name}: scratch {start}..{end} outside the arena ({plan.arena_bytes})"]
    operands = {n for n in list(op.inputs) + list(op.outputs) if n in span}
    needed = operands | {n for n in valid if needed_until[n] > index}
    return [f"op {op.name}: scratch {start}..{end} overlaps {name}"
            for name in sorted(needed) if span[name][0] < end and start < span[name][1]]


def verify(graph: Graph, plan: ArenaPlan) -> None:
    """Raise ``PlanError`` listing every way ``plan`` would corrupt a value."""
    problems = plan_problems(graph, plan)
    if problems:
        raise PlanError(f"{len(problems)} problem(s) in the arena plan of {graph.name}: "
                        + "; ".join(problems[:10]))
