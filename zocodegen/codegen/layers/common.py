"""What a layer generator returns, and the helpers every op family shares.

A layer generator turns one IR op into data only (kernel calls with their parameter
initialisers, constant arrays); the C text itself lives in ``templates/project/model.c.j2``.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ...ir import Graph, Op

CTYPES = {np.dtype(np.int8): "int8_t", np.dtype(np.int32): "int32_t",
          np.dtype(np.float32): "float", np.dtype(np.uint8): "uint8_t"}


@dataclass(frozen=True)
class ConstArray:
    """A constant array in ``weights.c`` (flash)."""

    name: str
    ctype: str
    values: np.ndarray
    comment: str
    training_only: bool = False  # kept only when the layer trains (e.g. CONV_2D's raw bias)


@dataclass(frozen=True)
class Call:
    """``function(&params, *args)`` with ``params`` a ``static const params_type``, or
    ``function(params_pointer, *args)`` where training.c owns the parameters (a layer whose
    filter scales sparse training moves: the pointer is aimed at flash or SRAM)."""

    function: str
    params_type: str
    params: tuple[tuple[str, str], ...]
    args: tuple[str, ...]
    params_pointer: str = ""


@dataclass(frozen=True)
class LayerCode:
    summary: str
    calls: tuple[Call, ...] = ()
    arrays: tuple[ConstArray, ...] = ()
    note: str = ""  # why a layer has no calls


class TensorPlaces(Protocol):
    """Where the plan put tensors, all a generator reads of it (planner/plans.py's ArenaPlan
    is one; named here because the planner asks the op table, which names the generators)."""

    offsets: Mapping[str, int]  # arena tensor -> byte offset
    scratch_offsets: Mapping[int, int]  # op index -> offset of its scratch
    in_place_ops: tuple[str, ...]  # ops computed over their input


@dataclass(frozen=True)
class LayerContext:
    """What a layer generator may know besides the op: the graph and where tensors live."""

    graph: Graph
    plan: TensorPlaces
    symbol: str  # C identifier prefix of this layer's constants, e.g. "conv_2d_3"
    index: int  # the op's position in graph.ops
    storage: str = "model_arena_storage"  # the C array the plan's offsets are into

    def tensor_expr(self, name: str, const: bool) -> str:
        """C expression for a tensor: an arena pointer, or a constant array's name."""
        tensor = self.graph.tensor(name)
        ctype = CTYPES[np.dtype(tensor.dtype)]
        if tensor.data is not None:
            return self.const_name(name)
        qualifier = "const " if const else ""
        return f"({qualifier}{ctype} *)(arena + {self.plan.offsets[name]})"

    def const_name(self, name: str) -> str:
        return f"{self.symbol}_{c_identifier(name)}"

    def input(self, op: Op, k: int) -> str:
        return self.tensor_expr(op.inputs[k], const=True)

    def output(self, op: Op, k: int = 0) -> str:
        return self.tensor_expr(op.outputs[k], const=False)

    def constant_inputs(self, op: Op) -> tuple[ConstArray, ...]:
        """Constant operands of non-weight ops (e.g. ADD with a constant) as arrays."""
        arrays = []
        for name in op.inputs:
            tensor = self.graph.tensor(name) if name else None
            if tensor is not None and tensor.data is not None:
                arrays.append(ConstArray(self.const_name(name), CTYPES[np.dtype(tensor.dtype)],
                                         np.asarray(tensor.data).reshape(-1),
                                         f"constant operand '{name}' {list(tensor.shape)}"))
        return tuple(arrays)


def c_identifier(text: str) -> str:
    ident = re.sub(r"[^0-9A-Za-z_]", "_", text).strip("_") or "t"
    return ident if not ident[0].isdigit() else f"t_{ident}"


def fields(**values) -> tuple[tuple[str, str], ...]:
    """Designated-initialiser fields: ints, floats (exact float32), arrays, raw C text."""
    return tuple((key, c_value(value)) for key, value in values.items())


def c_value(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return c_float(value)
    if isinstance(value, Sequence) or isinstance(value, np.ndarray):
        return "{" + ", ".join(c_value(v) for v in value) + "}"
    return str(int(value))


def c_float(value: float) -> str:
    """A float32 literal that round-trips exactly (9 significant digits)."""
    text = f"{float(np.float32(value)):.9g}"
    if "e" not in text and "." not in text and "inf" not in text and "nan" not in text:
        text += ".0"
    return text + "f"


def shape4(shape: Sequence[int]) -> list[int]:
    """Left-pad a shape of rank <= 4 with ones (TFLite's RuntimeShape::ExtendedShape)."""
    shape = list(shape)
    if len(shape) > 4:
        raise ValueError(f"rank {len(shape)} > 4")
    return [1] * (4 - len(shape)) + shape


def strides4(shape: Sequence[int]) -> list[int]:
    s = shape4(shape)
    return [s[1] * s[2] * s[3], s[2] * s[3], s[3], 1]


def channel_arrays(ctx: LayerContext, multiplier: np.ndarray, shift: np.ndarray
                   ) -> tuple[ConstArray, ConstArray]:
    return (ConstArray(f"{ctx.symbol}_multiplier", "int32_t",
                       np.asarray(multiplier, dtype=np.int64), "Q31 requantization multipliers"),
            ConstArray(f"{ctx.symbol}_shift", "int32_t", np.asarray(shift, dtype=np.int64),
                       "requantization shifts (> 0: left)"))


def describe_padding(op: Op) -> str:
    top, bottom, left, right = op.options["padding"]
    return f"pad {top}/{bottom}/{left}/{right}"
