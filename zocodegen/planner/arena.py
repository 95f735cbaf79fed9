"""Offsets of the activation buffers in one arena.

Placing buffers with known lifetimes in the least memory is NP-hard (dynamic storage
allocation), so the planner runs several cheap greedy heuristics over a few ways of sharing
bytes and keeps the smallest result. One of them is the textbook greedy-by-size without any
sharing, so the plan is never worse than that baseline; the lower bound (the heaviest set of
buffers live at one op) shows how far from optimal it can at most be.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType

from ..ir import Graph
from .lifetimes import ALIAS_MODES, activation_names, alias_groups, align_up, tensor_lifetimes
from .plans import ArenaPlan, Buffer
from .scratch import computes_row_by_row, kernel_scratch, scratch_name


def _conflict_lists(buffers: Sequence[Buffer]) -> list[list[int]]:
    return [[j for j, other in enumerate(buffers) if j != i and buf.conflicts(other)]
            for i, buf in enumerate(buffers)]


def _place(buffers: Sequence[Buffer], order: Sequence[int], alignment: int, best_fit: bool,
           conflicts: list[list[int]] | None = None) -> tuple[list[int], int]:
    """Offsets for buffers placed one by one in ``order`` (first-fit: lowest offset that
    clears every placed conflicting buffer; best-fit: the tightest such gap)."""
    if conflicts is None:
        conflicts = _conflict_lists(buffers)
    offsets = [-1] * len(buffers)
    arena = 0
    for i in order:
        size = buffers[i].size
        taken = sorted((offsets[j], offsets[j] + buffers[j].size)
                       for j in conflicts[i] if offsets[j] >= 0)
        chosen, best_gap, cursor = -1, None, 0
        for start, end in taken:
            if start - cursor >= size:
                if not best_fit:
                    chosen = cursor
                    break
                if best_gap is None or start - cursor < best_gap:
                    chosen, best_gap = cursor, start - cursor
            cursor = max(cursor, align_up(end, alignment))
        if chosen < 0:
            chosen = cursor
        offsets[i] = chosen
        arena = max(arena, chosen + size)
    return offsets, arena


def greedy_by_size(buffers: Sequence[Buffer], alignment: int = 4) -> dict[str, int]:
    """The classic baseline: largest buffer first (ties: earlier start), lowest fitting offset.

    Returns buffer name (its first tensor) -> offset.
    """
    order = sorted(range(len(buffers)),
                   key=lambda i: (-buffers[i].size, buffers[i].first, buffers[i].name))
    offsets, _ = _place(buffers, order, alignment, best_fit=False)
    return {buf.name: off for buf, off in zip(buffers, offsets)}


def live_peak(buffers: Iterable[Buffer]) -> int:
    """Largest total size of buffers live at one op index (a lower bound on any placement)."""
    events: dict[int, int] = {}
    for buf in buffers:
        events[buf.first] = events.get(buf.first, 0) + buf.size
        events[buf.last + 1] = events.get(buf.last + 1, 0) - buf.size
    peak = live = 0
    for index in sorted(events):
        live += events[index]
        peak = max(peak, live)
    return peak


# Orderings tried, by name: each maps (buffer, its conflicting buffers' total size) to a key.
_ORDERINGS: dict[str, Callable[[Buffer, int], tuple]] = {
    "greedy-by-size": lambda b, c: (-b.size, b.first, b.name),
    "greedy-by-area": lambda b, c: (-b.size * (b.last - b.first + 1), b.first, b.name),
    "greedy-by-duration": lambda b, c: (-(b.last - b.first), -b.size, b.first, b.name),
    "greedy-by-breadth": lambda b, c: (-(c + b.size), -b.size, b.first, b.name),
    "first-use": lambda b, c: (b.first, -b.size, b.name),
}


def _make_buffers(groups: Iterable[tuple[str, ...]], sizes: Mapping[str, int],
                  lifetimes: Mapping[str, tuple[int, int]]) -> list[Buffer]:
    out = [Buffer(tensors=g, size=max(sizes[n] for n in g),
                  first=min(lifetimes[n][0] for n in g),
                  last=max(lifetimes[n][1] for n in g)) for g in groups]
    return sorted(out, key=lambda b: (b.first, b.last, b.name))


def _candidates(buffers: list[Buffer], conflicts: list[list[int]], alignment: int):
    """Every (ordering, fit) heuristic on one set of buffers: (arena, strategy, offsets, order)."""
    breadth = [sum(buffers[j].size for j in conflicts[i]) for i in range(len(buffers))]
    for name, key in _ORDERINGS.items():
        order = sorted(range(len(buffers)), key=lambda i: key(buffers[i], breadth[i]))
        for best_fit in (False, True):
            offsets, arena = _place(buffers, order, alignment, best_fit, conflicts)
            yield arena, f"{name}, {'best' if best_fit else 'first'}-fit", offsets, order


def _search_budget(count: int) -> int:
    """Placements the local search may try: plenty for small graphs, bounded work for big."""
    return max(100, min(2000, 4_000_000 // max(1, count * count)))


def _local_search(buffers: list[Buffer], conflicts: list[list[int]], order: list[int],
                  alignment: int, floor: int, budget: int) -> tuple[int, list[int], int]:
    """Improve a first-fit order by moving the buffers that set the arena's top (or the ones
    they sit on) elsewhere in the order; first-fit in the right order is optimal, so the
    order is all there is to search. Returns (arena, offsets, placements tried)."""
    offsets, arena = _place(buffers, order, alignment, False, conflicts)
    tried = 0
    while arena > floor and tried < budget:
        top = [i for i in order if offsets[i] + buffers[i].size == arena]
        movers = list(dict.fromkeys(top + [j for i in top for j in conflicts[i]]))
        found = None
        for i in movers:
            rest = [k for k in order if k != i]
            for pos in range(len(order)):
                candidate = rest[:pos] + [i] + rest[pos:]
                if candidate == order:
                    continue
                tried += 1
                cand_offsets, cand_arena = _place(buffers, candidate, alignment, False,
                                                  conflicts)
                if cand_arena < arena:
                    found = candidate, cand_offsets, cand_arena
                    break
                if tried >= budget:
                    break
            if found or tried >= budget:
                break
        if not found:
            break
        order, offsets, arena = found
    return arena, offsets, tried


def plan_arena(graph: Graph, keep_alive: frozenset[str] = frozenset(),
               alignment: int = 4, separate_ops: frozenset[int] = frozenset(),
               in_place_convolutions: bool = False) -> ArenaPlan:
    """Offsets for every activation tensor so that no two live at once share bytes, except
    where a kernel is known to allow it (RESHAPE views, in-place element-wise ops).

    Tries every ordering heuristic with first- and best-fit under full sharing, views only and
    no sharing, then a bounded local search while the best is above the lower bound; the
    smallest arena wins (ties: the earlier, simpler candidate). ``keep_alive`` tensors live to
    the end and are never overwritten in place. Kernel scratch (``planner/scratch.py``) is
    placed like a tensor that lives for its op only. Ops in ``separate_ops`` (indices) never
    compute in place: training runs the kernels of trainable layers on buffers of its own.
    Convolutions compute in place only with ``in_place_convolutions``: row by row they cost
    instructions (kws +12 %), so builds ask for it only when they do not fit otherwise.
    """
    if alignment < 1:
        raise ValueError(f"alignment must be positive, got {alignment}")
    unknown = sorted(set(keep_alive) - set(graph.tensors))
    if unknown:
        raise ValueError(f"keep_alive names tensors the graph lacks: {', '.join(unknown)}")
    if not in_place_convolutions:
        separate_ops = separate_ops | {k for k, op in enumerate(graph.ops)
                                       if computes_row_by_row(op)}
    acts = activation_names(graph)
    keep = frozenset(n for n in keep_alive if n in acts)
    lifetimes = tensor_lifetimes(graph, keep)
    raw = {n: graph.tensors[n].nbytes for n in acts}
    sizes = {n: align_up(raw[n], alignment) for n in acts}

    best = None
    per_mode: dict[str, tuple[list[Buffer], tuple[str, ...], dict]] = {}
    for mode in ALIAS_MODES:
        groups = alias_groups(graph, lifetimes, keep, mode, separate_ops)
        # the scratch depends on the mode: a convolution in place needs its ring
        scratch = {scratch_name(graph, i): (i, align_up(n, alignment))
                   for i, n in kernel_scratch(graph, frozenset(groups.ops)).items()}
        scratch_buffers = [Buffer((name,), size, i, i) for name, (i, size) in scratch.items()]
        buffers = sorted(_make_buffers(groups.groups, sizes, lifetimes) + scratch_buffers,
                         key=lambda b: (b.first, b.last, b.name))
        per_mode[mode] = (buffers, groups.ops, scratch)
        conflicts = _conflict_lists(buffers)
        candidates = sorted(_candidates(buffers, conflicts, alignment), key=lambda c: c[0])
        if not candidates:
            continue
        # Stable sort: on ties the earlier (simpler) heuristic wins.
        arena, strategy, offsets, _ = candidates[0]
        if best is None or arena < best[0]:
            best = (arena, f"{strategy}, sharing: {mode}", mode, offsets)
        # Local search from the best few distinct orders, while it can still pay off.
        floor, budget = live_peak(buffers), _search_budget(len(buffers))
        starts = list({tuple(c[3]): c for c in candidates if c[1].endswith("first-fit")}.values())
        for _, strategy, _, order in sorted(starts, key=lambda c: c[0])[:3]:
            if best[0] <= floor or budget <= 0:
                break
            arena, offsets, tried = _local_search(buffers, conflicts, list(order), alignment,
                                                  floor, budget)
            budget -= tried
            if arena < best[0]:
                best = (arena, f"{strategy} + local search, sharing: {mode}", mode, offsets)

    plain = per_mode["none"][0]
    baseline = greedy_by_size(plain, alignment)
    baseline_bytes = max((baseline[b.name] + b.size for b in plain), default=0)
    assert best is None or best[0] <= baseline_bytes, "greedy-by-size is among the candidates"

    arena_bytes, strategy, mode, offsets = best if best else (0, "empty", "none", [])
    buffers, ops, scratch = per_mode[mode]
    placed = tuple(sorted((Buffer(b.tensors, b.size, b.first, b.last, off)
                           for b, off in zip(buffers, offsets)),
                          key=lambda b: (b.offset, b.first, b.name)))
    tensor_offsets = {n: b.offset for b in placed for n in b.tensors}
    return ArenaPlan(
        arena_bytes=arena_bytes,
        offsets=MappingProxyType({n: tensor_offsets[n] for n in acts}),
        buffers=placed,
        in_place_ops=ops,
        lower_bound=min(live_peak(per_mode[m][0]) for m in ("in-place", "element-wise")),
        greedy_by_size_bytes=baseline_bytes,
        sum_of_activations=sum(sizes.values()) + sum(size for _, size in scratch.values()),
        strategy=strategy,
        alignment=alignment,
        keep_alive=keep,
        lifetimes=MappingProxyType(dict(lifetimes)),
        tensor_bytes=MappingProxyType(raw),
        scratch_offsets=MappingProxyType({i: tensor_offsets[name]
                                          for name, (i, _) in scratch.items()}),
    )


def exhaustive_optimum(buffers: Sequence[Buffer], alignment: int = 4) -> int:
    """The exact minimum arena for a handful of buffers (tests only: factorial time).

    First-fit in the order of the optimal offsets reproduces an optimal packing, so trying
    every order finds the optimum.
    """
    from itertools import permutations
    conflicts = _conflict_lists(buffers)
    return min((_place(buffers, order, alignment, False, conflicts)[1]
                for order in permutations(range(len(buffers)))), default=0)
