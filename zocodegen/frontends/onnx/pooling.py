"""ONNX frontend handlers: pooling (Max/Average, global, QLinear) and ReduceMean."""
from __future__ import annotations

from typing import Any

import numpy as np

from .values import _Act, _Deferred


class _PoolingHandlers:
    """Mixin of ``_Converter``: the handlers of MaxPool, AveragePool, their global forms,
    ReduceMean."""

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
