/*
 * TFLite's integer requantization arithmetic, bit-exact with tflite::MultiplyByQuantizedMultiplier
 * and gemmlowp's fixed-point primitives (zocodegen/numerics.py is the numpy twin).
 *
 *   zo_mbqm():        default (double rounding) form used by CONV_2D, DEPTHWISE_CONV_2D, ADD,
 *                     MUL, MEAN and int8 QUANTIZE:
 *                     RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x << max(e,0), m), max(-e,0))
 *   zo_mbqm_pos():    zo_mbqm for a positive multiplier (every generated one) without the
 *                     64-bit division: the fast kernels' form.
 *   zo_mbqm_single(): single rounding, (x * m + 2^(30-e)) >> (31-e), what ai_edge_litert's
 *                     FULLY_CONNECTED uses.
 *
 * Everything here is static inline: no globals, no libm.
 */
#ifndef ZO_REQUANT_H
#define ZO_REQUANT_H

#include <stdint.h>

#include "zo_simd.h"

#define ZO_INT32_MIN ((int32_t)(-2147483647 - 1))
#define ZO_INT32_MAX ((int32_t)2147483647)

/* gemmlowp SaturatingRoundingDoublingHighMul: round(a * b / 2^31), saturating the one overflow. */
static inline int32_t zo_srdhm(int32_t a, int32_t b)
{
    if (a == b && a == ZO_INT32_MIN) {
        return ZO_INT32_MAX;
    }
    int64_t ab = (int64_t)a * (int64_t)b;
    int64_t nudge = ab >= 0 ? ((int64_t)1 << 30) : (1 - ((int64_t)1 << 30));
    return (int32_t)((ab + nudge) / ((int64_t)1 << 31)); /* C division truncates, as gemmlowp */
}

/* gemmlowp RoundingDivideByPOT: x / 2^exponent, rounding half away from zero (0 <= exponent <= 31). */
static inline int32_t zo_rdbpot(int32_t x, int exponent)
{
    int32_t mask = (int32_t)((1u << exponent) - 1u);
    int32_t remainder = x & mask;
    int32_t threshold = (mask >> 1) + (int32_t)((uint32_t)x >> 31);
    return (x >> exponent) + (remainder > threshold ? 1 : 0);
}

/* tflite::MultiplyByQuantizedMultiplier (double rounding); the left shift wraps like int32. */
static inline int32_t zo_mbqm(int32_t x, int32_t multiplier, int shift)
{
    int left = shift > 0 ? shift : 0;
    int right = shift > 0 ? 0 : -shift;
    int32_t shifted = (int32_t)((uint32_t)x << left);
    return zo_rdbpot(zo_srdhm(shifted, multiplier), right);
}

/* SRDHM(x, m) for m >= 0 without a 64-bit intermediate: four instructions instead of five.
 * SRDHM's nudge makes it round half up, h = floor((x m + 2^30) / 2^31)
 * = floor((x (2m) + 2^31) / 2^32), and it saturates only for m = INT32_MIN. SMMULR(x, b) is
 * floor((x b + 2^31) / 2^32). With m < 2^30, b = 2m fits and h = SMMULR(x, 2m). With
 * m >= 2^30 (every normalised multiplier) 2m does not fit: as an int32 it is 2m - 2^32, and
 * SMMULR(x, 2m - 2^32) = floor((x (2m) + 2^31) / 2^32) - x exactly, so x is added back. The
 * sign of the int32 2m says which: h = SMMULR(x, 2m) + (x & (2m >> 31)), one SMMLAR. */
static inline int32_t zo_high_mul_doubled(int32_t x, int32_t doubled)
{
    return zo_smmlar(x, doubled, x & (doubled >> 31)); /* the add is SMMLAR's accumulate */
}

/* doubled = 2 * multiplier as an int32 (it wraps for multiplier >= 2^30) */
static inline int32_t zo_doubled(int32_t multiplier)
{
    return (int32_t)((uint32_t)multiplier << 1);
}

static inline int32_t zo_high_mul(int32_t x, int32_t multiplier)
{
    return zo_high_mul_doubled(x, zo_doubled(multiplier));
}

/* (h - [h < 0]) >> (r - 1), the first of RoundingDivideByPOT(h, r)'s nested floors
 * (zo_mbqm_shifts), for r >= 1 given as right_1 = r - 1 */
static inline int32_t zo_halving_shift(int32_t high, int32_t right_1)
{
    return (high - (int32_t)((uint32_t)high >> 31)) >> right_1;
}

/* zo_mbqm for multiplier > 0, the same integer in fewer instructions (zo_mbqm_shifts: with
 * the shift split into left = max(shift, 0) and right = max(-shift, 0) once per channel).
 *  - the doubling high multiply as zo_high_mul;
 *  - RoundingDivideByPOT(h, r), r >= 1, rounds half away from zero:
 *    floor((h + 2^(r-1) - [h < 0]) / 2^r) = floor((floor((h - [h < 0]) / 2^(r-1)) + 1) / 2)
 *    (nested floors), taken as y = (h - [h < 0]) >> (r - 1), then (y >> 1) + (y & 1), which
 *    cannot overflow (h > INT32_MIN, so h - 1 does not wrap). */
