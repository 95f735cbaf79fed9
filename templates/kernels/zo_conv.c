/*
 * CONV_2D, int8 per-channel: TFLite reference_integer_ops::ConvPerChannel
 * (zocodegen/reference/conv.py is the numpy twin), with the input offset folded into the bias.
 *
 * TFLite computes  acc[c] = bias[c] + sum over in-bounds taps (x + input_offset) * w[c].
 * The generator (frozen layers) and the training engine (trained layers) pass instead
 *
 *     folded[c] = bias[c] + input_offset * sum of all of w[c]'s taps
 *
 * and every kernel here computes  acc[c] = folded[c] + sum over all taps x~ * w[c], where a tap
 * in the padding reads x~ = the input zero point (-input_offset). Both sums are the same
 * integer: a padding tap adds (input_offset + zero point) * w = 0. Then
 *
 *     y[c] = clamp(MultiplyByQuantizedMultiplier(acc[c], M[c], shift[c]) + output_offset)
 *
 * Three kernels, one signature (the generator picks one per layer, it knows every shape):
 *   zo_conv2d_s8         the readable reference: loops over taps (any geometry);
 *   zo_conv2d_1x1_s8     1x1, stride 1, no padding: the input pixels times the filters;
 *   zo_conv2d_im2col_s8  k x k: each output pixel's receptive field copied into a row of
 *                        scratch (padding filled with the zero point), then the same
 *                        matrix product. Also the path for 1-3 input channels, whose rows
 *                        are k_h * k_w * in_c contiguous bytes.
 * The pixels' rows are first widened once into p->scratch as the halfword pairs SXTB16
 * makes, so that every output channel reuses them. The 1x1 kernel computes 4 output pixels x
 * 1 output channel per inner loop (expand_quad, dot_4x1_x16): per four bytes one word of the
 * filter split by two SXTB16, two LDM of four input lanes and eight SMLAD (16 MACs in 13
 * instructions), the channel's requantization parameters read once for the four pixels.
 * im2col (and the last one to three pixels of a 1x1 layer) computes 2 output pixels x 2
 * output channels (expand_rows, dot_2x2_x16): per four bytes two LDRD of input lanes, one
 * word of each filter split by SXTB16 and eight SMLAD (16 MACs in 16 instructions). Eight
 * bytes per iteration in both. With -DZO_PORTABLE_KERNELS every kernel is the reference.
 */
#include "zo_kernels.h"
#include "zo_requant.h"
#include "zo_simd.h"

void zo_conv2d_s8(const zo_conv_params *p, const int8_t *input, const int8_t *weights,
                  const int32_t *folded, int8_t *output)
{
    const int32_t in_c = p->in_c;
    const int32_t zero_point = -p->input_offset;
    for (int32_t b = 0; b < p->batches; ++b) {
        const int8_t *image = input + b * p->in_h * p->in_w * in_c;
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            for (int32_t ox = 0; ox < p->out_w; ++ox) {
                for (int32_t oc = 0; oc < p->out_c; ++oc) {
                    const int8_t *w = weights + oc * p->k_h * p->k_w * in_c;
                    int32_t acc = folded[oc];
                    for (int32_t ky = 0; ky < p->k_h; ++ky) {
                        const int32_t y = oy * p->stride_h - p->pad_top + ky * p->dilation_h;
                        for (int32_t kx = 0; kx < p->k_w; ++kx, w += in_c) {
                            const int32_t x = ox * p->stride_w - p->pad_left + kx * p->dilation_w;
                            if (y >= 0 && y < p->in_h && x >= 0 && x < p->in_w) {
                                const int8_t *pixel = image + (y * p->in_w + x) * in_c;
                                for (int32_t ic = 0; ic < in_c; ++ic) {
                                    acc += pixel[ic] * w[ic];
                                }
                            } else { /* padding: the zero point */
                                for (int32_t ic = 0; ic < in_c; ++ic) {
                                    acc += zero_point * w[ic];
                                }
                            }
                        }
                    }
                    *output++ = zo_offset_clamp_s8(zo_mbqm(acc, p->multiplier[oc],
                                                           (int)p->shift[oc]),
                                                   p->output_offset, p->act_min, p->act_max);
                }
            }
        }
    }
}

#if ZO_FAST_KERNELS

