/*
 * zo_train_engine.h - what the files of the training engine share; the firmware around it
 * includes zo_train.h alone. One file per part (docs/training.md "The engine's files"):
 *
 *   zo_train.c           the step: samples, clean forwards, the layer loop (one table of
 *                        the estimators by layer mode), telemetry
 *   zo_estimate_wp.c     weight perturbation: queries, single or batched (P-RGE)
 *   zo_estimate_np.c     node perturbation: the node gradient of the pre-activation
 *   zo_estimate_ch.c     channel-wise node perturbation: the per-channel biases (and with
 *                        --scales the filter scales' gradient)
 *   zo_estimate_split.c  --estimator split (FedSPZO)
 *   zo_estimate_int8.c   --estimator int8 (ElasticZO-INT8), integer only
 *   zo_estimate_bp.c     --bp-layers (ElasticZO): the last layers by back-propagation
 *   zo_node_queries.c    queries on a perturbed pre-activation, shared by NP and CH
 *   zo_node_gradient.c   node gradient -> parameter gradient and update (NP and BP)
 *   zo_update.c          learning rate and the scaled, clipped update (paper Eq. 8);
 *                        zo_update_rules.h its per-weight arithmetic, inline
 *   zo_scales.c          --scales: the filter scales' update, the multipliers rebuilt
 *                        from them (init and checkpoint loads call it too)
 *   zo_checkpoint.c      checkpoint encoding (zocodegen/training/checkpoint.py)
 *   zo_step_parts.c      the parts every estimator shares: saved activations, loss,
 *                        refold, kernel, weight perturbation and replay, query batches,
 *                        the integer rounding; the profiling clock
 *
 * Calls go down this list only: zo_train.c calls the estimators through its table, an
 * estimator calls the files below the estimators and never another zo_estimate_*.c
 * (tests/test_estimators.py), and nothing calls zo_train.c but through zo_train.h. The
 * generator renders only the files a build uses (zocodegen/training/estimators,
 * engine_sources). Build with -ffp-contract=off: the update is float32 in a fixed order.
 */
#ifndef ZO_TRAIN_ENGINE_H
#define ZO_TRAIN_ENGINE_H

#include <stddef.h>
#include <string.h>

#include "model.h"
#include "platform.h"
#include "zo_crc32.h"
#include "zo_perturb.h"
#include "zo_prng.h"
#include "zo_requant.h"
#include "zo_train.h"

#define ZO_INT32_MAX_I64 ((int64_t)2147483647)
#define ZO_INT32_MIN_I64 (-(int64_t)2147483647 - 1)
#define ZO_UPDATE_LIMIT 1073741824.0f /* 2^30: |rounded update| is clamped here */
/* NP and BP turn a node gradient into parameter gradients (an INT8 build without BP
 * layers has neither) */
#define ZO_TRAIN_NODE_GRADIENTS (ZO_TRAIN_BACKPROP || !ZO_TRAIN_INTEGER_ONLY)
/* forwards per query: theta + z, and theta - z when --two-sided */
#define ZO_SIDES (ZO_TRAIN_TWO_SIDED ? 2u : 1u)

/* NP and CH precompute h(z + delta) for every delta a perturbation can take: -1, +1 for
 * Rademacher values, -2..2 for uniform ones (0: the clean h(z), which the queries
 * overwrite in the arena). ZO_NP_SHIFT(x) is the buffer of delta x (zo_node_queries.c). */
#if ZO_PERTURB_MAX == 1
#define ZO_NP_SHIFTS 2u
#define ZO_NP_SHIFT(x) ((x) > 0 ? 1u : 0u)
#else
#define ZO_NP_SHIFTS (2u * ZO_PERTURB_MAX + 1u)
#define ZO_NP_SHIFT(x) ((uint32_t)((x) + ZO_PERTURB_MAX))
#endif

/* ---- profiling (-DZO_PROFILE_TRAIN; zo_step_parts.c) ------------------------------------- */
#ifdef ZO_PROFILE_TRAIN
extern int zo_train_profile_running;
int zo_train_profile_switch(int category);
void zo_train_profile_restart(uint32_t now); /* every category at 0, OTHER running */
#define ZO_PROFILE_BEGIN(category) \
    const int zo_train_profile_previous = zo_train_profile_switch(category)
