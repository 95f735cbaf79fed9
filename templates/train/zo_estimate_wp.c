/*
 * Weight perturbation (--estimator wp / adaptive's WP layers; paper Sec. 3.1, PeZO's
 * perturbations, P-RGE's batched queries): Q queries per sample from the layer's saved
 * input, the query sums, the gradient replayed from the seed, the update of a restart group.
 */
#include "zo_train_engine.h"

#if ZO_TRAIN_QUERY_BATCH == 1
/* One WP query of sample n from the layer's restored input: the loss at the perturbed
 * weights, which are then restored exactly (even where they saturated). */
static int32_t weight_query_loss(const zo_train_model *m, const zo_train_layer *L,
                                 const int8_t *backup, zo_perturb_stream *p, int32_t sign,
                                 uint32_t n)
{
    zo_restore_spans(L->restart, L->restart_count, model_arena(), saved_slot(m, L, n));
    zo_perturb_weights(L, backup, p, sign);
    zo_refold(L);
    run_layers(L->restart_op, m->logits_op);
    const int32_t loss = zo_loss_q16(m, m->labels[n]);
    ZO_PROFILE_BEGIN(ZO_PROFILE_RESTORE);
    memcpy(L->weights, backup, L->weight_count);
    ZO_PROFILE_END();
    return loss;
}

/* Sample n's Q queries, one forward at a time, into the query sums. */
static void weight_queries(const zo_train_model *m, const zo_train_layer *L,
                           const int8_t *backup, uint32_t seed, uint32_t n)
{
    zo_perturb_stream stream;
    zo_perturb_start(&stream, seed, L->perturb_shift);
    for (uint32_t q = 0; q < m->queries; ++q) {
#if ZO_TRAIN_TWO_SIDED
        zo_perturb_stream minus = stream; /* -z: the same draws again */
        const int32_t plus_loss = weight_query_loss(m, L, backup, &stream, 1, n);
        const int32_t base = weight_query_loss(m, L, backup, &minus, -1, n);
#else
        const int32_t plus_loss = weight_query_loss(m, L, backup, &stream, 1, n);
        const int32_t base = m->clean_q16[n];
#endif
        m->query_sums[q] += loss_difference(m, plus_loss, base);
    }
}
#else
/* ---- --query-batch B: B query forwards at once (P-RGE's outer loop) -------------------- */

/* Sample n's Q (x 2 two-sided) query forwards, B at a time: each slot's layer output from
 * the saved input and its own perturbed weights, then the layers after it batched, into
 * the query sums. */
static void weight_queries(const zo_train_model *m, const zo_train_layer *L,
                           const int8_t *backup, uint32_t seed, uint32_t n)
{
    uint8_t *qa = model_query_arena_storage;
    const int8_t *input = (const int8_t *)(saved_slot(m, L, n) + L->input_saved_offset);
    zo_perturb_stream stream, minus;
    zo_perturb_start(&stream, seed, L->perturb_shift);
    minus = stream;
    int32_t plus = 0;
    for (uint32_t f0 = 0; f0 < m->queries * ZO_SIDES; f0 += ZO_TRAIN_QUERY_BATCH) {
        zo_restore_batch(L->batch_restart, L->batch_restart_count, saved_slot(m, L, n));
        for (uint32_t b = 0; b < ZO_TRAIN_QUERY_BATCH; ++b) {
            if (zo_forward_sign(f0 + b) > 0) {
                minus = stream; /* -z: the same draws again */
                zo_perturb_weights(L, backup, &stream, 1);
            } else {
                zo_perturb_weights(L, backup, &minus, -1);
            }
            zo_refold(L);
            zo_run_layer_kernel(L, L->conv, L->fc, input,
                                (int8_t *)(qa + L->batch_output_offset + b * L->output_count));
            ZO_PROFILE_BEGIN(ZO_PROFILE_RESTORE);
            memcpy(L->weights, backup, L->weight_count);
            ZO_PROFILE_END();
        }
        zo_run_batch((int32_t)L->op + 1, m->logits_op);
        for (uint32_t b = 0; b < ZO_TRAIN_QUERY_BATCH; ++b) {
            const uint32_t f = f0 + b;
            int done;
            const int32_t d = zo_forward_difference(m, f, zo_slot_loss(m, b, m->labels[n]),
                                                    m->clean_q16[n], &plus, &done);
            if (done) {
                m->query_sums[f / ZO_SIDES] += d;
            }
        }
    }
}
#endif

/* WP layer L's queries and its gradient, kept in its gradient region for the update. */
static void wp_gradient(const zo_train_model *m, const zo_train_layer *L, uint32_t seed)
{
    int32_t *g = layer_gradient(m, L);
    int8_t *backup = (int8_t *)(g + L->weight_count);
    {
        ZO_PROFILE_BEGIN(ZO_PROFILE_RESTORE);
        memcpy(backup, L->weights, L->weight_count);
        ZO_PROFILE_END();
    }
    memset(m->query_sums, 0, m->queries * sizeof m->query_sums[0]);
    for (uint32_t n = 0; n < m->batch; ++n) {
        weight_queries(m, L, backup, seed, n); /* every sample sees the same perturbations */
    }
    zo_refold(L);
    zo_replay_gradient(L, seed, m->query_sums, m->queries, g);
}

/* The end of the estimate of WP layers[first..last] (a restart group; first == last unless
 * the build recomputes): the saved activations advanced to the next layer with the old
 * weights, then each layer's update, in forward order. */
static void finish_group(const zo_train_model *m, uint32_t first, uint32_t last, float eta)
{
    zo_advance_all(m, &m->layers[last]);
    for (uint32_t i = first; i <= last; ++i) {
        const zo_train_layer *W = &m->layers[i];
        ZO_PROFILE_BEGIN(ZO_PROFILE_UPDATE);
        (void)zo_update_weights(m, W, layer_gradient(m, W), (eta * W->gscale) * m->inv_nq);
        ZO_PROFILE_END();
        zo_refold(W);
    }
}

/* Whether layers[i] starts its restart group (its queries restart at its own op). */
static int starts_group(const zo_train_model *m, uint32_t i)
{
    return i == 0u || m->layers[i].restart_op == m->layers[i].op;
}

/* Layer i's queries and gradient; at the last layer of its restart group the whole group's
 * update. */
uint32_t zo_estimate_wp(const zo_train_model *m, const zo_train_state *s, uint32_t i,
                        uint32_t seed, float eta)
{
    (void)s;
    wp_gradient(m, &m->layers[i], seed);
    if (i + 1u == m->layer_count || starts_group(m, i + 1u)) {
        uint32_t first = i;
        while (!starts_group(m, first)) {
            --first;
        }
        finish_group(m, first, i, eta);
    }
    return i;
}
