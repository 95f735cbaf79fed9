/*
 * SOFTMAX and LOG_SOFTMAX for int8, bit-exact with TFLite's reference kernels
 * (reference_ops::Softmax<int8_t, int8_t> and reference_integer_ops::LogSoftmax).
 * Specification: zocodegen/reference/softmax.py and zocodegen/reference/fixedpoint.py.
 *
 * Fixed-point notation: an int32 raw r in Qm.n (m integer bits, n = 31 - m fractional bits)
 * stands for r / 2^n. Formats used here:
 *   Q5.26   scaled input difference (x - max) * beta * scale, the exp input
 *   Q0.31   exp output, reciprocal, everything inside the polynomials
 *   Q2.29   Newton-Raphson iterate of 1/(1+x)
 *   Q12.19  sum of exps (4096 terms of at most 1.0 fit)
 *   Q6.25   log accumulator (one spare integer bit), Q5.26 log output
 *
 * Portability: plain C99, int32 arithmetic only through well-defined operations. Wrapping
 * additions (gemmlowp's operator+ on raws, which the reference wraps like int32) go through
 * uint32; left shifts are done on non-negative or unsigned values, or as exact products;
 * no shift count reaches 32. Both kernels work in place: a row's max and sum of exps are
 * computed before any of its outputs is written, and output[c] only depends on input[c].
 */
#include <limits.h>

#include "zo_kernels.h"
#include "zo_requant.h"

/* Integer bits of the fixed-point formats (TFLite's kScaledDiffIntegerBits etc.). */
#define ZO_SM_DIFF_BITS 5  /* Q5.26 */
#define ZO_SM_ACCUM_BITS 12 /* Q12.19 */
#define ZO_LSM_OUTPUT_BITS 4 /* log-softmax output: [-16, 0] in steps of 16/256 */
#define ZO_LSM_OUTPUT_ZERO_POINT 127

/* gemmlowp's raw constants (zocodegen/reference/fixedpoint.py names them identically). */
#define ZO_EXP_MINUS_ONE_EIGHTH_Q0 ((int32_t)1895147668) /* exp(-1/8) */
#define ZO_ONE_THIRD_Q0 ((int32_t)715827883)             /* 1/3 */
#define ZO_FORTY_EIGHT_OVER_SEVENTEEN_Q2 ((int32_t)1515870810)
#define ZO_MINUS_THIRTY_TWO_OVER_SEVENTEEN_Q2 ((int32_t)-1010580540)
#define ZO_LOG_2_Q0 ((int32_t)1488522236)       /* log(2) */
#define ZO_SQRT_SQRT_HALF_Q0 ((int32_t)1805811301) /* 0.5^0.25 */
#define ZO_SQRT_HALF_Q0 ((int32_t)1518500250)   /* 0.5^0.5 */
#define ZO_ONE_QUARTER_Q0 ((int32_t)536870912)  /* 1/4 */
#define ZO_LOG_ALPHA_N_Q0 ((int32_t)117049297)  /* 11/240 * 2^0.25 */
#define ZO_LOG_ALPHA_D_Q0 ((int32_t)127690142)  /* 1/20 * 2^0.25 */
#define ZO_LOG_ALPHA_I_Q0 ((int32_t)1057819769) /* 2 / 2^0.25 - 2^0.25 */
#define ZO_LOG_ALPHA_F_Q0 ((int32_t)638450708)  /* 1/4 * 2^0.25 */

/* ---------------------------------------------------------------------------------------- */
/* int32 helpers                                                                            */
/* ---------------------------------------------------------------------------------------- */

/* uint32 -> int32 two's-complement reinterpretation, without implementation-defined
 * conversion (compiles to nothing). */
static int32_t zo_s32_from_u32(uint32_t u)
{
    if (u <= (uint32_t)ZO_INT32_MAX) {
        return (int32_t)u;
    }
    return (int32_t)(u - 0x80000000u) + ZO_INT32_MIN;
}

/* gemmlowp operator+ / operator- on raws: int32 addition that wraps. */
static int32_t zo_fp_add(int32_t a, int32_t b)
{
    return zo_s32_from_u32((uint32_t)a + (uint32_t)b);
}

static int32_t zo_fp_sub(int32_t a, int32_t b)
{
    return zo_s32_from_u32((uint32_t)a - (uint32_t)b);
}

