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

/* What the fast kernel keeps of zo_conv_params, read once (the int8 output stores may alias
 * anything read through p, which would make the compiler reload every field). */
typedef struct {
    int32_t channels;      /* == in_c: depth multiplier 1 */
    int32_t x_tap, x_row;  /* input bytes to the next tap in a row / to the next tap row */
    int32_t w_row;         /* weight bytes to the next tap row */
    int32_t x_pixel;       /* input bytes between horizontally adjacent output pixels */
    int32_t input_offset;
    uint32_t offset2;      /* input_offset in both halfwords */
    const int32_t *bias, *multiplier, *shift;
    int32_t output_offset, act_min, act_max;
    int32_t right_only;    /* every shift < 0 (zo_requantize_split) */
} dw_layer;

/* One tap of four channels for one pixel: x and w hold channels c..c+3 of an input pixel and
 * of a filter tap, w already split by SXTB16 into (c, c+2) and (c+1, c+3). */
static inline void tap_c4(uint32_t xv, uint32_t w_even, uint32_t w_odd, uint32_t offset2,
                          int32_t *a0, int32_t *a1, int32_t *a2, int32_t *a3)
{
    const uint32_t x_even = zo_sadd16(zo_sxtb16(xv), offset2);
    const uint32_t x_odd = zo_sadd16(zo_sxtb16_ror8(xv), offset2);
    *a0 = zo_smlabb(x_even, w_even, *a0);
    *a2 = zo_smlatt(x_even, w_even, *a2);
    *a1 = zo_smlabb(x_odd, w_odd, *a1);
    *a3 = zo_smlatt(x_odd, w_odd, *a3);
}

/* One tap of four channels for one pixel, or two (pair) sharing the weight load and split. */
static inline __attribute__((always_inline)) void
tap_pixels(const dw_layer *d, const int8_t *x, const int8_t *w, const int pair, int32_t *a0,
           int32_t *a1, int32_t *a2, int32_t *a3, int32_t *b0, int32_t *b1, int32_t *b2,
           int32_t *b3)
{
    const uint32_t wv = zo_read4(w);
    const uint32_t w_even = zo_sxtb16(wv), w_odd = zo_sxtb16_ror8(wv);
    tap_c4(zo_read4(x), w_even, w_odd, d->offset2, a0, a1, a2, a3);
    if (pair) {
        tap_c4(zo_read4(x + d->x_pixel), w_even, w_odd, d->offset2, b0, b1, b2, b3);
    }
}

/* Channel c of one or two pixels: the channel's parameters are read once. */
static inline __attribute__((always_inline)) void
requant_c(const dw_layer *d, int32_t c, int32_t acc0, int32_t acc1, const int pair,
          const int right_only, int8_t *out0, int8_t *out1)
{
    const int32_t multiplier = d->multiplier[c], shift = d->shift[c];
    const int8_t y0 = zo_requantize_channel(acc0, multiplier, shift, right_only, d->output_offset,
                                          d->act_min, d->act_max);
    if (pair) {
        const int8_t y1 = zo_requantize_channel(acc1, multiplier, shift, right_only,
                                              d->output_offset, d->act_min, d->act_max);
        out1[c] = y1;
    }
    out0[c] = y0;
}

/* Output pixel(s) whose tap window is `rows` x `row_taps` taps from x_first / w_first: one
 * pixel, or (pair) two horizontally adjacent pixels with the same window, which share every
 * weight load and split and every channel's requantization parameters. */
