/*
 * Weight perturbation (--estimator wp / adaptive's WP layers; paper Sec. 3.1, PeZO's
 * perturbations, P-RGE's batched queries): Q queries per sample from the layer's saved
 * input, the query sums, the gradient replayed from the seed, the update of a restart group.
 */
#include "zo_train_engine.h"

/* The layer's own kernel on one input with the given parameters (its geometry, or a
 * shifted copy): what model.c computes for it, with its current SRAM weights. */
void zo_run_layer_kernel(const zo_train_layer *L, const zo_conv_params *conv,
                         const zo_fc_params *fc, const int8_t *input, int8_t *output)
{
    ZO_PROFILE_BEGIN(ZO_PROFILE_FORWARD);
    if (L->kind == ZO_TRAIN_FC) {
        zo_fully_connected_s8(fc, input, L->weights, L->bias, output);
    } else {
        L->conv_kernel(conv, input, L->weights, L->folded ? L->folded : L->bias, output);
    }
    ZO_PROFILE_END();
}

/* Adds (sign +1) or subtracts (-1) the perturbation of stream p to the weights restored
 * from the backup, with int8 saturation. */
void zo_perturb_weights(const zo_train_layer *L, const int8_t *backup,
                        zo_perturb_stream *p, int32_t sign)
{
    ZO_PROFILE_BEGIN(ZO_PROFILE_PERTURB);
    for (uint32_t j = 0; j < L->weight_count; ++j) {
        L->weights[j] = sat_s8(backup[j] + sign * zo_perturb_next(p));
    }
    ZO_PROFILE_END();
}

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

/* Forward f of a query group is query f / sides at sign + (f even or one-sided) or -. */
int32_t zo_forward_sign(uint32_t f)
{
    return (ZO_TRAIN_TWO_SIDED && (f & 1u)) ? -1 : 1;
}

/* Copies of sample n's saved tensors into every slot of the query arena. */
void zo_restore_batch(const zo_train_batch_span *spans, uint32_t count,
                      const uint8_t *saved)
{
    ZO_PROFILE_BEGIN(ZO_PROFILE_RESTORE);
    for (uint32_t k = 0; k < count; ++k) {
        uint8_t *slot = model_query_arena_storage + spans[k].batch_offset;
        for (uint32_t b = 0; b < ZO_TRAIN_QUERY_BATCH; ++b, slot += spans[k].bytes) {
            memcpy(slot, saved + spans[k].saved_offset, spans[k].bytes);
        }
    }
    ZO_PROFILE_END();
}

/* Layers first..last on every slot at once. */
void zo_run_batch(int32_t first, int32_t last)
{
    if (first <= last) {
        ZO_PROFILE_BEGIN(ZO_PROFILE_FORWARD);
        model_run_batch_range(first, last);
        ZO_PROFILE_END();
    }
}

int32_t zo_slot_loss(const zo_train_model *m, uint32_t b, int32_t label)
{
    const uint8_t *logits = model_query_arena_storage + m->batch_logits_offset;
    return zo_logits_loss(m, (const int8_t *)(logits + b * (uint32_t)m->classes), label);
}

/* The loss difference a finished forward f contributes (two-sided: at its minus side, from
 * the plus side's loss kept in *plus); 0 and *done = 0 while a query is unfinished. */
int32_t zo_forward_difference(const zo_train_model *m, uint32_t f, int32_t loss,
                              int32_t clean, int32_t *plus, int *done)
{
    if (ZO_TRAIN_TWO_SIDED && zo_forward_sign(f) > 0) {
        *plus = loss;
        *done = 0;
        return 0;
    }
    *done = 1;
    return ZO_TRAIN_TWO_SIDED ? loss_difference(m, *plus, loss) : loss_difference(m, loss, clean);
}

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

/* g_j = sum_q D_q xi_qj over the layer's `count` perturbations of stream `seed`, replayed. */
void zo_replay_gradient(const zo_train_layer *L, uint32_t seed, const int32_t *sums,
                        uint32_t count, int32_t *g)
{
    ZO_PROFILE_BEGIN(ZO_PROFILE_UPDATE);
    memset(g, 0, L->weight_count * sizeof g[0]);
    zo_perturb_stream stream;
    zo_perturb_start(&stream, seed, L->perturb_shift);
    for (uint32_t q = 0; q < count; ++q) {
        for (uint32_t j = 0; j < L->weight_count; ++j) {
            g[j] += zo_perturb_next(&stream) * sums[q];
        }
    }
    ZO_PROFILE_END();
}

/* WP layer L's queries and its gradient, kept in its gradient region for the update. */
void zo_wp_gradient(const zo_train_model *m, const zo_train_layer *L, uint32_t seed)
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
void zo_finish_wp_group(const zo_train_model *m, uint32_t first, uint32_t last, float eta)
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
