"""The IR ops the ONNX handlers emit once an op's operands are resolved: convolution and
fully-connected layers, element-wise binaries, pools, means, softmax, concatenation and
reshapes, and the fused activation they may carry. A mixin of ``_Converter``
(converter.py), which provides tensor creation and value access."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...ir import Quantization
from ...numerics import quantize_value
from .values import (_TO_NHWC, _TO_NCHW, _IR_AXIS, _INT8, _INT32, _Act, _Const, _ir_shape,
                     _same_order, _quant, _same_quant)


class _Emitters:
    """IR construction for resolved operands (one method per emitted op family)."""

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
