"""CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED: their shapes, MACs, scratch and in-place
facts, asked by the validator, the planner and the generator (ops/table.py).

Scratch, beside the kernels the way CMSIS-NN keeps ``*_get_buffer_size`` next to each: only
CONV_2D needs any. Its matrix product (`zo_conv.c`) multiplies several output pixels' rows of
n bytes at a time, and first widens them to the halfword lanes SXTB16 would make (2n bytes a
row; the widened rows start 4-aligned, so they are planned with 8 bytes of slack, see
``widened_bytes``): once per group of pixels instead of once per output channel. A 1 x 1
convolution at stride 1 reads its rows where they are, four pixels at a time. A k x k
convolution (or 1 x 1 with a stride or padding), `zo_conv2d_im2col_s8`, works on two pixels
and also copies their receptive fields into rows of k_h * k_w * in_c bytes (padding filled
with the input zero point) after the widened rows. A convolution computed in place keeps the output rows it cannot write
back yet in a ring of rows (``in_place_rows``), which the planner puts before its scratch.
"""
from __future__ import annotations

import numpy as np

from ..errors import ModelError
from ..ir import Graph, Op
from .window import window_output

IM2COL_PIXELS = 2  # output pixels per im2col block (the 2 x 2 matrix-product microkernel)
QUAD_PIXELS = 4  # output pixels per 1 x 1 block (the 4 x 1 microkernel, zo_conv2d_1x1_s8)


def conv_shape(graph: Graph, op: Op, ins: list, out: tuple, at: str) -> tuple[int, ...]:
    """A convolution's output: its window over the input, one channel per filter."""
    x, w = ins[0], ins[1]
    if op.type == "CONV_2D":
        if w[3] != x[3]:
            raise ModelError(f"{at}: weights expect {w[3]} input channels, the input has "
                             f"{x[3]}")
        channels = w[0]
    else:
        if w[0] != 1 or w[3] != x[3] * op.options["depth_multiplier"]:
            raise ModelError(f"{at}: depthwise weights {list(w)} do not match input channels "
                             f"{x[3]} x multiplier {op.options['depth_multiplier']}")
        channels = w[3]
    return window_output(op, x, (w[1], w[2]), channels, at)


def fully_connected_shape(graph: Graph, op: Op, ins: list, out: tuple, at: str) -> None:
    """Rows of ``w[1]`` inputs (any input shape that flattens to them) to rows of ``w[0]``."""
    x, w = ins[0], ins[1]
    depth = int(np.prod(x)) // max(w[1], 1)
    if w[1] == 0 or depth * w[1] != int(np.prod(x)):
        raise ModelError(f"{at}: input {list(x)} cannot be flattened to rows of {w[1]}")
    if int(np.prod(out)) != depth * w[0] or out[-1] != w[0]:
        raise ModelError(f"{at}: output {list(out)} does not hold {depth} x {w[0]} values")
    return None


def conv_macs(graph: Graph, op: Op) -> int:
    w = graph.tensor(op.inputs[1]).shape
    per_output = w[1] * w[2] * (w[3] if op.type == "CONV_2D" else 1)
    return int(np.prod(graph.tensor(op.outputs[0]).shape)) * per_output


def fully_connected_macs(graph: Graph, op: Op) -> int:
    return int(np.prod(graph.tensor(op.outputs[0]).shape)) * graph.tensor(op.inputs[1]).shape[1]


def conv_window(graph: Graph, op: Op):
    """The input window of one output pixel, for patch-based inference."""
    kernel = tuple(graph.tensors[op.inputs[1]].shape[1:3])
    top, _, left, _ = op.options["padding"]
    return kernel, tuple(op.options["stride"]), tuple(op.options["dilation"]), (top, left)


def uses_im2col(graph: Graph, op: Op) -> bool:
    """A CONV_2D other than 1 x 1 at stride 1 without padding (those multiply the input
    pixels where they are)."""
    if op.type != "CONV_2D" or len(op.inputs) < 2:  # (planner tests use weightless stand-ins)
        return False
    kh, kw = graph.tensor(op.inputs[1]).shape[1:3]
    return ((kh, kw) != (1, 1) or any(op.options["padding"])
            or tuple(op.options["stride"]) != (1, 1))


def im2col_row_bytes(graph: Graph, op: Op) -> int:
    _, kh, kw, in_c = graph.tensor(op.inputs[1]).shape
    return int(kh * kw * in_c)


def widened_bytes(row_bytes: int, pixels: int) -> int:
    """The matrix product's widened rows (zo_conv.c ``expand_rows``, ``expand_quad``):
    ``pixels`` rows of ``row_bytes`` int8 as int16, four bytes at a time, plus 8 bytes: up to
    3 align their start (``widened_rows``), the rest kept arenas multiples of 8 before the
    memory report rounded the arena item itself (MODEL_ARENA_STORAGE_BYTES); kept so that
    planned arena sizes stay as measured."""
    return pixels * 2 * (row_bytes // 4 * 4) + 8


def conv_scratch_bytes(graph: Graph, op: Op) -> int:
    """A CONV_2D's own scratch: the widened rows, then (im2col) the rows themselves."""
    if len(op.inputs) < 2:  # (planner tests use weightless stand-ins)
        return 0
    n = im2col_row_bytes(graph, op)
    if uses_im2col(graph, op):
        return widened_bytes(n, IM2COL_PIXELS) + IM2COL_PIXELS * n
    return widened_bytes(n, QUAD_PIXELS)


def in_place_rows(graph: Graph, op: Op) -> int | None:
    """Rows of the ring a convolution needs to write its output over its input (None when
    it does not: batch > 1, or an output of another size than the input; a smaller output
    could share the input's bytes too, but the plan's buffers have one size for their whole
    life, so the input's larger bytes would stay reserved as long as the output lives).

    Output rows are computed in order into the ring and copied over the input as soon as the
    bytes they land on hold only input rows that no later output row reads
    (``zo_conv_in_place_s8`` in zo_conv.c follows the same rule); the ring must hold the rows
    waiting meanwhile. A 3x3 stride-1 depthwise convolution needs 2, a 1x1 projection 1.
    """
    if op.type not in ("CONV_2D", "DEPTHWISE_CONV_2D") or len(op.inputs) < 2:
        return None
    x, y = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
    if (x.data is not None or len(x.shape) != 4 or len(y.shape) != 4 or x.shape[0] != 1
            or y.nbytes != x.nbytes):
        return None
    in_h, out_h = x.shape[1], y.shape[1]
    in_row, out_row = x.nbytes // in_h, y.nbytes // out_h
    stride, pad_top = op.options["stride"][0], op.options["padding"][0]
    pending = most = committed = 0
    for oy in range(out_h):
        pending += 1
        most = max(most, pending)
        first_read = max(0, (oy + 1) * stride - pad_top) if oy + 1 < out_h else in_h
        while pending and (committed + 1) * out_row <= first_read * in_row:
            committed += 1
            pending -= 1
    return most


def conv_in_place(graph: Graph, op: Op) -> bool:
    return in_place_rows(graph, op) is not None
