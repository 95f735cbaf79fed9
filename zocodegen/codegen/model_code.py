"""IR + arena plan -> the data model.c / weights.c are rendered from (pure)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph
from ..planner import ArenaPlan
from .layers import LAYERS, Call, ConstArray, LayerContext, c_identifier


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


def _train_copies(calls: tuple[Call, ...], symbol: str, suffix: str) -> tuple[Call, ...]:
    """A trainable layer reads its weights and biases from the SRAM copies training.c owns
    (``<symbol>_weights_train``), or with --block auto through pointers training.c aims at
    flash or at the block in SRAM (``<symbol>_weights_active``); the flash arrays stay the
    pristine originals."""
    names = {f"{symbol}_weights": f"{symbol}_weights{suffix}",
             f"{symbol}_bias": f"{symbol}_bias{suffix}",
             f"{symbol}_folded": f"{symbol}_folded{suffix}"}
    return tuple(Call(c.function, c.params_type, c.params,
                      tuple(names.get(a, a) for a in c.args)) for c in calls)


def model_code(graph: Graph, plan: ArenaPlan, trainable_ops: frozenset[int] = frozenset(),
               switched: bool = False) -> ModelCode:
    """``switched``: the trainable layers' parameters are reached through pointers
    (sparse --block auto) rather than fixed SRAM copies."""
    layers, arrays, symbols = [], [], set()
    for index, op in enumerate(graph.ops):
        symbol = c_identifier(op.name)
        while symbol in symbols:
            symbol += "_"
        symbols.add(symbol)
        code = LAYERS[op.type](op, LayerContext(graph, plan, symbol, index))
        tensors = ([_tensor_line(graph, plan, "in", n) for n in op.inputs if n]
                   + [_tensor_line(graph, plan, "out", n) for n in op.outputs])
        calls = (_train_copies(code.calls, symbol, "_active" if switched else "_train")
                 if index in trainable_ops else code.calls)
        layers.append(Layer(index, c_comment(op.name), op.type,
                            f"layer_{index:02d}_{symbol}", c_comment(code.summary),
                            tuple(tensors), calls, code.note))
        arrays.extend(a for a in code.arrays if index in trainable_ops or not a.training_only)
    return ModelCode(tuple(layers), tuple(arrays),
                     tuple(_io(graph, plan, n) for n in graph.inputs),
                     tuple(_io(graph, plan, n) for n in graph.outputs))
