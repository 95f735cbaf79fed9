"""Write trained parameters back into a copy of the model file they came from.

``export_model`` takes the IR graph the frontend made of a .tflite or .onnx file and new
integer values for some of its trainable constants (the weights and biases of CONV_2D,
DEPTHWISE_CONV_2D and FULLY_CONNECTED ops, in IR layout and dtype) and writes a model of the
same kind in which exactly those constants changed. Quantization parameters change only for
a convolution whose per-channel filter scales training moved (``--scales``, TFLite only):
the filter's scales, and its bias's, s_in x s_c as the converter sets them.

How an IR constant is found in the file:

* **TFLite.** The frontend names IR tensors after the subgraph's tensors (printable name,
  ``tensor_<i>`` when unnamed, ``#k`` appended to repeats) and copies buffers unchanged (TFLite
  already uses the IR layouts). The new bytes overwrite the buffer's bytes in place, so no
  offset in the flatbuffer moves; buffers stored after the flatbuffer (``offset``/``size``, the
  >2 GB layout) are patched the same way. A buffer that several tensors share changes only
  when all of them get the same new value.
* **ONNX.** An IR weight or bias is named after the initializer (or Constant node) that holds
  it, ``#k`` appended when the name was taken. How the frontend transformed it follows from the
  node that reads it, directly (QLinearConv/QLinearMatMul/QGemm) or through a
  DequantizeLinear (Conv/MatMul/Gemm): uint8 weights were shifted by -128, Conv weights
  OIHW became OHWI (depthwise: 1HWC), MatMul weights and Gemm weights without transB were
  transposed, biases were flattened. ``_onnx_sources`` re-derives that, and the inverse
  is written with ``onnx.numpy_helper``. A constant that the frontend computed (a bias folded
  from an Add, a missing bias filled with zeros, weights produced by a folded node) has no
  initializer to rewrite and is refused.

The written file is loaded again and the updated constants are compared with what was asked
for, so a mapping the frontend does not invert exactly fails here instead of silently.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from .errors import UserError
from .files import Replaces, atomic_writer, check_output, open_input, read_input, starts_with
from .frontends import model_format
from .ir import Graph, Op
from .ops.table import OPS, TRAINABLE_OP_TYPES

_SUFFIX = {"tflite": ".tflite", "onnx": ".onnx"}
_KIND_NAME = {"tflite": "TFLite", "onnx": "ONNX"}
_REPEAT = re.compile(r"^(.*)#\d+$")  # frontends.common.unique_name's suffix


def export_model(model_path: Path, graph: Graph, updated: Mapping[str, np.ndarray],
                 out_path: Path, scales: Mapping[str, np.ndarray] | None = None,
                 force: bool = False) -> None:
    """Write ``model_path`` to ``out_path`` with the constants named in ``updated`` replaced.

    ``graph`` is the IR ``load_model(model_path)`` returned; ``updated`` maps IR tensor names
    of trainable weights/biases to new values with the IR tensor's shape and dtype;
    ``scales`` a convolution's filter (its IR weights' name) to new per-channel scales.
    An existing ``out_path`` is replaced only when it is a model of the same format (an
    earlier export), or with ``force``.
    """
    scales = _checked_scales(graph, scales or {})
    model_path, out_path = Path(model_path), Path(out_path)
    kind = _model_kind(model_path)
    check_output(out_path, replaces=replaces(model_path), force=force)
    if kind != graph.source_format:
        raise UserError(f"{model_path} is not the model the graph was loaded from (it is "
                        f"{_KIND_NAME[kind]}, the graph came from "
                        f"{_KIND_NAME.get(graph.source_format, graph.source_format)})")
    if out_path.suffix.lower() != _SUFFIX[kind]:
        raise UserError(f"{out_path}: the exported model is {_KIND_NAME[kind]}, so its name "
                        f"must end in {_SUFFIX[kind]} (got "
                        f"{repr(out_path.suffix) if out_path.suffix else 'no suffix'})")
    changes = _checked_updates(graph, updated)
    if kind == "tflite":
        data = _patched_tflite(model_path, changes)
        data = _rescaled_tflite(data, graph, scales, str(model_path))
    elif scales:
        raise UserError(f"{model_path}: writing trained filter scales (--scales) into an ONNX "
                        "model is not supported; train without --scales to export it")
    else:
        data = _patched_onnx(model_path, graph, changes)
    _write_verified(data, out_path, changes, scales)


# --------------------------------------------------------------------------------------------
# Common checks and output
# --------------------------------------------------------------------------------------------

#: What export replaces without --force: a model file of the format it writes (its first
#: bytes as the frontends tell the formats apart: "TFL3" at 4, an ONNX ModelProto's 0x08).
MODEL_FILES = {"tflite": starts_with("a TFLite model", b"TFL3", offset=4),
               "onnx": starts_with("an ONNX model", b"\x08")}


def replaces(model_path: Path) -> Replaces:
    """What an export of ``model_path`` may replace without --force."""
    return MODEL_FILES[_model_kind(Path(model_path))]


def _model_kind(path: Path) -> str:
    kind = model_format(path)
    if kind is None:
        raise UserError(f"{path}: not a TFLite (.tflite) or ONNX (.onnx) model")
    return kind


def _trainable_roles(graph: Graph) -> dict[str, tuple[Op, str]]:
    """IR constant name -> (the trainable op reading it, "weights" or "bias")."""
    roles: dict[str, tuple[Op, str]] = {}
    for op in graph.ops:
        if op.type not in TRAINABLE_OP_TYPES:
            continue
        for k, role in ((1, "weights"), (2, "bias")):
            name = op.inputs[k] if k < len(op.inputs) else ""
            if name and graph.tensor(name).is_constant:
                roles.setdefault(name, (op, role))
    return roles


def _checked_updates(graph: Graph, updated: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    roles = _trainable_roles(graph)
    changes = {}
    for name, value in updated.items():
        if name not in graph.tensors:
            raise UserError(f"unknown tensor '{name}': the model has no tensor of that name")
        if name not in roles:
            raise UserError(f"tensor '{name}' is not the weights or bias of a "
                            f"{'/'.join(TRAINABLE_OP_TYPES)} op; only those can be exported")
        t = graph.tensor(name)
        value = np.asarray(value)
        if value.shape != t.shape:
            raise UserError(f"tensor '{name}' has shape {list(t.shape)}, the new value "
                            f"{list(value.shape)}")
        if value.dtype != t.dtype:
            raise UserError(f"tensor '{name}' is {t.dtype}, the new value {value.dtype}")
        changes[name] = np.ascontiguousarray(value)
    return changes


def _checked_scales(graph: Graph, scales: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    roles = _trainable_roles(graph)
    checked = {}
    for name, value in scales.items():
        op, role = roles.get(name, (None, ""))
        if role != "weights" or op.type not in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            raise UserError(f"tensor '{name}' is not a convolution's filter; only those have "
                            "trained scales")
        value = np.asarray(value, dtype=np.float32).reshape(-1)
        if not np.all(np.isfinite(value)) or np.any(value <= 0):
            raise UserError(f"the trained scales of '{name}' must be positive numbers")
        checked[name] = value
    return checked


def _write_verified(data: bytes, out_path: Path, changes: dict[str, np.ndarray],
                    scales: dict[str, np.ndarray] | None = None) -> None:
    """Write to a temporary file beside ``out_path``, check that the frontend reads the new
    values back, then move it into place (an existing ``out_path``, even the input model,
    is only replaced by a complete, checked file)."""
    from .frontends import load_model

    def reads_back(tmp: Path) -> None:
        reloaded = load_model(tmp)
        for name, value in changes.items():
            t = reloaded.tensors.get(name)
            if t is None or t.data is None or not np.array_equal(t.data, value):
                raise UserError(f"tensor '{name}' cannot be exported exactly: the written "
                                "model does not read back with the new values")
        for name, value in (scales or {}).items():
            if not np.array_equal(reloaded.tensor(name).quant.scale, value):
                raise UserError(f"the scales of '{name}' cannot be exported exactly: the "
                                "written model does not read back with them")

    with atomic_writer(out_path, check=reads_back) as f:
        f.write(data)


def _shared_groups(members: dict[Any, list[str]], new: dict[str, bytes],
                   what: Callable[[Any], str]) -> None:
    """Several IR tensors stored in one place: all of them must change, to one value."""
    for key, names in members.items():
        touched = [n for n in names if n in new]
        if not touched or len(names) == 1:
            continue
        if len(touched) != len(names) or len({new[n] for n in touched}) != 1:
            raise UserError(f"{what(key)} holds the values of tensors "
                            f"{', '.join(repr(n) for n in names)}; give all of them the same "
                            "new value, or give each layer its own copy in the model")


# --------------------------------------------------------------------------------------------
# TFLite: patch buffer bytes in place
# --------------------------------------------------------------------------------------------

def _tflite_names(sub: Any) -> list[str]:
    """IR names of the subgraph's tensors, made exactly as ``frontends.tflite`` makes them."""
    from .frontends.common import printable_name, unique_name

    used: set[str] = set()
    names = []
    for i in range(sub.TensorsLength()):
        raw = sub.Tensors(i).Name() or b""
        names.append(unique_name(printable_name(raw.decode("utf-8", "replace"))
                                 or f"tensor_{i}", used))
    return names