#define ZO_PROFILE_END() ((void)zo_train_profile_switch(zo_train_profile_previous))
/* the step leaves these cycles out (sample reads, telemetry): so does the running category */
#define ZO_PROFILE_EXCLUDE(cycles) \
    (zo_train_profile_cycles[zo_train_profile_running] -= (cycles))
#ifdef ZO_PROFILE_LAYERS
extern uint32_t model_layer_cycles[MODEL_LAYER_COUNT], model_layer_runs[MODEL_LAYER_COUNT];
#endif
#else
#define ZO_PROFILE_BEGIN(category) ((void)0)
#define ZO_PROFILE_END() ((void)0)
#define ZO_PROFILE_EXCLUDE(cycles) ((void)(cycles))
#endif

/* ---- small helpers ----------------------------------------------------------------------- */

static inline int8_t sat_s8(int32_t x)
{
    return (int8_t)(x > 127 ? 127 : (x < -128 ? -128 : x));
}

static inline uint32_t magnitude(int32_t g)
{
    return g < 0 ? 0u - (uint32_t)g : (uint32_t)g;
}

static inline int32_t sat_s32(int64_t x)
{
    return (int32_t)(x > ZO_INT32_MAX_I64 ? ZO_INT32_MAX_I64
                                          : (x < ZO_INT32_MIN_I64 ? ZO_INT32_MIN_I64 : x));
}

/* Where layer L's estimate keeps its gradient region (zo_train_layer.gradient). */
static inline int32_t *layer_gradient(const zo_train_model *m, const zo_train_layer *L)
{
    return L->gradient ? L->gradient : m->gradient;
}

/* Sample n's slot of the saved activations layer L's queries restart from. */
static inline uint8_t *saved_slot(const zo_train_model *m, const zo_train_layer *L, uint32_t n)
{
    return L->saved ? L->saved + (size_t)n * L->saved_stride
                    : m->saved + (size_t)n * m->saved_stride;
}

static inline int32_t clamp_difference(int32_t d, int32_t limit)
{
    return d > limit ? limit : (d < -limit ? -limit : d);
}

/* Delta l = l_q - l, clamped so that N Q of them sum exactly in int32 (docs/training.md). */
static inline int32_t loss_difference(const zo_train_model *m, int32_t loss, int32_t clean)
{
    return clamp_difference(loss - clean, m->diff_limit); /* both in [0, 2^21) */
}

static inline void run_layers(int32_t first, int32_t last)
{
    if (first <= last) {
        ZO_PROFILE_BEGIN(ZO_PROFILE_FORWARD);
        model_run_range(first, last);
        ZO_PROFILE_END();
    }
}

/* ---- the estimators (zo_train.c's table, by zo_train_layer.mode) --------------------------- */
/* Layer i's estimate and update at learning rate eta (0 in integer-only builds) from its
 * step seed; returns the last layer it updated (WP: a restart group's layers update at its
 * last; BP: every layer from i on at once). */
typedef uint32_t (*zo_layer_estimator)(const zo_train_model *m, const zo_train_state *s,
                                       uint32_t i, uint32_t seed, float eta);
uint32_t zo_estimate_wp(const zo_train_model *m, const zo_train_state *s, uint32_t i,
                        uint32_t seed, float eta);
uint32_t zo_estimate_np(const zo_train_model *m, const zo_train_state *s, uint32_t i,
                        uint32_t seed, float eta);
uint32_t zo_estimate_ch(const zo_train_model *m, const zo_train_state *s, uint32_t i,
                        uint32_t seed, float eta);
uint32_t zo_estimate_int8(const zo_train_model *m, const zo_train_state *s, uint32_t i,
                          uint32_t seed, float eta);
uint32_t zo_estimate_bp(const zo_train_model *m, const zo_train_state *s, uint32_t i,
                        uint32_t seed, float eta);
/* --estimator split: the whole step's estimate and update of both blocks */
void zo_estimate_split(const zo_train_model *m, const zo_train_state *s, uint32_t t,
                       float eta);

