/*
 * Node perturbation (--estimator np / adaptive's NP layers; paper Sec. 3.2): one
 * perturbation of the pre-activation per sample and query, h(z + xi) precomputed per shift,
 * the node gradient and its update through zo_node_gradient.c.
 */
#include "zo_train_engine.h"

/* NP precomputes h(z + delta) for every delta a perturbation can take: -1, +1 for
 * Rademacher values, -2..2 for uniform ones (0: the clean h(z), which the queries
 * overwrite in the arena). ZO_NP_SHIFT(x) is the buffer of delta x. */
#if ZO_PERTURB_MAX == 1
#define ZO_NP_SHIFTS 2u
#define ZO_NP_SHIFT(x) ((x) > 0 ? 1u : 0u)
#else
#define ZO_NP_SHIFTS (2u * ZO_PERTURB_MAX + 1u)
#define ZO_NP_SHIFT(x) ((uint32_t)((x) + ZO_PERTURB_MAX))
#endif

/* h(z + delta) of the layer for its k-th shift, from sample n's saved input: the layer's
 * own kernel with the output zero point moved by delta writes exactly that. */
static void shifted_output(const zo_train_model *m, const zo_train_layer *L, uint32_t n,
                           uint32_t k, int8_t *out)
{
    const int8_t *a = (const int8_t *)(saved_slot(m, L, n) + L->input_saved_offset);
    zo_run_layer_kernel(L, L->conv_shifted ? &L->conv_shifted[k] : NULL,
                        L->fc_shifted ? &L->fc_shifted[k] : NULL, a, out);
}

#if ZO_TRAIN_QUERY_BATCH == 1
/* One NP query of sample n: the next layer sees h(z + sign xi) (xi from stream p); the
 * loss of the forward from there. */
static int32_t node_query_loss(const zo_train_model *m, const zo_train_layer *L,
                               const int8_t *shifted, zo_perturb_stream *p, int32_t sign,
                               uint32_t n)
{
    int8_t *z = (int8_t *)(model_arena() + L->output_offset);
    zo_restore_spans(L->restart, L->restart_count, model_arena(), saved_slot(m, L, n));
    {
        ZO_PROFILE_BEGIN(ZO_PROFILE_PERTURB);
        for (uint32_t k = 0; k < L->output_count; ++k) {
            z[k] = shifted[ZO_NP_SHIFT(sign * zo_perturb_next(p)) * L->output_count + k];
        }
        ZO_PROFILE_END();
    }
    run_layers(L->op + 1, m->logits_op);
    return zo_loss_q16(m, m->labels[n]);
}
#endif

/* One finished query's share of the node gradient: xi (replayed) times its loss
 * difference, where the unit's activation passes (h(z + 1) - h(z - 1) == 2). */
static void accumulate_query(const zo_train_layer *L, int32_t *gz, const int8_t *up,
                             const int8_t *down, zo_perturb_stream *replay, int32_t delta)
{
    ZO_PROFILE_BEGIN(ZO_PROFILE_UPDATE);
    for (uint32_t k = 0; k < L->output_count; ++k) {
        const int32_t xi = zo_perturb_next(replay);
        if (up[k] - down[k] == 2) {
            gz[k] += xi * delta;
        }
    }
    ZO_PROFILE_END();
}

/* Node gradient of sample n into gz (paper Eq. 9/10): each query feeds the next layer
 * h(z + xi), xi drawn from the sample's own stream; a unit gets gradient only where h
 * passes both z - 1 and z + 1 (h'(z) = 1), i.e. where h(z + 1) - h(z - 1) == 2. */
