/*
 * The learning rate (cosine schedule) and the scaled, clipped float32 update of a layer's
 * weights and bias from its int32 gradient (paper Eq. 8: gradient-norm and quantization-
 * aware scaling; docs/training.md "Update"). Float builds only.
 */
#include "zo_train_engine.h"
#include "zo_update_rules.h"

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
    coef = clipped_coefficient(m, coef, largest);
    for (uint32_t j = 0; j < L->weight_count; ++j) {
        if (g[j] != 0) { /* a zero gradient moves nothing */
            update_weight(L, coef, j, g[j]);
        }
    }
    return coef;
}
