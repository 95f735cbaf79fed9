"""gemmlowp-style fixed-point arithmetic (``fixedpoint/fixedpoint.h`` and the helpers in
TFLite's ``kernels/internal/common.h``) used by the quantized SOFTMAX and LOG_SOFTMAX kernels.

A fixed-point value ``Q(m)`` is an int32 raw integer ``r`` standing for ``r / 2**(31 - m)``:
``m`` integer bits, ``31 - m`` fractional bits, one sign bit. The functions take and return
numpy int64 arrays holding int32 values and reproduce C int32 behaviour exactly: additions
wrap (two's complement), products go through ``saturating_rounding_doubling_high_mul``
(gemmlowp's ``operator*``), power-of-two scalings saturate or round to nearest exactly like
gemmlowp. The integer-bit counts are plain Python ints (template parameters in C++).

The generic primitives (``saturating_rounding_doubling_high_mul``, ``rounding_divide_by_pot``,
``wrap_int32``) live in :mod:`zocodegen.numerics` and are reused here.
"""
from __future__ import annotations

import numpy as np

from ..numerics import (INT32_MAX, INT32_MIN, rounding_divide_by_pot,
                        saturating_rounding_doubling_high_mul, wrap_int32)

# gemmlowp's raw int32 constants (value * 2**31 for Q0 unless noted), kept by name so the
# C generator can emit the very same literals.
EXP_MINUS_ONE_EIGHTH_Q0 = 1895147668       # exp(-1/8)
ONE_THIRD_Q0 = 715827883                    # 1/3
# exp(-2**k) for k = -2 .. 4, the barrel shifter of exp_on_negative_values.
EXP_BARREL_SHIFTER_Q0 = ((-2, 1672461947), (-1, 1302514674), (0, 790015084),
                         (1, 290630308), (2, 39332535), (3, 720401), (4, 242))
FORTY_EIGHT_OVER_SEVENTEEN_Q2 = 1515870810  # 48/17 in Q2
MINUS_THIRTY_TWO_OVER_SEVENTEEN_Q2 = -1010580540  # -32/17 in Q2
LOG_2_Q0 = 1488522236                       # log(2)
SQRT_SQRT_HALF_Q0 = 1805811301              # 0.5 ** 0.25
SQRT_HALF_Q0 = 1518500250                   # 0.5 ** 0.5
ONE_QUARTER_Q0 = 536870912                  # 1/4
LOG_ALPHA_N_Q0 = 117049297                  # 11/240 * 2**0.25
LOG_ALPHA_D_Q0 = 127690142                  # 1/20 * 2**0.25
LOG_ALPHA_I_Q0 = 1057819769                 # 2 / 2**0.25 - 2**0.25
LOG_ALPHA_F_Q0 = 638450708                  # 1/4 * 2**0.25


def _i64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def fractional_bits(integer_bits: int) -> int:
    """Fractional bits of an int32 ``Q(integer_bits)`` value (``kFractionalBits``)."""
    return 31 - integer_bits


def constant_pot(exponent: int, integer_bits: int) -> int:
    """gemmlowp ``FixedPoint::ConstantPOT<exponent>``: the raw value of ``2**exponent``."""
    offset = fractional_bits(integer_bits) + exponent
    if not 0 <= offset < 31:
        raise ValueError("constant not exactly representable in this fixed-point format")
    return 1 << offset


def one(integer_bits: int) -> int:
    """gemmlowp ``FixedPoint::One()``: Q0 cannot hold 1.0, so it saturates to INT32_MAX."""
    return INT32_MAX if integer_bits == 0 else 1 << fractional_bits(integer_bits)


def add(a, b) -> np.ndarray:
    """gemmlowp ``operator+``: plain int32 addition (wraps like the compiled C)."""
    return wrap_int32(_i64(a) + _i64(b))


def sub(a, b) -> np.ndarray:
    """gemmlowp ``operator-``: plain int32 subtraction (wraps like the compiled C)."""
    return wrap_int32(_i64(a) - _i64(b))


def mul(a, b) -> np.ndarray:
    """gemmlowp ``operator*`` on fixed-point values: integer bits add up, the raw result is
    ``SaturatingRoundingDoublingHighMul`` of the raws."""
    return saturating_rounding_doubling_high_mul(a, b)


def saturating_add(a, b) -> np.ndarray:
    """TFLite ``SaturatingAddNonGemmlowp`` for int32: exact sum clamped to int32."""
    return np.clip(_i64(a) + _i64(b), INT32_MIN, INT32_MAX)


def saturating_sub(a, b) -> np.ndarray:
    """TFLite ``SaturatingSub`` for int32: exact difference clamped to int32."""
    return np.clip(_i64(a) - _i64(b), INT32_MIN, INT32_MAX)


