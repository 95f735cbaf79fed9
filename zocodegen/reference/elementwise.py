"""ADD and MUL of two int8 tensors (numpy broadcasting = TFLite's Broadcast*4DSlow).

ADD, TFLite ``reference_integer_ops::Add``: both inputs are brought to a common scale
``2 * max(s1, s2)`` with 20 bits of headroom, summed, and requantized:

    a_k = MBQM((x_k - zp_k) << 20, M_k, e_k)    M_k, e_k = QM(s_k / (2 max(s1, s2)))
    y   = clamp(MBQM(a_1 + a_2, M_o, e_o) + zp_o)    M_o, e_o = QM(2 max(s1, s2) / (2**20 s_o))

MUL, TFLite ``reference_integer_ops::Mul``:
    y = clamp(MBQM((x1 - zp1) * (x2 - zp2), QM(s1 s2 / s_o)) + zp_o)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph, Op
from ..numerics import multiply_by_quantized_multiplier, quantize_multiplier
from .common import clamp_to_int8, in_quant, out_quant, output_range

ADD_LEFT_SHIFT = 20


@dataclass(frozen=True)
class AddParams:
    input_offsets: tuple[int, int]
    input_multipliers: tuple[tuple[int, int], tuple[int, int]]  # (multiplier, shift) each
    output_multiplier: tuple[int, int]
    output_offset: int
    act_min: int
    act_max: int


def add_params(graph: Graph, op: Op) -> AddParams:
    s1 = np.float64(in_quant(graph, op, 0).scalar_scale)
    s2 = np.float64(in_quant(graph, op, 1).scalar_scale)
    so = np.float64(out_quant(graph, op).scalar_scale)
    twice_max = 2.0 * max(s1, s2)
    lo, hi = output_range(graph, op)
    return AddParams(
        input_offsets=(-in_quant(graph, op, 0).scalar_zero_point,
                       -in_quant(graph, op, 1).scalar_zero_point),
        input_multipliers=(quantize_multiplier(s1 / twice_max),
                           quantize_multiplier(s2 / twice_max)),
        output_multiplier=quantize_multiplier(twice_max / ((1 << ADD_LEFT_SHIFT) * so)),
        output_offset=out_quant(graph, op).scalar_zero_point, act_min=lo, act_max=hi)


def add(op: Op, graph: Graph, args: list) -> list[np.ndarray]:
    p = add_params(graph, op)
    scaled = [multiply_by_quantized_multiplier(
                  (x.astype(np.int64) + off) << ADD_LEFT_SHIFT, m, e)
              for x, off, (m, e) in zip(args[:2], p.input_offsets, p.input_multipliers)]
    raw = multiply_by_quantized_multiplier(scaled[0] + scaled[1], *p.output_multiplier)
    return [clamp_to_int8(raw + p.output_offset, p.act_min, p.act_max)]


def mul_multiplier(graph: Graph, op: Op) -> tuple[int, int]:
    """``QM(s1 s2 / s_o)``, the one requantization of MUL."""
    q1, q2, qo = in_quant(graph, op, 0), in_quant(graph, op, 1), out_quant(graph, op)
    return quantize_multiplier(np.float64(q1.scalar_scale) * np.float64(q2.scalar_scale)
                               / np.float64(qo.scalar_scale))


def mul(op: Op, graph: Graph, args: list) -> list[np.ndarray]:
    q1, q2, qo = in_quant(graph, op, 0), in_quant(graph, op, 1), out_quant(graph, op)
    m, e = mul_multiplier(graph, op)
    product = ((args[0].astype(np.int64) - q1.scalar_zero_point)
               * (args[1].astype(np.int64) - q2.scalar_zero_point))
    lo, hi = output_range(graph, op)
    return [clamp_to_int8(multiply_by_quantized_multiplier(product, m, e)
                          + qo.scalar_zero_point, lo, hi)]
