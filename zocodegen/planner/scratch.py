"""Working memory a kernel needs for the duration of one op, beyond its tensors.

Only CONV_2D needs any (k x k, or 1 x 1 with a stride): `zo_conv2d_im2col_s8` (templates/kernels/zo_conv.c) copies
the receptive fields of two output pixels into rows of k_h * k_w * in_c bytes (padding filled
with the input zero point) and multiplies them with the filters as a matrix product. The rows
are planned in the arena like a tensor that lives for that op only, so they usually fit in
bytes no tensor uses at that moment.
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


def kernel_scratch(graph: Graph) -> dict[int, int]:
    """Op index -> scratch bytes, for the ops that need any (in a patched plan's planning
    view, the stage's workspace is its scratch: planner/patches.py)."""
    out = {index: IM2COL_PIXELS * im2col_row_bytes(graph, op)
           for index, op in enumerate(graph.ops) if uses_im2col(graph, op)}
    out.update({index: op.options["workspace_bytes"] for index, op in enumerate(graph.ops)
                if "workspace_bytes" in op.options})
    return out


def scratch_name(graph: Graph, index: int) -> str:
    """The scratch buffer's name in the plan and the report (never a tensor name)."""
    op = graph.ops[index]
    if "workspace_bytes" in op.options:
        return f"workspace of the {op.name}"
    return f"im2col rows of {op.name}"
