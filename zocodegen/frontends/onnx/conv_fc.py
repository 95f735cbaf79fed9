"""ONNX frontend handlers: convolution and fully connected layers (Conv, QLinearConv,
MatMul, QLinearMatMul, Gemm, QGemm)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .values import _Act, _Const, _Deferred


class _ConvFcHandlers:
    """Mixin of ``_Converter``: the handlers of Conv, QLinearConv, MatMul, QLinearMatMul, Gemm,
    QGemm."""

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
