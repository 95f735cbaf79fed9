/*
 * Back-propagation through the model's head (--bp-layers C). Rules: docs/training.md
 * "Back-propagation for the last layers"; numpy twin: zocodegen/training/backprop.py, whose
 * integers these are, bit for bit.
 */
#include <string.h>

#include "model.h"
#include "zo_requant.h"
#include "zo_train.h"

#if ZO_TRAIN_BACKPROP /* a build without --bp-layers leaves this file empty */

static int32_t sat32(int64_t x)
{
    return (int32_t)(x > INT32_MAX ? INT32_MAX : (x < INT32_MIN ? INT32_MIN : x));
}

/* an input's error += one op's contribution, saturating */
static void add_error(int32_t *error, int32_t contribution)
{
    *error = sat32((int64_t)*error + contribution);
}

void zo_bp_forward(const zo_train_model *m)
{
    const zo_bp_head *h = m->head;
    uint8_t *arena = model_arena();
    uint8_t *region = (uint8_t *)m->gradient;
    uint32_t c = 0;
    for (; c < h->copy_count && h->copies[c].after_op < 0; ++c) {
        memcpy(region + h->copies[c].copy_offset, arena + h->copies[c].arena_offset,
               h->copies[c].bytes);
    }
    for (uint32_t op = h->first_op; op <= h->last_op; ++op) {
        model_run_range((int32_t)op, (int32_t)op);
        for (; c < h->copy_count && h->copies[c].after_op == (int32_t)op; ++c) {
            memcpy(region + h->copies[c].copy_offset, arena + h->copies[c].arena_offset,
                   h->copies[c].bytes);
        }
    }
}

/* FULLY_CONNECTED: e_in[r][k] += sum_o e'[r][o] w[o][k], e' the scaled output error */
static void fc_input_error(const zo_bp_op *op, const int8_t *w, const int32_t *scaled,
                           int32_t *in_error)
{
    const zo_fc_params *p = op->fc;
    for (int32_t r = 0; r < p->rows; ++r) {
        const int32_t *e = scaled + r * p->out_features;
        for (int32_t k = 0; k < p->in_features; ++k) {
            int64_t acc = 0;
            for (int32_t o = 0; o < p->out_features; ++o) {
                acc += (int64_t)e[o] * w[o * p->in_features + k];
            }
            add_error(&in_error[r * p->in_features + k], sat32(acc));
        }
    }
}

/* CONV_2D / DEPTHWISE_CONV_2D (multiplier 1): the transposed convolution, gathered per
 * input element over the taps whose output position exists */
static void conv_input_error(const zo_bp_op *op, const int8_t *w, const int32_t *scaled,
                             int32_t *in_error)
{
    const zo_conv_params *p = op->conv;
    const int depthwise = op->kind == ZO_BP_DEPTHWISE;
    for (int32_t iy = 0; iy < p->in_h; ++iy) {
        for (int32_t ix = 0; ix < p->in_w; ++ix) {
            for (int32_t ic = 0; ic < p->in_c; ++ic) {
                int64_t acc = 0;
                for (int32_t kh = 0; kh < p->k_h; ++kh) {
                    const int32_t ty = iy + p->pad_top - kh * p->dilation_h;
                    if (ty < 0 || ty % p->stride_h || ty / p->stride_h >= p->out_h) {
                        continue;
                    }
                    const int32_t oy = ty / p->stride_h;
                    for (int32_t kw = 0; kw < p->k_w; ++kw) {
                        const int32_t tx = ix + p->pad_left - kw * p->dilation_w;
                        if (tx < 0 || tx % p->stride_w || tx / p->stride_w >= p->out_w) {
                            continue;
                        }
                        const int32_t *e = scaled + (oy * p->out_w + tx / p->stride_w) * p->out_c;
                        if (depthwise) {
                            acc += (int64_t)e[ic] * w[(kh * p->k_w + kw) * p->out_c + ic];
                        } else {
                            for (int32_t o = 0; o < p->out_c; ++o) {
                                acc += (int64_t)e[o]
                                       * w[((o * p->k_h + kh) * p->k_w + kw) * p->in_c + ic];
                            }
                        }
                    }
                }
                add_error(&in_error[(iy * p->in_w + ix) * p->in_c + ic], sat32(acc));
            }
        }
    }
}

/* Non-overlapping pools: average gives each in-bounds element of the window the output's
 * error times s_in / (s_out count); max gives it to the first maximum (rows, then columns) */
