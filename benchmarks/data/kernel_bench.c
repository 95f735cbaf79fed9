/* One call of a fast convolution kernel on random data, for benchmarks/kernel_profile.py:
 * built for the QEMU board, it runs the kernel once and exits, so an instruction trace of the
 * run is the kernel's (plus this file's setup, reported as `main`). The geometry is set with
 * -D: KB_DEPTHWISE (default) or KB_1X1, KB_H x KB_W x KB_C input, KB_K x KB_K filter, KB_STRIDE,
 * KB_PAD, KB_FORM (0: activation range int8's own, 1: a fused ReLU's narrower range). */
#include <stdint.h>

#include "platform.h"
#include "zo_conv.c"
#include "zo_depthwise.c"
#include "zo_depthwise_direct.c"
#include "zo_prng.h"

#ifndef KB_H
#define KB_H 25
#endif
#ifndef KB_W
#define KB_W 5
#endif
#ifndef KB_C
#define KB_C 64
#endif
#ifndef KB_K
#ifdef KB_1X1
#define KB_K 1
#else
#define KB_K 3
#endif
#endif
#ifndef KB_STRIDE
#define KB_STRIDE 1
#endif
#ifndef KB_PAD
#define KB_PAD ((KB_K - 1) / 2)
#endif
#ifndef KB_FORM
#define KB_FORM 0
#endif

#define KB_OUT_H ((KB_H + 2 * KB_PAD - KB_K) / KB_STRIDE + 1)
#define KB_OUT_W ((KB_W + 2 * KB_PAD - KB_K) / KB_STRIDE + 1)

static int8_t input[KB_H * KB_W * KB_C], output[KB_OUT_H * KB_OUT_W * KB_C];
#ifdef KB_1X1
static int8_t weights[KB_C * KB_C]; /* [out_c][in_c] */
#else
static int8_t weights[KB_K * KB_K * KB_C]; /* [k_h][k_w][channels] */
#endif
static int32_t bias[KB_C], multiplier[KB_C], shift[KB_C];
static uint8_t scratch[2 * 4 * KB_C + 8];
static uint32_t state = 2463534242u;

static uint32_t next(void) /* the training engine's generator: any stream will do */
{
    return zo_xorshift32(&state);
}

int main(void)
{
    for (uint32_t i = 0; i < sizeof input; ++i) {
        input[i] = (int8_t)next();
    }
    for (uint32_t i = 0; i < sizeof weights; ++i) {
        weights[i] = (int8_t)next();
    }
    for (int i = 0; i < KB_C; ++i) {
        bias[i] = (int32_t)(next() % 2000u) - 1000;
        multiplier[i] = 1073741824 + (int32_t)(next() % 1073741824u); /* [2^30, 2^31) */
        shift[i] = -7;
    }
    zo_conv_params p = {0};
    p.batches = 1;
    p.in_h = KB_H, p.in_w = KB_W, p.in_c = KB_C;
    p.out_h = KB_OUT_H, p.out_w = KB_OUT_W, p.out_c = KB_C;
    p.k_h = KB_K, p.k_w = KB_K;
    p.stride_h = KB_STRIDE, p.stride_w = KB_STRIDE;
    p.dilation_h = 1, p.dilation_w = 1;
    p.pad_top = KB_PAD, p.pad_left = KB_PAD;
    p.depth_multiplier = 1;
    p.input_offset = 128, p.output_offset = -128;
    p.act_min = -128, p.act_max = KB_FORM ? 100 : 127;
    p.multiplier = multiplier, p.shift = shift, p.right_shift_only = 1;
    p.scratch = (int8_t *)scratch + 1; /* any alignment: the kernels align it */
#ifdef KB_1X1
    zo_conv2d_1x1_s8(&p, input, weights, bias, output);
#else
    zo_depthwise_conv2d_c4_s8(&p, input, weights, bias, output);
#endif
    platform_exit(output[0] & 0); /* 0; reads the output so the call is kept */
    return 0;
}
