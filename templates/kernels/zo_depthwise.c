/*
 * DEPTHWISE_CONV_2D, int8 per-channel: TFLite reference_integer_ops::DepthwiseConvPerChannel
 * (zocodegen/reference/conv.py is the numpy twin).
 *
 *   acc[c] = bias[c] + sum over in-bounds taps (x[c / depth_multiplier] + input_offset) * w[c]
 *   y[c]   = clamp(MultiplyByQuantizedMultiplier(acc[c], M[c], shift[c]) + output_offset)
 *
 * Taps in the padding contribute nothing. Two kernels, one signature:
 *   zo_depthwise_conv2d_s8     the readable reference (any depth multiplier);
 *   zo_depthwise_conv2d_c4_s8  depth multiplier 1: four channels per load. Per tap, one word
 *                              of input and one of weights; SXTB16 splits each into channels
 *                              (c, c+2) and (c+1, c+3), SADD16 adds the input offset, and
 *                              SMLABB / SMLATT accumulate the four channels in registers.
 *                              Only the in-bounds tap window of each output pixel is visited.
 * With -DZO_PORTABLE_KERNELS both are the reference.
 */
#include "zo_kernels.h"
#include "zo_requant.h"
#include "zo_simd.h"

/* Output channels are produced in blocks: per output pixel and block, every in-bounds tap
 * adds a run of contiguous channels (input pixel and weights are both channel-last). */
#define ZO_DEPTHWISE_BLOCK 32

void zo_depthwise_conv2d_s8(const zo_conv_params *p, const int8_t *input, const int8_t *weights,
                            const int32_t *bias, int8_t *output)
{
    const int32_t in_c = p->in_c;
    const int32_t out_c = p->out_c; /* in_c * depth_multiplier */
    const int32_t multiplier = p->depth_multiplier;
    int32_t acc[ZO_DEPTHWISE_BLOCK];
    for (int32_t b = 0; b < p->batches; ++b) {
        const int8_t *image = input + b * p->in_h * p->in_w * in_c;
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            const int32_t y0 = oy * p->stride_h - p->pad_top;
            for (int32_t ox = 0; ox < p->out_w; ++ox) {
                const int32_t x0 = ox * p->stride_w - p->pad_left;
                for (int32_t c0 = 0; c0 < out_c; c0 += ZO_DEPTHWISE_BLOCK) {
                    const int32_t n = out_c - c0 < ZO_DEPTHWISE_BLOCK ? out_c - c0 : ZO_DEPTHWISE_BLOCK;
                    for (int32_t i = 0; i < n; ++i) {
                        acc[i] = bias ? bias[c0 + i] : 0;
                    }
                    for (int32_t ky = 0; ky < p->k_h; ++ky) {
                        const int32_t y = y0 + ky * p->dilation_h;
                        if (y < 0 || y >= p->in_h) {
                            continue;
                        }
                        for (int32_t kx = 0; kx < p->k_w; ++kx) {
                            const int32_t x = x0 + kx * p->dilation_w;
                            if (x < 0 || x >= p->in_w) {
                                continue;
                            }
                            const int8_t *pixel = image + (y * p->in_w + x) * in_c;
                            const int8_t *tap = weights + (ky * p->k_w + kx) * out_c + c0;
                            for (int32_t i = 0; i < n; ++i) {
                                acc[i] += (pixel[(c0 + i) / multiplier] + p->input_offset) * tap[i];
                            }
                        }
                    }
                    for (int32_t i = 0; i < n; ++i) {
                        *output++ = zo_offset_clamp_s8(zo_mbqm(acc[i], p->multiplier[c0 + i],
                                                               (int)p->shift[c0 + i]),
                                                       p->output_offset, p->act_min, p->act_max);
                    }
                }
            }
        }
    }
}

#if ZO_FAST_KERNELS

/* [first, last) of the taps k with 0 <= origin + k * dilation < size */
static inline void tap_window(int32_t origin, int32_t dilation, int32_t taps, int32_t size,
                              int32_t *first, int32_t *last)
{
    int32_t lo = 0, hi = taps;
    while (lo < hi && origin + lo * dilation < 0) {
        ++lo;
    }
    while (hi > lo && origin + (hi - 1) * dilation >= size) {
        --hi;
    }
    *first = lo;
    *last = hi;
}

/* One tap of four channels: x and w hold channels c..c+3 of an input pixel and of a filter
 * tap; SXTB16 splits them into (c, c+2) and (c+1, c+3). */
static inline void tap_c4(uint32_t xv, uint32_t wv, uint32_t offset2, int32_t *a0, int32_t *a1,
                          int32_t *a2, int32_t *a3)
{
    const uint32_t x_even = zo_sadd16(zo_sxtb16(xv), offset2);
    const uint32_t x_odd = zo_sadd16(zo_sxtb16_ror8(xv), offset2);
    const uint32_t w_even = zo_sxtb16(wv), w_odd = zo_sxtb16_ror8(wv);
    *a0 = zo_smlabb(x_even, w_even, *a0);
    *a2 = zo_smlatt(x_even, w_even, *a2);
    *a1 = zo_smlabb(x_odd, w_odd, *a1);
    *a3 = zo_smlatt(x_odd, w_odd, *a3);
}

