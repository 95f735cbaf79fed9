/*
 * QUANTIZE and DEQUANTIZE (zocodegen/reference/quantize.py):
 *   float -> int8 (TFLite AffineQuantize): clamp(round(x / scale) + zp), the division in
 *     float32, round half away from zero; NaN -> 0 and |x / scale| >= 1e9 saturates (our
 *     documented choice for inputs TFLite leaves undefined).
 *   int8 -> int8 (TFLite Requantize): clamp(MBQM(x - zp_in, M, e) + zp_out); in place.
 *   int8 -> float (TFLite Dequantize): scale * (x - zp), one float32 rounding of an exact
 *     product (identical to the double-precision form TFLite writes).
 * No libm: rounding is done on the integer and fractional parts, which float32 gives exactly.
 */
#include "zo_kernels.h"
#include "zo_requant.h"

static int32_t round_half_away(float s)
{
    if (s != s) {
        return 0;
    }
    if (s >= 1e9f) {
        return 1000000000;
    }
    if (s <= -1e9f) {
        return -1000000000;
    }
    int32_t whole = (int32_t)s;              /* truncates toward zero */
    float fraction = s - (float)whole;       /* exact: whole holds s's integer bits */
    if (fraction >= 0.5f) {
        whole += 1;
    } else if (fraction <= -0.5f) {
        whole -= 1;
    }
    return whole;
}

void zo_quantize_f32_s8(const zo_quantize_params *p, const float *input, int8_t *output)
{
    for (int32_t i = 0; i < p->size; ++i) {
        int32_t q = round_half_away(input[i] / p->scale);
        output[i] = zo_offset_clamp_s8(q, p->zero_point, -128, 127);
    }
}

void zo_requantize_s8(const zo_quantize_params *p, const int8_t *input, int8_t *output)
{
    for (int32_t i = 0; i < p->size; ++i) {
        int32_t scaled = zo_mbqm(input[i] + p->input_offset, p->multiplier, (int)p->shift);
        output[i] = zo_offset_clamp_s8(scaled, p->output_offset, -128, 127);
    }
}

void zo_dequantize_s8_f32(const zo_quantize_params *p, const int8_t *input, float *output)
{
    for (int32_t i = 0; i < p->size; ++i) {
        output[i] = (float)(input[i] - p->zero_point) * p->scale;
    }
}
