"""ONNX frontend core: ``_Converter`` (state, IR construction, value access, quantization,
weights and bias helpers, the shared emit helpers, the conversion driver) and the one
dispatch table from ONNX op type to handler."""
from __future__ import annotations

import heapq
import math
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...errors import ModelError, UnsupportedOpError
from ...ir import Graph, Op, Quantization, Tensor
from ...numerics import quantize_value
from ..common import unique_name
from .values import (_TO_NHWC, _TO_NCHW, _IR_AXIS, _INT8, _INT32, _FLOAT32, _QUANT_OPS,
                     _QUANTIZE_HINT, _Act, _Const, _FloatIn, _RawIn, _Deferred, _shift_uint8,
                     _ir_shape, _same_order, _quant, _same_quant, _fmt)
from .conv_fc import _ConvFcHandlers
from .elementwise import _ElementwiseHandlers
from .passes import _Passes
from .pooling import _PoolingHandlers
from .quantize import _QuantizeHandlers
from .shape import _ShapeHandlers
from .softmax import _SoftmaxHandlers


# --------------------------------------------------------------------------------------------
# The converter
# --------------------------------------------------------------------------------------------
class _Converter(_QuantizeHandlers, _ConvFcHandlers, _ElementwiseHandlers,
                 _PoolingHandlers, _SoftmaxHandlers, _ShapeHandlers, _Passes):
    """ONNX graph -> IR. The ``_h_*`` handlers (one mixin per op family) and the
    post-passes live in their modules; ``_HANDLERS`` below maps op types to them."""

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
