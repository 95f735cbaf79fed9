/*
 * zo_update_rules.h - the per-parameter arithmetic of the float update (paper Eq. 8, update
 * clipping; docs/training.md "Update"), shared by the WP update (zo_update.c) and the update
 * from node gradients (zo_node_gradient.c). Static inline: it runs once per weight, and the
 * same float32 operations in the same order either way (-ffp-contract=off).
 */
#ifndef ZO_UPDATE_RULES_H
#define ZO_UPDATE_RULES_H

#include "zo_train_engine.h"

/* Half away from zero, exactly: truncate, then compare the exact fractional part with 1/2. */
static inline int32_t round_half_away(float x)
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
static inline float raw_delta(float coef, float inv_s2, int32_t g)
{
    const float coef_c = coef * inv_s2;
    return (coef_c * (float)g) * 0x1p-16f;
}

static inline int32_t update_delta(float coef, float inv_s2, int32_t g)
{
    return round_half_away(raw_delta(coef, inv_s2, g));
}

/* Update clipping (docs/training.md): the largest |weight step| of the layer, in LSB. */
static inline float channel_step(const zo_train_layer *L, float coef, uint32_t c,
                                  int32_t g, float largest)
{
    const float d = raw_delta(coef, L->weight_inv_s2[c], g);
    const float a = d < 0.0f ? -d : d;
    return a > largest ? a : largest;
}

static inline float weight_step(const zo_train_layer *L, float coef, uint32_t j, int32_t g,
                                 float largest)
{
    return channel_step(L, coef, (j / L->channel_inner) % L->channels, g, largest);
}

/* When the largest weight step exceeds max_step LSB, the whole update of the layer (weights
 * and biases) is scaled down to it, keeping its direction; max_step 0 turns this off. */
static inline float clipped_coefficient(const zo_train_model *m, float coef, float largest)
{
    if (m->max_step > 0.0f && largest > m->max_step) {
        return coef * (m->max_step / largest);
    }
    return coef;
}

/* weight j, of output channel c */
static inline void update_channel_weight(const zo_train_layer *L, float coef, uint32_t j,
                                         uint32_t c, int32_t g)
{
    const int32_t r = update_delta(coef, L->weight_inv_s2[c], g);
    L->weights[j] = sat_s8((int32_t)L->weights[j] - r); /* |r| <= 2^30: no overflow */
}

static inline void update_weight(const zo_train_layer *L, float coef, uint32_t j, int32_t g)
{
    update_channel_weight(L, coef, j, (j / L->channel_inner) % L->channels, g);
}

static inline void update_bias(const zo_train_layer *L, float coef, uint32_t c, int32_t g)
{
    const int32_t r = update_delta(coef, L->bias_inv_s2[c], g);
    L->bias[c] = sat_s32((int64_t)L->bias[c] - r);
}

#endif /* ZO_UPDATE_RULES_H */
