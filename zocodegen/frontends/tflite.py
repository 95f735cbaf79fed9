"""TFLite flatbuffer -> IR, read with the ``tflite`` package.

TFLite already uses the IR's layouts (NHWC, OHWI conv weights, 1HWC depthwise weights), so
this frontend mostly normalises options: SAME/VALID become explicit pads, constant operands
(PAD paddings, MEAN axes, TRANSPOSE perm, RESIZE size) become options, and everything the IR
cannot express is refused with the op index, type and field named. The buffer's structure is
verified first (``flatbuffer_verify``), as the TFLite runtime does, because the generated
reader follows offsets without checking them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import tflite

from ..errors import ModelError, UnsupportedOpError
from ..files import read_input
from ..ir import Graph, Op, Quantization, Tensor
from ..ops.table import OP_TYPES
from ..ops.window import conv_output_size
from .common import printable_name, same_padding, unique_name
from .flatbuffer_verify import InvalidFlatbuffer, verify_tflite

_BUILTIN_NAMES = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
_ACTIVATIONS = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6"}
_ACTIVATION_NAMES = {v: k for k, v in vars(tflite.ActivationFunctionType).items()
                     if not k.startswith("_")}
_DTYPES = {0: np.float32, 2: np.int32, 3: np.uint8, 4: np.int64, 7: np.int16, 9: np.int8}
_TYPE_NAMES = {v: k for k, v in vars(tflite.TensorType).items() if not k.startswith("_")}
_OPTION_CLASSES = {
    "CONV_2D": tflite.Conv2DOptions, "DEPTHWISE_CONV_2D": tflite.DepthwiseConv2DOptions,
    "FULLY_CONNECTED": tflite.FullyConnectedOptions, "ADD": tflite.AddOptions,
    "MUL": tflite.MulOptions, "AVERAGE_POOL_2D": tflite.Pool2DOptions,
    "MAX_POOL_2D": tflite.Pool2DOptions, "MEAN": tflite.ReducerOptions,
    "CONCATENATION": tflite.ConcatenationOptions, "SOFTMAX": tflite.SoftmaxOptions,
    "RESIZE_NEAREST_NEIGHBOR": tflite.ResizeNearestNeighborOptions,
}


def load_tflite(path: Path) -> Graph:
    data = read_input(path, "model")
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise ModelError(f"{path}: not a TFLite model (no 'TFL3' file identifier)")
    try:  # the reader below trusts every offset: check them all first, as the runtime does
        verify_tflite(data)
    except InvalidFlatbuffer as exc:
        raise ModelError(f"{path}: not a valid TFLite flatbuffer: {exc}") from None
    try:
        model = tflite.Model.GetRootAs(data, 0)
        return _Reader(model, data, Path(path)).graph()
    except ModelError:
        raise
    except Exception as exc:  # a corrupted flatbuffer fails anywhere inside the reader
        raise ModelError(f"{path}: corrupted TFLite flatbuffer "
                         f"({type(exc).__name__}: {exc})") from None


class _Reader:
    def __init__(self, model: Any, data: bytes, path: Path) -> None:
        self.model, self.data, self.path = model, data, path

    def graph(self) -> Graph:
        n_sub = self.model.SubgraphsLength()
        if n_sub != 1:
            raise ModelError(f"{self.path}: model has {n_sub} subgraphs; only single-subgraph "
                             "models are supported (no control flow such as WHILE/IF/CALL_ONCE)")
        sub = self.model.Subgraphs(0)
        used: set[str] = set()
        tensors = [self._tensor(sub.Tensors(i), i, used) for i in range(sub.TensorsLength())]
        ir_ops: list[Op] = []
        counters: dict[str, int] = {}
        for i in range(sub.OperatorsLength()):
            ir_ops.append(self._op(sub.Operators(i), i, tensors, counters))
        by_name = {t.name: t for t in tensors}
        inputs = [tensors[self._index(j, tensors, "subgraph input")].name
                  for j in sub.InputsAsNumpy()] if sub.InputsLength() else []
        outputs = [tensors[self._index(j, tensors, "subgraph output")].name
                   for j in sub.OutputsAsNumpy()] if sub.OutputsLength() else []
        if not inputs or not outputs:
            raise ModelError(f"{self.path}: subgraph declares no inputs or no outputs")
        name = printable_name((sub.Name() or b"").decode("utf-8", "replace")) or self.path.stem
        return Graph(name=name, source_format="tflite", tensors=by_name, ops=ir_ops,
                     inputs=inputs, outputs=outputs)

    # -- tensors -----------------------------------------------------------------------
    def _tensor(self, t: Any, index: int, used: set[str]) -> Tensor:
        ttype = t.Type()
        if ttype not in _DTYPES:
            raise ModelError(f"{self.path}: tensor {index} has unsupported type "
                             f"{_TYPE_NAMES.get(ttype, ttype)}")
        dtype = np.dtype(_DTYPES[ttype])
        shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        if any(d < 0 for d in shape):
            raise ModelError(f"{self.path}: tensor {index} has a dynamic or negative shape "
                             f"{list(shape)}; give the model a fixed input shape")
        raw_name = (printable_name((t.Name() or b"").decode("utf-8", "replace"))
                    or f"tensor_{index}")
        name = unique_name(raw_name, used)
        quant = self._quant(t.Quantization(), shape, name)
        data = self._buffer(t.Buffer(), dtype, shape, name)
        return Tensor(name=name, shape=shape, dtype=dtype, quant=quant, data=data)

    def _quant(self, q: Any, shape: tuple[int, ...], name: str) -> Quantization | None:
        if q is None or q.ScaleLength() == 0:
            return None
        scale = q.ScaleAsNumpy().astype(np.float32)
        zp = (q.ZeroPointAsNumpy().astype(np.int64) if q.ZeroPointLength()
              else np.zeros(scale.shape, np.int64))
        axis = int(q.QuantizedDimension())
        if len(shape) == 1 and shape[0] == scale.size:
            # A 1-D tensor (a bias) has one axis, whatever the file says: older converters
            # copied the filter's quantized_dimension (3) into the bias, as TFLite Micro's
            # own person_detect.tflite has it, and TFLite Micro runs such a model.
            axis = 0
        if zp.size != scale.size:
            raise ModelError(f"{self.path}: tensor '{name}': {scale.size} scales but "
                             f"{zp.size} zero points")
        if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
            raise ModelError(f"{self.path}: tensor '{name}': quantization scale must be "
                             f"positive and finite, got {scale[:4].tolist()}")
        if scale.size > 1 and not (0 <= axis < len(shape) and shape[axis] == scale.size):
            raise ModelError(f"{self.path}: tensor '{name}': {scale.size} per-channel scales "
                             f"do not match dimension {axis} of shape {list(shape)}")
        return Quantization(scale=scale, zero_point=zp, axis=axis)

    def _buffer(self, index: int, dtype: np.dtype, shape: tuple[int, ...],
                name: str) -> np.ndarray | None:
        if index <= 0:
            return None
        if index >= self.model.BuffersLength():
            raise ModelError(f"{self.path}: tensor '{name}' refers to buffer {index} of "
                             f"{self.model.BuffersLength()}")
        buf = self.model.Buffers(index)
        if buf.Offset() > 1:  # large-model layout: data lives after the flatbuffer
            raw = self.data[buf.Offset():buf.Offset() + buf.Size()]
        elif buf.DataLength():
            raw = buf.DataAsNumpy().tobytes()
        else:
            return None
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if len(raw) != expected:
            raise ModelError(f"{self.path}: tensor '{name}' needs {expected} bytes of data "
                             f"for shape {list(shape)} {dtype}, buffer {index} has {len(raw)}")
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()

    # -- operators ---------------------------------------------------------------------
    def _index(self, j: int, tensors: list[Tensor], what: str) -> int:
        if not 0 <= j < len(tensors):
            raise ModelError(f"{self.path}: {what} refers to tensor {j} of {len(tensors)}")
        return int(j)

    def _op(self, op: Any, i: int, tensors: list[Tensor], counters: dict[str, int]) -> Op:
        if not 0 <= op.OpcodeIndex() < self.model.OperatorCodesLength():
            raise ModelError(f"{self.path}: operator {i} has opcode index {op.OpcodeIndex()}")
        code = self.model.OperatorCodes(op.OpcodeIndex())
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        op_type = _BUILTIN_NAMES.get(builtin, f"builtin code {builtin}")
        if op_type == "CUSTOM":
            custom = printable_name((code.CustomCode() or b"?").decode("utf-8", "replace"))
            raise UnsupportedOpError(f"{self.path}: operator {i} is custom op '{custom}', "
                                     "which zocodegen does not support")
        if op_type not in OP_TYPES:
            raise UnsupportedOpError(
                f"{self.path}: operator {i} ({op_type}) is not supported; supported ops: "
                + ", ".join(OP_TYPES))
        ins = tuple("" if j < 0 else tensors[self._index(j, tensors, f"operator {i} input")].name
                    for j in (op.InputsAsNumpy() if op.InputsLength() else []))
        outs = tuple(tensors[self._index(j, tensors, f"operator {i} output")].name
                     for j in (op.OutputsAsNumpy() if op.OutputsLength() else []))
        where = f"{self.path}: operator {i} ({op_type})"
        if not ins or not outs or not ins[0]:
            raise ModelError(f"{where}: missing input or output tensors")
        by_name = {t.name: t for t in tensors}
        options = self._options(op, op_type, where, [by_name.get(n) for n in ins],
                                [by_name[n] for n in outs])
        n = counters.get(op_type, 0)
        counters[op_type] = n + 1
        ins = _drop_constant_operands(op_type, ins)
        return Op(type=op_type, name=f"{op_type.lower()}_{n}", inputs=ins, outputs=outs,
                  options=options)

    def _options(self, op: Any, op_type: str, where: str, ins: list[Tensor | None],
                 outs: list[Tensor]) -> dict[str, Any]:
        opts = None
        if op_type in _OPTION_CLASSES and op.BuiltinOptions() is not None:
            table = op.BuiltinOptions()
            opts = _OPTION_CLASSES[op_type]()
            opts.Init(table.Bytes, table.Pos)

        def activation() -> str:
            code = opts.FusedActivationFunction() if opts is not None else 0
            if code not in _ACTIVATIONS:
                raise UnsupportedOpError(f"{where}: fused activation "
                                         f"{_ACTIVATION_NAMES.get(code, code)} is not supported")
            return _ACTIVATIONS[code]

        def const(k: int, field: str) -> np.ndarray:
            t = ins[k] if k < len(ins) else None
            if t is None or t.data is None:
                raise UnsupportedOpError(f"{where}: {field} must be a constant tensor")
            return t.data

        x, y = ins[0], outs[0]
        if op_type in ("CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "MAX_POOL_2D"):
            if opts is None:
                raise ModelError(f"{where}: missing builtin options")
            if len(x.shape) != 4 or len(y.shape) != 4:
                raise ModelError(f"{where}: expects 4-D NHWC input and output, got "
                                 f"{list(x.shape)} -> {list(y.shape)}")
            stride = (opts.StrideH(), opts.StrideW())
            if op_type.endswith("POOL_2D"):
                kernel, dilation = (opts.FilterHeight(), opts.FilterWidth()), (1, 1)
            else:
                w = ins[1] if len(ins) > 1 else None
                if w is None or len(w.shape) != 4:
                    raise ModelError(f"{where}: filter must be a 4-D tensor")
                kernel = (w.shape[1], w.shape[2])
                dilation = (opts.DilationHFactor(), opts.DilationWFactor())
            if min(stride + dilation + kernel) < 1:
                raise ModelError(f"{where}: stride {stride}, dilation {dilation} and filter "
                                 f"{kernel} must all be >= 1")
            padding = _explicit_padding(opts.Padding(), x.shape, y.shape, kernel, stride,
                                        dilation, where)
            result: dict[str, Any] = {"stride": stride, "padding": padding,
                                      "activation": activation()}
            if op_type.endswith("POOL_2D"):
                result["filter"] = kernel
            else:
                result["dilation"] = dilation
            if op_type == "DEPTHWISE_CONV_2D":
                if x.shape[3] == 0 or ins[1].shape[3] % x.shape[3]:
                    raise ModelError(f"{where}: {ins[1].shape[3]} output channels is not a "
                                     f"multiple of {x.shape[3]} input channels")
                result["depth_multiplier"] = ins[1].shape[3] // x.shape[3]
            return result
        if op_type == "FULLY_CONNECTED":
            if opts is not None and opts.WeightsFormat() != 0:
                raise UnsupportedOpError(f"{where}: shuffled weights format is not supported")
            return {"activation": activation()}
        if op_type in ("ADD", "MUL"):
            return {"activation": activation()}
        if op_type == "CONCATENATION":
            axis = opts.Axis() if opts is not None else 0
            axis = axis + len(y.shape) if axis < 0 else axis
            if not 0 <= axis < len(y.shape):
                raise ModelError(f"{where}: axis {axis} out of range for rank {len(y.shape)}")
            return {"axis": axis, "activation": activation()}
        if op_type == "SOFTMAX":
            return {"beta": float(opts.Beta()) if opts is not None else 1.0}
        if op_type == "MEAN":
            axes = sorted({int(a) + len(x.shape) if a < 0 else int(a)
                           for a in const(1, "reduction axis").reshape(-1)})
            if any(not 0 <= a < len(x.shape) for a in axes):
                raise ModelError(f"{where}: reduction axes {axes} out of range")
            return {"axes": tuple(axes), "keep_dims": bool(opts.KeepDims()) if opts else False}
        if op_type == "PAD":
            pads = const(1, "paddings")
            if pads.shape != (len(x.shape), 2) or np.any(pads < 0):
                raise ModelError(f"{where}: paddings must be non-negative [{len(x.shape)}, 2], "
                                 f"got {pads.tolist()}")
            return {"paddings": tuple((int(a), int(b)) for a, b in pads)}
        if op_type == "TRANSPOSE":
            perm = [int(p) for p in const(1, "permutation").reshape(-1)]
            if sorted(perm) != list(range(len(x.shape))):
                raise ModelError(f"{where}: permutation {perm} is not a permutation of "
                                 f"rank {len(x.shape)}")
            return {"perm": tuple(perm)}
        if op_type == "RESIZE_NEAREST_NEIGHBOR":
            return {"align_corners": bool(opts.AlignCorners()) if opts else False,
                    "half_pixel_centers": bool(opts.HalfPixelCenters()) if opts else False}
        return {}


def _drop_constant_operands(op_type: str, ins: tuple[str, ...]) -> tuple[str, ...]:
    """Operands turned into options (axes, paddings, perm, sizes, shapes) leave the inputs."""
    if op_type in ("MEAN", "PAD", "TRANSPOSE", "RESIZE_NEAREST_NEIGHBOR", "RESHAPE"):
        return ins[:1]
    return ins


def _explicit_padding(code: int, in_shape: tuple[int, ...], out_shape: tuple[int, ...],
                      kernel: tuple[int, int], stride: tuple[int, int],
                      dilation: tuple[int, int], where: str) -> tuple[int, int, int, int]:
    pads = []
    for axis in (0, 1):
        size, k, s, d = in_shape[1 + axis], kernel[axis], stride[axis], dilation[axis]
        if code == tflite.Padding.SAME:
            before, after = same_padding(size, k, s, d)
        elif code == tflite.Padding.VALID:
            before, after = 0, 0
        else:
            raise UnsupportedOpError(f"{where}: padding mode {code} is not supported")
        expected = conv_output_size(size, k, s, d, before, after)
        if expected != out_shape[1 + axis]:
            raise ModelError(f"{where}: output {'height' if axis == 0 else 'width'} is "
                             f"{out_shape[1 + axis]}, the op's geometry gives {expected}")
        pads += [before, after]
    return (pads[0], pads[1], pads[2], pads[3])