void zo_depthwise_conv2d_c4_s8(const zo_conv_params *p, const int8_t *input,
                               const int8_t *weights, const int32_t *bias, int8_t *output)
{
    /* locals: the int8 output stores may alias anything read through p */
    const int32_t channels = p->out_c; /* == in_c: depth multiplier 1 */
    const int32_t in_h = p->in_h, in_w = p->in_w, k_h = p->k_h, k_w = p->k_w;
    const int32_t dilation_h = p->dilation_h, dilation_w = p->dilation_w;
    const int32_t *multiplier = p->multiplier, *shift = p->shift;
    const int32_t input_offset = p->input_offset, output_offset = p->output_offset;
    const int32_t act_min = p->act_min, act_max = p->act_max;
    const uint32_t offset2 = zo_dup16(input_offset);
    const int32_t x_tap = dilation_w * channels;      /* next tap in an input row */
    const int32_t x_row = dilation_h * in_w * channels; /* next tap row */
    const int32_t w_row = k_w * channels;
    for (int32_t b = 0; b < p->batches; ++b) {
        const int8_t *image = input + b * in_h * in_w * channels;
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            const int32_t y0 = oy * p->stride_h - p->pad_top;
            int32_t ky0, ky1;
            tap_window(y0, dilation_h, k_h, in_h, &ky0, &ky1);
            for (int32_t ox = 0; ox < p->out_w; ++ox) {
                const int32_t x0 = ox * p->stride_w - p->pad_left;
                int32_t kx0, kx1;
                tap_window(x0, dilation_w, k_w, in_w, &kx0, &kx1);
                const int32_t rows = ky1 - ky0, row_taps = kx1 - kx0;
                /* the window's first tap, in the input and in the weights */
                const int8_t *x_first = image + ((y0 + ky0 * dilation_h) * in_w + x0
                                                 + kx0 * dilation_w) * channels;
                const int8_t *w_first = weights + (ky0 * k_w + kx0) * channels;
                int32_t c = 0;
                for (; c + 4 <= channels; c += 4) {
                    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
                    if (bias) {
                        a0 = bias[c];
                        a1 = bias[c + 1];
                        a2 = bias[c + 2];
                        a3 = bias[c + 3];
                    }
                    const int8_t *x = x_first + c;
                    const int8_t *w = w_first + c;
                    for (int32_t r = rows; r > 0; --r, x += x_row, w += w_row) {
                        if (row_taps == 3) { /* the common full row of a 3-wide filter */
                            tap_c4(zo_read4(x), zo_read4(w), offset2, &a0, &a1, &a2, &a3);
                            tap_c4(zo_read4(x + x_tap), zo_read4(w + channels), offset2, &a0,
                                   &a1, &a2, &a3);
                            tap_c4(zo_read4(x + 2 * x_tap), zo_read4(w + 2 * channels), offset2,
                                   &a0, &a1, &a2, &a3);
                            continue;
                        }
                        const int8_t *xt = x;
                        const int8_t *wt = w;
                        for (int32_t k = row_taps; k > 0; --k, xt += x_tap, wt += channels) {
                            tap_c4(zo_read4(xt), zo_read4(wt), offset2, &a0, &a1, &a2, &a3);
                        }
                    }
                    output[c] = zo_requantize_channel(a0, multiplier[c], shift[c],
                                                      output_offset, act_min, act_max);
                    output[c + 1] = zo_requantize_channel(a1, multiplier[c + 1], shift[c + 1],
                                                          output_offset, act_min, act_max);
                    output[c + 2] = zo_requantize_channel(a2, multiplier[c + 2], shift[c + 2],
                                                          output_offset, act_min, act_max);
                    output[c + 3] = zo_requantize_channel(a3, multiplier[c + 3], shift[c + 3],
                                                          output_offset, act_min, act_max);
                }
                for (; c < channels; ++c) { /* the last channels % 4 */
                    int32_t acc = bias ? bias[c] : 0;
                    const int8_t *x = x_first + c;
                    const int8_t *w = w_first + c;
                    for (int32_t r = 0; r < rows; ++r) {
                        for (int32_t k = 0; k < row_taps; ++k) {
                            acc += (x[r * x_row + k * x_tap] + input_offset)
                                   * w[r * w_row + k * channels];
                        }
                    }
                    output[c] = zo_requantize_channel(acc, multiplier[c], shift[c],
                                                      output_offset, act_min, act_max);
                }
                output += channels;
            }
        }
    }
}

#else /* ZO_PORTABLE_KERNELS: the reference */

void zo_depthwise_conv2d_c4_s8(const zo_conv_params *p, const int8_t *input,
                               const int8_t *weights, const int32_t *bias, int8_t *output)
{
    zo_depthwise_conv2d_s8(p, input, weights, bias, output);
}

#endif
