/*
 * FULLY_CONNECTED, int8: TFLite reference_integer_ops::FullyConnected (per-tensor or
 * per-channel), with the single-rounding requantization ai_edge_litert uses for this op
 * (zocodegen/reference/fully_connected.py is the numpy twin).
 *
 *   y[r][o] = clamp(MBQM_single(bias[o] + sum_i (x[r][i] + input_offset) * w[o][i]) + output_offset)
 *
 * The fast path computes four outputs per pass over the input row: each word of input is
 * loaded, split (SXTB16) and offset (SADD16) once and serves four weight rows (two SMLAD
 * each). The reference (-DZO_PORTABLE_KERNELS) is one zo_dot_s8 per output.
 */
#include "zo_dot.h"
#include "zo_kernels.h"
#include "zo_requant.h"
#include "zo_simd.h"

static inline int8_t requantize(const zo_fc_params *p, int32_t acc, int32_t o)
{
    return zo_offset_clamp_s8(zo_mbqm_single(acc, p->multiplier[o], (int)p->shift[o]),
                              p->output_offset, p->act_min, p->act_max);
}

void zo_fully_connected_s8(const zo_fc_params *p, const int8_t *input, const int8_t *weights,
                           const int32_t *bias, int8_t *output)
{
    const int32_t n = p->in_features;
    for (int32_t r = 0; r < p->rows; ++r) {
        const int8_t *row = input + r * n;
        int32_t o = 0;
#if ZO_FAST_KERNELS
        const uint32_t offset2 = zo_dup16(p->input_offset);
        for (; o + 4 <= p->out_features; o += 4) {
            const int8_t *w0 = weights + o * n;
            const int8_t *w1 = w0 + n;
            const int8_t *w2 = w1 + n;
            const int8_t *w3 = w2 + n;
            const int8_t *x = row;
            int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
            if (bias) {
                a0 = bias[o];
                a1 = bias[o + 1];
                a2 = bias[o + 2];
                a3 = bias[o + 3];
            }
            for (int32_t k = n >> 2; k > 0; --k) {
                const uint32_t xv = zo_read4(x);
                x += 4;
                const uint32_t x_even = zo_sadd16(zo_sxtb16(xv), offset2);
                const uint32_t x_odd = zo_sadd16(zo_sxtb16_ror8(xv), offset2);
                uint32_t wv = zo_read4(w0);
                w0 += 4;
                a0 = zo_smlad(x_even, zo_sxtb16(wv), zo_smlad(x_odd, zo_sxtb16_ror8(wv), a0));
                wv = zo_read4(w1);
                w1 += 4;
                a1 = zo_smlad(x_even, zo_sxtb16(wv), zo_smlad(x_odd, zo_sxtb16_ror8(wv), a1));
                wv = zo_read4(w2);
                w2 += 4;
                a2 = zo_smlad(x_even, zo_sxtb16(wv), zo_smlad(x_odd, zo_sxtb16_ror8(wv), a2));
                wv = zo_read4(w3);
                w3 += 4;
                a3 = zo_smlad(x_even, zo_sxtb16(wv), zo_smlad(x_odd, zo_sxtb16_ror8(wv), a3));
            }
            for (int32_t k = n & 3; k > 0; --k) {
                const int32_t xv = *x++ + p->input_offset;
                a0 += xv * *w0++;
                a1 += xv * *w1++;
                a2 += xv * *w2++;
                a3 += xv * *w3++;
            }
            output[o] = requantize(p, a0, o);
            output[o + 1] = requantize(p, a1, o + 1);
            output[o + 2] = requantize(p, a2, o + 2);
            output[o + 3] = requantize(p, a3, o + 3);
        }
#endif
        for (; o < p->out_features; ++o) {
            const int32_t acc = zo_dot_s8(row, weights + o * n, n, p->input_offset,
                                          bias ? bias[o] : 0);
            output[o] = requantize(p, acc, o);
        }
        output += p->out_features;
    }
}
