"""ONNX frontend core: ``_Converter`` (state, IR construction, value access, quantization,
weights and bias helpers, the conversion driver; the emit helpers are emit.py's) and the one
dispatch table from ONNX op type to handler."""
from __future__ import annotations

import heapq
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...errors import ModelError, UnsupportedOpError
from ...ir import Graph, Op, Quantization, Tensor
from ..common import unique_name
from .values import (_TO_NHWC, _INT8, _FLOAT32, _QUANT_OPS, _QUANTIZE_HINT, _Act, _Const,
                     _FloatIn, _RawIn, _Deferred, _shift_uint8, _quant, _same_quant, _fmt)
from .conv_fc import _ConvFcHandlers
from .elementwise import _ElementwiseHandlers
from .emit import _Emitters
from .passes import _Passes
from .pooling import _PoolingHandlers
from .quantize import _QuantizeHandlers
from .shape import _ShapeHandlers
from .softmax import _SoftmaxHandlers


# --------------------------------------------------------------------------------------------
# The converter
# --------------------------------------------------------------------------------------------
class _Converter(_QuantizeHandlers, _ConvFcHandlers, _ElementwiseHandlers,
                 _PoolingHandlers, _SoftmaxHandlers, _ShapeHandlers, _Passes, _Emitters):
    """ONNX graph -> IR. The ``_h_*`` handlers (one mixin per op family), the IR emitters
    and the post-passes live in their modules; ``_HANDLERS`` below maps op types to
    them."""

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
                "uint8); quantize with quantize_static(..., weight_type=QuantType.QInt8), "
                "whose weights are symmetric, or extra_options={'WeightSymmetric': True}")
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
