"""What one row of the op table says about an op (ops/table.py has the rows).

A row is the op's whole contract with the pipeline, in the spirit of TFLite Micro's
Init/Prepare/Eval and CMSIS-NN's ``*_get_buffer_size`` beside each kernel: the frontends fill
its options, the validator asks for its output shape, the reference and the generator are
its two implementations, and the planner asks it for scratch bytes, whether it may run in
place and which input window a patch needs, instead of keeping lists of op names.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..ir import Graph, Op

#: Output shape the op's inputs give (None: the rule checked the output itself); raises
#: ModelError naming the mismatch. Arguments: graph, op, input shapes (None for an absent
#: optional input), output shape, where (the "model: op k TYPE 'name'" prefix).
ShapeRule = Callable[[Graph, Op, list, tuple, str], "tuple[int, ...] | None"]
#: The numpy golden kernel: (op, graph, input values) -> output values.
Kernel = Callable[[Op, Graph, list], list]
#: The C generator: (op, codegen.layers.common.LayerContext) -> its LayerCode, the kernel
#: calls and constant arrays of one layer.
LayerGenerator = Callable[[Op, Any], Any]
#: Per-op fact computed from the graph (MACs, scratch bytes, ...).
GraphFact = Callable[[Graph, Op], Any]
#: (kernel, stride, dilation, padding before), each per axis (rows, columns).
Window = tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]]


def no_macs(graph: Graph, op: Op) -> int:
    return 0


@dataclass(frozen=True)
class WeightLayout:
    """How a trainable op stores its int8 weights (DESIGN.md section 3)."""

    rank: int
    channel_axis: int  # the output-channel axis per-channel scales run along
    train_kind: str  # the C training engine's layer kind (zo_train.h)
    onnx_perm: tuple[int, ...] | None  # our layout -> ONNX Conv's, for export (None: Gemm)


@dataclass(frozen=True)
class OpSpec:
    """One IR op, everything each stage needs to know about it."""

    name: str
    options: tuple[str, ...]  # the normalised options every frontend fills (ir.py)
    output_shape: ShapeRule  # validation (frontends/validate.py)
    reference: Kernel  # reference/, the bit-exact golden semantics
    generate: LayerGenerator  # codegen/layers/, which kernel with which parameters
    inputs: int | None = 1  # activation inputs it reads (None: one or more)
    parameters: Callable[[Graph, Op], Any] | None = None  # raises ModelError (op named) when
    #                                   the kernel cannot derive its parameters (softmax)
    weights: WeightLayout | None = None  # set for the ops training may update
    macs: GraphFact = no_macs  # multiply-accumulates of one inference
    pre_activation: Kernel | None = None  # z before the fused activation (node perturbation)
    scratch_bytes: GraphFact | None = None  # working memory beyond its tensors
    in_place: GraphFact | None = None  # whether its output may overwrite an input
    ring_rows: GraphFact | None = None  # in place row by row: the rows its ring holds
    window: Callable[[Graph, Op], Window | None] | None = None  # set for ops a patch can
    #                                   run: the input window of one output pixel
    backward: str | None = None  # the BP pass's C kind (zo_bp.c); None: no backward rule

    @property
    def trainable(self) -> bool:
        return self.weights is not None