/* Two rows of n bytes (r and r + n), four bytes at a time, as the SXTB16 halfword pairs the
 * 2 x 2 product multiplies: per four bytes, (row 0 even, row 0 odd, row 1 even, row 1 odd)
 * lanes, 16 bytes. Done once per pair of pixels, it spares every pair of output channels
 * the four SXTB16 of the input. */
static void expand_rows(const int8_t *r, int32_t n, uint32_t *x16)
{
    for (int32_t k = n >> 2; k > 0; --k, r += 4, x16 += 4) {
        const uint32_t xa = zo_read4(r), xb = zo_read4(r + n);
        x16[0] = zo_sxtb16(xa);
        x16[1] = zo_sxtb16_ror8(xa);
        x16[2] = zo_sxtb16(xb);
        x16[3] = zo_sxtb16_ror8(xb);
    }
}

/* acc += (x, x + n) . (w, w + n) over the first n & ~3 bytes, x being the two rows widened by
 * expand_rows: two rows (output pixels) times two filters (output channels) n bytes apart.
 * Per four bytes two LDRD of input lanes, a word of each filter split by SXTB16, eight
 * SMLAD; the loop needs 14 registers, all Thumb-2 has, so it is written by hand (GCC's
 * allocator spills). */
static inline void dot_2x2_x16(const uint32_t *x16, const int8_t *w, int32_t n, int32_t acc[4])
{
    int32_t a00 = acc[0], a01 = acc[1], a10 = acc[2], a11 = acc[3];
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
    /* eight bytes per iteration, then four if n & 4 */
#define ZO_STEP_X16                                                                          \
    "ldrd   %[t0], %[t1], [%[x]], #8\n\t"  /* row 0: even, odd lanes */                     \
    "ldr    %[wv], [%[w]], #4\n\t"         /* filter a */                                   \
    "ldrd   %[t2], %[t3], [%[x]], #8\n\t"  /* row 1 */                                      \
    "sxtb16 %[we], %[wv]\n\t"                                                                \
    "sxtb16 %[wv], %[wv], ror #8\n\t"                                                        \
    "smlad  %[a00], %[t0], %[we], %[a00]\n\t"                                                \
    "smlad  %[a00], %[t1], %[wv], %[a00]\n\t"                                                \
    "smlad  %[a10], %[t2], %[we], %[a10]\n\t"                                                \
    "smlad  %[a10], %[t3], %[wv], %[a10]\n\t"                                                \
    "ldr    %[wv], [%[w], %[n]]\n\t"       /* filter b (w already advanced) */              \
    "sxtb16 %[we], %[wv]\n\t"                                                                \
    "sxtb16 %[wv], %[wv], ror #8\n\t"                                                        \
    "smlad  %[a01], %[t0], %[we], %[a01]\n\t"                                                \
    "smlad  %[a01], %[t1], %[wv], %[a01]\n\t"                                                \
    "smlad  %[a11], %[t2], %[we], %[a11]\n\t"                                                \
    "smlad  %[a11], %[t3], %[wv], %[a11]\n\t"
    const uint32_t *end = x16 + (n & ~7);
    uint32_t t0, t1, t2, t3, wv, we;
    if (x16 != end) {
        __asm__ volatile("1:\n\t" ZO_STEP_X16 ZO_STEP_X16
                         "cmp    %[x], %[end]\n\t"
                         "bne    1b"
                         : [a00] "+r"(a00), [a01] "+r"(a01), [a10] "+r"(a10), [a11] "+r"(a11),
                           [x] "+r"(x16), [w] "+r"(w), [t0] "=&r"(t0), [t1] "=&r"(t1),
                           [t2] "=&r"(t2), [t3] "=&r"(t3), [wv] "=&r"(wv), [we] "=&r"(we)
                         : [n] "r"(n - 4), [end] "r"(end)
                         : "cc", "memory");
    }
    if (n & 4) {
        __asm__ volatile(ZO_STEP_X16
                         : [a00] "+r"(a00), [a01] "+r"(a01), [a10] "+r"(a10), [a11] "+r"(a11),
                           [x] "+r"(x16), [w] "+r"(w), [t0] "=&r"(t0), [t1] "=&r"(t1),
                           [t2] "=&r"(t2), [t3] "=&r"(t3), [wv] "=&r"(wv), [we] "=&r"(we)
                         : [n] "r"(n - 4)
                         : "memory");
    }
#undef ZO_STEP_X16
#else
    for (const uint32_t *end = x16 + (n & ~3); x16 != end; x16 += 4, w += 4) {
        const uint32_t wa = zo_read4(w), wb = zo_read4(w + n);
        a00 = zo_smlad(x16[0], zo_sxtb16(wa), zo_smlad(x16[1], zo_sxtb16_ror8(wa), a00));
        a10 = zo_smlad(x16[2], zo_sxtb16(wa), zo_smlad(x16[3], zo_sxtb16_ror8(wa), a10));
        a01 = zo_smlad(x16[0], zo_sxtb16(wb), zo_smlad(x16[1], zo_sxtb16_ror8(wb), a01));
        a11 = zo_smlad(x16[2], zo_sxtb16(wb), zo_smlad(x16[3], zo_sxtb16_ror8(wb), a11));
    }
#endif
    acc[0] = a00;
    acc[1] = a01;
    acc[2] = a10;
    acc[3] = a11;
}