def _tflite_span(model: Any, index: int) -> tuple[int, int]:
    """(file offset, size) of buffer ``index``'s data."""
    buf = model.Buffers(index)
    if buf.Offset() > 1:  # large-model layout: the data follows the flatbuffer
        return int(buf.Offset()), int(buf.Size())
    field = buf._tab.Offset(4)  # Buffer.data, the table's first field
    if not field:
        return 0, 0
    return int(buf._tab.Vector(field)), int(buf._tab.VectorLen(field))


def _patched_tflite(path: Path, changes: dict[str, np.ndarray]) -> bytes:
    import tflite

    original = read_input(path, "model")
    model = tflite.Model.GetRootAs(original, 0)
    sub = model.Subgraphs(0)
    names = _tflite_names(sub)
    buffer_of = {n: int(sub.Tensors(i).Buffer()) for i, n in enumerate(names)}
    new = {n: v.astype(v.dtype.newbyteorder("<")).tobytes() for n, v in changes.items()}
    sharing: dict[int, list[str]] = {}
    for n, b in buffer_of.items():
        if b > 0:
            sharing.setdefault(b, []).append(n)
    _shared_groups(sharing, new, lambda b: f"{path}: buffer {b}")
    spans = {b: _tflite_span(model, b) for b in range(1, model.BuffersLength())}
    data = bytearray(original)
    for name, raw in new.items():
        index = buffer_of.get(name, 0)
        start, size = spans.get(index, (0, 0))
        if size != len(raw) or start + size > len(original):
            raise UserError(f"{path}: tensor '{name}' has no {len(raw)}-byte buffer to "
                            "overwrite; is the graph the one loaded from this file?")
        other = next((b for b, (s, n) in spans.items()
                      if b != index and n and s < start + size and start < s + n), None)
        if other is not None:  # flatbuffers may store identical vectors once
            raise UserError(f"{path}: the data of tensor '{name}' (buffer {index}) is also "
                            f"the data of buffer {other}; it cannot be changed on its own")
        data[start:start + size] = raw
    return bytes(data)


