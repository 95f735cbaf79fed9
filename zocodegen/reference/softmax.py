"""INT8 SOFTMAX and LOG_SOFTMAX, bit-exact with TFLite's reference kernels
(``reference_ops::Softmax<int8_t, int8_t>`` and ``reference_integer_ops::LogSoftmax``, i.e.
what ``ai_edge_litert`` runs with ``OpResolverType.BUILTIN_REF``).

Both work on ``diff = x - max(row)`` (an integer in [-255, 0]), scale it into Q5.26 with a
multiplier derived from ``input_scale * beta``, take gemmlowp's fixed-point exp, accumulate in
Q12.19 and then divide (SOFTMAX) or subtract the log (LOG_SOFTMAX). The input zero point
cancels in the difference and is never used. Parameter derivation is kept in the small pure
functions ``softmax_params`` / ``log_softmax_params`` because the C generator emits exactly
those numbers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ModelError
from ..ir import Graph, Op
from ..numerics import (INT32_MAX, INT32_MIN, multiply_by_quantized_multiplier, quantize_multiplier,
                        rounding_divide_by_pot, saturating_rounding_doubling_high_mul,
                        wrap_int32)
from . import fixedpoint as fp

# Integer bits of the Q formats, as in the TFLite kernels (Prepare and Eval must agree).
SCALED_DIFF_INTEGER_BITS = 5   # exp input: Q5.26, exp(-32) is far below one output LSB
ACCUMULATION_INTEGER_BITS = 12  # sum of exps: Q12.19, safe for rows up to 2**12 long
LOG_SOFTMAX_OUTPUT_INTEGER_BITS = 4
LOG_SOFTMAX_OUTPUT_ZERO_POINT = 127  # output scale 16/256: [-16, 0] -> [-128, 127]


# --------------------------------------------------------------------------------------------
# Parameter derivation (TFLite Prepare)
# --------------------------------------------------------------------------------------------

def quantize_multiplier_greater_than_one(real: float) -> tuple[int, int]:
    """TFLite ``QuantizeMultiplierGreaterThanOne``: ``(multiplier, left_shift >= 0)``."""
    if not real > 1.0:
        raise ModelError(f"softmax input multiplier {real!r} must exceed 1 "
                         "(input scale * beta too small)")
    return quantize_multiplier(real)


def quantize_multiplier_smaller_than_one_exp(real: float) -> tuple[int, int]:
    """TFLite ``QuantizeMultiplierSmallerThanOneExp``: ``(multiplier, left_shift <= 0)``."""
    if not 0.0 < real < 1.0:
        raise ModelError(f"log-softmax reverse multiplier {real!r} must lie in (0, 1)")
    return quantize_multiplier(real)


def preprocess_softmax_scaling(beta: float, input_scale: float,
                               input_integer_bits: int) -> tuple[int, int]:
    """TFLite ``PreprocessSoftmaxScaling``: the multiplier taking an integer input difference
    to ``Q(input_integer_bits)``, i.e. ``beta * input_scale * 2**(31 - bits)`` in double,
    capped at 2**31 - 1, quantized as a greater-than-one multiplier with a left shift."""
    real = min(float(beta) * float(input_scale) * float(1 << (31 - input_integer_bits)),
               float((1 << 31) - 1))
    return quantize_multiplier_greater_than_one(real)


def calculate_input_radius(input_integer_bits: int, input_left_shift: int,
                           total_signed_bits: int = 31) -> int:
    """TFLite ``CalculateInputRadius``: the largest |diff| whose rescaled value still fits
    the ``Q(input_integer_bits)`` range, floored (double arithmetic, as in TFLite)."""
    max_input_rescaled = (1.0 * ((1 << input_integer_bits) - 1)
                          * float(1 << (total_signed_bits - input_integer_bits))
                          / float(1 << input_left_shift))
    return int(math.floor(max_input_rescaled))


@dataclass(frozen=True)
class SoftmaxParams:
    """What TFLite's SoftmaxPrepare (reference kernel) stores for int8 -> int8."""

    input_multiplier: int  # Q31
    input_left_shift: int  # >= 0
    diff_min: int  # <= 0: differences below it contribute exp = 0 and output -128


@dataclass(frozen=True)
class LogSoftmaxParams:
    """What TFLite's LogSoftmaxPrepare stores for int8 -> int8 (beta is always 1)."""

    input_multiplier: int  # Q31
    input_left_shift: int  # >= 0, used as a MultiplyByQuantizedMultiplier shift
    reverse_scaling_divisor: int  # Q31
    reverse_scaling_right_shift: int  # >= 0
    diff_min: int


def softmax_params(input_scale: float, beta: float = 1.0) -> SoftmaxParams:
    """SoftmaxPrepare for the reference int8 kernel (kScaledDiffIntegerBits = 5)."""
    multiplier, left_shift = preprocess_softmax_scaling(beta, input_scale,
                                                        SCALED_DIFF_INTEGER_BITS)
    diff_min = -calculate_input_radius(SCALED_DIFF_INTEGER_BITS, left_shift)
    return SoftmaxParams(multiplier, left_shift, diff_min)


