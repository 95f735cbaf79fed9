/* Random geometries: the fast convolution kernels against the reference on the same inputs,
 * for tests/test_fast_kernels.py:
 *   zo_depthwise_conv2d_c4_s8              against zo_depthwise_conv2d_s8,
 *   zo_conv2d_1x1_s8 / zo_conv2d_im2col_s8  against zo_conv2d_s8.
 *
 * Depthwise: filters 1x1 to 8x8 (8x8 has more taps than the interior path keeps: every pixel
 * takes the border path), strides 1-3, dilations 1-2, any padding, 1-13 channels (the
 * interior path does blocks of four, the reference the rest). CONV_2D: the same geometries
 * with 1-13 input and 1-9 output channels through im2col, and 1x1 stride-1 unpadded layers
 * with 1-40 input channels through the 1x1 kernel (every n % 8 of the matrix products'
 * loops; 1 to 400 pixels, so blocks of four pixels and the one to three left), the scratch sized as the planner sizes it and placed at an odd address. Both: one
 * or two images, with and without bias, every shift negative or not (the two
 * requantizations), normalised multipliers and smaller ones, the activation range clipped.
 * Built natively (DSP instructions emulated in C, under ASan/UBSan) it prints one line and
 * returns the mismatch count; built for QEMU (-DZO_FUZZ_QEMU, with the board's platform)
 * the exit status is 0 when every output byte agreed, 1 otherwise, so the hand-written ARM
 * assembly runs too.
 */
#include <stdint.h>

#include "zo_conv.c"
#include "zo_depthwise.c"
#include "zo_depthwise_direct.c"
#include "zo_shape.c" /* zo_copy_bytes, for zo_conv_in_place_s8 */

#ifdef ZO_FUZZ_QEMU
#include "platform.h"
#else
#include <stdio.h>
#endif

#define MAX_SIDE 10
#define MAX_CHANNELS 13
#define MAX_1X1_CHANNELS 40
#define MAX_K 8
#define MAX_OUT_SIDE (MAX_SIDE + 2 * 14) /* padding up to the dilated span - 1 each side */
#ifndef GEOMETRIES
#define GEOMETRIES 600
#endif

static int8_t input[2 * MAX_SIDE * MAX_SIDE * MAX_1X1_CHANNELS];
static int8_t weights[MAX_K * MAX_K * MAX_CHANNELS * MAX_CHANNELS];
static int32_t bias[MAX_CHANNELS], folded[MAX_CHANNELS];
static int32_t multiplier[MAX_CHANNELS], shift[MAX_CHANNELS];
/* the widened rows (im2col: 2 x 4 x n bytes, 1x1: 4 x 4 x n, + 4 of slack) and im2col's rows
 * (2n), n <= 8 * 8 * 13 */
static uint8_t scratch[1 + 4 * MAX_K * MAX_K * MAX_CHANNELS * 2 + 4 + 2 * MAX_K * MAX_K * MAX_CHANNELS];
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

enum kind { DEPTHWISE, IM2COL, ONE_BY_ONE };

