"""ONNX frontend handlers: elementwise Add/Mul (float and QLinear) and Relu/Clip."""
from __future__ import annotations

from typing import Any

import numpy as np

from .values import _INT8, _ACT_OP, _Act, _Const, _Deferred, _ir_shape


class _ElementwiseHandlers:
    """Mixin of ``_Converter``: the handlers of Add, Mul, QLinearAdd, QLinearMul, and the
    Relu/Clip activations."""

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
