"""Values of the ONNX frontend: what an ONNX value name stands for during conversion,
the layout constants (NCHW <-> NHWC) and small pure helpers."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ...ir import Quantization

_TO_NHWC = (0, 2, 3, 1)  # ir_tensor = onnx_tensor.transpose(_TO_NHWC) for 4-D activations
_TO_NCHW = (0, 3, 1, 2)
_IR_AXIS = (0, 3, 1, 2)  # ONNX (NCHW) axis -> IR (NHWC) axis

_INT8 = np.dtype(np.int8)
_INT32 = np.dtype(np.int32)
_FLOAT32 = np.dtype(np.float32)

_FUSABLE = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "MUL")
_ACT_OP = "_ACTIVATION"  # internal op: a standalone Relu/Clip, lowered before returning

_QUANT_OPS = {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "QGemm",
              "QLinearAdd", "QLinearMul", "QLinearConcat", "QLinearAveragePool",
              "QLinearGlobalAveragePool", "QLinearSoftmax", "ConvInteger", "MatMulInteger",
              "DynamicQuantizeLinear"}
_QUANTIZE_HINT = ("quantize it with onnxruntime.quantization.quantize_static "
                  "(QDQ or QOperator format)")


def _one_line(text: str) -> str:
    text = " ".join(text.split("\n"))
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


# --------------------------------------------------------------------------------------------
# Values: what an ONNX value name stands for during conversion
# --------------------------------------------------------------------------------------------

@dataclass
class _Act:
    """An int8 IR activation. ``shape`` is the ONNX (NCHW) shape; the IR tensor is NHWC when
    4-D. ``is_float``: the ONNX value is the float DequantizeLinear view of it (QDQ)."""

    tensor: str
    shape: tuple[int, ...]
    is_float: bool


@dataclass
class _Const:
    """A constant. Integer data as stored (uint8 not yet shifted) unless ``scale`` is set:
    then it is a quantized constant (a DequantizeLinear view, or a QLinear operand) whose
    ``qdata``/``zp`` are already int8-shifted."""

    data: np.ndarray
    name: str
    scale: np.ndarray | None = None  # float32 (1,) or per-axis
    zp: np.ndarray | None = None  # int64, shifted
    axis: int = 0
    qdata: np.ndarray | None = None  # int64, shifted

    @property
    def quantized(self) -> bool:
        return self.scale is not None

    def real(self) -> np.ndarray:
        """The float value (float64)."""
        if not self.quantized:
            return np.asarray(self.data, dtype=np.float64)
        nd = self.qdata.ndim
        scale, zp = self.scale.astype(np.float64), self.zp
        if self.scale.size > 1:
            shape = [1] * nd
            shape[self.axis] = -1
            scale, zp = scale.reshape(shape), zp.reshape(shape)
        return (self.qdata - zp) * scale


@dataclass
class _FloatIn:
    """A float32 graph input, not yet quantized."""

    tensor: str
    shape: tuple[int, ...]


@dataclass
class _RawIn:
    """An int8 graph input whose quantization is known only from its first consumer."""

    name: str
    shape: tuple[int, ...]


@dataclass
class _Deferred:
    """A float op of a QDQ graph, waiting for the QuantizeLinear that quantizes its output.

    ``build(out_quant, out_name, activation, extra_bias)`` emits the IR op(s) and returns the
    name of the int8 tensor holding the result (NHWC when 4-D)."""

    node: Any
    shape: tuple[int, ...]
    build: Callable[..., str]
    fusable: bool = False  # accepts a fused activation
    activation: tuple | None = None  # ("RELU", lo, hi) ... from a following Relu/Clip
    bias_axis: int | None = None  # ONNX axis of output channels when a bias can be folded
    extra_bias: np.ndarray | None = None  # real values folded in from a following Add


def _shift_uint8(a: np.ndarray) -> np.ndarray:
    """Integer data as int64, uint8 shifted to the int8 range."""
    if a.dtype == np.uint8:
        return a.astype(np.int64) - 128
    return a.astype(np.int64)


def _ir_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(shape[i] for i in _TO_NHWC) if len(shape) == 4 else tuple(shape)


def _same_order(shape: tuple[int, ...]) -> bool:
    """True when a 4-D NCHW tensor and its NHWC transpose have the same element order."""
    return len(shape) != 4 or shape[1] == 1 or shape[2] * shape[3] == 1


def _remap_perm(perm: tuple[int, ...]) -> tuple[int, ...]:
    """ONNX Transpose perm on NCHW data -> the perm on the NHWC IR tensors."""
    return tuple(_TO_NCHW[perm[_TO_NHWC[i]]] for i in range(4))


def _compose(first: tuple[int, ...], second: tuple[int, ...]) -> tuple[int, ...]:
    """x.transpose(first).transpose(second) == x.transpose(result)."""
    return tuple(first[s] for s in second)


def _quant(scale: float | np.ndarray, zp: int | np.ndarray) -> Quantization:
    return Quantization(scale=np.asarray(scale, dtype=np.float32).reshape(-1),
                        zero_point=np.asarray(zp, dtype=np.int64).reshape(-1), axis=0)


def _same_quant(a: Quantization, b: Quantization) -> bool:
    return (a.scale.size == 1 and b.scale.size == 1
            and a.scalar_zero_point == b.scalar_zero_point
            and abs(a.scalar_scale - b.scalar_scale) <= 1e-6 * abs(b.scalar_scale))


def _fmt(values) -> str:
    arr = np.asarray(values).reshape(-1)
    text = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in arr[:6].tolist())
    return f"[{text}{', ...' if arr.size > 6 else ''}]"
