"""What ``zocodegen inspect`` reports: per-layer shapes, quantization, parameter bytes, MACs,
and for trainable layers the zeroth-order estimator choice (DESIGN.md section 4: WP when the
layer has fewer parameters than output activations, else NP)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from .ir import Graph, Op
from .ops.table import TRAINABLE_OP_TYPES, macs
from .planner import plan_arena
from .training.config import DEFAULT_ESTIMATOR
from .training.estimators import REGISTRY


@dataclass
class LayerInfo:
    index: int
    name: str
    op: str
    inputs: list[list[int]]
    output: list[int]
    output_quant: str
    weight_quant: str | None
    param_bytes: int
    macs: int
    trainable: bool
    d_w: int | None = None  # weights + biases the estimator perturbs in WP mode
    d_a: int | None = None  # output activations it perturbs in NP mode
    mode: str | None = None  # how the default estimator trains it: "WP", "NP" or "CH"


@dataclass
class ModelSummary:
    model: str
    source_format: str
    inputs: list[dict]
    outputs: list[dict]
    layers: list[LayerInfo]
    totals: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def param_bytes(graph: Graph, op: Op) -> int:
    """Bytes of the op's constant operands (weights, biases) as stored on the device."""
    return sum(graph.tensor(n).nbytes for n in op.inputs[1:] if n and graph.tensor(n).is_constant)


def estimator_dims(graph: Graph, op: Op) -> tuple[int, int]:
    d_w = sum(graph.tensor(n).size for n in op.inputs[1:3] if n)
    d_a = graph.tensor(op.outputs[0]).size
    return d_w, d_a


def _io(graph: Graph, names: list[str]) -> list[dict]:
    result = []
    for n in names:
        t = graph.tensor(n)
        result.append({"name": n, "shape": list(t.shape), "dtype": str(t.dtype),
                       "quant": t.quant.describe() if t.quant else None})
    return result


def summarize(graph: Graph) -> ModelSummary:
    layers = []
    for i, op in enumerate(graph.ops):
        out = graph.tensor(op.outputs[0])
        w = graph.tensor(op.inputs[1]) if op.type in TRAINABLE_OP_TYPES else None
        info = LayerInfo(
            index=i, name=op.name, op=op.type,
            inputs=[list(graph.tensor(n).shape) for n in op.inputs if n],
            output=list(out.shape),
            output_quant=out.quant.describe() if out.quant else str(out.dtype),
            weight_quant=w.quant.describe() if w is not None else None,
            param_bytes=param_bytes(graph, op), macs=macs(graph, op),
            trainable=op.type in TRAINABLE_OP_TYPES)
        if info.trainable:
            info.d_w, info.d_a = estimator_dims(graph, op)
            info.mode = REGISTRY[DEFAULT_ESTIMATOR].layer_mode(info.d_w, info.d_a)
        layers.append(info)
    arena = plan_arena(graph)
    totals = {
        "layers": len(layers),
        "trainable_layers": sum(l.trainable for l in layers),
        "param_bytes": sum(l.param_bytes for l in layers),
        "trainable_param_bytes": sum(l.param_bytes for l in layers if l.trainable),
        "macs": sum(l.macs for l in layers),
        "arena_bytes": arena.arena_bytes,
        "arena_lower_bound_bytes": arena.lower_bound,
        "largest_np_gradient_bytes": max(
            [l.d_a * 4 for l in layers if l.mode == "NP"], default=0),
    }
    return ModelSummary(model=graph.name, source_format=graph.source_format,
                        inputs=_io(graph, graph.inputs), outputs=_io(graph, graph.outputs),
                        layers=layers, totals=totals)


def format_summary(summary: ModelSummary, budget: dict | None = None) -> str:
    rows = [("#", "layer", "op", "output", "quant", "params B", "MACs", "d_w", "d_a", "ZO")]
    for l in summary.layers:
        rows.append((str(l.index), l.name, l.op, "x".join(map(str, l.output)), l.output_quant,
                     str(l.param_bytes), f"{l.macs:,}", str(l.d_w or ""), str(l.d_a or ""),
                     l.mode or ""))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = [f"model {summary.model} ({summary.source_format})"]
    for kind, items in (("input", summary.inputs), ("output", summary.outputs)):
        for io in items:
            lines.append(f"  {kind} {io['name']}: {io['dtype']} {io['shape']} {io['quant'] or ''}")
    lines.append("")
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    t = summary.totals
    lines += ["",
              f"layers {t['layers']} ({t['trainable_layers']} trainable)",
              f"parameters {t['param_bytes']:,} B ({t['trainable_param_bytes']:,} B trainable)",
              f"MACs {t['macs']:,}",
              f"activation arena {t['arena_bytes']:,} B (planned; lower bound "
              f"{t['arena_lower_bound_bytes']:,} B)",
              f"largest NP gradient buffer {t['largest_np_gradient_bytes']:,} B (int32)"]
    if budget is not None:
        lines.append(f"target {budget['target']}: SRAM budget {budget['sram_budget_bytes']:,} B,"
                     f" flash {budget['flash_bytes']:,} B; inference needs about "
                     f"{t['arena_bytes']:,} B SRAM for activations and "
                     f"{t['param_bytes']:,} B flash for parameters")
    return "\n".join(lines)


def duration(seconds: float) -> str:
    """Seconds as a person says them: 85 ms, 42.0 s, 7.5 min, 3.20 h."""
    if seconds < 1:
        return f"{1000 * seconds:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.2f} h"
