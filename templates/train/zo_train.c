/*
 * Zeroth-order training engine: layer-wise WP/NP estimation, the scaled update, the global
 * update order and checkpoints. Rules and their reasons: docs/training.md. numpy twin:
 * zocodegen/training/simulator.py (parameters are bit-identical after any number of steps).
 *
 * Build with -ffp-contract=off: the update is float32 in a fixed operation order.
 */
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
static int zo_train_profile_running = ZO_PROFILE_OTHER;

static int zo_train_profile_switch(int category)
{
    const uint32_t now = platform_cycles();
    const int previous = zo_train_profile_running;
    zo_train_profile_cycles[previous] += now - zo_train_profile_then;
    zo_train_profile_then = now;
    zo_train_profile_running = category;
    return previous;
}

#define ZO_PROFILE_BEGIN(category) \
    const int zo_train_profile_previous = zo_train_profile_switch(category)
#define ZO_PROFILE_END() ((void)zo_train_profile_switch(zo_train_profile_previous))
/* the step leaves these cycles out (sample reads, telemetry): so does the running category */
#define ZO_PROFILE_EXCLUDE(cycles) \
    (zo_train_profile_cycles[zo_train_profile_running] -= (cycles))
#else
#define ZO_PROFILE_BEGIN(category) ((void)0)
#define ZO_PROFILE_END() ((void)0)
#define ZO_PROFILE_EXCLUDE(cycles) ((void)(cycles))
#endif

/* ---- small helpers ------------------------------------------------------------------- */

static int8_t sat_s8(int32_t x)
{
    return (int8_t)(x > 127 ? 127 : (x < -128 ? -128 : x));
}

#if ZO_TRAIN_NODE_GRADIENTS
static int32_t sat_s32(int64_t x)
{
    return (int32_t)(x > ZO_INT32_MAX_I64 ? ZO_INT32_MAX_I64
                                          : (x < ZO_INT32_MIN_I64 ? ZO_INT32_MIN_I64 : x));
}
#endif

/* Where layer L's estimate keeps its gradient region (zo_train_layer.gradient). */
static int32_t *layer_gradient(const zo_train_model *m, const zo_train_layer *L)
{
    return L->gradient ? L->gradient : m->gradient;
}

/* Sample n's slot of the saved activations layer L's queries restart from. */
static uint8_t *saved_slot(const zo_train_model *m, const zo_train_layer *L, uint32_t n)
{
    return L->saved ? L->saved + (size_t)n * L->saved_stride
                    : m->saved + (size_t)n * m->saved_stride;
}

static void save_spans(const zo_train_span *spans, uint32_t count, const uint8_t *arena,
                       uint8_t *slot)
{
    ZO_PROFILE_BEGIN(ZO_PROFILE_RESTORE);
    for (uint32_t k = 0; k < count; ++k) {
        memcpy(slot + spans[k].saved_offset, arena + spans[k].arena_offset, spans[k].bytes);
    }
    ZO_PROFILE_END();
}

static void restore_spans(const zo_train_span *spans, uint32_t count, uint8_t *arena,
                          const uint8_t *slot)
{
    ZO_PROFILE_BEGIN(ZO_PROFILE_RESTORE);
    for (uint32_t k = 0; k < count; ++k) {
        memcpy(arena + spans[k].arena_offset, slot + spans[k].saved_offset, spans[k].bytes);
    }
    ZO_PROFILE_END();
}

/* Cross-entropy of int8 logits, Q5.26 rounded to Q16 (2^-16 nats). */
static int32_t logits_loss(const zo_train_model *m, const int8_t *logits, int32_t label)
{
    ZO_PROFILE_BEGIN(ZO_PROFILE_LOSS);
    const int32_t loss = zo_rdbpot(zo_cross_entropy_q26(m->loss, logits, label), 10);
    ZO_PROFILE_END();
    return loss;
}

/* ... of the logits in the arena */
static int32_t loss_q16(const zo_train_model *m, int32_t label)
{
    return logits_loss(m, (const int8_t *)(model_arena() + m->logits_offset), label);
}

static int32_t clamp_difference(int32_t d, int32_t limit)
{
    return d > limit ? limit : (d < -limit ? -limit : d);
}

/* Delta l = l_q - l, clamped so that N Q of them sum exactly in int32 (docs/training.md). */
static int32_t loss_difference(const zo_train_model *m, int32_t loss, int32_t clean)
{
    return clamp_difference(loss - clean, m->diff_limit); /* both in [0, 2^21) */
}

static void run_layers(int32_t first, int32_t last)
{
    if (first <= last) {
        ZO_PROFILE_BEGIN(ZO_PROFILE_FORWARD);
        model_run_range(first, last);
        ZO_PROFILE_END();
    }
}

#if !ZO_TRAIN_INTEGER_ONLY
/* ---- learning rate ---------------------------------------------------------------------- */

/* sin(y), |y| <= pi/2: Taylor to y^11 by Horner in y^2, float32 at every step. The
 * coefficients are the float32 values of -1/6, 1/120, -1/5040, 1/362880, -1/39916800. */
static float sin_poly(float y)
{
    const float y2 = y * y;
    float acc = -0x1.ae6456p-26f;
    acc = 0x1.71de3ap-19f + y2 * acc;
    acc = -0x1.a01a02p-13f + y2 * acc;
    acc = 0x1.111112p-7f + y2 * acc;
    acc = -0x1.555556p-3f + y2 * acc;
    return y * (1.0f + y2 * acc);
}

float zo_train_learning_rate(const zo_train_model *m, const zo_train_state *s, uint32_t step)
{
    float eta = s->lr;
    if (m->cosine && !s->constant_lr) {
        /* eta (1 + cos(pi t / T)) / 2 = eta (1 - sin((t / T - 1/2) pi)) / 2 */
        const float u = (float)step / (float)s->schedule_steps;
        const float y = (u - 0.5f) * 0x1.921fb6p+1f;
        eta = eta * (0.5f * (1.0f - sin_poly(y)));
    }
    for (uint32_t h = 0; h < s->halvings; ++h) {
        eta *= 0.5f; /* exact */
    }
    return eta;
}

