"""ONNX frontend handlers: shape and layout ops (Concat, Transpose, Reshape/Flatten/Squeeze/
Unsqueeze/Identity, Pad, Resize) and constants (Constant, folding of constant subgraphs)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .values import (_TO_NHWC, _Act, _Const, _FloatIn, _RawIn, _Deferred, _shift_uint8, _ir_shape,
                     _remap_perm, _same_quant)


class _ShapeHandlers:
    """Mixin of ``_Converter``: the handlers of Concat, Transpose, Reshape/Flatten/Squeeze/
    Unsqueeze, Identity, Pad, Resize, and constants (Constant, constant folding)."""

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
        from ...reference.shape_ops import nearest_indices  # the IR's definition of the op

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