def _rescaled_tflite(data: bytes, graph: Graph, scales: dict[str, np.ndarray],
                    source: str) -> bytes:
    """The filters' quantization scales (and their biases', s_in x s_c) overwritten in
    place: same lengths, so no offset in the flatbuffer moves."""
    if not scales:
        return data
    import tflite

    model = tflite.Model.GetRootAs(data, 0)
    sub = model.Subgraphs(0)
    index = {n: i for i, n in enumerate(_tflite_names(sub))}
    spans = {}  # tensor -> (start, length) of its scale vector
    for i in range(sub.TensorsLength()):
        q = sub.Tensors(i).Quantization()
        field = q._tab.Offset(8) if q is not None else 0  # QuantizationParameters.scale
        if field:
            spans[i] = (int(q._tab.Vector(field)), int(q._tab.VectorLen(field)))
    roles = _trainable_roles(graph)
    out = bytearray(data)
    for name, value in scales.items():
        op = roles[name][0]
        new = {name: value}
        if len(op.inputs) > 2 and op.inputs[2]:
            s_in = np.float64(graph.tensor(op.inputs[0]).quant.scalar_scale)
            new[op.inputs[2]] = (s_in * value.astype(np.float64)).astype(np.float32)
        for tensor, values in new.items():
            start, length = spans.get(index[tensor], (0, 0))
            if length != len(values):
                raise UserError(f"{source}: tensor '{tensor}' has {length} quantization "
                                f"scale(s), the trained filter {len(values)}: a per-tensor "
                                "quantized filter cannot take per-channel scales in place")
            if any(s == start and j != index[tensor] for j, (s, _) in spans.items()):
                raise UserError(f"{source}: the scales of tensor '{tensor}' are stored once "
                                "for several tensors; they cannot be changed on their own")
            out[start:start + 4 * length] = values.astype("<f4").tobytes()
    return bytes(out)


