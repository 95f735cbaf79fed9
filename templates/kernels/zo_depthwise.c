/*
 * DEPTHWISE_CONV_2D, int8 per-channel: TFLite reference_integer_ops::DepthwiseConvPerChannel
 * (zocodegen/reference/conv.py is the numpy twin).
 *
 *   acc[c] = bias[c] + sum over in-bounds taps (x[c / depth_multiplier] + input_offset) * w[c]
 *   y[c]   = clamp(MultiplyByQuantizedMultiplier(acc[c], M[c], shift[c]) + output_offset)
 *
 * Taps in the padding contribute nothing. Two kernels, one signature:
 *   zo_depthwise_conv2d_s8     the readable reference (any depth multiplier);
 *   zo_depthwise_conv2d_c4_s8  depth multiplier 1, four channels per 32-bit load, in two
 *                              passes over the output:
 *     border pixels (the window clipped by the input's edges), pixel by pixel: per tap one
 *       word of input and one of weights, SXTB16 splits each into channels (c, c+2) and
 *       (c+1, c+3), SADD16 adds the input offset, SMLABB / SMLATT accumulate the four
 *       channels; two horizontally adjacent pixels with the same window share the weights;
 *     interior pixels (the whole window inside), one block of four channels at a time: the
 *       block's taps are split once and its bias has the input offset folded in
 *       (bias + input_offset * sum of the channel's taps: every tap is in the input), so a
 *       tap costs one input word, two SXTB16 and four multiply-accumulates; 3x3 windows
 *       are written in ARM assembly (GCC runs out of registers and reloads the taps), 5x5
 *       unrolls from literals, other sizes loop.
 * With -DZO_PORTABLE_KERNELS both are the reference. tests/data/depthwise_fuzz.c checks the
 * fast kernel against the reference on random geometries, natively and under QEMU.
 */
#include "zo_kernels.h"
#include "zo_requant.h"
#include "zo_simd.h"

/* Output channels are produced in blocks: per output pixel and block, every in-bounds tap
 * adds a run of contiguous channels (input pixel and weights are both channel-last). */
#define ZO_DEPTHWISE_BLOCK 32

/* Output channels [first, out_c) of one image, in blocks of ZO_DEPTHWISE_BLOCK. */
static void depthwise_channels(const zo_conv_params *p, const int8_t *image,
                               const int8_t *weights, const int32_t *bias, int32_t first,
                               int8_t *output)
{
    const int32_t in_c = p->in_c;
    const int32_t out_c = p->out_c; /* in_c * depth_multiplier */
    const int32_t multiplier = p->depth_multiplier;
    int32_t acc[ZO_DEPTHWISE_BLOCK];
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t y0 = oy * p->stride_h - p->pad_top;
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t x0 = ox * p->stride_w - p->pad_left;
            int8_t *out = output + (oy * p->out_w + ox) * out_c;
            for (int32_t c0 = first; c0 < out_c; c0 += ZO_DEPTHWISE_BLOCK) {
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
                    out[c0 + i] = zo_offset_clamp_s8(zo_mbqm(acc[i], p->multiplier[c0 + i],
                                                             (int)p->shift[c0 + i]),
                                                     p->output_offset, p->act_min, p->act_max);
                }
            }
        }
    }
}