def rounding_half_sum(a, b) -> np.ndarray:
    """gemmlowp ``RoundingHalfSum`` (VRHADD): ``(a + b + sign) / 2`` with C truncation,
    i.e. the half-sum rounded half away from zero."""
    s = _i64(a) + _i64(b)
    s = s + np.where(s >= 0, 1, -1)
    return np.where(s >= 0, s // 2, -((-s) // 2))


def saturating_rounding_multiply_by_pot(x, exponent) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingMultiplyByPOT`` and TFLite's run-time twin
    ``SaturatingRoundingMultiplyByPOTParam``: a left shift that saturates to the int32 range
    for ``exponent > 0``, ``RoundingDivideByPOT`` for ``exponent < 0``. ``exponent`` may be
    an array (element-wise, as the run-time variant is called per value)."""
    x = _i64(x)
    exponent = _i64(exponent)
    pos = np.maximum(exponent, 0)
    threshold = (np.int64(1) << (31 - pos)) - 1
    shifted = np.where(x > threshold, INT32_MAX,
                       np.where(x < -threshold, INT32_MIN, x << pos))
    down = rounding_divide_by_pot(x, np.maximum(-exponent, 0))
    return np.where(exponent > 0, shifted, np.where(exponent < 0, down, x))


def rescale(x, src_integer_bits: int, dst_integer_bits: int) -> np.ndarray:
    """gemmlowp ``Rescale<dst>``: change the Q format, multiplying the raw value by
    ``2**(src - dst)`` with saturation (left) or rounding (right)."""
    return saturating_rounding_multiply_by_pot(x, src_integer_bits - dst_integer_bits)


def count_leading_zeros_u32(x) -> np.ndarray:
    """TFLite ``CountLeadingZeros(static_cast<uint32_t>(x))``; 32 for zero."""
    u = _i64(x) & 0xFFFFFFFF
    # frexp is exact for integers below 2**53: u = m * 2**e with 0.5 <= m < 1, e = bit length.
    _, bit_length = np.frexp(u.astype(np.float64))
    return np.where(u == 0, 32, 32 - bit_length.astype(np.int64))


def exp_on_interval_between_negative_one_quarter_and_0_excl(a) -> np.ndarray:
    """gemmlowp ``exp_on_interval_between_negative_one_quarter_and_0_excl``: exp(a) for a Q0
    ``a`` in [-1/4, 0), a 4th-order Taylor expansion around -1/8."""
    x = add(a, constant_pot(-3, 0))
    x2 = mul(x, x)
    x3 = mul(x2, x)
    x4 = mul(x2, x2)
    x4_over_4 = saturating_rounding_multiply_by_pot(x4, -2)
    poly = saturating_rounding_multiply_by_pot(
        add(mul(add(x4_over_4, x3), ONE_THIRD_Q0), x2), -1)
    # AddSaturatingIf16Bit is a plain add for int32 raws.
    return add(EXP_MINUS_ONE_EIGHTH_Q0, mul(EXP_MINUS_ONE_EIGHTH_Q0, add(x, poly)))


def exp_on_negative_values(a, integer_bits: int) -> np.ndarray:
    """gemmlowp ``exp_on_negative_values``: exp(a) as Q0 for a ``Q(integer_bits)`` value
    ``a <= 0``. The fractional part modulo 1/4 goes through the Taylor polynomial, then one
    multiplication by exp(-2**k) per set bit k of the remainder (the barrel shifter);
    ``a == 0`` gives Q0 ``One()`` (INT32_MAX)."""
    a = _i64(a)
    frac = fractional_bits(integer_bits)
    one_quarter = constant_pot(-2, integer_bits)
    a_mod_quarter_minus_one_quarter = sub(a & (one_quarter - 1), one_quarter)
    result = exp_on_interval_between_negative_one_quarter_and_0_excl(
        rescale(a_mod_quarter_minus_one_quarter, integer_bits, 0))
    remainder = sub(a_mod_quarter_minus_one_quarter, a)
    for exponent, multiplier in EXP_BARREL_SHIFTER_Q0:
        if integer_bits > exponent:
            bit = np.int64(1) << (frac + exponent)
            result = np.where((remainder & bit) != 0, mul(result, multiplier), result)
    if integer_bits > 5:
        clamp = -(1 << (36 - integer_bits))  # -32.0 in Q(integer_bits)
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, one(0), result)


def one_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    """gemmlowp ``one_over_one_plus_x_for_x_in_0_1``: 1/(1+a) as Q0 for a Q0 ``a`` in [0, 1),
    by three Newton-Raphson iterations on the half denominator in Q2."""
    half_denominator = rounding_half_sum(a, one(0))
    x = add(FORTY_EIGHT_OVER_SEVENTEEN_Q2,
            mul(half_denominator, MINUS_THIRTY_TWO_OVER_SEVENTEEN_Q2))
    for _ in range(3):
        half_denominator_times_x = mul(half_denominator, x)           # Q2
        one_minus = sub(one(2), half_denominator_times_x)             # Q2
        x = add(x, rescale(mul(x, one_minus), 4, 2))                  # Q2*Q2=Q4 -> Q2
    # ExactMulByPot<-1> reinterprets the Q2 raw as Q1, then Rescale<0>.
    return rescale(x, 1, 0)


def get_reciprocal(x, x_integer_digits: int) -> tuple[np.ndarray, np.ndarray]:
    """TFLite ``GetReciprocal``: for a positive ``Q(x_integer_digits)`` value returns
    ``(scale, num_bits_over_unit)`` with ``scale`` a Q0 raw of ``2**num_bits_over_unit / x``,
    i.e. x is normalised into [1, 2) by its leading-zero count and inverted there."""
    x = _i64(x)
    headroom_plus_one = count_leading_zeros_u32(x)
    num_bits_over_unit = x_integer_digits - headroom_plus_one
    # (uint32(x) << headroom_plus_one) - (1u << 31), reinterpreted as int32.
    shifted_sum_minus_one = wrap_int32(((x & 0xFFFFFFFF) << headroom_plus_one) - (1 << 31))
    return one_over_one_plus_x_for_x_in_0_1(shifted_sum_minus_one), num_bits_over_unit


def min_log_x_output_bits(input_bits: int) -> int:
    """TFLite ``min_log_x_output_bits``: integer bits needed to hold log of a Q(input_bits)."""
    for limit, bits in ((90, 7), (44, 6), (21, 5), (10, 4), (4, 3), (1, 2)):
        if input_bits > limit:
            return bits
    return 1


def log_x_for_x_greater_than_or_equal_to_1(input_val, input_integer_bits: int,
                                           output_integer_bits: int) -> np.ndarray:
    """TFLite ``log_x_for_x_greater_than_or_equal_to_1<Out, In>`` (``..._impl``): natural
    log of a ``Q(input_integer_bits)`` value as a ``Q(output_integer_bits)`` raw. The input is
    normalised two ways (by its leading zeros, and after a multiply by sqrt(1/2)); the better
    one feeds a rational approximation around 2**-0.25, accumulated with one spare integer
    bit so the power-of-two part times log(2) may saturate without corrupting the sum."""
    if output_integer_bits < min_log_x_output_bits(input_integer_bits):
        raise ValueError("output integer bits cannot hold logs of these inputs")
    accum_bits = output_integer_bits + 1
    shifted_quarter = rescale(ONE_QUARTER_Q0, 0, accum_bits)

    # The input raw is reinterpreted as Q0; the power-of-two exponent is tracked separately.
    z_a = _i64(input_val)
    z_a_headroom_plus_1 = count_leading_zeros_u32(z_a)
    r_a_tmp = saturating_rounding_multiply_by_pot(z_a, z_a_headroom_plus_1 - 1)
    r_a_raw = saturating_rounding_multiply_by_pot(mul(r_a_tmp, SQRT_HALF_Q0), 1)
    z_a_pow_2_adj = saturating_add(
        saturating_rounding_multiply_by_pot(input_integer_bits - z_a_headroom_plus_1,
                                            31 - accum_bits),
        shifted_quarter)

    z_b = mul(z_a, SQRT_HALF_Q0)
    z_b_headroom = count_leading_zeros_u32(z_b) - 1
    r_b_raw = saturating_rounding_multiply_by_pot(z_a, z_b_headroom)
    z_b_pow_2_adj = saturating_sub(
        saturating_rounding_multiply_by_pot(input_integer_bits - z_b_headroom,
                                            31 - accum_bits),
        shifted_quarter)

    r = np.minimum(r_a_raw, r_b_raw)
    z_pow_2_adj = np.maximum(z_a_pow_2_adj, z_b_pow_2_adj)

    p = rounding_half_sum(r, SQRT_SQRT_HALF_Q0)
    q = sub(r, SQRT_SQRT_HALF_Q0)
    q = add(q, q)
    common_sq = mul(q, q)
    num = add(mul(q, r), mul(mul(q, common_sq), LOG_ALPHA_N_Q0))
    denom_minus_one_0 = add(
        mul(p, add(add(LOG_ALPHA_I_Q0, q), mul(LOG_ALPHA_D_Q0, common_sq))),
        mul(LOG_ALPHA_F_Q0, q))
    recip_denom = one_over_one_plus_x_for_x_in_0_1(denom_minus_one_0)

    num_scaled = rescale(num, 0, accum_bits)
    # Q(accum) * Q0 products stay Q(accum); their sum is rescaled to the output format.
    total = add(mul(z_pow_2_adj, LOG_2_Q0), mul(num_scaled, recip_denom))
    return rescale(total, accum_bits, output_integer_bits)
