"""Patch-based inference (MCUNetV2, Lin et al., NeurIPS 2021): run the memory-hungry
first stage of a network one spatial patch at a time, so that only a patch of each of its
activations exists at once; the stage's input and output stay whole.

A *stage* is a chain of consecutive ops that each read only the previous op's output and
compute every output pixel from a window of input pixels (convolutions, pooling, PAD,
QUANTIZE). The stage's output is cut into a grid of near-equal patches; walking back through
the chain gives, for every patch, the window each intermediate tensor must hold (overlapping
"halos" between neighbouring patches are computed twice: the recomputed MACs are the price).

Each patch runs the ordinary kernels on a *patch graph*: the same ops and weights on
patch-sized tensors, with the padding of each op re-derived from where the patch sits, so
border patches pad exactly where the whole tensor would and interior patches pad nothing.
Patches with equal geometry share one patch graph (a *class*, at most nine for a grid) and
one arena layout inside a *workspace*. Bit-exactness therefore follows from the kernels'
own semantics, and tests check it against the reference on whole tensors.

For the arena, the stage is one step: a *planning view* of the graph replaces its first op
by a stand-in that reads the stage input, writes the stage output and needs the workspace as
scratch, and its other ops by empty stand-ins; every planner function then works unchanged,
and the lower bound it reports is the one of the patched schedule.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import numpy as np

from ..ir import Graph, Op, Tensor
from ..ops.table import OPS, macs
from .arena import plan_arena
from .plans import ArenaPlan, Patch, PatchClass, PatchPlan, Span

#: Op types of the planning view (never in a model): the stage, and the ops it covers.
STAGE_OP_TYPE = "PATCH_STAGE"
COVERED_OP_TYPE = "PATCH_COVERED"
#: Largest patch grid tried, per axis (MCUNetV2 uses 2x2 to 4x4 on its models).
MAX_GRID = 6
#: Of plans whose arenas are within this fraction of the smallest, the one that recomputes
#: the fewest MACs wins: a few bytes are not worth a much slower inference.
ARENA_TOLERANCE = 0.02


Pads = tuple[tuple[int, int], tuple[int, int]]  # (before, after) of rows, of columns


def _activation_inputs(graph: Graph, op: Op) -> list[str]:
    return [n for n in op.inputs if n and graph.tensors[n].data is None]


def patchable(graph: Graph, op: Op) -> bool:
    """Whether a patch can run ``op``: each output pixel depends on a window of input pixels
    only (its row has a ``window``), one NHWC activation in and out with batch 1."""
    row = OPS.get(op.type)
    if row is None or row.window is None or len(op.outputs) != 1:
        return False
    inputs = _activation_inputs(graph, op)
    if len(inputs) != 1:
        return False
    x, y = graph.tensors[inputs[0]], graph.tensors[op.outputs[0]]
    if len(x.shape) != 4 or len(y.shape) != 4 or x.shape[0] != 1 or y.shape[0] != 1:
        return False
    return row.window(graph, op) is not None


def _consumers(graph: Graph) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for index, op in enumerate(graph.ops):
        for name in dict.fromkeys(n for n in op.inputs if n):
            out.setdefault(name, []).append(index)
    return out


def chains(graph: Graph) -> list[tuple[int, int]]:
    """Maximal runs ``(first, last)`` of two or more consecutive patchable ops, each reading
    only the previous op's output, which nothing else reads (so it need never exist whole)."""
    consumers = _consumers(graph)

    def linked(index: int) -> bool:
        previous = graph.ops[index - 1].outputs[0]
        return (_activation_inputs(graph, graph.ops[index]) == [previous]
                and consumers.get(previous) == [index] and previous not in graph.outputs)

    runs: list[tuple[int, int]] = []
    start = None
    for index, op in enumerate(graph.ops):
        if start is not None and patchable(graph, op) and linked(index):
            continue
        if start is not None and index - 1 > start:
            runs.append((start, index - 1))
        start = index if patchable(graph, op) else None
    if start is not None and len(graph.ops) - 1 > start:
        runs.append((start, len(graph.ops) - 1))
    return runs


def _input_span(out: Span, size_in: int, kernel: int, stride: int, dilation: int,
                before: int) -> tuple[Span, int, int]:
    """The input rows an output span needs, and the padding before and after them."""
    lo = out.start * stride - before
    hi = (out.size - 1) * stride + (kernel - 1) * dilation + 1 + lo
    span = Span(max(0, lo), min(size_in, hi))
    return span, span.start - lo, hi - span.stop