/* ---- update ------------------------------------------------------------------------------ */

/* Half away from zero, exactly: truncate, then compare the exact fractional part with 1/2. */
static int32_t round_half_away(float x)
{
    if (x >= ZO_UPDATE_LIMIT) {
        return (int32_t)ZO_UPDATE_LIMIT;
    }
    if (x <= -ZO_UPDATE_LIMIT) {
        return -(int32_t)ZO_UPDATE_LIMIT;
    }
    int32_t r = (int32_t)x;
    const float frac = x - (float)r;
    if (frac >= 0.5f) {
        ++r;
    } else if (frac <= -0.5f) {
        --r;
    }
    return r;
}

/* coef * inv_s2[c] * (float)g * 2^-16 before rounding, g already saturated to int32 */
static float raw_delta(float coef, float inv_s2, int32_t g)
{
    const float coef_c = coef * inv_s2;
    return (coef_c * (float)g) * 0x1p-16f;
}

static int32_t update_delta(float coef, float inv_s2, int32_t g)
{
    return round_half_away(raw_delta(coef, inv_s2, g));
}

/* Update clipping (docs/training.md): the largest |weight step| of the layer, in LSB. */
static float channel_step(const zo_train_layer *L, float coef, uint32_t c, int32_t g,
                          float largest)
{
    const float d = raw_delta(coef, L->weight_inv_s2[c], g);
    const float a = d < 0.0f ? -d : d;
    return a > largest ? a : largest;
}

static float weight_step(const zo_train_layer *L, float coef, uint32_t j, int32_t g, float largest)
{
    return channel_step(L, coef, (j / L->channel_inner) % L->channels, g, largest);
}

/* When the largest weight step exceeds max_step LSB, the whole update of the layer (weights
 * and biases) is scaled down to it, keeping its direction; max_step 0 turns this off. */
static float clipped_coefficient(const zo_train_model *m, float coef, float largest)
{
    if (m->max_step > 0.0f && largest > m->max_step) {
        return coef * (m->max_step / largest);
    }
    return coef;
}

/* weight j, of output channel c */
static void update_channel_weight(const zo_train_layer *L, float coef, uint32_t j, uint32_t c,
                                  int32_t g)
{
    const int32_t r = update_delta(coef, L->weight_inv_s2[c], g);
    L->weights[j] = sat_s8((int32_t)L->weights[j] - r); /* |r| <= 2^30: no overflow */
}

static void update_weight(const zo_train_layer *L, float coef, uint32_t j, int32_t g)
{
    update_channel_weight(L, coef, j, (j / L->channel_inner) % L->channels, g);
}

static void update_bias(const zo_train_layer *L, float coef, uint32_t c, int32_t g)
{
    const int32_t r = update_delta(coef, L->bias_inv_s2[c], g);
    L->bias[c] = sat_s32((int64_t)L->bias[c] - r);
}

/* The weights' update from their whole int32 gradient g: clipped as a whole (update
 * clipping), then applied. Returns the coefficient used, which the biases share. */
static float update_weights(const zo_train_model *m, const zo_train_layer *L, const int32_t *g,
                            float coef)
{
    float largest = 0.0f;
    for (uint32_t j = 0; j < L->weight_count; ++j) {
        if (g[j] != 0) { /* a zero gradient's step is 0 */
            largest = weight_step(L, coef, j, g[j], largest);
        }
    }
    coef = clipped_coefficient(m, coef, largest);
    for (uint32_t j = 0; j < L->weight_count; ++j) {
        if (g[j] != 0) { /* a zero gradient moves nothing */
            update_weight(L, coef, j, g[j]);
        }
    }
    return coef;
}

#endif /* !ZO_TRAIN_INTEGER_ONLY */

/* CONV_2D's folded bias from the current weights and bias (zo_conv.c): after every change of
 * a CONV layer's parameters, before its kernel runs again. */
static void refold(const zo_train_layer *L)
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
static void advance_saved(const zo_train_model *m, const zo_train_layer *L, uint32_t n)
{
    uint8_t *arena = model_arena();
    restore_spans(L->restart, L->restart_count, arena, saved_slot(m, L, n));
    run_layers(L->restart_op, (int32_t)L->next_op - 1);
}

#if ZO_TRAIN_NODE_GRADIENTS
/* ---- NP: node gradient -> parameter gradient ------------------------------------------- */

#define ZO_GRADIENT_GROUP 4u /* weights whose outer products share one walk (gradient_sums) */

/* [first, last) of the output positions o whose input position o * stride - pad + offset
 * lies in [0, size): offset is the tap's k * dilation. */
static void covered_outputs(int32_t offset, int32_t stride, int32_t pad, int32_t size,
                            int32_t outputs, int32_t *first, int32_t *last)
{
    const int32_t lo = pad - offset; /* o * stride >= lo */
    const int32_t hi = size + pad - offset; /* o * stride < hi */
    int32_t f = lo > 0 ? (lo + stride - 1) / stride : 0;
    int32_t l = hi > 0 ? (hi + stride - 1) / stride : 0;
    *first = f < outputs ? f : outputs;
    *last = l < outputs ? (l > *first ? l : *first) : outputs;
}

/* acc[i] += the sum over `count` positions of gz[i * g_lane] * (x[i] + offset), for the n
 * weights i of a group (n = ZO_GRADIENT_GROUP or 1), gz stepping by g_step and x by x_step
 * from one position to the next. g_lane 0: the group shares the node gradient (a CONV_2D's
 * next input channels, an FC's next input features), whose zeros, the units the activation
 * cuts off, skip the group's multiplies; 1: each weight has its own (a depthwise layer's next
 * channels). Four int64 accumulators (GCC spills some on the M7), exact, so any order of
 * the sum agrees with the simulator. */
