/*
 * Node perturbation (--estimator np / adaptive's NP layers; paper Sec. 3.2): one
 * perturbation of the pre-activation per sample and query (the queries: zo_node_queries.c),
 * the node gradient and its update through zo_node_gradient.c.
 */
#include "zo_train_engine.h"

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
 * h(z + xi), xi drawn from the sample's own stream (zo_node_queries.c); a unit gets gradient
 * only where h passes both z - 1 and z + 1 (h'(z) = 1), i.e. where h(z + 1) - h(z - 1) == 2.
 * The Q loss differences wait in the query sums, the draws are replayed. */
static void node_gradient(const zo_train_model *m, const zo_train_layer *L, uint32_t seed,
                          uint32_t n, int32_t *gz)
{
    int8_t *shifted = (int8_t *)(gz + L->output_count); /* h(z + delta), d_a bytes each */
    const int8_t *down = shifted + ZO_NP_SHIFT(-1) * L->output_count;
    const int8_t *up = shifted + ZO_NP_SHIFT(1) * L->output_count;
    zo_node_queries(m, L, seed, n, L->output_count, shifted, m->query_sums);
    memset(gz, 0, L->output_count * sizeof gz[0]);
    zo_perturb_stream replay;
    zo_perturb_start(&replay, zo_sample_seed(seed, n), L->perturb_shift);
    for (uint32_t q = 0; q < m->queries; ++q) {
        accumulate_query(L, gz, up, down, &replay, m->query_sums[q]);
    }
}

/* Layer i's node gradient from each sample's queries, the saved activations advanced with
 * the old parameters, then the update (N = 1: straight from the node gradient; N > 1: from
 * the gradients accumulated over the samples). */
uint32_t zo_estimate_np(const zo_train_model *m, const zo_train_state *s, uint32_t i,
                        uint32_t seed, float eta)
{
    (void)s;
    const zo_train_layer *L = &m->layers[i];
    const float coef = (eta * L->gscale) * m->inv_nq;
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
        return i;
    }
    memset(acc, 0, (L->weight_count + L->bias_count) * sizeof acc[0]);
    for (uint32_t n = 0; n < m->batch; ++n) {
        node_gradient(m, L, seed, n, gz);
        const int8_t *a = (const int8_t *)(saved_slot(m, L, n) + L->input_saved_offset);
        zo_accumulate_node_gradient(L, gz, a, 0, acc);
    }
    zo_advance_all(m, L);
    zo_update_from_accumulator(m, L, acc, coef);
    return i;
}
