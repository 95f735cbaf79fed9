/*
 * --bp-layers: ElasticZO's hybrid, the last layers by back-propagation through the head
 * (zo_backprop.c), exact Q24 node gradients and NP's updates.
 */
#include "zo_train_engine.h"

#if ZO_TRAIN_INTEGER_ONLY
/* A BP layer's update from its whole int32 gradient g, rounded to `bits` bits (Alg. 2 line
 * 11); biases keep their values. */
static void round_update(const zo_train_layer *L, const int32_t *g, int32_t bits,
                         uint32_t halvings, uint32_t seed)
{
    ZO_PROFILE_BEGIN(ZO_PROFILE_UPDATE);
    uint32_t largest = 0u;
    for (uint32_t j = 0; j < L->weight_count; ++j) {
        largest = magnitude(g[j]) > largest ? magnitude(g[j]) : largest;
    }
    const int32_t shift = zo_rounding_shift(largest, bits, halvings);
    uint32_t rounding = zo_rounding_seed(seed);
    for (uint32_t j = 0; j < L->weight_count; ++j) {
        zo_apply_rounded(&L->weights[j], g[j], shift, &rounding);
    }
    ZO_PROFILE_END();
    zo_refold(L);
}
#endif

/* --bp-layers: layers[first..layer_count) by back-propagation through the head, from each
 * sample's saved activations at the first of them (step t's network: the ZO layers'
 * updates before did not touch them). The node gradients are exact and Q24; the updates
 * are NP's, in forward order, after every sample's backward pass. Returns the last layer. */
uint32_t zo_estimate_bp(const zo_train_model *m, const zo_train_state *s, uint32_t first,
                        uint32_t seed, float eta)
{
    (void)seed; /* nothing is drawn (integer-only builds round from each layer's own seed) */
    const zo_bp_head *h = m->head;
    uint8_t *arena = model_arena();
    const uint8_t *region = (const uint8_t *)m->gradient;
    int32_t *acc = m->gradient + h->accumulator_offset;
#if ZO_TRAIN_INTEGER_ONLY
    (void)eta;
    const int direct = 0; /* the rounding needs the whole gradient (its largest value) */
#else
    (void)s;
    const int direct = m->batch == 1; /* N = 1: the outer product twice, no accumulator */
#endif
    memset(acc, 0, h->accumulator_words * sizeof acc[0]);
    for (uint32_t n = 0; n < m->batch; ++n) {
        const zo_train_layer *F = &m->layers[first];
        zo_restore_spans(F->restart, F->restart_count, arena, saved_slot(m, F, n));
        {
            ZO_PROFILE_BEGIN(ZO_PROFILE_FORWARD);
            zo_bp_forward(m);
            ZO_PROFILE_END();
        }
        {
            ZO_PROFILE_BEGIN(ZO_PROFILE_UPDATE);
            zo_bp_backward(m, m->labels[n]);
            ZO_PROFILE_END();
        }
        uint32_t offset = 0;
        for (uint32_t k = 0; k < h->op_count; ++k) {
            const zo_bp_op *op = &h->ops[k];
            if (op->layer < 0) {
                continue;
            }
            const zo_train_layer *L = &m->layers[op->layer];
            const int32_t *gz = m->gradient + op->out_error;
            const int8_t *a = (const int8_t *)(region + op->in_copy[0]);
            if (direct) {
#if !ZO_TRAIN_INTEGER_ONLY
                zo_update_from_node_gradient(m, L, gz, a, ZO_BP_GRADIENT_SHIFT,
                                             (eta * L->gscale) * m->inv_nq);
#endif
            } else {
                zo_accumulate_node_gradient(L, gz, a, ZO_BP_GRADIENT_SHIFT, acc + offset);
                offset += L->weight_count + L->bias_count;
            }
        }
    }
    uint32_t offset = 0;
    for (uint32_t i = first; !direct && i < m->layer_count; ++i) {
        const zo_train_layer *L = &m->layers[i];
#if ZO_TRAIN_INTEGER_ONLY /* weights only, b_bp bits */
        round_update(L, acc + offset, m->b_bp, s->halvings,
                     zo_step_seed(s->seed, s->step, L->seed_index));
#else
        zo_update_from_accumulator(m, L, acc + offset, (eta * L->gscale) * m->inv_nq);
#endif
        offset += L->weight_count + L->bias_count;
    }
    return m->layer_count - 1u;
}