static inline void gradient_sums(const int32_t *gz, int32_t g_step, int32_t g_lane,
                                 const int8_t *x, int32_t x_step, int32_t count,
                                 int32_t offset, uint32_t n, int64_t acc[ZO_GRADIENT_GROUP])
{
    int64_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    if (n == ZO_GRADIENT_GROUP) {
        for (int32_t k = 0; k < count; ++k, gz += g_step, x += x_step) {
            if (g_lane == 0 && gz[0] == 0) {
                continue;
            }
            a0 += (int64_t)gz[0] * (x[0] + offset);
            a1 += (int64_t)gz[g_lane] * (x[1] + offset);
            a2 += (int64_t)gz[2 * g_lane] * (x[2] + offset);
            a3 += (int64_t)gz[3 * g_lane] * (x[3] + offset);
        }
    } else {
        for (int32_t k = 0; k < count; ++k, gz += g_step, x += x_step) {
            a0 += (int64_t)gz[0] * (x[0] + offset);
        }
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* Where the outer product is in a layer's weights, walked in storage order (weight_walk_next)
 * rather than decoded from the index: CONV_2D [out_c][k_h][k_w][in_c], depthwise
 * [1][k_h][k_w][out_c], FC [out][in] (o = output feature, ic = input feature). */
typedef struct {
    uint32_t j;                     /* the first weight of the next group */
    int32_t o, kh, kw, ic;          /* its output channel, tap and input channel */
    int32_t oy0, oy1, ox0, ox1;     /* the tap's covered outputs (covered_outputs) */
} weight_walk;

static void walk_tap(const zo_train_layer *L, weight_walk *w)
{
    if (L->kind != ZO_TRAIN_FC) {
        const zo_conv_params *p = L->conv;
        covered_outputs(w->kh * p->dilation_h, p->stride_h, p->pad_top, p->in_h, p->out_h,
                        &w->oy0, &w->oy1);
        covered_outputs(w->kw * p->dilation_w, p->stride_w, p->pad_left, p->in_w, p->out_w,
                        &w->ox0, &w->ox1);
    }
}

static void weight_walk_start(const zo_train_layer *L, weight_walk *w)
{
    w->j = 0;
    w->o = w->kh = w->kw = w->ic = 0;
    walk_tap(L, w);
}

/* The next group of weights: n after the current one (the count weight_gradients returned). */
static void weight_walk_next(const zo_train_layer *L, weight_walk *w, uint32_t n)
{
    w->j += n;
    if (L->kind == ZO_TRAIN_FC) {
        w->ic += (int32_t)n;
        if (w->ic == L->fc->in_features) {
            w->ic = 0;
            ++w->o;
        }
        return;
    }
    const zo_conv_params *p = L->conv;
    int32_t *inner = L->kind == ZO_TRAIN_DEPTHWISE ? &w->o : &w->ic;
    *inner += (int32_t)n;
    if (*inner < (L->kind == ZO_TRAIN_DEPTHWISE ? p->out_c : p->in_c)) {
        return;
    }
    *inner = 0;
    if (++w->kw == p->k_w) {
        w->kw = 0;
        if (++w->kh == p->k_h) {
            w->kh = 0;
            ++w->o; /* CONV_2D: the next filter (a depthwise layer has ended here) */
        }
    }
    walk_tap(L, w);
}

/* The output channel of weight k of the walk's group: the group's own (CONV_2D, FC) or its
 * k-th (depthwise: the group is consecutive channels). */
static inline uint32_t walk_channel(const zo_train_layer *L, const weight_walk *w, uint32_t k)
{
    return (uint32_t)w->o + (L->kind == ZO_TRAIN_DEPTHWISE ? k : 0u);
}

/* The convolution / FC shaped outer product of the node gradient gz with the layer input a
 * (zero point removed) for the walk's weight and, in a group (gradient_sums), the next
 * weights of its row: the same output channel and tap (CONV_2D: the next input channels;
 * depthwise with depth multiplier 1: the next channels) or the same output feature (FC).
 * Only the output positions whose tap falls inside the input are visited. Writes g[0..n),
 * returns n (1 or ZO_GRADIENT_GROUP). */
static uint32_t weight_gradients(const zo_train_layer *L, const int32_t *gz, const int8_t *a,
                                 const weight_walk *w, int64_t g[ZO_GRADIENT_GROUP])
{
    g[0] = g[1] = g[2] = g[3] = 0;
    if (L->kind == ZO_TRAIN_FC) {
        const zo_fc_params *p = L->fc;
        const uint32_t n = w->ic + (int32_t)ZO_GRADIENT_GROUP <= p->in_features
                           ? ZO_GRADIENT_GROUP : 1u;
        gradient_sums(gz + w->o, p->out_features, 0, a + w->ic, p->in_features, p->rows,
                      p->input_offset, n, g);
        return n;
    }
    const zo_conv_params *p = L->conv;
    const int depthwise = L->kind == ZO_TRAIN_DEPTHWISE;
    const int32_t ic = depthwise ? w->o / p->depth_multiplier : w->ic;
    const uint32_t n = depthwise ? (p->depth_multiplier == 1
                                    && w->o + (int32_t)ZO_GRADIENT_GROUP <= p->out_c
                                    ? ZO_GRADIENT_GROUP : 1u)
                                 : (ic + (int32_t)ZO_GRADIENT_GROUP <= p->in_c
                                    ? ZO_GRADIENT_GROUP : 1u);
    const int32_t x_step = p->stride_w * p->in_c, count = w->ox1 - w->ox0;
    for (int32_t oy = w->oy0; oy < w->oy1; ++oy) {
        const int32_t iy = oy * p->stride_h - p->pad_top + w->kh * p->dilation_h;
        const int32_t ix = w->ox0 * p->stride_w - p->pad_left + w->kw * p->dilation_w;
        const int32_t *gp = gz + (oy * p->out_w + w->ox0) * p->out_c + w->o;
        const int8_t *x = a + (iy * p->in_w + ix) * p->in_c + ic;
        if (depthwise) { /* literal lanes: each call specialises gradient_sums */
            gradient_sums(gp, p->out_c, 1, x, x_step, count, p->input_offset, n, g);
        } else {
            gradient_sums(gp, p->out_c, 0, x, x_step, count, p->input_offset, n, g);
        }
    }
    return n;
}

static int64_t bias_gradient(const zo_train_layer *L, const int32_t *gz, uint32_t c)
{
    int64_t acc = 0;
    for (uint32_t k = c; k < L->output_count; k += L->channels) {
        acc += gz[k];
    }
    return acc;
}

/* BP gradients are Q24 (zo_backprop.c): shift 8 rounds them to NP's Q16, half away from
 * zero as RoundingDivideByPOT; NP's own are Q16 already (shift 0). */
static int32_t parameter_gradient(int64_t g, int shift)
{
    if (shift == 0) {
        return sat_s32(g);
    }
    const int64_t mask = ((int64_t)1 << shift) - 1;
    const int64_t remainder = g & mask;
    const int64_t threshold = (mask >> 1) + (g < 0 ? 1 : 0);
    return sat_s32((g >> shift) + (remainder > threshold ? 1 : 0));
}

/* N > 1: one sample's parameter gradient added into acc (d_w int32, saturating) */
static void accumulate_node_gradient(const zo_train_layer *L, const int32_t *gz,
                                     const int8_t *a, int shift, int32_t *acc)
{
    ZO_PROFILE_BEGIN(ZO_PROFILE_UPDATE);
    weight_walk w;
    for (weight_walk_start(L, &w); w.j < L->weight_count;) {
        int64_t g[ZO_GRADIENT_GROUP];
        const uint32_t count = weight_gradients(L, gz, a, &w, g);
        for (uint32_t k = 0; k < count; ++k) {
            acc[w.j + k] = sat_s32((int64_t)acc[w.j + k] + parameter_gradient(g[k], shift));
        }
        weight_walk_next(L, &w, count);
    }
    for (uint32_t c = 0; L->bias && c < L->bias_count; ++c) {
        acc[L->weight_count + c] = sat_s32((int64_t)acc[L->weight_count + c]
                                           + parameter_gradient(bias_gradient(L, gz, c), shift));
    }
    ZO_PROFILE_END();
}

#endif /* ZO_TRAIN_NODE_GRADIENTS */

#if !ZO_TRAIN_INTEGER_ONLY

/* The layer's own kernel on one input with the given parameters (its geometry, or a
 * shifted copy): what model.c computes for it, with its current SRAM weights. */
static void run_layer_kernel(const zo_train_layer *L, const zo_conv_params *conv,
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
static void perturb_weights(const zo_train_layer *L, const int8_t *backup,
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
    restore_spans(L->restart, L->restart_count, model_arena(), saved_slot(m, L, n));
    perturb_weights(L, backup, p, sign);
    refold(L);
    run_layers(L->restart_op, m->logits_op);
    const int32_t loss = loss_q16(m, m->labels[n]);
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

#define ZO_SIDES (ZO_TRAIN_TWO_SIDED ? 2u : 1u)

/* Forward f of a query group is query f / sides at sign + (f even or one-sided) or -. */
static int32_t forward_sign(uint32_t f)
{
    return (ZO_TRAIN_TWO_SIDED && (f & 1u)) ? -1 : 1;
}

/* Copies of sample n's saved tensors into every slot of the query arena. */
static void restore_batch(const zo_train_batch_span *spans, uint32_t count,
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
static void run_batch(int32_t first, int32_t last)
{
    if (first <= last) {
        ZO_PROFILE_BEGIN(ZO_PROFILE_FORWARD);
        model_run_batch_range(first, last);
        ZO_PROFILE_END();
    }
}

static int32_t slot_loss(const zo_train_model *m, uint32_t b, int32_t label)
{
    const uint8_t *logits = model_query_arena_storage + m->batch_logits_offset;
    return logits_loss(m, (const int8_t *)(logits + b * (uint32_t)m->classes), label);
}

/* The loss difference a finished forward f contributes (two-sided: at its minus side, from
 * the plus side's loss kept in *plus); 0 and *done = 0 while a query is unfinished. */
static int32_t forward_difference(const zo_train_model *m, uint32_t f, int32_t loss,
                                  int32_t clean, int32_t *plus, int *done)
{
    if (ZO_TRAIN_TWO_SIDED && forward_sign(f) > 0) {
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
        restore_batch(L->batch_restart, L->batch_restart_count, saved_slot(m, L, n));
        for (uint32_t b = 0; b < ZO_TRAIN_QUERY_BATCH; ++b) {
            if (forward_sign(f0 + b) > 0) {
                minus = stream; /* -z: the same draws again */
                perturb_weights(L, backup, &stream, 1);
            } else {
                perturb_weights(L, backup, &minus, -1);
            }
            refold(L);
            run_layer_kernel(L, L->conv, L->fc, input,
                             (int8_t *)(qa + L->batch_output_offset + b * L->output_count));
            ZO_PROFILE_BEGIN(ZO_PROFILE_RESTORE);
            memcpy(L->weights, backup, L->weight_count);
            ZO_PROFILE_END();
        }
        run_batch((int32_t)L->op + 1, m->logits_op);
        for (uint32_t b = 0; b < ZO_TRAIN_QUERY_BATCH; ++b) {
            const uint32_t f = f0 + b;
            int done;
            const int32_t d = forward_difference(m, f, slot_loss(m, b, m->labels[n]),
                                                 m->clean_q16[n], &plus, &done);
            if (done) {
                m->query_sums[f / ZO_SIDES] += d;
            }
        }
    }
}
#endif

/* g_j = sum_q D_q xi_qj over the layer's `count` perturbations of stream `seed`, replayed. */
static void replay_gradient(const zo_train_layer *L, uint32_t seed, const int32_t *sums,
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
static void wp_gradient(const zo_train_model *m, const zo_train_layer *L, uint32_t seed)
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
    refold(L);
    replay_gradient(L, seed, m->query_sums, m->queries, g);
}

/* The end of the estimate of WP layers[first..last] (a restart group; first == last unless
 * the build recomputes): the saved activations advanced to the next layer with the old
 * weights, then each layer's update, in forward order. */
static void finish_wp_group(const zo_train_model *m, uint32_t first, uint32_t last, float eta)
{
    const zo_train_layer *L = &m->layers[last];
    if (L->next_op != L->op) {
        for (uint32_t n = 0; n < m->batch; ++n) {
            advance_saved(m, L, n);
            save_spans(L->next_restart, L->next_restart_count, model_arena(),
                       saved_slot(m, L + 1, n));
        }
    }
    for (uint32_t i = first; i <= last; ++i) {
        const zo_train_layer *W = &m->layers[i];
        ZO_PROFILE_BEGIN(ZO_PROFILE_UPDATE);
        (void)update_weights(m, W, layer_gradient(m, W), (eta * W->gscale) * m->inv_nq);
        ZO_PROFILE_END();
        refold(W);
    }
}

#if ZO_TRAIN_SPLIT
/* ---- --estimator split: FedSPZO's split perturbation (docs/training.md) ---------------- */

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
        perturb_weights(&m->layers[i], backup, &streams[i], sign);
        refold(&m->layers[i]);
    }
}

/* Block 2's forward from the cutoff inputs saved in `slot`: the loss of the sample. */
static int32_t block2_loss(const zo_train_model *m, const uint8_t *slot, int32_t label)
{
    const zo_train_layer *cut = &m->layers[m->split];
    restore_spans(cut->restart, cut->restart_count, model_arena(), slot);
    run_layers((int32_t)cut->op, m->logits_op);
    return loss_q16(m, label);
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
            restore_spans(first->restart, first->restart_count, arena, saved_slot(m, first, n));
            perturb_block(m, 0, split, side ? copy : stream, side ? -1 : 1);
            run_layers((int32_t)first->op, (int32_t)cut->op - 1);
            save_spans(cut->restart, cut->restart_count, arena, cut_slot);
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
static void estimate_split(const zo_train_model *m, const zo_train_state *s, uint32_t t,
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
            refold(&m->layers[i]);
        }
        ZO_PROFILE_END();
    }
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        const zo_train_layer *L = &m->layers[i];
        const int block1 = i < m->split;
        replay_gradient(L, zo_step_seed(s->seed, t, L->seed_index),
                        block1 ? m->query_sums : m->query_sums + m->queries,
                        block1 ? m->queries : p2, m->gradient);
        ZO_PROFILE_BEGIN(ZO_PROFILE_UPDATE);
        (void)update_weights(m, L, m->gradient, (eta * L->gscale) * m->inv_nq);
        ZO_PROFILE_END();
        refold(L);
    }
}
#endif /* ZO_TRAIN_SPLIT */

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
    run_layer_kernel(L, L->conv_shifted ? &L->conv_shifted[k] : NULL,
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
    restore_spans(L->restart, L->restart_count, model_arena(), saved_slot(m, L, n));
    {
        ZO_PROFILE_BEGIN(ZO_PROFILE_PERTURB);
        for (uint32_t k = 0; k < L->output_count; ++k) {
            z[k] = shifted[ZO_NP_SHIFT(sign * zo_perturb_next(p)) * L->output_count + k];
        }
        ZO_PROFILE_END();
    }
    run_layers(L->op + 1, m->logits_op);
    return loss_q16(m, m->labels[n]);
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
        restore_batch(L->batch_restart, L->batch_restart_count, saved_slot(m, L, n));
        ZO_PROFILE_BEGIN(ZO_PROFILE_PERTURB);
        for (uint32_t b = 0; b < ZO_TRAIN_QUERY_BATCH; ++b) {
            int8_t *z = (int8_t *)(model_query_arena_storage + L->batch_output_offset
                                   + b * L->output_count);
            const int32_t sign = forward_sign(f0 + b);
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
        run_batch((int32_t)L->op + 1, m->logits_op);
        for (uint32_t b = 0; b < ZO_TRAIN_QUERY_BATCH; ++b) {
            int done;
            const int32_t d = forward_difference(m, f0 + b, slot_loss(m, b, m->labels[n]),
                                                 m->clean_q16[n], &plus, &done);
            if (done) {
                accumulate_query(L, gz, up, down, &replay, d);
            }
        }
    }
#endif
}

/* An upper bound of the layer's largest weight step (weight_step) from the node gradient
 * alone, O(d_a): weight j of channel c has |g_j| <= X * sum of |gz| over c's positions, X
 * the largest |x + input_offset| an int8 input can give. The bound goes through raw_delta
 * like every weight, and int-to-float conversion and float multiplication are monotone, so
 * its step is >= every weight's. */
static float step_bound(const zo_train_layer *L, const int32_t *gz, int shift, float coef)
{
    const int32_t offset = L->kind == ZO_TRAIN_FC ? L->fc->input_offset : L->conv->input_offset;
    const int64_t x_max = offset > 0 ? 127 + offset : 128 - offset;
    float largest = 0.0f;
    for (uint32_t c = 0; c < L->channels; ++c) {
        int64_t sum = 0;
        for (uint32_t k = c; k < L->output_count; k += L->channels) {
            sum += gz[k] < 0 ? -(int64_t)gz[k] : gz[k];
        }
        const int64_t g = (sum * x_max >> shift) + (shift ? 1 : 0); /* parameter_gradient rounds */
        /* |sat_s32(g_j)| <= 2^31 = (float)sat_s32(g) once g saturates */
        const float step = raw_delta(coef, L->weight_inv_s2[c], sat_s32(g));
        largest = step > largest ? step : largest;
    }
    return largest;
}

/* The update of a layer from one sample's node gradient gz and the layer input a (N = 1).
 * Update clipping needs the largest step before any weight moves, and no buffer of d_w
 * holds the gradient, so the outer product runs twice: first for the largest step, then for
 * the update. The first pass is skipped when step_bound shows no step can exceed max_step
 * (coef then stays as it is): on the digits models 75-97 % of NP updates, whose node
 * gradients are small or mostly zero. */
static void update_from_node_gradient(const zo_train_model *m, const zo_train_layer *L,
                                      const int32_t *gz, const int8_t *a, int shift,
                                      float coef)
{
    ZO_PROFILE_BEGIN(ZO_PROFILE_UPDATE);
    weight_walk w;
    if (m->max_step > 0.0f && step_bound(L, gz, shift, coef) > m->max_step) {
        float largest = 0.0f;
        for (weight_walk_start(L, &w); w.j < L->weight_count;) {
            int64_t g[ZO_GRADIENT_GROUP];
            const uint32_t count = weight_gradients(L, gz, a, &w, g);
            for (uint32_t k = 0; k < count; ++k) {
                const int32_t gk = parameter_gradient(g[k], shift);
                if (gk != 0) { /* a zero gradient's step is 0 */
                    largest = channel_step(L, coef, walk_channel(L, &w, k), gk, largest);
                }
            }
            weight_walk_next(L, &w, count);
        }
        coef = clipped_coefficient(m, coef, largest);
    }
    for (weight_walk_start(L, &w); w.j < L->weight_count;) {
        int64_t g[ZO_GRADIENT_GROUP];
        const uint32_t count = weight_gradients(L, gz, a, &w, g);
        for (uint32_t k = 0; k < count; ++k) {
            const int32_t gk = parameter_gradient(g[k], shift);
            if (gk != 0) { /* a zero gradient moves nothing */
                update_channel_weight(L, coef, w.j + k, walk_channel(L, &w, k), gk);
            }
        }
        weight_walk_next(L, &w, count);
    }
    for (uint32_t c = 0; L->bias && c < L->bias_count; ++c) {
        update_bias(L, coef, c, parameter_gradient(bias_gradient(L, gz, c), shift));
    }
    ZO_PROFILE_END();
    refold(L);
}

/* N > 1: the update from the accumulated gradient (weights, then biases) */
static void update_from_accumulator(const zo_train_model *m, const zo_train_layer *L,
                                    const int32_t *acc, float coef)
{
    ZO_PROFILE_BEGIN(ZO_PROFILE_UPDATE);
    coef = update_weights(m, L, acc, coef);
    for (uint32_t c = 0; L->bias && c < L->bias_count; ++c) {
        update_bias(L, coef, c, acc[L->weight_count + c]);
    }
    ZO_PROFILE_END();
    refold(L);
}

static void estimate_np(const zo_train_model *m, const zo_train_layer *L, uint32_t seed,
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
            advance_saved(m, L, 0);
        }
        update_from_node_gradient(m, L, gz,
                                  (const int8_t *)(saved_slot(m, L, 0) + L->input_saved_offset),
                                  0, coef);
        if (has_next) {
            save_spans(L->next_restart, L->next_restart_count, arena, saved_slot(m, L + 1, 0));
        }
        return;
    }
    memset(acc, 0, (L->weight_count + L->bias_count) * sizeof acc[0]);
    for (uint32_t n = 0; n < m->batch; ++n) {
        node_gradient(m, L, seed, n, gz);
        accumulate_node_gradient(L, gz,
                                 (const int8_t *)(saved_slot(m, L, n) + L->input_saved_offset), 0,
                                 acc);
    }
    if (has_next) {
        for (uint32_t n = 0; n < m->batch; ++n) {
            advance_saved(m, L, n);
            save_spans(L->next_restart, L->next_restart_count, arena, saved_slot(m, L + 1, n));
        }
    }
    update_from_accumulator(m, L, acc, coef);
}

