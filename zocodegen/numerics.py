"""Integer requantization exactly as TFLite's reference kernels do it.

These functions are the single source of the arithmetic that the numpy reference, the
training simulator and the generated C must all reproduce:

* ``quantize_multiplier``: a positive real multiplier ``m`` becomes a Q31 integer ``q`` and a
  power-of-two exponent ``e`` with ``m ~= q * 2**(e - 31)`` (TFLite ``QuantizeMultiplier``:
  ``frexp``, round half away from zero, renormalise when the mantissa rounds up to 2**31).
* ``multiply_by_quantized_multiplier``: TFLite's default (double rounding) form,
  ``RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x << max(e,0), q), max(-e,0))``,
  used by CONV_2D, DEPTHWISE_CONV_2D, ADD, MUL, MEAN, QUANTIZE.
* ``multiply_by_quantized_multiplier_single_round``: ``(x * q + 2**(30 - e)) >> (31 - e)``,
  one rounding, half up. ai_edge_litert's FULLY_CONNECTED requantizes this way (measured:
  double rounding differs in about 1 of 60 FC outputs on the MLPerf Tiny models, this form in
  none), so the FC kernels use it.

All array functions are vectorised over numpy int64 arrays and return int64.
"""
from __future__ import annotations

import math

import numpy as np

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def tflite_round(x: float) -> int:
    """``std::round``: half away from zero (not Python's banker's rounding)."""
    return int(math.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1)


def quantize_multiplier(real_multiplier: float) -> tuple[int, int]:
    """Return ``(quantized_multiplier, shift)`` for a real multiplier, as TFLite does."""
    if real_multiplier == 0.0:
        return 0, 0
    if real_multiplier < 0:
        raise ValueError("requantization multiplier must be positive")
    mantissa, shift = math.frexp(real_multiplier)
    q_fixed = tflite_round(mantissa * (1 << 31))
    if q_fixed == (1 << 31):
        q_fixed //= 2
        shift += 1
    if shift < -31:
        shift, q_fixed = 0, 0
    # Shifts above 30 are kept, as TFLite's default (double-rounding) build does; only its
    # single-rounding build clamps them. PreprocessSoftmaxScaling can produce shift 31.
    return q_fixed, shift


def wrap_int32(x: np.ndarray) -> np.ndarray:
    """Two's-complement wrap of int64 values to the int32 range (what C's int32 does)."""
    return ((np.asarray(x, dtype=np.int64) + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _trunc_div(num: np.ndarray, den: int | np.ndarray) -> np.ndarray:
    """C integer division (truncates toward zero) on int64 arrays."""
    num = np.asarray(num, dtype=np.int64)
    q = np.abs(num) // np.abs(den)
    return np.where((num < 0) != (np.asarray(den) < 0), -q, q)


def saturating_rounding_doubling_high_mul(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingDoublingHighMul`` on int32 values held in int64."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    overflow = (a == b) & (a == INT32_MIN)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    high = _trunc_div(ab + nudge, 1 << 31)
    return np.where(overflow, INT32_MAX, high)


def rounding_divide_by_pot(x: np.ndarray, exponent: np.ndarray | int) -> np.ndarray:
    """gemmlowp ``RoundingDivideByPOT``: divide by 2**exponent, round half away from zero."""
    x = np.asarray(x, dtype=np.int64)
    exponent = np.asarray(exponent, dtype=np.int64)
    mask = (np.int64(1) << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def multiply_by_quantized_multiplier(
    x: np.ndarray, multiplier: np.ndarray | int, shift: np.ndarray | int
) -> np.ndarray:
    """TFLite ``MultiplyByQuantizedMultiplier`` (int32 in, int32 out), broadcasting."""
    shift = np.asarray(shift, dtype=np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    shifted = wrap_int32(np.asarray(x, dtype=np.int64) << left)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(shifted, multiplier), right)


def multiply_by_quantized_multiplier_single_round(
    x: np.ndarray, multiplier: np.ndarray | int, shift: np.ndarray | int
) -> np.ndarray:
    """TFLite's single-rounding ``MultiplyByQuantizedMultiplier`` (int32 in, int32 out)."""
    total_shift = 31 - np.asarray(shift, dtype=np.int64)
    product = np.asarray(x, dtype=np.int64) * np.asarray(multiplier, dtype=np.int64)
    result = (product + (np.int64(1) << (total_shift - 1))) >> total_shift
    return np.clip(result, INT32_MIN, INT32_MAX)


def per_channel_multipliers(real_multipliers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vector form of ``quantize_multiplier``: arrays of multipliers and shifts."""
    pairs = [quantize_multiplier(float(m)) for m in np.asarray(real_multipliers, dtype=np.float64)]
    return (np.array([p[0] for p in pairs], dtype=np.int64),
            np.array([p[1] for p in pairs], dtype=np.int64))


def quantize_value(real: float, scale: float, zero_point: int) -> int:
    """TFLite's float->quantized for a single constant: ``zp + round(real / scale)`` in float32."""
    return zero_point + tflite_round(float(np.float32(real) / np.float32(scale)))


def activation_range(activation: str, scale: float, zero_point: int,
                     qmin: int = -128, qmax: int = 127) -> tuple[int, int]:
    """Clamp bounds of a fused activation in the output's quantized domain
    (TFLite ``CalculateActivationRangeQuantized``)."""
    if activation == "NONE":
        return qmin, qmax
    if activation == "RELU":
        return max(qmin, quantize_value(0.0, scale, zero_point)), qmax
    if activation == "RELU6":
        return (max(qmin, quantize_value(0.0, scale, zero_point)),
                min(qmax, quantize_value(6.0, scale, zero_point)))
    if activation == "RELU_N1_TO_1":
        return (max(qmin, quantize_value(-1.0, scale, zero_point)),
                min(qmax, quantize_value(1.0, scale, zero_point)))
    raise ValueError(f"unknown activation {activation}")