/* TFLite SaturatingAddNonGemmlowp / SaturatingSub for int32. */
static int32_t zo_sat_add(int32_t a, int32_t b)
{
    int64_t s = (int64_t)a + (int64_t)b;
    return s > ZO_INT32_MAX ? ZO_INT32_MAX : (s < ZO_INT32_MIN ? ZO_INT32_MIN : (int32_t)s);
}

static int32_t zo_sat_sub(int32_t a, int32_t b)
{
    int64_t s = (int64_t)a - (int64_t)b;
    return s > ZO_INT32_MAX ? ZO_INT32_MAX : (s < ZO_INT32_MIN ? ZO_INT32_MIN : (int32_t)s);
}

/* gemmlowp RoundingHalfSum: (a + b) / 2 rounded half away from zero. */
static int32_t zo_rounding_half_sum(int32_t a, int32_t b)
{
    int64_t s = (int64_t)a + (int64_t)b;
    s += s >= 0 ? 1 : -1;
    return (int32_t)(s / 2); /* C division truncates, as gemmlowp; always fits int32 */
}

/* TFLite CountLeadingZeros(uint32_t): 32 for zero. */
static int zo_clz_u32(uint32_t x)
{
    if (x == 0u) {
        return 32;
    }
#if defined(__GNUC__) && (UINT_MAX == 0xFFFFFFFFu)
    return __builtin_clz(x); /* CLZ on Cortex-M */
#else
    {
        int n = 0;
        while ((x & 0x80000000u) == 0u) {
            x <<= 1;
            ++n;
        }
        return n;
    }
#endif
}

/* gemmlowp SaturatingRoundingMultiplyByPOT (and TFLite's run-time ...POTParam): x * 2^exponent,
 * saturating to int32 when exponent > 0, RoundingDivideByPOT when exponent < 0
 * (-31 <= exponent). The x = 0, exponent = 31 case (TFLite computes 0 * (1 << 31), undefined
 * in C) is answered without shifting. */
static int32_t zo_srmbpot(int32_t x, int exponent)
{
    if (exponent > 0) {
        int32_t threshold;
        if (exponent >= 31) {
            return x > 0 ? ZO_INT32_MAX : (x < 0 ? ZO_INT32_MIN : 0);
        }
        threshold = (int32_t)((INT32_C(1) << (31 - exponent)) - 1);
        if (x > threshold) {
            return ZO_INT32_MAX;
        }
        if (x < -threshold) {
            return ZO_INT32_MIN;
        }
        return x * (INT32_C(1) << exponent); /* |x| <= threshold: the product is exact */
    }
    if (exponent < 0) {
        return zo_rdbpot(x, -exponent);
    }
    return x;
}

/* ---------------------------------------------------------------------------------------- */
/* gemmlowp / TFLite fixed-point functions                                                  */
/* ---------------------------------------------------------------------------------------- */

/* gemmlowp exp_on_interval_between_negative_one_quarter_and_0_excl: exp(a) for Q0.31 a in
 * [-1/4, 0), 4th-order Taylor expansion around -1/8. Q0.31 in, Q0.31 out. */
static int32_t zo_exp_on_interval_between_negative_one_quarter_and_0_excl(int32_t a)
{
    const int32_t x = zo_fp_add(a, INT32_C(1) << 28); /* a + 1/8 */
    const int32_t x2 = zo_srdhm(x, x);
    const int32_t x3 = zo_srdhm(x2, x);
    const int32_t x4 = zo_srdhm(x2, x2);
    const int32_t x4_over_4 = zo_srmbpot(x4, -2);
    const int32_t x4_over_24_plus_x3_over_6_plus_x2_over_2 = zo_srmbpot(
        zo_fp_add(zo_srdhm(zo_fp_add(x4_over_4, x3), ZO_ONE_THIRD_Q0), x2), -1);
    return zo_fp_add(ZO_EXP_MINUS_ONE_EIGHTH_Q0,
                     zo_srdhm(ZO_EXP_MINUS_ONE_EIGHTH_Q0,
                              zo_fp_add(x, x4_over_24_plus_x3_over_6_plus_x2_over_2)));
}

/* One stage of gemmlowp's exp barrel shifter: multiply a Q0.31 result by exp(-2^exponent)
 * when the bit of 2^exponent is set in the Q5.26 remainder. */