#endif /* !ZO_TRAIN_INTEGER_ONLY */

#if ZO_TRAIN_INTEGER_ONLY
/* ---- ElasticZO-INT8 (--estimator int8): integer only ---------------------------------- */

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

/* B - bits + halvings: the right shift of the rounding (training/int8.py round_to_bits),
 * B the bit length of `largest` = max |G| */
static int32_t rounding_shift(uint32_t largest, int32_t bits, uint32_t halvings)
{
    int32_t length = 0;
    for (uint32_t v = largest; v; v >>= 1) {
        ++length;
    }
    const int32_t shift = length - bits + (int32_t)halvings;
    return shift > 31 ? 31 : shift;
}

static uint32_t magnitude(int32_t g)
{
    return g < 0 ? 0u - (uint32_t)g : (uint32_t)g;
}

/* One weight's update: G's magnitude shifted right with stochastic rounding (up when the
 * dropped bits exceed the low bits of a rounding-stream draw); shift <= 0 keeps G. */
static void apply_rounded(int8_t *w, int32_t g, int32_t shift, uint32_t *rounding)
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

#if ZO_TRAIN_BACKPROP
/* A BP layer's update from its whole int32 gradient g, rounded to `bits` bits; biases keep
 * their values. */
static void round_update(const zo_train_layer *L, const int32_t *g, int32_t bits,
                         uint32_t halvings, uint32_t seed)
{
    ZO_PROFILE_BEGIN(ZO_PROFILE_UPDATE);
    uint32_t largest = 0u;
    for (uint32_t j = 0; j < L->weight_count; ++j) {
        largest = magnitude(g[j]) > largest ? magnitude(g[j]) : largest;
    }
    const int32_t shift = rounding_shift(largest, bits, halvings);
    uint32_t rounding = zo_rounding_seed(seed);
    for (uint32_t j = 0; j < L->weight_count; ++j) {
        apply_rounded(&L->weights[j], g[j], shift, &rounding);
    }
    ZO_PROFILE_END();
    refold(L);
}
#endif

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
static void estimate_int8(const zo_train_model *m, const zo_train_state *s,
                          const zo_train_layer *L, uint32_t seed)
{
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
                restore_spans(L->restart, L->restart_count, arena, saved_slot(m, L, n));
                {
                    ZO_PROFILE_BEGIN(ZO_PROFILE_PERTURB);
                    for (uint32_t j = 0; j < L->weight_count; ++j) {
                        const int32_t z = int8_perturbation(&state, m->r_max, p_q16);
                        L->weights[j] = sat_s8(L->weights[j] + (side ? -z : z));
                    }
                    ZO_PROFILE_END();
                }
                refold(L);
                run_layers(L->restart_op, m->logits_op);
                loss[side] = loss_q16(m, m->labels[n]);
                ZO_PROFILE_BEGIN(ZO_PROFILE_RESTORE);
                memcpy(L->weights, backup, L->weight_count);
                ZO_PROFILE_END();
            }
            m->query_sums[q] += loss_difference(m, loss[0], loss[1]);
        }
    }
    refold(L);
    if (L->next_op != L->op) {
        for (uint32_t n = 0; n < m->batch; ++n) {
            advance_saved(m, L, n);
            save_spans(L->next_restart, L->next_restart_count, arena, saved_slot(m, L + 1, n));
        }
    }
    ZO_PROFILE_BEGIN(ZO_PROFILE_UPDATE);
    uint32_t largest = 0u;
    query_states(m, seed, states);
    for (uint32_t j = 0; j < L->weight_count; ++j) {
        const uint32_t a = magnitude(sign_gradient(m, states, p_q16));
        largest = a > largest ? a : largest;
    }
    const int32_t shift = rounding_shift(largest, m->b_zo, s->halvings);
    uint32_t rounding = zo_rounding_seed(seed);
    query_states(m, seed, states);
    for (uint32_t j = 0; j < L->weight_count; ++j) {
        apply_rounded(&L->weights[j], sign_gradient(m, states, p_q16), shift, &rounding);
    }
    ZO_PROFILE_END();
    refold(L);
}
#endif /* ZO_TRAIN_INTEGER_ONLY */

