/*
 * The Armv7E-M DSP instructions the fast kernels are written in, as inline functions.
 *
 * On a core with the DSP extension (Cortex-M7) each is one instruction. Elsewhere (the
 * native build on the host) each is emulated in plain C with the instruction's exact
 * semantics, so the fast kernels run natively too, under the sanitizers, and agree with the
 * device bit for bit. Build with -DZO_PORTABLE_KERNELS to use the reference kernels instead
 * (ZO_FAST_KERNELS is then 0).
 *
 * Packed values: int8x4 is four int8 in a word (byte 0 = lowest address); int16x2 is two
 * int16 in a word (bottom half = the lower lane).
 */
#ifndef ZO_SIMD_H
#define ZO_SIMD_H

#include <stdint.h>
#include <string.h>

#if defined(ZO_PORTABLE_KERNELS)
#define ZO_FAST_KERNELS 0
#else
#define ZO_FAST_KERNELS 1
#endif

/* Four bytes from any address (an unaligned LDR on the M7) and back. */
static inline uint32_t zo_read4(const int8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline void zo_write4(int8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#include <arm_acle.h>

/* SXTB16: bytes 0 and 2, sign-extended to the two halfwords. */
static inline uint32_t zo_sxtb16(uint32_t x)
{
    return (uint32_t)__sxtb16((int8x4_t)x);
}

/* SXTB16 ROR #8: bytes 1 and 3 (one instruction; GCC 12 does not fold a separate ROR). */
static inline uint32_t zo_sxtb16_ror8(uint32_t x)
{
    uint32_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x));
    return r;
}

/* SADD16: lane-wise 16-bit addition (wrapping). */
static inline uint32_t zo_sadd16(uint32_t a, uint32_t b)
{
    return (uint32_t)__sadd16((int16x2_t)a, (int16x2_t)b);
}

/* SMLAD: acc + a.lo * b.lo + a.hi * b.hi (wrapping). */
static inline int32_t zo_smlad(uint32_t a, uint32_t b, int32_t acc)
{
    return __smlad((int16x2_t)a, (int16x2_t)b, acc);
}

/* SMLABB / SMLATT: acc + a.lo * b.lo, acc + a.hi * b.hi (wrapping). */
static inline int32_t zo_smlabb(uint32_t a, uint32_t b, int32_t acc)
{
    return __smlabb((int32_t)a, (int32_t)b, acc);
}

static inline int32_t zo_smlatt(uint32_t a, uint32_t b, int32_t acc)
{
    return __smlatt((int32_t)a, (int32_t)b, acc);
}

/* QADD: saturating 32-bit addition. */
static inline int32_t zo_qadd(int32_t a, int32_t b)
{
    return __qadd(a, b);
}

/* SSAT #8: x saturated to [-128, 127]. */
static inline int32_t zo_ssat8(int32_t x)
{
    int32_t r;
    __asm__("ssat %0, #8, %1" : "=r"(r) : "r"(x));
    return r;
}

/* SSAT to int8 of x >> 1 (arithmetic): one instruction, the shift is SSAT's operand shift. */
static inline int32_t zo_ssat8_half(int32_t x)
{
    int32_t r;
    __asm__("ssat %0, #8, %1, asr #1" : "=r"(r) : "r"(x));
    return r;
}

/* SMMULR: the high word of a * b, rounded: (a * b + 2^31) >> 32 (arithmetic). */
static inline int32_t zo_smmulr(int32_t a, int32_t b)
{
    int32_t r;
    __asm__("smmulr %0, %1, %2" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

/* SMMLAR: acc + the rounded high word of a * b, (acc * 2^32 + a * b + 2^31) >> 32, mod 2^32. */
static inline int32_t zo_smmlar(int32_t a, int32_t b, int32_t acc)
{
    int32_t r;
    __asm__("smmlar %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(acc));
    return r;
}

#else /* C emulation with the instructions' semantics */

static inline int32_t zo_lo16(uint32_t x)
{
    return (int32_t)(int16_t)(uint16_t)x;
}

static inline int32_t zo_hi16(uint32_t x)
{
    return (int32_t)(int16_t)(uint16_t)(x >> 16);
}

static inline uint32_t zo_pack16(int32_t lo, int32_t hi)
{
    return (uint32_t)(uint16_t)lo | ((uint32_t)(uint16_t)hi << 16);
}

static inline uint32_t zo_sxtb16(uint32_t x)
{
    return zo_pack16((int8_t)(uint8_t)x, (int8_t)(uint8_t)(x >> 16));
}

static inline uint32_t zo_sxtb16_ror8(uint32_t x)
{
    return zo_pack16((int8_t)(uint8_t)(x >> 8), (int8_t)(uint8_t)(x >> 24));
}

static inline uint32_t zo_sadd16(uint32_t a, uint32_t b)
{
    return zo_pack16(zo_lo16(a) + zo_lo16(b), zo_hi16(a) + zo_hi16(b));
}

static inline int32_t zo_smlad(uint32_t a, uint32_t b, int32_t acc)
{
    return (int32_t)((uint32_t)acc + (uint32_t)(zo_lo16(a) * zo_lo16(b))
                     + (uint32_t)(zo_hi16(a) * zo_hi16(b)));
}

static inline int32_t zo_smlabb(uint32_t a, uint32_t b, int32_t acc)
{
    return (int32_t)((uint32_t)acc + (uint32_t)(zo_lo16(a) * zo_lo16(b)));
}

static inline int32_t zo_smlatt(uint32_t a, uint32_t b, int32_t acc)
{
    return (int32_t)((uint32_t)acc + (uint32_t)(zo_hi16(a) * zo_hi16(b)));
}

static inline int32_t zo_qadd(int32_t a, int32_t b)
{
    const int64_t s = (int64_t)a + b;
    return s > INT32_MAX ? INT32_MAX : (s < INT32_MIN ? INT32_MIN : (int32_t)s);
}

static inline int32_t zo_ssat8(int32_t x)
{
    return x < -128 ? -128 : (x > 127 ? 127 : x);
}

static inline int32_t zo_ssat8_half(int32_t x)
{
    return zo_ssat8(x >> 1);
}

static inline int32_t zo_smmulr(int32_t a, int32_t b)
{
    return (int32_t)(((int64_t)a * b + ((int64_t)1 << 31)) >> 32);
}

/* acc * 2^32 is a multiple of 2^32, so the high word is acc plus SMMULR's, wrapping */
static inline int32_t zo_smmlar(int32_t a, int32_t b, int32_t acc)
{
    return (int32_t)((uint32_t)acc + (uint32_t)zo_smmulr(a, b));
}

#endif

/* An int8 offset in both halfwords, for SADD16 after SXTB16 (x + offset fits 16 bits). */
static inline uint32_t zo_dup16(int32_t v)
{
    return ((uint32_t)(uint16_t)v << 16) | (uint32_t)(uint16_t)v;
}

#endif /* ZO_SIMD_H */