# --------------------------------------------------------------------------------------------
# ONNX: rewrite initializers
# --------------------------------------------------------------------------------------------

# (op type, input index) -> weight layout, read through a DequantizeLinear (QDQ) or directly
_WEIGHT_VIA_DQ = {("Conv", 1): "conv", ("MatMul", 1): "matmul", ("Gemm", 1): "gemm"}
_WEIGHT_DIRECT = {("QLinearConv", 3): "conv", ("QLinearMatMul", 3): "matmul",
                  ("QGemm", 3): "gemm"}
_BIAS_VIA_DQ = {("Conv", 2), ("Gemm", 2)}
_BIAS_DIRECT = {("QLinearConv", 8), ("QGemm", 6)}


@dataclass(frozen=True)
class _Source:
    """Where an IR constant lives in the ONNX file and how the frontend transformed it:
    ``ir = (stored - shift).transpose(perm)`` for weights, ``ir = stored.reshape(-1)``
    (broadcast to the channels when it holds one value) for biases."""

    name: str  # initializer or Constant-node output
    role: str  # "weights" or "bias"
    perm: tuple[int, ...] = ()
    shift: int = 0


def _stored_arrays(model: Any) -> dict[str, Any]:
    """ONNX value name -> the TensorProto holding it (an initializer or a Constant node's
    ``value``); editing the TensorProto edits the model."""
    out: dict[str, Any] = {}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output:
            for a in node.attribute:
                if a.name == "value":
                    out[node.output[0]] = a.t
    for init in model.graph.initializer:
        out[init.name] = init
    return out


def _uses(model: Any, name: str) -> list[tuple[Any, int, bool]]:
    """(node, input index, read through a DequantizeLinear) for every use of ``name``."""
    nodes = model.graph.node
    direct = [(n, k, False) for n in nodes for k, x in enumerate(n.input) if x == name]
    views = {n.output[0] for n, k, _ in direct if n.op_type == "DequantizeLinear" and k == 0}
    via = [(n, k, True) for n in nodes for k, x in enumerate(n.input) if x in views]
    return [u for u in direct if not (u[0].op_type == "DequantizeLinear" and u[1] == 0)] + via


def _onnx_source(model: Any, stored: dict, name: str, op: Op, role: str) -> _Source:
    from onnx import TensorProto, helper

    src = name if name in stored else None
    m = _REPEAT.match(name)
    if src is None and m and m.group(1) in stored:
        src = m.group(1)
    if src is None:
        raise UserError(f"{role} '{name}' of {op.type} '{op.name}' is not stored in the ONNX "
                        "model as an initializer (the frontend computed it, e.g. a bias the "
                        "layer did not have or one folded from an Add); it cannot be exported")
    layouts = set()
    for node, k, via_dq in _uses(model, src):
        key = (node.op_type, k)
        where = f"node '{node.name or node.op_type}' ({node.op_type}) input {k}"
        if role == "weights" and key in (_WEIGHT_VIA_DQ if via_dq else _WEIGHT_DIRECT):
            kind = (_WEIGHT_VIA_DQ if via_dq else _WEIGHT_DIRECT)[key]
            if kind == "gemm":
                attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
                kind = "gemm_t" if int(attrs.get("transB", 0)) else "matmul"
            layouts.add(kind)
        elif role == "bias" and key in (_BIAS_VIA_DQ if via_dq else _BIAS_DIRECT):
            layouts.add("bias")
        else:
            raise UserError(f"initializer '{src}' ({role} of {op.type} '{op.name}') is read "
                            f"by {where}, which export cannot map back; it cannot be exported")
    if not layouts:
        raise UserError(f"initializer '{src}' is not read as the {role} of any layer, so it "
                        f"is not where {op.type} '{op.name}' gets '{name}' from; it cannot be "
                        "exported")
    if len(layouts) > 1:
        raise UserError(f"initializer '{src}' ({role} of {op.type} '{op.name}') is read in "
                        f"{len(layouts)} different layouts; it cannot be exported")
    (layout,) = layouts
    dtype = stored[src].data_type
    if role == "bias":
        if dtype != TensorProto.INT32:
            raise UserError(f"bias initializer '{src}' is not int32; only int32 biases can be "
                            "exported")
        return _Source(src, role)
    if dtype not in (TensorProto.INT8, TensorProto.UINT8):
        raise UserError(f"weight initializer '{src}' is not int8/uint8")
    if layout == "conv":
        perm = OPS[op.type].weights.onnx_perm
    else:
        perm = (0, 1) if layout == "gemm_t" else (1, 0)
    return _Source(src, role, perm, 128 if dtype == TensorProto.UINT8 else 0)


