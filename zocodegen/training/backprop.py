"""Back-propagation through the model's head for the hybrid estimator (ElasticZO, paper
Alg. 1 line 11: the last C trainable layers by BP, the rest by zeroth-order). Rules and
their reasons: docs/training.md "Back-propagation for the last layers"; C twin:
templates/train/zo_backprop.c.

Everything is integer. An *error* is int32 ``2^24 * dl/dT_q`` (nats per LSB of tensor T):
  * at the logits: ``MBQM(p - onehot, s_logits)`` with p the softmax of the loss's own
    fixed-point exponentials in Q24 (reference/softmax.py ``softmax_gradient_q24``);
  * an op passes the error of its output only where the output lies strictly inside its
    clamp range (fused activation, int8 limits): elsewhere the derivative is 0;
  * to an input through one int32 multiplication by the op's real derivative as a TFLite
    quantized multiplier (``MBQM``), then exact int64 sums saturated to int32 once.
A trainable layer's masked output error is its node gradient: the parameter gradient is the
same outer product NP uses (step_parts.node_to_parameter_gradient), rounded from Q24 to Q16
(``GRADIENT_SHIFT``) and saturated to int32, so the update is NP's update.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import UserError
from ..ir import Graph, Op
from ..numerics import (multiply_by_quantized_multiplier, per_channel_multipliers,
                        quantize_multiplier, rounding_divide_by_pot)
from ..ops.table import OPS, TRAINABLE_OP_TYPES
from ..reference.common import output_range
from ..reference.softmax import LogSoftmaxParams, softmax_gradient_q24

ERROR_BITS = 24
GRADIENT_SHIFT = ERROR_BITS - 16  # node gradients in Q24, parameter gradients in Q16
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
#: ops the error passes through, the ones whose row names a backward kind (a trainable op's
#: weights are always trained by BP here: every trainable op after the first BP layer is
#: itself a BP layer)
BACKWARD_OPS = tuple(name for name, row in OPS.items() if row.backward is not None)


@dataclass(frozen=True)
class Head:
    """The ops from the first BP layer to the loss that lie on a path to the logits, in
    forward order, and the tensors whose error back-propagation computes."""

    first_op: int
    ops: tuple[int, ...]
    error_tensors: tuple[str, ...]  # outputs of head ops (forward order)
    saved: tuple[str, ...]  # int8 activations the backward pass reads (forward order)
    saved_bytes: tuple[int, ...]  # per saved tensor
    error_counts: tuple[int, ...]  # int32 elements per error tensor
    scaled_count: int  # largest output error a FC / CONV / DEPTHWISE scales to propagate

    def propagates(self, graph: Graph, k: int) -> bool:
        """Whether op k passes an error to some input (its inputs computed in the head)."""
        return k != self.first_op and any(n in self.error_tensors for n in graph.ops[k].inputs)


def _feeds_logits(graph: Graph, first: int, logits_op: int) -> list[int]:
    """Ops in first..logits_op whose output reaches the logits."""
    needed = {graph.ops[logits_op].outputs[0]}
    keep = []
    for k in range(logits_op, first - 1, -1):
        op = graph.ops[k]
        if any(name in needed for name in op.outputs):
            keep.append(k)
            needed.update(n for n in op.inputs if n)
    return keep[::-1]


def _rule_problem(graph: Graph, op: Op, head_made: set[str]) -> str | None:
    """Why the error cannot pass through ``op`` (None: it can)."""
    if op.type not in BACKWARD_OPS:
        return "has no backward rule"
    if op.type in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        (fh, fw), (sh, sw) = op.options["filter"], op.options["stride"]
        _, oh, ow, _ = graph.tensor(op.outputs[0]).shape
        if (oh > 1 and sh < fh) or (ow > 1 and sw < fw):
            return "has overlapping windows (only non-overlapping pools are back-propagated)"
    if op.type == "ADD":
        out = graph.tensor(op.outputs[0]).shape
        for name in op.inputs:
            if name in head_made and tuple(graph.tensor(name).shape) != tuple(out):
                return "broadcasts a computed input (only same-shape inputs are " \
                       "back-propagated)"
    if op.type == "DEPTHWISE_CONV_2D" and op.options.get("depth_multiplier", 1) != 1:
        return "has a depth multiplier other than 1"
    return None


def head(graph: Graph, first_op: int, logits_op: int) -> Head:
    """The head below the BP layer at ``first_op``; refuses an op without a backward rule."""
    ops = _feeds_logits(graph, first_op, logits_op)
    made: set[str] = set()
    saved: list[str] = []
    for k in ops:
        op = graph.ops[k]
        if k != first_op:
            problem = _rule_problem(graph, op, made)
            if problem:
                raise UserError(f"op {k} {op.type} '{op.name}' {problem}")
        for name in op.inputs + op.outputs:
            if name and not graph.tensor(name).is_constant and name not in saved:
                saved.append(name)
        made.update(op.outputs)
    errors = tuple(name for k in ops for name in graph.ops[k].outputs)
    scaled = [graph.tensor(graph.ops[k].outputs[0]).size for k in ops
              if k != first_op and graph.ops[k].type in TRAINABLE_OP_TYPES
              and graph.ops[k].inputs[0] in errors]
    return Head(first_op, tuple(ops), errors, tuple(saved),
                tuple(graph.tensor(n).nbytes for n in saved),
                tuple(graph.tensor(n).size for n in errors), max(scaled, default=0))


def largest_bp_layers(graph: Graph, trainable: tuple[int, ...], logits_op: int) -> int:
    """The largest C whose head every op can back-propagate (0 when not even the last)."""
    usable = [k for k in trainable if k <= logits_op]
    best = 0
    for c in range(1, len(usable) + 1):
        try:
            head(graph, usable[-c], logits_op)
        except UserError:
            break
        best = c
    return best


def _mask(graph: Graph, op: Op, out: np.ndarray, error: np.ndarray) -> np.ndarray:
    lo, hi = output_range(graph, op)
    return np.where((out > lo) & (out < hi), error, 0)


def _mbqm(x: np.ndarray, real: float | np.ndarray) -> np.ndarray:
    """x (int32 values) times a real factor as TFLite's quantized-multiplier product."""
    if np.ndim(real):
        m, s = per_channel_multipliers(np.asarray(real, dtype=np.float64))
        return multiply_by_quantized_multiplier(x, m, s)
    m, s = quantize_multiplier(float(real))
    return multiply_by_quantized_multiplier(x, m, s)


