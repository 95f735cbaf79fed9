"""Where a training step keeps what lives only within the step, and where partial forwards
restart (pure; docs/memory.md "Training buffers in dead arena bytes").

Each trained layer needs, while it is estimated, a *gradient region* (WP: int32 gradient +
weight backup; NP: node gradient + h(z + delta); CH: channel gradient + h(z + delta); INT8:
generator states + backup) and the *saved activations* its queries restart from (what a
forward from its restart op reads from before that op, one slot per sample). Both go into arena bytes that no op running
while they are live touches, or past the arena's end: the arena's storage then grows by
the largest overhang (the *tail*).

**Restart groups** (recomputation instead of saved activations). Consecutive WP layers
(without --query-batch) may form a group whose queries all restart from the group's first layer: a member's
queries rerun the ops between with their unperturbed (old) weights, and the members'
updates wait until the group is done. Every estimate still sees step t's network ("global
update", docs/training.md), so the parameters are bit-identical to one layer per group;
the group saves one set of activations instead of one per member, at the price of the
recomputed MACs (``recomputed_macs``).

Lifetimes, per group g (first layer f, restart op r = op of f; N samples):
* S_g, the saved activations (N slots): written after the previous group's advance, read
  until g's own advance; meanwhile ops from r on run (N > 1: from the previous group's
  restart op on, since its advance runs sample by sample);
* G_j, each member's gradient region: from its first query to g's deferred update, while
  ops from r on run (the member's queries restart at r);
* live together: S_g with the previous group's G (updated after S_g is saved) and with its
  own G; the members' G with each other; with N > 1 also S_g with the previous group's S.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..ir import Graph
from ..ops.table import macs
from ..planner import ArenaPlan

ALIGN = 8
#: estimators whose gradient region is only live during their own layer's (group's) estimate
ZO_MODES = ("ZO_TRAIN_WP", "ZO_TRAIN_NP", "ZO_TRAIN_CH", "ZO_TRAIN_INT8")
#: estimators whose update can wait for the group's end: WP's deferred state is its
#: gradient region alone (NP's update also reads the layer's saved input, INT8's the query
#: sums that the next layer's queries overwrite)
GROUPABLE_MODES = ("ZO_TRAIN_WP",)
RECOMPUTE_MODES = ("auto", "on", "off")
#: the API's extra mode for tests: every layer that can joins the group before it (the
#: most recomputation, whatever the memory)
EVERY = "every"
#: --recompute auto groups layers unasked only while the recomputed MACs stay under this
#: share of a step's query MACs
CHEAP_RECOMPUTE = 0.01


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def slot_bytes(layer) -> int:
    """One sample's saved activations for a forward from the layer's restart op: its
    restart spans, each 4-aligned."""
    return _align(sum((span.bytes + 3) // 4 * 4 for span in layer.restart))


@dataclass(frozen=True)
class Region:
    """Layer `layer`'s saved activations (its group's) or gradient region."""

    kind: str  # "saved" / "gradient"
    layer: int  # index in the build's layer table (a group's first layer for "saved")
    size: int
    from_op: int  # the arena buffers live at any op from this one on are off limits
    offset: int = 0


def groups(layers: Sequence) -> list[list[int]]:
    """Layer indices per restart group, in order: a layer that restarts at its own op (or
    starts another block) starts a group."""
    out: list[list[int]] = []
    for i, layer in enumerate(layers):
        if out and layer.restart_op != layer.op and layers[out[-1][0]].block == layer.block:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _blocks(layers: Sequence) -> list[list[int]]:
    """Layer indices per block (per zo_train_model), in order."""
    blocks: dict[int, list[int]] = {}
    for i, layer in enumerate(layers):
        blocks.setdefault(layer.block, []).append(i)
    return list(blocks.values())


def _shared_regions(layers: Sequence, batch: int
                    ) -> tuple[list[Region], list[tuple[int, int]]]:
    """The alternative to _regions: one saved region per block, whose N slots every group
    reuses (a group's slot n is written right after the previous group's slot n was
    read), live the whole step; the gradient regions as in _regions."""
    regions, conflicts = _regions(layers, batch)
    kept = {k: n for n, k in enumerate(k for k, r in enumerate(regions)
                                       if r.kind == "gradient")}
    out = [regions[k] for k in kept]
    pairs = [(kept[a], kept[b]) for a, b in conflicts if a in kept and b in kept]
    for members in _blocks(layers):
        s = len(out)
        out.append(Region("saved", members[0],
                          batch * max(slot_bytes(layers[i]) for i in members), 0))
        pairs += [(s, n) for n, r in enumerate(out[:s])
                  if r.kind == "gradient" and r.layer in members]
    return out, pairs


def _regions(layers: Sequence, batch: int) -> tuple[list[Region], list[tuple[int, int]]]:
    """The step's regions, and the pairs of them (indices) live at the same time."""
    regions: list[Region] = []
    conflicts: list[tuple[int, int]] = []
    previous: tuple[int, list[int], int, int] | None = None  # saved, gradients, op, block
    for group in groups(layers):
        first = layers[group[0]]
        if previous is not None and previous[3] != first.block:
            previous = None  # another block: another zo_train_model, other steps
        if batch == 1:
            saved_from = first.op
        else:  # the next sample's forward (or the previous group's advance) runs first
            saved_from = previous[2] if previous is not None else 0
        s = len(regions)
        regions.append(Region("saved", group[0], batch * slot_bytes(first), saved_from))
        grads = []
        for i in group:
            if layers[i].mode in ZO_MODES and layers[i].gradient_bytes:
                grads.append(len(regions))
                regions.append(Region("gradient", i, layers[i].gradient_bytes, first.op))
        conflicts += [(s, g) for g in grads + (previous[1] if previous else [])]
        conflicts += [(a, b) for k, a in enumerate(grads) for b in grads[k + 1:]]
        if batch > 1 and previous is not None:
            conflicts.append((previous[0], s))
        previous = (s, grads, first.op, first.block)
    return regions, conflicts


