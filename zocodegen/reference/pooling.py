"""AVERAGE_POOL_2D, MAX_POOL_2D and MEAN.

Pools work on raw int8 values (input and output share quantization, as TFLite requires):
the average divides the window sum by the number of *in-bounds* taps with TFLite's
round-half-away-from-zero integer division; max takes the in-bounds maximum. Both clamp to
the fused activation range.

MEAN follows TFLite's reference ``QuantizedMeanOrSum`` for int8 (used even when input and
output share quantization; verified against ai_edge_litert): ``M, e = QM(s_in / s_out)``,
the 1/count factor folded into the multiplier (``M' = (M << k) / count``, ``e' = e - k`` with ``k = floor(log2 count)``
  capped at 32 and at ``31 + e``), ``y = MBQM(sum - zp_in * count, M', e') + zp_out``.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Op
from ..numerics import multiply_by_quantized_multiplier, quantize_multiplier
from .common import c_div_round, clamp_to_int8, in_quant, out_quant, output_range


def _pool_taps(x: np.ndarray, op: Op, out_shape: tuple[int, ...]):
    """Yield (values, valid) per filter tap over all output positions."""
    top, bottom, left, right = op.options["padding"]
    sh, sw = op.options["stride"]
    fh, fw = op.options["filter"]
    _, out_h, out_w, _ = out_shape
    valid = np.pad(np.ones(x.shape[1:3], dtype=bool), ((top, bottom), (left, right)))
    xp = np.pad(x.astype(np.int64), ((0, 0), (top, bottom), (left, right), (0, 0)))
    # windows may reach past the explicit padding (TFLite clips them); pad generously
    extra_h = max(0, (out_h - 1) * sh + fh - xp.shape[1])
    extra_w = max(0, (out_w - 1) * sw + fw - xp.shape[2])
    xp = np.pad(xp, ((0, 0), (0, extra_h), (0, extra_w), (0, 0)))
    valid = np.pad(valid, ((0, extra_h), (0, extra_w)))
    for i in range(fh):
        for j in range(fw):
            rows = slice(i, i + (out_h - 1) * sh + 1, sh)
            cols = slice(j, j + (out_w - 1) * sw + 1, sw)
            yield xp[:, rows, cols, :], valid[rows, cols][None, :, :, None]


def batched_shape(graph: Graph, name: str, batch: int) -> tuple[int, ...]:
    """The graph's shape of ``name`` with the batch axis the input actually has (the training
    simulator runs many perturbed copies as one batch)."""
    return (batch,) + tuple(graph.tensor(name).shape[1:])


def average_pool_2d(op: Op, graph: Graph, args: list) -> list[np.ndarray]:
    out_shape = batched_shape(graph, op.outputs[0], args[0].shape[0])
    total = np.zeros(out_shape, dtype=np.int64)
    count = np.zeros(out_shape, dtype=np.int64)
    for values, valid in _pool_taps(args[0], op, out_shape):
        total += np.where(valid, values, 0)
        count += valid
    lo, hi = output_range(graph, op)
    return [clamp_to_int8(c_div_round(total, np.maximum(count, 1)), lo, hi)]


def max_pool_2d(op: Op, graph: Graph, args: list) -> list[np.ndarray]:
    out_shape = batched_shape(graph, op.outputs[0], args[0].shape[0])
    best = np.full(out_shape, np.iinfo(np.int64).min, dtype=np.int64)
    for values, valid in _pool_taps(args[0], op, out_shape):
        best = np.where(valid, np.maximum(best, values), best)
    lo, hi = output_range(graph, op)
    return [clamp_to_int8(best, lo, hi)]


def mean_multiplier(input_scale: float, output_scale: float, count: int) -> tuple[int, int]:
    """The (multiplier, shift) of ``QuantizedMeanOrSum`` with 1/count folded in."""
    mult, shift = quantize_multiplier(np.float64(input_scale) / np.float64(output_scale))
    k = min(count.bit_length() - 1, 32, 31 + shift)
    return int((mult << k) // count), shift - k


def mean(op: Op, graph: Graph, args: list) -> list[np.ndarray]:
    x = args[0].astype(np.int64)
    axes = tuple(op.options["axes"])
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    total = x.sum(axis=axes, keepdims=op.options["keep_dims"])
    qi, qo = in_quant(graph, op), out_quant(graph, op)
    mult, shift = mean_multiplier(qi.scalar_scale, qo.scalar_scale, count)
    scaled = multiply_by_quantized_multiplier(total - qi.scalar_zero_point * count, mult, shift)
    return [clamp_to_int8(scaled + qo.scalar_zero_point)]
