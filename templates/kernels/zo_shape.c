/*
 * Data movement: PAD, TRANSPOSE, CONCATENATION, RESIZE_NEAREST_NEIGHBOR, plain copies
 * (zocodegen/reference/shape_ops.py). RESHAPE needs no code: the planner makes its output an
 * alias of its input, or the generator emits zo_copy_bytes when it cannot.
 */
#include "zo_kernels.h"
#include "zo_requant.h"

void zo_pad_s8(const zo_pad_params *p, const int8_t *input, int8_t *output)
{
    int32_t out_shape[4];
    for (int k = 0; k < 4; ++k) {
        out_shape[k] = p->before[k] + p->in_shape[k] + p->after[k];
    }
    for (int32_t i0 = 0; i0 < out_shape[0]; ++i0) {
        const int32_t s0 = i0 - p->before[0];
        for (int32_t i1 = 0; i1 < out_shape[1]; ++i1) {
            const int32_t s1 = i1 - p->before[1];
            for (int32_t i2 = 0; i2 < out_shape[2]; ++i2) {
                const int32_t s2 = i2 - p->before[2];
                const int inside = s0 >= 0 && s0 < p->in_shape[0] && s1 >= 0 && s1 < p->in_shape[1]
                                   && s2 >= 0 && s2 < p->in_shape[2];
                const int8_t *row = input + ((s0 * p->in_shape[1] + s1) * p->in_shape[2] + s2) * p->in_shape[3];
                for (int32_t i3 = 0; i3 < out_shape[3]; ++i3) {
                    const int32_t s3 = i3 - p->before[3];
                    *output++ = (inside && s3 >= 0 && s3 < p->in_shape[3]) ? row[s3] : p->pad_value;
                }
            }
        }
    }
}

void zo_transpose_s8(const zo_transpose_params *p, const int8_t *input, int8_t *output)
{
    const int32_t *shape = p->out_shape;
    const int32_t *st = p->in_strides;
    for (int32_t i0 = 0; i0 < shape[0]; ++i0) {
        for (int32_t i1 = 0; i1 < shape[1]; ++i1) {
            for (int32_t i2 = 0; i2 < shape[2]; ++i2) {
                const int8_t *base = input + i0 * st[0] + i1 * st[1] + i2 * st[2];
                for (int32_t i3 = 0; i3 < shape[3]; ++i3) {
                    *output++ = base[i3 * st[3]];
                }
            }
        }
    }
}

void zo_concat_part_s8(const zo_concat_part_params *p, const int8_t *input, int8_t *output)
{
    for (int32_t o = 0; o < p->outer; ++o) {
        const int8_t *src = input + o * p->in_inner;
        int8_t *dst = output + o * p->out_inner + p->out_start;
        for (int32_t i = 0; i < p->in_inner; ++i) {
            int32_t value = src[i];
            if (p->requantize) {
                value = zo_offset_clamp_s8(zo_mbqm(value + p->input_offset, p->multiplier, (int)p->shift),
                                           p->output_offset, -128, 127);
            }
            dst[i] = zo_clamp_s8(value, p->act_min, p->act_max);
        }
    }
}

void zo_resize_nearest_s8(const zo_resize_params *p, const int8_t *input, int8_t *output)
{
    for (int32_t b = 0; b < p->batches; ++b) {
        const int8_t *image = input + b * p->in_h * p->in_w * p->channels;
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            for (int32_t ox = 0; ox < p->out_w; ++ox) {
                const int8_t *pixel = image + (p->row_index[oy] * p->in_w + p->col_index[ox]) * p->channels;
                for (int32_t c = 0; c < p->channels; ++c) {
                    *output++ = pixel[c];
                }
            }
        }
    }
}

void zo_copy_bytes(const zo_copy_params *p, const void *input, void *output)
{
    const uint8_t *src = (const uint8_t *)input;
    uint8_t *dst = (uint8_t *)output;
    for (int32_t i = 0; i < p->bytes; ++i) {
        dst[i] = src[i];
    }
}

void zo_copy_window(const zo_window_params *p, const void *input, void *output)
{
    const zo_copy_params row = {p->row_bytes};
    for (int32_t r = 0; r < p->rows; ++r) {
        zo_copy_bytes(&row, (const uint8_t *)input + r * p->input_stride,
                      (uint8_t *)output + r * p->output_stride);
    }
}
