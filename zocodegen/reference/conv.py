"""CONV_2D and DEPTHWISE_CONV_2D, TFLite ``reference_integer_ops::ConvPerChannel`` /
``DepthwiseConvPerChannel``:

    acc[c] = bias[c] + sum (x - x_zp) * w[c]          (int32; padding contributes 0)
    y[c]   = clamp(MBQM(acc[c], M[c], shift[c]) + y_zp, act_min, act_max)

with ``M[c], shift[c] = QuantizeMultiplier(x_scale * w_scale[c] / y_scale)`` in double.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph, Op
from ..numerics import (multiply_by_quantized_multiplier,
                        multiply_by_quantized_multiplier_single_round, per_channel_multipliers)
from .common import clamp_to_int8, in_quant, out_quant, output_range

@dataclass(frozen=True)
class RequantParams:
    """Per-output-channel requantization of an int32 accumulator to int8."""

    multiplier: np.ndarray  # int64 (C,)
    shift: np.ndarray  # int64 (C,)
    input_offset: int  # -input zero point
    output_offset: int  # output zero point
    act_min: int
    act_max: int

def requant_params(graph: Graph, op: Op, filter_scales: np.ndarray | None = None
                   ) -> RequantParams:
    """Derive the multipliers exactly as TFLite's Prepare does (double precision);
    ``filter_scales`` (float32, one per output channel) in place of the weights' own: the
    scales a training run has moved (training/scales.py)."""
    x_q, w_q, y_q = in_quant(graph, op, 0), in_quant(graph, op, 1), out_quant(graph, op)
    weights = graph.tensor(op.inputs[1])
    channels = weights.shape[3] if op.type == "DEPTHWISE_CONV_2D" else weights.shape[0]
    scales = w_q.scale if filter_scales is None else filter_scales
    w_scales = np.broadcast_to(np.asarray(scales, dtype=np.float32).astype(np.float64),
                               (channels,))
    real = np.float64(x_q.scalar_scale) * w_scales / np.float64(y_q.scalar_scale)
    mult, shift = per_channel_multipliers(real)
    lo, hi = output_range(graph, op)
    return RequantParams(mult, shift, -x_q.scalar_zero_point, y_q.scalar_zero_point, lo, hi)

def pre_activation(acc: np.ndarray, p: RequantParams, single_rounding: bool = False
                   ) -> np.ndarray:
    """z = MBQM(acc) + y_zp (int64): the requantized value before the fused activation's
    clamp. Node perturbation perturbs this z (paper Eq. 9, h(z + xi))."""
    multiply = (multiply_by_quantized_multiplier_single_round if single_rounding
                else multiply_by_quantized_multiplier)
    return multiply(acc, p.multiplier, p.shift) + p.output_offset


def tap_windows(x: np.ndarray, op: Op, kh: int, kw: int, out_h: int, out_w: int):
    """Yield ``(i, j, patch)`` for each filter tap: ``patch[n, oh, ow, c]`` is the (offset)
    input under tap (i, j) for every output position; padded positions hold 0."""
    top, bottom, left, right = op.options["padding"]
    sh, sw = op.options["stride"]
    dh, dw = op.options["dilation"]
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    for i in range(kh):
        for j in range(kw):
            yield i, j, xp[:, i * dh: i * dh + (out_h - 1) * sh + 1: sh,
                           j * dw: j * dw + (out_w - 1) * sw + 1: sw, :]

def conv_accumulators(op: Op, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
                      input_offset: int, out_shape: tuple[int, ...]) -> np.ndarray:
    """int64 accumulators of a CONV_2D or DEPTHWISE_CONV_2D (before requantization).

    ``w`` (and ``bias``) may carry a leading variant axis, one weight set per batch row: the
    training simulator evaluates all perturbed copies of a layer in one call that way.
    """
    _, out_h, out_w, channels = out_shape
    xs = x.astype(np.float64) + input_offset  # exact: |values| < 2**53 throughout
    acc = np.zeros((x.shape[0], out_h, out_w, channels), dtype=np.float64)
    variants = w.ndim == 5
    wf = w.astype(np.float64) if variants else w.astype(np.float64)[None]
    kh, kw = wf.shape[2], wf.shape[3]
    multiplier = op.options.get("depth_multiplier", 1)
    for i, j, patch in tap_windows(xs, op, kh, kw, out_h, out_w):
        if op.type == "DEPTHWISE_CONV_2D":
            acc += np.repeat(patch, multiplier, axis=3) * wf[:, 0, i, j, :][:, None, None, :]
        elif variants:
            acc += np.einsum("bhwc,boc->bhwo", patch, wf[:, :, i, j, :])
        else:
            acc += patch @ wf[0, :, i, j, :].T
    return with_bias(acc.astype(np.int64), bias)


def with_bias(acc: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """Add the bias along the channel axis; a 2-D bias holds one row per batch row."""
    if bias is None:
        return acc
    b = bias.astype(np.int64)
    if b.ndim == 2:
        b = b.reshape(b.shape[0], *([1] * (acc.ndim - 2)), b.shape[1])
    return acc + b


def conv_2d_pre_activation(op: Op, graph: Graph, args: list) -> np.ndarray:
    """CONV_2D / DEPTHWISE_CONV_2D up to z (before the activation clamp), int64."""
    x, w = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    p = requant_params(graph, op)
    out_shape = graph.tensor(op.outputs[0]).shape
    return pre_activation(conv_accumulators(op, x, w, bias, p.input_offset, out_shape), p)


def conv_2d(op: Op, graph: Graph, args: list) -> list[np.ndarray]:
    lo, hi = output_range(graph, op)
    return [clamp_to_int8(conv_2d_pre_activation(op, graph, args), lo, hi)]
