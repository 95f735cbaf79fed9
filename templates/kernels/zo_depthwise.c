/*
 * DEPTHWISE_CONV_2D, int8 per-channel: TFLite reference_integer_ops::DepthwiseConvPerChannel
 * (zocodegen/reference/conv.py is the numpy twin).
 *
 *   acc[c] = bias[c] + sum over in-bounds taps (x[c / depth_multiplier] + input_offset) * w[c]
 *   y[c]   = clamp(MultiplyByQuantizedMultiplier(acc[c], M[c], shift[c]) + output_offset)
 *
 * Taps in the padding contribute nothing. Two kernels, one signature:
 *   zo_depthwise_conv2d_s8     the readable reference (any depth multiplier);
 *   zo_depthwise_conv2d_c4_s8  depth multiplier 1, one block of four channels at a time:
 *     the block's taps are split once by SXTB16 into channels (c, c+2) and (c+1, c+3), and
 *     SMLABB / SMLATT accumulate the four channels of a tap from one input word;
 *     border pixels (the window clipped by the input's edges) start from the bias and add
 *       the input offset to each input word (SADD16);
 *     interior pixels (the whole window inside) start from the bias with the input offset
 *       folded in (bias + input_offset * sum of the channel's taps: every tap is in the
 *       input), so a tap costs one input word, two SXTB16 and four multiply-accumulates;
 *       3x3 windows are written in ARM assembly (GCC runs out of registers and reloads the
 *       taps), 5x5 unrolls from literals, other sizes loop;
 *     images without interior pixels pixel by pixel instead (zo_depthwise_direct.c).
 * With -DZO_PORTABLE_KERNELS both are the reference. tests/data/conv_fuzz.c checks the fast
 * kernel against the reference on random geometries, natively and under QEMU.
 */
#include "zo_depthwise.h"
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
    int32_t x_pixel;       /* input bytes between horizontally adjacent output pixels */
    uint32_t offset2;      /* input_offset in both halfwords */
    int32_t output_offset, act_min, act_max;
    int32_t form;          /* zo_requant_form */
    int32_t c;             /* zo_requantize_prepared's 1 + 2 * output_offset */
    dw_span rows, cols;    /* the interior: output rows and columns whose window is whole */
} dw_layer;

/* ---- Per block of four channels -----------------------------------------------------------
 * A block holds its filter taps split once (SXTB16 into lanes (c, c+2) and (c+1, c+3)), its
 * plain bias, the bias with the input offset folded in, and its requantization parameters;
 * every output pixel of the four channels is then computed from it: the border pixels (the
 * window clipped by the input's edges) tap by tap with the input offset added (SADD16), the
 * interior pixels (the whole window inside) from the folded bias (bias + input_offset * the
 * sum of the channel's taps: every tap contributes), so a tap there costs one input word, two
 * SXTB16 and four multiply-accumulates. */

/* Filters up to 7x7 keep their split taps on the stack (8 bytes a tap); larger ones run the
 * reference. */
#define ZO_DEPTHWISE_MAX_TAPS 49

typedef struct {
    uint32_t taps[2 * ZO_DEPTHWISE_MAX_TAPS]; /* tap t: lanes (c, c+2) at 2t, (c+1, c+3) at 2t+1 */
    int32_t bias[4], folded[4];
    int32_t doubled[4], right_1[4]; /* 2 * multiplier, -shift - 1 (zo_requantize_prepared) */
} dw_block;

/* Taps [first, last) of a filter (row-major): what the pixels of some runs read. */
typedef struct {
    int32_t first, last;
} dw_taps;

/* The block of channels c..c+3: the taps `used` split, or every tap and the bias with the
 * input offset folded in when its interior pixels are computed from it (`folded`). */