#if ZO_TRAIN_BACKPROP
/* --bp-layers: layers[first..layer_count) by back-propagation through the head, from each
 * sample's saved activations at the first of them (step t's network: the ZO layers'
 * updates before did not touch them). The node gradients are exact and Q24; the updates
 * are NP's, in forward order, after every sample's backward pass. */
static void estimate_bp(const zo_train_model *m, const zo_train_state *s, uint32_t first)
{
    const zo_bp_head *h = m->head;
    uint8_t *arena = model_arena();
    const uint8_t *region = (const uint8_t *)m->gradient;
    int32_t *acc = m->gradient + h->accumulator_offset;
#if ZO_TRAIN_INTEGER_ONLY
    const int direct = 0; /* the rounding needs the whole gradient (its largest value) */
#else
    const float eta = zo_train_learning_rate(m, s, s->step);
    const int direct = m->batch == 1; /* N = 1: the outer product twice, no accumulator */
#endif
    memset(acc, 0, h->accumulator_words * sizeof acc[0]);
    for (uint32_t n = 0; n < m->batch; ++n) {
        const zo_train_layer *F = &m->layers[first];
        restore_spans(F->restart, F->restart_count, arena, saved_slot(m, F, n));
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
                update_from_node_gradient(m, L, gz, a, ZO_BP_GRADIENT_SHIFT,
                                          (eta * L->gscale) * m->inv_nq);
#endif
            } else {
                accumulate_node_gradient(L, gz, a, ZO_BP_GRADIENT_SHIFT, acc + offset);
                offset += L->weight_count + L->bias_count;
            }
        }
    }
    uint32_t offset = 0;
    for (uint32_t i = first; !direct && i < m->layer_count; ++i) {
        const zo_train_layer *L = &m->layers[i];
#if ZO_TRAIN_INTEGER_ONLY /* weights only, b_bp bits (Alg. 2 line 11) */
        round_update(L, acc + offset, m->b_bp, s->halvings,
                     zo_step_seed(s->seed, s->step, L->seed_index));
#else
        update_from_accumulator(m, L, acc + offset, (eta * L->gscale) * m->inv_nq);
#endif
        offset += L->weight_count + L->bias_count;
    }
}
#endif /* ZO_TRAIN_BACKPROP */

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
        save_spans(first->restart, first->restart_count, arena, saved_slot(m, first, n));
        run_layers(first->op, m->logits_op);
        m->clean_q16[n] = loss_q16(m, label);
        loss_sum += m->clean_q16[n];
    }
    const int32_t mean_loss = (int32_t)(loss_sum / (int64_t)m->batch);
