/*
 * Zeroth-order training engine, the step (zo_train.h): each sample's clean forward, then the
 * layers in order, each estimated by its estimator file and updated before the next one
 * (the global update), telemetry and the step's cycle count. Rules and their reasons:
 * docs/training.md; numpy twin: zocodegen/training/simulator.py (parameters bit-identical
 * after any number of steps). The engine's files: zo_train_engine.h.
 */
#include "zo_train_engine.h"

#ifdef ZO_PROFILE_TRAIN
/*
 * Profiling build (-DZO_PROFILE_TRAIN, benchmarks/training_overheads.py; normal builds
 * compile the #else branch alone): the platform_cycles() of a step split by what the engine
 * was doing (zo_train.h, ZO_PROFILE_*). One category runs at a time; ZO_PROFILE_BEGIN(c)
 * charges the cycles since the last switch to the running category and makes c run until
 * the ZO_PROFILE_END() of the same scope, so the categories add up to the step's count
 * (the sample reads and the telemetry that the step leaves out, ZO_PROFILE_EXCLUDE leaves
 * out of the running category).
 * zo_train_step clears them when it starts and sends them after its end-of-step record.
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
#endif

/* ---- small helpers ------------------------------------------------------------------- */

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

/* ---- the two estimators ----------------------------------------------------------------- */

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

/* ---- the step ----------------------------------------------------------------------------- */

void zo_train_init(const zo_train_model *m, zo_train_state *s)
{
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        const zo_train_layer *L = &m->layers[i];
        memcpy(L->weights, L->weights_flash, L->weight_count);
        if (L->bias) {
            memcpy(L->bias, L->bias_flash, L->bias_count * sizeof L->bias[0]);
        }
        if (L->folded) {
            memcpy(L->folded, L->folded_flash, L->folded_count * sizeof L->folded[0]);
        }
    }
    zo_train_attach(m);
    s->step = 0;
    s->schedule_steps = m->steps;
    s->constant_lr = 0;
    s->lr = m->guard && m->guard->lr_auto ? 0.0f : m->lr;
    s->seed = m->seed;
    s->halvings = 0u;
    s->best_step = ZO_TRAIN_NO_BEST;
    s->best_correct = 0u;
    s->best_loss = 0;
    s->rollbacks = 0u;
}

void zo_train_attach(const zo_train_model *m)
{
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        const zo_train_layer *L = &m->layers[i];
        if (L->weights_active) {
            *L->weights_active = L->weights;
        }
        if (L->bias_active) {
            *L->bias_active = L->bias;
        }
        if (L->folded_active) {
            *L->folded_active = L->folded;
        }
    }
}

void zo_train_detach(const zo_train_model *m)
{
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        const zo_train_layer *L = &m->layers[i];
        if (L->weights_active) {
            *L->weights_active = L->weights_flash;
        }
        if (L->bias_active) {
            *L->bias_active = L->bias_flash;
        }
        if (L->folded_active) {
            *L->folded_active = L->folded_flash;
        }
    }
}

/* Sends a telemetry record; returns the cycles that took, which the step's count leaves
 * out (on a board it is UART time, under QEMU it is host time). */
static uint32_t report(const zo_train_state *s, uint32_t step, int32_t layer, int32_t loss,
                       float lr, uint32_t cycles)
{
    const uint32_t start = platform_cycles();
    if (s->telemetry) {
        const zo_train_telemetry record = {step, layer, loss, lr, cycles};
        s->telemetry(s->telemetry_context, &record);
    }
    return platform_cycles() - start;
}

#if !ZO_TRAIN_INTEGER_ONLY
#if !ZO_TRAIN_SPLIT
/* Whether layers[i] is the last of its restart group. */
static int ends_group(const zo_train_model *m, uint32_t i)
{
    return i + 1u == m->layer_count || m->layers[i + 1u].restart_op == m->layers[i + 1u].op;
}
#endif

/* --record-scalars: hands the query sums of the layer (split: of its block) to the state's
 * hook; returns the cycles that took (I/O, not the step's work). */
static uint32_t send_scalars(const zo_train_state *s, uint32_t t, const zo_train_layer *L,
                             const int32_t *sums, uint32_t count)
{
    if (!s->scalars) {
        return 0u;
    }
    const uint32_t start = platform_cycles();
    s->scalars(s->scalars_context, t, (int32_t)L->seed_index, sums, count);
    const uint32_t sent = platform_cycles() - start;
    ZO_PROFILE_EXCLUDE(sent);
    return sent;
}
#endif

