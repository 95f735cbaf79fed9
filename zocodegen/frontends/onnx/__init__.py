"""ONNX -> IR, for models quantized by onnxruntime (QDQ and QOperator formats).

What this frontend establishes (DESIGN.md section 3):

* **int8 everywhere.** uint8 tensors (activations, weights, constants) are shifted exactly:
  ``q_int8 = q_uint8 - 128`` and ``zero_point - 128``. Weights must then be symmetric
  (zero point 0); anything else is refused naming the initializer.
* **NHWC.** Every 4-D activation inside the IR is NHWC; conv weights become OHWI, depthwise
  weights 1HWC, MatMul/Gemm weights ``[out, in]``. Axis attributes (Concat, Softmax,
  Transpose, Pad, ReduceMean) are remapped. Reshape/Flatten keep ONNX's NCHW element order:
  a 4-D tensor whose NCHW and NHWC orders differ (C > 1 and H*W > 1) is transposed back to
  NCHW before it is reshaped, and a reshape *to* 4-D is transposed to NHWC after it.
* **Graph I/O keeps the ONNX layout and dtype**: a 4-D input gets an explicit TRANSPOSE
  (0, 2, 3, 1) after it (after its QUANTIZE if it is float), a 4-D output the inverse before
  it (before its DEQUANTIZE if it is float). Users feed the arrays they feed onnxruntime.

How the two ONNX formats are read:

* **QDQ** (``DequantizeLinear -> float op -> QuantizeLinear``): a DequantizeLinear of an int8
  activation is just a float *view* of that activation; a float op applied to views is
  deferred until the QuantizeLinear that follows it gives its output quantization, and is
  emitted then as one integer IR op. DequantizeLinear of an initializer is a quantized
  constant (weights, int32 bias). Relu/Clip directly between a float op and its
  QuantizeLinear become that op's fused activation (exact: no rounding in between).
* **QOperator** (``QLinearConv``, ``QLinearMatMul``, ``QGemm``, ``QLinearAdd``, ``QLinearMul``,
  ``QLinearConcat``, ``QLinearAveragePool``, ``QLinearGlobalAveragePool``,
  ``QLinearSoftmax``; MaxPool/Reshape/Transpose/... directly on integer tensors): each op
  carries its quantization parameters and maps one-to-one.

Bias adds. A constant Add directly on a float MatMul/Gemm/Conv result (no QuantizeLinear in
between) is folded into the layer's int32 bias, which is exact. When a QuantizeLinear sits in
between (what quantize_static writes for MatMul + Add), the Add stays an ADD of a quantized
constant: onnxruntime saturates the MatMul result to its int8 range *before* adding the bias,
and a folded bias would skip that saturation (measured: up to 7 LSB off on saturating inputs).

After conversion, small IR rewrites keep the graph lean and exact: a Relu/Clip standing alone
on a quantized tensor is fused into the producing op when the quantization allows (same
parameters before and after), otherwise it is lowered exactly (requantize with QUANTIZE, then
clamp with a 1x1 MAX_POOL_2D carrying the fused activation, which equals onnxruntime's
dequantize -> clip -> quantize because rounding is monotonic); back-to-back TRANSPOSEs and
RESHAPEs are merged and identity TRANSPOSEs dropped.

Anything the IR cannot express is refused with ``UnsupportedOpError`` / ``ModelError`` naming
the node (name and op type) and the reason.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import ModelError, UserError
from ...files import open_input
from ...ir import Graph
from .converter import _Converter
from .values import _one_line


def load_onnx(path: Path) -> Graph:
    """Read an onnxruntime-quantized ONNX model into the IR (source_format "onnx")."""
    path = Path(path)
    converter = None
    try:
        model = _read_model(path)
        converter = _Converter(model, path)
        return converter.convert()
    except UserError as exc:
        # names inside a damaged file may hold control characters: keep the message on one line
        raise type(exc)(_one_line(str(exc))) from None
    except (KeyError, IndexError, ValueError, TypeError, AttributeError, OverflowError,
            ZeroDivisionError, AssertionError, RecursionError, MemoryError) as exc:
        # A syntactically valid protobuf whose content does not make sense (a damaged or
        # hand-made file) can trip a lookup anywhere; report it as a bad model.
        where = (converter.where() if converter is not None else "") or "the graph"
        detail = str(exc) or type(exc).__name__
        raise ModelError(_one_line(f"{path}: malformed ONNX model at {where}: "
                                   f"{type(exc).__name__}: {detail}")) from None


def _read_model(path: Path) -> Any:
    import onnx

    if not path.is_file():
        raise ModelError(f"{path}: no such model file")
    try:
        with open_input(path, "model") as f:  # external data: beside f.name, the path
            model = onnx.load(f)
    except UserError:
        raise
    except Exception as exc:  # DecodeError, RuntimeWarning-as-error, missing external data...
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise ModelError(f"{path} is not a valid ONNX model: {detail}") from None
    graph = model.graph if model.HasField("graph") else None
    if graph is None or len(graph.node) == 0 or len(graph.output) == 0:
        raise ModelError(f"{path} is not a valid ONNX model: it has no graph, nodes or outputs")
    if model.ir_version <= 0 or len(model.opset_import) == 0:
        raise ModelError(f"{path} is not a valid ONNX model: missing ir_version or "
                         "opset_import")
    return model


__all__ = ["load_onnx"]