static int32_t zo_exp_barrel(int32_t result, int32_t remainder, int exponent,
                             int32_t exp_of_minus_pot_q0)
{
    const int32_t bit = INT32_C(1) << (31 - ZO_SM_DIFF_BITS + exponent);
    return (remainder & bit) != 0 ? zo_srdhm(result, exp_of_minus_pot_q0) : result;
}

/* gemmlowp exp_on_negative_values<int32, 5>: exp(a) for a Q5.26 a <= 0, result Q0.31.
 * a mod 1/4 goes through the polynomial, then one multiplication by exp(-2^k) per set bit k of
 * the rest (k = -2 .. 4: bits 24 .. 30 of the Q5.26 raw). a = 0 gives Q0.31 "one", INT32_MAX.
 * (The clamp below -32 of gemmlowp only exists for more than 5 integer bits.) */
static int32_t zo_exp_on_negative_values_q5(int32_t a)
{
    const int32_t one_quarter = INT32_C(1) << (31 - ZO_SM_DIFF_BITS - 2); /* 1/4 in Q5.26 */
    const int32_t a_mod_quarter_minus_one_quarter =
        zo_fp_sub(a & (one_quarter - 1), one_quarter);
    int32_t result = zo_exp_on_interval_between_negative_one_quarter_and_0_excl(
        zo_srmbpot(a_mod_quarter_minus_one_quarter, ZO_SM_DIFF_BITS)); /* Q5.26 -> Q0.31 */
    const int32_t remainder = zo_fp_sub(a_mod_quarter_minus_one_quarter, a);
    /* remainder = -a rounded down to a multiple of 1/4: one factor exp(-2^k) per set bit */
    result = zo_exp_barrel(result, remainder, -2, 1672461947); /* exp(-1/4) */
    result = zo_exp_barrel(result, remainder, -1, 1302514674); /* exp(-1/2) */
    result = zo_exp_barrel(result, remainder, 0, 790015084);   /* exp(-1) */
    result = zo_exp_barrel(result, remainder, 1, 290630308);   /* exp(-2) */
    result = zo_exp_barrel(result, remainder, 2, 39332535);    /* exp(-4) */
    result = zo_exp_barrel(result, remainder, 3, 720401);      /* exp(-8) */
    result = zo_exp_barrel(result, remainder, 4, 242);         /* exp(-16) */
    return a == 0 ? ZO_INT32_MAX : result;
}

/* gemmlowp one_over_one_plus_x_for_x_in_0_1: 1/(1+a) for Q0.31 a in [0, 1), result Q0.31.
 * Three Newton-Raphson iterations on the half denominator, iterate in Q2.29. */
static int32_t zo_one_over_one_plus_x_for_x_in_0_1(int32_t a)
{
    const int32_t half_denominator = zo_rounding_half_sum(a, ZO_INT32_MAX); /* Q0.31 */
    const int32_t one_q2 = INT32_C(1) << 29;
    int32_t x = zo_fp_add(ZO_FORTY_EIGHT_OVER_SEVENTEEN_Q2,
                          zo_srdhm(half_denominator, ZO_MINUS_THIRTY_TWO_OVER_SEVENTEEN_Q2));
    int i;
    for (i = 0; i < 3; ++i) {
        const int32_t half_denominator_times_x = zo_srdhm(half_denominator, x); /* Q2.29 */
        const int32_t one_minus_half_denominator_times_x =
            zo_fp_sub(one_q2, half_denominator_times_x);                       /* Q2.29 */
        /* Q2.29 * Q2.29 = Q4.27, rescaled to Q2.29 (saturating left shift by 2) */
        x = zo_fp_add(x, zo_srmbpot(zo_srdhm(x, one_minus_half_denominator_times_x), 2));
    }
    /* ExactMulByPot<-1>: the Q2.29 raw read as Q1.30, then Rescale to Q0.31. */
    return zo_srmbpot(x, 1);
}

/* TFLite GetReciprocal(x, 12, &num_bits_over_unit): for a positive Q12.19 x returns a Q0.31
 * raw of 2^num_bits_over_unit / x (x normalised into [1, 2) by its leading zeros). x is the
 * raw bit pattern (a sum that may have wrapped for 4096+ terms). */
