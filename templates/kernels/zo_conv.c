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
 *                        p->scratch (padding filled with the zero point), then the same
 *                        matrix product. Also the path for 1-3 input channels, whose rows
 *                        are k_h * k_w * in_c contiguous bytes.
 * The matrix product computes 2 output pixels x 2 output channels per inner loop: four bytes
 * of each of two rows and two filters per iteration, SXTB16 into halfword pairs, eight SMLAD
 * (16 MACs). With -DZO_PORTABLE_KERNELS every kernel is the reference.
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

/* Four bytes of rows x, x + n and filters w, w + n: 16 MACs in 4 LDR, 8 SXTB16, 8 SMLAD. */
static inline void step_2x2(const int8_t *x, const int8_t *w, int32_t n, int32_t *a00,
                            int32_t *a01, int32_t *a10, int32_t *a11)
{
    const uint32_t wa = zo_read4(w), wb = zo_read4(w + n);
    const uint32_t wa_even = zo_sxtb16(wa), wa_odd = zo_sxtb16_ror8(wa);
    const uint32_t xa = zo_read4(x);
    const uint32_t xa_even = zo_sxtb16(xa), xa_odd = zo_sxtb16_ror8(xa);
    *a00 = zo_smlad(xa_even, wa_even, zo_smlad(xa_odd, wa_odd, *a00));
    const uint32_t xb = zo_read4(x + n);
    const uint32_t xb_even = zo_sxtb16(xb), xb_odd = zo_sxtb16_ror8(xb);
    *a10 = zo_smlad(xb_even, wa_even, zo_smlad(xb_odd, wa_odd, *a10));
    const uint32_t wb_even = zo_sxtb16(wb), wb_odd = zo_sxtb16_ror8(wb);
    *a01 = zo_smlad(xa_even, wb_even, zo_smlad(xa_odd, wb_odd, *a01));
    *a11 = zo_smlad(xb_even, wb_even, zo_smlad(xb_odd, wb_odd, *a11));
}

/* acc += (x, x + n) . (w, w + n): two rows (output pixels) times two filters (output
 * channels), all n bytes long and each pair n bytes apart, so that one pointer per operand
 * and the distance n are all the loop holds besides the four accumulators. Eight bytes per
 * iteration halve the loop's own instructions. */