def _sat32(x: np.ndarray) -> np.ndarray:
    return np.clip(x, INT32_MIN, INT32_MAX)


def linear_multipliers(graph: Graph, op: Op) -> np.ndarray:
    """d output_q / d (input_q * w_q) per output channel: s_in s_w[c] / s_out (float64)."""
    s_in = np.float64(graph.tensor(op.inputs[0]).quant.scalar_scale)
    s_out = np.float64(graph.tensor(op.outputs[0]).quant.scalar_scale)
    w = graph.tensor(op.inputs[1])
    channels = w.shape[0] if op.type != "DEPTHWISE_CONV_2D" else w.shape[3]
    s_w = np.broadcast_to(w.quant.scale.astype(np.float64), (channels,))
    return s_in * s_w / s_out


def _ratio(graph: Graph, name: str, op: Op) -> np.float64:
    return (np.float64(graph.tensor(name).quant.scalar_scale)
            / np.float64(graph.tensor(op.outputs[0]).quant.scalar_scale))


def backward_factors(graph: Graph, op: Op) -> np.ndarray:
    """The real derivative factors d out_q / d in_q an op's backward rule multiplies by
    (float64; the C generator quantizes the same numbers): per output channel for FC /
    CONV / DEPTHWISE (times the weight), per input for ADD, per window size (index) for
    AVERAGE_POOL_2D, one for MAX_POOL_2D and MEAN, none for RESHAPE."""
    if op.type in TRAINABLE_OP_TYPES:
        return linear_multipliers(graph, op)
    if op.type == "ADD":
        return np.array([_ratio(graph, name, op) for name in op.inputs])
    if op.type == "AVERAGE_POOL_2D":
        fh, fw = op.options["filter"]
        ratio = _ratio(graph, op.inputs[0], op)
        return np.array([ratio] + [ratio / count for count in range(1, fh * fw + 1)])
    if op.type == "MAX_POOL_2D":
        return np.array([_ratio(graph, op.inputs[0], op)])
    if op.type == "MEAN":
        shape = graph.tensor(op.inputs[0]).shape
        count = int(np.prod([shape[a] for a in op.options["axes"]]))
        return np.array([_ratio(graph, op.inputs[0], op) / count])
    return np.zeros(0)