static int32_t zo_get_reciprocal_q12(uint32_t x, int32_t *num_bits_over_unit)
{
    const int headroom_plus_one = zo_clz_u32(x);
    const uint32_t shifted = headroom_plus_one < 32 ? x << headroom_plus_one : 0u;
    *num_bits_over_unit = ZO_SM_ACCUM_BITS - headroom_plus_one;
    /* shifted - 1.0, Q0.31 in [0, 1) */
    return zo_one_over_one_plus_x_for_x_in_0_1(zo_s32_from_u32(shifted - 0x80000000u));
}

/* TFLite log_x_for_x_greater_than_or_equal_to_1<5, 12> (..._impl with 6 accumulator integer
 * bits): natural log of a Q12.19 value >= 1 as a Q5.26 raw. */
static int32_t zo_log_x_for_x_greater_than_or_equal_to_1_q12_to_q5(int32_t input_val)
{
    enum { kInputBits = ZO_SM_ACCUM_BITS, kAccumBits = ZO_SM_DIFF_BITS + 1 };
    const int32_t shifted_quarter = zo_srmbpot(ZO_ONE_QUARTER_Q0, -kAccumBits); /* Q6.25 */

    /* The input raw is read as Q0.31; its power-of-two exponent is tracked separately. */
    const int32_t z_a = input_val;
    const int z_a_headroom_plus_1 = zo_clz_u32((uint32_t)z_a);
    const int32_t r_a_tmp = zo_srmbpot(z_a, z_a_headroom_plus_1 - 1);
    const int32_t r_a_raw = zo_srmbpot(zo_srdhm(r_a_tmp, ZO_SQRT_HALF_Q0), 1);
    /* (kInputBits - headroom) as a Q6.25 integer, plus 1/4 */
    const int32_t z_a_pow_2_adj =
        zo_sat_add(zo_srmbpot(kInputBits - z_a_headroom_plus_1, 31 - kAccumBits),
                   shifted_quarter);

    const int32_t z_b = zo_srdhm(z_a, ZO_SQRT_HALF_Q0);
    const int z_b_headroom = zo_clz_u32((uint32_t)z_b) - 1;
    const int32_t r_b_raw = zo_srmbpot(z_a, z_b_headroom);
    const int32_t z_b_pow_2_adj =
        zo_sat_sub(zo_srmbpot(kInputBits - z_b_headroom, 31 - kAccumBits), shifted_quarter);

    /* the better normalisation: r in Q0.31 near 2^-0.25, z_pow_2_adj in Q6.25 */
    const int32_t r = r_a_raw < r_b_raw ? r_a_raw : r_b_raw;
    const int32_t z_pow_2_adj = z_a_pow_2_adj > z_b_pow_2_adj ? z_a_pow_2_adj : z_b_pow_2_adj;

    /* rational approximation of log(r) around 2^-0.25, all Q0.31 */
    const int32_t p = zo_rounding_half_sum(r, ZO_SQRT_SQRT_HALF_Q0);
    const int32_t q_half = zo_fp_sub(r, ZO_SQRT_SQRT_HALF_Q0);
    const int32_t q = zo_fp_add(q_half, q_half);
    const int32_t common_sq = zo_srdhm(q, q);
    const int32_t num = zo_fp_add(zo_srdhm(q, r),
                                  zo_srdhm(zo_srdhm(q, common_sq), ZO_LOG_ALPHA_N_Q0));
    const int32_t denom_minus_one_0 = zo_fp_add(
        zo_srdhm(p, zo_fp_add(zo_fp_add(ZO_LOG_ALPHA_I_Q0, q),
                              zo_srdhm(ZO_LOG_ALPHA_D_Q0, common_sq))),
        zo_srdhm(ZO_LOG_ALPHA_F_Q0, q));
    const int32_t recip_denom = zo_one_over_one_plus_x_for_x_in_0_1(denom_minus_one_0);

    const int32_t num_scaled = zo_srmbpot(num, -kAccumBits); /* Q0.31 -> Q6.25 */
    /* Q6.25 * Q0.31 products stay Q6.25; their sum is rescaled to Q5.26 */
    const int32_t total = zo_fp_add(zo_srdhm(z_pow_2_adj, ZO_LOG_2_Q0),
                                    zo_srdhm(num_scaled, recip_denom));
    return zo_srmbpot(total, kAccumBits - ZO_SM_DIFF_BITS);
}

/* ---------------------------------------------------------------------------------------- */
/* row helpers shared by both kernels                                                       */
/* ---------------------------------------------------------------------------------------- */

