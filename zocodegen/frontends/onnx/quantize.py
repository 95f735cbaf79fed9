"""ONNX frontend handlers: QuantizeLinear / DequantizeLinear."""
from __future__ import annotations

from typing import Any

import numpy as np

from .values import (_TO_NHWC, _INT8, _Act, _Const, _FloatIn, _RawIn, _Deferred, _shift_uint8,
                     _same_quant)


class _QuantizeHandlers:
    """Mixin of ``_Converter``: the handlers of QuantizeLinear / DequantizeLinear."""

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