static inline int32_t zo_mbqm_shifts(int32_t x, int32_t multiplier, int32_t left, int32_t right)
{
    int32_t high = zo_high_mul((int32_t)((uint32_t)x << left), multiplier);
    if (right == 0) {
        return high;
    }
    const int32_t y = zo_halving_shift(high, right - 1);
    return (y >> 1) + (y & 1);
}

static inline int32_t zo_mbqm_pos(int32_t x, int32_t multiplier, int32_t shift)
{
    int32_t left = shift > 0 ? shift : 0;
    return zo_mbqm_shifts(x, multiplier, left, left - shift);
}

/* Single-rounding MultiplyByQuantizedMultiplier (ai_edge_litert FULLY_CONNECTED). */
static inline int32_t zo_mbqm_single(int32_t x, int32_t multiplier, int shift)
{
    int total_shift = 31 - shift;
    int64_t result = ((int64_t)x * multiplier + ((int64_t)1 << (total_shift - 1))) >> total_shift;
    if (result > ZO_INT32_MAX) {
        return ZO_INT32_MAX;
    }
    if (result < ZO_INT32_MIN) {
        return ZO_INT32_MIN;
    }
    return (int32_t)result;
}

/* max then min, two conditional moves each (the nested form compiles to branches) */
static inline int8_t zo_clamp_s8(int32_t x, int32_t lo, int32_t hi)
{
    x = x < lo ? lo : x;
    x = x > hi ? hi : x;
    return (int8_t)x;
}

/* scaled + zero point, clamped to [lo, hi]; the sum is formed in 64 bits so a saturated
 * multiplier result cannot overflow (the numpy reference never wraps here either). */
static inline int8_t zo_offset_clamp_s8(int32_t scaled, int32_t offset, int32_t lo, int32_t hi)
{
    int64_t x = (int64_t)scaled + offset;
    return (int8_t)(x < lo ? lo : (x > hi ? hi : x));
}

/* The forms of the fast kernels' per-channel output step, chosen per layer (zo_requant_form)
 * and passed to the kernels' inner functions as a literal. */
#define ZO_REQUANT_GENERAL 0 /* any shift: zo_mbqm_pos, then the clamp to [lo, hi] */
#define ZO_REQUANT_INT8 1    /* every shift negative, no clamp but int8's own */
#define ZO_REQUANT_CLAMPED 2 /* every shift negative, a fused activation's [lo, hi] */

/* 2 * (MBQM(acc) + output_offset) + (0 or 1), saturated, for shift < 0, from the channel's
 * values prepared once: doubled = 2 * multiplier as an int32 (zo_high_mul), right_1 =
 * -shift - 1, and the layer's c = 1 + 2 * output_offset. Four instructions after the loads:
 *  - h = zo_high_mul_doubled(acc, doubled), one AND and one SMMLAR;
 *  - y = zo_halving_shift(h, right_1) as in zo_mbqm_shifts, whose result is then
 *    (y >> 1) + (y & 1) = floor((y + 1) / 2);
 *  - + output_offset: floor((y + 1) / 2) + offset is floor((y + c) / 2), so one QADD of c
 *    here and the halving in the clamp that follows (an SSAT's operand shift for int8). QADD
 *    saturates only where y + c leaves int32, and there floor((y + c) / 2) is beyond
 *    +-2^30, which any clamp to int8 maps to the same bound. */
static inline int32_t zo_requantize_doubled(int32_t acc, int32_t doubled, int32_t right_1,
                                            int32_t c)
{
    return zo_qadd(zo_halving_shift(zo_high_mul_doubled(acc, doubled), right_1), c);
}

/* ZO_REQUANT_INT8 and ZO_REQUANT_CLAMPED from the prepared values (zo_requantize_doubled). */
static inline int8_t zo_requantize_prepared(int32_t acc, int32_t doubled, int32_t right_1,
                                            int32_t c, const int form, int32_t lo, int32_t hi)
{
    const int32_t twice = zo_requantize_doubled(acc, doubled, right_1, c);
    if (form == ZO_REQUANT_INT8) {
        return (int8_t)zo_ssat8_half(twice);
    }
    return zo_clamp_s8(twice >> 1, lo, hi);
}

/* The per-channel output step of the fast CONV_2D / DEPTHWISE_CONV_2D kernels (multiplier
 * >= 0): clamp(MBQM(acc) + offset) in the layer's form. QADD saturates where the sum would
 * wrap, which the clamp then maps to act_max exactly as the 64-bit sum of
 * zo_offset_clamp_s8 does. */
static inline int8_t zo_requantize_channel(int32_t acc, int32_t multiplier, int32_t shift,
                                           const int form, int32_t offset, int32_t lo,
                                           int32_t hi)
{
    if (form != ZO_REQUANT_GENERAL) {
        return zo_requantize_prepared(acc, zo_doubled(multiplier), -shift - 1, 1 + 2 * offset,
                                      form, lo, hi);
    }
    return zo_clamp_s8(zo_qadd(zo_mbqm_pos(acc, multiplier, shift), offset), lo, hi);
}

/* A layer's form: right_shift_only (the generator sets it when every shift is negative),
 * then whether its activation range is int8's own. */
static inline int zo_requant_form(int32_t right_shift_only, int32_t act_min, int32_t act_max)
{
    if (!right_shift_only) {
        return ZO_REQUANT_GENERAL;
    }
    return act_min == -128 && act_max == 127 ? ZO_REQUANT_INT8 : ZO_REQUANT_CLAMPED;
}

#endif /* ZO_REQUANT_H */