/* acc += x . (w, w + n): one row, two filters. */
static inline void dot_1x2(const int8_t *x, const int8_t *w, int32_t n, int32_t acc[2])
{
    int32_t a0 = acc[0], a1 = acc[1];
    const int8_t *end = x + (n & ~3);
    while (x != end) {
        const uint32_t xv = zo_read4(x), wa = zo_read4(w), wb = zo_read4(w + n);
        const uint32_t x_even = zo_sxtb16(xv), x_odd = zo_sxtb16_ror8(xv);
        a0 = zo_smlad(x_even, zo_sxtb16(wa), zo_smlad(x_odd, zo_sxtb16_ror8(wa), a0));
        a1 = zo_smlad(x_even, zo_sxtb16(wb), zo_smlad(x_odd, zo_sxtb16_ror8(wb), a1));
        x += 4;
        w += 4;
    }
    for (int32_t k = n & 3; k > 0; --k, ++x, ++w) {
        a0 += x[0] * w[0];
        a1 += x[0] * w[n];
    }
    acc[0] = a0;
    acc[1] = a1;
}

/* The requantization of one layer, held in locals: the int8 stores of the outputs may alias
 * anything, so fields read through p would be reloaded after every store. */
typedef struct {
    const int32_t *multiplier, *shift;
    int32_t offset, lo, hi;
} requant_ctx;

static inline requant_ctx requant_of(const zo_conv_params *p)
{
    const requant_ctx r = {p->multiplier, p->shift, p->output_offset, p->act_min, p->act_max};
    return r;
}

/* Channel c of two output pixels (acc0, acc1): the channel's parameters are read once, and
 * both results are computed before either is stored. */
static inline __attribute__((always_inline)) void
requant_pair(const requant_ctx *r, int32_t c, int32_t acc0, int32_t acc1, const int form,
             int8_t *y0, int8_t *y1)
{
    const int32_t multiplier = r->multiplier[c], shift = r->shift[c];
    const int8_t v0 = zo_requantize_channel(acc0, multiplier, shift, form, r->offset, r->lo,
                                          r->hi);
    const int8_t v1 = zo_requantize_channel(acc1, multiplier, shift, form, r->offset, r->lo,
                                          r->hi);
    *y0 = v0;
    *y1 = v1;
}

/* One or two output pixels for every output channel: rows r (and r + n when `pair`) of n
 * bytes (the same length as every filter), into out0 (and out1; with one pixel out1 is a
 * throwaway copy of out0's channel). */