static void load_block(const zo_conv_params *p, const int8_t *weights, const int32_t *bias,
                       int32_t c, int folded, dw_taps used, dw_block *blk)
{
    /* the taps' sums per lane (at most 49 int8 taps: int16 holds them), for `folded` */
    uint32_t sum_even = 0, sum_odd = 0;
    if (folded) {
        used.first = 0;
        used.last = p->k_h * p->k_w;
    }
    const int32_t stride = p->out_c; /* a local: blk's stores may alias p */
    const int8_t *w = weights + used.first * stride + c;
    uint32_t *split = blk->taps + 2 * used.first;
    for (int32_t t = used.last - used.first; t > 0; --t, w += stride, split += 2) {
        const uint32_t wv = zo_read4(w), even = zo_sxtb16(wv), odd = zo_sxtb16_ror8(wv);
        split[0] = even;
        split[1] = odd;
        sum_even = zo_sadd16(sum_even, even);
        sum_odd = zo_sadd16(sum_odd, odd);
    }
    /* channels c, c+1, c+2, c+3 are lanes (even lo, odd lo, even hi, odd hi) */
    const int32_t sums[4] = {(int16_t)(uint16_t)sum_even, (int16_t)(uint16_t)sum_odd,
                             (int16_t)(uint16_t)(sum_even >> 16),
                             (int16_t)(uint16_t)(sum_odd >> 16)};
    for (int j = 0; j < 4; ++j) {
        blk->bias[j] = bias ? bias[c + j] : 0;
        /* wraps like the int32 sums it stands for */
        blk->folded[j] = (int32_t)((uint32_t)blk->bias[j] + (uint32_t)(p->input_offset * sums[j]));
        blk->doubled[j] = zo_doubled(p->multiplier[c + j]);
        blk->right_1[j] = -p->shift[c + j] - 1;
    }
}

/* One tap of channels c..c+3 from the input split into (c, c+2) and (c+1, c+3). */
static inline __attribute__((always_inline)) void
mac_split(uint32_t x_even, uint32_t x_odd, const uint32_t *tap, int32_t *a0, int32_t *a1,
          int32_t *a2, int32_t *a3)
{
    *a0 = zo_smlabb(x_even, tap[0], *a0);
    *a2 = zo_smlatt(x_even, tap[0], *a2);
    *a1 = zo_smlabb(x_odd, tap[1], *a1);
    *a3 = zo_smlatt(x_odd, tap[1], *a3);
}

/* One tap of channels c..c+3: xv holds them for one input pixel, tap is the split filter tap. */
static inline __attribute__((always_inline)) void
mac_c4(uint32_t xv, const uint32_t *tap, int32_t *a0, int32_t *a1, int32_t *a2, int32_t *a3)
{
    mac_split(zo_sxtb16(xv), zo_sxtb16_ror8(xv), tap, a0, a1, a2, a3);
}

/* The four channels' requantization in the layer's form (zo_requant_form). */
static inline __attribute__((always_inline)) void
store_c4(const dw_layer *d, const dw_block *blk, int32_t a0, int32_t a1, int32_t a2, int32_t a3,
         const int form, int8_t *out)
{
    int8_t y[4];
    const int32_t acc[4] = {a0, a1, a2, a3};
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
        y[j] = form == ZO_REQUANT_GENERAL
               ? zo_requantize_channel(acc[j], (int32_t)((uint32_t)blk->doubled[j] >> 1),
                                       -blk->right_1[j] - 1, form, d->output_offset,
                                       d->act_min, d->act_max)
               : zo_requantize_prepared(acc[j], blk->doubled[j], blk->right_1[j], d->c, form,
                                        d->act_min, d->act_max);
    }
    out[0] = y[0];
    out[1] = y[1];
    out[2] = y[2];
    out[3] = y[3];
}

/* ---- Border pixels ----------------------------------------------------------------------- */

/* One tap row of a border pixel: row_taps taps from input x and split tap t, each input word
 * split and offset; rows of 3 and 2 taps (a 3x3 filter's) are unrolled. */
