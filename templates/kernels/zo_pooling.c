/*
 * AVERAGE_POOL_2D, MAX_POOL_2D (TFLite reference_integer_ops::AveragePool / MaxPool) and MEAN
 * (reference_ops::QuantizedMeanOrSum) for int8 (zocodegen/reference/pooling.py).
 *
 * Pools see only in-bounds taps: the average divides by their count, rounding half away from
 * zero; both clamp to the fused activation range. Input and output share quantization.
 * MEAN: y = clamp(MBQM(sum - zp_in * count, M', e') + zp_out), 1/count folded into M', e'.
 */
#include "zo_kernels.h"
#include "zo_requant.h"

/* The in-bounds window [y_lo, y_hi) x [x_lo, x_hi) of output position (oy, ox). */
typedef struct {
    int32_t y_lo, y_hi, x_lo, x_hi;
} pool_window;

static pool_window window_at(const zo_pool_params *p, int32_t oy, int32_t ox)
{
    pool_window w;
    int32_t y0 = oy * p->stride_h - p->pad_top;
    int32_t x0 = ox * p->stride_w - p->pad_left;
    w.y_lo = y0 < 0 ? 0 : y0;
    w.x_lo = x0 < 0 ? 0 : x0;
    w.y_hi = y0 + p->filter_h < p->in_h ? y0 + p->filter_h : p->in_h;
    w.x_hi = x0 + p->filter_w < p->in_w ? x0 + p->filter_w : p->in_w;
    return w;
}

void zo_average_pool_s8(const zo_pool_params *p, const int8_t *input, int8_t *output)
{
    for (int32_t b = 0; b < p->batches; ++b) {
        const int8_t *image = input + b * p->in_h * p->in_w * p->channels;
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            for (int32_t ox = 0; ox < p->out_w; ++ox) {
                pool_window w = window_at(p, oy, ox);
                int32_t count = (w.y_hi - w.y_lo) * (w.x_hi - w.x_lo);
                for (int32_t c = 0; c < p->channels; ++c) {
                    int32_t sum = 0;
                    for (int32_t y = w.y_lo; y < w.y_hi; ++y) {
                        for (int32_t x = w.x_lo; x < w.x_hi; ++x) {
                            sum += image[(y * p->in_w + x) * p->channels + c];
                        }
                    }
                    if (count < 1) {
                        count = 1; /* a window entirely in the padding averages to 0 */
                    }
                    int32_t average = sum > 0 ? (sum + count / 2) / count : (sum - count / 2) / count;
                    *output++ = zo_clamp_s8(average, p->act_min, p->act_max);
                }
            }
        }
    }
}

void zo_max_pool_s8(const zo_pool_params *p, const int8_t *input, int8_t *output)
{
    for (int32_t b = 0; b < p->batches; ++b) {
        const int8_t *image = input + b * p->in_h * p->in_w * p->channels;
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            for (int32_t ox = 0; ox < p->out_w; ++ox) {
                pool_window w = window_at(p, oy, ox);
                for (int32_t c = 0; c < p->channels; ++c) {
                    int32_t best = -128;
                    for (int32_t y = w.y_lo; y < w.y_hi; ++y) {
                        for (int32_t x = w.x_lo; x < w.x_hi; ++x) {
                            int32_t v = image[(y * p->in_w + x) * p->channels + c];
                            best = v > best ? v : best;
                        }
                    }
                    *output++ = zo_clamp_s8(best, p->act_min, p->act_max);
                }
            }
        }
    }
}

void zo_mean_s8(const zo_mean_params *p, const int8_t *input, int8_t *output)
{
    const int32_t *s = p->in_shape;
    const int32_t strides[4] = {s[1] * s[2] * s[3], s[2] * s[3], s[3], 1};
    /* Output positions iterate the kept axes; reduced axes collapse to one position. */
    int32_t outer[4], inner[4];
    for (int k = 0; k < 4; ++k) {
        outer[k] = p->reduce[k] ? 1 : s[k];
        inner[k] = p->reduce[k] ? s[k] : 1;
    }
    for (int32_t o0 = 0; o0 < outer[0]; ++o0) {
        for (int32_t o1 = 0; o1 < outer[1]; ++o1) {
            for (int32_t o2 = 0; o2 < outer[2]; ++o2) {
                for (int32_t o3 = 0; o3 < outer[3]; ++o3) {
                    int32_t sum = 0;
                    for (int32_t r0 = 0; r0 < inner[0]; ++r0) {
                        for (int32_t r1 = 0; r1 < inner[1]; ++r1) {
                            for (int32_t r2 = 0; r2 < inner[2]; ++r2) {
                                for (int32_t r3 = 0; r3 < inner[3]; ++r3) {
                                    sum += input[(o0 + r0) * strides[0] + (o1 + r1) * strides[1]
                                                 + (o2 + r2) * strides[2] + (o3 + r3) * strides[3]];
                                }
                            }
                        }
                    }
                    int32_t centred = sum - p->input_zero_point * p->count;
                    *output++ = zo_offset_clamp_s8(zo_mbqm(centred, p->multiplier, (int)p->shift),
                                                   p->output_offset, -128, 127);
                }
            }
        }
    }
}
