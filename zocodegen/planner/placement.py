"""Where the RAM items of a build (arena, stack, training buffers) go in the target's memories,
and the refusal, with what to try instead, when they do not fit the budget."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import UserError
from ..target import budget_text, roomier_targets, target_data
from .lifetimes import align_up

# Cortex-M stacks and 64-bit accesses want 8-byte alignment (AAPCS).
ITEM_ALIGNMENT = 8
KB = 1024


class BudgetError(UserError):
    """The build needs more SRAM than the target's budget (or a region can hold)."""


@dataclass(frozen=True)
class RamItem:
    name: str
    bytes: int
    description: str = ""
    memory: str | None = None  # pin to this memory (as the linker script does), e.g. "DTCM"


@dataclass(frozen=True)
class Memory:
    """One memory region of a target, as ``targets/<name>/target.json`` lists it."""

    name: str
    origin: int
    bytes: int
    planner: bool


@dataclass(frozen=True)
class PlacedItem:
    item: RamItem
    offset: int  # from the start of its region
    bytes: int
    address: int | None  # absolute, when the region has an origin


@dataclass(frozen=True)
class Region:
    """Planner memories with consecutive addresses, used as one span (DTCM+SRAM1 on F746)."""

    name: str
    origin: int
    capacity: int
    memories: tuple[Memory, ...]
    items: tuple[PlacedItem, ...] = ()

    @property
    def peak(self) -> int:
        """Bytes from the region's start to the end of its last item."""
        return max((p.offset + p.bytes for p in self.items), default=0)

    def usage_by_memory(self) -> tuple[tuple[str, int, int], ...]:
        """(memory name, bytes used, capacity) for each physical memory in the span."""
        out, start = [], 0
        for mem in self.memories:
            used = sum(max(0, min(p.offset + p.bytes, start + mem.bytes) - max(p.offset, start))
                       for p in self.items)
            out.append((mem.name, used, mem.bytes))
            start += mem.bytes
        return tuple(out)


@dataclass(frozen=True)
class Placement:
    target: str | None  # None: native build, no regions
    regions: tuple[Region, ...]
    items: tuple[RamItem, ...]
    total: int  # sum of the items, each padded to ITEM_ALIGNMENT
    budget: int
    fits: bool
    unplaced: tuple[RamItem, ...] = ()  # items no region could hold
    # items pinned to a memory outside the budget (the H7B3's stack and statics in DTCM):
    # (memory, bytes), which the linked image takes beside ``total``
    outside: tuple[tuple[str, int], ...] = ()

    def outside_text(self) -> str:
        """", and 9.1 KB in DTCM outside the budget (604.6 KB in all)", or "" when none."""
        if not self.outside:
            return ""
        where = " and ".join(f"{kb(size)} in {memory}" for memory, size in self.outside)
        every = self.total + sum(size for _, size in self.outside)
        return f", and {where} outside the budget ({kb(every)} in all)"


def target_memories(target_name: str) -> tuple[Memory, ...]:
    """The ``memories`` list of a target description."""
    return tuple(Memory(name=m["name"], origin=int(str(m["origin"]), 0), bytes=int(m["bytes"]),
                        planner=bool(m.get("planner", False)))
                 for m in target_data(target_name).get("memories", []))


def planner_regions(memories: Sequence[Memory]) -> tuple[Region, ...]:
    """The memories the planner may use, address-contiguous ones merged into one span."""
    spans: list[list[Memory]] = []
    for mem in sorted((m for m in memories if m.planner), key=lambda m: m.origin):
        if spans and spans[-1][-1].origin + spans[-1][-1].bytes == mem.origin:
            spans[-1].append(mem)
        else:
            spans.append([mem])
    return tuple(Region(name="+".join(m.name for m in span), origin=span[0].origin,
                        capacity=sum(m.bytes for m in span), memories=tuple(span))
                 for span in spans)


def kb(nbytes: int) -> str:
    return f"{nbytes / KB:.1f} KB"


def default_suggestions(target_name: str | None) -> list[str]:
    out = [f"a target with more SRAM ({name}: {budget_text(name)})"
           for name in roomier_targets(target_name)[-1:]]
    out.append("a smaller input resolution or fewer channels")
    return out


