/*
 * Perturbation streams (PeZO, --perturbation xorshift|pool:N|rotating:n, --distribution
 * rademacher|uniform; numpy twin and every rule: zocodegen/training/perturbation.py,
 * docs/training.md "Perturbation sources"). The source and distribution are fixed at build
 * time (zo_train_config.h), so each build compiles exactly one draw function.
 *
 * A stream is named by a seed S (S(t, i), or a sample's stream inside it) and yields one
 * integer per weight (WP) or node (NP); restarting from the same seed replays it, which is
 * how the gradient is rebuilt without storing the perturbation.
 */
#ifndef ZO_PERTURB_H
#define ZO_PERTURB_H

#include <stdint.h>

#include "zo_prng.h"
#include "zo_requant.h" /* zo_rdbpot */
#include "zo_train_config.h"

#if ZO_PERTURB_SOURCE == ZO_PERTURB_POOL
/* N = ZO_PERTURB_SIZE values drawn at build time from the run's seed (uniform ones already
 * scaled to a Gaussian's norm), in flash: generated src/training.c */
extern const int8_t zo_perturb_pool[ZO_PERTURB_SIZE];
#endif
#if ZO_PERTURB_SOURCE == ZO_PERTURB_ROTATING && ZO_PERTURB_UNIFORM
/* the shift of a cycle whose generator 0 is in state s (PeZO Fig. 2's look-up table) */
extern const int8_t zo_perturb_cycle_shifts[256];
#endif

typedef struct {
#if ZO_PERTURB_SOURCE == ZO_PERTURB_POOL
    uint32_t position; /* next pool entry */
#elif ZO_PERTURB_SOURCE == ZO_PERTURB_ROTATING
    uint8_t state[ZO_PERTURB_SIZE]; /* the n 8-bit LFSRs */
    uint32_t pointer;               /* the generator this cycle starts with */
    uint32_t next;                  /* outputs of this cycle already drawn (n: step) */
    int32_t shift;                  /* uniform: this cycle's scale */
#else
    uint32_t state; /* XORShift32 */
    int32_t shift;  /* uniform: the layer's scale */
#endif
} zo_perturb_stream;

#if ZO_PERTURB_SOURCE == ZO_PERTURB_ROTATING
/* x^8 + x^6 + x^5 + x^4 + 1 in Galois form: every nonzero byte once per 255 steps */
static inline uint32_t zo_lfsr8_step(uint32_t s)
{
    return (s >> 1) ^ ((s & 1u) ? 0xB8u : 0u);
}
#endif

/* The stream named `seed`; `shift` is the layer's uniform scale (XORShift only). */
static inline void zo_perturb_start(zo_perturb_stream *p, uint32_t seed, int32_t shift)
{
#if ZO_PERTURB_SOURCE == ZO_PERTURB_POOL
    (void)shift;
    p->position = seed % ZO_PERTURB_SIZE;
#elif ZO_PERTURB_SOURCE == ZO_PERTURB_ROTATING
    /* generator k starts k (255 / n) states after generator 0, whose state is S mod 255 + 1 */
    uint32_t s = seed % 255u + 1u;
    p->state[0] = (uint8_t)s;
    for (uint32_t k = 1; k < ZO_PERTURB_SIZE; ++k) {
        for (uint32_t i = 0; i < 255u / ZO_PERTURB_SIZE; ++i) {
            s = zo_lfsr8_step(s);
        }
        p->state[k] = (uint8_t)s;
    }
    p->pointer = ZO_PERTURB_SIZE - 1u; /* the first cycle moves it to generator 0 */
    p->next = ZO_PERTURB_SIZE;
    p->shift = shift;
#else
    p->state = seed;
    p->shift = shift;
#endif
}

/* The next perturbation value: +-1 (rademacher) or rdbpot(u, shift) with u uniform on the
 * odd integers -127..127 or (LFSR) on -127..127 (uniform); |value| <= ZO_PERTURB_MAX. */
static inline int32_t zo_perturb_next(zo_perturb_stream *p)
{
#if ZO_PERTURB_SOURCE == ZO_PERTURB_POOL
    const int32_t v = zo_perturb_pool[p->position];
    p->position = p->position + 1u == ZO_PERTURB_SIZE ? 0u : p->position + 1u;
    return v;
#elif ZO_PERTURB_SOURCE == ZO_PERTURB_ROTATING
    if (p->next == ZO_PERTURB_SIZE) { /* a new cycle: every generator steps, pointer moves */
        for (uint32_t k = 0; k < ZO_PERTURB_SIZE; ++k) {
            p->state[k] = (uint8_t)zo_lfsr8_step(p->state[k]);
        }
        p->pointer = p->pointer + 1u == ZO_PERTURB_SIZE ? 0u : p->pointer + 1u;
        p->next = 0u;
#if ZO_PERTURB_UNIFORM
        p->shift = zo_perturb_cycle_shifts[p->state[0]];
#endif
    }
    uint32_t k = p->pointer + p->next++;
    k = k >= ZO_PERTURB_SIZE ? k - ZO_PERTURB_SIZE : k;
#if ZO_PERTURB_UNIFORM
    return zo_rdbpot((int32_t)p->state[k] - 128, p->shift);
#else
    return (p->state[k] & 1u) ? -1 : 1;
#endif
#elif ZO_PERTURB_UNIFORM
    const uint32_t x = zo_xorshift32(&p->state);
    return zo_rdbpot((int32_t)((x >> 24) & 0xFEu) - 127, p->shift);
#else
    return zo_rademacher(&p->state);
#endif
}

#endif /* ZO_PERTURB_H */