/* One random layer of `kind`; 0 when its output shape is empty (drawn again). */
static int draw(enum kind kind, zo_conv_params *p, int *with_bias)
{
    static const int32_t sizes[] = {1, 2, 3, 3, 3, 4, 5, 5, 7, 8};
    p->batches = uniform(1, 2);
    p->in_h = uniform(1, MAX_SIDE);
    p->in_w = uniform(1, MAX_SIDE);
    p->in_c = uniform(1, kind == ONE_BY_ONE ? MAX_1X1_CHANNELS : MAX_CHANNELS);
    p->out_c = kind == DEPTHWISE ? p->in_c : uniform(1, 9);
    p->k_h = kind == ONE_BY_ONE ? 1 : sizes[next() % 10u];
    p->k_w = kind == ONE_BY_ONE ? 1 : next() % 4u == 0 ? sizes[next() % 10u] : p->k_h;
    p->stride_h = kind == ONE_BY_ONE ? 1 : uniform(1, 3);
    p->stride_w = kind == ONE_BY_ONE || next() % 2u ? p->stride_h : uniform(1, 3);
    p->dilation_h = kind == ONE_BY_ONE ? 1 : uniform(1, 2);
    p->dilation_w = kind == ONE_BY_ONE || next() % 2u ? p->dilation_h : uniform(1, 2);
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
    p->scratch = (int8_t *)scratch + 1; /* any alignment: a ring may end anywhere */
    p->row_kernel = 0;
    p->ring_rows = 0;
    *with_bias = (int)(next() % 4u != 0);
    const int32_t n_in = p->batches * p->in_h * p->in_w * p->in_c;
    for (int32_t i = 0; i < n_in; ++i) {
        input[i] = (int8_t)uniform(-128, 127);
    }
    /* depthwise [k_h][k_w][channels], CONV_2D [out_c][k_h][k_w][in_c] */
    const int32_t taps = p->k_h * p->k_w * (kind == DEPTHWISE ? 1 : p->in_c);
    for (int32_t i = 0; i < taps * p->out_c; ++i) {
        weights[i] = (int8_t)uniform(-127, 127);
    }
    for (int32_t c = 0; c < p->out_c && kind != DEPTHWISE; ++c) { /* zo_conv.c's folded bias */
        int32_t sum = 0;
        for (int32_t i = 0; i < taps; ++i) {
            sum += weights[c * taps + i];
        }
        folded[c] = (int32_t)((uint32_t)(*with_bias ? bias[c] : 0)
                              + (uint32_t)(p->input_offset * sum));
    }
    return 1;
}

int main(void)
{
#ifdef ZO_FUZZ_QEMU
    platform_init();
#endif
    static const char *const names[] = {"depthwise", "im2col", "1x1"};
    int32_t mismatches = 0, layers[3] = {0, 0, 0}, interior = 0;
    for (int kind = DEPTHWISE; kind <= ONE_BY_ONE; ++kind) {
        while (layers[kind] < GEOMETRIES) {
            zo_conv_params p;
            int with_bias;
            if (!draw((enum kind)kind, &p, &with_bias)) {
                continue;
            }
            ++layers[kind];
            const int32_t n_out = p.batches * p.out_h * p.out_w * p.out_c;
            for (int32_t i = 0; i < n_out; ++i) { /* every byte must be written */
                fast[i] = (int8_t)0x55;
                reference[i] = (int8_t)0x2A;
            }
            if (kind == DEPTHWISE) {
                const int32_t *b = with_bias ? bias : 0;
                zo_depthwise_conv2d_c4_s8(&p, input, weights, b, fast);
                zo_depthwise_conv2d_s8(&p, input, weights, b, reference);
                interior += p.out_c >= 4 && p.k_h * p.k_w <= 49 && p.out_h > 2 && p.out_w > 2;
            } else if (kind == IM2COL) {
                zo_conv2d_im2col_s8(&p, input, weights, folded, fast);
                zo_conv2d_s8(&p, input, weights, folded, reference);
            } else {
                p.pad_top = p.pad_left = 0;
                p.out_h = p.in_h;
                p.out_w = p.in_w;
                zo_conv2d_1x1_s8(&p, input, weights, folded, fast);
                zo_conv2d_s8(&p, input, weights, folded, reference);
            }
            const int32_t n_checked = p.batches * p.out_h * p.out_w * p.out_c;
            int32_t bad = 0;
            for (int32_t i = 0; i < n_checked; ++i) {
                bad += fast[i] != reference[i];
            }
            mismatches += bad != 0;
#ifndef ZO_FUZZ_QEMU
            if (bad) {
                printf("mismatch (%s): out %dx%dx%d in %dx%dx%d k %dx%d stride %d,%d "
                       "dilation %d,%d pad %d,%d batches %d bias %d right_only %d: %d bytes\n",
                       names[kind], p.out_h, p.out_w, p.out_c, p.in_h, p.in_w, p.in_c, p.k_h,
                       p.k_w, p.stride_h, p.stride_w, p.dilation_h, p.dilation_w, p.pad_top,
                       p.pad_left, p.batches, with_bias, p.right_shift_only, bad);
            }
#endif
        }
    }
#ifdef ZO_FUZZ_QEMU
    (void)names;
    platform_exit(mismatches != 0);
#else
    printf("layers %d depthwise (with an interior block: %d), %d im2col, %d 1x1; "
           "mismatches %d\n", layers[DEPTHWISE], interior, layers[IM2COL], layers[ONE_BY_ONE],
           mismatches);
    return mismatches != 0;
#endif
}