void zo_depthwise_conv2d_s8(const zo_conv_params *p, const int8_t *input, const int8_t *weights,
                            const int32_t *bias, int8_t *output)
{
    for (int32_t b = 0; b < p->batches; ++b) {
        depthwise_channels(p, input + b * p->in_h * p->in_w * p->in_c, weights, bias, 0,
                           output + b * p->out_h * p->out_w * p->out_c);
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

/* Output positions [lo, hi) along one axis whose whole window lies inside the input. */
typedef struct {
    int32_t lo, hi;
} dw_span;

static dw_span interior_span(int32_t out, int32_t stride, int32_t pad, int32_t taps,
                             int32_t dilation, int32_t size)
{
    dw_span s = {0, out};
    while (s.lo < out && s.lo * stride - pad < 0) {
        ++s.lo;
    }
    while (s.hi > s.lo && (s.hi - 1) * stride - pad + (taps - 1) * dilation >= size) {
        --s.hi;
    }
    return s;
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
    int32_t fast;          /* zo_fast_requant: the cheaper requantization */
    dw_span rows, cols;    /* the interior: output rows and columns whose window is whole */
} dw_layer;

/* ---- Border pixels: pixel by pixel, every channel of one pixel per call -------------------
 * Their windows differ, so each pixel's tap window is worked out once for all its channels;
 * each tap adds the input offset to the input (SADD16) and starts from the plain bias. */

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
          const int fast, int8_t *out0, int8_t *out1)
{
    const int32_t multiplier = d->multiplier[c], shift = d->shift[c];
    const int8_t y0 = zo_requantize_channel(acc0, multiplier, shift, fast, d->output_offset,
                                            d->act_min, d->act_max);
    if (pair) {
        const int8_t y1 = zo_requantize_channel(acc1, multiplier, shift, fast,
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
          int32_t row_taps, const int pair, const int fast, int8_t *out0, int8_t *out1)
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
        requant_c(d, c, a0, b0, pair, fast, out0, out1);
        requant_c(d, c + 1, a1, b1, pair, fast, out0, out1);
        requant_c(d, c + 2, a2, b2, pair, fast, out0, out1);
        requant_c(d, c + 3, a3, b3, pair, fast, out0, out1);
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
        requant_c(d, c, acc0, acc1, pair, fast, out0, out1);
    }
}

static __attribute__((noinline)) void window_c4_one(const dw_layer *d, const int8_t *x_first,
                                                    const int8_t *w_first, int32_t rows,
                                                    int32_t row_taps, int8_t *out)
{
    if (d->fast) {
        window_c4(d, x_first, w_first, rows, row_taps, 0, 1, out, out);
    } else {
        window_c4(d, x_first, w_first, rows, row_taps, 0, 0, out, out);
    }
}

static __attribute__((noinline)) void window_c4_pair(const dw_layer *d, const int8_t *x_first,
                                                     const int8_t *w_first, int32_t rows,
                                                     int32_t row_taps, int8_t *out0,
                                                     int8_t *out1)
{
    if (d->fast) {
        window_c4(d, x_first, w_first, rows, row_taps, 1, 1, out0, out1);
    } else {
        window_c4(d, x_first, w_first, rows, row_taps, 1, 0, out0, out1);
    }
}

static inline int interior(const dw_layer *d, int32_t oy, int32_t ox)
{
    return oy >= d->rows.lo && oy < d->rows.hi && ox >= d->cols.lo && ox < d->cols.hi;
}

/* Every output pixel of one image outside the interior rectangle, all channels. */
static void border_pixels(const zo_conv_params *p, const dw_layer *d, const int8_t *image,
                          const int8_t *weights, int8_t *output)
{
    const int32_t in_h = p->in_h, in_w = p->in_w, out_w = p->out_w, channels = d->channels;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t y0 = oy * p->stride_h - p->pad_top;
        int32_t ky0, ky1;
        tap_window(y0, p->dilation_h, p->k_h, in_h, &ky0, &ky1);
        for (int32_t ox = 0; ox < out_w;) {
            if (interior(d, oy, ox)) {
                ox = d->cols.hi;
                continue;
            }
            const int32_t x0 = ox * p->stride_w - p->pad_left;
            int32_t kx0, kx1, next0 = 0, next1 = -1;
            tap_window(x0, p->dilation_w, p->k_w, in_w, &kx0, &kx1);
            if (ox + 1 < out_w && !interior(d, oy, ox + 1)) {
                tap_window(x0 + p->stride_w, p->dilation_w, p->k_w, in_w, &next0, &next1);
            }
            int8_t *out = output + (oy * out_w + ox) * channels;
            /* the window's first tap, in the input and in the weights */
            const int8_t *x_first = image + ((y0 + ky0 * p->dilation_h) * in_w + x0
                                             + kx0 * p->dilation_w) * channels;
            const int8_t *w_first = weights + (ky0 * p->k_w + kx0) * channels;
            if (next0 == kx0 && next1 == kx1) { /* the next pixel has the same window */
                window_c4_pair(d, x_first, w_first, ky1 - ky0, kx1 - kx0, out, out + channels);
                ox += 2;
            } else {
                window_c4_one(d, x_first, w_first, ky1 - ky0, kx1 - kx0, out);
                ox += 1;
            }
        }
    }
}