def _patch_op(op: Op, pads: Pads) -> Op:
    """``op`` with the padding of one patch (rows (before, after), columns (before, after))."""
    (top, bottom), (left, right) = pads
    options = dict(op.options)
    if op.type == "PAD":
        options["paddings"] = ((0, 0), (top, bottom), (left, right), (0, 0))
    elif "padding" in options:
        options["padding"] = (top, bottom, left, right)
    return Op(op.type, op.name, op.inputs, op.outputs, options)


def _walk_back(graph: Graph, first: int, last: int, rows: Span, cols: Span
               ) -> tuple[list[tuple[Span, Span]], list[Pads]] | None:
    """Windows of every stage tensor (input first) and every op's padding, for one output
    window; None when some intermediate window would be empty (a patch all padding)."""
    windows = [(rows, cols)]
    pads: list[Pads] = []
    for index in range(last, first - 1, -1):
        op = graph.ops[index]
        x = graph.tensors[_activation_inputs(graph, op)[0]]
        kernel, stride, dilation, before = OPS[op.type].window(graph, op)
        spans, op_pads = [], []
        for axis, out in enumerate(windows[0]):
            span, pad_before, pad_after = _input_span(out, x.shape[1 + axis], kernel[axis],
                                                      stride[axis], dilation[axis],
                                                      before[axis])
            if span.size <= 0:
                return None
            spans.append(span)
            op_pads.append((pad_before, pad_after))
        windows.insert(0, tuple(spans))
        pads.insert(0, tuple(op_pads))
    return windows, pads


def _patch_graph(graph: Graph, first: int, last: int, windows: list[tuple[Span, Span]],
                 pads: list[Pads], name: str) -> Graph:
    """The stage's ops and weights on patch-sized activations (same names as the model's)."""
    ops = [_patch_op(graph.ops[first + k], p) for k, p in enumerate(pads)]
    stage_in = _activation_inputs(graph, graph.ops[first])[0]
    names = [stage_in] + [graph.ops[i].outputs[0] for i in range(first, last + 1)]
    tensors: dict[str, Tensor] = {}
    for tensor_name, (rows, cols) in zip(names, windows):
        t = graph.tensors[tensor_name]
        tensors[tensor_name] = Tensor(t.name, (1, rows.size, cols.size, t.shape[3]), t.dtype,
                                      t.quant)
    for op in ops:
        for n in op.inputs:
            if n and graph.tensors[n].data is not None:
                tensors[n] = graph.tensors[n]
    return Graph(name, graph.source_format, tensors, ops, [stage_in], [names[-1]])