static inline __attribute__((always_inline)) void
border_row(const int8_t *x, int32_t x_tap, const uint32_t *t, int32_t row_taps,
           uint32_t offset2, int32_t *a0, int32_t *a1, int32_t *a2, int32_t *a3)
{
#define ZO_DW_BORDER_TAP(xp, tp)                                                               \
    do {                                                                                       \
        const uint32_t xv = zo_read4(xp);                                                      \
        mac_split(zo_sadd16(zo_sxtb16(xv), offset2), zo_sadd16(zo_sxtb16_ror8(xv), offset2), \
                  tp, a0, a1, a2, a3);                                                         \
    } while (0)
    if (row_taps == 3) {
        ZO_DW_BORDER_TAP(x, t);
        ZO_DW_BORDER_TAP(x + x_tap, t + 2);
        ZO_DW_BORDER_TAP(x + 2 * x_tap, t + 4);
    } else if (row_taps == 2) {
        ZO_DW_BORDER_TAP(x, t);
        ZO_DW_BORDER_TAP(x + x_tap, t + 2);
    } else {
        for (int32_t k = row_taps; k > 0; --k, x += x_tap, t += 2) {
            ZO_DW_BORDER_TAP(x, t);
        }
    }
#undef ZO_DW_BORDER_TAP
}

/* A run of n border pixels with the same window (`rows` x `row_taps` taps from input x and
 * split tap `tap`, tap_row split words to the next tap row), x_step input bytes and
 * out_step output bytes apart: from the plain bias, each input word offset. */
static inline __attribute__((always_inline)) void
border_run(const dw_layer *d, const dw_block *blk, const int8_t *x, const uint32_t *tap,
           int32_t rows, int32_t row_taps, int32_t tap_row, int32_t x_step, int32_t out_step,
           int32_t n, const int form, int8_t *out)
{
    const int32_t x_row = d->x_row, x_tap = d->x_tap;
    const uint32_t offset2 = d->offset2;
    for (; n > 0; --n, x += x_step, out += out_step) {
        int32_t a0 = blk->bias[0], a1 = blk->bias[1], a2 = blk->bias[2], a3 = blk->bias[3];
        const int8_t *xr = x;
        const uint32_t *tr = tap;
#pragma GCC unroll 3
        for (int32_t r = rows; r > 0; --r, xr += x_row, tr += tap_row) {
            border_row(xr, x_tap, tr, row_taps, offset2, &a0, &a1, &a2, &a3);
        }
        store_c4(d, blk, a0, a1, a2, a3, form, out);
    }
}

/* border_run with the window's shape as literals where a 3x3 filter's border windows have
 * it (2 or 3 rows of 2 or 3 taps: every tap unrolled; larger filters' windows of these
 * shapes too). */
static inline __attribute__((always_inline)) void
border_shaped(const dw_layer *d, const dw_block *blk, const int8_t *x, const uint32_t *tap,
              int32_t rows, int32_t row_taps, int32_t tap_row, int32_t x_step,
              int32_t out_step, int32_t n, const int form, int8_t *out)
{
    switch (64 * rows + row_taps) { /* row_taps <= ZO_DEPTHWISE_MAX_TAPS < 64 */
    case 64 * 3 + 3:
        border_run(d, blk, x, tap, 3, 3, tap_row, x_step, out_step, n, form, out);
        break;
    case 64 * 3 + 2:
        border_run(d, blk, x, tap, 3, 2, tap_row, x_step, out_step, n, form, out);
        break;
    case 64 * 2 + 3:
        border_run(d, blk, x, tap, 2, 3, tap_row, x_step, out_step, n, form, out);
        break;
    case 64 * 2 + 2:
        border_run(d, blk, x, tap, 2, 2, tap_row, x_step, out_step, n, form, out);
        break;
    default:
        border_run(d, blk, x, tap, rows, row_taps, tap_row, x_step, out_step, n, form, out);
    }
}

/* A run of border pixels that share one window: the output pixels out + i * out_step,
 * i < n, whose windows start at input x + i * x_step and split tap `tap`. Worked out once
 * per call of the kernel (dw_runs), then used by every block of channels. */
typedef struct {
    int32_t x, out;          /* byte offsets in the image and its output (channel 0) */
    int32_t x_step, out_step;
    int16_t tap, n;
    int8_t rows, row_taps;
} dw_run;

/* Runs kept on the stack at once; a layer with more is done in several passes. */
#define ZO_DEPTHWISE_RUNS 32

/* Where dw_runs stopped: the border pixels are the rows outside the interior (pixel by
 * pixel but for the interior's columns, one run along the row), then the columns outside
 * it (one run down the interior's rows each). */
