"""The one intermediate representation every stage after a frontend works on.

Conventions (DESIGN.md section 3), which frontends must establish and everything downstream
may rely on:

* Layout is NHWC. Activations are int8 with explicit scale/zero point; float32 tensors exist
  only at the graph edges, around QUANTIZE / DEQUANTIZE.
* Weights are int8, symmetric (zero point 0), per-channel or per-tensor:
  CONV_2D ``[C_out, KH, KW, C_in]`` quantized along axis 0,
  DEPTHWISE_CONV_2D ``[1, KH, KW, C_in * multiplier]`` along axis 3,
  FULLY_CONNECTED ``[C_out, C_in]`` along axis 0. Biases are int32 with zero point 0 and
  scale ``input_scale * weight_scale[c]``.
* Scales are stored as float32, exactly as TFLite stores them, because the requantization
  multipliers are derived from them in double precision the way TFLite does.
* Op options are normalised (each op's row in ``ops/table.py`` names them): padding is
  always explicit ``(top, bottom, left, right)``; activations are one of ``ACTIVATIONS``;
  axes are non-negative; PAD and TRANSPOSE carry their constant operands as options.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

ACTIVATIONS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")


@dataclass(frozen=True, eq=False)
class Quantization:
    """Affine quantization: real = scale * (q - zero_point), per tensor or along ``axis``."""

    scale: np.ndarray  # float32, shape (1,) or (channels,)
    zero_point: np.ndarray  # int64, same shape as scale
    axis: int = 0

    @property
    def per_channel(self) -> bool:
        return self.scale.size > 1

    @property
    def scalar_scale(self) -> float:
        """The one scale of a per-tensor quantization (float32 value, as a Python float)."""
        return float(self.scale[0])

    @property
    def scalar_zero_point(self) -> int:
        return int(self.zero_point[0])

    def describe(self) -> str:
        if self.per_channel:
            return f"per-channel(axis {self.axis}, {self.scale.size} scales)"
        return f"scale={self.scalar_scale:.6g} zp={self.scalar_zero_point}"


@dataclass(eq=False)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    quant: Quantization | None = None
    data: np.ndarray | None = None  # set for constants (weights, biases)

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize


@dataclass(eq=False)
class Op:
    type: str
    name: str
    inputs: tuple[str, ...]  # tensor names; "" marks an absent optional input (e.g. no bias)
    outputs: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class Graph:
    """A model: tensors by name, ops in a valid execution order, graph inputs and outputs."""

    name: str
    source_format: str  # "tflite" or "onnx"
    tensors: dict[str, Tensor]
    ops: list[Op]
    inputs: list[str]
    outputs: list[str]

    def tensor(self, name: str) -> Tensor:
        return self.tensors[name]
