/*
 * The inner product FULLY_CONNECTED rows and the reference CONV_2D taps reduce to:
 *
 *     sum_i (x[i] + x_offset) * w[i]        (int32; exact, so any evaluation order agrees)
 *
 * The fast path takes four int8 pairs at a time: SXTB16 (bytes 0/2 and, rotated, 1/3
 * sign-extended to halfwords), SADD16 (the offset added to both halfwords) and SMLAD (two
 * 16x16 products added to the accumulator). Every partial sum is an exact integer, so it is
 * bit-exact with the plain loop, which -DZO_PORTABLE_KERNELS selects.
 */
#ifndef ZO_DOT_H
#define ZO_DOT_H

#include <stdint.h>

#include "zo_simd.h"

static inline int32_t zo_dot_s8(const int8_t *x, const int8_t *w, int32_t n, int32_t x_offset,
                                int32_t acc)
{
    int32_t i = 0;
#if ZO_FAST_KERNELS
    const uint32_t offset2 = zo_dup16(x_offset); /* |x + offset| < 2^15 */
    for (; i + 4 <= n; i += 4) {
        const uint32_t xv = zo_read4(x + i), wv = zo_read4(w + i);
        acc = zo_smlad(zo_sadd16(zo_sxtb16(xv), offset2), zo_sxtb16(wv), acc);
        acc = zo_smlad(zo_sadd16(zo_sxtb16_ror8(xv), offset2), zo_sxtb16_ror8(wv), acc);
    }
#endif
    for (; i < n; ++i) {
        acc += (x[i] + x_offset) * w[i];
    }
    return acc;
}

#endif /* ZO_DOT_H */
