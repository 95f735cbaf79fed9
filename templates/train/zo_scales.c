/*
 * --scales: a CH layer's per-channel filter scales s_c, trained beside its biases from the
 * same queries (numpy twin: zocodegen/training/scales.py; rules: docs/training.md "Channel
 * scales"). The queries' part is in zo_node_queries.c, the gradient in zo_estimate_ch.c;
 * here the update and the multipliers it implies. Double arithmetic in a fixed order
 * (soft-float on a single-precision FPU, a few hundred cycles a channel per step), IEEE on
 * every target with -ffp-contract=off, so the simulator's numpy float64 gets the same bits.
 */
#include "zo_train_engine.h"

#if ZO_TRAIN_SCALES

#if defined(__ARM_FP) && (__ARM_FP & 8)
/* A double-precision FPU (the H7B3's) is left unused here: libgcc's IEEE routines do the few
 * double operations a step needs on every board alike, so the emulated boards (whose
 * Cortex-M7 model has no double-precision unit) run exactly the silicon's code. */
#pragma GCC target("fpu=fpv5-sp-d16")
#endif

#define SCALE_RATE 8.0 /* 2^SHIFT x STEP: a query moves a node by xi' (h(z) - zp) / 32, and a
                        * scale takes a quarter of the bias rule's step in output LSB */
#define SCALE_A2_FLOOR 1024.0 /* 2^(2 SHIFT) */
#define SCALE_LOWEST 0.25     /* a scale stays within these multiples of the model's */
#define SCALE_HIGHEST 4.0

/* TFLite's QuantizeMultiplier of a positive real: frexp, then the mantissa's 31 bits
 * rounded half away from zero (mantissa x 2^31 and + 0.5 are exact in double). */
static void quantize_multiplier(double real, int32_t *multiplier, int32_t *shift)
{
    int32_t e = 0;
    while (real >= 1.0) {
        real *= 0.5;
        ++e;
    }
    while (real < 0.5) {
        real *= 2.0;
        --e;
    }
    uint32_t q = (uint32_t)(real * 2147483648.0 + 0.5); /* in [2^30, 2^31] */
    if (q == 0x80000000u) {
        q /= 2u;
        ++e;
    }
    if (e < -31) {
        e = 0;
        q = 0u;
    }
    *multiplier = (int32_t)q;
    *shift = e;
}

/* (double)v, correctly rounded, through 32-bit conversions only (libgcc's 64-bit one is
 * compiled for the board's FPU): the high part times 2^32 is exact, the sum rounds once. */
static double u64_to_double(uint64_t v)
{
    return (double)(uint32_t)(v >> 32) * 4294967296.0 + (double)(uint32_t)v;
}

/* The multipliers from the scales, as TFLite's Prepare derives them: s_in x s_c / s_out. */
void zo_scales_rebuild(const zo_train_layer *L)
{
    const zo_train_scales *S = L->scales;
    for (uint32_t c = 0; c < L->channels; ++c) {
        const double real = S->input_scale * (double)S->scale[c] / S->output_scale;
        quantize_multiplier(real, &S->multiplier[c], &S->shift[c]);
    }
}

/* The model's scales and multipliers into the SRAM copies. */
void zo_scales_reset(const zo_train_layer *L)
{
    const zo_train_scales *S = L->scales;
    memcpy(S->scale, S->scale_flash, L->channels * sizeof S->scale[0]);
    memcpy(S->multiplier, S->multiplier_flash, L->channels * sizeof S->multiplier[0]);
    memcpy(S->shift, S->shift_flash, L->channels * sizeof S->shift[0]);
}

/* g: sum of D xi' per channel; squares: sum of (h(z) - zp)^2 over `count` positions and
 * samples. s_c -= s0_c (coef inv_s2[c] 2^-16 M0_c 8) g_c / A_c^2, A_c^2 the mean square (at
 * least 1024), kept within [s0 / 4, 4 s0]; then the multipliers. */
void zo_scales_update(const zo_train_layer *L, float coef, const int32_t *g,
                      const int64_t *squares, uint32_t count)
{
    const zo_train_scales *S = L->scales;
    for (uint32_t c = 0; c < L->channels; ++c) {
        const double s0 = (double)S->scale_flash[c];
        const double m0 = S->input_scale * s0 / S->output_scale;
        const double rate = (double)coef * (double)L->bias_inv_s2[c] * 0x1p-16 * m0
                            * SCALE_RATE;
        double a2 = u64_to_double((uint64_t)squares[c]) / (double)count;
        if (a2 < SCALE_A2_FLOOR) {
            a2 = SCALE_A2_FLOOR;
        }
        double moved = (double)S->scale[c] - s0 * (rate * (double)g[c] / a2);
        if (moved < SCALE_LOWEST * s0) {
            moved = SCALE_LOWEST * s0;
        }
        if (moved > SCALE_HIGHEST * s0) {
            moved = SCALE_HIGHEST * s0;
        }
        S->scale[c] = (float)moved;
    }
    zo_scales_rebuild(L);
}

#endif /* ZO_TRAIN_SCALES */
