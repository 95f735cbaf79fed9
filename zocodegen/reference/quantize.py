"""QUANTIZE and DEQUANTIZE: the float I/O boundary, and int8 -> int8 requantization.

float -> int8 (TFLite ``AffineQuantize``): ``clamp(round(x / scale) + zp)`` with the division
in float32 and ``round`` half away from zero.
int8 -> int8 (TFLite ``Requantize``): ``clamp(MBQM(x - zp_in, QM(s_in / s_out)) + zp_out)``.
int8 -> float (TFLite ``Dequantize``): ``float32(double(scale) * (x - zp))``.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Op, Quantization
from ..numerics import multiply_by_quantized_multiplier, quantize_multiplier
from .common import clamp_to_int8, in_quant, out_quant


def quantize_float(x: np.ndarray, q: Quantization) -> np.ndarray:
    with np.errstate(over="ignore"):  # a huge x / scale is inf: saturated below, no warning
        scaled = (np.asarray(x, dtype=np.float32) / np.float32(q.scalar_scale)
                  ).astype(np.float64)
    scaled = np.clip(np.nan_to_num(scaled, nan=0.0), -1e9, 1e9)  # saturates like the clamp
    rounded = np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)
    return clamp_to_int8(rounded.astype(np.int64) + q.scalar_zero_point)


def requantize_int8(x: np.ndarray, qi: Quantization, qo: Quantization) -> np.ndarray:
    m, e = quantize_multiplier(np.float64(qi.scalar_scale) / np.float64(qo.scalar_scale))
    scaled = multiply_by_quantized_multiplier(x.astype(np.int64) - qi.scalar_zero_point, m, e)
    return clamp_to_int8(scaled + qo.scalar_zero_point)


def dequantize_int8(x: np.ndarray, q: Quantization) -> np.ndarray:
    return (np.float64(q.scalar_scale) * (x.astype(np.float64) - q.scalar_zero_point)
            ).astype(np.float32)


def quantize(op: Op, graph: Graph, args: list) -> list[np.ndarray]:
    x = args[0]
    if x.dtype == np.float32:
        return [quantize_float(x, out_quant(graph, op))]
    return [requantize_int8(x, in_quant(graph, op), out_quant(graph, op))]


def dequantize(op: Op, graph: Graph, args: list) -> list[np.ndarray]:
    return [dequantize_int8(args[0], in_quant(graph, op))]
