/*
 * DEPTHWISE_CONV_2D, depth multiplier 1, pixel by pixel: the fast kernel's path for images
 * without interior pixels (zo_depthwise.h, ZO_DEPTHWISE_DIRECT). On a 2x2 output under a 3x3
 * or 5x5 filter, or 4x4 under 5x5 (the late layers of MobileNet-like models), the border runs
 * of zo_depthwise.c are a pixel or two each, and setting a run up for each block of channels
 * costs more than its taps. Here every output pixel's window is clipped once, and each block
 * of four channels reads its taps straight from the filter: per tap one input word and one
 * filter word, each split by two SXTB16, the input offset added (SADD16), four
 * multiply-accumulates (SMLABB / SMLATT); 2x2 and 3x3 windows unrolled. The requantization
 * form is read per output, not made a literal: that would triple the code (13.3 KB instead of
 * 4.4 KB) for a gain within 1 %.
 * tests/data/conv_fuzz.c checks it against the reference, natively and under QEMU.
 */
#include "zo_depthwise.h"
#include "zo_requant.h"
#include "zo_simd.h"

#if ZO_FAST_KERNELS

/* What the pixels share, read once from zo_conv_params (the int8 output stores may alias
 * anything read through p). */
typedef struct {
    int32_t channels;     /* == in_c */
    int32_t x_tap, x_row; /* input bytes to the next tap in a row / to the next tap row */
    int32_t w_row;        /* filter bytes to the next tap row */
    uint32_t offset2;     /* input_offset in both halfwords */
    int32_t output_offset, act_min, act_max;
} direct_layer;

/* Channels c..c+3 of one output pixel: rows x row_taps taps from input x and filter w. */
static inline __attribute__((always_inline)) void
direct_c4(const direct_layer *d, const int32_t *bias, const int32_t *multiplier,
          const int32_t *shift, const int8_t *x, const int8_t *w, int32_t rows,
          int32_t row_taps, const int form, int8_t *out)
{
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    if (bias) {
        a0 = bias[0], a1 = bias[1], a2 = bias[2], a3 = bias[3];
    }
    const uint32_t offset2 = d->offset2;
    const int32_t channels = d->channels, x_tap = d->x_tap;
#pragma GCC unroll 5
    for (int32_t r = rows; r > 0; --r, x += d->x_row, w += d->w_row) {
        const int8_t *xt = x, *wt = w;
#pragma GCC unroll 5
        for (int32_t k = row_taps; k > 0; --k, xt += x_tap, wt += channels) {
            const uint32_t xv = zo_read4(xt), wv = zo_read4(wt);
            const uint32_t xe = zo_sadd16(zo_sxtb16(xv), offset2);
            const uint32_t xo = zo_sadd16(zo_sxtb16_ror8(xv), offset2);
            const uint32_t we = zo_sxtb16(wv), wo = zo_sxtb16_ror8(wv);
            a0 = zo_smlabb(xe, we, a0);
            a2 = zo_smlatt(xe, we, a2);
            a1 = zo_smlabb(xo, wo, a1);
            a3 = zo_smlatt(xo, wo, a3);
        }
    }
    const int8_t y0 = zo_requantize_channel(a0, multiplier[0], shift[0], form, d->output_offset,
                                            d->act_min, d->act_max);
    const int8_t y1 = zo_requantize_channel(a1, multiplier[1], shift[1], form, d->output_offset,
                                            d->act_min, d->act_max);
    const int8_t y2 = zo_requantize_channel(a2, multiplier[2], shift[2], form, d->output_offset,
                                            d->act_min, d->act_max);
    const int8_t y3 = zo_requantize_channel(a3, multiplier[3], shift[3], form, d->output_offset,
                                            d->act_min, d->act_max);
    out[0] = y0;
    out[1] = y1;
    out[2] = y2;
    out[3] = y3;
}

/* Every block of four channels of one output pixel whose window is rows x row_taps taps. */
static inline __attribute__((always_inline)) void
direct_pixel(const zo_conv_params *p, const direct_layer *d, const int8_t *x, const int8_t *w,
             const int32_t *bias, int32_t rows, int32_t row_taps, const int form, int8_t *out)
{
    for (int32_t c = 0; c + 4 <= d->channels; c += 4) {
        direct_c4(d, bias ? bias + c : 0, p->multiplier + c, p->shift + c, x + c, w + c, rows,
                  row_taps, form, out + c);
    }
}

/* Every output pixel of one image in the requantization form `form`; the window's shape a
 * literal for 2x2 and 3x3 windows (a 2x2 or 4x4 output's under 3x3 and 5x5 filters). */
static inline __attribute__((always_inline)) void
direct_image(const zo_conv_params *p, const direct_layer *d, const int8_t *image,
             const int8_t *weights, const int32_t *bias, int8_t *out, const int form)
{
    const int32_t channels = d->channels;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t y0 = oy * p->stride_h - p->pad_top;
        int32_t ky0, ky1;
        tap_window(y0, p->dilation_h, p->k_h, p->in_h, &ky0, &ky1);
        for (int32_t ox = 0; ox < p->out_w; ++ox, out += channels) {
            const int32_t x0 = ox * p->stride_w - p->pad_left;
            int32_t kx0, kx1;
            tap_window(x0, p->dilation_w, p->k_w, p->in_w, &kx0, &kx1);
            const int8_t *x = image + ((y0 + ky0 * p->dilation_h) * p->in_w + x0
                                       + kx0 * p->dilation_w) * channels;
            const int8_t *w = weights + (ky0 * p->k_w + kx0) * channels;
            const int32_t rows = ky1 - ky0, row_taps = kx1 - kx0;
            switch (64 * rows + row_taps) { /* row_taps < 64 (ZO_DEPTHWISE_MAX_TAPS) */
            case 64 * 3 + 3:
                direct_pixel(p, d, x, w, bias, 3, 3, form, out);
                break;
            case 64 * 2 + 2:
                direct_pixel(p, d, x, w, bias, 2, 2, form, out);
                break;
            default:
                direct_pixel(p, d, x, w, bias, rows, row_taps, form, out);
            }
        }
    }
}

void zo_depthwise_direct_c4_s8(const zo_conv_params *p, const int8_t *input,
                               const int8_t *weights, const int32_t *bias, int8_t *output)
{
    const int32_t channels = p->out_c;
    const direct_layer d = {channels, p->dilation_w * channels,
                            p->dilation_h * p->in_w * channels, p->k_w * channels,
                            zo_dup16(p->input_offset), p->output_offset, p->act_min, p->act_max};
    const int32_t image_in = p->in_h * p->in_w * channels;
    const int32_t image_out = p->out_h * p->out_w * channels;
    for (int32_t b = 0; b < p->batches; ++b) {
        const int8_t *image = input + b * image_in;
        int8_t *out = output + b * image_out;
        direct_image(p, &d, image, weights, bias, out,
                     zo_requant_form(p->right_shift_only, p->act_min, p->act_max));
    }
}

#endif
