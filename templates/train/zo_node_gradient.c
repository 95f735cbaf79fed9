/*
 * Node gradient -> parameter gradient (NP's Eq. 5 chain rule through the layer, and BP's
 * node gradients): weight and bias gradients from a node gradient and the layer input, and
 * the update from them (float builds) or their accumulation over N samples.
 */
#include "zo_train_engine.h"
#include "zo_update_rules.h"

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
void zo_accumulate_node_gradient(const zo_train_layer *L, const int32_t *gz,
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

#if !ZO_TRAIN_INTEGER_ONLY /* NP's update (BP's too in float builds) */
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
void zo_update_from_node_gradient(const zo_train_model *m, const zo_train_layer *L,
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
    zo_refold(L);
}

/* N > 1: the update from the accumulated gradient (weights, then biases) */
void zo_update_from_accumulator(const zo_train_model *m, const zo_train_layer *L,
                                const int32_t *acc, float coef)
{
    ZO_PROFILE_BEGIN(ZO_PROFILE_UPDATE);
    coef = zo_update_weights(m, L, acc, coef);
    for (uint32_t c = 0; L->bias && c < L->bias_count; ++c) {
        update_bias(L, coef, c, acc[L->weight_count + c]);
    }
    ZO_PROFILE_END();
    zo_refold(L);
}
#endif /* !ZO_TRAIN_INTEGER_ONLY */