static inline void dot_2x2(const int8_t *x, const int8_t *w, int32_t n, int32_t acc[4])
{
    int32_t a00 = acc[0], a01 = acc[1], a10 = acc[2], a11 = acc[3];
    const int8_t *end = x + (n & ~3);
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
    /* step_2x2 by hand: the loop needs 14 registers (4 accumulators, x, w, n, end and six
     * temporaries), exactly what Thumb-2 has, and GCC's allocator spills three of them. */
    if (x != end) {
        uint32_t t0, t1, t2, t3, t4, t5;
        __asm__ volatile(
            "1:\n\t"
            "ldr    %[t1], [%[w]], #4\n\t"      /* wa */
            "ldr    %[t3], [%[x]], #4\n\t"      /* xa */
            "ldr    %[t2], [%[x], %[n]]\n\t"    /* xb (x already advanced: n - 4 + 4) */
            "sxtb16 %[t4], %[t1]\n\t"           /* wa even */
            "sxtb16 %[t1], %[t1], ror #8\n\t"   /* wa odd */
            "sxtb16 %[t5], %[t3]\n\t"           /* xa even */
            "sxtb16 %[t3], %[t3], ror #8\n\t"   /* xa odd */
            "smlad  %[a00], %[t5], %[t4], %[a00]\n\t"
            "smlad  %[a00], %[t3], %[t1], %[a00]\n\t"
            "sxtb16 %[t0], %[t2]\n\t"           /* xb even */
            "sxtb16 %[t2], %[t2], ror #8\n\t"   /* xb odd */
            "smlad  %[a10], %[t0], %[t4], %[a10]\n\t"
            "smlad  %[a10], %[t2], %[t1], %[a10]\n\t"
            "ldr    %[t1], [%[w], %[n]]\n\t"    /* wb (likewise) */
            "sxtb16 %[t4], %[t1]\n\t"           /* wb even */
            "sxtb16 %[t1], %[t1], ror #8\n\t"   /* wb odd */
            "smlad  %[a01], %[t5], %[t4], %[a01]\n\t"
            "smlad  %[a01], %[t3], %[t1], %[a01]\n\t"
            "smlad  %[a11], %[t0], %[t4], %[a11]\n\t"
            "smlad  %[a11], %[t2], %[t1], %[a11]\n\t"
            "cmp    %[x], %[end]\n\t"
            "bne    1b"
            : [a00] "+r"(a00), [a01] "+r"(a01), [a10] "+r"(a10), [a11] "+r"(a11),
              [x] "+r"(x), [w] "+r"(w), [t0] "=&r"(t0), [t1] "=&r"(t1), [t2] "=&r"(t2),
              [t3] "=&r"(t3), [t4] "=&r"(t4), [t5] "=&r"(t5)
            : [n] "r"(n - 4), [end] "r"(end)
            : "cc", "memory");
    }
#else
    while (x != end) {
        step_2x2(x, w, n, &a00, &a01, &a10, &a11);
        x += 4;
        w += 4;
    }
#endif
    for (int32_t k = n & 3; k > 0; --k, ++x, ++w) {
        a00 += x[0] * w[0];
        a01 += x[0] * w[n];
        a10 += x[n] * w[0];
        a11 += x[n] * w[n];
    }
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
requant_pair(const requant_ctx *r, int32_t c, int32_t acc0, int32_t acc1, const int right_only,
             int8_t *y0, int8_t *y1)
{
    const int32_t multiplier = r->multiplier[c], shift = r->shift[c];
    const int8_t v0 = zo_requantize_channel(acc0, multiplier, shift, right_only, r->offset, r->lo,
                                          r->hi);
    const int8_t v1 = zo_requantize_channel(acc1, multiplier, shift, right_only, r->offset, r->lo,
                                          r->hi);
    *y0 = v0;
    *y1 = v1;
}

/* One or two output pixels for every output channel: rows r (and r + n when `pair`) of n
 * bytes (the same length as every filter), into out0 (and out1; with one pixel out1 is a
 * throwaway copy of out0's channel). */
static inline __attribute__((always_inline)) void
matmul_rows_as(const zo_conv_params *p, const int8_t *r, int32_t n, int pair,
               const int8_t *weights, const int32_t *folded, int8_t *out0, int8_t *out1,
               const int right_only)
{
    const requant_ctx q = requant_of(p);
    const int32_t out_c = p->out_c;
    int8_t spare[2];
    int32_t oc = 0;
    for (; oc + 2 <= out_c; oc += 2) {
        const int8_t *w = weights + oc * n;
        if (pair) {
            int32_t acc[4] = {folded[oc], folded[oc + 1], folded[oc], folded[oc + 1]};
            dot_2x2(r, w, n, acc);
            requant_pair(&q, oc, acc[0], acc[2], right_only, &out0[oc], &out1[oc]);
            requant_pair(&q, oc + 1, acc[1], acc[3], right_only, &out0[oc + 1], &out1[oc + 1]);
        } else {
            int32_t acc[2] = {folded[oc], folded[oc + 1]};
            dot_1x2(r, w, n, acc);
            requant_pair(&q, oc, acc[0], acc[0], right_only, &out0[oc], &spare[0]);
            requant_pair(&q, oc + 1, acc[1], acc[1], right_only, &out0[oc + 1], &spare[1]);
        }
    }
    if (oc < out_c) { /* an odd last channel */
        const int8_t *w = weights + oc * n;
        int32_t acc0 = folded[oc], acc1 = folded[oc];
        for (int32_t k = 0; k < n; ++k) {
            acc0 += r[k] * w[k];
            acc1 += pair ? r[n + k] * w[k] : 0;
        }
        requant_pair(&q, oc, acc0, acc1, right_only, &out0[oc], pair ? &out1[oc] : &spare[0]);
    }
}

/* matmul_rows_as specialised for the layer's requantization (right_shift_only). */
static void matmul_rows(const zo_conv_params *p, const int8_t *r, int32_t n, int pair,
                        const int8_t *weights, const int32_t *folded, int8_t *out0, int8_t *out1)
{
    if (p->right_shift_only) {
        matmul_rows_as(p, r, n, pair, weights, folded, out0, out1, 1);
    } else {
        matmul_rows_as(p, r, n, pair, weights, folded, out0, out1, 0);
    }
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
    for (int32_t b = 0; b < p->batches; ++b) {
        const int8_t *image = input + b * p->in_h * p->in_w * p->in_c;
        int8_t *out = output + b * pixels * p->out_c;
        for (int32_t i = 0; i < pixels; i += 2) {
            const int pair = i + 1 < pixels;
            im2col_row(p, image, i / p->out_w, i % p->out_w, p->scratch);
            if (pair) {
                im2col_row(p, image, (i + 1) / p->out_w, (i + 1) % p->out_w, p->scratch + n);
            }
            matmul_rows(p, p->scratch, n, pair, weights, folded, out + i * p->out_c,
                        out + (i + 1) * p->out_c);
        }
    }
}

/* 1x1, stride 1, no padding: consecutive output pixels are consecutive input pixels, in_c
 * bytes apart, which is the layout matmul_rows takes, so the input is multiplied in place. */
void zo_conv2d_1x1_s8(const zo_conv_params *p, const int8_t *input, const int8_t *weights,
                      const int32_t *folded, int8_t *output)
{
    const int32_t n = p->in_c;
    const int32_t pixels = p->batches * p->out_h * p->out_w;
    for (int32_t i = 0; i < pixels; i += 2) {
        matmul_rows(p, input + i * n, n, i + 1 < pixels, weights, folded,
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