def _covered(k_offset: int, stride: int, pad: int, size: int, outputs: int) -> tuple[int, int]:
    """[first, last) of output positions o with o * stride - pad + k_offset in [0, size)."""
    lo, hi = pad - k_offset, size + pad - k_offset
    first = max(0, -(-lo // stride)) if lo > 0 else 0
    last = max(0, -(-hi // stride)) if hi > 0 else 0
    first = min(first, outputs)
    return first, max(first, min(last, outputs))


def _conv_input_error(op: Op, w: np.ndarray, scaled: np.ndarray, in_shape: tuple[int, ...]
                      ) -> np.ndarray:
    """Transposed convolution of the scaled output error with the weights: int64 exact."""
    n, out_h, out_w, _ = scaled.shape
    top, _, left, _ = op.options["padding"]
    sh, sw = op.options["stride"]
    dh, dw = op.options["dilation"]
    e = np.zeros((n,) + tuple(in_shape[1:]), dtype=np.int64)
    kh, kw = w.shape[1], w.shape[2]
    for i in range(kh):
        oy0, oy1 = _covered(i * dh, sh, top, in_shape[1], out_h)
        for j in range(kw):
            ox0, ox1 = _covered(j * dw, sw, left, in_shape[2], out_w)
            if oy0 == oy1 or ox0 == ox1:
                continue
            src = scaled[:, oy0:oy1, ox0:ox1, :]
            iy0, ix0 = oy0 * sh - top + i * dh, ox0 * sw - left + j * dw
            rows = slice(iy0, iy0 + (oy1 - oy0 - 1) * sh + 1, sh)
            cols = slice(ix0, ix0 + (ox1 - ox0 - 1) * sw + 1, sw)
            if op.type == "DEPTHWISE_CONV_2D":
                e[:, rows, cols, :] += src * w[0, i, j, :].astype(np.int64)
            else:
                e[:, rows, cols, :] += np.einsum("nhwo,oc->nhwc", src,
                                                 w[:, i, j, :].astype(np.int64))
    return e


def _pool_input_error(graph: Graph, op: Op, x: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Non-overlapping pools: each output's error goes to its window (average: every
    in-bounds element, times s_in / (s_out count); max: the first maximum in window order,
    times s_in / s_out)."""
    n, out_h, out_w, channels = g.shape
    top, _, left, _ = op.options["padding"]
    sh, sw = op.options["stride"]
    fh, fw = op.options["filter"]
    in_h, in_w = x.shape[1], x.shape[2]
    factors = backward_factors(graph, op)
    e = np.zeros(x.shape, dtype=np.int64)
    for oy in range(out_h):
        ys = [y for y in range(oy * sh - top, oy * sh - top + fh) if 0 <= y < in_h]
        for ox in range(out_w):
            xs = [v for v in range(ox * sw - left, ox * sw - left + fw) if 0 <= v < in_w]
            if not ys or not xs:
                continue
            go = g[:, oy, ox, :]
            if op.type == "AVERAGE_POOL_2D":
                share = _mbqm(go, factors[len(ys) * len(xs)])
                for y in ys:
                    for v in xs:
                        e[:, y, v, :] = share
            else:
                window = x[:, ys[0]:ys[-1] + 1, xs[0]:xs[-1] + 1, :].reshape(n, -1, channels)
                first = window.argmax(axis=1)  # first maximum in row-major window order
                share = _mbqm(go, factors[0])
                for b in range(n):
                    for c in range(channels):
                        y = ys[0] + first[b, c] // len(xs)
                        v = xs[0] + first[b, c] % len(xs)
                        e[b, y, v, c] = share[b, c]
    return e


def _input_errors(graph: Graph, op: Op, env: dict[str, np.ndarray], g: np.ndarray,
                  params: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray]]:
    """(input tensor, its error contribution, int64 or int32 values) for each computed
    input of ``op``, from ``g`` = the op's masked output error."""
    x_name = op.inputs[0]
    x = env[x_name]
    n = g.shape[0]
    if op.type == "RESHAPE":
        return [(x_name, g.reshape(x.shape))]
    if op.type == "FULLY_CONNECTED":
        w = params.get(op.inputs[1], graph.tensor(op.inputs[1]).data).astype(np.int64)
        scaled = _mbqm(g.reshape(n, -1, w.shape[0]), linear_multipliers(graph, op))
        return [(x_name, _sat32(np.einsum("nro,oc->nrc", scaled, w)).reshape(x.shape))]
    if op.type in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        w = params.get(op.inputs[1], graph.tensor(op.inputs[1]).data)
        scaled = _mbqm(g, linear_multipliers(graph, op))
        return [(x_name, _sat32(_conv_input_error(op, w, scaled, x.shape)))]
    if op.type in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        return [(x_name, _pool_input_error(graph, op, x, g))]
    if op.type == "MEAN":
        axes = tuple(op.options["axes"])
        count = int(np.prod([x.shape[a] for a in axes]))
        ratio = (np.float64(graph.tensor(x_name).quant.scalar_scale)
                 / np.float64(graph.tensor(op.outputs[0]).quant.scalar_scale) / count)
        kept = g.reshape([1 if a in axes else s for a, s in enumerate(x.shape)])
        return [(x_name, np.broadcast_to(_mbqm(kept, ratio), x.shape))]
    # ADD: each computed, same-shape input moves by s_in / s_out per LSB
    s_out = np.float64(graph.tensor(op.outputs[0]).quant.scalar_scale)
    return [(name, _mbqm(g, np.float64(graph.tensor(name).quant.scalar_scale) / s_out))
            for name in op.inputs if name in env and not graph.tensor(name).is_constant]


def node_gradients(graph: Graph, hd: Head, env: dict[str, np.ndarray],
                   params: dict[str, np.ndarray], labels: np.ndarray, logits: str,
                   loss_params: LogSoftmaxParams, bp_ops: tuple[int, ...]
                   ) -> dict[int, np.ndarray]:
    """Per BP layer (op index): its node gradient, int32 values in Q24, shape (N, d_a),
    from the clean forward's activations in ``env`` (batch of N)."""
    n = len(labels)
    errors: dict[str, np.ndarray] = {}
    rows = env[logits].reshape(n, -1)
    d = softmax_gradient_q24(rows, labels, loss_params)
    s_logits = np.float64(graph.tensor(logits).quant.scalar_scale)
    errors[logits] = _mbqm(d, s_logits).reshape(env[logits].shape)
    made = set(hd.error_tensors)
    gradients: dict[int, np.ndarray] = {}
    for k in reversed(hd.ops):
        op = graph.ops[k]
        out = op.outputs[0]
        e = errors.get(out)
        if e is None:
            e = np.zeros(env[out].shape, dtype=np.int64)
        g = e if op.type == "RESHAPE" else _mask(graph, op, env[out], e)
        if k in bp_ops:
            gradients[k] = g.reshape(n, -1).astype(np.int64)
        if k == hd.first_op:
            continue
        for name, contribution in _input_errors(graph, op, env, g, params):
            if name in made:
                prior = errors.get(name, np.zeros(env[name].shape, dtype=np.int64))
                errors[name] = _sat32(prior + np.asarray(contribution, dtype=np.int64))
    return gradients


def parameter_gradient(per_sample: np.ndarray) -> np.ndarray:
    """An int64 outer product of a Q24 node gradient -> the Q16 int32 gradient NP's update
    takes: rounding right shift by GRADIENT_SHIFT (half away from zero), then saturation."""
    return _sat32(rounding_divide_by_pot(np.asarray(per_sample, dtype=np.int64),
                                         GRADIENT_SHIFT))