int zo_train_step(const zo_train_model *m, zo_train_state *s)
{
    uint8_t *arena = model_arena();
    const uint32_t t = s->step;
#if ZO_TRAIN_INTEGER_ONLY
    const float eta = 0.0f; /* no learning rate: the updates are b_zo / b_bp bits */
#else
    const float eta = zo_train_learning_rate(m, s, t);
#endif
    const zo_train_layer *first = &m->layers[0];
    const uint32_t step_start = platform_cycles();
#ifdef ZO_PROFILE_TRAIN
    for (int k = 0; k < ZO_PROFILE_COUNT; ++k) {
        zo_train_profile_cycles[k] = 0u;
    }
    zo_train_profile_then = step_start;
    zo_train_profile_running = ZO_PROFILE_OTHER;
#endif
    uint32_t io_cycles = 0u; /* reading samples, sending telemetry: not the step's work */
    int64_t loss_sum = 0;
    for (uint32_t n = 0; n < m->batch; ++n) {
        const uint32_t index = (uint32_t)(((uint64_t)t * m->batch + n) % s->sample_count);
        int32_t label = 0;
        const uint32_t read_start = platform_cycles();
        const int read = s->read_sample(s->sample_context, index, arena + m->input_offset,
                                        &label);
        const uint32_t read_cycles = platform_cycles() - read_start;
        io_cycles += read_cycles;
        ZO_PROFILE_EXCLUDE(read_cycles);
        if (read != 0) {
            return ZO_TRAIN_ERR_SAMPLE;
        }
        if (label < 0 || label >= m->classes) {
            return ZO_TRAIN_ERR_LABEL;
        }
        m->labels[n] = label;
        run_layers(0, (int32_t)first->op - 1);
        zo_save_spans(first->restart, first->restart_count, arena, saved_slot(m, first, n));
        run_layers(first->op, m->logits_op);
        m->clean_q16[n] = zo_loss_q16(m, label);
        loss_sum += m->clean_q16[n];
    }
    const int32_t mean_loss = (int32_t)(loss_sum / (int64_t)m->batch);
#if ZO_TRAIN_SPLIT
    {
        const uint32_t layer_start = platform_cycles();
        zo_estimate_split(m, s, t, eta);
        io_cycles += send_scalars(s, t, &m->layers[0], m->query_sums, m->queries);
        io_cycles += send_scalars(s, t, &m->layers[m->split], m->query_sums + m->queries,
                                  2u * m->queries * ZO_SPLIT_INNER);
        const uint32_t report_cycles = report(s, t, (int32_t)m->layer_count - 1, mean_loss,
                                              eta, platform_cycles() - layer_start);
        io_cycles += report_cycles;
        ZO_PROFILE_EXCLUDE(report_cycles);
    }
#else
#if !ZO_TRAIN_INTEGER_ONLY
    uint32_t group_first = 0; /* of the current restart group */
#endif
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        const zo_train_layer *L = &m->layers[i];
        const uint32_t layer_start = platform_cycles();
        const uint32_t seed = zo_step_seed(s->seed, t, L->seed_index);
        int32_t last = (int32_t)i;
#if !ZO_TRAIN_INTEGER_ONLY
        if (L->restart_op == L->op) {
            group_first = i;
        }
#endif
#if ZO_TRAIN_BACKPROP
        if (L->mode == ZO_TRAIN_BP) { /* the BP layers are the last ones: all at once */
            zo_estimate_bp(m, s, i);
            last = (int32_t)m->layer_count - 1;
        } else
#endif
        {
#if ZO_TRAIN_INTEGER_ONLY
            zo_estimate_int8(m, s, L, seed);
#else
            if (L->mode == ZO_TRAIN_WP) {
                zo_wp_gradient(m, L, seed);
                io_cycles += send_scalars(s, t, L, m->query_sums, m->queries);
                if (ends_group(m, i)) {
                    zo_finish_wp_group(m, group_first, i, eta);
                }
#if ZO_TRAIN_CHANNEL
            } else if (L->mode == ZO_TRAIN_CH) {
                zo_estimate_ch(m, L, seed, (eta * L->gscale) * m->inv_nq);
#endif
            } else {
                zo_estimate_np(m, L, seed, (eta * L->gscale) * m->inv_nq);
            }
#endif
        }
        const uint32_t report_cycles =
            report(s, t, last, mean_loss, eta, platform_cycles() - layer_start);
        io_cycles += report_cycles;
        ZO_PROFILE_EXCLUDE(report_cycles);
        i = (uint32_t)last;
    }
#endif
    s->step = t + 1;
#ifdef ZO_PROFILE_TRAIN
    (void)zo_train_profile_switch(ZO_PROFILE_OTHER);
#endif
    (void)report(s, t + 1, -1, mean_loss, eta, platform_cycles() - step_start - io_cycles);
#ifdef ZO_PROFILE_TRAIN
    for (int k = 0; k < ZO_PROFILE_COUNT; ++k) {
        (void)report(s, t + 1, ZO_PROFILE_LAYER + k, mean_loss, eta, zo_train_profile_cycles[k]);
    }
#endif
    return ZO_TRAIN_OK;
}