static inline __attribute__((always_inline)) void
window_c4(const dw_layer *d, const int8_t *x_first, const int8_t *w_first, int32_t rows,
          int32_t row_taps, const int pair, const int right_only, int8_t *out0, int8_t *out1)
{
    const int32_t channels = d->channels;
    int32_t c = 0;
    for (; c + 4 <= channels; c += 4) {
        int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        if (d->bias) {
            a0 = d->bias[c];
            a1 = d->bias[c + 1];
            a2 = d->bias[c + 2];
            a3 = d->bias[c + 3];
        }
        int32_t b0 = a0, b1 = a1, b2 = a2, b3 = a3;
        const int8_t *x = x_first + c;
        const int8_t *w = w_first + c;
        for (int32_t r = rows; r > 0; --r, x += d->x_row, w += d->w_row) {
            if (row_taps == 3) { /* a full row of a 3-wide filter: no loop control per tap */
                tap_pixels(d, x, w, pair, &a0, &a1, &a2, &a3, &b0, &b1, &b2, &b3);
                tap_pixels(d, x + d->x_tap, w + channels, pair, &a0, &a1, &a2, &a3, &b0, &b1,
                           &b2, &b3);
                tap_pixels(d, x + 2 * d->x_tap, w + 2 * channels, pair, &a0, &a1, &a2, &a3,
                           &b0, &b1, &b2, &b3);
                continue;
            }
            const int8_t *xt = x;
            const int8_t *wt = w;
            for (int32_t k = row_taps; k > 0; --k, xt += d->x_tap, wt += channels) {
                tap_pixels(d, xt, wt, pair, &a0, &a1, &a2, &a3, &b0, &b1, &b2, &b3);
            }
        }
        requant_c(d, c, a0, b0, pair, right_only, out0, out1);
        requant_c(d, c + 1, a1, b1, pair, right_only, out0, out1);
        requant_c(d, c + 2, a2, b2, pair, right_only, out0, out1);
        requant_c(d, c + 3, a3, b3, pair, right_only, out0, out1);
    }
    for (; c < channels; ++c) { /* the last channels % 4 */
        int32_t acc0 = d->bias ? d->bias[c] : 0, acc1 = acc0;
        for (int32_t r = 0; r < rows; ++r) {
            for (int32_t k = 0; k < row_taps; ++k) {
                const int8_t *x = x_first + r * d->x_row + k * d->x_tap + c;
                const int32_t w = w_first[r * d->w_row + k * channels + c];
                acc0 += (x[0] + d->input_offset) * w;
                acc1 += pair ? (x[d->x_pixel] + d->input_offset) * w : 0;
            }
        }
        requant_c(d, c, acc0, acc1, pair, right_only, out0, out1);
    }
}

static __attribute__((noinline)) void window_c4_one(const dw_layer *d, const int8_t *x_first, const int8_t *w_first,
                          int32_t rows, int32_t row_taps, int8_t *out)
{
    if (d->right_only) {
        window_c4(d, x_first, w_first, rows, row_taps, 0, 1, out, out);
    } else {
        window_c4(d, x_first, w_first, rows, row_taps, 0, 0, out, out);
    }
}

static __attribute__((noinline)) void window_c4_pair(const dw_layer *d, const int8_t *x_first, const int8_t *w_first,
                           int32_t rows, int32_t row_taps, int8_t *out0, int8_t *out1)
{
    if (d->right_only) {
        window_c4(d, x_first, w_first, rows, row_taps, 1, 1, out0, out1);
    } else {
        window_c4(d, x_first, w_first, rows, row_taps, 1, 0, out0, out1);
    }
}

void zo_depthwise_conv2d_c4_s8(const zo_conv_params *p, const int8_t *input,
                               const int8_t *weights, const int32_t *bias, int8_t *output)
{
    const int32_t channels = p->out_c;
    const dw_layer d = {
        channels, p->dilation_w * channels, p->dilation_h * p->in_w * channels,
        p->k_w * channels, p->stride_w * channels, p->input_offset, zo_dup16(p->input_offset),
        bias,
        p->multiplier, p->shift, p->output_offset, p->act_min, p->act_max,
        p->right_shift_only};
    const int32_t in_h = p->in_h, in_w = p->in_w, out_w = p->out_w;
    for (int32_t b = 0; b < p->batches; ++b) {
        const int8_t *image = input + b * in_h * in_w * channels;
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            const int32_t y0 = oy * p->stride_h - p->pad_top;
            int32_t ky0, ky1;
            tap_window(y0, p->dilation_h, p->k_h, in_h, &ky0, &ky1);
            for (int32_t ox = 0; ox < out_w;) {
                const int32_t x0 = ox * p->stride_w - p->pad_left;
                int32_t kx0, kx1, next0 = 0, next1 = -1;
                tap_window(x0, p->dilation_w, p->k_w, in_w, &kx0, &kx1);
                if (ox + 1 < out_w) {
                    tap_window(x0 + p->stride_w, p->dilation_w, p->k_w, in_w, &next0, &next1);
                }
                /* the window's first tap, in the input and in the weights */
                const int8_t *x_first = image + ((y0 + ky0 * p->dilation_h) * in_w + x0
                                                 + kx0 * p->dilation_w) * channels;
                const int8_t *w_first = weights + (ky0 * p->k_w + kx0) * channels;
                if (next0 == kx0 && next1 == kx1) { /* the next pixel has the same window */
                    window_c4_pair(&d, x_first, w_first, ky1 - ky0, kx1 - kx0, output,
                                   output + channels);
                    output += 2 * channels;
                    ox += 2;
                } else {
                    window_c4_one(&d, x_first, w_first, ky1 - ky0, kx1 - kx0, output);
                    output += channels;
                    ox += 1;
                }
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