def place(items: Sequence[RamItem], target_name: str | None, budget_bytes: int,
          suggestions: Sequence[str] | None = None, strict: bool = True) -> Placement:
    """Put each item in a region and check the budget: items pinned to a memory go there
    first, in the caller's order (the linker script's order), the rest first-fit decreasing.

    Raises ``BudgetError`` when the total exceeds the budget or an item fits no region,
    unless ``strict`` is false; then the returned placement has ``fits=False``.
    """
    items = tuple(items)
    for item in items:
        if item.bytes < 0:
            raise ValueError(f"{item.name}: negative size {item.bytes}")
    memories = target_memories(target_name) if target_name else ()
    regions = planner_regions(memories) if target_name else ()
    # Pinned items may sit in a memory the planner does not otherwise use (the H7B3 stack in
    # DTCM): that memory becomes a region of its own and does not count against the budget.
    extra = tuple(Region(m.name, m.origin, m.bytes, (m,)) for m in memories
                  if not m.planner and any(i.memory == m.name for i in items))
    regions = regions + extra
    budgeted = [i for i in items
                if not any(i.memory == m.name for r in extra for m in r.memories)]
    total = sum(align_up(i.bytes, ITEM_ALIGNMENT) for i in budgeted)
    outside = tuple((m.name, sum(align_up(i.bytes, ITEM_ALIGNMENT) for i in items
                                 if i.memory == m.name))
                    for r in extra for m in r.memories)
    placed: list[list[PlacedItem]] = [[] for _ in regions]
    ends = [0] * len(regions)
    unplaced = []
    # Pinned items first, in the caller's order (the linker script's order), then the rest
    # first-fit decreasing.
    pinned = [i for i in items if i.memory]
    ordered = pinned + sorted((i for i in items if not i.memory), key=lambda i: -i.bytes)
    for item in ordered:
        for r, region in enumerate(regions):
            if item.memory and item.memory not in (m.name for m in region.memories):
                continue
            offset = align_up(ends[r], ITEM_ALIGNMENT)
            if offset + item.bytes <= region.capacity:
                placed[r].append(PlacedItem(item, offset, item.bytes, region.origin + offset))
                ends[r] = offset + item.bytes
                break
        else:
            if regions:
                unplaced.append(item)
    result = Placement(
        target=target_name,
        regions=tuple(Region(rg.name, rg.origin, rg.capacity, rg.memories, tuple(p))
                      for rg, p in zip(regions, placed)),
        items=items, total=total, budget=budget_bytes,
        fits=total <= budget_bytes and not unplaced, unplaced=tuple(unplaced),
        outside=outside)
    if strict and not result.fits:
        raise BudgetError(budget_message(result, suggestions))
    return result


def _fitting_prefix(items: Sequence[RamItem], budget: int) -> int:
    """How many leading items (in the caller's order, most essential first) fit together."""
    total = 0
    for count, item in enumerate(items):
        total += align_up(item.bytes, ITEM_ALIGNMENT)
        if total > budget:
            return count
    return len(items)


def _names(items: Sequence[RamItem]) -> str:
    return " + ".join(i.name for i in items)


def _weighty(items: Sequence[RamItem], budget: int) -> str:
    """What needs how much, as a refusal lists it: items under 0.1 KB left out, and an item's
    description only where the item weighs (an eighth of the budget or more), so that the
    line a newcomer reads names the few that matter (memory_report.txt has every one)."""
    return ", ".join(f"{i.name} {kb(i.bytes)}" + (
        f" ({i.description})" if i.description and 8 * i.bytes >= budget else "")
        for i in items if kb(i.bytes) != kb(0))


def budget_message(placement: Placement, suggestions: Sequence[str] | None = None) -> str:
    """One line: what needs how much, total against budget, what fits, what to try."""
    where = placement.target or "the native build"
    parts = []
    if placement.total > placement.budget:
        over = placement.total - placement.budget
        parts.append(f"the memory plan needs {kb(placement.total)} of SRAM but {where} has a "
                     f"budget of {kb(placement.budget)} ({kb(over)} over): "
                     f"{_weighty(placement.items, placement.budget)}")
        items = placement.items
        count = _fitting_prefix(items, placement.budget)
        if count == 0:
            parts.append(f"even the {items[0].name} alone ({kb(items[0].bytes)}) exceeds the "
                         "budget")
        elif count == 1:
            parts.append(f"the {items[0].name} alone fits ({kb(items[0].bytes)}); adding "
                         f"{_names(items[1:])} does not")
        else:
            fit = sum(align_up(i.bytes, ITEM_ALIGNMENT) for i in items[:count])
            parts.append(f"{_names(items[:count])} fit ({kb(fit)}); adding "
                         f"{_names(items[count:])} does not")
    else:
        needs = ", ".join(f"{i.name} {kb(i.bytes)}" + (f" ({i.description})" if i.description
                                                        else "") for i in placement.items)
        parts.append(f"the memory plan ({kb(placement.total)}: {needs}) is within the budget of "
                     f"{where} ({kb(placement.budget)})")
    for item in (placement.unplaced if placement.total <= placement.budget else ()):
        largest = max(placement.regions, key=lambda r: r.capacity, default=None)
        room = f" (largest: {largest.name}, {kb(largest.capacity)})" if largest else ""
        parts.append(f"the {item.name} ({kb(item.bytes)}) fits in no memory region of "
                     f"{where}{room}")
    tips = list(suggestions) if suggestions is not None else default_suggestions(placement.target)
    if tips:
        parts.append("Try: " + "; ".join(tips))
    return ". ".join(p[:1].upper() + p[1:] for p in parts) + "."