def _spans(size: int, parts: int) -> list[Span]:
    """``parts`` near-equal spans covering ``size``."""
    cuts = [size * k // parts for k in range(parts + 1)]
    return [Span(a, b) for a, b in zip(cuts, cuts[1:])]


def patch_plan(graph: Graph, first: int, last: int, grid: tuple[int, int],
               alignment: int = 4, in_place_convolutions: bool = False) -> PatchPlan | None:
    """Patches of the stage ``first..last`` in a ``grid``; None when the grid does not suit
    the stage (more patches than output rows or columns, or a patch all padding)."""
    y = graph.tensors[graph.ops[last].outputs[0]]
    if grid[0] > y.shape[1] or grid[1] > y.shape[2]:
        return None
    classes: dict[tuple, int] = {}
    class_graphs: list[Graph] = []
    counts: list[int] = []
    patches = []
    for rows in _spans(y.shape[1], grid[0]):
        for cols in _spans(y.shape[2], grid[1]):
            walked = _walk_back(graph, first, last, rows, cols)
            if walked is None:
                return None
            windows, pads = walked
            # a patch graph depends on nothing else: equal geometry, one class
            key = (tuple((r.size, c.size) for r, c in windows), tuple(pads))
            if key not in classes:
                classes[key] = len(class_graphs)
                class_graphs.append(_patch_graph(graph, first, last, windows, pads,
                                                 f"{graph.name} patch class {len(class_graphs)}"))
                counts.append(0)
            counts[classes[key]] += 1
            patches.append(Patch(classes[key], windows[0][0], windows[0][1], rows, cols))
    plans = [plan_arena(g, alignment=alignment, in_place_convolutions=in_place_convolutions)
             for g in class_graphs]
    stage_macs = sum(macs(graph, graph.ops[i]) for i in range(first, last + 1))
    patched = sum(count * sum(macs(g, op) for op in g.ops)
                  for g, count in zip(class_graphs, counts))
    return PatchPlan(
        first=first, last=last, grid=grid,
        input=_activation_inputs(graph, graph.ops[first])[0],
        output=graph.ops[last].outputs[0],
        classes=tuple(PatchClass(g, p, n) for g, p, n in zip(class_graphs, plans, counts)),
        patches=tuple(patches), workspace_bytes=max(p.arena_bytes for p in plans),
        stage_macs=stage_macs, patched_macs=patched)


def planning_view(graph: Graph, patches: PatchPlan) -> Graph:
    """The graph the arena planner sees: the stage as one op that reads the stage input,
    writes the stage output and uses the workspace as scratch (planner/scratch.py); the ops
    it covers as empty stand-ins (so op indices stay the model's); no stage-internal
    tensors."""
    internal = {graph.ops[i].outputs[0] for i in range(patches.first, patches.last)}
    ops = list(graph.ops)
    ops[patches.first] = Op(STAGE_OP_TYPE, f"patches of {graph.ops[patches.first].name} .. "
                            f"{graph.ops[patches.last].name}", (patches.input,),
                            (patches.output,), {"workspace_bytes": patches.workspace_bytes})
    for index in range(patches.first + 1, patches.last + 1):
        ops[index] = Op(COVERED_OP_TYPE, graph.ops[index].name, (), ())
    tensors = {n: t for n, t in graph.tensors.items() if n not in internal}
    return Graph(graph.name, graph.source_format, tensors, ops, graph.inputs, graph.outputs)


def plan_patched_arena(graph: Graph, patches: PatchPlan, alignment: int = 4,
                       in_place_convolutions: bool = False) -> ArenaPlan:
    """The arena of the model run with ``patches`` (``ArenaPlan.patches`` set)."""
    plan = plan_arena(planning_view(graph, patches), alignment=alignment,
                      in_place_convolutions=in_place_convolutions)
    return replace(plan, patches=patches)


def _candidates(graph: Graph, alignment: int, in_place: bool) -> Iterator[PatchPlan]:
    for start, end in chains(graph):
        for last in range(start + 1, end + 1):
            for n in range(2, MAX_GRID + 1):
                plan = patch_plan(graph, start, last, (n, n), alignment, in_place)
                if plan is not None:
                    yield plan


def best_patched_arena(graph: Graph, fits: Callable[[ArenaPlan], bool] | None = None,
                       alignment: int = 4, in_place_convolutions: bool = True
                       ) -> ArenaPlan | None:
    """The patched arena to use, or None when no stage and grid beats running every op whole.

    With ``fits`` (does a build with this arena fit the board?): of the plans that fit, the
    one that recomputes the fewest MACs, so a model pays for patches only what its board
    needs. Without, or when none fits: the smallest arena (of near-equal ones, the one that
    recomputes least).
    """
    whole = plan_arena(graph, alignment=alignment, in_place_convolutions=in_place_convolutions)
    found = [plan_patched_arena(graph, p, alignment, in_place_convolutions)
             for p in _candidates(graph, alignment, in_place_convolutions)]
    found = [p for p in found if p.arena_bytes < whole.arena_bytes]
    if not found:
        return None
    fitting = [p for p in found if fits(p)] if fits is not None else []
    if fitting:
        return min(fitting, key=lambda p: (p.patches.recomputed_macs, p.arena_bytes))
    smallest = min(p.arena_bytes for p in found)
    near = [p for p in found if p.arena_bytes <= smallest * (1 + ARENA_TOLERANCE)]
    return min(near, key=lambda p: (p.patches.recomputed_macs, p.arena_bytes))


def class_input_output(patch_class: PatchClass) -> tuple[int, int]:
    """Workspace offsets of a class's input window and output window."""
    g = patch_class.graph
    return patch_class.plan.offsets[g.inputs[0]], patch_class.plan.offsets[g.outputs[0]]


def stitch_reference(graph: Graph, patches: PatchPlan, stage_input: np.ndarray,
                     run) -> np.ndarray:
    """The stage output computed patch by patch with ``run(patch_graph, inputs) -> outputs``
    (the numpy reference in tests): what the generated per-patch loop computes."""
    y = graph.tensors[patches.output]
    out = np.zeros(y.shape, dtype=y.dtype)
    for patch in patches.patches:
        g = patches.classes[patch.class_index].graph
        window = stage_input[:, patch.in_rows.start:patch.in_rows.stop,
                             patch.in_cols.start:patch.in_cols.stop, :]
        result = run(g, {g.inputs[0]: window})[g.outputs[0]]
        out[:, patch.out_rows.start:patch.out_rows.stop,
            patch.out_cols.start:patch.out_cols.stop, :] = result
    return out
