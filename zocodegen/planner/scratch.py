"""Working memory a kernel needs for the duration of one op, beyond its tensors.

A convolution computed in place (its output over its input, ``in_place_rows``) keeps the
output rows it cannot write back yet in a ring of rows: they come first in its scratch.

Only CONV_2D needs any. Its matrix product (`zo_conv.c`) multiplies two output pixels' rows
of n bytes at a time, and first widens them to the halfword lanes SXTB16 would make (4n
bytes; the widened rows start 4-aligned, so they are planned with 8 bytes of slack, see
``widened_bytes``): once per pair of pixels instead of once per pair of output channels. A
k x k convolution (or 1 x 1 with a stride or padding), `zo_conv2d_im2col_s8`, also copies
the receptive fields of the two pixels into rows of k_h * k_w * in_c bytes (padding filled
with the input zero point) after the widened rows; a 1 x 1 convolution at stride 1 reads its
rows where they are. The scratch is planned in the arena like a tensor that lives for that
op only, so it usually fits in bytes no tensor uses at that moment.
"""
from __future__ import annotations

from ..ir import Graph, Op

IM2COL_PIXELS = 2  # output pixels per im2col block (the 2 x 2 matrix-product microkernel)


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


def widened_bytes(row_bytes: int) -> int:
    """The matrix product's widened rows (zo_conv.c ``expand_rows``): IM2COL_PIXELS rows of
    ``row_bytes`` int8 as int16, four bytes at a time, plus 8 bytes: up to 3 align their
    start (``widened_rows``), the rest kept arenas multiples of 8 before the memory report
    rounded the arena item itself (MODEL_ARENA_STORAGE_BYTES); kept so that planned arena
    sizes stay as measured."""
    return IM2COL_PIXELS * 2 * (row_bytes // 4 * 4) + 8


def conv_scratch_bytes(graph: Graph, op: Op) -> int:
    """A CONV_2D's own scratch: the widened rows, then (im2col) the rows themselves."""
    n = im2col_row_bytes(graph, op)
    return widened_bytes(n) + (IM2COL_PIXELS * n if uses_im2col(graph, op) else 0)


CONV_OP_TYPES = ("CONV_2D", "DEPTHWISE_CONV_2D")


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
    if op.type not in CONV_OP_TYPES or len(op.inputs) < 2:
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


def in_place_ring_bytes(graph: Graph, op: Op) -> int:
    y = graph.tensors[op.outputs[0]]
    return in_place_rows(graph, op) * (y.nbytes // y.shape[1])


def kernel_scratch(graph: Graph, in_place_ops: frozenset[str] = frozenset()) -> dict[int, int]:
    """Op index -> scratch bytes, for the ops that need any: CONV_2D's rows, the ring of the
    convolutions named in ``in_place_ops`` (before their rows), and in a patched
    plan's planning view the stage's workspace (planner/patches.py)."""
    out = {index: conv_scratch_bytes(graph, op) for index, op in enumerate(graph.ops)
           if op.type == "CONV_2D" and len(op.inputs) >= 2}
    for index, op in enumerate(graph.ops):
        if op.name in in_place_ops and op.type in CONV_OP_TYPES:
            out[index] = out.get(index, 0) + in_place_ring_bytes(graph, op)
    out.update({index: op.options["workspace_bytes"] for index, op in enumerate(graph.ops)
                if "workspace_bytes" in op.options})
    return out


def scratch_name(graph: Graph, index: int) -> str:
    """The scratch buffer's name in the plan and the report (never a tensor name)."""
    op = graph.ops[index]
    if "workspace_bytes" in op.options:
        return f"workspace of the {op.name}"
    return f"scratch of {op.name}"
