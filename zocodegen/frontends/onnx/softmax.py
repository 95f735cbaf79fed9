"""ONNX frontend handlers: Softmax, LogSoftmax, QLinearSoftmax."""
from __future__ import annotations

from typing import Any

from .values import _Act, _Deferred


class _SoftmaxHandlers:
    """Mixin of ``_Converter``: the handlers of Softmax, LogSoftmax, QLinearSoftmax."""

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
