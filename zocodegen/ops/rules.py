"""The shape, in-place and window rules of the ops other than the convolutions (ops/conv.py),
one small function per rule, named in the op table's rows (ops/table.py)."""
from __future__ import annotations

import numpy as np

from ..errors import ModelError
from ..ir import Graph, Op
from .window import window_output


def same_shape(graph: Graph, op: Op, ins: list, out: tuple, at: str) -> tuple[int, ...]:
    """Element-wise over one input: the output has the input's shape."""
    if len(ins[0]) == 0:
        raise ModelError(f"{at}: scalar input")
    return tuple(ins[0])


def broadcast_shape(graph: Graph, op: Op, ins: list, out: tuple, at: str) -> tuple[int, ...]:
    try:
        return np.broadcast_shapes(tuple(ins[0]), tuple(ins[1]))
    except ValueError:
        raise ModelError(f"{at}: input shapes {list(ins[0])} and {list(ins[1])} do not "
                         "broadcast") from None


def pool_shape(graph: Graph, op: Op, ins: list, out: tuple, at: str) -> tuple[int, ...]:
    return window_output(op, ins[0], tuple(op.options["filter"]), ins[0][3], at)


def pool_window(graph: Graph, op: Op):
    top, _, left, _ = op.options["padding"]
    return tuple(op.options["filter"]), tuple(op.options["stride"]), (1, 1), (top, left)


def mean_shape(graph: Graph, op: Op, ins: list, out: tuple, at: str) -> tuple[int, ...]:
    axes, keep = op.options["axes"], op.options["keep_dims"]
    return tuple(1 if i in axes else d for i, d in enumerate(ins[0]) if keep or i not in axes)


def pad_shape(graph: Graph, op: Op, ins: list, out: tuple, at: str) -> tuple[int, ...]:
    return tuple(d + a + b for d, (a, b) in zip(ins[0], op.options["paddings"]))


def pad_window(graph: Graph, op: Op):
    """A PAD of rows and columns only is a 1 x 1 window with padding before (patches.py);
    one that pads the batch or the channels has none (None)."""
    paddings = op.options["paddings"]
    if tuple(paddings[0]) != (0, 0) or tuple(paddings[3]) != (0, 0):
        return None
    return (1, 1), (1, 1), (1, 1), (paddings[1][0], paddings[2][0])


def point_window(graph: Graph, op: Op):
    """Element-wise: each output pixel reads the same input pixel."""
    return (1, 1), (1, 1), (1, 1), (0, 0)


def reshape_shape(graph: Graph, op: Op, ins: list, out: tuple, at: str) -> None:
    if int(np.prod(ins[0])) != int(np.prod(out)):
        raise ModelError(f"{at}: cannot reshape {list(ins[0])} into {list(out)}")
    return None


def transpose_shape(graph: Graph, op: Op, ins: list, out: tuple, at: str) -> tuple[int, ...]:
    perm = op.options["perm"]
    if len(perm) != len(ins[0]):
        raise ModelError(f"{at}: permutation {list(perm)} for rank {len(ins[0])}")
    return tuple(ins[0][p] for p in perm)


def concatenation_shape(graph: Graph, op: Op, ins: list, out: tuple,
                        at: str) -> tuple[int, ...]:
    axis = op.options["axis"]
    if any(len(s) != len(out) or any(a != b for i, (a, b) in enumerate(zip(s, out))
                                     if i != axis) for s in ins):
        raise ModelError(f"{at}: inputs {[list(s) for s in ins]} cannot be joined on "
                         f"axis {axis}")
    return tuple(sum(s[axis] for s in ins) if i == axis else d for i, d in enumerate(out))


def resize_shape(graph: Graph, op: Op, ins: list, out: tuple, at: str) -> None:
    x = ins[0]
    if len(x) != 4 or len(out) != 4 or out[0] != x[0] or out[3] != x[3] or min(out) < 1:
        raise ModelError(f"{at}: resize from {list(x)} to {list(out)}")
    return None


def any_same_shape_input(graph: Graph, op: Op) -> bool:
    """ADD and MUL: in place when every input has the output's shape (no broadcast)."""
    out = graph.tensors[op.outputs[0]]
    return all(tuple(graph.tensors[n].shape) == tuple(out.shape) for n in op.inputs if n)


def int8_to_int8(graph: Graph, op: Op) -> bool:
    """QUANTIZE: in place only when it requantizes int8 to int8 (float input is wider)."""
    inputs = [graph.tensors[n] for n in op.inputs if n]
    return (len(inputs) == 1 and np.dtype(inputs[0].dtype) == np.int8
            and np.dtype(graph.tensors[op.outputs[0]].dtype) == np.int8)


def always(graph: Graph, op: Op) -> bool:
    return True