static void pool_input_error(const zo_bp_op *op, const int8_t *in, const int32_t *g,
                             int32_t *in_error)
{
    const zo_pool_params *p = op->pool;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t y0 = oy * p->stride_h - p->pad_top;
        const int32_t ya = y0 > 0 ? y0 : 0;
        const int32_t yb = y0 + p->filter_h < p->in_h ? y0 + p->filter_h : p->in_h;
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t x0 = ox * p->stride_w - p->pad_left;
            const int32_t xa = x0 > 0 ? x0 : 0;
            const int32_t xb = x0 + p->filter_w < p->in_w ? x0 + p->filter_w : p->in_w;
            if (ya >= yb || xa >= xb) {
                continue;
            }
            for (int32_t c = 0; c < p->channels; ++c) {
                const int32_t go = g[(oy * p->out_w + ox) * p->channels + c];
                if (op->kind == ZO_BP_AVERAGE_POOL) {
                    const int32_t count = (yb - ya) * (xb - xa);
                    const int32_t share = zo_mbqm(go, op->multiplier[count], op->shift[count]);
                    for (int32_t y = ya; y < yb; ++y) {
                        for (int32_t x = xa; x < xb; ++x) {
                            add_error(&in_error[(y * p->in_w + x) * p->channels + c], share);
                        }
                    }
                } else {
                    int32_t best = (ya * p->in_w + xa) * p->channels + c;
                    for (int32_t y = ya; y < yb; ++y) {
                        for (int32_t x = xa; x < xb; ++x) {
                            const int32_t at = (y * p->in_w + x) * p->channels + c;
                            best = in[at] > in[best] ? at : best;
                        }
                    }
                    add_error(&in_error[best], zo_mbqm(go, op->multiplier[0], op->shift[0]));
                }
            }
        }
    }
}

/* MEAN: every input element gets its mean's error times s_in / (s_out count) */
static void mean_input_error(const zo_bp_op *op, const int32_t *g, int32_t *in_error)
{
    const zo_mean_params *p = op->mean;
    uint32_t at = 0;
    for (int32_t a = 0; a < p->in_shape[0]; ++a) {
        for (int32_t b = 0; b < p->in_shape[1]; ++b) {
            for (int32_t c = 0; c < p->in_shape[2]; ++c) {
                for (int32_t d = 0; d < p->in_shape[3]; ++d, ++at) {
                    const int32_t i[4] = {a, b, c, d};
                    int32_t out = 0;
                    for (int k = 0; k < 4; ++k) {
                        out = out * (p->reduce[k] ? 1 : p->in_shape[k]) + (p->reduce[k] ? 0 : i[k]);
                    }
                    add_error(&in_error[at], zo_mbqm(g[out], op->multiplier[0], op->shift[0]));
                }
            }
        }
    }
}

void zo_bp_backward(const zo_train_model *m, int32_t label)
{
    const zo_bp_head *h = m->head;
    int32_t *errors = m->gradient;
    int32_t *scaled = m->gradient + h->scaled_offset;
    const uint8_t *region = (const uint8_t *)m->gradient;
    memset(errors, 0, h->error_words * sizeof errors[0]);
    const zo_bp_op *last = &h->ops[h->op_count - 1];
    int32_t *logits_error = errors + last->out_error;
    zo_softmax_gradient_q24(m->loss, (const int8_t *)(region + last->out_copy), label,
                            logits_error);
    for (uint32_t k = 0; k < last->out_count; ++k) {
        logits_error[k] = zo_mbqm(logits_error[k], h->logits_multiplier, h->logits_shift);
    }
    for (uint32_t i = h->op_count; i-- > 0;) {
        const zo_bp_op *op = &h->ops[i];
        int32_t *g = errors + op->out_error;
        const int8_t *out = (const int8_t *)(region + op->out_copy);
        if (op->kind != ZO_BP_RESHAPE) { /* the derivative is 0 where the output clamps */
            for (uint32_t k = 0; k < op->out_count; ++k) {
                g[k] = out[k] > op->lo && out[k] < op->hi ? g[k] : 0;
            }
        }
        if (!op->propagate) {
            continue;
        }
        int32_t *in_error = op->in_error[0] == ZO_BP_NONE ? NULL : errors + op->in_error[0];
        const int8_t *in = (const int8_t *)(region + op->in_copy[0]);
        const int8_t *w = op->layer >= 0 ? m->layers[op->layer].weights : NULL;
        switch (op->kind) {
        case ZO_BP_RESHAPE:
            for (uint32_t k = 0; k < op->in_count; ++k) {
                add_error(&in_error[k], g[k]);
            }
            break;
        case ZO_BP_FC:
        case ZO_BP_CONV:
        case ZO_BP_DEPTHWISE: {
            const uint32_t channels = op->kind == ZO_BP_FC ? (uint32_t)op->fc->out_features
                                                           : (uint32_t)op->conv->out_c;
            for (uint32_t k = 0; k < op->out_count; ++k) {
                const uint32_t c = k % channels;
                scaled[k] = zo_mbqm(g[k], op->multiplier[c], op->shift[c]);
            }
            if (op->kind == ZO_BP_FC) {
                fc_input_error(op, w, scaled, in_error);
            } else {
                conv_input_error(op, w, scaled, in_error);
            }
            break;
        }
        case ZO_BP_AVERAGE_POOL:
        case ZO_BP_MAX_POOL:
            pool_input_error(op, in, g, in_error);
            break;
        case ZO_BP_MEAN:
            mean_input_error(op, g, in_error);
            break;
        default: /* ZO_BP_ADD: each computed input moves by s_in / s_out */
            for (int j = 0; j < 2; ++j) {
                if (op->in_error[j] == ZO_BP_NONE) {
                    continue;
                }
                int32_t *e = errors + op->in_error[j];
                for (uint32_t k = 0; k < op->out_count; ++k) {
                    add_error(&e[k], zo_mbqm(g[k], op->multiplier[j], op->shift[j]));
                }
            }
            break;
        }
    }
}
#endif /* ZO_TRAIN_BACKPROP */