typedef struct {
    int32_t oy, ox;
    int down; /* 0: the rows, 1: the columns */
} dw_cursor;

static void add_run(const zo_conv_params *p, const dw_layer *d, int32_t oy, int32_t ox,
                    int32_t dy, int32_t dx, int32_t n, dw_run *run, dw_taps *used)
{
    const int32_t channels = d->channels;
    const int32_t y0 = oy * p->stride_h - p->pad_top, x0 = ox * p->stride_w - p->pad_left;
    int32_t ky0, ky1, kx0, kx1;
    tap_window(y0, p->dilation_h, p->k_h, p->in_h, &ky0, &ky1);
    tap_window(x0, p->dilation_w, p->k_w, p->in_w, &kx0, &kx1);
    run->x = ((y0 + ky0 * p->dilation_h) * p->in_w + x0 + kx0 * p->dilation_w) * channels;
    run->out = (oy * p->out_w + ox) * channels;
    run->x_step = (dy * p->stride_h * p->in_w + dx * p->stride_w) * channels;
    run->out_step = (dy * p->out_w + dx) * channels;
    run->tap = (int16_t)(ky0 * p->k_w + kx0);
    run->n = (int16_t)n;
    run->rows = (int8_t)(ky1 - ky0);
    run->row_taps = (int8_t)(kx1 - kx0);
    if (ky0 < ky1 && kx0 < kx1) {
        const int32_t first = ky0 * p->k_w + kx0, last = (ky1 - 1) * p->k_w + kx1;
        used->first = first < used->first ? first : used->first;
        used->last = last > used->last ? last : used->last;
    }
}

/* Up to ZO_DEPTHWISE_RUNS runs from the cursor on, into runs, and the taps they read; returns
 * how many (fewer: the border is done). Runs split where n would pass int16. */
static int32_t dw_runs(const zo_conv_params *p, const dw_layer *d, dw_cursor *at, dw_run *runs,
                       dw_taps *used)
{
    const dw_span rows = d->rows, cols = d->cols;
    int32_t count = 0;
    used->first = p->k_h * p->k_w;
    used->last = 0;
    while (count < ZO_DEPTHWISE_RUNS) {
        if (!at->down) {
            if (at->oy == rows.lo && rows.lo < rows.hi) {
                at->oy = rows.hi;
            }
            if (at->oy >= p->out_h) {
                at->down = 1;
                at->oy = rows.lo;
                at->ox = 0;
                continue;
            }
            const int interior_cols = at->ox == cols.lo && cols.lo < cols.hi;
            const int32_t left = interior_cols ? cols.hi - at->ox : 1;
            const int32_t n = left < 32767 ? left : 32767;
            add_run(p, d, at->oy, at->ox, 0, 1, n, &runs[count++], used);
            at->ox += n;
            if (at->ox >= p->out_w) {
                ++at->oy;
                at->ox = 0;
            }
        } else {
            if (at->ox == cols.lo && cols.lo < cols.hi) {
                at->ox = cols.hi;
            }
            if (at->ox >= p->out_w || rows.lo >= rows.hi) {
                break;
            }
            const int32_t left = rows.hi - at->oy;
            const int32_t n = left < 32767 ? left : 32767;
            add_run(p, d, at->oy, at->ox, 1, 0, n, &runs[count++], used);
            at->oy += n;
            if (at->oy >= rows.hi) {
                ++at->ox;
                at->oy = rows.lo;
            }
        }
    }
    return count;
}

/* Channels c..c+3 of the border pixels of the given runs of one image. The requantization
 * form is read per pixel here (a literal would triple this code for pixels that are few). */
static __attribute__((noinline)) void
border_block(const dw_layer *d, const dw_block *blk, const dw_run *runs, int32_t count,
             int32_t tap_row, const int8_t *image, int8_t *output)
{
    for (const dw_run *r = runs; r != runs + count; ++r) {
        border_shaped(d, blk, image + r->x, blk->taps + 2 * r->tap, r->rows, r->row_taps,
                      tap_row, r->x_step, r->out_step, r->n, d->form, output + r->out);
    }
}