/* ---- zo_node_queries.c ------------------------------------------------------------------- */
/* Sample n's Q queries of layer L perturbed `width` wide (NP: d_a, CH: channels): h(z +
 * delta) into `shifted` (ZO_NP_SHIFTS x d_a bytes), then the loss differences d[0..Q). */
void zo_node_queries(const zo_train_model *m, const zo_train_layer *L, uint32_t seed,
                     uint32_t n, uint32_t width, int8_t *shifted, int32_t *d);

/* ---- zo_scales.c (--scales) -------------------------------------------------------------- */
#if ZO_TRAIN_SCALES
void zo_scales_reset(const zo_train_layer *L);
void zo_scales_rebuild(const zo_train_layer *L);
void zo_scales_update(const zo_train_layer *L, float coef, const int32_t *g,
                      const int64_t *squares, uint32_t count);
#endif

/* h(z) from h(z - 1) and h(z + 1) (the Rademacher shifts a CH layer computes; its range
 * spans more than 2): z itself where neither is clamped, else the clamped side. */
static inline int32_t zo_clean_output(int32_t down, int32_t up, int32_t lo)
{
    return up - down == 2 ? down + 1 : (down == lo ? down : up);
}

/* round(x / 32), half away from zero: a scale query's move of a node (x = xi' (h(z) - zp)) */
static inline int32_t zo_scale_term(int32_t x)
{
    return x >= 0 ? (x + 16) >> 5 : -((16 - x) >> 5);
}

/* ---- zo_node_gradient.c ------------------------------------------------------------------ */
void zo_accumulate_node_gradient(const zo_train_layer *L, const int32_t *gz,
                                 const int8_t *a, int shift, int32_t *acc);
void zo_update_from_accumulator(const zo_train_model *m, const zo_train_layer *L,
                                const int32_t *acc, float coef);
void zo_update_from_node_gradient(const zo_train_model *m, const zo_train_layer *L,
                                  const int32_t *gz, const int8_t *a, int shift,
                                  float coef);

/* ---- zo_update.c ------------------------------------------------------------------------- */
float zo_update_weights(const zo_train_model *m, const zo_train_layer *L, const int32_t *g,
                        float coef);

/* ---- zo_step_parts.c --------------------------------------------------------------------- */
void zo_advance_saved(const zo_train_model *m, const zo_train_layer *L, uint32_t n);
void zo_advance_all(const zo_train_model *m, const zo_train_layer *L);
int32_t zo_logits_loss(const zo_train_model *m, const int8_t *logits, int32_t label);
int32_t zo_loss_q16(const zo_train_model *m, int32_t label);
void zo_refold(const zo_train_layer *L);
void zo_restore_spans(const zo_train_span *spans, uint32_t count, uint8_t *arena,
                      const uint8_t *slot);
void zo_save_spans(const zo_train_span *spans, uint32_t count, const uint8_t *arena,
                   uint8_t *slot);
/* float builds */
void zo_perturb_weights(const zo_train_layer *L, const int8_t *backup,
                        zo_perturb_stream *p, int32_t sign);
void zo_replay_gradient(const zo_train_layer *L, uint32_t seed, const int32_t *sums,
                        uint32_t count, int32_t *g);
void zo_run_layer_kernel(const zo_train_layer *L, const zo_conv_params *conv,
                         const zo_fc_params *fc, const int8_t *input, int8_t *output);
/* --query-batch B > 1 */
int32_t zo_forward_difference(const zo_train_model *m, uint32_t f, int32_t loss,
                              int32_t clean, int32_t *plus, int *done);
int32_t zo_forward_sign(uint32_t f);
void zo_restore_batch(const zo_train_batch_span *spans, uint32_t count,
                      const uint8_t *saved);
void zo_run_batch(int32_t first, int32_t last);
int32_t zo_slot_loss(const zo_train_model *m, uint32_t b, int32_t label);
/* integer-only builds */
void zo_apply_rounded(int8_t *w, int32_t g, int32_t shift, uint32_t *rounding);
int32_t zo_rounding_shift(uint32_t largest, int32_t bits, uint32_t halvings);

#endif /* ZO_TRAIN_ENGINE_H */
