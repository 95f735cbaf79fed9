"""Working memory a kernel needs for the duration of one op, beyond its tensors.

The planner asks each op for it (its row's ``scratch_bytes``, ops/conv.py for CONV_2D's) and
plans it in the arena like a tensor that lives for that op only, so it usually fits in bytes
no tensor uses at that moment. A convolution computed in place (its output over its input)
keeps the output rows it cannot write back yet in a ring of rows: they come first in its
scratch.
"""
from __future__ import annotations

from ..ir import Graph, Op
from ..ops.table import OPS


def ring_bytes(graph: Graph, op: Op) -> int:
    """Bytes of the ring of output rows an in-place convolution needs."""
    y = graph.tensors[op.outputs[0]]
    return OPS[op.type].ring_rows(graph, op) * (y.nbytes // y.shape[1])


def computes_row_by_row(op: Op) -> bool:
    """Whether the op runs in place through a ring of rows (the convolutions)."""
    row = OPS.get(op.type)
    return row is not None and row.ring_rows is not None


def kernel_scratch(graph: Graph, in_place_ops: frozenset[str] = frozenset()) -> dict[int, int]:
    """Op index -> scratch bytes, for the ops that need any: their own (e.g. CONV_2D's
    rows), the ring of the convolutions named in ``in_place_ops`` (before their rows), and
    in a patched plan's planning view the stage's workspace (planner/patches.py)."""
    out = {}
    for index, op in enumerate(graph.ops):
        row = OPS.get(op.type)
        own = row.scratch_bytes(graph, op) if row is not None and row.scratch_bytes else 0
        if own:
            out[index] = own
    for index, op in enumerate(graph.ops):
        if op.name in in_place_ops and computes_row_by_row(op):
            out[index] = out.get(index, 0) + ring_bytes(graph, op)
    out.update({index: op.options["workspace_bytes"] for index, op in enumerate(graph.ops)
                if "workspace_bytes" in op.options})
    return out


def scratch_name(graph: Graph, index: int) -> str:
    """The scratch buffer's name in the plan and the report (never a tensor name)."""
    op = graph.ops[index]
    if "workspace_bytes" in op.options:
        return f"workspace of the {op.name}"
    return f"scratch of {op.name}"