/* ---- Interior pixels: channels outermost, four at a time ---------------------------------
 * A block of four channels holds its filter taps split once, and its bias with the input
 * offset folded in (bias + input_offset * the sum of the channel's taps: the whole window is
 * in the input, so every tap contributes), so a tap costs one input word, two SXTB16 and four
 * multiply-accumulates, with no offset to add. */

/* Filters up to 7x7 keep their split taps on the stack (8 bytes a tap); larger ones run the
 * border path on every pixel. */
#define ZO_DEPTHWISE_MAX_TAPS 49

typedef struct {
    uint32_t taps[2 * ZO_DEPTHWISE_MAX_TAPS]; /* tap t: lanes (c, c+2) at 2t, (c+1, c+3) at 2t+1 */
    int32_t folded[4];
    int32_t multiplier[4], shift[4];
} dw_block;

static void load_block(const zo_conv_params *p, const int8_t *weights, const int32_t *bias,
                       int32_t c, dw_block *blk)
{
    int32_t sums[4] = {0, 0, 0, 0};
    for (int32_t t = 0; t < p->k_h * p->k_w; ++t) {
        const int8_t *w = weights + t * p->out_c + c;
        const uint32_t wv = zo_read4(w);
        blk->taps[2 * t] = zo_sxtb16(wv);
        blk->taps[2 * t + 1] = zo_sxtb16_ror8(wv);
        for (int j = 0; j < 4; ++j) {
            sums[j] += w[j];
        }
    }
    for (int j = 0; j < 4; ++j) {
        /* wraps like the int32 sums it stands for */
        blk->folded[j] = (int32_t)((uint32_t)(bias ? bias[c + j] : 0)
                                   + (uint32_t)(p->input_offset * sums[j]));
        blk->multiplier[j] = p->multiplier[c + j];
        blk->shift[j] = p->shift[c + j];
    }
}

/* One tap of channels c..c+3: xv holds them for one input pixel, tap is the split filter tap. */
static inline __attribute__((always_inline)) void
mac_c4(uint32_t xv, const uint32_t *tap, int32_t *a0, int32_t *a1, int32_t *a2, int32_t *a3)
{
    const uint32_t x_even = zo_sxtb16(xv), x_odd = zo_sxtb16_ror8(xv);
    *a0 = zo_smlabb(x_even, tap[0], *a0);
    *a2 = zo_smlatt(x_even, tap[0], *a2);
    *a1 = zo_smlabb(x_odd, tap[1], *a1);
    *a3 = zo_smlatt(x_odd, tap[1], *a3);
}

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
/* One row of a 3-wide window by hand (mac_c4 three times): GCC reloads the split taps for
 * lack of registers; here they are an LDRD each, and the three input words are [x],
 * [x, x_tap] and [x, x_tap, LSL #1]. Eight instructions a tap. */
#define ZO_DW_TAP(input, tap_offset)                                                         \
    "ldr    %[xv], " input "\n\t"                                                             \
    "ldrd   %[we], %[wo], [%[taps], #" tap_offset "]\n\t"                                     \
    "sxtb16 %[xe], %[xv]\n\t"                                                                \
    "sxtb16 %[xv], %[xv], ror #8\n\t"                                                        \
    "smlabb %[a0], %[xe], %[we], %[a0]\n\t"                                                  \
    "smlatt %[a2], %[xe], %[we], %[a2]\n\t"                                                  \
    "smlabb %[a1], %[xv], %[wo], %[a1]\n\t"                                                  \
    "smlatt %[a3], %[xv], %[wo], %[a3]\n\t"