def _onnx_sources(model: Any, graph: Graph) -> dict[str, _Source | UserError]:
    """Every trainable IR constant -> its source in ``model``, or why it has none."""
    stored = _stored_arrays(model)
    out: dict[str, _Source | UserError] = {}
    for name, (op, role) in _trainable_roles(graph).items():
        try:
            out[name] = _onnx_source(model, stored, name, op, role)
        except UserError as exc:
            out[name] = exc
    return out


def _to_stored(src: _Source, value: np.ndarray, like: np.ndarray, ir_name: str) -> np.ndarray:
    """The inverse of the frontend's transform: IR value -> initializer array."""
    if src.role == "bias":
        flat = value.reshape(-1)
        if like.size == flat.size:
            return flat.reshape(like.shape).astype(like.dtype)
        if like.size == 1 and np.all(flat == flat[0]):
            return flat[:1].reshape(like.shape).astype(like.dtype)
        raise UserError(f"bias '{ir_name}' is stored as {like.size} value(s) for {flat.size} "
                        "channels; per-channel values cannot be exported into it")
    back = value.astype(np.int64).transpose(np.argsort(src.perm)) + src.shift
    if back.shape != like.shape:
        raise UserError(f"weights '{ir_name}' are stored with shape {list(like.shape)}, which "
                        f"does not match {list(value.shape)}")
    return back.astype(like.dtype)


def _patched_onnx(path: Path, graph: Graph, changes: dict[str, np.ndarray]) -> bytes:
    import onnx
    from onnx import numpy_helper

    try:
        with open_input(path, "model") as f:  # external data, if any, is read in and
            model = onnx.load(f)  # written inline
    except UserError:
        raise
    except Exception as exc:
        raise UserError(f"{path} cannot be read as ONNX: {' '.join(str(exc).split())}") from None
    sources = _onnx_sources(model, graph)
    stored = _stored_arrays(model)
    arrays: dict[str, np.ndarray] = {}
    for name, value in changes.items():
        src = sources[name]
        if isinstance(src, UserError):
            raise src
        like = numpy_helper.to_array(stored[src.name])
        arrays[name] = _to_stored(src, value, like, name)
    groups: dict[str, list[str]] = {}
    for name, src in sources.items():
        if isinstance(src, _Source):
            groups.setdefault(src.name, []).append(name)
    _shared_groups(groups, {n: a.tobytes() for n, a in arrays.items()},
                   lambda s: f"initializer '{s}'")
    for name, arr in arrays.items():
        tensor = stored[sources[name].name]
        values = numpy_helper.from_array(arr, tensor.name)
        # same dims and data type: only the values change (int8/uint8/int32 are stored in
        # raw_data or int32_data)
        tensor.ClearField("int32_data")
        tensor.raw_data = values.raw_data
    try:
        return model.SerializeToString()
    except Exception as exc:  # protobuf refuses messages over 2 GB
        raise UserError(f"the exported model cannot be written as one ONNX file: "
                        f"{' '.join(str(exc).split())}") from None