static inline __attribute__((always_inline)) void
matmul_rows_as(const zo_conv_params *p, const int8_t *r, int32_t n, int pair, uint32_t *x16,
               const int8_t *weights, const int32_t *folded, int8_t *out0, int8_t *out1,
               const int form)
{
    const requant_ctx q = requant_of(p);
    const int32_t out_c = p->out_c;
    if (pair) {
        expand_rows(r, n, x16);
    }
    int8_t spare[2];
    int32_t oc = 0;
    for (; oc + 2 <= out_c; oc += 2) {
        const int8_t *w = weights + oc * n;
        if (pair) {
            int32_t acc[4] = {folded[oc], folded[oc + 1], folded[oc], folded[oc + 1]};
            dot_2x2_x16(x16, w, n, acc);
            for (int32_t k = n & ~3; k < n; ++k) { /* the last n % 4 bytes */
                acc[0] += r[k] * w[k];
                acc[1] += r[k] * w[n + k];
                acc[2] += r[n + k] * w[k];
                acc[3] += r[n + k] * w[n + k];
            }
            requant_pair(&q, oc, acc[0], acc[2], form, &out0[oc], &out1[oc]);
            requant_pair(&q, oc + 1, acc[1], acc[3], form, &out0[oc + 1], &out1[oc + 1]);
        } else {
            int32_t acc[2] = {folded[oc], folded[oc + 1]};
            dot_1x2(r, w, n, acc);
            requant_pair(&q, oc, acc[0], acc[0], form, &out0[oc], &spare[0]);
            requant_pair(&q, oc + 1, acc[1], acc[1], form, &out0[oc + 1], &spare[1]);
        }
    }
    if (oc < out_c) { /* an odd last channel */
        const int8_t *w = weights + oc * n;
        int32_t acc0 = folded[oc], acc1 = folded[oc];
        for (int32_t k = 0; k < n; ++k) {
            acc0 += r[k] * w[k];
            acc1 += pair ? r[n + k] * w[k] : 0;
        }
        requant_pair(&q, oc, acc0, acc1, form, &out0[oc], pair ? &out1[oc] : &spare[0]);
    }
}

/* matmul_rows_as specialised for the layer's requantization form (zo_requant_form). */
static void matmul_rows(const zo_conv_params *p, const int8_t *r, int32_t n, int pair,
                        uint32_t *x16, const int8_t *weights, const int32_t *folded,
                        int8_t *out0, int8_t *out1)
{
    switch (zo_requant_form(p->right_shift_only, p->act_min, p->act_max)) {
    case ZO_REQUANT_INT8:
        matmul_rows_as(p, r, n, pair, x16, weights, folded, out0, out1, ZO_REQUANT_INT8);
        break;
    case ZO_REQUANT_CLAMPED:
        matmul_rows_as(p, r, n, pair, x16, weights, folded, out0, out1, ZO_REQUANT_CLAMPED);
        break;
    default:
        matmul_rows_as(p, r, n, pair, x16, weights, folded, out0, out1, ZO_REQUANT_GENERAL);
    }
}

/* The widened rows at the start of p->scratch, 4-aligned (planner/scratch.py plans the
 * slack: a ring before them can end anywhere). */
static inline uint32_t *widened_rows(const zo_conv_params *p)
{
    return (uint32_t *)(((uintptr_t)p->scratch + 3u) & ~(uintptr_t)3u);
}

/* n bytes, a word at a time (runs are short: k_w * in_c bytes) */
static inline void copy_run(int8_t *dst, const int8_t *src, int32_t n)
{
    for (; n >= 4; n -= 4, dst += 4, src += 4) {
        zo_write4(dst, zo_read4(src));
    }
    for (; n > 0; --n) {
        *dst++ = *src++;
    }
}

static inline void fill_run(int8_t *dst, int8_t value, int32_t n)
{
    for (; n > 0; --n) {
        *dst++ = value;
    }
}

/* The receptive field of output pixel (oy, ox) as one row of k_h * k_w * in_c bytes. */
static void im2col_row(const zo_conv_params *p, const int8_t *image, int32_t oy, int32_t ox,
                       int8_t *row)
{
    const int8_t zero_point = (int8_t)(-p->input_offset);
    const int32_t in_c = p->in_c;
    const int32_t run = p->k_w * in_c;
    const int32_t y0 = oy * p->stride_h - p->pad_top;
    const int32_t x0 = ox * p->stride_w - p->pad_left;
    const int contiguous = p->dilation_w == 1 && x0 >= 0 && x0 + p->k_w <= p->in_w;
    for (int32_t ky = 0; ky < p->k_h; ++ky, row += run) {
        const int32_t y = y0 + ky * p->dilation_h;
        if (y < 0 || y >= p->in_h) {
            fill_run(row, zero_point, run);
        } else if (contiguous) { /* the k_w taps are one run of the input row */
            copy_run(row, image + (y * p->in_w + x0) * in_c, run);
        } else {
            for (int32_t kx = 0; kx < p->k_w; ++kx) {
                const int32_t x = x0 + kx * p->dilation_w;
                if (x < 0 || x >= p->in_w) {
                    fill_run(row + kx * in_c, zero_point, in_c);
                } else {
                    copy_run(row + kx * in_c, image + (y * p->in_w + x) * in_c, in_c);
                }
            }
        }
    }
}