#define ZO_DW_ROW3(row)                                                                      \
    ZO_DW_TAP("[%[x]]", #row "*24")                                                          \
    ZO_DW_TAP("[%[x], %[x_tap]]", #row "*24+8")                                              \
    ZO_DW_TAP("[%[x], %[x_tap], lsl #1]", #row "*24+16")

static inline __attribute__((always_inline)) void
window_3x3(const int8_t *x, int32_t x_tap, int32_t x_row, const uint32_t *taps, int32_t *a0,
           int32_t *a1, int32_t *a2, int32_t *a3)
{
    uint32_t xv, xe, we, wo;
    __asm__(ZO_DW_ROW3(0) "add    %[x], %[x], %[x_row]\n\t"
            ZO_DW_ROW3(1) "add    %[x], %[x], %[x_row]\n\t"
            ZO_DW_ROW3(2)
            : [a0] "+r"(*a0), [a1] "+r"(*a1), [a2] "+r"(*a2), [a3] "+r"(*a3), [x] "+r"(x),
              [xv] "=&r"(xv), [xe] "=&r"(xe), [we] "=&r"(we), [wo] "=&r"(wo)
            : [x_tap] "r"(x_tap), [x_row] "r"(x_row), [taps] "r"(taps)
            : "memory");
}
#undef ZO_DW_ROW3
#undef ZO_DW_TAP
#endif

/* The four channels' requantization, with the layer's form as a literal. */
static inline __attribute__((always_inline)) void
store_c4(const dw_layer *d, const dw_block *blk, int32_t a0, int32_t a1, int32_t a2, int32_t a3,
         const int fast, int8_t *out)
{
    const int8_t y0 = zo_requantize_channel(a0, blk->multiplier[0], blk->shift[0], fast,
                                            d->output_offset, d->act_min, d->act_max);
    const int8_t y1 = zo_requantize_channel(a1, blk->multiplier[1], blk->shift[1], fast,
                                            d->output_offset, d->act_min, d->act_max);
    const int8_t y2 = zo_requantize_channel(a2, blk->multiplier[2], blk->shift[2], fast,
                                            d->output_offset, d->act_min, d->act_max);
    const int8_t y3 = zo_requantize_channel(a3, blk->multiplier[3], blk->shift[3], fast,
                                            d->output_offset, d->act_min, d->act_max);
    out[0] = y0;
    out[1] = y1;
    out[2] = y2;
    out[3] = y3;
}

/* A pixel whose k_h x k_w window is inside the input: from the folded bias, the taps
 * unrolled when k_h and k_w are literals at the call (3x3 by hand, 5x5), a loop otherwise. */
static inline __attribute__((always_inline)) void
interior_c4(const dw_layer *d, const dw_block *blk, const int8_t *x, int32_t k_h, int32_t k_w,
            int8_t *out)
{
    int32_t a0 = blk->folded[0], a1 = blk->folded[1], a2 = blk->folded[2], a3 = blk->folded[3];
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
    if (__builtin_constant_p(k_h) && __builtin_constant_p(k_w) && k_h == 3 && k_w == 3) {
        window_3x3(x, d->x_tap, d->x_row, blk->taps, &a0, &a1, &a2, &a3);
    } else
#endif
    if (__builtin_constant_p(k_h) && __builtin_constant_p(k_w)) {
#pragma GCC unroll 5
        for (int32_t ky = 0; ky < k_h; ++ky) {
#pragma GCC unroll 5
            for (int32_t kx = 0; kx < k_w; ++kx) {
                mac_c4(zo_read4(x + ky * d->x_row + kx * d->x_tap),
                       blk->taps + 2 * (ky * k_w + kx), &a0, &a1, &a2, &a3);
            }
        }
    } else {
        const uint32_t *tap = blk->taps;
        for (int32_t ky = 0; ky < k_h; ++ky, x += d->x_row) {
            const int8_t *xt = x;
            for (int32_t kx = 0; kx < k_w; ++kx, xt += d->x_tap, tap += 2) {
                mac_c4(zo_read4(xt), tap, &a0, &a1, &a2, &a3);
            }
        }
    }
    if (d->fast) {
        store_c4(d, blk, a0, a1, a2, a3, 1, out);
    } else {
        store_c4(d, blk, a0, a1, a2, a3, 0, out);
    }
}

/* Channels c..c+3 of the interior rectangle of one image. */
static inline __attribute__((always_inline)) void
interior_block(const zo_conv_params *p, const dw_layer *d, const dw_block *blk,
               const int8_t *image, int8_t *output, int32_t k_h, int32_t k_w)
{
    const int32_t channels = d->channels, pixels = d->cols.hi - d->cols.lo;
    const int32_t x_line = p->stride_h * p->in_w * channels, out_line = p->out_w * channels;
    const int8_t *x_first = image + ((d->rows.lo * p->stride_h - p->pad_top) * p->in_w
                                     + d->cols.lo * p->stride_w - p->pad_left) * channels;
    int8_t *out_first = output + (d->rows.lo * p->out_w + d->cols.lo) * channels;
    for (int32_t oy = d->rows.lo; oy < d->rows.hi; ++oy, x_first += x_line, out_first += out_line) {
        const int8_t *x = x_first;
        int8_t *out = out_first;
        for (int32_t n = pixels; n > 0; --n, x += d->x_pixel, out += channels) {
            interior_c4(d, blk, x, k_h, k_w, out);
        }
    }
}

/* interior_block with the filter size as a literal for 3x3 and 5x5 (the code of each is a
 * few KB: other sizes share the loop). */
static __attribute__((noinline)) void
interior_specialised(const zo_conv_params *p, const dw_layer *d, const dw_block *blk,
                     const int8_t *image, int8_t *output)
{
    if (p->k_h == 3 && p->k_w == 3) {
        interior_block(p, d, blk, image, output, 3, 3);
    } else if (p->k_h == 5 && p->k_w == 5) {
        interior_block(p, d, blk, image, output, 5, 5);
    } else {
        interior_block(p, d, blk, image, output, p->k_h, p->k_w);
    }
}

/* zo_depthwise_conv2d_c4_s8: depth multiplier 1. The border pixels pixel by pixel, then the
 * interior rectangle one block of four channels at a time (a last channels % 4 of the
 * interior by the reference). */
void zo_depthwise_conv2d_c4_s8(const zo_conv_params *p, const int8_t *input,
                               const int8_t *weights, const int32_t *bias, int8_t *output)
{
    const int32_t channels = p->out_c;
    dw_layer d = {
        channels, p->dilation_w * channels, p->dilation_h * p->in_w * channels,
        p->k_w * channels, p->stride_w * channels, p->input_offset, zo_dup16(p->input_offset),
        bias, p->multiplier, p->shift, p->output_offset, p->act_min, p->act_max,
        zo_fast_requant(p->right_shift_only, p->act_min, p->act_max),
        interior_span(p->out_h, p->stride_h, p->pad_top, p->k_h, p->dilation_h, p->in_h),
        interior_span(p->out_w, p->stride_w, p->pad_left, p->k_w, p->dilation_w, p->in_w)};
    if (p->k_h * p->k_w > ZO_DEPTHWISE_MAX_TAPS) {
        d.rows.hi = d.rows.lo; /* no interior: every pixel takes the border path */
    }
    const int32_t image_in = p->in_h * p->in_w * channels;
    const int32_t image_out = p->out_h * p->out_w * channels;
    for (int32_t b = 0; b < p->batches; ++b) {
        border_pixels(p, &d, input + b * image_in, weights, output + b * image_out);
    }
    if (d.rows.lo == d.rows.hi || d.cols.lo == d.cols.hi) {
        return;
    }
    dw_block blk;
    int32_t c = 0;
    for (; c + 4 <= channels; c += 4) {
        load_block(p, weights, bias, c, &blk);
        for (int32_t b = 0; b < p->batches; ++b) {
            interior_specialised(p, &d, &blk, input + b * image_in + c,
                                 output + b * image_out + c);
        }
    }
    if (c < channels) { /* the reference, from channel c on (it recomputes the border too) */
        for (int32_t b = 0; b < p->batches; ++b) {
            depthwise_channels(p, input + b * image_in, weights, bias, c,
                               output + b * image_out);
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
