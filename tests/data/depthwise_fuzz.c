/* Random geometries: zo_depthwise_conv2d_c4_s8 (the fast kernel) against
 * zo_depthwise_conv2d_s8 (the reference) on the same inputs, for tests/test_fast_kernels.py.
 *
 * Filters 1x1 to 8x8 (8x8 has more taps than the interior path keeps: every pixel takes the
 * border path), strides 1-3, dilations 1-2, any padding, 1-13 channels (the interior path
 * does blocks of four, the reference the rest), one or two images, with and without bias,
 * every shift negative or not (the two requantizations), and the activation range clipped.
 * Built natively (DSP instructions emulated in C, under ASan/UBSan) it prints one line and
 * returns the mismatch count; built for QEMU (-DZO_FUZZ_QEMU, with the board's platform)
 * the exit status is 0 when every output byte agreed, 1 otherwise, so the hand-written ARM
 * assembly of the 3x3 interior runs too.
 */
#include <stdint.h>

#include "zo_depthwise.c"

#ifdef ZO_FUZZ_QEMU
#include "platform.h"
#else
#include <stdio.h>
#endif

#define MAX_SIDE 10
#define MAX_CHANNELS 13
#define MAX_K 8
#define MAX_OUT_SIDE (MAX_SIDE + 2 * 14) /* padding up to the dilated span - 1 each side */
#ifndef GEOMETRIES
#define GEOMETRIES 600
#endif

static int8_t input[2 * MAX_SIDE * MAX_SIDE * MAX_CHANNELS];
static int8_t weights[MAX_K * MAX_K * MAX_CHANNELS];
static int32_t bias[MAX_CHANNELS], multiplier[MAX_CHANNELS], shift[MAX_CHANNELS];
static int8_t fast[2 * MAX_OUT_SIDE * MAX_OUT_SIDE * MAX_CHANNELS];
static int8_t reference[2 * MAX_OUT_SIDE * MAX_OUT_SIDE * MAX_CHANNELS];

static uint32_t state = 2463534242u;

static uint32_t next(void)
{
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    return state;
}

static int32_t uniform(int32_t lo, int32_t hi) /* [lo, hi] */
{
    return lo + (int32_t)(next() % (uint32_t)(hi - lo + 1));
}

/* One random layer; 0 when its output shape is empty (drawn again). */
static int draw(zo_conv_params *p, int *with_bias)
{
    static const int32_t sizes[] = {1, 2, 3, 3, 3, 4, 5, 5, 7, 8};
    p->batches = uniform(1, 2);
    p->in_h = uniform(1, MAX_SIDE);
    p->in_w = uniform(1, MAX_SIDE);
    p->in_c = p->out_c = uniform(1, MAX_CHANNELS);
    p->k_h = sizes[next() % 10u];
    p->k_w = next() % 4u == 0 ? sizes[next() % 10u] : p->k_h;
    p->stride_h = uniform(1, 3);
    p->stride_w = next() % 2u ? p->stride_h : uniform(1, 3);
    p->dilation_h = uniform(1, 2);
    p->dilation_w = next() % 2u ? p->dilation_h : uniform(1, 2);
    const int32_t span_h = (p->k_h - 1) * p->dilation_h + 1;
    const int32_t span_w = (p->k_w - 1) * p->dilation_w + 1;
    p->pad_top = uniform(0, span_h - 1);
    p->pad_left = uniform(0, span_w - 1);
    const int32_t pad_bottom = uniform(0, span_h - 1), pad_right = uniform(0, span_w - 1);
    const int32_t rows = p->in_h + p->pad_top + pad_bottom - span_h;
    const int32_t cols = p->in_w + p->pad_left + pad_right - span_w;
    if (rows < 0 || cols < 0) {
        return 0;
    }
    p->out_h = rows / p->stride_h + 1;
    p->out_w = cols / p->stride_w + 1;
    p->depth_multiplier = 1;
    p->input_offset = uniform(-127, 128);
    p->output_offset = uniform(-128, 127);
    p->act_min = next() % 2u ? -128 : uniform(-128, 0);
    p->act_max = next() % 2u ? 127 : uniform(p->act_min, 127);
    p->right_shift_only = (int32_t)(next() % 2u);
    for (int32_t c = 0; c < p->out_c; ++c) {
        bias[c] = uniform(-40000, 40000);
        /* normalised (>= 2^30) as generated, sometimes smaller (zo_high_mul's two cases) */
        multiplier[c] = (int32_t)(next() % 4u ? 0x40000000u | (next() >> 2) : next() >> 2);
        shift[c] = p->right_shift_only ? uniform(-12, -1) : uniform(-12, 2);
    }
    p->multiplier = multiplier;
    p->shift = shift;
    p->scratch = 0;
    p->row_kernel = 0;
    p->ring_rows = 0;
    *with_bias = (int)(next() % 4u != 0);
    const int32_t n_in = p->batches * p->in_h * p->in_w * p->in_c;
    for (int32_t i = 0; i < n_in; ++i) {
        input[i] = (int8_t)uniform(-128, 127);
    }
    for (int32_t i = 0; i < p->k_h * p->k_w * p->out_c; ++i) {
        weights[i] = (int8_t)uniform(-127, 127);
    }
    return 1;
}

int main(void)
{
#ifdef ZO_FUZZ_QEMU
    platform_init();
#endif
    int32_t mismatches = 0, layers = 0, interior = 0;
    while (layers < GEOMETRIES) {
        zo_conv_params p;
        int with_bias;
        if (!draw(&p, &with_bias)) {
            continue;
        }
        ++layers;
        const int32_t n_out = p.batches * p.out_h * p.out_w * p.out_c;
        for (int32_t i = 0; i < n_out; ++i) { /* every byte must be written */
            fast[i] = (int8_t)0x55;
            reference[i] = (int8_t)0x2A;
        }
        zo_depthwise_conv2d_c4_s8(&p, input, weights, with_bias ? bias : 0, fast);
        zo_depthwise_conv2d_s8(&p, input, weights, with_bias ? bias : 0, reference);
        int32_t bad = 0;
        for (int32_t i = 0; i < n_out; ++i) {
            bad += fast[i] != reference[i];
        }
        mismatches += bad != 0;
        interior += p.out_c >= 4 && p.k_h * p.k_w <= 49 && p.out_h > 2 && p.out_w > 2;
#ifndef ZO_FUZZ_QEMU
        if (bad) {
            printf("mismatch: %dx%d %dx%dx%d k %dx%d stride %d,%d dilation %d,%d pad %d,%d "
                   "batches %d bias %d right_only %d: %d bytes\n",
                   p.out_h, p.out_w, p.in_h, p.in_w, p.in_c, p.k_h, p.k_w, p.stride_h,
                   p.stride_w, p.dilation_h, p.dilation_w, p.pad_top, p.pad_left, p.batches,
                   with_bias, p.right_shift_only, bad);
        }
#endif
    }
#ifdef ZO_FUZZ_QEMU
    platform_exit(mismatches != 0);
#else
    printf("layers %d (with an interior block: %d) mismatches %d\n", layers, interior,
           mismatches);
    return mismatches != 0;
#endif
}