void zo_conv2d_im2col_s8(const zo_conv_params *p, const int8_t *input, const int8_t *weights,
                         const int32_t *folded, int8_t *output)
{
    const int32_t n = p->k_h * p->k_w * p->in_c;
    const int32_t pixels = p->out_h * p->out_w;
    uint32_t *x16 = widened_rows(p);
    int8_t *rows = (int8_t *)(x16 + (n & ~3)); /* after the widened rows */
    for (int32_t b = 0; b < p->batches; ++b) {
        const int8_t *image = input + b * p->in_h * p->in_w * p->in_c;
        int8_t *out = output + b * pixels * p->out_c;
        for (int32_t i = 0; i < pixels; i += 2) {
            const int pair = i + 1 < pixels;
            im2col_row(p, image, i / p->out_w, i % p->out_w, rows);
            if (pair) {
                im2col_row(p, image, (i + 1) / p->out_w, (i + 1) % p->out_w, rows + n);
            }
            matmul_rows(p, rows, n, pair, x16, weights, folded, out + i * p->out_c,
                        out + (i + 1) * p->out_c);
        }
    }
}

/* Four rows of n bytes (r, r + n, r + 2n, r + 3n), four bytes at a time, in the order
 * dot_4x1_x16 loads them: per four bytes the even (SXTB16) lanes of the four rows, then their
 * odd (SXTB16 ROR #8) lanes, eight words. Done once per four pixels for every channel. */
static void expand_quad(const int8_t *r, int32_t n, uint32_t *x16)
{
    for (int32_t k = n >> 2; k > 0; --k, r += 4, x16 += 8) {
        const uint32_t a = zo_read4(r), b = zo_read4(r + n);
        const uint32_t c = zo_read4(r + 2 * n), d = zo_read4(r + 3 * n);
        x16[0] = zo_sxtb16(a);
        x16[1] = zo_sxtb16(b);
        x16[2] = zo_sxtb16(c);
        x16[3] = zo_sxtb16(d);
        x16[4] = zo_sxtb16_ror8(a);
        x16[5] = zo_sxtb16_ror8(b);
        x16[6] = zo_sxtb16_ror8(c);
        x16[7] = zo_sxtb16_ror8(d);
    }
}

/* acc[j] += row j . w over the first n & ~3 bytes, the four rows widened by expand_quad: four
 * output pixels times one filter. Per four bytes one LDR of the filter split by two SXTB16,
 * two LDM of four input lanes each and eight SMLAD (16 MACs in 13 instructions; the 2 x 2
 * product above needs 16). The LDM's registers must ascend, so the lanes are pinned to
 * r0-r3; 13 registers in all. */
