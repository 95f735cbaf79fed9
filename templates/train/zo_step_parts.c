/*
 * The parts every estimator's step is built from (numpy twin: zocodegen/training/
 * step_parts.py): the profiling clock, saved activations restored and advanced, the loss,
 * the refold of a CONV layer's bias; for the float estimators a layer's kernel, a weight
 * perturbation and its replay, and the --query-batch forwards; for the integer ones the
 * b-bit stochastically rounded update. The estimator files (zo_estimate_*.c,
 * zo_node_queries.c) call these and never each other; nothing here calls up.
 */
#include "zo_train_engine.h"

#ifdef ZO_PROFILE_TRAIN
/*
 * Profiling build (-DZO_PROFILE_TRAIN, benchmarks/training_overheads.py; normal builds
 * compile none of this): the platform_cycles() of a step split by what the engine was doing
 * (zo_train.h, ZO_PROFILE_*). One category runs at a time; ZO_PROFILE_BEGIN(c) charges the
 * cycles since the last switch to the running category and makes c run until the
 * ZO_PROFILE_END() of the same scope, so the categories add up to the step's count (the
 * sample reads and the telemetry that the step leaves out, ZO_PROFILE_EXCLUDE leaves out of
 * the running category). zo_train_step restarts them when it starts and sends them after
 * its end-of-step record.
 */
uint32_t zo_train_profile_cycles[ZO_PROFILE_COUNT];
static uint32_t zo_train_profile_then;
int zo_train_profile_running = ZO_PROFILE_OTHER;

int zo_train_profile_switch(int category)
{
    const uint32_t now = platform_cycles();
    const int previous = zo_train_profile_running;
    zo_train_profile_cycles[previous] += now - zo_train_profile_then;
    zo_train_profile_then = now;
    zo_train_profile_running = category;
    return previous;
}

void zo_train_profile_restart(uint32_t now)
{
    for (int k = 0; k < ZO_PROFILE_COUNT; ++k) {
        zo_train_profile_cycles[k] = 0u;
    }
    zo_train_profile_then = now;
    zo_train_profile_running = ZO_PROFILE_OTHER;
}
#endif

/* ---- saved activations, loss, refold ---------------------------------------------------- */

void zo_save_spans(const zo_train_span *spans, uint32_t count, const uint8_t *arena,
                   uint8_t *slot)
{
    ZO_PROFILE_BEGIN(ZO_PROFILE_RESTORE);
    for (uint32_t k = 0; k < count; ++k) {
        memcpy(slot + spans[k].saved_offset, arena + spans[k].arena_offset, spans[k].bytes);
    }
    ZO_PROFILE_END();
}

void zo_restore_spans(const zo_train_span *spans, uint32_t count, uint8_t *arena,
                      const uint8_t *slot)
{
    ZO_PROFILE_BEGIN(ZO_PROFILE_RESTORE);
    for (uint32_t k = 0; k < count; ++k) {
        memcpy(arena + spans[k].arena_offset, slot + spans[k].saved_offset, spans[k].bytes);
    }
    ZO_PROFILE_END();
}

/* Cross-entropy of int8 logits, Q5.26 rounded to Q16 (2^-16 nats). */
int32_t zo_logits_loss(const zo_train_model *m, const int8_t *logits, int32_t label)
{
    ZO_PROFILE_BEGIN(ZO_PROFILE_LOSS);
    const int32_t loss = zo_rdbpot(zo_cross_entropy_q26(m->loss, logits, label), 10);
    ZO_PROFILE_END();
    return loss;
}

/* ... of the logits in the arena */
int32_t zo_loss_q16(const zo_train_model *m, int32_t label)
{
    return zo_logits_loss(m, (const int8_t *)(model_arena() + m->logits_offset), label);
}

/* CONV_2D's folded bias from the current weights and bias (zo_conv.c): after every change of
 * a CONV layer's parameters, before its kernel runs again. */
