/*
 * The learning rate (cosine schedule) and the scaled, clipped float32 update of a layer's
 * weights and bias from its int32 gradient (paper Eq. 8: gradient-norm and quantization-
 * aware scaling; docs/training.md "Update"). Float builds only.
 */
#include "zo_train_engine.h"

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
float zo_raw_delta(float coef, float inv_s2, int32_t g)
{
    const float coef_c = coef * inv_s2;
    return (coef_c * (float)g) * 0x1p-16f;
}

static int32_t update_delta(float coef, float inv_s2, int32_t g)
{
    return round_half_away(zo_raw_delta(coef, inv_s2, g));
}

/* Update clipping (docs/training.md): the largest |weight step| of the layer, in LSB. */
float zo_channel_step(const zo_train_layer *L, float coef, uint32_t c, int32_t g,
                      float largest)
{
    const float d = zo_raw_delta(coef, L->weight_inv_s2[c], g);
    const float a = d < 0.0f ? -d : d;
    return a > largest ? a : largest;
}

static float weight_step(const zo_train_layer *L, float coef, uint32_t j, int32_t g, float largest)
{
    return zo_channel_step(L, coef, (j / L->channel_inner) % L->channels, g, largest);
}

/* When the largest weight step exceeds max_step LSB, the whole update of the layer (weights
 * and biases) is scaled down to it, keeping its direction; max_step 0 turns this off. */
float zo_clipped_coefficient(const zo_train_model *m, float coef, float largest)
{
    if (m->max_step > 0.0f && largest > m->max_step) {
        return coef * (m->max_step / largest);
    }
    return coef;
}

/* weight j, of output channel c */
void zo_update_channel_weight(const zo_train_layer *L, float coef, uint32_t j, uint32_t c,
                              int32_t g)
{
    const int32_t r = update_delta(coef, L->weight_inv_s2[c], g);
    L->weights[j] = sat_s8((int32_t)L->weights[j] - r); /* |r| <= 2^30: no overflow */
}

static void update_weight(const zo_train_layer *L, float coef, uint32_t j, int32_t g)
{
    zo_update_channel_weight(L, coef, j, (j / L->channel_inner) % L->channels, g);
}

void zo_update_bias(const zo_train_layer *L, float coef, uint32_t c, int32_t g)
{
    const int32_t r = update_delta(coef, L->bias_inv_s2[c], g);
    L->bias[c] = sat_s32((int64_t)L->bias[c] - r);
}

/* The weights' update from their whole int32 gradient g: clipped as a whole (update
 * clipping), then applied. Returns the coefficient used, which the biases share. */
float zo_update_weights(const zo_train_model *m, const zo_train_layer *L, const int32_t *g,
                        float coef)
{
    float largest = 0.0f;
    for (uint32_t j = 0; j < L->weight_count; ++j) {
        if (g[j] != 0) { /* a zero gradient's step is 0 */
            largest = weight_step(L, coef, j, g[j], largest);
        }
    }
    coef = zo_clipped_coefficient(m, coef, largest);
    for (uint32_t j = 0; j < L->weight_count; ++j) {
        if (g[j] != 0) { /* a zero gradient moves nothing */
            update_weight(L, coef, j, g[j]);
        }
    }
    return coef;
}