static inline void dot_4x1_x16(const uint32_t *x16, const int8_t *w, int32_t n, int32_t acc[4])
{
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#define ZO_STEP_QUAD                                                                         \
    "ldr    %[wv], [%[w]], #4\n\t"                                                         \
    "ldmia  %[x]!, { %[t0], %[t1], %[t2], %[t3] }\n\t" /* even lanes of the four rows */       \
    "sxtb16 %[we], %[wv]\n\t"                                                               \
    "smlad  %[a0], %[t0], %[we], %[a0]\n\t"                                                 \
    "smlad  %[a1], %[t1], %[we], %[a1]\n\t"                                                 \
    "smlad  %[a2], %[t2], %[we], %[a2]\n\t"                                                 \
    "smlad  %[a3], %[t3], %[we], %[a3]\n\t"                                                 \
    "ldmia  %[x]!, { %[t0], %[t1], %[t2], %[t3] }\n\t" /* odd lanes */                       \
    "sxtb16 %[wv], %[wv], ror #8\n\t"                                                       \
    "smlad  %[a0], %[t0], %[wv], %[a0]\n\t"                                                 \
    "smlad  %[a1], %[t1], %[wv], %[a1]\n\t"                                                 \
    "smlad  %[a2], %[t2], %[wv], %[a2]\n\t"                                                 \
    "smlad  %[a3], %[t3], %[wv], %[a3]\n\t"
    register uint32_t t0 __asm__("r0"), t1 __asm__("r1"), t2 __asm__("r2"), t3 __asm__("r3");
    uint32_t wv, we;
    const uint32_t *end = x16 + 2 * (n & ~7);
    if (x16 != end) {
        __asm__ volatile("1:\n\t" ZO_STEP_QUAD ZO_STEP_QUAD
                         "cmp    %[x], %[end]\n\t"
                         "bne    1b"
                         : [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3),
                           [x] "+r"(x16), [w] "+r"(w), [t0] "=&r"(t0), [t1] "=&r"(t1),
                           [t2] "=&r"(t2), [t3] "=&r"(t3), [wv] "=&r"(wv), [we] "=&r"(we)
                         : [end] "r"(end)
                         : "cc", "memory");
    }
    if (n & 4) {
        __asm__ volatile(ZO_STEP_QUAD
                         : [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3),
                           [x] "+r"(x16), [w] "+r"(w), [t0] "=&r"(t0), [t1] "=&r"(t1),
                           [t2] "=&r"(t2), [t3] "=&r"(t3), [wv] "=&r"(wv), [we] "=&r"(we)
                         :
                         : "memory");
    }
#undef ZO_STEP_QUAD
#else
    for (const uint32_t *end = x16 + 2 * (n & ~3); x16 != end; x16 += 8, w += 4) {
        const uint32_t wv = zo_read4(w), we = zo_sxtb16(wv), wo = zo_sxtb16_ror8(wv);
        a0 = zo_smlad(x16[4], wo, zo_smlad(x16[0], we, a0));
        a1 = zo_smlad(x16[5], wo, zo_smlad(x16[1], we, a1));
        a2 = zo_smlad(x16[6], wo, zo_smlad(x16[2], we, a2));
        a3 = zo_smlad(x16[7], wo, zo_smlad(x16[3], we, a3));
    }
#endif
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* Channel c of four output pixels, stored `stride` bytes apart from y: the channel's
 * parameters are read once, and all four results are computed before any is stored. */
static inline __attribute__((always_inline)) void
requant_quad(const requant_ctx *r, int32_t c, int32_t a0, int32_t a1, int32_t a2, int32_t a3,
             const int form, int8_t *y, int32_t stride)
{
    const int32_t multiplier = r->multiplier[c], shift = r->shift[c];
    const int8_t v0 = zo_requantize_channel(a0, multiplier, shift, form, r->offset, r->lo,
                                            r->hi);
    const int8_t v1 = zo_requantize_channel(a1, multiplier, shift, form, r->offset, r->lo,
                                            r->hi);
    const int8_t v2 = zo_requantize_channel(a2, multiplier, shift, form, r->offset, r->lo,
                                            r->hi);
    const int8_t v3 = zo_requantize_channel(a3, multiplier, shift, form, r->offset, r->lo,
                                            r->hi);
    y[0] = v0;
    y += stride;
    y[0] = v1;
    y += stride;
    y[0] = v2;
    y[stride] = v3;
}

/* Four output pixels (rows r + j n, j = 0..3, widened into x16) for every output channel,
 * into out + j out_c: each channel's filter and requantization parameters are read once for
 * the four. */
static inline __attribute__((always_inline)) void
matmul_quad_as(const zo_conv_params *p, const int8_t *r, int32_t n, uint32_t *x16,
               const int8_t *weights, const int32_t *folded, int8_t *out, const int form)
{
    const requant_ctx q = requant_of(p);
    const int32_t out_c = p->out_c;
    expand_quad(r, n, x16);
    const int8_t *w = weights;
    for (int32_t oc = 0; oc < out_c; ++oc, w += n) {
        int32_t acc[4] = {folded[oc], folded[oc], folded[oc], folded[oc]};
        dot_4x1_x16(x16, w, n, acc);
        for (int32_t k = n & ~3; k < n; ++k) { /* the last n % 4 bytes */
            acc[0] += r[k] * w[k];
            acc[1] += r[n + k] * w[k];
            acc[2] += r[2 * n + k] * w[k];
            acc[3] += r[3 * n + k] * w[k];
        }
        requant_quad(&q, oc, acc[0], acc[1], acc[2], acc[3], form, out + oc, out_c);
    }
}

/* matmul_quad_as specialised for the layer's requantization form (zo_requant_form). */
static void matmul_quad(const zo_conv_params *p, const int8_t *r, int32_t n, uint32_t *x16,
                        const int8_t *weights, const int32_t *folded, int8_t *out)
{
    switch (zo_requant_form(p->right_shift_only, p->act_min, p->act_max)) {
    case ZO_REQUANT_INT8:
        matmul_quad_as(p, r, n, x16, weights, folded, out, ZO_REQUANT_INT8);
        break;
    case ZO_REQUANT_CLAMPED:
        matmul_quad_as(p, r, n, x16, weights, folded, out, ZO_REQUANT_CLAMPED);
        break;
    default:
        matmul_quad_as(p, r, n, x16, weights, folded, out, ZO_REQUANT_GENERAL);
    }
}

/* 1x1, stride 1, no padding: consecutive output pixels are consecutive input pixels, in_c
 * bytes apart, which is the layout matmul_quad and matmul_rows take, so the input is
 * multiplied in place: four pixels at a time, the last one to three two at a time. */
void zo_conv2d_1x1_s8(const zo_conv_params *p, const int8_t *input, const int8_t *weights,
                      const int32_t *folded, int8_t *output)
{
    const int32_t n = p->in_c;
    const int32_t pixels = p->batches * p->out_h * p->out_w;
    uint32_t *x16 = widened_rows(p);
    int32_t i = 0;
    for (; i + 4 <= pixels; i += 4) {
        matmul_quad(p, input + i * n, n, x16, weights, folded, output + i * p->out_c);
    }
    for (; i < pixels; i += 2) {
        matmul_rows(p, input + i * n, n, i + 1 < pixels, x16, weights, folded,
                    output + i * p->out_c, output + (i + 1) * p->out_c);
    }
}

#else /* ZO_PORTABLE_KERNELS: the reference */

void zo_conv2d_im2col_s8(const zo_conv_params *p, const int8_t *input, const int8_t *weights,
                         const int32_t *folded, int8_t *output)
{
    zo_conv2d_s8(p, input, weights, folded, output);
}

void zo_conv2d_1x1_s8(const zo_conv_params *p, const int8_t *input, const int8_t *weights,
                      const int32_t *folded, int8_t *output)
{
    zo_conv2d_s8(p, input, weights, folded, output);
}

#endif

/*
 * A convolution whose output overwrites its input (MCUNet / TinyEngine's in-place
 * depthwise, for any convolution whose output is no larger than its input). Output rows
 * are computed in order by p->row_kernel on the input rows they read, into a ring of
 * p->ring_rows rows; a finished row is copied over the input as soon as the bytes it lands
 * on hold only input rows no later output row reads. The arithmetic is the row kernel's,
 * so the result equals the row kernel on separate buffers. The planner sizes the ring by
 * the same rule (zocodegen/planner/scratch.py: in_place_rows).
 */
void zo_conv_in_place_s8(const zo_conv_params *p, const int8_t *input, const int8_t *weights,
                         const int32_t *bias, int8_t *output)
{
    const int32_t in_row = p->in_w * p->in_c, out_row = p->out_w * p->out_c;
    const int32_t span = (p->k_h - 1) * p->dilation_h + 1; /* input rows one output row reads */
    int8_t *ring = p->scratch;
    zo_conv_params row = *p;
    row.out_h = 1;
    row.scratch = p->scratch + p->ring_rows * out_row;
    int32_t committed = 0;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t y0 = oy * p->stride_h - p->pad_top;
        const int32_t lo = y0 > 0 ? y0 : 0;
        const int32_t hi = y0 + span < p->in_h ? y0 + span : p->in_h;
        row.in_h = hi - lo;
        row.pad_top = lo - y0;
        p->row_kernel(&row, input + lo * in_row, weights, bias,
                      ring + (oy % p->ring_rows) * out_row);
        const int32_t next = (oy + 1) * p->stride_h - p->pad_top;
        const int32_t first_read = oy + 1 < p->out_h ? (next > 0 ? next : 0) : p->in_h;
        while (committed <= oy && (committed + 1) * out_row <= first_read * in_row) {
            const zo_copy_params bytes = {out_row};
            zo_copy_bytes(&bytes, ring + (committed % p->ring_rows) * out_row,
                          output + committed * out_row);
            ++committed;
        }
    }
}
