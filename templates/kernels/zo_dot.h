/*
 * The inner product every CONV_2D tap and FULLY_CONNECTED row reduces to:
 *
 *     sum_i (x[i] + x_offset) * w[i]        (int32; exact, so any evaluation order agrees)
 *
 * Portable C99 everywhere; on cores with the Armv7E-M DSP extension (Cortex-M7) four int8
 * pairs at a time with SXTB16 (sign-extend bytes 0/2 to halfwords), SADD16 (add the offset to
 * both halfwords) and SMLAD (two 16x16 products added to the accumulator). Every partial sum
 * is an exact integer, so the fast path is bit-exact with the portable loop; the QEMU tests
 * run it against the numpy reference. Build with -DZO_PORTABLE_KERNELS to compare.
 */
#ifndef ZO_DOT_H
#define ZO_DOT_H

#include <stdint.h>
#include <string.h>

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP && !defined(ZO_PORTABLE_KERNELS)
#include <arm_acle.h>

/* rotate right by 8: bytes 1/3 into the positions SXTB16 reads (compiles to ROR or folds
 * into SXTB16's rotation) */
static inline uint32_t zo_ror8(uint32_t v)
{
    return (v >> 8) | (v << 24);
}

static inline int32_t zo_dot_s8(const int8_t *x, const int8_t *w, int32_t n, int32_t x_offset,
                                int32_t acc)
{
    /* x_offset in both halfwords: (x + offset) fits 16 bits for int8 x and |offset| <= 255 */
    const int16x2_t offset2 = (int16x2_t)(((uint32_t)(uint16_t)x_offset << 16) | (uint16_t)x_offset);
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        int8x4_t xv, wv;
        memcpy(&xv, x + i, 4); /* one unaligned LDR on the M7 */
        memcpy(&wv, w + i, 4);
        int16x2_t x_even = __sadd16(__sxtb16(xv), offset2);          /* x0, x2 */
        int16x2_t x_odd = __sadd16(__sxtb16(zo_ror8((uint32_t)xv)), offset2); /* x1, x3 */
        int16x2_t w_even = __sxtb16(wv);
        int16x2_t w_odd = __sxtb16(zo_ror8((uint32_t)wv));
        acc = __smlad(x_even, w_even, acc);
        acc = __smlad(x_odd, w_odd, acc);
    }
    for (; i < n; ++i) {
        acc += (x[i] + x_offset) * w[i];
    }
    return acc;
}

#else

static inline int32_t zo_dot_s8(const int8_t *x, const int8_t *w, int32_t n, int32_t x_offset,
                                int32_t acc)
{
    for (int32_t i = 0; i < n; ++i) {
        acc += (x[i] + x_offset) * w[i];
    }
    return acc;
}

#endif

#endif /* ZO_DOT_H */
