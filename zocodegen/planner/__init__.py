"""Memory planner (DESIGN.md section 3): activation lifetimes -> offsets in one arena, the
arena and training buffers -> target memory regions, and a report of both.

Typical use::

    arena = plan_arena(graph)
    placement = place([RamItem("arena", arena.arena_bytes, "inference activations"),
                       RamItem("stack", 8192, "call stack")], "stm32f746", budget)
    print(report_text(graph, arena, placement))
"""
from __future__ import annotations

from .arena import greedy_by_size, live_peak, plan_arena
from .lifetimes import (ALIAS_MODES, activation_names, alias_groups,
                        allows_in_place, tensor_lifetimes)
from .plans import ArenaPlan, Buffer
from .placement import (BudgetError, Memory, PlacedItem, Placement, RamItem, Region,
                        budget_message, default_suggestions, kb, place, planner_regions,
                        target_memories)
from .report import report_dict, report_text
from .verify import PlanError, plan_problems, verify

__all__ = [
    "ALIAS_MODES", "ArenaPlan", "Buffer", "BudgetError", "Memory",
    "PlacedItem", "Placement", "PlanError", "RamItem", "Region", "activation_names",
    "alias_groups", "allows_in_place", "budget_message", "default_suggestions", "kb",
    "greedy_by_size", "live_peak", "place", "plan_arena", "plan_problems", "planner_regions",
    "report_dict", "report_text", "target_memories", "tensor_lifetimes", "verify",
]