static int32_t zo_row_max(const int8_t *row, int32_t depth)
{
    int32_t max_in_row = -128;
    int32_t c;
    for (c = 0; c < depth; ++c) {
        if (row[c] > max_in_row) {
            max_in_row = row[c];
        }
    }
    return max_in_row;
}

/* MultiplyByQuantizedMultiplier(GreaterThanOne)(diff, multiplier, left_shift): the integer
 * difference x - max as Q5.26 (exact for diff >= diff_min; zo_mbqm wraps like TFLite
 * otherwise, but such differences are never passed). */
static int32_t zo_scaled_diff_q5(const zo_softmax_params *p, int32_t diff)
{
    return zo_mbqm(diff, p->input_multiplier, (int)p->input_left_shift);
}

/* Sum over the row of exp(scaled diff) rescaled to Q12.19 (rounding right shift by 12), for
 * the differences >= diff_min. Returned as the raw uint32 bit pattern: TFLite adds in int32,
 * which cannot overflow below 4096 terms; longer rows wrap as in the reference. */
static uint32_t zo_sum_of_exps_q12(const zo_softmax_params *p, const int8_t *row,
                                   int32_t max_in_row)
{
    uint32_t sum_of_exps = 0u;
    int32_t c;
    for (c = 0; c < p->depth; ++c) {
        const int32_t diff = (int32_t)row[c] - max_in_row;
        if (diff >= p->diff_min) {
            const int32_t exp_q0 = zo_exp_on_negative_values_q5(zo_scaled_diff_q5(p, diff));
            sum_of_exps += (uint32_t)zo_srmbpot(exp_q0, -ZO_SM_ACCUM_BITS); /* >= 0 */
        }
    }
    return sum_of_exps;
}

/* ---------------------------------------------------------------------------------------- */
/* kernels                                                                                  */
/* ---------------------------------------------------------------------------------------- */

/* reference_ops::Softmax<int8_t, int8_t> (tensorflow/lite/kernels/internal/reference/
 * softmax.h): output = exp(diff) / sum * 256 - 128, scale 1/256, zero point -128.
 * TFLite's reference kernel aborts (a TFLITE_CHECK; the numpy reference raises ValueError)
 * when the RoundingDivideByPOT exponent below exceeds 31, i.e. when a row's sum of exps
 * reaches 512 (long, flat rows). Every probability is then below 1/512, so this kernel outputs
 * the correctly rounded value, -128, instead. */
void zo_softmax_s8(const zo_softmax_params *p, const int8_t *input, int8_t *output)
{
    const int8_t *in_row = input;
    int8_t *out_row = output;
    int32_t i;
    for (i = 0; i < p->rows; ++i, in_row += p->depth, out_row += p->depth) {
        const int32_t max_in_row = zo_row_max(in_row, p->depth);
        const uint32_t sum_of_exps = zo_sum_of_exps_q12(p, in_row, max_in_row);
        int32_t num_bits_over_unit;
        const int32_t shifted_scale = zo_get_reciprocal_q12(sum_of_exps, &num_bits_over_unit);
        /* Q0.31 product -> multiples of 1/256 */
        const int32_t exponent = num_bits_over_unit + 31 - 8;
        int32_t c;
        for (c = 0; c < p->depth; ++c) {
            const int32_t diff = (int32_t)in_row[c] - max_in_row;
            int8_t out = -128;
            if (diff >= p->diff_min) {
                const int32_t exp_q0 = zo_exp_on_negative_values_q5(zo_scaled_diff_q5(p, diff));
                /* the product is in [0, 2^31): below half a unit once exponent >= 32 */
                const int32_t unsat_output =
                    exponent <= 31
                        ? zo_rdbpot(zo_srdhm(shifted_scale, exp_q0), (int)exponent)
                        : 0;
                out = zo_clamp_s8(unsat_output - 128, -128, 127);
            }
            out_row[c] = out;
        }
    }
}

/* reference_integer_ops::LogSoftmax (int8, tensorflow/lite/kernels/internal/reference/
 * integer_ops/log_softmax.h): output = (scaled diff - log(sum of exps)) in Q5.26, divided by
 * 2^22 to the output scale 16/256, plus zero point 127. */
