/*
 * --estimator int8: ElasticZO-INT8 (Alg. 2), integer only from perturbation to update, so
 * the engine runs on cores without an FPU: sparse uniform perturbations, two-point sign
 * estimates, b_zo-bit stochastically rounded updates.
 */
#include "zo_train_engine.h"

/* p_zero of step t in Q16: --p-zero, or the paper's schedule 0.33, 0.5, 0.9 from 0, T/5, T/2 */
static uint32_t p_zero_q16(const zo_train_model *m, const zo_train_state *s, uint32_t t)
{
    if (m->p_zero_q16 >= 0) {
        return (uint32_t)m->p_zero_q16;
    }
    const uint32_t T = s->schedule_steps;
    return 5u * t < T ? 21627u : (2u * t < T ? 32768u : 58982u);
}

/* z = m u: one draw, u = ((x >> 16) (2 r + 1) >> 16) - r, kept where (x & 0xFFFF) >= p */
static int32_t int8_perturbation(uint32_t *state, int32_t r_max, uint32_t p_q16)
{
    const uint32_t x = zo_xorshift32(state);
    const int32_t u = (int32_t)(((x >> 16) * (uint32_t)(2 * r_max + 1)) >> 16) - r_max;
    return (x & 0xFFFFu) >= p_q16 ? u : 0;
}

/* G_j = sum_q sgn(D_q) z_qj of weight j, the Q query streams advanced by one draw each */
static int32_t sign_gradient(const zo_train_model *m, uint32_t *states, uint32_t p_q16)
{
    int32_t g = 0;
    for (uint32_t q = 0; q < m->queries; ++q) {
        const int32_t z = int8_perturbation(&states[q], m->r_max, p_q16);
        g += m->query_sums[q] > 0 ? z : (m->query_sums[q] < 0 ? -z : 0);
    }
    return g;
}

static void query_states(const zo_train_model *m, uint32_t seed, uint32_t *states)
{
    for (uint32_t q = 0; q < m->queries; ++q) {
        states[q] = zo_query_seed(seed, q);
    }
}

/* Per query: the losses at theta + z and theta - z from layer L (every sample sees the same
 * z, query q's from its own stream), D_q = sum over the batch of the clamped differences;
 * the saved activations advanced with the old weights; then the update from G_j = sum_q
 * sgn(D_q) z_qj rounded to b_zo bits (Alg. 2), G rebuilt weight by weight from the Q query
 * streams twice (its largest value, then the update), so that only the Q generator states
 * and the weight backup take memory. */
uint32_t zo_estimate_int8(const zo_train_model *m, const zo_train_state *s, uint32_t i,
                          uint32_t seed, float eta)
{
    (void)eta; /* the update is b_zo bits */
    const zo_train_layer *L = &m->layers[i];
    uint8_t *arena = model_arena();
    uint32_t *states = (uint32_t *)layer_gradient(m, L);
    int8_t *backup = (int8_t *)(states + m->queries);
    const uint32_t p_q16 = p_zero_q16(m, s, s->step);
    {
        ZO_PROFILE_BEGIN(ZO_PROFILE_RESTORE);
        memcpy(backup, L->weights, L->weight_count);
        ZO_PROFILE_END();
    }
    memset(m->query_sums, 0, m->queries * sizeof m->query_sums[0]);
    for (uint32_t n = 0; n < m->batch; ++n) {
        for (uint32_t q = 0; q < m->queries; ++q) {
            int32_t loss[2];
            for (int side = 0; side < 2; ++side) {
                uint32_t state = zo_query_seed(seed, q);
                zo_restore_spans(L->restart, L->restart_count, arena, saved_slot(m, L, n));
                {
                    ZO_PROFILE_BEGIN(ZO_PROFILE_PERTURB);
                    for (uint32_t j = 0; j < L->weight_count; ++j) {
                        const int32_t z = int8_perturbation(&state, m->r_max, p_q16);
                        L->weights[j] = sat_s8(L->weights[j] + (side ? -z : z));
                    }
                    ZO_PROFILE_END();
                }
                zo_refold(L);
                run_layers(L->restart_op, m->logits_op);
                loss[side] = zo_loss_q16(m, m->labels[n]);
                ZO_PROFILE_BEGIN(ZO_PROFILE_RESTORE);
                memcpy(L->weights, backup, L->weight_count);
                ZO_PROFILE_END();
            }
            m->query_sums[q] += loss_difference(m, loss[0], loss[1]);
        }
    }
    zo_refold(L);
    zo_advance_all(m, L);
    ZO_PROFILE_BEGIN(ZO_PROFILE_UPDATE);
    uint32_t largest = 0u;
    query_states(m, seed, states);
    for (uint32_t j = 0; j < L->weight_count; ++j) {
        const uint32_t a = magnitude(sign_gradient(m, states, p_q16));
        largest = a > largest ? a : largest;
    }
    const int32_t shift = zo_rounding_shift(largest, m->b_zo, s->halvings);
    uint32_t rounding = zo_rounding_seed(seed);
    query_states(m, seed, states);
    for (uint32_t j = 0; j < L->weight_count; ++j) {
        zo_apply_rounded(&L->weights[j], sign_gradient(m, states, p_q16), shift, &rounding);
    }
    ZO_PROFILE_END();
    zo_refold(L);
    return i;
}
