/*
 * What the two files of the fast DEPTHWISE_CONV_2D kernel share (zo_depthwise.c: blocks of
 * four channels over border runs and the interior; zo_depthwise_direct.c: pixel by pixel on
 * images without interior pixels).
 */
#ifndef ZO_DEPTHWISE_H
#define ZO_DEPTHWISE_H

#include <stdint.h>

#include "zo_kernels.h"

/* zo_depthwise_conv2d_c4_s8 runs zo_depthwise_direct_c4_s8 when at most ZO_DEPTHWISE_DIRECT %
 * of the output pixels are interior pixels (whole window inside the input): 0, when there are
 * none. Measured with benchmarks/kernel_profile.py: a 2x2 output under a 3x3 filter 71.1 k ->
 * 47.1 k instructions, 2x2 under 5x5 123.2 k -> 78.1 k, 4x4 under 5x5 247.3 k -> 229.5 k;
 * with a quarter of the pixels interior the runs are cheaper (4x4 under 3x3: 123.3 k against
 * 131.0 k). tests/test_fast_kernels.py also builds with 100 (every geometry pixel by pixel)
 * and -1 (none). */
#ifndef ZO_DEPTHWISE_DIRECT
#define ZO_DEPTHWISE_DIRECT 0
#endif

/* [first, last) of the taps k with 0 <= origin + k * dilation < size */
static inline void tap_window(int32_t origin, int32_t dilation, int32_t taps, int32_t size,
                              int32_t *first, int32_t *last)
{
    int32_t lo = 0, hi = taps;
    while (lo < hi && origin + lo * dilation < 0) {
        ++lo;
    }
    while (hi > lo && origin + (hi - 1) * dilation >= size) {
        --hi;
    }
    *first = lo;
    *last = hi;
}

/* Depth multiplier 1, channels in blocks of four (the last channels % 4 are the caller's),
 * pixel by pixel (zo_depthwise_direct.c). */
void zo_depthwise_direct_c4_s8(const zo_conv_params *p, const int8_t *input,
                               const int8_t *weights, const int32_t *bias, int8_t *output);

#endif /* ZO_DEPTHWISE_H */