#if ZO_TRAIN_SPLIT
    {
        const uint32_t layer_start = platform_cycles();
        estimate_split(m, s, t, eta);
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
            estimate_bp(m, s, i);
            last = (int32_t)m->layer_count - 1;
        } else
#endif
        {
#if ZO_TRAIN_INTEGER_ONLY
            estimate_int8(m, s, L, seed);
#else
            if (L->mode == ZO_TRAIN_WP) {
                wp_gradient(m, L, seed);
                io_cycles += send_scalars(s, t, L, m->query_sums, m->queries);
                if (ends_group(m, i)) {
                    finish_wp_group(m, group_first, i, eta);
                }
            } else {
                estimate_np(m, L, seed, (eta * L->gscale) * m->inv_nq);
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

/* ---- checkpoints -------------------------------------------------------------------------- */

#define ZO_CKPT_HEADER_BYTES 96u
#define ZO_CKPT_IDENTITY_BYTES 60u /* what must match; the seed and the guard state follow */
static const uint8_t ckpt_magic[8] = {'Z', 'O', 'C', 'K', 'P', 'T', '0', '1'};

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16)
           | ((uint32_t)p[3] << 24);
}

static uint32_t pad4(uint32_t n)
{
    return (n + 3u) & ~3u;
}

uint32_t zo_checkpoint_bytes(const zo_train_model *m)
{
    uint32_t total = ZO_CKPT_HEADER_BYTES + 12u * m->layer_count + 4u;
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        total += pad4(m->layers[i].weight_count) + 4u * m->layers[i].bias_count;
    }
    return total;
}

