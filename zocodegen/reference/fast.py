"""Fast twins of the reference kernels, equal to them bit for bit, for the training simulator.

The reference kernels are the specification (int64 arithmetic, one readable line per TFLite
formula). The simulator runs the same network hundreds of times per training step, so it
runs these twins instead; tests/test_fast_paths.py proves them equal to the references on
random shapes, values and multipliers, bounds included. Why each one is exact:

* an int8 tensor of shape (R, ..., C) is held channel-major as float32 ``q - zero_point``,
  shape (C, R, ...) ("engine form"): a 1x1 convolution is then one matrix product W @ X, a
  depthwise one matrix products per channel (:func:`fast_geometry.depthwise_form`), and
  the zero padding of the reference's ``x + input_offset`` is plain zeros;
* accumulators are integer sums of products |x - zp| * |w| <= 255 * 128. Summed by BLAS in
  float32 they are exact whatever the order, as long as the channel's sum of |x - zp| * |w|
  stays below 2^24 (checked per call from the weights); below 2^52 float64 is used;
* requantization (SaturatingRoundingDoublingHighMul, then RoundingDivideByPOT) is one floor
  of an exact float64 expression (:func:`float_requant`), valid while |accumulator| times
  the multiplier stays below 2^52 (checked from the weights, else from the accumulators
  themselves; past that the reference's int64 requantization runs on them);
* ADD and MUL are a table of the reference kernel's own outputs for all 256 x 256 pairs;
* any other op runs the reference kernel on int8 copies.
An op runs on pieces of its rows (CHUNK values), requantized a block at a time (BLOCK), which
keeps the temporaries small.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from ..ir import Graph, Op
from ..ops.table import OPS, TRAINABLE_OP_TYPES
from . import native
from .conv import RequantParams, pre_activation, requant_params
from .elementwise import add, mul
from .fast_geometry import depthwise_form, tap_range, tap_windows
from .pooling import mean_multiplier

#: False runs every op through its reference kernel: only to prove the twins equal (tests).
ENABLED = True
F32_EXACT = float(1 << 24)  # integers of smaller magnitude are exact in float32
F64_EXACT = float(1 << 52)  # 2^53 for float64, halved: the bounds are computed in float64
INT32_LIMIT = float(1 << 31)
CHUNK = 1 << 18  # output values an op computes at once
BLOCK = 1 << 14  # values requantized at once


def centered_range(zero_point: int) -> int:
    """The largest |q - zero_point| of an int8 q."""
    return max(127 - zero_point, 128 + zero_point)


@dataclass(frozen=True)
class FloatRequant:
    """y = clamp(floor(acc * scale + offset - [acc < threshold] step)) per channel (axis 0),
    centered; ``acc`` is the accumulator without bias (an exact integer in float32 or
    float64), the bias is in ``offset``. Built by :func:`float_requant`."""

    scale: np.ndarray  # float64 (C, 1)
    offset: np.ndarray  # float64 (C, 1)
    threshold: np.ndarray | None  # float64 (C, 1); None where no clamp lets the step through
    step: np.ndarray | None  # float64 (C, 1)
    lo: float  # clamp bounds minus the output zero point
    hi: float

    def __call__(self, acc: np.ndarray, out: np.ndarray) -> None:
        """Requantize ``acc`` (C, n) into ``out`` (C, n): in one compiled pass
        (reference/native.py), else with numpy a few channels at a time (the float64
        temporaries stay in cache)."""
        if native.requantize_rows(acc, self.scale, self.offset, self.threshold, self.step,
                                  self.lo, self.hi, out):
            return
        step = max(1, BLOCK // acc.shape[1])
        scratch = np.empty((min(step, len(acc)), acc.shape[1]))
        for start in range(0, len(acc), step):
            c = slice(start, start + step)
            a = acc[c]
            t = scratch[:len(a)]
            np.multiply(a, self.scale[c], out=t)
            if self.threshold is None:
                t += self.offset[c]
            else:  # one pass adds the offset, lowered by the step below the threshold
                t += np.where(a < self.threshold[c], self.offset[c] - self.step[c],
                              self.offset[c])
            np.floor(t, out=t)
            np.clip(t, self.lo, self.hi, out=out[c])


def float_requant(p: RequantParams, bias: np.ndarray | None, bound: np.ndarray,
                  single_rounding: bool = False, clamp: bool = True) -> FloatRequant | None:
    """The requantization of ``p`` as a :class:`FloatRequant`, or None when ``bound`` (the
    largest |accumulator + bias| per channel) is too large to prove it exact. Without
    ``clamp``, the pre-activation z (no clamp at all).

    Double rounding, with M the multiplier, l = max(shift, 0), r = max(-shift, 0) and
    p = acc M 2^l (no int32 wrap while |acc| 2^l < 2^31): SRDHM is trunc((p + nudge) / 2^31)
    with nudge 2^30 for p >= 0 and 1 - 2^30 otherwise, which is floor((p + 2^30) / 2^31)
    for every p; RoundingDivideByPOT(h, r) is floor((h + 2^(r-1) - [h < 0]) / 2^r) for r > 0;
    floor(floor(a / b) / c) = floor(a / (b c)) and h < 0 exactly when p < -2^30, so

        MBQM(acc) = floor((p + 2^30 + [r > 0] (2^(r-1) - [p < -2^30]) 2^31) / 2^(31 + r)).

    Every term is a multiple of 2^-(31+r) with a numerator below 2^53, so float64 computes
    acc * scale + offset (scale = M 2^l / 2^(31+r)) exactly. The correction of p < -2^30
    (acc below -2^30 / (M 2^l)) only lowers values that are already <= 0: a clamp whose lower
    bound is the zero point or above (RELU, RELU6) hides it, so it is skipped there.
    Single rounding (FULLY_CONNECTED) is floor((acc M + 2^(s-1)) / 2^s), s = 31 - shift."""
    m = p.multiplier.astype(np.float64)
    b = np.zeros(len(m)) if bias is None else bias.astype(np.float64)
    if clamp:
        lo, hi = float(p.act_min - p.output_offset), float(p.act_max - p.output_offset)
    else:
        lo, hi = -np.inf, np.inf

    def column(v: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(v, dtype=np.float64).reshape(-1, 1)

    if single_rounding:
        total = 31 - p.shift
        if (total < 1).any():
            return None
        scale = np.ldexp(m, -total)
        if ((bound * m + np.ldexp(1.0, total - 1) >= F64_EXACT).any()
                or (bound * scale + 1 >= INT32_LIMIT).any()):
            return None
        return FloatRequant(column(scale), column(0.5 + b * scale), None, None, lo, hi)
    left, right = np.maximum(p.shift, 0), np.maximum(-p.shift, 0)
    ml = np.ldexp(m, left)
    if ((np.ldexp(bound, left) >= INT32_LIMIT).any() or (right > 31).any()
            or (bound * ml + np.ldexp(1.0, right + 30) + 2.0 ** 32 >= F64_EXACT).any()):
        return None
    denominator = -(31 + right)
    scale = np.ldexp(ml, denominator)
    half = np.where(right > 0, np.ldexp(1.0, right + 30), 0.0)  # 2^(r-1) 2^31
    offset = np.ldexp(2.0 ** 30 + half, denominator) + b * scale
    if lo >= 0 or not (right > 0).any():
        return FloatRequant(column(scale), column(offset), None, None, lo, hi)
    ml_int = p.multiplier.astype(np.int64) << left
    theta = np.where(ml_int > 0, -((1 << 30) // np.maximum(ml_int, 1)), np.iinfo(np.int64).min)
    step = np.where(right > 0, np.ldexp(1.0, -right), 0.0)
    return FloatRequant(column(scale), column(offset), column(theta.astype(np.float64) - b),
                        column(step), lo, hi)


def _row_chunks(rows: int, per_row: int) -> Iterator[slice]:
    """Slices of ``rows`` with about CHUNK values of ``per_row`` each."""
    step = max(1, CHUNK // max(1, per_row))
    for start in range(0, rows, step):
        yield slice(start, min(rows, start + step))


class Linear:
    """CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED in engine form. Weights may carry a
    leading variant axis: ``shared`` - every variant sees the whole input (the output holds
    the variants one after the other); otherwise variant v owns the v-th equal share of the
    input rows (the reference's one weight set per batch row, grouped)."""

    def __init__(self, graph: Graph, op: Op):
        self.graph, self.op = graph, op
        self.params = requant_params(graph, op)
        self.x_max = centered_range(-self.params.input_offset)
        self.w_shape = tuple(graph.tensor(op.inputs[1]).shape)
        self.in_shape = tuple(graph.tensor(op.inputs[0]).shape)
        self.out_shape = tuple(graph.tensor(op.outputs[0]).shape)
        self.form, self.index = "taps", None  # depthwise: see _depthwise_form
        if op.type == "DEPTHWISE_CONV_2D":
            self.form, self.index = depthwise_form(op, self.in_shape, self.out_shape,
                                                    self.w_shape)
        self._last: tuple | None = None  # the last weights, (w, float32, sums, prepared)
        self._scaled: tuple | None = None  # the last filter scales given, and their params
        self._geometry: native.DepthwiseGeometry | bool | None = None  # False: numpy's form

    @property
    def supported(self) -> bool:
        """FC reads (R, C_in) inputs only (a flattened NHWC input is not channel-major)."""
        return self.op.type != "FULLY_CONNECTED" or len(self.in_shape) == 2

    def _weights(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
        """float32 weights (exact), the largest sum of |w| per output channel over the
        variants, and a cache for their prepared forms; the last weights' are kept (the same
        parameters serve many calls)."""
        if self._last is not None and self._last[0] is w:
            return self._last[1:]
        wf = w.astype(np.float32)
        per = np.abs(wf).reshape((-1,) + self.w_shape)
        if self.op.type == "DEPTHWISE_CONV_2D":
            sums = per.sum(axis=(1, 2, 3))
        else:
            sums = per.reshape(per.shape[0], self.w_shape[0], -1).sum(axis=2)
        self._last = (w, wf, sums.max(axis=0), {})
        return self._last[1:]

    def requant(self, filter_scales: np.ndarray | None) -> RequantParams:
        """The requantization with these filter scales (None: the model's); the last
        scales' are kept, as a run's parameters serve many calls."""
        if filter_scales is None:
            return self.params
        if self._scaled is None or self._scaled[0] is not filter_scales:
            self._scaled = (filter_scales, requant_params(self.graph, self.op, filter_scales))
        return self._scaled[1]

    def __call__(self, parts: list[tuple[np.ndarray, np.ndarray, bool]],
                 bias: np.ndarray | None, tail: np.ndarray | None = None,
                 clamp: bool = True, filter_scales: np.ndarray | None = None
                 ) -> np.ndarray | None:
        """The engine-form output of each part (input rows, weights, shared) one after the
        other, then ``tail`` (engine-form rows given as they are); without ``clamp``, the
        centered pre-activation z (float64). ``filter_scales``: the weights' per-channel
        scales in place of the model's. None when the accumulators may be inexact (the
        caller runs the reference)."""
        if bias is not None and bias.ndim != 1:
            return None
        params = self.requant(filter_scales)
        weights = [self._weights(w) for _, w, _ in parts]
        sums = np.max([s for _, s, _ in weights], axis=0)
        partial = self.x_max * float(sums.max())
        if partial >= F64_EXACT:
            return None
        bound = self.x_max * sums.astype(np.float64) + (0 if bias is None else np.abs(bias))
        single = self.op.type == "FULLY_CONNECTED"
        requant = float_requant(params, bias, bound, single, clamp)
        counts = [x.shape[1] * (len(wf) if shared and wf.ndim > len(self.w_shape) else 1)
                  for (x, _, shared), (wf, _, _) in zip(parts, weights)]
        total = sum(counts) + (0 if tail is None else tail.shape[1])
        c_out = self.out_shape[-1]
        positions = int(np.prod(self.out_shape[1:-1], dtype=np.int64))
        out = np.empty((c_out, total * positions), dtype=np.float32 if clamp else np.float64)
        at = 0
        for (x, _, shared), (wf, _, cache), count in zip(parts, weights, counts):
            if partial >= F32_EXACT:
                wf, x, cache = wf.astype(np.float64), x.astype(np.float64), {}
            variants = len(wf) if wf.ndim > len(self.w_shape) else 0
            if variants:
                pieces = self._variant_pieces(x, wf, shared, c_out * positions)
            else:
                pieces = ((s, None) for s in _row_chunks(x.shape[1], c_out * positions))
            for target, acc in pieces:
                if acc is None:
                    acc = self._accumulate(x[:, target], wf, cache)
                piece = out[:, (at + target.start) * positions:(at + target.stop) * positions]
                if requant is not None:
                    requant(acc, piece)
                else:  # bound from the accumulators themselves, or the reference's int64
                    self._requantize_exactly(params, acc, bias, single, clamp, piece)
            at += count
        if tail is not None:
            out[:, at * positions:] = tail.reshape(c_out, -1)
        return out.reshape((c_out, total) + self.out_shape[1:-1])

    def _variant_pieces(self, x: np.ndarray, wf: np.ndarray, shared: bool, per_row: int
                        ) -> Iterator[tuple[slice, np.ndarray]]:
        """(output rows, accumulators) of weight variants, a few variants at a time, each
        piece one product for all its variants: ``shared`` - each variant over all of
        ``x``'s rows, else variant v over the v-th share of them."""
        share = x.shape[1] if shared else x.shape[1] // len(wf)
        for vs in _row_chunks(len(wf), share * per_row):
            rows = x if shared else x[:, vs.start * share:vs.stop * share]
            yield (slice(vs.start * share, vs.stop * share),
                   self._accumulate_variants(rows, wf[vs], shared))

    def _accumulate_variants(self, x: np.ndarray, wf: np.ndarray, shared: bool) -> np.ndarray:
        """Accumulators (C_out, V rows positions), variant-major, of the V weight sets
        ``wf`` on rows ``x``: all of them for each variant (``shared``) or V equal shares."""
        v = len(wf)
        if self.op.type == "DEPTHWISE_CONV_2D":
            return self._variant_depthwise(x, wf, shared)
        c_out = self.w_shape[0]
        cols = x if self.op.type == "FULLY_CONNECTED" else self._patches(x)
        w = wf.reshape(v, c_out, -1)
        if shared:  # one product for every variant: (V C_out, K) @ (K, n)
            acc = (w.reshape(v * c_out, -1) @ cols).reshape(v, c_out, -1)
        else:  # (V, C_out, K) @ (V, K, n / V)
            acc = np.matmul(w, cols.reshape(len(cols), v, -1).transpose(1, 0, 2))
        return acc.transpose(1, 0, 2).reshape(c_out, -1)

    @staticmethod
    def _requantize_exactly(params: RequantParams, acc: np.ndarray, bias: np.ndarray | None,
                            single: bool, clamp: bool, out: np.ndarray) -> None:
        bound = float(np.abs(acc).max()) + (0 if bias is None else np.abs(bias))
        requant = float_requant(params, bias, np.broadcast_to(bound, (len(acc),)), single,
                                clamp)
        if requant is not None:
            requant(acc, out)
            return
        full = acc.astype(np.int64) + (0 if bias is None else bias.astype(np.int64)[:, None])
        z = pre_activation(full.T, params, single).T - params.output_offset
        np.copyto(out, z if not clamp else np.clip(z, params.act_min - params.output_offset,
                                                   params.act_max - params.output_offset))

    def _prepare(self, wf: np.ndarray) -> np.ndarray:
        """One weight set as its products take it: (C_out, K) rows for FC and CONV_2D; for a
        depthwise filter, its taps spread over the position pairs they join (zero where none
        does): (C, H_in W_in, H_out W_out) dense, (KH, C, W_in, W_out) banded, else taps."""
        if self.op.type != "DEPTHWISE_CONV_2D":
            return wf.reshape(self.w_shape[0], -1)
        _, kh, kw, c_out = self.w_shape
        if self.form == "taps":
            return wf.reshape(kh, kw, c_out, 1, 1, 1)
        taps = np.zeros((c_out, kh * kw + 1), dtype=wf.dtype)
        taps[:, :-1] = wf.reshape(kh * kw, c_out).T
        if self.form == "dense":
            return taps[:, self.index]
        return np.stack([taps[:, np.where(self.index < kw, i * kw + self.index, kh * kw)]
                         for i in range(kh)])

    def _accumulate(self, x: np.ndarray, wf: np.ndarray, cache: dict) -> np.ndarray:
        """Accumulators (C_out, rows * positions) of rows ``x`` (engine form) and one weight
        set ``wf``: compiled (reference/native.py) where it runs, else numpy's products of
        the weights' prepared form (kept in ``cache``). float32 weights mean every partial
        sum is below 2^24, which also keeps the compiled int32 product exact."""
        if wf.dtype == np.float32:
            acc = self._compiled(x, wf, cache)
            if acc is not None:
                return acc
        if 0 not in cache:
            cache[0] = self._prepare(wf)
        prepared = cache[0]
        if self.op.type == "FULLY_CONNECTED":
            return prepared @ x
        if self.op.type == "CONV_2D":
            return prepared @ self._patches(x)
        xc = self._channels(x)
        c = len(xc)
        if self.form == "dense":  # per channel, (rows, H_in W_in) @ (H_in W_in, H_out W_out)
            return np.matmul(xc.reshape(c, xc.shape[1], -1), prepared).reshape(c, -1)
        if self.form == "taps":
            return self._tap_depthwise(xc, prepared)
        _, out_h, out_w, _ = self.out_shape
        acc = np.zeros((c, xc.shape[1], out_h, out_w), dtype=prepared.dtype)
        for i in range(len(prepared)):  # filter row i, per channel (rows H, W_in) @ (W_in, W_out)
            rows = tap_range(i, xc.shape[2], out_h, self.op, 0)
            if rows is not None:
                h0, h1, src_h = rows
                part = np.matmul(xc[:, :, src_h].reshape(c, -1, xc.shape[3]), prepared[i])
                acc[:, :, h0:h1] += part.reshape(c, xc.shape[1], h1 - h0, out_w)
        return acc.reshape(c, -1)

    def _compiled(self, x: np.ndarray, wf: np.ndarray, cache: dict) -> np.ndarray | None:
        """The compiled accumulation, or None where it does not run: CONV_2D and
        FULLY_CONNECTED as the u8 x s8 product (int32), depthwise tap by tap (float32)."""
        if self.op.type == "DEPTHWISE_CONV_2D":
            if self._geometry is None:
                options = self.op.options
                self._geometry = native.depthwise_geometry(native.DepthwiseGeometry(
                    tuple(self.w_shape[1:3]), tuple(options["stride"]),
                    tuple(options["dilation"]), (options["padding"][0], options["padding"][2]),
                    tuple(self.in_shape[1:3]), tuple(self.out_shape[1:3]),
                    options.get("depth_multiplier", 1))) or False
            if not self._geometry:
                return None
            if "taps" not in cache:  # (C, KH, KW)
                _, kh, kw, c_out = self.w_shape
                cache["taps"] = np.ascontiguousarray(wf.reshape(kh, kw, c_out).transpose(2, 0, 1))
            return native.depthwise(x, cache["taps"], self._geometry)
        if not native.gemm_available():
            return None
        shift = 128 - self.params.input_offset  # x + shift = q + 128, a byte
        if "u8s8" not in cache:
            w = wf.reshape(self.w_shape[0], -1)
            packed = np.zeros((-(-len(w) // 8) * 8, -(-w.shape[1] // 4) * 4), dtype=np.int8)
            packed[:len(w), :w.shape[1]] = w
            correction = (shift * w.sum(axis=1, dtype=np.int64)).astype(np.int32)
            cache["u8s8"] = packed, correction
        packed, correction = cache["u8s8"]
        cols = x if self.op.type == "FULLY_CONNECTED" else self._patches(x)
        return native.gemm_u8s8(packed, self.w_shape[0], cols.shape[0], correction, cols, shift)

    def _patches(self, x: np.ndarray) -> np.ndarray:
        """(KH KW C_in, rows H_out W_out): the input under each filter position, in the
        weights' (i, j, c) order; zeros where the filter overhangs (centered padding)."""
        _, kh, kw, c_in = self.w_shape
        _, out_h, out_w, _ = self.out_shape
        if (kh, kw) == (1, 1) and not any(self.op.options["padding"]):
            sh, sw = self.op.options["stride"]
            picked = x if (sh, sw) == (1, 1) else x[:, :, ::sh, ::sw]
            return picked[:, :, :out_h, :out_w].reshape(c_in, -1)
        patches = np.zeros((kh, kw, c_in, x.shape[1], out_h, out_w), dtype=x.dtype)
        for i, j, oh, ow, ih, iw in tap_windows(self.op, kh, kw, x.shape[2:], (out_h, out_w)):
            patches[i, j, :, :, oh, ow] = x[:, :, ih, iw]
        return patches.reshape(kh * kw * c_in, -1)

    def _channels(self, x: np.ndarray) -> np.ndarray:
        """Input channel c repeated for its depth-multiplier outputs c m .. c m + m - 1."""
        mult = self.op.options.get("depth_multiplier", 1)
        return x if mult == 1 else np.repeat(x, mult, axis=0)

    def _tap_depthwise(self, xc: np.ndarray, taps: np.ndarray) -> np.ndarray:
        """Tap by tap, each tap only over the outputs whose input under it is real."""
        _, kh, kw, c_out = self.w_shape
        _, out_h, out_w, _ = self.out_shape
        acc = np.zeros((c_out, xc.shape[1], out_h, out_w), dtype=taps.dtype)
        tmp = np.empty_like(acc)
        for i, j, oh, ow, ih, iw in tap_windows(self.op, kh, kw, xc.shape[2:], (out_h, out_w)):
            part = tmp[:, :, oh, ow]
            np.multiply(xc[:, :, ih, iw], taps[i, j], out=part)
            acc[:, :, oh, ow] += part
        return acc.reshape(c_out, -1)

    def _variant_depthwise(self, x: np.ndarray, wf: np.ndarray, shared: bool) -> np.ndarray:
        """Depthwise accumulators of V weight sets (as :meth:`_accumulate_variants`), tap by
        tap on a channels, H, W, variants, rows layout: the variants and rows are the
        contiguous inner axis a tap's window sweeps, however small the map."""
        xc = self._channels(x)
        c, v = len(xc), len(wf)
        _, kh, kw, _ = self.w_shape
        _, out_h, out_w, _ = self.out_shape
        xv = xc.reshape((c, 1 if shared else v, -1) + xc.shape[2:])
        xt = np.ascontiguousarray(xv.transpose(0, 3, 4, 1, 2))  # (C, H, W, V or 1, rows)
        taps = wf.reshape(v, kh, kw, c).transpose(1, 2, 3, 0)  # (KH, KW, C, V)
        acc = np.zeros((c, out_h, out_w, v, xt.shape[-1]), dtype=taps.dtype)
        tmp = np.empty_like(acc)
        for i, j, oh, ow, ih, iw in tap_windows(self.op, kh, kw, xt.shape[1:3], (out_h, out_w)):
            part = tmp[:, oh, ow]
            np.multiply(xt[:, ih, iw], taps[i, j][:, None, None, :, None], out=part)
            acc[:, oh, ow] += part
        return acc.transpose(0, 3, 4, 1, 2).reshape(c, -1)


class PairTable:
    """ADD / MUL of two int8 tensors as a table of the reference kernel's outputs for all
    256 x 256 input pairs (the op is element-wise, so the table is the op)."""

    def __init__(self, graph: Graph, op: Op, kernel: Callable):
        zps = [graph.tensor(name).quant.scalar_zero_point for name in op.inputs[:2]]
        grid = np.arange(-128, 128, dtype=np.int8)
        out = kernel(op, graph, [np.repeat(grid, 256), np.tile(grid, 256)])[0]
        out_zp = graph.tensor(op.outputs[0]).quant.scalar_zero_point
        self.table = out.astype(np.float32) - np.float32(out_zp)
        self.index_offset = np.float32((zps[0] + 128) * 256 + zps[1] + 128)

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        index = np.multiply(a, np.float32(256))
        index = index + b  # broadcasts like the reference
        index += self.index_offset
        return self.table[index.astype(np.intp)]


class Mean:
    """MEAN over spatial axes: the centered sum is the reference's sum - zp_in count, then
    one requantization."""

    def __init__(self, graph: Graph, op: Op):
        self.op = op
        qi, qo = graph.tensor(op.inputs[0]).quant, graph.tensor(op.outputs[0]).quant
        self.scales = (qi.scalar_scale, qo.scalar_scale)
        self.x_max = centered_range(qi.scalar_zero_point)
        self.out_zp = qo.scalar_zero_point
        ndim = len(graph.tensor(op.inputs[0]).shape)
        axes = tuple(op.options["axes"])
        self.supported = all(0 < a < ndim - 1 for a in axes)
        self.axes = tuple(a + 1 for a in axes)  # engine axes: (C, R, spatial ...)

    def __call__(self, x: np.ndarray) -> np.ndarray | None:
        count = int(np.prod([x.shape[a] for a in self.axes], dtype=np.int64))
        total = x.sum(axis=self.axes, keepdims=self.op.options["keep_dims"], dtype=np.float64)
        mult, shift = mean_multiplier(*self.scales, count)
        p = RequantParams(np.array([mult], dtype=np.int64), np.array([shift], dtype=np.int64),
                          0, self.out_zp, -128, 127)
        requant = float_requant(p, None, np.array([float(count * self.x_max)]))
        if requant is None:
            return None
        out = np.empty(total.shape, dtype=np.float32)
        requant(total.reshape(1, -1), out.reshape(1, -1))
        return out


def zero_point(graph: Graph, name: str) -> int:
    quant = graph.tensor(name).quant
    return quant.scalar_zero_point if quant is not None else 0


class Network:
    """A graph's fast kernels (built on first use) and the conversions between the int8
    values of the reference and engine form (int8 tensors of two or more axes; any other
    tensor, e.g. the float I/O at a graph's edges, is kept as it is, batch axis first)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self._kernels: dict[int, object] = {}

    def engine(self, name: str) -> bool:
        t = self.graph.tensor(name)
        return np.dtype(t.dtype) == np.int8 and len(t.shape) >= 2

    def rows_axis(self, name: str) -> int:
        return 1 if self.engine(name) else 0

    def to_engine(self, name: str, value: np.ndarray) -> np.ndarray:
        if not self.engine(name):
            return value
        moved = np.moveaxis(value, -1, 0)
        out = np.empty(moved.shape, dtype=np.float32)
        np.subtract(moved, np.float32(zero_point(self.graph, name)), out=out)
        return out

    def to_int8(self, name: str, value: np.ndarray) -> np.ndarray:
        if not self.engine(name):
            return value
        raw = np.add(np.moveaxis(value, 0, -1), np.float32(zero_point(self.graph, name)))
        return raw.astype(np.int8, order="C")

    @staticmethod
    def activation_inputs(op: Op) -> range:
        """Positions of ``op.inputs`` that are activations (the rest: weights and biases)."""
        return range(1) if op.type in TRAINABLE_OP_TYPES else range(len(op.inputs))

    def kernel(self, k: int) -> object | None:
        """Op k's fast kernel; None for ops without one."""
        if k not in self._kernels:
            op, graph = self.graph.ops[k], self.graph
            names = ([n for n in op.inputs if n] if op.type in ("ADD", "MUL")
                     else [op.inputs[0]])  # the other ops' further inputs are constants
            kernel = None
            if len(op.outputs) == 1 and all(self.engine(n) for n in names + list(op.outputs)):
                shapes = [graph.tensor(n).shape for n in names + list(op.outputs)]
                if op.type in TRAINABLE_OP_TYPES:
                    kernel = Linear(graph, op)
                elif op.type in ("ADD", "MUL") and len({len(s) for s in shapes}) == 1:
                    kernel = PairTable(graph, op, add if op.type == "ADD" else mul)
                elif op.type == "MEAN":
                    kernel = Mean(graph, op)
                elif (op.type == "RESHAPE" and shapes[0][-1] == shapes[1][-1]
                      and zero_point(graph, names[0]) == zero_point(graph, op.outputs[0])):
                    kernel = "reshape"
                if getattr(kernel, "supported", True) is False:
                    kernel = None
            self._kernels[k] = kernel
        return self._kernels[k]

    def run(self, k: int, args: list, group: tuple[list, np.ndarray | None] | None = None,
            filter_scales: np.ndarray | None = None) -> list[np.ndarray]:
        """Op k on ``args`` (aligned with its inputs: activations in engine form, weights and
        biases as int8 / int32 values, None for an absent input; ``args`` may be None when
        only a group's rows are computed); outputs in engine form. A trainable op's weights
        may carry a variant axis: variant v owns the v-th share of the rows. ``group``: rows
        appended after those of ``args`` - with (its arguments, None), its input rows run
        with each variant of its weights in turn (variant-major); with (None, rows), those
        engine-form rows as they are (a trainable op only). ``filter_scales``: a trainable
        op's per-channel weight scales in place of the model's (training/scales.py)."""
        op = self.graph.ops[k]
        if args is None and group is not None and group[0] is None:
            return [group[1]]  # only given rows
        kernel = self.kernel(k) if ENABLED else None
        out = None
        if isinstance(kernel, Linear):
            parts = [] if args is None else [(args[0], args[1], False)]
            extra, tail = group if group is not None else (None, None)
            if extra is not None:
                parts.append((extra[0], extra[1], True))
            bias = (args if args is not None else extra)
            out = kernel(parts, bias[2] if len(bias) > 2 else None, tail,
                         filter_scales=filter_scales)
        elif group is None and isinstance(kernel, PairTable):
            out = kernel(args[0], args[1])
        elif group is None and isinstance(kernel, Mean):
            out = kernel(args[0])
        elif group is None and kernel == "reshape":
            shape = self.graph.tensor(op.outputs[0]).shape
            out = args[0].reshape((shape[-1], args[0].shape[1]) + tuple(shape[1:-1]))
        if out is not None:
            return [out]
        outs = [] if args is None else self._reference(op, args, False, filter_scales)
        if group is not None:
            extra, tail = group
            more = (tail if extra is None
                    else self._reference(op, extra, True, filter_scales)[0])
            axis = self.rows_axis(op.outputs[0])
            outs = [more] if not outs else [np.concatenate([outs[0], more], axis=axis)]
        return outs

    def pre_activation(self, k: int, args: list, filter_scales: np.ndarray | None = None
                       ) -> np.ndarray:
        """z of trainable op k (its row's pre_activation): int64, (rows, ..., C); ``args`` and
        ``filter_scales`` as for :meth:`run`, without variants."""
        op = self.graph.ops[k]
        kernel = self.kernel(k) if ENABLED else None
        z = (kernel([(args[0], args[1], False)], args[2] if len(args) > 2 else None,
                    clamp=False, filter_scales=filter_scales)
             if isinstance(kernel, Linear) else None)
        if z is None:
            raw = [self.to_int8(op.inputs[0], args[0])] + list(args[1:])
            shape = self.graph.tensor(op.outputs[0]).shape
            z = OPS[op.type].pre_activation(op, _with_filter_scales(self.graph, op,
                                                                    filter_scales), raw)
            return z.reshape((-1,) + tuple(shape[1:]))
        zp = zero_point(self.graph, op.outputs[0])
        return (np.moveaxis(z, 0, -1) + zp).astype(np.int64)

    def _reference(self, op: Op, args: list, shared: bool,
                   filter_scales: np.ndarray | None = None) -> list[np.ndarray]:
        raw = list(args)
        for i in self.activation_inputs(op):
            if raw[i] is not None:
                raw[i] = self.to_int8(op.inputs[i], raw[i])
        if op.type in TRAINABLE_OP_TYPES and raw[1].ndim > len(self.graph.tensor(op.inputs[1])
                                                               .shape):
            variants = len(raw[1])
            if shared:
                raw[0] = np.tile(raw[0], (variants,) + (1,) * (raw[0].ndim - 1))
            raw[1] = np.repeat(raw[1], len(raw[0]) // variants, axis=0)
        results = OPS[op.type].reference(op, _with_filter_scales(self.graph, op, filter_scales),
                                         raw)
        outs = []
        for name, result in zip(op.outputs, results):
            t = self.graph.tensor(name)
            value = result.astype(t.dtype, copy=False).reshape((-1,) + tuple(t.shape[1:]))
            outs.append(self.to_engine(name, value))
        return outs


def _with_filter_scales(graph: Graph, op: Op, filter_scales: np.ndarray | None) -> Graph:
    """``graph`` itself, or with ``filter_scales`` as op's per-channel weight scales: the
    reference kernels derive their multipliers from the graph (a shallow copy; rare: only
    where the fast kernel cannot run a layer whose scales a run trains)."""
    if filter_scales is None:
        return graph
    w = graph.tensor(op.inputs[1])
    scales = np.asarray(filter_scales, dtype=np.float32)
    quant = replace(w.quant, scale=scales, zero_point=np.zeros(len(scales), dtype=np.int64),
                    axis=3 if op.type == "DEPTHWISE_CONV_2D" else 0)
    return replace(graph, tensors={**graph.tensors, w.name: replace(w, quant=quant)})


_NETWORKS: weakref.WeakKeyDictionary[Graph, Network] = weakref.WeakKeyDictionary()


def network(graph: Graph) -> Network:
    """The graph's :class:`Network`, kept as long as the graph lives."""
    if graph not in _NETWORKS:
        _NETWORKS[graph] = Network(graph)
    return _NETWORKS[graph]