void zo_log_softmax_s8(const zo_softmax_params *p, const int8_t *input, int8_t *output)
{
    const int8_t *in_row = input;
    int8_t *out_row = output;
    int32_t i;
    for (i = 0; i < p->rows; ++i, in_row += p->depth, out_row += p->depth) {
        const int32_t max_in_row = zo_row_max(in_row, p->depth);
        const uint32_t sum_of_exps = zo_sum_of_exps_q12(p, in_row, max_in_row);
        /* log(sum) in Q5.26 */
        const int32_t log_sum_q5 =
            zo_log_x_for_x_greater_than_or_equal_to_1_q12_to_q5(zo_s32_from_u32(sum_of_exps));
        /* The most negative Q5.26 value plus log(sum), mapped back to an input difference
         * (Q5.26 -> integer by the inverse of the input multiplier): at or below it the
         * subtraction below would overflow, so the output is the minimum. */
        const int32_t shifted_log_sum = zo_fp_add(log_sum_q5, ZO_INT32_MIN);
        const int32_t reversed = zo_mbqm(shifted_log_sum, p->reverse_scaling_divisor,
                                         -(int)p->reverse_scaling_right_shift);
        int32_t c;
        for (c = 0; c < p->depth; ++c) {
            const int32_t diff = (int32_t)in_row[c] - max_in_row;
            int8_t out = -128;
            /* TFLite: diff > max(diff_min - 1, reversed) (strict, unlike the sum's >=) */
            if (diff >= p->diff_min && diff > reversed) {
                const int32_t diff_q5 = zo_scaled_diff_q5(p, diff);
                const int32_t unsat_output = zo_rdbpot(zo_fp_sub(diff_q5, log_sum_q5),
                                                       31 - ZO_SM_DIFF_BITS - ZO_LSM_OUTPUT_BITS);
                out = zo_clamp_s8(unsat_output + ZO_LSM_OUTPUT_ZERO_POINT, -128, 127);
            }
            out_row[c] = out;
        }
    }
}

/* The zeroth-order trainer's loss: cross-entropy -log softmax(logits)[label] as an int32 in
 * Q5.26 (units of 2^-26 nats), i.e. log(sum of exps) - scaled diff of the label, with the
 * LOG_SOFTMAX arithmetic above, so every target computes the same integer without libm.
 * p holds LOG_SOFTMAX's parameters for the logits' scale; rows is ignored (one row of depth
 * logits). A label more than ~32 nats below the maximum saturates at INT32_MAX.
 * numpy twin: zocodegen.reference.softmax.cross_entropy_q26. */
int32_t zo_cross_entropy_q26(const zo_softmax_params *p, const int8_t *logits, int32_t label)
{
    const int32_t max_in_row = zo_row_max(logits, p->depth);
    const uint32_t sum_of_exps = zo_sum_of_exps_q12(p, logits, max_in_row);
    const int32_t log_sum_q5 =
        zo_log_x_for_x_greater_than_or_equal_to_1_q12_to_q5(zo_s32_from_u32(sum_of_exps));
    const int32_t diff = (int32_t)logits[label] - max_in_row;
    if (diff < p->diff_min) {
        return ZO_INT32_MAX;
    }
    return zo_sat_sub(log_sum_q5, zo_scaled_diff_q5(p, diff));
}

/* softmax(logits) - onehot(label) in Q24 from the loss's own Q12.19 terms:
 * p_j = round(term_j 2^24 / sum), half up (both are non-negative); the back-propagation of
 * the training engine starts here (zo_backprop.c). numpy twin:
 * zocodegen.reference.softmax.softmax_gradient_q24. */
void zo_softmax_gradient_q24(const zo_softmax_params *p, const int8_t *logits, int32_t label,
                             int32_t *gradient)
{
    const int32_t max_in_row = zo_row_max(logits, p->depth);
    const uint32_t sum = zo_sum_of_exps_q12(p, logits, max_in_row);
    for (int32_t c = 0; c < p->depth; ++c) {
        const int32_t diff = (int32_t)logits[c] - max_in_row;
        uint32_t term = 0u;
        if (diff >= p->diff_min) {
            const int32_t exp_q0 = zo_exp_on_negative_values_q5(zo_scaled_diff_q5(p, diff));
            term = (uint32_t)zo_srmbpot(exp_q0, -ZO_SM_ACCUM_BITS);
        }
        const int64_t q = (int64_t)((((uint64_t)term << 24) + sum / 2u) / sum);
        gradient[c] = (int32_t)(q - (c == label ? (int64_t)1 << 24 : 0));
    }
}
