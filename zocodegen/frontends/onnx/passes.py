"""ONNX frontend post-passes: graph outputs, then the IR rewrites run after conversion
(activation lowering, transpose/reshape merging, dead-op removal, renaming)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import ModelError, UnsupportedOpError
from ...ir import Op
from ...numerics import activation_range
from ...ops.table import OP_TYPES, OPS
from .values import (_TO_NCHW, _INT8, _FLOAT32, _FUSABLE, _ACT_OP, _QUANTIZE_HINT, _Act,
                     _Deferred, _compose, _same_quant)


class _Passes:
    """Mixin of ``_Converter``: output handling and the IR rewrites run after conversion."""

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
            assert set(op.options) == set(OPS[op.type].options), (op.type, op.options)