void zo_refold(const zo_train_layer *L)
{
    if (!L->folded) {
        return;
    }
    ZO_PROFILE_BEGIN(ZO_PROFILE_RESTORE);
    const uint32_t inner = L->weight_count / L->folded_count;
    const int8_t *w = L->weights;
    for (uint32_t c = 0; c < L->folded_count; ++c) {
        int32_t sum = 0;
        for (uint32_t k = 0; k < inner; ++k) {
            sum += *w++;
        }
        const int32_t bias = L->bias ? L->bias[c] : 0;
        L->folded[c] = (int32_t)((uint32_t)bias + (uint32_t)L->input_offset * (uint32_t)sum);
    }
    ZO_PROFILE_END();
}

/* After layer L's estimate: rerun L .. next_op - 1 with L's *old* parameters from each
 * sample's saved activations and keep what the next trainable layer needs ("global
 * update": every estimate of step t sees step t's network). */
void zo_advance_saved(const zo_train_model *m, const zo_train_layer *L, uint32_t n)
{
    uint8_t *arena = model_arena();
    zo_restore_spans(L->restart, L->restart_count, arena, saved_slot(m, L, n));
    run_layers(L->restart_op, (int32_t)L->next_op - 1);
}

/* Every sample's saved activations advanced past layer L to the next trainable layer's
 * slots (nothing when L is the last). */
void zo_advance_all(const zo_train_model *m, const zo_train_layer *L)
{
    if (L->next_op == L->op) {
        return;
    }
    for (uint32_t n = 0; n < m->batch; ++n) {
        zo_advance_saved(m, L, n);
        zo_save_spans(L->next_restart, L->next_restart_count, model_arena(),
                      saved_slot(m, L + 1, n));
    }
}

#if !ZO_TRAIN_INTEGER_ONLY
/* ---- float estimators: a layer's kernel, a weight perturbation, its replay -------------- */

/* The layer's own kernel on one input with the given parameters (its geometry, or a
 * shifted copy): what model.c computes for it, with its current SRAM weights. */
void zo_run_layer_kernel(const zo_train_layer *L, const zo_conv_params *conv,
                         const zo_fc_params *fc, const int8_t *input, int8_t *output)
{
    ZO_PROFILE_BEGIN(ZO_PROFILE_FORWARD);
#if defined(ZO_PROFILE_TRAIN) && defined(ZO_PROFILE_LAYERS)
    const uint32_t then = platform_cycles();
#endif
    if (L->kind == ZO_TRAIN_FC) {
        zo_fully_connected_s8(fc, input, L->weights, L->bias, output);
    } else {
        L->conv_kernel(conv, input, L->weights, L->folded ? L->folded : L->bias, output);
    }
#if defined(ZO_PROFILE_TRAIN) && defined(ZO_PROFILE_LAYERS)
    model_layer_cycles[L->op] += platform_cycles() - then;
    ++model_layer_runs[L->op];
#endif
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

#if ZO_TRAIN_QUERY_BATCH != 1
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
#endif
#else
/* ---- integer estimators: the b-bit stochastically rounded update (ElasticZO-INT8) ------- */

/* B - bits + halvings: the right shift of the rounding (training/int8.py round_to_bits),
 * B the bit length of `largest` = max |G| */
int32_t zo_rounding_shift(uint32_t largest, int32_t bits, uint32_t halvings)
{
    int32_t length = 0;
    for (uint32_t v = largest; v; v >>= 1) {
        ++length;
    }
    const int32_t shift = length - bits + (int32_t)halvings;
    return shift > 31 ? 31 : shift;
}

/* One weight's update: G's magnitude shifted right with stochastic rounding (up when the
 * dropped bits exceed the low bits of a rounding-stream draw); shift <= 0 keeps G. */
void zo_apply_rounded(int8_t *w, int32_t g, int32_t shift, uint32_t *rounding)
{
    int32_t d = g;
    if (shift > 0) {
        const uint32_t mask = (1u << shift) - 1u;
        const uint32_t a = magnitude(g);
        const uint32_t q = (a >> shift) + ((a & mask) > (zo_xorshift32(rounding) & mask) ? 1u : 0u);
        d = g < 0 ? -(int32_t)q : (int32_t)q;
    }
    *w = sat_s8((int32_t)*w - d); /* |d| <= 2^31 >> 1 */
}
#endif
