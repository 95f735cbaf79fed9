/*
 * Zeroth-order training engine, the step (zo_train.h): each sample's clean forward, then the
 * layers in order, each estimated by the estimator of its mode (one table, below) and
 * updated before the next one (the global update), telemetry and the step's cycle count.
 * The estimators never call this file back (their shared parts are below them, in
 * zo_step_parts.c); the guard and the firmware enter it through zo_train.h. Rules and their
 * reasons: docs/training.md; numpy twin: zocodegen/training/simulator.py (parameters
 * bit-identical after any number of steps). The engine's files: zo_train_engine.h.
 */
#include "zo_train_engine.h"

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
#if ZO_TRAIN_SCALES
        if (L->scales) {
            zo_scales_reset(L);
        }
#endif
    }
    zo_train_attach(m);
    s->step = 0;
    s->schedule_steps = zo_train_run_steps(m, s->sample_count);
    s->constant_lr = 0;
    s->lr = m->guard && m->guard->lr_auto ? 0.0f : m->lr;
    s->seed = m->seed;
    s->halvings = 0u;
    s->best_step = ZO_TRAIN_NO_BEST;
    s->best_correct = 0u;
    s->best_loss = 0;
    s->rollbacks = 0u;
    s->falling = 0u; /* also ends a stop (ZO_CKPT_STOPPED) of a run before this one */
}

uint32_t zo_train_run_steps(const zo_train_model *m, uint32_t records)
{
    return m->steps ? m->steps : m->epochs * ((records + m->batch - 1u) / m->batch);
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
        if (L->scales && L->scales->params_active) {
            *L->scales->params_active = L->scales->params_ram;
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
        if (L->scales && L->scales->params_active) {
            *L->scales->params_active = L->scales->params_flash;
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

#if !ZO_TRAIN_SPLIT
/* The layer estimators this build compiles, by zo_train_layer.mode: the generator gives
 * a layer no other mode (zo_train_config.h's switches say which). */
static const zo_layer_estimator estimators[] = {
#if ZO_TRAIN_INTEGER_ONLY
    [ZO_TRAIN_INT8] = zo_estimate_int8,
#else
    [ZO_TRAIN_WP] = zo_estimate_wp,
    [ZO_TRAIN_NP] = zo_estimate_np,
#if ZO_TRAIN_CHANNEL
    [ZO_TRAIN_CH] = zo_estimate_ch,
#endif
#endif
#if ZO_TRAIN_BACKPROP
    [ZO_TRAIN_BP] = zo_estimate_bp, /* the BP layers are the last ones: all at once */
#endif
};
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
    zo_train_profile_restart(step_start);
#ifdef ZO_PROFILE_LAYERS
    memset(model_layer_cycles, 0, sizeof model_layer_cycles);
    memset(model_layer_runs, 0, sizeof model_layer_runs);
#endif
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
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        const zo_train_layer *L = &m->layers[i];
        const uint32_t layer_start = platform_cycles();
        const uint32_t seed = zo_step_seed(s->seed, t, L->seed_index);
        const uint32_t last = estimators[L->mode](m, s, i, seed, eta);
#if !ZO_TRAIN_INTEGER_ONLY
        if (L->mode == ZO_TRAIN_WP) { /* its query sums are what --record-scalars records */
            io_cycles += send_scalars(s, t, L, m->query_sums, m->queries);
        }
#endif
        const uint32_t report_cycles =
            report(s, t, (int32_t)last, mean_loss, eta, platform_cycles() - layer_start);
        io_cycles += report_cycles;
        ZO_PROFILE_EXCLUDE(report_cycles);
        i = last;
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
#ifdef ZO_PROFILE_LAYERS
    for (int i = 0; i < MODEL_LAYER_COUNT; ++i) {
        (void)report(s, t + 1, ZO_PROFILE_OP + i, mean_loss, eta, model_layer_cycles[i]);
        (void)report(s, t + 1, ZO_PROFILE_OP_RUNS + i, mean_loss, eta, model_layer_runs[i]);
    }
#endif
#endif
    return ZO_TRAIN_OK;
}
