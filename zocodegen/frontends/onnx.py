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

import heapq
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import ModelError, UnsupportedOpError, UserError
from ..ir import OP_TYPES, OPTION_KEYS, Graph, Op, Quantization, Tensor
from ..numerics import activation_range, quantize_value
from .common import unique_name

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


def _one_line(text: str) -> str:
    text = " ".join(text.split("\n"))
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _read_model(path: Path) -> Any:
    import onnx

    if not path.is_file():
        raise ModelError(f"{path}: no such model file")
    try:
        model = onnx.load(str(path))
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


# --------------------------------------------------------------------------------------------
# The converter
# --------------------------------------------------------------------------------------------

class _Converter:
    def __init__(self, model: Any, path: Path) -> None:
        self.model = model
        self.path = path
        self.graph = model.graph
        self.opset = 0
        self.ms_opset = 0
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                self.opset = int(imp.version)
            elif imp.domain == "com.microsoft":
                self.ms_opset = int(imp.version)
        self.tensors: dict[str, Tensor] = {}
        self.ops: list[Op] = []
        self.vals: dict[str, Any] = {}
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.names: set[str] = set()
        self.op_names: set[str] = set()
        self.node: Any = None
        self.node_index = 0
        self.reserved = {o.name for o in self.graph.output} | {i.name for i in self.graph.input}

    # ---------------------------------------------------------------- messages and helpers
    def where(self) -> str:
        if self.node is None:
            return ""
        return f"node '{self._node_name(self.node)}' ({self.node.op_type})"

    def _node_name(self, node: Any) -> str:
        return node.name or f"{node.op_type}_{self.node_index}"

    def _unsupported(self, msg: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{self.where()}: {msg}" if self.node is not None else msg)

    def _bad(self, msg: str) -> ModelError:
        return ModelError(f"{self.where()}: {msg}" if self.node is not None else msg)

    def _attrs(self, node: Any) -> dict[str, Any]:
        from onnx import helper

        out = {}
        for a in node.attribute:
            v = helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode("utf-8", "replace")
            out[a.name] = v
        return out

    def _input(self, node: Any, k: int) -> str:
        return node.input[k] if k < len(node.input) else ""

    def _val(self, name: str) -> Any:
        if name not in self.vals:
            raise self._bad(f"input '{name}' is not defined")
        return self.vals[name]

    # ---------------------------------------------------------------- IR construction
    def _new_tensor(self, hint: str, shape: tuple[int, ...], dtype: np.dtype,
                    quant: Quantization | None = None, data: np.ndarray | None = None,
                    exact: bool = False) -> str:
        if exact:
            assert hint not in self.names, hint
            self.names.add(hint)
            name = hint
        else:
            name = unique_name(hint or "t", self.names | self.reserved)
            self.names.add(name)
        shape = tuple(int(d) for d in shape)
        if data is not None:
            data = np.ascontiguousarray(data.astype(dtype).reshape(shape))
        self.tensors[name] = Tensor(name=name, shape=shape, dtype=np.dtype(dtype), quant=quant,
                                    data=data)
        return name

    def _emit(self, op_type: str, name_hint: str, inputs: list[str], outputs: list[str],
              options: dict[str, Any]) -> Op:
        name = unique_name(name_hint or op_type.lower(), self.op_names)
        op = Op(type=op_type, name=name, inputs=tuple(inputs), outputs=tuple(outputs),
                options=dict(options))
        self.ops.append(op)
        return op

    def _base(self) -> str:
        return self._node_name(self.node) if self.node is not None else "graph"

    def _like(self, src: str, hint: str, shape: tuple[int, ...],
              quant: Quantization | None = None) -> str:
        t = self.tensors[src]
        return self._new_tensor(hint, shape, t.dtype, quant if quant is not None else t.quant)

    def _transpose(self, src: str, perm: tuple[int, ...], hint: str, op_hint: str) -> str:
        shape = self.tensors[src].shape
        out = self._like(src, hint, tuple(shape[p] for p in perm))
        self._emit("TRANSPOSE", op_hint, [src], [out], {"perm": tuple(perm)})
        return out

    def _reshape_op(self, src: str, shape: tuple[int, ...], hint: str, op_hint: str) -> str:
        out = self._like(src, hint, shape)
        self._emit("RESHAPE", op_hint, [src], [out], {})
        return out

    def _requant(self, src: str, quant: Quantization, hint: str, op_hint: str) -> str:
        if _same_quant(self.tensors[src].quant, quant):
            return src
        out = self._like(src, hint, self.tensors[src].shape, quant)
        self._emit("QUANTIZE", op_hint, [src], [out], {})
        return out

    # ---------------------------------------------------------------- conversion driver
    def convert(self) -> Graph:
        if self.opset == 0:
            raise ModelError(f"{self.path}: the model imports no default-domain (ai.onnx) opset")
        if self.opset < 10:
            raise UnsupportedOpError(f"{self.path}: opset {self.opset} is too old; quantized "
                                     "ONNX needs opset 10 or newer")
        nodes = list(self.graph.node)
        self._check_quantized(nodes)
        self._load_initializers()
        self._add_inputs()
        for index, node in self._toposort(nodes):
            self.node, self.node_index = node, index
            self._dispatch(node)
        self.node = None
        self._add_outputs()
        self._lower_activations()
        self._merge_transposes()
        self._remove_dead()
        self._check_contract()
        return Graph(name=self.graph.name or self.path.stem, source_format="onnx",
                     tensors=self.tensors, ops=self.ops, inputs=self.inputs,
                     outputs=self.outputs)

    def _check_quantized(self, nodes: list) -> None:
        if any(n.op_type in _QUANT_OPS for n in nodes):
            for n in nodes:
                if n.op_type in ("ConvInteger", "MatMulInteger", "DynamicQuantizeLinear"):
                    self.node = n
                    raise self._unsupported("dynamically quantized model (ConvInteger/"
                                            "MatMulInteger); " + _QUANTIZE_HINT)
            return
        inits = {i.name for i in self.graph.initializer}
        for n in nodes:
            if n.op_type in ("Conv", "MatMul", "Gemm") and len(n.input) > 1 \
                    and n.input[1] in inits:
                self.node = n
                raise ModelError(f"unquantized (float) ONNX model: {self.where()} has float "
                                 f"weights; {_QUANTIZE_HINT}")
        raise ModelError("unquantized (float) ONNX model: it has no QuantizeLinear/"
                         f"DequantizeLinear or QLinear* nodes; {_QUANTIZE_HINT}")

    def _load_initializers(self) -> None:
        from onnx import numpy_helper

        if len(self.graph.sparse_initializer):
            raise UnsupportedOpError(f"{self.path}: sparse initializers are not supported")
        for init in self.graph.initializer:
            try:
                arr = numpy_helper.to_array(init)
            except Exception as exc:
                raise ModelError(f"{self.path}: initializer '{init.name}' cannot be read: "
                                 f"{' '.join(str(exc).split())}") from None
            self.vals[init.name] = _Const(np.array(arr), init.name)

    def _dims(self, vi: Any, what: str) -> tuple[int, ...]:
        if not vi.type.HasField("tensor_type"):
            raise UnsupportedOpError(f"{self.path}: {what} '{vi.name}' is not a tensor")
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            raise ModelError(f"{self.path}: {what} '{vi.name}' has no shape; export the model "
                             "with a fixed input shape")
        dims = []
        for i, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            elif i == 0:
                dims.append(1)  # symbolic / unknown batch: one sample at a time
            else:
                raise ModelError(f"{self.path}: {what} '{vi.name}' has a dynamic dimension "
                                 f"{i} ({d.dim_param or '?'}); export it with a fixed shape")
        return tuple(dims)

    def _add_inputs(self) -> None:
        from onnx import TensorProto

        for vi in self.graph.input:
            if vi.name in self.vals:  # an initializer listed as input (old IR versions)
                continue
            shape = self._dims(vi, "graph input")
            elem = vi.type.tensor_type.elem_type
            if elem == TensorProto.FLOAT:
                self._new_tensor(vi.name, shape, _FLOAT32, exact=True)
                self.vals[vi.name] = _FloatIn(vi.name, shape)
            elif elem == TensorProto.INT8:
                self.vals[vi.name] = _RawIn(vi.name, shape)
            else:
                type_name = (TensorProto.DataType.Name(elem)
                             if elem in TensorProto.DataType.values() else str(elem))
                raise UnsupportedOpError(
                    f"{self.path}: graph input '{vi.name}' has type {type_name}; only float32 "
                    "and int8 graph inputs are supported")
            self.inputs.append(vi.name)
        if not self.inputs:
            raise ModelError(f"{self.path}: the graph has no inputs")

    def _toposort(self, nodes: list) -> list[tuple[int, Any]]:
        """Kahn's algorithm, keeping the file's order where it is already valid."""
        available = set(self.vals) | {""}
        waiting: dict[str, list[int]] = {}
        missing = []
        ready: list[int] = []
        for i, n in enumerate(nodes):
            need = {x for x in n.input if x not in available}
            missing.append(len(need))
            for x in need:
                waiting.setdefault(x, []).append(i)
            if not need:
                heapq.heappush(ready, i)
        order = []
        produced = set()
        while ready:
            i = heapq.heappop(ready)
            order.append((i, nodes[i]))
            for out in nodes[i].output:
                if not out or out in produced or out in available:
                    continue
                produced.add(out)
                for j in waiting.pop(out, []):
                    missing[j] -= 1
                    if missing[j] == 0:
                        heapq.heappush(ready, j)
        if len(order) != len(nodes):
            done = {i for i, _ in order}
            i = next(i for i in range(len(nodes)) if i not in done)
            self.node, self.node_index = nodes[i], i
            absent = [x for x in nodes[i].input if x and x not in available and x not in produced]
            if absent:
                raise self._bad(f"input '{absent[0]}' is not produced by any node, initializer "
                                "or graph input")
            raise self._bad("the graph has a cycle")
        return order

    def _dispatch(self, node: Any) -> None:
        domain = node.domain if node.domain not in ("ai.onnx",) else ""
        if domain not in ("", "com.microsoft"):
            raise self._unsupported(f"operator domain '{domain}' is not supported")
        if any(a.type in (5, 10) for a in node.attribute):  # GRAPH / GRAPHS: control flow
            raise self._unsupported("control flow (subgraphs) is not supported")
        op = node.op_type
        if domain == "" and op in _FOLDABLE and self._all_const(node):
            self._fold_constant(node)
            return
        handler = _HANDLERS.get((domain, op))
        if handler is None:
            raise self._unsupported(
                f"operator {'com.microsoft.' if domain else ''}{op} is not supported "
                f"(supported: {', '.join(sorted(_SUPPORTED_NAMES))})")
        handler(self, node)

    # ---------------------------------------------------------------- value access
    def _const(self, name: str, what: str) -> np.ndarray:
        v = self._val(name)
        if not isinstance(v, _Const):
            raise self._unsupported(f"{what} ('{name}') must be a constant")
        return v.real() if v.quantized else v.data

    def _opt_const(self, node: Any, k: int, what: str) -> np.ndarray | None:
        name = self._input(node, k)
        if not name:
            return None
        return self._const(name, what)

    def _qparams(self, scale_name: str, zp_name: str, default_dtype=np.uint8,
                 allow_int32: bool = False) -> tuple[np.ndarray, np.ndarray, np.dtype]:
        """(scale float32 1-D, shifted zero point int64 1-D, stored integer type)."""
        scale_v = self._val(scale_name)
        if not isinstance(scale_v, _Const) or scale_v.quantized:
            raise self._unsupported(f"scale '{scale_name}' must be a constant initializer")
        scale = np.asarray(scale_v.data, dtype=np.float32).reshape(-1)
        if scale.size == 0 or not np.all(np.isfinite(scale)) or np.any(scale <= 0) \
                or np.any(scale < 1e-30) or np.any(scale > 1e30):
            raise self._bad(f"quantization scale '{scale_name}' must be positive and finite, "
                            f"got {_fmt(scale)}")
        if zp_name:
            zp_v = self._val(zp_name)
            if not isinstance(zp_v, _Const) or zp_v.quantized:
                raise self._unsupported(f"zero point '{zp_name}' must be a constant initializer")
            qtype = zp_v.data.dtype
            zp = _shift_uint8(np.asarray(zp_v.data)).reshape(-1)
        else:
            qtype = np.dtype(default_dtype)
            zp = np.zeros(scale.shape, np.int64) - (128 if qtype == np.uint8 else 0)
        allowed = (np.int8, np.uint8, np.int32) if allow_int32 else (np.int8, np.uint8)
        if qtype not in allowed:
            raise self._unsupported(f"{qtype} quantization (zero point '{zp_name}') is not "
                                    "supported; use int8 or uint8")
        if zp.size == 1 and scale.size > 1:
            zp = np.repeat(zp, scale.size)
        if zp.size != scale.size:
            raise self._bad(f"{scale.size} scales but {zp.size} zero points")
        return scale, zp, np.dtype(qtype)

    def _act_quant(self, scale: np.ndarray, zp: np.ndarray, what: str) -> Quantization:
        if scale.size != 1:
            raise self._unsupported(f"{what} is quantized per channel ({scale.size} scales); "
                                    "activations must be quantized per tensor")
        return _quant(scale, zp)

    def _bind_raw(self, v: _RawIn, quant: Quantization) -> _Act:
        """Create the IR tensor of an int8 graph input once its quantization is known."""
        self._new_tensor(v.name, v.shape, _INT8, quant, exact=True)
        tensor = v.name
        if len(v.shape) == 4:
            tensor = self._transpose(tensor, _TO_NHWC, f"{v.name}_nhwc", f"{v.name}_to_nhwc")
        act = _Act(tensor, v.shape, is_float=False)
        self.vals[v.name] = act
        return act

    def _fin(self, name: str, role: str = "input") -> _Act | _Const:
        """An input of a float op in a QDQ graph: a DequantizeLinear view or a constant."""
        v = self._val(name)
        if isinstance(v, _Act) and v.is_float:
            return v
        if isinstance(v, _Const):
            return v
        if isinstance(v, _FloatIn):
            raise self._bad(f"{role} '{name}' is the float graph input used without a "
                            f"QuantizeLinear: the model is not fully quantized; {_QUANTIZE_HINT}")
        if isinstance(v, _Deferred):
            raise self._unsupported(
                f"{role} '{name}' is the float output of node '{v.node.name}' "
                f"({v.node.op_type}) with no QuantizeLinear in between; only fully "
                "quantized graphs are supported")
        raise self._bad(f"{role} '{name}' is an integer tensor used as float; expected a "
                        "DequantizeLinear in between")

    def _fact(self, name: str, role: str = "input") -> _Act:
        v = self._fin(name, role)
        if not isinstance(v, _Act):
            raise self._unsupported(f"{role} '{name}' is a constant; expected an activation")
        return v

    def _any_act(self, name: str, role: str = "input") -> _Act:
        """An activation in either view (plain data-movement ops accept both)."""
        v = self._val(name)
        if isinstance(v, _Act):
            return v
        if isinstance(v, _RawIn):
            raise self._unsupported(f"int8 graph input '{name}' must be dequantized (or fed "
                                    "to a QLinear op) before this op")
        return self._fact(name, role)

    def _qin(self, name: str, scale_name: str, zp_name: str, role: str,
             axis: int = 0) -> _Act | _Const:
        """An integer operand of a QLinear op together with its explicit parameters."""
        scale, zp, _ = self._qparams(scale_name, zp_name)
        v = self._val(name)
        if isinstance(v, _RawIn):
            v = self._bind_raw(v, self._act_quant(scale, zp, role))
        if isinstance(v, _Act):
            if v.is_float:
                raise self._bad(f"{role} '{name}' is a float tensor; this op needs integers")
            quant = self._act_quant(scale, zp, role)
            have = self.tensors[v.tensor].quant
            if not _same_quant(have, quant):
                raise self._unsupported(
                    f"{role} '{name}' is read with scale {quant.scalar_scale:g} zero point "
                    f"{quant.scalar_zero_point} but was produced with {have.describe()}")
            return v
        if isinstance(v, _Const) and not v.quantized:
            if v.data.dtype not in (np.int8, np.uint8, np.int32):
                raise self._bad(f"{role} '{name}' has type {v.data.dtype}; expected int8/uint8")
            qdata = _shift_uint8(v.data)
            if scale.size > 1:
                axis = axis + qdata.ndim if axis < 0 else axis
                if not 0 <= axis < qdata.ndim or qdata.shape[axis] != scale.size:
                    raise self._bad(f"{scale.size} scales do not match axis {axis} of "
                                    f"{role} '{name}' with shape {list(qdata.shape)}")
            return _Const(v.data, name, scale, zp, axis, qdata)
        raise self._bad(f"{role} '{name}' is not an integer tensor")

    # ---------------------------------------------------------------- weights and bias
    def _weights(self, w: _Const, role_axis: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
        """Checked int8 weight values (ONNX layout) and float32 scales (1 or n_out)."""
        if not w.quantized:
            if np.issubdtype(w.data.dtype, np.floating):
                raise ModelError(f"unquantized (float) ONNX model: {self.where()} has float "
                                 f"weights ('{w.name}'); {_QUANTIZE_HINT}")
            raise self._bad(f"weights '{w.name}' have no quantization parameters")
        if w.data.dtype not in (np.int8, np.uint8):
            raise self._unsupported(f"weights '{w.name}' are {w.data.dtype}; only int8/uint8 "
                                    "weights are supported")
        if np.any(w.zp != 0):
            raw = w.zp + (128 if w.data.dtype == np.uint8 else 0)
            bad = int(raw[np.nonzero(w.zp)[0][0]])
            raise ModelError(
                f"{self.where()}: weight initializer '{w.name}' has zero point {bad}"
                + (f" (uint8; {bad - 128} after the int8 shift)" if w.data.dtype == np.uint8
                   else "")
                + "; zocodegen needs symmetric int8 weights (zero point 0, or 128 for "
                "uint8); quantize with WeightSymmetric=True")
        if w.scale.size > 1 and (w.axis != role_axis or w.scale.size != n_out):
            raise self._unsupported(f"weights '{w.name}' are quantized along axis {w.axis} "
                                    f"with {w.scale.size} scales; expected the output-channel "
                                    f"axis {role_axis} with {n_out}")
        if np.any(w.qdata < -128) or np.any(w.qdata > 127):
            raise self._bad(f"weights '{w.name}' fall outside the int8 range after shifting")
        return w.qdata, w.scale.astype(np.float32)

    def _bias(self, x_scale: float, w_scale: np.ndarray, n: int, bias: _Const | None,
              beta: float = 1.0, extra: np.ndarray | None = None
              ) -> tuple[np.ndarray, Quantization]:
        """int32 bias with scale x_scale * w_scale[c] (the IR contract), from an int32
        DequantizeLinear bias (kept as is when its scale already matches) or from real
        values (quantized here)."""
        expected = (np.float32(x_scale) * w_scale.astype(np.float32)).astype(np.float32)
        exp_full = np.broadcast_to(expected.astype(np.float64), (n,))
        ints = np.zeros(n, dtype=np.int64)
        real = np.zeros(n, dtype=np.float64)
        use_real = extra is not None
        if extra is not None:
            real = real + np.broadcast_to(extra, (n,))
        if bias is not None:
            if bias.data.size not in (1, n):
                raise self._bad(f"bias '{bias.name}' has {bias.data.size} values for {n} "
                                "output channels")
            if not bias.quantized and not np.issubdtype(bias.data.dtype, np.floating):
                raise self._bad(f"bias '{bias.name}' ({bias.data.dtype}) has no quantization "
                                "parameters")
            exact = (bias.quantized and bias.data.dtype == np.int32 and beta == 1.0
                     and np.all(bias.zp == 0)
                     and np.allclose(np.broadcast_to(bias.scale.astype(np.float64), (n,)),
                                     exp_full, rtol=1e-5, atol=0.0))
            if exact:
                ints = np.broadcast_to(bias.qdata.reshape(-1), (n,)).astype(np.int64)
            else:
                use_real = True
                real = real + beta * np.broadcast_to(bias.real().reshape(-1), (n,))
        if use_real:
            if not np.all(np.isfinite(real)):
                raise self._bad("bias values are not finite")
            ints = ints + np.round(real / exp_full).astype(np.float64)
        ints = np.asarray(ints, dtype=np.float64)
        if np.any(np.abs(ints) > 2**31 - 1):
            raise self._bad("bias does not fit int32 at scale input_scale * weight_scale")
        return ints.astype(np.int32), Quantization(
            scale=expected, zero_point=np.zeros(expected.shape, np.int64), axis=0)

    # ---------------------------------------------------------------- geometry
    def _window(self, attrs: dict, in_hw: tuple[int, int], kernel: tuple[int, int],
                pool: bool) -> tuple[tuple, tuple, tuple, tuple[int, int]]:
        """(stride, dilation, padding (t, b, l, r), output (h, w)) of a 2-D window op."""
        strides = tuple(int(s) for s in attrs.get("strides", (1, 1)))
        dilations = tuple(int(d) for d in attrs.get("dilations", (1, 1)))
        if len(strides) != 2 or len(dilations) != 2 or len(kernel) != 2:
            raise self._unsupported("only 2-D windows (NCHW input) are supported")
        if min(strides + dilations + tuple(kernel)) < 1:
            raise self._bad(f"strides {list(strides)}, dilations {list(dilations)} and kernel "
                            f"{list(kernel)} must be >= 1")
        if pool and dilations != (1, 1):
            raise self._unsupported(f"pooling with dilations {list(dilations)} is not supported")
        auto_pad = attrs.get("auto_pad", "NOTSET") or "NOTSET"
        ceil_mode = int(attrs.get("ceil_mode", 0))
        pads = [0, 0, 0, 0]  # h_begin, w_begin, h_end, w_end
        out = [0, 0]
        for a in (0, 1):
            size, k, s, d = in_hw[a], kernel[a], strides[a], dilations[a]
            eff = (k - 1) * d + 1
            if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
                o = -(-size // s)
                total = max((o - 1) * s + eff - size, 0)
                small = total // 2
                pads[a], pads[a + 2] = ((small, total - small) if auto_pad == "SAME_UPPER"
                                        else (total - small, small))
            elif auto_pad == "VALID":
                pass
            elif auto_pad == "NOTSET":
                given = [int(p) for p in attrs.get("pads", (0, 0, 0, 0))]
                if len(given) != 4:
                    raise self._unsupported(f"pads {given} (only 2-D windows are supported)")
                if min(given) < 0:
                    raise self._unsupported(f"negative pads {given} are not supported")
                pads = given
            else:
                raise self._bad(f"unknown auto_pad '{auto_pad}'")
            span = size + pads[a] + pads[a + 2] - eff
            if span < 0:
                raise self._bad(f"the {k}x window does not fit the input size {size}")
            o = span // s + 1
            if ceil_mode and auto_pad == "NOTSET":
                oc = -(-span // s) + 1
                if (oc - 1) * s >= size + pads[a]:  # last window must start inside
                    oc -= 1
                if oc != o:
                    raise self._unsupported("ceil_mode=1 changes the output size here; only "
                                            "floor-mode windows are supported")
            out[a] = o
        padding = (pads[0], pads[2], pads[1], pads[3])
        return strides, dilations, padding, (out[0], out[1])

    # ---------------------------------------------------------------- emitters
    def _emit_conv(self, node: Any, x: _Act, w: _Const, b: _Const | None,
                   out_q: Quantization, out_name: str, activation: str,
                   extra: np.ndarray | None) -> str:
        attrs = self._attrs(node)
        if len(x.shape) != 4 or w.data.ndim != 4:
            raise self._unsupported(f"only 2-D convolutions are supported (input "
                                    f"{list(x.shape)}, weights {list(w.data.shape)})")
        n, c_in, h, wd = x.shape
        c_out, per_group, kh, kw = w.data.shape
        group = int(attrs.get("group", 1))
        if "kernel_shape" in attrs and tuple(attrs["kernel_shape"]) != (kh, kw):
            raise self._bad(f"kernel_shape {list(attrs['kernel_shape'])} does not match "
                            f"weights {list(w.data.shape)}")
        if group < 1 or per_group * group != c_in or c_out % group:
            raise self._bad(f"weights {list(w.data.shape)} with group {group} do not fit "
                            f"{c_in} input channels")
        wq, w_scale = self._weights(w, 0, c_out)
        stride, dilation, padding, (oh, ow) = self._window(attrs, (h, wd), (kh, kw), False)
        x_q = self.tensors[x.tensor].quant
        bias, b_q = self._bias(x_q.scalar_scale, w_scale, c_out, b, extra=extra)
        base = self._base()
        options: dict[str, Any] = {"stride": stride, "dilation": dilation, "padding": padding}
        if group == 1:
            op_type = "CONV_2D"
            w_ir, w_axis = wq.transpose(0, 2, 3, 1), 0
        elif group == c_in and per_group == 1:
            op_type = "DEPTHWISE_CONV_2D"
            w_ir, w_axis = wq.transpose(1, 2, 3, 0), 3
            options["depth_multiplier"] = c_out // c_in
        else:
            raise self._unsupported(
                f"grouped convolution with group {group} ({c_in} input channels) is not "
                "supported; only group=1 or depthwise (group = input channels)"
                + (f"; dilations {list(dilation)}" if dilation != (1, 1) else ""))
        options["activation"] = activation
        w_name = self._new_tensor(w.name or f"{base}_weights", w_ir.shape, _INT8,
                                  Quantization(scale=w_scale, zero_point=np.zeros(
                                      w_scale.shape, np.int64), axis=w_axis), data=w_ir)
        b_name = self._new_tensor((b.name if b is not None else "") or f"{base}_bias",
                                  (c_out,), _INT32, b_q, data=bias)
        out = self._new_tensor(out_name, (n, oh, ow, c_out), _INT8, out_q)
        self._emit(op_type, base, [x.tensor, w_name, b_name], [out], options)
        return out

    def _emit_fc(self, x: _Act, w_oi: np.ndarray, w_scale: np.ndarray, w_src: str,
                 bias: _Const | None, beta: float, out_q: Quantization, out_name: str,
                 activation: str, extra: np.ndarray | None) -> str:
        if len(x.shape) < 2 or len(x.shape) == 4:
            raise self._unsupported(f"matrix multiplication of a rank-{len(x.shape)} input "
                                    f"{list(x.shape)} is not supported (rank 2 or 3 only)")
        n_out, k = w_oi.shape
        if x.shape[-1] != k:
            raise self._bad(f"input {list(x.shape)} does not match weights with {k} inputs")
        x_q = self.tensors[x.tensor].quant
        b_int, b_q = self._bias(x_q.scalar_scale, w_scale, n_out, bias, beta, extra)
        base = self._base()
        w_name = self._new_tensor(w_src or f"{base}_weights", w_oi.shape, _INT8,
                                  Quantization(scale=w_scale, zero_point=np.zeros(
                                      w_scale.shape, np.int64), axis=0), data=w_oi)
        b_name = self._new_tensor((bias.name if bias is not None else "") or f"{base}_bias",
                                  (n_out,), _INT32, b_q, data=b_int)
        out = self._new_tensor(out_name, tuple(x.shape[:-1]) + (n_out,), _INT8, out_q)
        self._emit("FULLY_CONNECTED", base, [x.tensor, w_name, b_name], [out],
                   {"activation": activation})
        return out

    def _const_operand(self, c: _Const, rank: int) -> str:
        """A quantized constant operand of ADD/MUL as an int8 IR tensor (NHWC when 4-D)."""
        if not c.quantized:
            raise self._unsupported(f"constant operand '{c.name}' is float; it must be "
                                    "quantized (DequantizeLinear of an int8 initializer)")
        if c.scale.size != 1:
            raise self._unsupported(f"constant operand '{c.name}' is quantized per axis")
        q = c.qdata
        if q.min(initial=0) < -128 or q.max(initial=0) > 127:
            raise self._unsupported(f"constant operand '{c.name}' is not 8-bit")
        if q.ndim > rank:
            raise self._bad(f"constant operand '{c.name}' has rank {q.ndim} > {rank}")
        q = q.reshape((1,) * (rank - q.ndim) + q.shape)
        if rank == 4:
            q = q.transpose(_TO_NHWC)
        return self._new_tensor(c.name, q.shape, _INT8, _quant(c.scale, c.zp), data=q)

    def _emit_binary(self, op_type: str, a: _Act | _Const, b: _Act | _Const,
                     out_q: Quantization, out_name: str, activation: str) -> str:
        shapes = [v.shape if isinstance(v, _Act) else v.qdata.shape if v.quantized
                  else v.data.shape for v in (a, b)]
        try:
            out_shape = tuple(int(d) for d in np.broadcast_shapes(*shapes))
        except ValueError:
            raise self._bad(f"input shapes {list(shapes[0])} and {list(shapes[1])} do not "
                            "broadcast") from None
        rank = len(out_shape)
        names = []
        for v in (a, b):
            if isinstance(v, _Act):
                if len(v.shape) != rank and (rank == 4 or len(v.shape) == 4):
                    raise self._unsupported(f"broadcasting a rank-{len(v.shape)} activation "
                                            f"against rank {rank} is not supported")
                names.append(v.tensor)
            else:
                names.append(self._const_operand(v, rank))
        out = self._new_tensor(out_name, _ir_shape(out_shape), _INT8, out_q)
        self._emit(op_type, self._base(), names, [out], {"activation": activation})
        return out

    def _emit_pool(self, op_type: str, x: _Act, attrs: dict, kernel: tuple[int, int],
                   out_name: str, out_q: Quantization | None) -> tuple[str, tuple]:
        if len(x.shape) != 4:
            raise self._unsupported(f"pooling needs a 4-D NCHW input, got {list(x.shape)}")
        n, c, h, w = x.shape
        stride, _, padding, (oh, ow) = self._window(attrs, (h, w), kernel, True)
        if op_type == "AVERAGE_POOL_2D" and int(attrs.get("count_include_pad", 0)) \
                and any(padding):
            raise self._unsupported("count_include_pad=1 with padding is not supported "
                                    "(padded cells are excluded from the average)")
        in_q = self.tensors[x.tensor].quant
        same = out_q is None or _same_quant(in_q, out_q)
        out = self._new_tensor(out_name if same else f"{out_name}_pooled", (n, oh, ow, c),
                               _INT8, in_q)
        self._emit(op_type, self._base(), [x.tensor], [out],
                   {"filter": tuple(kernel), "stride": stride, "padding": padding,
                    "activation": "NONE"})
        if not same:
            out = self._requant(out, out_q, out_name, f"{self._base()}_requant")
        return out, (n, c, oh, ow)

    def _emit_mean(self, x: _Act, axes: list[int], keep: bool, out_q: Quantization,
                   out_name: str) -> tuple[str, tuple]:
        rank = len(x.shape)
        axes = sorted({a + rank if a < 0 else a for a in axes})
        if any(not 0 <= a < rank for a in axes):
            raise self._bad(f"axes {axes} out of range for rank {rank}")
        onnx_out = tuple(1 if i in axes else d for i, d in enumerate(x.shape)
                         if keep or i not in axes)
        if rank != 4:
            out = self._new_tensor(out_name, onnx_out, _INT8, out_q)
            self._emit("MEAN", self._base(), [x.tensor], [out],
                       {"axes": tuple(axes), "keep_dims": bool(keep)})
            return out, onnx_out
        ir_axes = tuple(sorted(_IR_AXIS[a] for a in axes))
        ir_out = tuple(1 if i in ir_axes else d for i, d in enumerate(_ir_shape(x.shape))
                       if keep or i not in ir_axes)
        if keep or ir_out == onnx_out:
            out = self._new_tensor(out_name, ir_out, _INT8, out_q)
            self._emit("MEAN", self._base(), [x.tensor], [out],
                       {"axes": ir_axes, "keep_dims": bool(keep)})
            return out, onnx_out
        # Dropping the axes leaves the dimensions in another order than ONNX's: reduce with
        # keep_dims, then reshape in NCHW element order.
        keep_shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        t = self._new_tensor(f"{out_name}_keepdims", _ir_shape(keep_shape), _INT8, out_q)
        self._emit("MEAN", self._base(), [x.tensor], [t], {"axes": ir_axes, "keep_dims": True})
        act = self._reshape(_Act(t, keep_shape, False), onnx_out, out_name)
        return act.tensor, onnx_out

    def _softmax_axis_ok(self, shape: tuple[int, ...], axis: int, coerce: bool) -> None:
        rank = len(shape)
        axis = axis + rank if axis < 0 else axis
        if not 0 <= axis < rank:
            raise self._bad(f"axis {axis} out of range for rank {rank}")
        onnx_axes = range(axis, rank) if coerce else [axis]
        ir_axes = {(_IR_AXIS[a] if rank == 4 else a) for a in onnx_axes if shape[a] != 1}
        last = rank - 1
        last_size = _ir_shape(shape)[last]
        if ir_axes != ({last} if last_size != 1 else set()):
            raise self._unsupported(f"softmax over axis {axis} of {list(shape)} is not over "
                                    "the innermost (channel) axis; not supported")

    def _emit_softmax(self, x: _Act, log: bool, out_q: Quantization, out_name: str) -> str:
        required = _quant(16.0 / 256.0, 127) if log else _quant(1.0 / 256.0, -128)
        direct = (out_q.scalar_zero_point == required.scalar_zero_point
                  and abs(out_q.scalar_scale - required.scalar_scale)
                  <= 1e-6 * required.scalar_scale)
        shape = self.tensors[x.tensor].shape
        out = self._new_tensor(out_name if direct else f"{out_name}_tflite", shape, _INT8,
                               out_q if direct else required)
        if log:
            self._emit("LOG_SOFTMAX", self._base(), [x.tensor], [out], {})
        else:
            self._emit("SOFTMAX", self._base(), [x.tensor], [out], {"beta": 1.0})
        if not direct:
            out = self._requant(out, out_q, out_name, f"{self._base()}_requant")
        return out

    def _emit_concat(self, xs: list[_Act], axis: int, out_q: Quantization,
                     out_name: str) -> tuple[str, tuple]:
        rank = len(xs[0].shape)
        axis = axis + rank if axis < 0 else axis
        if not 0 <= axis < rank:
            raise self._bad(f"axis {axis} out of range for rank {rank}")
        for x in xs:
            if len(x.shape) != rank or any(a != b for i, (a, b) in
                                           enumerate(zip(x.shape, xs[0].shape)) if i != axis):
                raise self._bad(f"inputs {[list(v.shape) for v in xs]} cannot be joined on "
                                f"axis {axis}")
        onnx_out = tuple(sum(x.shape[axis] for x in xs) if i == axis else d
                         for i, d in enumerate(xs[0].shape))
        out = self._new_tensor(out_name, _ir_shape(onnx_out), _INT8, out_q)
        self._emit("CONCATENATION", self._base(), [x.tensor for x in xs], [out],
                   {"axis": _IR_AXIS[axis] if rank == 4 else axis, "activation": "NONE"})
        return out, onnx_out

    def _reshape(self, x: _Act, new: tuple[int, ...], out_name: str) -> _Act:
        old = x.shape
        if int(np.prod(old)) != int(np.prod(new)):
            raise self._bad(f"cannot reshape {list(old)} into {list(new)}")
        if old == new:
            return _Act(x.tensor, new, x.is_float)
        base = self._base()
        src = x.tensor
        if not _same_order(old):
            src = self._transpose(src, _TO_NCHW, f"{out_name}_nchw", f"{base}_to_nchw")
        # src now holds the elements in ONNX order
        if len(new) == 4 and not _same_order(new):
            src = self._reshape_op(src, new, f"{out_name}_nchw_shape", base)
            src = self._transpose(src, _TO_NHWC, out_name, f"{base}_to_nhwc")
        else:
            src = self._reshape_op(src, _ir_shape(new), out_name, base)
        return _Act(src, new, x.is_float)

    # ---------------------------------------------------------------- activation specs
    def _activation_spec(self, node: Any) -> tuple[str, float, float]:
        if node.op_type == "Relu":
            return ("RELU", 0.0, math.inf)
        attrs = self._attrs(node)
        if self.opset < 11:
            lo = float(attrs.get("min", -math.inf))
            hi = float(attrs.get("max", math.inf))
        else:
            lo_v = self._opt_const(node, 1, "Clip min")
            hi_v = self._opt_const(node, 2, "Clip max")
            lo = -math.inf if lo_v is None else float(np.asarray(lo_v).reshape(-1)[0])
            hi = math.inf if hi_v is None else float(np.asarray(hi_v).reshape(-1)[0])
        if lo <= -3.4e38 and hi >= 3.4e38:
            return ("NONE", lo, hi)
        if lo == 0.0 and hi >= 3.4e38:
            return ("RELU", lo, hi)
        if lo == 0.0 and hi == 6.0:
            return ("RELU6", lo, hi)
        if lo == -1.0 and hi == 1.0:
            return ("RELU_N1_TO_1", lo, hi)
        return ("CLIP", lo, hi)

    def _resolve_activation(self, spec: tuple | None, q: Quantization) -> str:
        """The IR activation for a Relu/Clip whose output has quantization ``q``."""
        if spec is None:
            return "NONE"
        kind, lo, hi = spec
        if kind != "CLIP":
            return kind
        s, z = q.scalar_scale, q.scalar_zero_point
        lo_implied = lo <= -3.4e38 or quantize_value(lo, s, z) <= -128
        hi_implied = hi >= 3.4e38 or quantize_value(hi, s, z) >= 127
        if lo_implied and hi_implied:
            return "NONE"  # the output quantization saturates before the clip would
        raise self._unsupported(f"Clip(min={lo:g}, max={hi:g}) is not supported (only Relu, "
                                "Clip(0, 6), Clip(-1, 1), or bounds the output quantization "
                                "already imposes)")

    # ================================================================ handlers
    def _h_quantize(self, node: Any) -> None:
        attrs = self._attrs(node)
        out_name = node.output[0]
        zp_name = self._input(node, 2)
        default = np.uint8
        if not zp_name and "output_dtype" in attrs:
            default = {2: np.uint8, 3: np.int8}.get(int(attrs["output_dtype"]), None)
            if default is None:
                raise self._unsupported(f"QuantizeLinear output_dtype {attrs['output_dtype']} "
                                        "is not supported (int8/uint8 only)")
        if int(attrs.get("block_size", 0)):
            raise self._unsupported("blocked quantization is not supported")
        scale, zp, qtype = self._qparams(self._input(node, 1), zp_name, default)
        v = self._val(node.input[0])
        if isinstance(v, _Const):
            real = v.real()
            axis = int(attrs.get("axis", 1))
            axis = axis + real.ndim if axis < 0 else axis
            s, z = scale.astype(np.float64), zp
            if scale.size > 1:
                if not 0 <= axis < real.ndim or real.shape[axis] != scale.size:
                    raise self._bad(f"{scale.size} scales do not match axis {axis}")
                shape = [1] * real.ndim
                shape[axis] = -1
                s, z = s.reshape(shape), z.reshape(shape)
            q = np.clip(np.rint(real / s) + z, -128, 127).astype(np.int64)
            stored = (q + 128).astype(np.uint8) if qtype == np.uint8 else q.astype(qtype)
            self.vals[out_name] = _Const(stored, out_name)
            return
        quant = self._act_quant(scale, zp, f"'{out_name}'")
        if isinstance(v, _FloatIn):
            t = self._new_tensor(out_name, v.shape, _INT8, quant)
            self._emit("QUANTIZE", self._base(), [v.tensor], [t], {})
            if len(v.shape) == 4:
                t = self._transpose(t, _TO_NHWC, f"{out_name}_nhwc", f"{self._base()}_to_nhwc")
            self.vals[out_name] = _Act(t, v.shape, is_float=False)
        elif isinstance(v, _Deferred):
            self.node = v.node  # errors while building name the float op
            try:
                act = self._resolve_activation(v.activation, quant)
                t = v.build(quant, out_name, act, v.extra_bias)
            finally:
                self.node = node
            self.vals[out_name] = _Act(t, v.shape, is_float=False)
        elif isinstance(v, _Act) and v.is_float:
            t = self._requant(v.tensor, quant, out_name, f"{self._base()}")
            self.vals[out_name] = _Act(t, v.shape, is_float=False)
        else:
            raise self._bad(f"input '{node.input[0]}' is not a float tensor")

    def _h_dequantize(self, node: Any) -> None:
        attrs = self._attrs(node)
        if int(attrs.get("block_size", 0)):
            raise self._unsupported("blocked quantization is not supported")
        name = node.input[0]
        v = self._val(name)
        # Without a zero point input, the zero point is 0 of the input's own type.
        default = np.uint8
        if isinstance(v, _Const) and not v.quantized:
            default = v.data.dtype if v.data.dtype in (np.int8, np.uint8, np.int32) else np.int8
        elif isinstance(v, _RawIn):
            default = np.int8
        elif isinstance(v, _Act) and self.tensors[v.tensor].quant.scalar_zero_point != -128:
            default = np.int8
        scale, zp, qtype = self._qparams(self._input(node, 1), self._input(node, 2),
                                         default, allow_int32=True)
        out = node.output[0]
        if isinstance(v, _Const) and not v.quantized:
            if v.data.dtype != qtype:
                raise self._bad(f"'{name}' is {v.data.dtype} but its zero point is {qtype}")
            if v.data.dtype not in (np.int8, np.uint8, np.int32):
                raise self._unsupported(f"dequantizing {v.data.dtype} data is not supported")
            qdata = _shift_uint8(v.data)
            axis = int(attrs.get("axis", 1))
            axis = axis + qdata.ndim if axis < 0 else axis
            if scale.size > 1 and (not 0 <= axis < qdata.ndim
                                   or qdata.shape[axis] != scale.size):
                raise self._bad(f"{scale.size} scales do not match axis {axis} of "
                                f"'{name}' with shape {list(qdata.shape)}")
            self.vals[out] = _Const(v.data, name, scale, zp, axis if scale.size > 1 else 0,
                                    qdata)
            return
        if isinstance(v, _RawIn):
            v = self._bind_raw(v, self._act_quant(scale, zp, f"'{name}'"))
        if isinstance(v, _Act) and not v.is_float:
            quant = self._act_quant(scale, zp, f"'{name}'")
            have = self.tensors[v.tensor].quant
            if not _same_quant(have, quant):
                raise self._unsupported(
                    f"'{name}' is dequantized with scale {quant.scalar_scale:g} zero point "
                    f"{quant.scalar_zero_point} but was quantized with {have.describe()}")
            self.vals[out] = _Act(v.tensor, v.shape, is_float=True)
            return
        raise self._bad(f"input '{name}' is not a quantized tensor")

    # -- convolution / matmul
    def _h_conv(self, node: Any) -> None:
        w = self._fin(node.input[1], "weights")
        if not isinstance(w, _Const):
            raise self._unsupported("weights must be constant")
        self._weights(w, 0, w.data.shape[0] if w.data.ndim else 0)  # early, clear errors
        x = self._fact(node.input[0])
        b = None
        if self._input(node, 2):
            b = self._fin(node.input[2], "bias")
            if not isinstance(b, _Const):
                raise self._unsupported("bias must be constant")
        out_shape = self._conv_onnx_shape(node, x, w)

        def build(q, out_name, act, extra):
            return self._emit_conv(node, x, w, b, q, out_name, act, extra)

        self.vals[node.output[0]] = _Deferred(node, out_shape, build, fusable=True, bias_axis=1)

    def _conv_onnx_shape(self, node: Any, x: _Act, w: _Const) -> tuple[int, ...]:
        if len(x.shape) != 4 or w.data.ndim != 4:
            raise self._unsupported(f"only 2-D convolutions are supported (input "
                                    f"{list(x.shape)}, weights {list(w.data.shape)})")
        kh, kw = w.data.shape[2:]
        _, _, _, (oh, ow) = self._window(self._attrs(node), x.shape[2:], (kh, kw), False)
        return (x.shape[0], w.data.shape[0], oh, ow)

    def _h_qlinear_conv(self, node: Any) -> None:
        x = self._qin(node.input[0], node.input[1], node.input[2], "input")
        w = self._qin(node.input[3], node.input[4], node.input[5], "weights", axis=0)
        if not isinstance(x, _Act) or not isinstance(w, _Const):
            raise self._unsupported("expects an activation input and constant weights")
        y_s, y_z, _ = self._qparams(node.input[6], self._input(node, 7))
        out_q = self._act_quant(y_s, y_z, "output")
        b = None
        if self._input(node, 8):
            bv = self._val(node.input[8])
            if not isinstance(bv, _Const) or bv.quantized or bv.data.dtype != np.int32:
                raise self._unsupported("bias must be a constant int32 initializer")
            b = self._implicit_bias(bv, x, w)
        out_shape = self._conv_onnx_shape(node, x, w)
        t = self._emit_conv(node, x, w, b, out_q, node.output[0], "NONE", None)
        self.vals[node.output[0]] = _Act(t, out_shape, is_float=False)

    def _implicit_bias(self, bv: _Const, x: _Act, w: _Const) -> _Const:
        """QLinearConv/QGemm int32 bias: scale x_scale * w_scale, zero point 0."""
        s = np.float32(self.tensors[x.tensor].quant.scalar_scale) * w.scale.astype(np.float32)
        s = s.astype(np.float32).reshape(-1)
        return _Const(bv.data, bv.name, s, np.zeros(s.shape, np.int64), 0,
                      bv.data.astype(np.int64))

    def _h_matmul(self, node: Any) -> None:
        w = self._fin(node.input[1], "weights")
        if not isinstance(w, _Const):
            raise self._unsupported("matrix multiplication of two activations is not "
                                    "supported; the second operand must be constant weights")
        if w.data.ndim != 2:
            raise self._unsupported(f"weights '{w.name}' must be 2-D, got "
                                    f"{list(w.data.shape)}")
        self._weights(w, 1, w.data.shape[1])
        x = self._fact(node.input[0])
        if w.quantized and w.scale.size > 1 and w.axis != 1:
            raise self._unsupported("MatMul weights must be quantized per column (axis 1)")
        shape = tuple(x.shape[:-1]) + (w.data.shape[1],)
        if len(x.shape) < 2 or len(x.shape) == 4:
            raise self._unsupported(f"MatMul of a rank-{len(x.shape)} input is not supported")

        def build(q, out_name, act, extra):
            wq, ws = self._weights(w, 1, w.data.shape[1])
            return self._emit_fc(x, wq.T.copy(), ws, w.name, None, 1.0, q, out_name, act,
                                 extra)

        self.vals[node.output[0]] = _Deferred(node, shape, build, fusable=True,
                                              bias_axis=len(shape) - 1)

    def _h_qlinear_matmul(self, node: Any) -> None:
        x = self._qin(node.input[0], node.input[1], node.input[2], "input")
        w = self._qin(node.input[3], node.input[4], node.input[5], "weights", axis=-1)
        if not isinstance(x, _Act) or not isinstance(w, _Const):
            raise self._unsupported("expects an activation input and constant weights")
        if w.qdata.ndim != 2:
            raise self._unsupported(f"weights must be 2-D, got {list(w.qdata.shape)}")
        y_s, y_z, _ = self._qparams(node.input[6], self._input(node, 7))
        out_q = self._act_quant(y_s, y_z, "output")
        wq, ws = self._weights(w, 1, w.qdata.shape[1])
        t = self._emit_fc(x, wq.T.copy(), ws, w.name, None, 1.0, out_q, node.output[0],
                          "NONE", None)
        self.vals[node.output[0]] = _Act(t, tuple(x.shape[:-1]) + (wq.shape[1],), False)

    def _gemm_weights(self, attrs: dict, w: _Const) -> tuple[np.ndarray, np.ndarray]:
        if int(attrs.get("transA", 0)):
            raise self._unsupported("Gemm with transA=1 is not supported")
        alpha = float(attrs.get("alpha", 1.0))
        if not alpha > 0:
            raise self._unsupported(f"Gemm alpha={alpha:g} is not supported (must be > 0)")
        if w.qdata.ndim != 2:
            raise self._unsupported(f"weights must be 2-D, got {list(w.qdata.shape)}")
        trans_b = int(attrs.get("transB", 0))
        n_out = w.qdata.shape[0] if trans_b else w.qdata.shape[1]
        wq, ws = self._weights(w, 0 if trans_b else 1, n_out)
        w_oi = wq if trans_b else wq.T
        return w_oi.copy(), (ws * np.float32(alpha)).astype(np.float32)

    def _h_gemm(self, node: Any) -> None:
        attrs = self._attrs(node)
        w = self._fin(node.input[1], "weights")
        if not isinstance(w, _Const):
            raise self._unsupported("the second operand must be constant weights")
        if not w.quantized:
            self._weights(w, 0, 0)
        w_oi, ws = self._gemm_weights(attrs, w)
        x = self._fact(node.input[0])
        if len(x.shape) != 2:
            raise self._unsupported(f"Gemm input must be 2-D, got {list(x.shape)}")
        c = None
        if self._input(node, 2):
            c = self._fin(node.input[2], "bias")
            if not isinstance(c, _Const):
                raise self._unsupported("Gemm C must be a constant bias")
        beta = float(attrs.get("beta", 1.0))
        shape = (x.shape[0], w_oi.shape[0])

        def build(q, out_name, act, extra):
            return self._emit_fc(x, w_oi, ws, w.name, c, beta, q, out_name, act, extra)

        self.vals[node.output[0]] = _Deferred(node, shape, build, fusable=True, bias_axis=1)

    def _h_qgemm(self, node: Any) -> None:
        attrs = self._attrs(node)
        x = self._qin(node.input[0], node.input[1], node.input[2], "input")
        trans_b = int(attrs.get("transB", 0))
        w = self._qin(node.input[3], node.input[4], node.input[5], "weights",
                      axis=0 if trans_b else 1)
        if not isinstance(x, _Act) or not isinstance(w, _Const):
            raise self._unsupported("expects an activation input and constant weights")
        if not self._input(node, 7):
            raise self._unsupported("QGemm with a float output is not supported")
        y_s, y_z, _ = self._qparams(node.input[7], self._input(node, 8))
        out_q = self._act_quant(y_s, y_z, "output")
        w_oi, ws = self._gemm_weights(attrs, w)
        c = None
        if self._input(node, 6):
            bv = self._val(node.input[6])
            if not isinstance(bv, _Const) or bv.quantized or bv.data.dtype != np.int32:
                raise self._unsupported("C must be a constant int32 bias")
            s = (np.float32(self.tensors[x.tensor].quant.scalar_scale) * ws).astype(np.float32)
            c = _Const(bv.data, bv.name, s, np.zeros(s.shape, np.int64), 0,
                       bv.data.astype(np.int64).reshape(-1))
        if len(x.shape) != 2:
            raise self._unsupported(f"QGemm input must be 2-D, got {list(x.shape)}")
        t = self._emit_fc(x, w_oi, ws, w.name, c, 1.0, out_q, node.output[0], "NONE", None)
        self.vals[node.output[0]] = _Act(t, (x.shape[0], w_oi.shape[0]), False)

    # -- elementwise
    def _h_add_mul(self, node: Any) -> None:
        op_type = "ADD" if node.op_type == "Add" else "MUL"
        va, vb = self._val(node.input[0]), self._val(node.input[1])
        # A float MatMul/Gemm/Conv result plus a constant: fold exactly into the bias.
        if op_type == "ADD":
            for d, c in ((va, vb), (vb, va)):
                if isinstance(d, _Deferred) and isinstance(c, _Const) and d.bias_axis is not None \
                        and d.activation is None:
                    real = c.real()
                    n = d.shape[d.bias_axis]
                    vec = self._channel_vector(real, d.shape, d.bias_axis)
                    if vec is not None:
                        extra = vec if d.extra_bias is None else d.extra_bias + vec
                        self.vals[node.output[0]] = _Deferred(
                            d.node, d.shape, d.build, True, None, d.bias_axis,
                            np.broadcast_to(extra, (n,)).copy())
                        return
        a = self._fin(node.input[0])
        b = self._fin(node.input[1])
        if isinstance(a, _Const) and isinstance(b, _Const):
            raise self._unsupported("both operands are constants")
        shapes = [v.shape if isinstance(v, _Act) else v.data.shape for v in (a, b)]
        try:
            shape = tuple(int(d) for d in np.broadcast_shapes(*shapes))
        except ValueError:
            raise self._bad(f"input shapes {list(shapes[0])} and {list(shapes[1])} do not "
                            "broadcast") from None

        def build(q, out_name, act, extra):
            return self._emit_binary(op_type, a, b, q, out_name, act)

        self.vals[node.output[0]] = _Deferred(node, shape, build, fusable=True)

    def _channel_vector(self, real: np.ndarray, shape: tuple[int, ...],
                        axis: int) -> np.ndarray | None:
        """``real`` as a per-channel vector if it broadcasts only along ``axis``."""
        rank = len(shape)
        if real.ndim > rank:
            return None
        full = real.reshape((1,) * (rank - real.ndim) + real.shape)
        for i, d in enumerate(full.shape):
            if i != axis and d != 1:
                return None
        if full.shape[axis] not in (1, shape[axis]):
            return None
        return np.broadcast_to(full.reshape(-1), (shape[axis],)).astype(np.float64)

    def _h_qlinear_binary(self, node: Any) -> None:
        op_type = "ADD" if node.op_type == "QLinearAdd" else "MUL"
        a = self._qin(node.input[0], node.input[1], self._input(node, 2), "A")
        b = self._qin(node.input[3], node.input[4], self._input(node, 5), "B")
        if isinstance(a, _Const) and isinstance(b, _Const):
            raise self._unsupported("both operands are constants")
        y_s, y_z, _ = self._qparams(node.input[6], self._input(node, 7))
        out_q = self._act_quant(y_s, y_z, "output")
        shapes = [v.shape if isinstance(v, _Act) else v.qdata.shape for v in (a, b)]
        t = self._emit_binary(op_type, a, b, out_q, node.output[0], "NONE")
        shape = tuple(int(d) for d in np.broadcast_shapes(*shapes))
        self.vals[node.output[0]] = _Act(t, shape, False)

    # -- activations
    def _h_activation(self, node: Any) -> None:
        spec = self._activation_spec(node)
        v = self._val(node.input[0])
        out = node.output[0]
        if isinstance(v, _Deferred):
            if not v.fusable or v.activation is not None:
                raise self._unsupported(f"{node.op_type} after node '{v.node.name}' "
                                        f"({v.node.op_type}) cannot be fused")
            self.vals[out] = _Deferred(v.node, v.shape, v.build, True, spec, None,
                                       v.extra_bias)
            return
        x = self._fact(node.input[0])

        def build(q, out_name, act, extra):
            kind = self._resolve_activation(spec, q)
            t = self._new_tensor(out_name, _ir_shape(x.shape), _INT8, q)
            self._emit(_ACT_OP, self._base(), [x.tensor], [t], {"activation": kind})
            return t

        self.vals[out] = _Deferred(node, x.shape, build)

    # -- pooling and reductions
    def _pool_kernel(self, attrs: dict) -> tuple[int, int]:
        k = tuple(int(v) for v in attrs.get("kernel_shape", ()))
        if len(k) != 2:
            raise self._unsupported(f"kernel_shape {list(k)}: only 2-D pooling is supported")
        return k

    def _h_maxpool(self, node: Any) -> None:
        if len(node.output) > 1 and node.output[1]:
            raise self._unsupported("MaxPool with an Indices output is not supported")
        attrs = self._attrs(node)
        x = self._any_act(node.input[0])
        t, shape = self._emit_pool("MAX_POOL_2D", x, attrs, self._pool_kernel(attrs),
                                   node.output[0], None)
        self.vals[node.output[0]] = _Act(t, shape, x.is_float)

    def _h_global_maxpool(self, node: Any) -> None:
        x = self._any_act(node.input[0])
        if len(x.shape) != 4:
            raise self._unsupported(f"needs a 4-D NCHW input, got {list(x.shape)}")
        t, shape = self._emit_pool("MAX_POOL_2D", x, {}, x.shape[2:], node.output[0], None)
        self.vals[node.output[0]] = _Act(t, shape, x.is_float)

    def _h_avgpool(self, node: Any) -> None:
        attrs = self._attrs(node)
        kernel = self._pool_kernel(attrs)
        x = self._any_act(node.input[0])
        if not x.is_float:  # on integers directly: same quantization in and out
            t, shape = self._emit_pool("AVERAGE_POOL_2D", x, attrs, kernel, node.output[0],
                                       None)
            self.vals[node.output[0]] = _Act(t, shape, False)
            return
        if len(x.shape) != 4:
            raise self._unsupported(f"pooling needs a 4-D NCHW input, got {list(x.shape)}")
        n, c = x.shape[0], x.shape[1]
        _, _, _, (oh, ow) = self._window(attrs, x.shape[2:], kernel, True)

        def build(q, out_name, act, extra):
            return self._emit_pool("AVERAGE_POOL_2D", x, attrs, kernel, out_name, q)[0]

        self.vals[node.output[0]] = _Deferred(node, (n, c, oh, ow), build)

    def _h_qlinear_avgpool(self, node: Any) -> None:
        attrs = self._attrs(node)
        if int(attrs.get("channels_last", 0)):
            raise self._unsupported("channels_last=1 is not supported")
        x = self._qin(node.input[0], node.input[1], self._input(node, 2), "input")
        if not isinstance(x, _Act):
            raise self._unsupported("input must be an activation")
        y_s, y_z, _ = self._qparams(node.input[3], self._input(node, 4))
        out_q = self._act_quant(y_s, y_z, "output")
        t, shape = self._emit_pool("AVERAGE_POOL_2D", x, attrs, self._pool_kernel(attrs),
                                   node.output[0], out_q)
        self.vals[node.output[0]] = _Act(t, shape, False)

    def _h_gap(self, node: Any) -> None:
        x = self._any_act(node.input[0])
        if len(x.shape) != 4:
            raise self._unsupported(f"needs a 4-D NCHW input, got {list(x.shape)}")
        if not x.is_float:
            q = self.tensors[x.tensor].quant
            t, shape = self._emit_mean(x, [2, 3], True, q, node.output[0])
            self.vals[node.output[0]] = _Act(t, shape, False)
            return

        def build(q, out_name, act, extra):
            return self._emit_mean(x, [2, 3], True, q, out_name)[0]

        self.vals[node.output[0]] = _Deferred(node, x.shape[:2] + (1, 1), build)

    def _h_qlinear_gap(self, node: Any) -> None:
        attrs = self._attrs(node)
        if int(attrs.get("channels_last", 0)):
            raise self._unsupported("channels_last=1 is not supported")
        x = self._qin(node.input[0], node.input[1], self._input(node, 2), "input")
        if not isinstance(x, _Act) or len(x.shape) != 4:
            raise self._unsupported("needs a 4-D NCHW activation input")
        y_s, y_z, _ = self._qparams(node.input[3], self._input(node, 4))
        out_q = self._act_quant(y_s, y_z, "output")
        t, shape = self._emit_mean(x, [2, 3], True, out_q, node.output[0])
        self.vals[node.output[0]] = _Act(t, shape, False)

    def _h_reduce_mean(self, node: Any) -> None:
        attrs = self._attrs(node)
        x = self._any_act(node.input[0])
        rank = len(x.shape)
        if self.opset >= 18 and self._input(node, 1):
            axes = [int(a) for a in np.asarray(self._const(node.input[1], "axes")).reshape(-1)]
        else:
            axes = [int(a) for a in attrs.get("axes", [])]
        if not axes:
            if int(attrs.get("noop_with_empty_axes", 0)):
                self.vals[node.output[0]] = x
                return
            axes = list(range(rank))
        keep = bool(int(attrs.get("keepdims", 1)))
        if not x.is_float:
            q = self.tensors[x.tensor].quant
            t, shape = self._emit_mean(x, axes, keep, q, node.output[0])
            self.vals[node.output[0]] = _Act(t, shape, False)
            return
        norm = sorted({a + rank if a < 0 else a for a in axes})
        shape = tuple(1 if i in norm else d for i, d in enumerate(x.shape)
                      if keep or i not in norm)

        def build(q, out_name, act, extra):
            return self._emit_mean(x, axes, keep, q, out_name)[0]

        self.vals[node.output[0]] = _Deferred(node, shape, build)

    # -- softmax
    def _softmax_attrs(self, node: Any, opset: int) -> tuple[int, bool]:
        attrs = self._attrs(node)
        coerce = opset < 13
        return int(attrs.get("axis", 1 if coerce else -1)), coerce

    def _h_softmax(self, node: Any) -> None:
        log = node.op_type == "LogSoftmax"
        axis, coerce = self._softmax_attrs(node, self.opset)
        x = self._fact(node.input[0])
        self._softmax_axis_ok(x.shape, axis, coerce)

        def build(q, out_name, act, extra):
            return self._emit_softmax(x, log, q, out_name)

        self.vals[node.output[0]] = _Deferred(node, x.shape, build)

    def _h_qlinear_softmax(self, node: Any) -> None:
        attrs = self._attrs(node)
        axis, coerce = self._softmax_attrs(node, int(attrs.get("opset", self.opset)))
        x = self._qin(node.input[0], node.input[1], self._input(node, 2), "input")
        if not isinstance(x, _Act):
            raise self._unsupported("input must be an activation")
        self._softmax_axis_ok(x.shape, axis, coerce)
        y_s, y_z, _ = self._qparams(node.input[3], self._input(node, 4))
        out_q = self._act_quant(y_s, y_z, "output")
        t = self._emit_softmax(x, False, out_q, node.output[0])
        self.vals[node.output[0]] = _Act(t, x.shape, False)

    # -- concatenation
    def _h_concat(self, node: Any) -> None:
        axis = int(self._attrs(node).get("axis", 0 if self.opset < 4 else 1))
        vals = [self._val(n) for n in node.input]
        if all(isinstance(v, _Act) and not v.is_float for v in vals):
            xs = vals  # integer tensors (QOperator): parameters must agree
            q = self.tensors[xs[0].tensor].quant
            for x in xs[1:]:
                if not _same_quant(self.tensors[x.tensor].quant, q):
                    raise self._unsupported("Concat of integer tensors with different "
                                            "quantization (expected QLinearConcat)")
            t, shape = self._emit_concat(xs, axis, q, node.output[0])
            self.vals[node.output[0]] = _Act(t, shape, False)
            return
        xs = [self._fact(n) for n in node.input]
        rank = len(xs[0].shape)
        ax = axis + rank if axis < 0 else axis
        shape = tuple(sum(x.shape[ax] for x in xs) if i == ax else d
                      for i, d in enumerate(xs[0].shape))

        def build(q, out_name, act, extra):
            return self._emit_concat(xs, axis, q, out_name)[0]

        self.vals[node.output[0]] = _Deferred(node, shape, build)

    def _h_qlinear_concat(self, node: Any) -> None:
        axis = int(self._attrs(node).get("axis", 1))
        y_s, y_z, _ = self._qparams(node.input[0], node.input[1])
        out_q = self._act_quant(y_s, y_z, "output")
        rest = list(node.input[2:])
        if len(rest) % 3 or not rest:
            raise self._bad("expects (input, scale, zero point) triples")
        xs = []
        for k in range(0, len(rest), 3):
            x = self._qin(rest[k], rest[k + 1], rest[k + 2], f"input {k // 3}")
            if not isinstance(x, _Act):
                raise self._unsupported("constant inputs are not supported")
            xs.append(x)
        t, shape = self._emit_concat(xs, axis, out_q, node.output[0])
        self.vals[node.output[0]] = _Act(t, shape, False)

    # -- data movement (quantization unchanged)
    def _h_transpose(self, node: Any) -> None:
        x = self._any_act(node.input[0])
        rank = len(x.shape)
        perm = tuple(int(p) for p in self._attrs(node).get("perm", range(rank - 1, -1, -1)))
        if sorted(perm) != list(range(rank)):
            raise self._bad(f"perm {list(perm)} is not a permutation of rank {rank}")
        shape = tuple(x.shape[p] for p in perm)
        ir_perm = _remap_perm(perm) if rank == 4 else perm
        if ir_perm == tuple(range(rank)):
            self.vals[node.output[0]] = _Act(x.tensor, shape, x.is_float)
            return
        t = self._transpose(x.tensor, ir_perm, node.output[0], self._base())
        self.vals[node.output[0]] = _Act(t, shape, x.is_float)

    def _reshape_target(self, node: Any, old: tuple[int, ...]) -> tuple[int, ...]:
        op = node.op_type
        attrs = self._attrs(node)
        size = int(np.prod(old))
        if op == "Flatten":
            axis = int(attrs.get("axis", 1))
            axis = axis + len(old) if axis < 0 else axis
            if not 0 <= axis <= len(old):
                raise self._bad(f"axis {axis} out of range")
            lead = int(np.prod(old[:axis]))
            return (lead, size // max(lead, 1))
        if op == "Reshape":
            spec = [int(d) for d in np.asarray(self._const(node.input[1], "shape")).reshape(-1)]
            allow_zero = int(attrs.get("allowzero", 0))
            out = []
            for i, d in enumerate(spec):
                if d == 0 and not allow_zero:
                    if i >= len(old):
                        raise self._bad(f"shape {spec}: 0 at position {i} has no input dim")
                    out.append(old[i])
                else:
                    out.append(d)
            if out.count(-1) > 1 or any(d < -1 or d == 0 for d in out):
                raise self._bad(f"invalid shape {spec} for input {list(old)}")
            if -1 in out:
                known = int(np.prod([d for d in out if d != -1]))
                if known == 0 or size % known:
                    raise self._bad(f"cannot reshape {list(old)} into {spec}")
                out[out.index(-1)] = size // known
            return tuple(out)
        if op in ("Squeeze", "Unsqueeze"):
            if self.opset >= 13:
                axes_v = self._opt_const(node, 1, "axes")
                axes = [] if axes_v is None else [int(a) for a in np.asarray(axes_v).reshape(-1)]
            else:
                axes = [int(a) for a in attrs.get("axes", [])]
            if op == "Squeeze":
                rank = len(old)
                axes = sorted({a + rank if a < 0 else a for a in axes}) or \
                    [i for i, d in enumerate(old) if d == 1]
                if any(not 0 <= a < rank or old[a] != 1 for a in axes):
                    raise self._bad(f"cannot squeeze axes {axes} of {list(old)}")
                return tuple(d for i, d in enumerate(old) if i not in axes)
            rank = len(old) + len(axes)
            axes = sorted({a + rank if a < 0 else a for a in axes})
            it = iter(old)
            return tuple(1 if i in axes else next(it) for i in range(rank))
        raise self._unsupported("not a reshape")

    def _h_reshape(self, node: Any) -> None:
        x = self._any_act(node.input[0])
        new = self._reshape_target(node, x.shape)
        self.vals[node.output[0]] = self._reshape(x, new, node.output[0])

    def _h_identity(self, node: Any) -> None:
        if node.op_type == "Dropout" and len(node.output) > 1 and node.output[1]:
            raise self._unsupported("Dropout with a mask output is not supported")
        self.vals[node.output[0]] = self._val(node.input[0])

    def _h_pad(self, node: Any) -> None:
        attrs = self._attrs(node)
        x = self._any_act(node.input[0])
        mode = attrs.get("mode", "constant") or "constant"
        if mode != "constant":
            raise self._unsupported(f"Pad mode '{mode}' is not supported (constant only)")
        rank = len(x.shape)
        value_ok = True
        if self.opset >= 11:
            pads = [int(p) for p in np.asarray(self._const(node.input[1], "pads")).reshape(-1)]
            axes_v = self._opt_const(node, 3, "axes")
            if self._input(node, 2):
                v = self._val(node.input[2])
                if not isinstance(v, _Const):
                    raise self._unsupported("constant_value must be a constant")
                if v.quantized or np.issubdtype(v.data.dtype, np.floating):
                    value_ok = float(np.asarray(v.real()).reshape(-1)[0]) == 0.0
                else:  # a raw integer (QOperator): must be the zero point, a real zero
                    raw = _shift_uint8(np.asarray(v.data)).reshape(-1)
                    value_ok = (not x.is_float and
                                int(raw[0]) == self.tensors[x.tensor].quant.scalar_zero_point)
        else:
            pads = [int(p) for p in attrs.get("pads", [])]
            axes_v = None
            value_ok = float(attrs.get("value", 0.0)) == 0.0
        if not value_ok:
            raise self._unsupported("Pad with a non-zero constant_value is not supported")
        axes = list(range(rank)) if axes_v is None else \
            [int(a) + rank if int(a) < 0 else int(a) for a in np.asarray(axes_v).reshape(-1)]
        if len(pads) != 2 * len(axes):
            raise self._bad(f"pads {pads} do not match {len(axes)} axes")
        begin, end = [0] * rank, [0] * rank
        for k, a in enumerate(axes):
            begin[a], end[a] = pads[k], pads[k + len(axes)]
        if min(begin + end) < 0:
            raise self._unsupported(f"negative pads {pads} (cropping) are not supported")
        shape = tuple(d + b + e for d, b, e in zip(x.shape, begin, end))
        if shape == x.shape:
            self.vals[node.output[0]] = _Act(x.tensor, shape, x.is_float)
            return
        paddings = [(b, e) for b, e in zip(begin, end)]
        if rank == 4:
            paddings = [paddings[i] for i in _TO_NHWC]
        t = self._like(x.tensor, node.output[0], _ir_shape(shape))
        self._emit("PAD", self._base(), [x.tensor], [t],
                   {"paddings": tuple((int(b), int(e)) for b, e in paddings)})
        self.vals[node.output[0]] = _Act(t, shape, x.is_float)

    def _h_resize(self, node: Any) -> None:
        attrs = self._attrs(node)
        x = self._any_act(node.input[0])
        if len(x.shape) != 4:
            raise self._unsupported(f"resize needs a 4-D NCHW input, got {list(x.shape)}")
        mode = attrs.get("mode", "nearest") or "nearest"
        if mode != "nearest":
            raise self._unsupported(f"mode '{mode}' is not supported (nearest only)")
        legacy = node.op_type == "Upsample" or self.opset < 11
        scales = sizes = None
        if legacy:
            ctm, nearest = "asymmetric", "floor"
            if "scales" in attrs:
                scales = np.asarray(attrs["scales"], dtype=np.float64)
            else:
                scales = np.asarray(self._const(node.input[1], "scales"), dtype=np.float64)
        else:
            ctm = attrs.get("coordinate_transformation_mode", "half_pixel") or "half_pixel"
            nearest = attrs.get("nearest_mode", "round_prefer_floor") or "round_prefer_floor"
            if attrs.get("keep_aspect_ratio_policy", "stretch") not in ("stretch", b"stretch"):
                raise self._unsupported("keep_aspect_ratio_policy other than 'stretch'")
            s = self._opt_const(node, 2, "scales")
            z = self._opt_const(node, 3, "sizes")
            scales = None if s is None or np.asarray(s).size == 0 else \
                np.asarray(s, dtype=np.float64).reshape(-1)
            sizes = None if z is None or np.asarray(z).size == 0 else \
                [int(v) for v in np.asarray(z).reshape(-1)]
            axes = attrs.get("axes")
            if axes is not None:
                axes = [int(a) + 4 if int(a) < 0 else int(a) for a in axes]
                if scales is not None:
                    full = np.ones(4)
                    full[axes] = scales
                    scales = full
                if sizes is not None:
                    full_sizes = list(x.shape)
                    for a, v in zip(axes, sizes):
                        full_sizes[a] = v
                    sizes = full_sizes
        if sizes is not None:
            if len(sizes) != 4:
                raise self._bad(f"sizes {sizes} must have 4 values")
            out = tuple(sizes)
            used_scales = [out[i] / x.shape[i] for i in range(4)]
        elif scales is not None:
            if scales.size != 4 or np.any(scales <= 0):
                raise self._bad(f"scales {scales.tolist()} must be 4 positive values")
            out = tuple(int(math.floor(x.shape[i] * scales[i] + 1e-9)) for i in range(4))
            used_scales = list(scales)
        else:
            raise self._bad("neither scales nor sizes are given")
        if out[0] != x.shape[0] or out[1] != x.shape[1] or min(out) < 1:
            raise self._unsupported(f"resizing {list(x.shape)} to {list(out)}: only the "
                                    "spatial dimensions may change")
        maps = [self._onnx_nearest(x.shape[a], out[a], used_scales[a], ctm, nearest)
                for a in (2, 3)]
        from ..reference.shape_ops import nearest_indices  # the IR's definition of the op

        for ac, hp in ((False, False), (False, True), (True, False)):
            if all(np.array_equal(nearest_indices(x.shape[a], out[a], ac, hp), m)
                   for a, m in zip((2, 3), maps)):
                break
        else:
            raise self._unsupported(
                f"nearest resize {list(x.shape[2:])} -> {list(out[2:])} with "
                f"coordinate_transformation_mode '{ctm}' and nearest_mode '{nearest}' has no "
                "TFLite RESIZE_NEAREST_NEIGHBOR equivalent")
        t = self._like(x.tensor, node.output[0], _ir_shape(out))
        self._emit("RESIZE_NEAREST_NEIGHBOR", self._base(), [x.tensor], [t],
                   {"align_corners": ac, "half_pixel_centers": hp})
        self.vals[node.output[0]] = _Act(t, out, x.is_float)

    def _onnx_nearest(self, size: int, out: int, scale: float, ctm: str,
                      nearest: str) -> np.ndarray:
        """Source index per output index, as the ONNX Resize spec defines it."""
        o = np.arange(out, dtype=np.float64)
        if ctm == "half_pixel":
            pos = (o + 0.5) / scale - 0.5
        elif ctm == "pytorch_half_pixel":
            pos = (o + 0.5) / scale - 0.5 if out > 1 else np.zeros_like(o)
        elif ctm == "align_corners":
            pos = o * (size - 1) / (out - 1) if out > 1 else np.zeros_like(o)
        elif ctm == "asymmetric":
            pos = o / scale
        elif ctm == "tf_half_pixel_for_nn":
            pos = (o + 0.5) / scale
        else:
            raise self._unsupported(f"coordinate_transformation_mode '{ctm}' is not supported")
        if nearest == "round_prefer_floor":
            idx = np.where(pos - np.floor(pos) == 0.5, np.floor(pos), np.floor(pos + 0.5))
        elif nearest == "round_prefer_ceil":
            idx = np.floor(pos + 0.5)
        elif nearest == "floor":
            idx = np.floor(pos)
        elif nearest == "ceil":
            idx = np.ceil(pos)
        else:
            raise self._unsupported(f"nearest_mode '{nearest}' is not supported")
        return np.clip(idx, 0, size - 1).astype(np.int64)

    # -- constants
    def _all_const(self, node: Any) -> bool:
        if node.op_type == "Shape":
            return bool(node.input) and isinstance(self.vals.get(node.input[0]),
                                                   (_Const, _Act, _FloatIn, _RawIn, _Deferred))
        present = [n for n in node.input if n]
        return bool(present) and all(isinstance(self.vals.get(n), _Const)
                                     and not self.vals[n].quantized for n in present)

    def _h_constant(self, node: Any) -> None:
        from onnx import numpy_helper

        attrs = {a.name: a for a in node.attribute}
        if "value" in attrs:
            arr = numpy_helper.to_array(attrs["value"].t)
        elif "value_float" in attrs:
            arr = np.array(attrs["value_float"].f, dtype=np.float32)
        elif "value_floats" in attrs:
            arr = np.array(list(attrs["value_floats"].floats), dtype=np.float32)
        elif "value_int" in attrs:
            arr = np.array(attrs["value_int"].i, dtype=np.int64)
        elif "value_ints" in attrs:
            arr = np.array(list(attrs["value_ints"].ints), dtype=np.int64)
        else:
            raise self._unsupported("Constant without a dense tensor value is not supported")
        self.vals[node.output[0]] = _Const(np.array(arr), node.output[0])

    def _fold_constant(self, node: Any) -> None:
        """Shape arithmetic on constants (Shape/Gather/Unsqueeze/Concat/... chains that
        exporters emit around Reshape) is evaluated here."""
        from onnx import helper

        op = node.op_type
        attrs = self._attrs(node)
        ins = [self.vals[n].data if n else None for n in node.input]
        if op == "Shape":
            v = self.vals[node.input[0]]
            shape = v.data.shape if isinstance(v, _Const) else v.shape
            start, end = int(attrs.get("start", 0)), attrs.get("end")
            res = np.array(shape[start:None if end is None else int(end)], dtype=np.int64)
        elif op in ("Identity", "Dropout"):
            res = ins[0]
        elif op == "Cast":
            res = ins[0].astype(helper.tensor_dtype_to_np_dtype(int(attrs["to"])))
        elif op == "Gather":
            res = np.take(ins[0], ins[1].astype(np.int64), axis=int(attrs.get("axis", 0)))
        elif op == "Concat":
            res = np.concatenate([np.atleast_1d(a) for a in ins if a is not None],
                                 axis=int(attrs["axis"]))
        elif op in ("Unsqueeze", "Squeeze"):
            axes = attrs.get("axes") if self.opset < 13 else \
                (None if len(ins) < 2 or ins[1] is None else ins[1].reshape(-1).tolist())
            if op == "Unsqueeze":
                res = ins[0]
                rank = res.ndim + len(axes)
                for a in sorted(int(a) + rank if int(a) < 0 else int(a) for a in axes):
                    res = np.expand_dims(res, a)
            else:
                res = np.squeeze(ins[0], axis=None if axes is None else
                                 tuple(int(a) for a in axes))
        elif op == "Reshape":
            spec = [int(d) for d in ins[1].reshape(-1)]
            spec = [ins[0].shape[i] if d == 0 else d for i, d in enumerate(spec)]
            res = ins[0].reshape(spec)
        elif op == "Transpose":
            res = np.transpose(ins[0], attrs.get("perm"))
        elif op == "Flatten":
            axis = int(attrs.get("axis", 1))
            res = ins[0].reshape(int(np.prod(ins[0].shape[:axis])), -1)
        elif op in ("Add", "Sub", "Mul", "Div"):
            a, b = ins[0], ins[1]
            if op == "Div" and np.issubdtype(a.dtype, np.integer):
                res = (np.trunc(a / b)).astype(a.dtype)
            else:
                res = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
                       "Div": np.divide}[op](a, b).astype(a.dtype)
        else:
            raise self._unsupported("cannot evaluate this constant expression")
        self.vals[node.output[0]] = _Const(np.asarray(res), node.output[0])

    # ================================================================ outputs and passes
    def _add_outputs(self) -> None:
        from onnx import TensorProto

        for vi in self.graph.output:
            name = vi.name
            self.node = None
            v = self.vals.get(name)
            elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
            if isinstance(v, _Deferred):
                self.node = v.node
                raise self._unsupported(f"graph output '{name}' is computed in float without "
                                        f"a QuantizeLinear; {_QUANTIZE_HINT}")
            if not isinstance(v, _Act):
                raise ModelError(f"{self.path}: graph output '{name}' is not a computed "
                                 "quantized tensor (a graph input or a constant)")
            if v.is_float:
                if elem not in (0, TensorProto.FLOAT):
                    raise ModelError(f"{self.path}: graph output '{name}' is declared "
                                     f"{elem}, but it is a dequantized float tensor")
                src = v.tensor
                if len(v.shape) == 4:
                    src = self._transpose(src, _TO_NCHW, f"{name}_nchw", f"{name}_to_nchw")
                out = self._new_tensor(name, v.shape, _FLOAT32, exact=True)
                self._emit("DEQUANTIZE", f"{name}_dequantize", [src], [out], {})
            else:
                if elem not in (0, TensorProto.INT8):
                    raise UnsupportedOpError(f"{self.path}: graph output '{name}' is "
                                             f"{'uint8' if elem == TensorProto.UINT8 else elem};"
                                             " only float32 and int8 graph outputs are "
                                             "supported")
                if len(v.shape) == 4:
                    out = self._new_tensor(name, v.shape, _INT8,
                                           self.tensors[v.tensor].quant, exact=True)
                    self._emit("TRANSPOSE", f"{name}_to_nchw", [v.tensor], [out],
                               {"perm": _TO_NCHW})
                elif v.tensor in self.inputs or v.tensor in self.outputs \
                        or v.tensor in self.reserved:
                    out = self._new_tensor(name, v.shape, _INT8,
                                           self.tensors[v.tensor].quant, exact=True)
                    self._emit("RESHAPE", f"{name}_copy", [v.tensor], [out], {})
                else:
                    self._rename(v.tensor, name)
                    out = name
            self.outputs.append(out)
            self._check_declared_shape(vi, v.shape)
        for name in self.inputs:
            if name not in self.tensors:
                raise ModelError(f"{self.path}: int8 graph input '{name}' is never dequantized "
                                 "or read by a QLinear op; its quantization is unknown")

    def _check_declared_shape(self, vi: Any, shape: tuple[int, ...]) -> None:
        dims = vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else []
        declared = [int(d.dim_value) if d.HasField("dim_value") else 0 for d in dims]
        if not vi.type.tensor_type.HasField("shape"):
            return
        if len(declared) != len(shape) or any(d and d != s for d, s in zip(declared, shape)):
            raise ModelError(f"{self.path}: graph output '{vi.name}' is declared with shape "
                             f"{declared} but computes to {list(shape)}")

    def _rename(self, old: str, new: str) -> None:
        t = self.tensors.pop(old)
        t.name = new
        self.tensors[new] = t
        self.names.add(new)
        for op in self.ops:
            op.inputs = tuple(new if n == old else n for n in op.inputs)
            op.outputs = tuple(new if n == old else n for n in op.outputs)
        for key, v in self.vals.items():
            if isinstance(v, _Act) and v.tensor == old:
                v.tensor = new

    def _producers(self) -> dict[str, int]:
        return {o: i for i, op in enumerate(self.ops) for o in op.outputs}

    def _uses(self, name: str) -> int:
        return sum(op.inputs.count(name) for op in self.ops) + self.outputs.count(name)

    def _replace_uses(self, old: str, new: str) -> None:
        for op in self.ops:
            op.inputs = tuple(new if n == old else n for n in op.inputs)

    def _lower_activations(self) -> None:
        """Standalone Relu/Clip: fuse into the producer when the quantization is unchanged
        (exact), otherwise requantize (QUANTIZE) and clamp (1x1 MAX_POOL_2D with the fused
        activation), which equals onnxruntime's dequantize -> clip -> quantize because
        rounding is monotonic."""
        while True:
            idx = next((i for i, op in enumerate(self.ops) if op.type == _ACT_OP), None)
            if idx is None:
                return
            op = self.ops[idx]
            kind = op.options["activation"]
            x, y = op.inputs[0], op.outputs[0]
            xq, yq = self.tensors[x].quant, self.tensors[y].quant
            producers = self._producers()
            p = producers.get(x)
            prod = self.ops[p] if p is not None else None
            if (prod is not None and prod.type in _FUSABLE and _same_quant(xq, yq)
                    and prod.options["activation"] == "NONE" and self._uses(x) == 1):
                prod.options["activation"] = kind
                prod.outputs = (y,)
                self.ops.pop(idx)
                del self.tensors[x]
                continue
            lo, hi = activation_range(kind, yq.scalar_scale, yq.scalar_zero_point)
            implied = (lo, hi) == (-128, 127)
            new_ops: list[Op] = []
            save_ops, self.ops = self.ops, new_ops
            try:
                base = op.name
                shape = self.tensors[y].shape
                if implied:
                    self._emit("QUANTIZE", base, [x], [y], {})
                else:
                    src = x
                    if not _same_quant(xq, yq):
                        src = self._requant(x, yq, f"{y}_requant", f"{base}_requant")
                    shape4 = shape if len(shape) == 4 else \
                        (1, 1, int(np.prod(shape[:-1])) if shape else 1, shape[-1] if shape else 1)
                    if len(shape) != 4:
                        src = self._reshape_op(src, shape4, f"{y}_4d", f"{base}_to_4d")
                    dst = y if len(shape) == 4 else self._like(src, f"{y}_clamped", shape4, yq)
                    self._emit("MAX_POOL_2D", base, [src], [dst],
                               {"filter": (1, 1), "stride": (1, 1), "padding": (0, 0, 0, 0),
                                "activation": kind})
                    if len(shape) != 4:
                        self._emit("RESHAPE", f"{base}_from_4d", [dst], [y], {})
            finally:
                self.ops = save_ops
            self.ops[idx:idx + 1] = new_ops

    def _merge_transposes(self) -> None:
        """TRANSPOSE -> TRANSPOSE becomes one TRANSPOSE and RESHAPE -> RESHAPE one RESHAPE;
        identity TRANSPOSEs disappear (e.g. the NHWC->NCHW->NHWC pairs around a model
        exported from a NHWC framework)."""
        changed = True
        while changed:
            changed = False
            producers = self._producers()
            for op in self.ops:
                if op.type == "RESHAPE":
                    src = op.inputs[0]
                    p = producers.get(src)
                    if p is not None and self.ops[p].type == "RESHAPE" and self._uses(src) == 1:
                        op.inputs = self.ops[p].inputs
                        del self.tensors[src]
                        self.ops.pop(p)
                        changed = True
                        break
                if op.type != "TRANSPOSE":
                    continue
                src = op.inputs[0]
                p = producers.get(src)
                first = self.ops[p] if p is not None else None
                if first is not None and first.type == "TRANSPOSE" and self._uses(src) == 1:
                    op.options["perm"] = _compose(first.options["perm"], op.options["perm"])
                    op.inputs = first.inputs
                    self.ops.remove(first)
                    del self.tensors[src]
                    changed = True
                    break
                if tuple(op.options["perm"]) == tuple(range(len(op.options["perm"]))):
                    out = op.outputs[0]
                    if out in self.outputs:
                        continue
                    if not _same_quant(self.tensors[src].quant, self.tensors[out].quant):
                        continue
                    self._replace_uses(out, src)
                    self.ops.remove(op)
                    del self.tensors[out]
                    changed = True
                    break

    def _remove_dead(self) -> None:
        while True:
            used = {n for op in self.ops for n in op.inputs} | set(self.outputs)
            dead = [op for op in self.ops if not any(o in used for o in op.outputs)]
            if not dead:
                break
            for op in dead:
                self.ops.remove(op)
        referenced = {n for op in self.ops for n in op.inputs + op.outputs}
        referenced |= set(self.inputs) | set(self.outputs)
        for name in [n for n in self.tensors if n not in referenced]:
            del self.tensors[name]

    def _check_contract(self) -> None:
        for op in self.ops:
            assert op.type in OP_TYPES, op.type
            assert set(op.options) == set(OPTION_KEYS[op.type]), (op.type, op.options)


# --------------------------------------------------------------------------------------------
# Dispatch table
# --------------------------------------------------------------------------------------------

_FOLDABLE = {"Shape", "Identity", "Cast", "Gather", "Concat", "Unsqueeze", "Squeeze",
             "Reshape", "Transpose", "Flatten", "Add", "Sub", "Mul", "Div", "Dropout"}

_C = _Converter
_HANDLERS: dict[tuple[str, str], Callable[[_Converter, Any], None]] = {
    ("", "QuantizeLinear"): _C._h_quantize,
    ("", "DequantizeLinear"): _C._h_dequantize,
    ("com.microsoft", "QuantizeLinear"): _C._h_quantize,
    ("com.microsoft", "DequantizeLinear"): _C._h_dequantize,
    ("", "Conv"): _C._h_conv,
    ("", "QLinearConv"): _C._h_qlinear_conv,
    ("", "MatMul"): _C._h_matmul,
    ("", "QLinearMatMul"): _C._h_qlinear_matmul,
    ("", "Gemm"): _C._h_gemm,
    ("com.microsoft", "QGemm"): _C._h_qgemm,
    ("", "Add"): _C._h_add_mul,
    ("", "Mul"): _C._h_add_mul,
    ("com.microsoft", "QLinearAdd"): _C._h_qlinear_binary,
    ("com.microsoft", "QLinearMul"): _C._h_qlinear_binary,
    ("", "Relu"): _C._h_activation,
    ("", "Clip"): _C._h_activation,
    ("", "MaxPool"): _C._h_maxpool,
    ("", "GlobalMaxPool"): _C._h_global_maxpool,
    ("", "AveragePool"): _C._h_avgpool,
    ("com.microsoft", "QLinearAveragePool"): _C._h_qlinear_avgpool,
    ("", "GlobalAveragePool"): _C._h_gap,
    ("com.microsoft", "QLinearGlobalAveragePool"): _C._h_qlinear_gap,
    ("", "ReduceMean"): _C._h_reduce_mean,
    ("", "Softmax"): _C._h_softmax,
    ("", "LogSoftmax"): _C._h_softmax,
    ("com.microsoft", "QLinearSoftmax"): _C._h_qlinear_softmax,
    ("", "Concat"): _C._h_concat,
    ("com.microsoft", "QLinearConcat"): _C._h_qlinear_concat,
    ("", "Transpose"): _C._h_transpose,
    ("", "Reshape"): _C._h_reshape,
    ("", "Flatten"): _C._h_reshape,
    ("", "Squeeze"): _C._h_reshape,
    ("", "Unsqueeze"): _C._h_reshape,
    ("", "Identity"): _C._h_identity,
    ("", "Dropout"): _C._h_identity,
    ("", "Pad"): _C._h_pad,
    ("", "Resize"): _C._h_resize,
    ("", "Upsample"): _C._h_resize,
    ("", "Constant"): _C._h_constant,
}
_SUPPORTED_NAMES = {op for _, op in _HANDLERS}
