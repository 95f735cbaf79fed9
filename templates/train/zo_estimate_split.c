/*
 * --estimator split: FedSPZO's split perturbation (docs/training.md "Split perturbation"):
 * block 1 layers [0, split) and block 2 the rest, P_s inner perturbations of block 2 per
 * block-1 direction and side.
 */
#include "zo_train_engine.h"

/* Layer i's weight backup: every trained layer's weights one after the other at the start of
 * the gradient region (the int32 gradients reuse it once the queries are done). */
static int8_t *split_backup(const zo_train_model *m, uint32_t i)
{
    int8_t *backup = (int8_t *)m->gradient;
    for (uint32_t k = 0; k < i; ++k) {
        backup += m->layers[k].weight_count;
    }
    return backup;
}

/* Layers [first, stop) at their backed-up weights plus sign times their streams' next draws. */
static void perturb_block(const zo_train_model *m, uint32_t first, uint32_t stop,
                          zo_perturb_stream *streams, int32_t sign)
{
    const int8_t *backup = split_backup(m, first);
    for (uint32_t i = first; i < stop; backup += m->layers[i].weight_count, ++i) {
        zo_perturb_weights(&m->layers[i], backup, &streams[i], sign);
        zo_refold(&m->layers[i]);
    }
}

/* Block 2's forward from the cutoff inputs saved in `slot`: the loss of the sample. */
static int32_t block2_loss(const zo_train_model *m, const uint8_t *slot, int32_t label)
{
    const zo_train_layer *cut = &m->layers[m->split];
    zo_restore_spans(cut->restart, cut->restart_count, model_arena(), slot);
    run_layers((int32_t)cut->op, m->logits_op);
    return zo_loss_q16(m, label);
}

/* Sample n's queries (Alg. 2 lines 7-14): for each of the P_1 block-1 directions z1 and each
 * side, block 1 runs once at theta_1 +- z1; on its output block 2 runs at theta_2 + z2_j and
 * theta_2 - z2_j for P_s fresh z2. D2_f += clamp(l+ - l-); D1_p += clamp(sum of the + side's
 * 2 P_s losses - the - side's). Every sample restarts the streams: all see the same z. */
static void split_queries(const zo_train_model *m, const zo_train_state *s, uint32_t t,
                          uint32_t n)
{
    uint8_t *arena = model_arena();
    const uint32_t split = m->split, count = m->layer_count;
    const zo_train_layer *first = &m->layers[0], *cut = &m->layers[split];
    zo_perturb_stream *stream = m->streams, *copy = m->streams + count;
    uint8_t *cut_slot = m->saved + (size_t)m->batch * m->saved_stride; /* after the samples' */
    int32_t *d1 = m->query_sums, *d2 = m->query_sums + m->queries;
    for (uint32_t i = 0; i < count; ++i) {
        const zo_train_layer *L = &m->layers[i];
        zo_perturb_start(&stream[i], zo_step_seed(s->seed, t, L->seed_index), L->perturb_shift);
    }
    uint32_t f = 0; /* block-2 perturbation (2 p + side) P_s + j: chunk f of its streams */
    for (uint32_t p = 0; p < m->queries; ++p) {
        int32_t side_losses[2];
        memcpy(copy, stream, split * sizeof stream[0]); /* -z1: the same draws again */
        for (uint32_t side = 0; side < 2u; ++side) {
            zo_restore_spans(first->restart, first->restart_count, arena, saved_slot(m, first, n));
            perturb_block(m, 0, split, side ? copy : stream, side ? -1 : 1);
            run_layers((int32_t)first->op, (int32_t)cut->op - 1);
            zo_save_spans(cut->restart, cut->restart_count, arena, cut_slot);
            int32_t sum = 0;
            for (uint32_t j = 0; j < ZO_SPLIT_INNER; ++j, ++f) {
                memcpy(copy + split, stream + split, (count - split) * sizeof stream[0]);
                perturb_block(m, split, count, stream, 1);
                const int32_t plus = block2_loss(m, cut_slot, m->labels[n]);
                perturb_block(m, split, count, copy, -1);
                const int32_t minus = block2_loss(m, cut_slot, m->labels[n]);
                d2[f] += clamp_difference(plus - minus, m->diff_limit);
                sum += plus + minus;
            }
            side_losses[side] = sum;
        }
        d1[p] += clamp_difference(side_losses[0] - side_losses[1], m->block1_diff_limit);
    }
}

/* One step's estimate and update of both blocks (Eqs. 2-4); each layer updates as WP from
 * its block's perturbations and sums, after every query (the global update rule). */
void zo_estimate_split(const zo_train_model *m, const zo_train_state *s, uint32_t t,
                       float eta)
{
    const uint32_t p2 = 2u * m->queries * ZO_SPLIT_INNER;
    {
        ZO_PROFILE_BEGIN(ZO_PROFILE_RESTORE);
        int8_t *backup = split_backup(m, 0);
        for (uint32_t i = 0; i < m->layer_count; backup += m->layers[i].weight_count, ++i) {
            memcpy(backup, m->layers[i].weights, m->layers[i].weight_count);
        }
        ZO_PROFILE_END();
    }
    memset(m->query_sums, 0, (m->queries + p2) * sizeof m->query_sums[0]);
    for (uint32_t n = 0; n < m->batch; ++n) {
        split_queries(m, s, t, n);
    }
    {
        ZO_PROFILE_BEGIN(ZO_PROFILE_RESTORE);
        const int8_t *backup = split_backup(m, 0);
        for (uint32_t i = 0; i < m->layer_count; backup += m->layers[i].weight_count, ++i) {
            memcpy(m->layers[i].weights, backup, m->layers[i].weight_count);
            zo_refold(&m->layers[i]);
        }
        ZO_PROFILE_END();
    }
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        const zo_train_layer *L = &m->layers[i];
        const int block1 = i < m->split;
        zo_replay_gradient(L, zo_step_seed(s->seed, t, L->seed_index),
                           block1 ? m->query_sums : m->query_sums + m->queries,
                           block1 ? m->queries : p2, m->gradient);
        ZO_PROFILE_BEGIN(ZO_PROFILE_UPDATE);
        (void)zo_update_weights(m, L, m->gradient, (eta * L->gscale) * m->inv_nq);
        ZO_PROFILE_END();
        zo_refold(L);
    }
}
