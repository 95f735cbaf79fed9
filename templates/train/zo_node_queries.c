/*
 * The queries of a perturbed pre-activation, shared by node perturbation (zo_estimate_np.c:
 * one perturbation per unit) and channel-wise node perturbation (zo_estimate_ch.c: one per
 * output channel, the same at each of its positions): h(z + delta) precomputed per shift,
 * and one sample's Q loss differences, single or --query-batch. Neither estimator file
 * calls the other; both call this one.
 */
#include "zo_train_engine.h"

/* h(z + delta) of the layer for each shift k (ZO_NP_SHIFT), from sample n's saved input:
 * the layer's own kernel with the output zero point moved by delta writes exactly that. */
static void shifted_outputs(const zo_train_model *m, const zo_train_layer *L, uint32_t n,
                            int8_t *shifted)
{
    const int8_t *a = (const int8_t *)(saved_slot(m, L, n) + L->input_saved_offset);
    for (uint32_t k = 0; k < ZO_NP_SHIFTS; ++k) {
        zo_run_layer_kernel(L, L->conv_shifted ? &L->conv_shifted[k] : NULL,
                            L->fc_shifted ? &L->fc_shifted[k] : NULL, a,
                            shifted + k * L->output_count);
    }
}

#if ZO_TRAIN_SCALES
/* --scales: channel c's nodes h(z + xi) + round(xi' (h(z) - zp) / 32), within h's range;
 * h(z) from the two shifted outputs (zo_clean_output). */
static void scale_nodes(const zo_train_layer *L, const int8_t *shifted, const int8_t *h,
                        int32_t xi, uint32_t c, uint32_t width, int8_t *z)
{
    const zo_train_scales *S = L->scales;
    const int8_t *down = shifted, *up = shifted + L->output_count;
    for (uint32_t k = c; k < L->output_count; k += width) {
        const int32_t clean = zo_clean_output(down[k], up[k], S->act_min);
        const int32_t v = h[k] + zo_scale_term(xi * (clean - S->output_zero_point));
        z[k] = (int8_t)(v < S->act_min ? S->act_min : (v > S->act_max ? S->act_max : v));
    }
}
#endif

/* One query's layer output z = h(z + sign xi): `width` draws of stream p, draw c for the
 * units c, c + width, c + 2 width, ... (NP: width = d_a, a draw per unit; CH: width =
 * channels, a draw per channel, channels innermost). --scales: stream `scale` draws the
 * channels' xi' (NULL: the layer trains no scales). */
static void perturb_nodes(const zo_train_layer *L, const int8_t *shifted,
                          zo_perturb_stream *p, zo_perturb_stream *scale, int32_t sign,
                          uint32_t width, int8_t *z)
{
    ZO_PROFILE_BEGIN(ZO_PROFILE_PERTURB);
    for (uint32_t c = 0; c < width; ++c) {
        const int8_t *h = shifted + ZO_NP_SHIFT(sign * zo_perturb_next(p)) * L->output_count;
#if ZO_TRAIN_SCALES
        if (scale) {
            scale_nodes(L, shifted, h, sign * zo_perturb_next(scale), c, width, z);
            continue;
        }
#else
        (void)scale;
#endif
        for (uint32_t k = c; k < L->output_count; k += width) {
            z[k] = h[k];
        }
    }
    ZO_PROFILE_END();
}

/* The stream of a sample's xi' (--scales): its own stream after the bias's Q x width draws;
 * NULL when the layer trains no scales. */
static zo_perturb_stream *scale_stream(const zo_train_model *m, const zo_train_layer *L,
                                       const zo_perturb_stream *stream, uint32_t width,
                                       zo_perturb_stream *storage)
{
    *storage = *stream;
    if (L->scales == NULL) {
        return NULL;
    }
    for (uint32_t k = 0; k < m->queries * width; ++k) {
        (void)zo_perturb_next(storage);
    }
    return storage;
}

#if ZO_TRAIN_QUERY_BATCH == 1
/* One query of sample n: the next layer sees h(z + sign xi) (xi from stream p); the loss
 * of the forward from there. */
static int32_t query_loss(const zo_train_model *m, const zo_train_layer *L,
                          const int8_t *shifted, zo_perturb_stream *p,
                          zo_perturb_stream *scale, int32_t sign, uint32_t width, uint32_t n)
{
    zo_restore_spans(L->restart, L->restart_count, model_arena(), saved_slot(m, L, n));
    perturb_nodes(L, shifted, p, scale, sign, width,
                  (int8_t *)(model_arena() + L->output_offset));
    run_layers(L->op + 1, m->logits_op);
    return zo_loss_q16(m, m->labels[n]);
}

void zo_node_queries(const zo_train_model *m, const zo_train_layer *L, uint32_t seed,
                     uint32_t n, uint32_t width, int8_t *shifted, int32_t *d)
{
    zo_perturb_stream stream, scale_storage;
    shifted_outputs(m, L, n, shifted);
    zo_perturb_start(&stream, zo_sample_seed(seed, n), L->perturb_shift);
    zo_perturb_stream *scale = scale_stream(m, L, &stream, width, &scale_storage);
    for (uint32_t q = 0; q < m->queries; ++q) {
#if ZO_TRAIN_TWO_SIDED
        zo_perturb_stream minus = stream, minus_scale = scale_storage; /* -xi: the same draws */
        const int32_t plus_loss = query_loss(m, L, shifted, &stream, scale, 1, width, n);
        const int32_t base = query_loss(m, L, shifted, &minus, scale ? &minus_scale : NULL, -1,
                                        width, n);
#else
        const int32_t plus_loss = query_loss(m, L, shifted, &stream, scale, 1, width, n);
        const int32_t base = m->clean_q16[n];
#endif
        d[q] = loss_difference(m, plus_loss, base);
    }
}
#else
/* --query-batch: slot b of the layer's output holds h(z +- xi) of forward f0 + b */
void zo_node_queries(const zo_train_model *m, const zo_train_layer *L, uint32_t seed,
                     uint32_t n, uint32_t width, int8_t *shifted, int32_t *d)
{
    zo_perturb_stream stream, minus;
    shifted_outputs(m, L, n, shifted);
    zo_perturb_start(&stream, zo_sample_seed(seed, n), L->perturb_shift);
    minus = stream;
    int32_t plus = 0;
    for (uint32_t f0 = 0; f0 < m->queries * ZO_SIDES; f0 += ZO_TRAIN_QUERY_BATCH) {
        zo_restore_batch(L->batch_restart, L->batch_restart_count, saved_slot(m, L, n));
        for (uint32_t b = 0; b < ZO_TRAIN_QUERY_BATCH; ++b) {
            const int32_t sign = zo_forward_sign(f0 + b);
            if (sign > 0) {
                minus = stream; /* -xi: the same draws again */
            }
            perturb_nodes(L, shifted, sign > 0 ? &stream : &minus, NULL, sign, width,
                          (int8_t *)(model_query_arena_storage + L->batch_output_offset
                                     + b * L->output_count));
        }
        zo_run_batch((int32_t)L->op + 1, m->logits_op);
        for (uint32_t b = 0; b < ZO_TRAIN_QUERY_BATCH; ++b) {
            int done;
            const int32_t diff = zo_forward_difference(m, f0 + b,
                                                       zo_slot_loss(m, b, m->labels[n]),
                                                       m->clean_q16[n], &plus, &done);
            if (done) {
                d[(f0 + b) / ZO_SIDES] = diff;
            }
        }
    }
}
#endif