static void header_bytes(const zo_train_model *m, const zo_train_state *s, uint32_t step,
                         uint8_t *h)
{
    uint32_t lr_bits;
    memcpy(&lr_bits, &s->lr, 4);
    memset(h, 0, ZO_CKPT_HEADER_BYTES);
    memcpy(h, ckpt_magic, sizeof ckpt_magic);
    put_u32(h + 8, 2u);
    put_u32(h + 12, ZO_CKPT_HEADER_BYTES);
    memcpy(h + 16, m->model_sha256, 32);
    put_u32(h + 48, step);
    put_u32(h + 52, m->layer_count);
    put_u32(h + 56, zo_checkpoint_bytes(m));
    put_u32(h + 60, s->seed);
    put_u32(h + 64, lr_bits);
    put_u32(h + 68, s->halvings);
    put_u32(h + 72, s->best_step);
    put_u32(h + 76, s->best_correct);
    put_u32(h + 80, (uint32_t)(uint64_t)s->best_loss);
    put_u32(h + 84, (uint32_t)((uint64_t)s->best_loss >> 32));
    put_u32(h + 88, s->rollbacks);
}

static void table_entry(const zo_train_layer *L, uint8_t *e)
{
    put_u32(e, L->op);
    put_u32(e + 4, L->weight_count);
    put_u32(e + 8, L->bias_count);
}