static void node_gradient(const zo_train_model *m, const zo_train_layer *L, uint32_t seed,
                          uint32_t n, int32_t *gz)
{
    int8_t *shifted = (int8_t *)(gz + L->output_count); /* h(z + delta), d_a bytes each */
    const int8_t *down = shifted + ZO_NP_SHIFT(-1) * L->output_count;
    const int8_t *up = shifted + ZO_NP_SHIFT(1) * L->output_count;
    for (uint32_t k = 0; k < ZO_NP_SHIFTS; ++k) {
        shifted_output(m, L, n, k, shifted + k * L->output_count);
    }
    memset(gz, 0, L->output_count * sizeof gz[0]);
    zo_perturb_stream stream, replay;
    zo_perturb_start(&stream, zo_sample_seed(seed, n), L->perturb_shift);
    replay = stream;
#if ZO_TRAIN_QUERY_BATCH == 1
    for (uint32_t q = 0; q < m->queries; ++q) {
#if ZO_TRAIN_TWO_SIDED
        zo_perturb_stream minus = stream;
        const int32_t plus_loss = node_query_loss(m, L, shifted, &stream, 1, n);
        const int32_t base = node_query_loss(m, L, shifted, &minus, -1, n);
#else
        const int32_t plus_loss = node_query_loss(m, L, shifted, &stream, 1, n);
        const int32_t base = m->clean_q16[n];
#endif
        accumulate_query(L, gz, up, down, &replay, loss_difference(m, plus_loss, base));
    }
#else
    /* --query-batch: slot b of the layer's output holds h(z +- xi) of forward f0 + b */
    zo_perturb_stream minus = stream;
    int32_t plus = 0;
    for (uint32_t f0 = 0; f0 < m->queries * ZO_SIDES; f0 += ZO_TRAIN_QUERY_BATCH) {
        zo_restore_batch(L->batch_restart, L->batch_restart_count, saved_slot(m, L, n));
        ZO_PROFILE_BEGIN(ZO_PROFILE_PERTURB);
        for (uint32_t b = 0; b < ZO_TRAIN_QUERY_BATCH; ++b) {
            int8_t *z = (int8_t *)(model_query_arena_storage + L->batch_output_offset
                                   + b * L->output_count);
            const int32_t sign = zo_forward_sign(f0 + b);
            zo_perturb_stream *p = &stream;
            if (sign > 0) {
                minus = stream;
            } else {
                p = &minus;
            }
            for (uint32_t k = 0; k < L->output_count; ++k) {
                z[k] = shifted[ZO_NP_SHIFT(sign * zo_perturb_next(p)) * L->output_count + k];
            }
        }
        ZO_PROFILE_END();
        zo_run_batch((int32_t)L->op + 1, m->logits_op);
        for (uint32_t b = 0; b < ZO_TRAIN_QUERY_BATCH; ++b) {
            int done;
            const int32_t d = zo_forward_difference(m, f0 + b, zo_slot_loss(m, b, m->labels[n]),
                                                    m->clean_q16[n], &plus, &done);
            if (done) {
                accumulate_query(L, gz, up, down, &replay, d);
            }
        }
    }
#endif
}

void zo_estimate_np(const zo_train_model *m, const zo_train_layer *L, uint32_t seed,
                    float coef)
{
    uint8_t *arena = model_arena();
    int32_t *gz = layer_gradient(m, L); /* then h(z + delta): d_a bytes per shift */
    int32_t *acc = gz + L->output_count
                   + (ZO_NP_SHIFTS * L->output_count + 3u) / 4u; /* N > 1 */
    const int has_next = L->next_op != L->op;
    if (m->batch == 1) {
        node_gradient(m, L, seed, 0, gz);
        if (has_next) {
            zo_advance_saved(m, L, 0);
        }
        zo_update_from_node_gradient(m, L, gz,
                                     (const int8_t *)(saved_slot(m, L, 0) + L->input_saved_offset),
                                     0, coef);
        if (has_next) {
            zo_save_spans(L->next_restart, L->next_restart_count, arena, saved_slot(m, L + 1, 0));
        }
        return;
    }
    memset(acc, 0, (L->weight_count + L->bias_count) * sizeof acc[0]);
    for (uint32_t n = 0; n < m->batch; ++n) {
        node_gradient(m, L, seed, n, gz);
        const int8_t *a = (const int8_t *)(saved_slot(m, L, n) + L->input_saved_offset);
        zo_accumulate_node_gradient(L, gz, a, 0, acc);
    }
    if (has_next) {
        for (uint32_t n = 0; n < m->batch; ++n) {
            zo_advance_saved(m, L, n);
            zo_save_spans(L->next_restart, L->next_restart_count, arena, saved_slot(m, L + 1, n));
        }
    }
    zo_update_from_accumulator(m, L, acc, coef);
}
