"""The memory report: what lives where, and how good the arena plan is (against the lower
bound, greedy-by-size and no reuse at all), as JSON-able data and as a text table."""
from __future__ import annotations

from typing import Any

from ..ir import Graph
from .plans import ArenaPlan, Buffer, PatchPlan
from .placement import Placement, kb

LARGEST_SHOWN = 5
NAME_WIDTH = 48


def _op_name(graph: Graph, index: int) -> str:
    return graph.ops[index].name if 0 <= index < len(graph.ops) else f"op {index}"


def _short(name: str, width: int = NAME_WIDTH) -> str:
    return name if len(name) <= width else name[:width - 3] + "..."


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 4) if b else None


def _buffer_dict(graph: Graph, buf: Buffer) -> dict[str, Any]:
    return {"offset": buf.offset, "bytes": buf.size, "first": buf.first, "last": buf.last,
            "first_op": _op_name(graph, buf.first), "last_op": _op_name(graph, buf.last),
            "tensors": list(buf.tensors)}


def report_dict(graph: Graph, arena: ArenaPlan, placement: Placement,
                flash: dict | None = None) -> dict[str, Any]:
    """Everything the text report shows, plus every buffer, for ``--json`` and the manifest."""
    return {
        "model": graph.name,
        "target": placement.target,
        "sram": {
            "budget_bytes": placement.budget,
            "total_bytes": placement.total,
            "fits": placement.fits,
            "items": [{"name": i.name, "bytes": i.bytes, "description": i.description}
                      for i in placement.items],
            "unplaced": [i.name for i in placement.unplaced],
            "regions": [{
                "name": r.name, "origin": f"0x{r.origin:08X}", "capacity_bytes": r.capacity,
                "peak_bytes": r.peak,
                "memories": [{"name": name, "used_bytes": used, "capacity_bytes": cap}
                             for name, used, cap in r.usage_by_memory()],
                "items": [{"name": p.item.name, "offset": p.offset, "bytes": p.bytes,
                           "address": None if p.address is None else f"0x{p.address:08X}"}
                          for p in r.items],
            } for r in placement.regions],
        },
        "arena": {
            "bytes": arena.arena_bytes,
            "lower_bound_bytes": arena.lower_bound,
            "greedy_by_size_bytes": arena.greedy_by_size_bytes,
            "sum_of_activations_bytes": arena.sum_of_activations,
            "ratio_to_lower_bound": _ratio(arena.arena_bytes, arena.lower_bound),
            "ratio_to_greedy_by_size": _ratio(arena.arena_bytes, arena.greedy_by_size_bytes),
            "ratio_to_sum_of_activations": _ratio(arena.arena_bytes, arena.sum_of_activations),
            "strategy": arena.strategy,
            "alignment": arena.alignment,
            "in_place_ops": list(arena.in_place_ops),
            "keep_alive": sorted(arena.keep_alive),
            "buffers": [_buffer_dict(graph, b) for b in arena.buffers],
            "patches": None if arena.patches is None else _patches_dict(arena.patches),
        },
        "flash": flash,
    }


def _patches_dict(patches: PatchPlan) -> dict[str, Any]:
    return {"first_op": patches.first, "last_op": patches.last, "grid": list(patches.grid),
            "classes": len(patches.classes), "workspace_bytes": patches.workspace_bytes,
            "stage_macs": patches.stage_macs, "recomputed_macs": patches.recomputed_macs}


def _tensor_label(graph: Graph, name: str) -> str:
    """Readable name: TFLite tensor names are often long fused-op strings."""
    for op in graph.ops:
        if name in op.outputs:
            suffix = "" if len(op.outputs) == 1 else f"[{op.outputs.index(name)}]"
            return f"{op.name}{suffix} out"
    return _short(name)


def report_text(graph: Graph, arena: ArenaPlan, placement: Placement,
                flash: dict | None = None) -> str:
    lines = [f"memory plan for {graph.name} on {placement.target or 'native'}"]
    verdict = "fits" if placement.fits else "DOES NOT FIT"
    lines.append(f"  SRAM: {kb(placement.total)} of {kb(placement.budget)} budget "
                 f"({verdict}, {kb(abs(placement.budget - placement.total))} "
                 f"{'free' if placement.budget >= placement.total else 'over'})"
                 + placement.outside_text())
    for item in placement.items:
        lines.append(f"    {item.name:<24} {kb(item.bytes):>10}  {item.description}")
    for region in placement.regions:
        lines.append(f"  region {region.name} @0x{region.origin:08X}: peak {kb(region.peak)} "
                     f"of {kb(region.capacity)}")
        for p in region.items:
            lines.append(f"    +0x{p.offset:06X} {p.item.name:<24} {kb(p.bytes):>10}")
        if len(region.memories) > 1:
            lines.append("    " + ", ".join(f"{name} {kb(used)}/{kb(cap)}"
                                          for name, used, cap in region.usage_by_memory()))
    for item in placement.unplaced:
        lines.append(f"  unplaced: {item.name} {kb(item.bytes)} (no region can hold it)")

    lb = arena.lower_bound
    lines.append(f"  arena: {kb(arena.arena_bytes)} ({arena.arena_bytes} bytes), "
                 f"strategy {arena.strategy}")
    lines.append(f"    {arena.arena_bytes / lb:.2f}x lower bound ({kb(lb)})" if lb else
                 "    lower bound 0 bytes")
    for label, other in (("greedy-by-size", arena.greedy_by_size_bytes),
                         ("sum of activations", arena.sum_of_activations)):
        if other:
            lines.append(f"    {arena.arena_bytes / other:.2f}x {label} ({kb(other)}, "
                         f"saves {kb(other - arena.arena_bytes)})")
    if arena.patches is not None:
        lines.append(f"    patch-based inference: {arena.patches.describe()}")
    if arena.in_place_ops:
        lines.append(f"    in place / views: {len(arena.in_place_ops)} op(s): "
                     + ", ".join(arena.in_place_ops))
    largest = sorted(arena.buffers, key=lambda b: (-b.size, b.offset))[:LARGEST_SHOWN]
    if largest:
        lines.append("  largest buffers:")
        lines.append(f"    {'offset':>8} {'size':>10}  {'live':<40} tensors")
        for b in largest:
            live = f"{_op_name(graph, b.first)} .. {_op_name(graph, b.last)}"
            tensors = ", ".join(_tensor_label(graph, t) for t in b.tensors)
            lines.append(f"    {b.offset:>8} {kb(b.size):>10}  {live:<40} {tensors}")
    if flash:
        lines.append("  flash:")
        for key, value in flash.items():
            shown = kb(value) if isinstance(value, int) and not isinstance(value, bool) else value
            lines.append(f"    {key:<24} {shown}")
    return "\n".join(lines)