def _lowest_gap(need: int, taken: list[tuple[int, int]]) -> int:
    cursor = 0
    for lo, hi in sorted(taken):
        if lo - _align(cursor) >= need:
            break
        cursor = max(cursor, hi)
    return _align(cursor)


def _place(arena: ArenaPlan, regions: list[Region], conflicts: list[tuple[int, int]],
           order: list[int]) -> list[Region]:
    """Each region, in `order`, at the lowest offset clear of the arena buffers live from
    its op on and of the regions already placed that it is live with."""
    partners: dict[int, set[int]] = {i: set() for i in range(len(regions))}
    for a, b in conflicts:
        partners[a].add(b)
        partners[b].add(a)
    placed: dict[int, Region] = {}
    for i in order:
        r = regions[i]
        taken = [(b.offset, b.offset + b.size) for b in arena.buffers if b.last >= r.from_op]
        taken += [(placed[k].offset, placed[k].offset + placed[k].size)
                  for k in partners[i] if k in placed]
        placed[i] = replace(r, offset=_lowest_gap(r.size, taken))
    return [placed[i] for i in range(len(regions))]


def _end(regions: Sequence[Region]) -> int:
    return max((r.offset + r.size for r in regions), default=0)


def place_regions(arena: ArenaPlan, layers: Sequence, batch: int) -> tuple[list, int]:
    """The layers with the arena offsets of their saved activations and gradient regions,
    and the tail the arena's storage grows by. Of three layouts, the one that ends lowest:
    each group's saved activations placed before or after the gradient regions, or one
    saved region shared by all groups (the layout of a static buffer, never worse than
    one)."""
    def gradients_first(regions: list[Region]) -> list[int]:
        return sorted(range(len(regions)), key=lambda k: regions[k].kind != "gradient")

    own, own_conflicts = _regions(layers, batch)
    shared, shared_conflicts = _shared_regions(layers, batch)
    layouts = [(False, _place(arena, own, own_conflicts, list(range(len(own))))),
               (False, _place(arena, own, own_conflicts, gradients_first(own))),
               (True, _place(arena, shared, shared_conflicts, gradients_first(shared)))]
    is_shared, placed = min(layouts, key=lambda layout: _end(layout[1]))
    out = list(layers)
    members = {g[0]: g for g in (_blocks(layers) if is_shared else groups(layers))}
    for r in placed:
        if r.kind == "gradient":
            out[r.layer] = replace(out[r.layer], gradient_offset=r.offset)
            continue
        for i in members[r.layer]:
            out[i] = replace(out[i], saved_offset=r.offset, saved_stride=r.size // batch)
    end = _end(placed)
    return out, _align(end - arena.arena_bytes) if end > arena.arena_bytes else 0


def _placed_regions(layers: Sequence, batch: int) -> list[Region]:
    """Every region of placed layers, each group's saved activations once, with offsets."""
    return [replace(r, offset=layers[r.layer].saved_offset if r.kind == "saved"
                    else layers[r.layer].gradient_offset) for r in _regions(layers, batch)[0]]


def _merged(layers: Sequence, start: int) -> list:
    """The layers with the group that starts at layer ``start`` joined to the group before
    it: its members restart from that group's first layer."""
    all_groups = groups(layers)
    k = next(n for n, g in enumerate(all_groups) if g[0] == start)
    first = layers[all_groups[k - 1][0]]
    out = list(layers)
    for i in all_groups[k]:
        out[i] = replace(out[i], restart_op=first.op, restart=first.restart)
    return out


def _mergeable(layers: Sequence, all_groups: list[list[int]], k: int) -> bool:
    if k == 0 or layers[all_groups[k - 1][0]].block != layers[all_groups[k][0]].block:
        return False
    return all(layers[i].mode in GROUPABLE_MODES and layers[i].query_batch is None
               for i in all_groups[k - 1] + all_groups[k])


def recomputed_macs(graph: Graph, layers: Sequence, forwards: int) -> int:
    """MACs a step spends rerunning the ops before members' own ops: ``forwards`` query
    forwards per member (Q x sides x N)."""
    return forwards * sum(macs(graph, graph.ops[k]) for L in layers
                          for k in range(L.restart_op, L.op))


def query_macs(graph: Graph, layers: Sequence, forwards: int, logits_op: int) -> int:
    """MACs of a step's query forwards without recomputation, each from its layer on."""
    return forwards * sum(macs(graph, graph.ops[k]) for L in layers
                          for k in range(L.op, logits_op + 1))


def choose_groups(graph: Graph, arena: ArenaPlan, layers: Sequence, batch: int,
                  forwards: int, logits_op: int, mode: str,
                  fits: Callable[[int], bool]) -> tuple[list, int]:
    """Restart groups and placement (``place_regions``) for --recompute ``mode``.

    Each round joins every group with a region at the current end to the group before it,
    and keeps the result if the end went down. ``on``: as long as it does; ``auto``: while
    the recomputed MACs stay under CHEAP_RECOMPUTE of the step's query MACs, and beyond
    that only until the build ``fits`` (given the tail); ``off``: every layer restarts at
    its own op."""
    if mode not in RECOMPUTE_MODES + (EVERY,):
        raise ValueError(f"recompute mode {mode!r}")
    if mode == EVERY:
        for k in reversed(range(len(groups(layers)))):
            if _mergeable(layers, groups(layers), k):
                layers = _merged(layers, groups(layers)[k][0])
    best, tail = place_regions(arena, layers, batch)
    if mode in ("off", EVERY):
        return best, tail
    budget = CHEAP_RECOMPUTE * query_macs(graph, layers, forwards, logits_op)
    while True:
        regions = _placed_regions(best, batch)
        end = _end(regions)
        all_groups = groups(best)
        group_of = {i: k for k, g in enumerate(all_groups) for i in g}
        peaks = sorted({group_of[r.layer] for r in regions if r.offset + r.size == end})
        if not all(_mergeable(best, all_groups, k) for k in peaks):
            break
        candidate = best
        for k in reversed(peaks):  # the later first: a merge keeps earlier groups' starts
            candidate = _merged(candidate, all_groups[k][0])
        candidate, candidate_tail = place_regions(arena, candidate, batch)
        if candidate_tail >= tail or (mode == "auto" and fits(tail) and recomputed_macs(
                graph, candidate, forwards) > budget):
            break
        best, tail = candidate, candidate_tail
    return best, tail
