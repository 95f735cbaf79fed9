/*
 * FULLY_CONNECTED, int8: TFLite reference_integer_ops::FullyConnected (per-tensor or
 * per-channel), with the single-rounding requantization ai_edge_litert uses for this op
 * (zocodegen/reference/fully_connected.py is the numpy twin).
 *
 *   y[r][o] = clamp(MBQM_single(bias[o] + sum_i (x[r][i] + input_offset) * w[o][i]) + output_offset)
 */
#include "zo_dot.h"
#include "zo_kernels.h"
#include "zo_requant.h"

void zo_fully_connected_s8(const zo_fc_params *p, const int8_t *input, const int8_t *weights,
                           const int32_t *bias, int8_t *output)
{
    for (int32_t r = 0; r < p->rows; ++r) {
        const int8_t *row = input + r * p->in_features;
        for (int32_t o = 0; o < p->out_features; ++o) {
            const int8_t *w = weights + o * p->in_features;
            int32_t acc = zo_dot_s8(row, w, p->in_features, p->input_offset, bias ? bias[o] : 0);
            *output++ = zo_offset_clamp_s8(zo_mbqm_single(acc, p->multiplier[o], (int)p->shift[o]),
                                           p->output_offset, p->act_min, p->act_max);
        }
    }
}