def log_softmax_params(input_scale: float) -> LogSoftmaxParams:
    """LogSoftmaxPrepare for int8 (``PreprocessLogSoftmaxScalingExp`` with beta = 1): the
    forward multiplier as for softmax, plus its inverse ``2**(31 - left_shift) / multiplier``
    quantized as a smaller-than-one multiplier whose (negative) shift is stored negated."""
    multiplier, left_shift = preprocess_softmax_scaling(1.0, input_scale,
                                                        SCALED_DIFF_INTEGER_BITS)
    real_reverse = float(1 << (31 - left_shift)) / float(multiplier)
    reverse_divisor, reverse_left_shift = quantize_multiplier_smaller_than_one_exp(real_reverse)
    diff_min = -calculate_input_radius(SCALED_DIFF_INTEGER_BITS, left_shift)
    return LogSoftmaxParams(multiplier, left_shift, reverse_divisor, -reverse_left_shift,
                            diff_min)


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------

def _rows_and_diffs(x: np.ndarray) -> np.ndarray:
    """int8 input of any rank -> int64 ``x - max`` over the last axis, shape (outer, depth)."""
    x = np.asarray(x).astype(np.int64)
    rows = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
    return rows - rows.max(axis=1, keepdims=True)


def _sum_of_exps_q12(exp_q0: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Rescale each Q0 exp to Q12 (rounding right shift by 12) and add them up per row in
    int32 (the sum of non-negative terms cannot wrap for rows below 2**12 elements; the
    wrap is applied anyway to mirror C)."""
    terms = np.where(valid, fp.rescale(exp_q0, 0, ACCUMULATION_INTEGER_BITS), 0)
    return wrap_int32(terms.sum(axis=1, keepdims=True))


def softmax_int8(x: np.ndarray, params: SoftmaxParams) -> np.ndarray:
    """``reference_ops::Softmax<int8_t, int8_t>`` on the last axis; output scale 1/256,
    zero point -128 (the kernel hard-codes the int8 minimum as output offset)."""
    diff = _rows_and_diffs(x)
    valid = diff >= params.diff_min
    # MultiplyByQuantizedMultiplierGreaterThanOne: x * 2**left_shift then the Q31 high mul.
    scaled_diff = saturating_rounding_doubling_high_mul(
        wrap_int32(diff << params.input_left_shift), params.input_multiplier)
    exp_q0 = fp.exp_on_negative_values(scaled_diff, SCALED_DIFF_INTEGER_BITS)
    sum_of_exps = _sum_of_exps_q12(exp_q0, valid)
    shifted_scale, num_bits_over_unit = fp.get_reciprocal(sum_of_exps, ACCUMULATION_INTEGER_BITS)
    exponent = num_bits_over_unit + 31 - 8
    if np.any((exponent < 0) | (exponent > 31)):
        raise ValueError("softmax: reciprocal exponent out of range (TFLITE_CHECK)")
    unsat = rounding_divide_by_pot(fp.mul(shifted_scale, exp_q0), exponent)
    out = np.clip(unsat - 128, -128, 127)
    out = np.where(valid, out, -128)
    return out.astype(np.int8).reshape(np.shape(x))


def log_softmax_int8(x: np.ndarray, params: LogSoftmaxParams) -> np.ndarray:
    """``reference_integer_ops::LogSoftmax`` (int8) on the last axis; output scale 16/256,
    zero point 127."""
    diff = _rows_and_diffs(x)
    valid = diff >= params.diff_min
    diff_q5 = multiply_by_quantized_multiplier(diff, params.input_multiplier,
                                               params.input_left_shift)
    exp_q0 = fp.exp_on_negative_values(diff_q5, SCALED_DIFF_INTEGER_BITS)
    sum_of_exps = _sum_of_exps_q12(exp_q0, valid)
    log_sum_q5 = fp.log_x_for_x_greater_than_or_equal_to_1(
        sum_of_exps, ACCUMULATION_INTEGER_BITS, SCALED_DIFF_INTEGER_BITS)
    # The smallest Q5.26 value plus log(sum), mapped back to an input difference: anything at
    # or below it would overflow the subtraction below, so it is forced to the minimum.
    shifted_log_sum = wrap_int32(log_sum_q5 + INT32_MIN)
    adjusted_diff_min = np.maximum(
        params.diff_min - 1,
        multiply_by_quantized_multiplier(shifted_log_sum, params.reverse_scaling_divisor,
                                         -params.reverse_scaling_right_shift))
    keep = diff > adjusted_diff_min  # strict, unlike the >= of the sum loop
    out = rounding_divide_by_pot(
        wrap_int32(diff_q5 - log_sum_q5),
        31 - SCALED_DIFF_INTEGER_BITS - LOG_SOFTMAX_OUTPUT_INTEGER_BITS)
    out = np.clip(out + LOG_SOFTMAX_OUTPUT_ZERO_POINT, -128, 127)
    out = np.where(keep, out, -128)
    return out.astype(np.int8).reshape(np.shape(x))


#: The largest loss cross_entropy_q26 gives, in nats (INT32_MAX in Q5.26): a record whose
#: label is ~32 nats below the maximum saturates there, so a mean of 32.000 is the cap.
LOSS_CAP_NATS = INT32_MAX / 2 ** 26


def cross_entropy_q26(logits: np.ndarray, labels: np.ndarray,
                      params: LogSoftmaxParams) -> np.ndarray:
    """Cross-entropy ``-log softmax(logits)[label]`` per row, as an int32 in Q5.26 (units of
    2**-26 nats), from the LOG_SOFTMAX arithmetic above: ``log(sum of exps) - scaled diff``.

    This is the zeroth-order trainer's loss (DESIGN.md section 4: identical on x86 and Arm,
    no libm). ``params`` are LOG_SOFTMAX's for the logits' scale (beta 1). A label more than
    ~32 nats below the maximum saturates at INT32_MAX; C twin: ``zo_cross_entropy_q26``.
    """
    diff = _rows_and_diffs(logits)
    valid = diff >= params.diff_min
    diff_q5 = multiply_by_quantized_multiplier(diff, params.input_multiplier,
                                               params.input_left_shift)
    exp_q0 = fp.exp_on_negative_values(diff_q5, SCALED_DIFF_INTEGER_BITS)
    log_sum_q5 = fp.log_x_for_x_greater_than_or_equal_to_1(
        _sum_of_exps_q12(exp_q0, valid), ACCUMULATION_INTEGER_BITS, SCALED_DIFF_INTEGER_BITS)
    rows = np.arange(diff.shape[0])
    labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    loss = fp.saturating_sub(log_sum_q5[:, 0], diff_q5[rows, labels])
    return np.where(valid[rows, labels], loss, INT32_MAX)


def softmax_gradient_q24(logits: np.ndarray, labels: np.ndarray,
                         params: LogSoftmaxParams) -> np.ndarray:
    """``softmax(logits) - onehot(label)`` per row in Q24 (int64), the cross-entropy's
    gradient with respect to the dequantized logits, from the loss's own Q12.19 terms:
    ``p_j = round(term_j 2^24 / sum)`` (half up; both non-negative). The training
    engine's back-propagation starts here (training/backprop.py); C twin:
    ``zo_softmax_gradient_q24``."""
    diff = _rows_and_diffs(logits)
    valid = diff >= params.diff_min
    diff_q5 = multiply_by_quantized_multiplier(diff, params.input_multiplier,
                                               params.input_left_shift)
    exp_q0 = fp.exp_on_negative_values(diff_q5, SCALED_DIFF_INTEGER_BITS)
    terms = np.where(valid, fp.rescale(exp_q0, 0, ACCUMULATION_INTEGER_BITS), 0)
    total = wrap_int32(terms.sum(axis=1, keepdims=True)).astype(np.int64)
    p = ((terms.astype(np.int64) << 24) + total // 2) // total
    rows = np.arange(diff.shape[0])
    p[rows, np.asarray(labels, dtype=np.int64).reshape(-1)] -= 1 << 24
    return p


def _check_output_quant(graph: Graph, op: Op, scale: float, zero_point: int) -> None:
    """TFLite's Prepare refuses other int8 output quantizations; so do we, since the kernels
    hard-code them."""
    quant = graph.tensor(op.outputs[0]).quant
    if quant is None or quant.scalar_zero_point != zero_point or \
            abs(quant.scalar_scale - scale) > 0.001 * scale:
        raise ModelError(f"{op.type} {op.name!r}: int8 output must have scale {scale} and "
                         f"zero point {zero_point}, got "
                         f"{quant.describe() if quant else 'no quantization'}")


def op_params(graph: Graph, op: Op) -> SoftmaxParams | LogSoftmaxParams:
    """Checks the op's quantization (as TFLite's Prepare does) and derives its parameters;
    the frontend validation calls this so a bad model fails at load time."""
    scale = graph.tensor(op.inputs[0]).quant.scalar_scale
    if op.type == "SOFTMAX":
        _check_output_quant(graph, op, 1.0 / 256, -128)
        return softmax_params(scale, float(op.options.get("beta", 1.0)))
    _check_output_quant(graph, op, 16.0 / 256, 127)
    return log_softmax_params(scale)


def softmax(op: Op, graph: Graph, args: list) -> list[np.ndarray]:
    """SOFTMAX kernel (uniform reference-kernel signature)."""
    return [softmax_int8(args[0], op_params(graph, op))]


def log_softmax(op: Op, graph: Graph, args: list) -> list[np.ndarray]:
    """LOG_SOFTMAX kernel (uniform reference-kernel signature)."""
    return [log_softmax_int8(args[0], op_params(graph, op))]
