"""The planner's results as data: the arena plan (buffers and their offsets) and the patch plan
of patch-based inference, which holds an arena plan per patch class. Kept apart from the
planners that compute them (arena.py, patches.py) so neither planner imports the other."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..ir import Graph


@dataclass(frozen=True)
class Span:
    """Half-open interval of rows (or columns) of a tensor."""

    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Patch:
    """One patch: its class, and where its input and output windows sit in the stage's input
    and output tensors."""

    class_index: int
    in_rows: Span
    in_cols: Span
    out_rows: Span
    out_cols: Span


@dataclass(frozen=True)
class PatchClass:
    """Patches of equal geometry: the patch graph they run and its arena layout."""

    graph: Graph
    plan: ArenaPlan
    count: int  # patches of this class


@dataclass(frozen=True)
class PatchPlan:
    first: int  # op indices of the stage, inclusive
    last: int
    grid: tuple[int, int]  # patch rows, patch columns
    input: str  # the stage's input tensor (whole, in the arena)
    output: str  # the stage's output tensor (whole, in the arena)
    classes: tuple[PatchClass, ...]
    patches: tuple[Patch, ...]  # row by row
    workspace_bytes: int  # the largest class arena
    stage_macs: int  # MACs of the stage run whole
    patched_macs: int  # MACs of all patches

    @property
    def recomputed_macs(self) -> int:
        return self.patched_macs - self.stage_macs

    def describe(self) -> str:
        rows, cols = self.grid
        extra = self.recomputed_macs
        share = f" (+{100 * extra / self.stage_macs:.1f} % of the stage)" if self.stage_macs else ""
        return (f"ops {self.first}..{self.last} in {rows}x{cols} patches, workspace "
                f"{self.workspace_bytes} B, {extra:,} MACs recomputed{share}")


@dataclass(frozen=True)
class Buffer:
    """Bytes shared by tensors whose lifetimes chain (views, in-place results)."""

    tensors: tuple[str, ...]
    size: int  # bytes reserved, a multiple of the plan's alignment
    first: int  # op index, inclusive
    last: int  # op index, inclusive
    offset: int = -1  # -1 until placed

    @property
    def name(self) -> str:
        return self.tensors[0]

    def conflicts(self, other: Buffer) -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass(frozen=True)
class ArenaPlan:
    arena_bytes: int
    offsets: Mapping[str, int]  # every activation tensor -> byte offset (read-only view)
    buffers: tuple[Buffer, ...]  # placed, by offset
    in_place_ops: tuple[str, ...]  # op names whose output shares its input's bytes
    lower_bound: int  # no plan with this sharing can use fewer bytes
    greedy_by_size_bytes: int  # textbook greedy-by-size, no sharing
    sum_of_activations: int  # every activation in its own bytes
    strategy: str  # which heuristic produced this plan
    alignment: int
    keep_alive: frozenset[str] = frozenset()
    lifetimes: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    tensor_bytes: Mapping[str, int] = field(default_factory=dict)  # unpadded sizes
    # op index -> offset of the kernel's working memory during that op (planner/scratch.py)
    scratch_offsets: Mapping[int, int] = field(default_factory=dict)
    # patch-based inference of the first stage (planner/patches.py); its workspace is the
    # scratch of the stage's first op
    patches: PatchPlan | None = None

    def buffer_of(self, tensor: str) -> Buffer:
        for buf in self.buffers:
            if tensor in buf.tensors:
                return buf
        raise KeyError(tensor)

    @property
    def lower_bound_ratio(self) -> float:
        return self.arena_bytes / self.lower_bound if self.lower_bound else 1.0
