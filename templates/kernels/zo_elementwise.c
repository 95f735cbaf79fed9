/*
 * ADD and MUL of two int8 tensors with 4-D broadcasting: TFLite reference_integer_ops::Add /
 * Mul (BroadcastAdd4DSlow / BroadcastMul4DSlow) (zocodegen/reference/elementwise.py).
 *
 *   ADD: a_k = MBQM((x_k + offset_k) << left_shift, M_k, e_k); y = clamp(MBQM(a_1 + a_2, M_o, e_o) + zp_o)
 *   MUL: y = clamp(MBQM((x_1 + offset_1) * (x_2 + offset_2), M_o, e_o) + zp_o)
 *
 * Each output element is written after both its inputs are read, so output may alias an
 * input of the same shape (in place).
 *
 * Fast path (the usual case: no broadcasting, both inputs dense like the output): one flat
 * loop over the elements, the layer's constants in registers, and every requantization in
 * zo_mbqm_shifts form with its shifts split once per call (all multipliers are positive),
 * instead of the 4-D walk with three 64-bit divisions per element. -DZO_PORTABLE_KERNELS
 * keeps the 4-D walk only.
 */
#include "zo_kernels.h"
#include "zo_requant.h"
#include "zo_simd.h"

static int32_t add_one(const zo_elementwise_params *p, int32_t x1, int32_t x2)
{
    const int32_t scale = (int32_t)1 << p->left_shift;
    int32_t a1 = zo_mbqm((x1 + p->input1_offset) * scale, p->input1_multiplier, (int)p->input1_shift);
    int32_t a2 = zo_mbqm((x2 + p->input2_offset) * scale, p->input2_multiplier, (int)p->input2_shift);
    return zo_mbqm(a1 + a2, p->output_multiplier, (int)p->output_shift);
}

static int32_t mul_one(const zo_elementwise_params *p, int32_t x1, int32_t x2)
{
    int32_t product = (x1 + p->input1_offset) * (x2 + p->input2_offset);
    return zo_mbqm(product, p->output_multiplier, (int)p->output_shift);
}

/* Walks the output in order; each input advances by its own (possibly zero) strides. */
static void broadcast_4d(const zo_elementwise_params *p, const int8_t *input1,
                         const int8_t *input2, int8_t *output,
                         int32_t (*combine)(const zo_elementwise_params *, int32_t, int32_t))
{
    const int32_t *shape = p->out_shape;
    for (int32_t i0 = 0; i0 < shape[0]; ++i0) {
        for (int32_t i1 = 0; i1 < shape[1]; ++i1) {
            for (int32_t i2 = 0; i2 < shape[2]; ++i2) {
                const int32_t base1 = i0 * p->in1_strides[0] + i1 * p->in1_strides[1] + i2 * p->in1_strides[2];
                const int32_t base2 = i0 * p->in2_strides[0] + i1 * p->in2_strides[1] + i2 * p->in2_strides[2];
                for (int32_t i3 = 0; i3 < shape[3]; ++i3) {
                    int32_t x1 = input1[base1 + i3 * p->in1_strides[3]];
                    int32_t x2 = input2[base2 + i3 * p->in2_strides[3]];
                    *output++ = zo_offset_clamp_s8(combine(p, x1, x2), p->output_offset,
                                                   p->act_min, p->act_max);
                }
            }
        }
    }
}

#if ZO_FAST_KERNELS

/* The element count when both inputs are laid out exactly like the output, else 0. */
static int32_t dense_elements(const zo_elementwise_params *p)
{
    const int32_t *shape = p->out_shape;
    int32_t stride = 1;
    for (int axis = 3; axis >= 0; --axis) {
        if (shape[axis] != 1
            && (p->in1_strides[axis] != stride || p->in2_strides[axis] != stride)) {
            return 0;
        }
        stride *= shape[axis];
    }
    return stride;
}

/* shift > 0: left; the two halves of zo_mbqm_shifts */
static inline int32_t left_of(int32_t shift)
{
    return shift > 0 ? shift : 0;
}

static void add_dense(const zo_elementwise_params *p, const int8_t *input1,
                      const int8_t *input2, int8_t *output, int32_t count)
{
    const int32_t offset1 = p->input1_offset, offset2 = p->input2_offset;
    const int32_t m1 = p->input1_multiplier, m2 = p->input2_multiplier;
    const int32_t m_out = p->output_multiplier, left_shift = p->left_shift;
    const int32_t l1 = left_of(p->input1_shift), r1 = l1 - p->input1_shift;
    const int32_t l2 = left_of(p->input2_shift), r2 = l2 - p->input2_shift;
    const int32_t l_out = left_of(p->output_shift), r_out = l_out - p->output_shift;
    const int32_t out_offset = p->output_offset, lo = p->act_min, hi = p->act_max;
    for (int32_t i = 0; i < count; ++i) {
        const int32_t a1 = zo_mbqm_shifts((input1[i] + offset1) * (1 << left_shift), m1, l1, r1);
        const int32_t a2 = zo_mbqm_shifts((input2[i] + offset2) * (1 << left_shift), m2, l2, r2);
        int32_t y = zo_qadd(zo_mbqm_shifts(a1 + a2, m_out, l_out, r_out), out_offset);
        y = y < lo ? lo : y;
        output[i] = (int8_t)(y > hi ? hi : y);
    }
}

static void mul_dense(const zo_elementwise_params *p, const int8_t *input1,
                      const int8_t *input2, int8_t *output, int32_t count)
{
    const int32_t offset1 = p->input1_offset, offset2 = p->input2_offset;
    const int32_t m_out = p->output_multiplier;
    const int32_t l_out = left_of(p->output_shift), r_out = l_out - p->output_shift;
    const int32_t out_offset = p->output_offset, lo = p->act_min, hi = p->act_max;
    for (int32_t i = 0; i < count; ++i) {
        const int32_t product = (input1[i] + offset1) * (input2[i] + offset2);
        int32_t y = zo_qadd(zo_mbqm_shifts(product, m_out, l_out, r_out), out_offset);
        y = y < lo ? lo : y;
        output[i] = (int8_t)(y > hi ? hi : y);
    }
}

#endif

void zo_add_s8(const zo_elementwise_params *p, const int8_t *input1, const int8_t *input2,
               int8_t *output)
{
#if ZO_FAST_KERNELS
    const int32_t count = dense_elements(p);
    if (count) {
        add_dense(p, input1, input2, output, count);
        return;
    }
#endif
    broadcast_4d(p, input1, input2, output, add_one);
}

void zo_mul_s8(const zo_elementwise_params *p, const int8_t *input1, const int8_t *input2,
               int8_t *output)
{
#if ZO_FAST_KERNELS
    const int32_t count = dense_elements(p);
    if (count) {
        mul_dense(p, input1, input2, output, count);
        return;
    }
#endif
    broadcast_4d(p, input1, input2, output, mul_one);
}
