/*
 * XORShift32 perturbations for zeroth-order training (DESIGN.md section 4.3; numpy twin:
 * zocodegen/training/prng.py). The k-th draw of a stream seeded with S is the state after k
 * steps; a Rademacher value comes from the draw's least significant bit (1 -> -1, 0 -> +1).
 * Perturbations are regenerated from the seed, never stored.
 */
#ifndef ZO_PRNG_H
#define ZO_PRNG_H

#include <stdint.h>

static inline uint32_t zo_xorshift32(uint32_t *state)
{
    uint32_t s = *state;
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    *state = s;
    return s;
}

static inline int32_t zo_rademacher(uint32_t *state)
{
    return (zo_xorshift32(state) & 1u) ? -1 : 1;
}

/* murmur3's 32-bit finaliser */
static inline uint32_t zo_fmix32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return h;
}

/* S(t, i): the seed of training step t, trainable layer i; never 0 */
static inline uint32_t zo_step_seed(uint32_t base_seed, uint32_t step, uint32_t layer)
{
    uint32_t h = zo_fmix32(base_seed ^ (step * 0x9E3779B1u) ^ ((layer + 1u) * 0x85EBCA77u));
    return h ? h : 0x6D2B79F5u;
}

/* Sample n's stream inside a layer's stream S (node perturbation, one xi per sample):
 * S for n = 0, else fmix32(S ^ n * 0x27D4EB2F), never 0. */
static inline uint32_t zo_sample_seed(uint32_t seed, uint32_t sample)
{
    if (sample == 0u) {
        return seed;
    }
    uint32_t h = zo_fmix32(seed ^ (sample * 0x27D4EB2Fu));
    return h ? h : 0x6D2B79F5u;
}

/* The stochastic rounding's stream inside a layer's stream S (--estimator int8):
 * fmix32(S ^ 0x5BD1E995), never 0. */
static inline uint32_t zo_rounding_seed(uint32_t seed)
{
    uint32_t h = zo_fmix32(seed ^ 0x5BD1E995u);
    return h ? h : 0x6D2B79F5u;
}

/* Query q's stream inside a layer's stream S (--estimator int8): fmix32(S ^ (q + 1) *
 * 0x2545F491), never 0. */
static inline uint32_t zo_query_seed(uint32_t seed, uint32_t query)
{
    uint32_t h = zo_fmix32(seed ^ ((query + 1u) * 0x2545F491u));
    return h ? h : 0x6D2B79F5u;
}

#endif /* ZO_PRNG_H */
