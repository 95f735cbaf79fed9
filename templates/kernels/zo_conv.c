/*
 * CONV_2D and DEPTHWISE_CONV_2D, int8 per-channel: TFLite reference_integer_ops::ConvPerChannel
 * and DepthwiseConvPerChannel (zocodegen/reference/conv.py is the numpy twin).
 *
 *   acc[c] = bias[c] + sum over in-bounds taps (x + input_offset) * w[c]     (int32)
 *   y[c]   = clamp(MultiplyByQuantizedMultiplier(acc[c], M[c], shift[c]) + output_offset)
 *
 * Taps that fall into the padding contribute nothing (padding holds the real value 0).
 */
#include "zo_dot.h"
#include "zo_kernels.h"
#include "zo_requant.h"

static inline int8_t requantize_channel(const zo_conv_params *p, int32_t acc, int32_t c)
{
    return zo_offset_clamp_s8(zo_mbqm(acc, p->multiplier[c], (int)p->shift[c]), p->output_offset,
                              p->act_min, p->act_max);
}

void zo_conv2d_s8(const zo_conv_params *p, const int8_t *input, const int8_t *weights,
                  const int32_t *bias, int8_t *output)
{
    const int32_t in_c = p->in_c;
    for (int32_t b = 0; b < p->batches; ++b) {
        const int8_t *image = input + (int32_t)b * p->in_h * p->in_w * in_c;
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            const int32_t y0 = oy * p->stride_h - p->pad_top;
            for (int32_t ox = 0; ox < p->out_w; ++ox) {
                const int32_t x0 = ox * p->stride_w - p->pad_left;
                for (int32_t oc = 0; oc < p->out_c; ++oc) {
                    const int8_t *filter = weights + (int32_t)oc * p->k_h * p->k_w * in_c;
                    int32_t acc = bias ? bias[oc] : 0;
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
                            acc = zo_dot_s8(image + (y * p->in_w + x) * in_c,
                                            filter + (ky * p->k_w + kx) * in_c, in_c,
                                            p->input_offset, acc);
                        }
                    }
                    *output++ = requantize_channel(p, acc, oc);
                }
            }
        }
    }
}

/* Output channels are produced in blocks: per output pixel and block, every in-bounds tap
 * adds a run of contiguous channels (input pixel and weights are both channel-last), which
 * keeps the inner loop free of index arithmetic. Integer sums are exact, so the order of
 * accumulation does not change the result. */
#define ZO_DEPTHWISE_BLOCK 32

void zo_depthwise_conv2d_s8(const zo_conv_params *p, const int8_t *input, const int8_t *weights,
                            const int32_t *bias, int8_t *output)
{
    const int32_t in_c = p->in_c;
    const int32_t out_c = p->out_c; /* in_c * depth_multiplier */
    const int32_t multiplier = p->depth_multiplier;
    int32_t acc[ZO_DEPTHWISE_BLOCK];
    for (int32_t b = 0; b < p->batches; ++b) {
        const int8_t *image = input + (int32_t)b * p->in_h * p->in_w * in_c;
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
                            if (multiplier == 1) {
                                const int8_t *channels = pixel + c0;
                                for (int32_t i = 0; i < n; ++i) {
                                    acc[i] += (channels[i] + p->input_offset) * tap[i];
                                }
                            } else {
                                for (int32_t i = 0; i < n; ++i) {
                                    acc[i] += (pixel[(c0 + i) / multiplier] + p->input_offset) * tap[i];
                                }
                            }
                        }
                    }
                    for (int32_t i = 0; i < n; ++i) {
                        *output++ = requantize_channel(p, acc[i], c0 + i);
                    }
                }
            }
        }
    }
}
