"""Small helpers shared by the reference kernels."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Op, Quantization
from ..numerics import activation_range


def out_quant(graph: Graph, op: Op) -> Quantization:
    return graph.tensor(op.outputs[0]).quant


def in_quant(graph: Graph, op: Op, k: int = 0) -> Quantization:
    return graph.tensor(op.inputs[k]).quant


def output_range(graph: Graph, op: Op) -> tuple[int, int]:
    """Clamp bounds of the op's fused activation, in the output's int8 domain."""
    q = out_quant(graph, op)
    return activation_range(op.options.get("activation", "NONE"), q.scalar_scale,
                            q.scalar_zero_point)


def clamp_to_int8(acc: np.ndarray, lo: int = -128, hi: int = 127) -> np.ndarray:
    return np.clip(acc, lo, hi).astype(np.int8)


def c_div_round(acc: np.ndarray, count: np.ndarray | int) -> np.ndarray:
    """``acc > 0 ? (acc + n/2) / n : (acc - n/2) / n`` with C truncating division: the
    rounding TFLite uses for integer averages."""
    acc = np.asarray(acc, dtype=np.int64)
    count = np.asarray(count, dtype=np.int64)
    num = np.where(acc > 0, acc + count // 2, acc - count // 2)
    q = np.abs(num) // count
    return np.where(num < 0, -q, q)
