"""IR + arena plan -> the data model.c / weights.c are rendered from (pure)."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..ir import Graph, Op
from ..ops.table import OPS
from ..planner import ArenaPlan
from ..planner.patches import class_input_output
from ..planner.plans import PatchPlan
from .layers.common import Call, ConstArray, LayerContext, c_identifier, fields


@dataclass(frozen=True)
class Layer:
    index: int
    op_name: str
    op_type: str
    function: str  # C name of the layer function, e.g. layer_03_conv_2d_3
    summary: str
    tensors: tuple[str, ...]  # comment lines: inputs and outputs with shapes and offsets
    calls: tuple[Call, ...]
    note: str
    patches: PatchStageCode | None = None  # set on the layer that runs a patched stage


@dataclass(frozen=True)
class PatchClassCode:
    """One class of patches: a function running the stage's ops on a patch in the
    workspace, and the window copies in and out of it."""

    function: str
    count: int
    layers: tuple[Layer, ...]  # the stage's ops on this class's patch, workspace offsets
    gather: tuple[tuple[str, str], ...]  # zo_window_params: stage input -> workspace
    scatter: tuple[tuple[str, str], ...]  # workspace -> stage output
    input_offset: int  # of the patch input in the workspace
    output_offset: int


@dataclass(frozen=True)
class PatchStageCode:
    first: int
    last: int
    description: str
    input_offset: int  # arena offsets of the whole stage input and output, and the workspace
    output_offset: int
    workspace_offset: int
    classes: tuple[PatchClassCode, ...]
    patches: tuple[tuple[int, int, int, str], ...]  # class, input byte, output byte, comment


@dataclass(frozen=True)
class IoTensor:
    name: str
    c_name: str
    shape: list
    dtype: str
    offset: int
    bytes: int


@dataclass(frozen=True)
class ModelCode:
    layers: tuple[Layer, ...]
    arrays: tuple[ConstArray, ...]
    inputs: tuple[IoTensor, ...]
    outputs: tuple[IoTensor, ...]

    @property
    def flash_bytes(self) -> int:
        return sum(a.values.size * (1 if a.ctype in ("int8_t", "uint8_t") else 4)
                   for a in self.arrays)


def _tensor_line(graph: Graph, plan: ArenaPlan, role: str, name: str) -> str:
    t = graph.tensor(name)
    where = "const" if t.data is not None else f"arena+{plan.offsets[name]}"
    return (f"{role:<3} '{c_comment(_abbreviated(name))}' {list(t.shape)} "
            f"{np.dtype(t.dtype).name} @ {where}")


def _abbreviated(name: str, limit: int = 64) -> str:
    """TFLite names of fused tensors run to hundreds of characters; keep both ends."""
    return name if len(name) <= limit else f"{name[:limit // 2 - 2]}...{name[-(limit // 2 - 1):]}"


def c_comment(text: str) -> str:
    """Text that cannot end a C comment or a line."""
    return text.replace("*/", "* /").replace("\n", " ")


def _io(graph: Graph, plan: ArenaPlan, name: str) -> IoTensor:
    t = graph.tensor(name)
    size = int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize
    return IoTensor(name, c_comment(name).replace('"', "'").replace("\\", "/"), list(t.shape),
                    np.dtype(t.dtype).name, plan.offsets[name], size)


def _train_copies(calls: tuple[Call, ...], symbol: str, suffix: str, scaled: bool = False
                  ) -> tuple[Call, ...]:
    """A trainable layer reads its weights and biases from the SRAM copies training.c owns
    (``<symbol>_weights_train``), or with --block auto through pointers training.c aims at
    flash or at the block in SRAM (``<symbol>_weights_active``); the flash arrays stay the
    pristine originals. ``scaled`` (--scales): its multipliers and shifts too, which with
    --block auto means its kernel parameters (``<symbol>_params_active``)."""
    names = {f"{symbol}_weights": f"{symbol}_weights{suffix}",
             f"{symbol}_bias": f"{symbol}_bias{suffix}",
             f"{symbol}_folded": f"{symbol}_folded{suffix}"}
    out = []
    for c in calls:
        args = tuple(names.get(a, a) for a in c.args)
        if scaled and suffix == "_active":
            out.append(Call(c.function, c.params_type, c.params, args,
                            params_pointer=f"{symbol}_params_active"))
        elif scaled:
            moved = {"multiplier": f"{symbol}_multiplier_train",
                     "shift": f"{symbol}_shift_train", "right_shift_only": "0"}
            out.append(Call(c.function, c.params_type,
                            tuple((k, moved.get(k, v)) for k, v in c.params), args))
        else:
            out.append(Call(c.function, c.params_type, c.params, args))
    return tuple(out)


def _symbols(graph: Graph) -> list[str]:
    """A unique C identifier prefix per op (its constants' names start with it)."""
    symbols: list[str] = []
    for op in graph.ops:
        symbol = c_identifier(op.name)
        while symbol in symbols:
            symbol += "_"
        symbols.append(symbol)
    return symbols


def _layer(graph: Graph, plan: ArenaPlan, index: int, op: Op, symbol: str, function: str,
           storage: str = "model_arena_storage"):
    code = OPS[op.type].generate(op, LayerContext(graph, plan, symbol, index, storage))
    tensors = ([_tensor_line(graph, plan, "in", n) for n in op.inputs if n]
               + [_tensor_line(graph, plan, "out", n) for n in op.outputs])
    layer = Layer(index, c_comment(op.name), op.type, function, c_comment(code.summary),
                  tuple(tensors), code.calls, code.note)
    return layer, code


def _window(rows: int, row_bytes: int, input_stride: int, output_stride: int):
    return fields(rows=rows, row_bytes=row_bytes, input_stride=input_stride,
                  output_stride=output_stride)


def _patch_stage(graph: Graph, plan: ArenaPlan, patches: PatchPlan, symbols: list[str]
                 ) -> tuple[PatchStageCode, list[ConstArray]]:
    """The per-patch loop of a patched stage: one function per class of patches, whose
    layers address the workspace (``arena`` inside them), and the table of patches."""
    x, y = graph.tensor(patches.input), graph.tensor(patches.output)
    x_pixel = x.shape[3] * np.dtype(x.dtype).itemsize
    y_pixel = y.shape[3] * np.dtype(y.dtype).itemsize
    classes, arrays = [], []
    workspace = plan.scratch_offsets[patches.first]  # static initialisers need its address
    for k, patch_class in enumerate(patches.classes):
        g = patch_class.graph
        layers = []
        for local, op in enumerate(g.ops):
            index = patches.first + local
            layer, code = _layer(g, patch_class.plan, local, op, symbols[index],
                                 f"patch_class_{k}_layer_{index:02d}_{symbols[index]}",
                                 storage=f"(model_arena_storage + {workspace})")
            layers.append(layer)
            if k == 0:  # every class has the same constants
                arrays.extend(a for a in code.arrays if not a.training_only)
        in_offset, out_offset = class_input_output(patch_class)
        gx, gy = g.tensor(g.inputs[0]).shape, g.tensor(g.outputs[0]).shape
        classes.append(PatchClassCode(
            f"patch_class_{k}", patch_class.count, tuple(layers),
            _window(gx[1], gx[2] * x_pixel, x.shape[2] * x_pixel, gx[2] * x_pixel),
            _window(gy[1], gy[2] * y_pixel, gy[2] * y_pixel, y.shape[2] * y_pixel),
            in_offset, out_offset))
    table = tuple((p.class_index, (p.in_rows.start * x.shape[2] + p.in_cols.start) * x_pixel,
                   (p.out_rows.start * y.shape[2] + p.out_cols.start) * y_pixel,
                   f"rows {p.out_rows.start}..{p.out_rows.stop - 1}, columns "
                   f"{p.out_cols.start}..{p.out_cols.stop - 1}")
                  for p in patches.patches)
    stage = PatchStageCode(patches.first, patches.last, c_comment(patches.describe()),
                           plan.offsets[patches.input], plan.offsets[patches.output],
                           workspace, tuple(classes), table)
    return stage, arrays


def model_code(graph: Graph, plan: ArenaPlan, trainable_ops: frozenset[int] = frozenset(),
               switched: bool = False, scaled_ops: frozenset[int] = frozenset()
               ) -> ModelCode:
    """``switched``: the trainable layers' parameters are reached through pointers
    (sparse --block auto) rather than fixed SRAM copies; ``scaled_ops``: those whose filter
    scales are trained (--scales) and so their multipliers."""
    patches = plan.patches
    if patches is not None and trainable_ops:
        raise ValueError("patch-based inference is for inference builds only")
    layers, arrays = [], []
    symbols = _symbols(graph)
    for index, op in enumerate(graph.ops):
        function = f"layer_{index:02d}_{symbols[index]}"
        if patches is not None and patches.first <= index <= patches.last:
            stage_layer = f"layer_{patches.first:02d}_{symbols[patches.first]}"
            if index == patches.first:
                stage, stage_arrays = _patch_stage(graph, plan, patches, symbols)
                arrays.extend(stage_arrays)
                tensors = (_tensor_line(graph, plan, "in", patches.input),
                           _tensor_line(graph, plan, "out", patches.output))
                layers.append(Layer(index, c_comment(op.name), op.type, function,
                                    "first op of a patched stage", tensors, (), "",
                                    patches=stage))
            else:
                layers.append(Layer(index, c_comment(op.name), op.type, function, "", (), (),
                                    f"computed patch by patch in {stage_layer}"))
            continue
        layer, code = _layer(graph, plan, index, op, symbols[index], function)
        if index in trainable_ops:
            layer = replace(layer, calls=_train_copies(
                code.calls, symbols[index], "_active" if switched else "_train",
                index in scaled_ops))
        layers.append(layer)
        arrays.extend(a for a in code.arrays if index in trainable_ops or not a.training_only)
    return ModelCode(tuple(layers), tuple(arrays),
                     tuple(_io(graph, plan, n) for n in graph.inputs),
                     tuple(_io(graph, plan, n) for n in graph.outputs))