/* ---- Interior pixels --------------------------------------------------------------------- */

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
    switch (d->form) {
    case ZO_REQUANT_INT8:
        store_c4(d, blk, a0, a1, a2, a3, ZO_REQUANT_INT8, out);
        break;
    case ZO_REQUANT_CLAMPED:
        store_c4(d, blk, a0, a1, a2, a3, ZO_REQUANT_CLAMPED, out);
        break;
    default:
        store_c4(d, blk, a0, a1, a2, a3, ZO_REQUANT_GENERAL, out);
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

/* The border runs and the interior rectangle, per block of four channels. */
static __attribute__((noinline)) void
depthwise_runs(const zo_conv_params *p, const dw_layer *d, const int8_t *input,
               const int8_t *weights, const int32_t *bias, int8_t *output)
{
    const int32_t channels = d->channels;
    const int interior = d->rows.lo < d->rows.hi && d->cols.lo < d->cols.hi;
    const int32_t image_in = p->in_h * p->in_w * channels;
    const int32_t image_out = p->out_h * p->out_w * channels;
    dw_block blk;
    dw_run runs[ZO_DEPTHWISE_RUNS];
    dw_cursor at = {0, 0, 0};
    dw_taps used;
    int32_t count = dw_runs(p, d, &at, runs, &used);
    for (int pass = 0;; ++pass) { /* one pass unless the border has more runs than fit */
        for (int32_t c = 0; c + 4 <= channels; c += 4) {
            load_block(p, weights, bias, c, interior && pass == 0, used, &blk);
            for (int32_t b = 0; b < p->batches; ++b) {
                const int8_t *image = input + b * image_in + c;
                int8_t *out = output + b * image_out + c;
                border_block(d, &blk, runs, count, 2 * p->k_w, image, out);
                if (interior && pass == 0) {
                    interior_specialised(p, d, &blk, image, out);
                }
            }
        }
        if (count < ZO_DEPTHWISE_RUNS || (count = dw_runs(p, d, &at, runs, &used)) == 0) {
            break;
        }
    }
}

/* zo_depthwise_conv2d_c4_s8: depth multiplier 1. Pixel by pixel when no output pixel (or
 * few: ZO_DEPTHWISE_DIRECT) is an interior one (zo_depthwise_direct.c), else per block of
 * four channels its border pixels and then its interior rectangle (depthwise_runs); the last
 * channels % 4 by the reference, as are filters with more than ZO_DEPTHWISE_MAX_TAPS taps. */
void zo_depthwise_conv2d_c4_s8(const zo_conv_params *p, const int8_t *input,
                               const int8_t *weights, const int32_t *bias, int8_t *output)
{
    if (p->k_h * p->k_w > ZO_DEPTHWISE_MAX_TAPS) {
        zo_depthwise_conv2d_s8(p, input, weights, bias, output);
        return;
    }
    const int32_t channels = p->out_c;
    const dw_layer d = {
        channels, p->dilation_w * channels, p->dilation_h * p->in_w * channels,
        p->stride_w * channels, zo_dup16(p->input_offset), p->output_offset, p->act_min,
        p->act_max, zo_requant_form(p->right_shift_only, p->act_min, p->act_max),
        1 + 2 * p->output_offset,
        interior_span(p->out_h, p->stride_h, p->pad_top, p->k_h, p->dilation_h, p->in_h),
        interior_span(p->out_w, p->stride_w, p->pad_left, p->k_w, p->dilation_w, p->in_w)};
    const int32_t interior = (d.rows.hi - d.rows.lo) * (d.cols.hi - d.cols.lo);
    if (100 * interior <= ZO_DEPTHWISE_DIRECT * p->out_h * p->out_w) {
        zo_depthwise_direct_c4_s8(p, input, weights, bias, output);
    } else {
        depthwise_runs(p, &d, input, weights, bias, output);
    }
    const int32_t image_in = p->in_h * p->in_w * channels;
    const int32_t image_out = p->out_h * p->out_w * channels;
    const int32_t c = channels & ~3;
    if (c < channels) { /* the last channels % 4, every pixel */
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