typedef struct {
    zo_byte_sink sink;
    void *context;
    uint32_t crc;
    int rc;
} ckpt_writer;

static void emit(ckpt_writer *w, const uint8_t *bytes, uint32_t n)
{
    if (w->rc == 0 && n) {
        w->crc = zo_crc32(w->crc, bytes, n);
        w->rc = w->sink(w->context, bytes, n);
    }
}

int zo_checkpoint_save(const zo_train_model *m, const zo_train_state *s, zo_byte_sink sink,
                       void *context)
{
    ckpt_writer w = {sink, context, 0u, 0};
    uint8_t buf[ZO_CKPT_HEADER_BYTES];
    header_bytes(m, s, s->step, buf);
    emit(&w, buf, ZO_CKPT_HEADER_BYTES);
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        table_entry(&m->layers[i], buf);
        emit(&w, buf, 12u);
    }
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        const zo_train_layer *L = &m->layers[i];
        static const uint8_t zeros[4] = {0, 0, 0, 0};
        emit(&w, (const uint8_t *)L->weights, L->weight_count);
        emit(&w, zeros, pad4(L->weight_count) - L->weight_count);
        for (uint32_t c = 0; c < L->bias_count; ++c) {
            put_u32(buf, (uint32_t)L->bias[c]);
            emit(&w, buf, 4u);
        }
    }
    put_u32(buf, w.crc);
    if (w.rc == 0) {
        w.rc = sink(context, buf, 4u);
    }
    return w.rc ? ZO_TRAIN_ERR_IO : ZO_TRAIN_OK;
}

/* Pass 1 of a load: header and layer table match this model, CRC over everything. */
static int verify_checkpoint(const zo_train_model *m, const zo_train_state *s,
                             zo_byte_source source, void *context, uint8_t *h)
{
    uint8_t expect[ZO_CKPT_HEADER_BYTES];
    if (source(context, h, ZO_CKPT_HEADER_BYTES) != 0) {
        return ZO_TRAIN_ERR_IO;
    }
    header_bytes(m, s, get_u32(h + 48), expect);
    /* the run's seed and the guard state are the checkpoint's own, not enforced */
    if (memcmp(h, expect, ZO_CKPT_IDENTITY_BYTES) != 0 || get_u32(h + 92) != 0u) {
        return ZO_TRAIN_ERR_CHECKPOINT;
    }
    uint32_t crc = zo_crc32(0u, h, ZO_CKPT_HEADER_BYTES);
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        uint8_t e[12], want[12];
        table_entry(&m->layers[i], want);
        if (source(context, e, 12u) != 0) {
            return ZO_TRAIN_ERR_IO;
        }
        if (memcmp(e, want, 12u) != 0) {
            return ZO_TRAIN_ERR_CHECKPOINT;
        }
        crc = zo_crc32(crc, e, 12u);
    }
    uint32_t remaining = zo_checkpoint_bytes(m) - ZO_CKPT_HEADER_BYTES - 12u * m->layer_count - 4u;
    while (remaining) {
        uint8_t chunk[64];
        const uint32_t n = remaining < sizeof chunk ? remaining : (uint32_t)sizeof chunk;
        if (source(context, chunk, n) != 0) {
            return ZO_TRAIN_ERR_IO;
        }
        crc = zo_crc32(crc, chunk, n);
        remaining -= n;
    }
    uint8_t tail[4];
    if (source(context, tail, 4u) != 0) {
        return ZO_TRAIN_ERR_IO;
    }
    if (get_u32(tail) != crc) {
        return ZO_TRAIN_ERR_CRC;
    }
    return ZO_TRAIN_OK;
}

/* The layers' parameters, after the header and the layer table. */
static int read_parameters(const zo_train_model *m, zo_byte_source source, void *context)
{
    uint8_t skip[4];
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        const zo_train_layer *L = &m->layers[i];
        if (source(context, (uint8_t *)L->weights, L->weight_count) != 0
            || source(context, skip, pad4(L->weight_count) - L->weight_count) != 0) {
            return ZO_TRAIN_ERR_IO;
        }
        for (uint32_t c = 0; c < L->bias_count; ++c) {
            uint8_t b[4];
            if (source(context, b, 4u) != 0) {
                return ZO_TRAIN_ERR_IO;
            }
            L->bias[c] = (int32_t)get_u32(b);
        }
    }
    return ZO_TRAIN_OK;
}

int zo_checkpoint_load(const zo_train_model *m, zo_train_state *s, zo_byte_source source,
                       void (*rewind)(void *context), void *context)
{
    uint8_t h[ZO_CKPT_HEADER_BYTES];
    const int rc = verify_checkpoint(m, s, source, context, h);
    if (rc != ZO_TRAIN_OK) {
        return rc;
    }
    rewind(context);
    uint8_t skip[ZO_CKPT_HEADER_BYTES];
    if (source(context, skip, ZO_CKPT_HEADER_BYTES) != 0) {
        return ZO_TRAIN_ERR_IO;
    }
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        if (source(context, skip, 12u) != 0) {
            return ZO_TRAIN_ERR_IO;
        }
    }
    const int read = read_parameters(m, source, context);
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        refold(&m->layers[i]); /* also after a failed read: the folds match what is there */
    }
    if (read != ZO_TRAIN_OK) {
        return read;
    }
    s->step = get_u32(h + 48);
    s->seed = get_u32(h + 60);
    memcpy(&s->lr, h + 64, 4);
    s->halvings = get_u32(h + 68);
    s->best_step = get_u32(h + 72);
    s->best_correct = get_u32(h + 76);
    s->best_loss = (int64_t)((uint64_t)get_u32(h + 80) | ((uint64_t)get_u32(h + 84) << 32));
    s->rollbacks = get_u32(h + 88);
    return ZO_TRAIN_OK;
}
