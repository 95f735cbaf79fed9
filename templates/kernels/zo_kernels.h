/*
 * zocodegen portable C99 kernels: int8 inference ops with TFLite reference semantics.
 *
 * Uniform signature (CMSIS-NN style): zo_<op>_<type>(const params *, inputs..., output).
 * Parameter structs are generated as `static const` data next to each layer; weights and
 * biases are passed separately so trainable copies in SRAM can replace the flash ones.
 * Shapes are NHWC with batch 1 folded into the outer loop counts. No globals, no heap, no libm.
 * Kernels marked "in place" accept output == input (the memory planner relies on it).
 */
#ifndef ZO_KERNELS_H
#define ZO_KERNELS_H

#include <stdint.h>

/* ---- CONV_2D (zo_conv.c) / DEPTHWISE_CONV_2D (zo_depthwise.c) ------------------------- */
typedef struct zo_conv_params zo_conv_params;

/* Every convolution kernel has this signature (the training engine keeps the layer's). */
typedef void (*zo_conv_kernel)(const zo_conv_params *p, const int8_t *input,
                               const int8_t *weights, const int32_t *bias, int8_t *output);

struct zo_conv_params {
    int32_t batches;
    int32_t in_h, in_w, in_c;
    int32_t out_h, out_w, out_c;
    int32_t k_h, k_w;
    int32_t stride_h, stride_w;
    int32_t dilation_h, dilation_w;
    int32_t pad_top, pad_left;
    int32_t depth_multiplier;  /* depthwise only */
    int32_t input_offset;      /* -input zero point */
    int32_t output_offset;     /* output zero point */
    int32_t act_min, act_max;  /* fused activation, in the output's int8 domain */
    const int32_t *multiplier; /* per output channel, Q31, > 0 */
    const int32_t *shift;      /* per output channel, > 0 left */
    int32_t right_shift_only;  /* 1: every shift < 0 (the fast kernels' cheaper requantization) */
    int8_t *scratch;           /* CONV_2D: the widened rows, then im2col's rows (planned,
                                * zocodegen/planner/scratch.py); else NULL */
    /* zo_conv_in_place_s8 only: the kernel that computes each output row, and the rows of
     * the ring at scratch (the row kernel's own scratch follows the ring) */
    zo_conv_kernel row_kernel;
    int32_t ring_rows;
};

/* CONV_2D: weights OHWI [out_c][k_h][k_w][in_c]; `folded` = bias + input_offset * (sum of
 * the channel's weights), never NULL (zo_conv.c says why). */
void zo_conv2d_s8(const zo_conv_params *p, const int8_t *input, const int8_t *weights,
                  const int32_t *folded, int8_t *output);
void zo_conv2d_1x1_s8(const zo_conv_params *p, const int8_t *input, const int8_t *weights,
                      const int32_t *folded, int8_t *output); /* 1x1 stride 1, no pad */
void zo_conv2d_im2col_s8(const zo_conv_params *p, const int8_t *input, const int8_t *weights,
                         const int32_t *folded, int8_t *output); /* needs p->scratch */
/* DEPTHWISE_CONV_2D: weights [1][k_h][k_w][in_c * depth_multiplier]; bias [out_c] or NULL */
void zo_depthwise_conv2d_s8(const zo_conv_params *p, const int8_t *input, const int8_t *weights,
                            const int32_t *bias, int8_t *output);
void zo_depthwise_conv2d_c4_s8(const zo_conv_params *p, const int8_t *input,
                               const int8_t *weights, const int32_t *bias,
                               int8_t *output); /* depth multiplier 1 */
/* Any of the above with its output over its input (output == input allowed; in place),
 * row by row through p->ring_rows rows at p->scratch (zocodegen/planner/scratch.py) */
void zo_conv_in_place_s8(const zo_conv_params *p, const int8_t *input, const int8_t *weights,
                         const int32_t *bias, int8_t *output);

/* ---- FULLY_CONNECTED (zo_fully_connected.c) ---------------------------------------------- */
typedef struct {
    int32_t rows, in_features, out_features;
    int32_t input_offset, output_offset;
    int32_t act_min, act_max;
    const int32_t *multiplier; /* per output feature (all equal when per-tensor) */
    const int32_t *shift;
} zo_fc_params;

/* weights [out_features][in_features]; single-rounding requantization (ai_edge_litert) */
void zo_fully_connected_s8(const zo_fc_params *p, const int8_t *input, const int8_t *weights,
                           const int32_t *bias, int8_t *output);

/* ---- ADD / MUL with 4-D broadcasting (zo_elementwise.c); in place ----------------------- */
typedef struct {
    int32_t out_shape[4];
    int32_t in1_strides[4], in2_strides[4]; /* element strides, 0 on broadcast axes */
    int32_t input1_offset, input2_offset;   /* -zero points */
    int32_t input1_multiplier, input1_shift; /* ADD only */
    int32_t input2_multiplier, input2_shift; /* ADD only */
    int32_t left_shift;                      /* ADD only: 20 */
    int32_t output_multiplier, output_shift;
    int32_t output_offset;
    int32_t act_min, act_max;
} zo_elementwise_params;

void zo_add_s8(const zo_elementwise_params *p, const int8_t *input1, const int8_t *input2,
               int8_t *output);
void zo_mul_s8(const zo_elementwise_params *p, const int8_t *input1, const int8_t *input2,
               int8_t *output);

/* ---- AVERAGE_POOL_2D / MAX_POOL_2D / MEAN (zo_pooling.c) -------------------------------- */
typedef struct {
    int32_t batches;
    int32_t in_h, in_w, channels;
    int32_t out_h, out_w;
    int32_t filter_h, filter_w;
    int32_t stride_h, stride_w;
    int32_t pad_top, pad_left;
    int32_t act_min, act_max;
} zo_pool_params;

void zo_average_pool_s8(const zo_pool_params *p, const int8_t *input, int8_t *output);
void zo_max_pool_s8(const zo_pool_params *p, const int8_t *input, int8_t *output);

typedef struct {
    int32_t in_shape[4];   /* input padded to 4-D */
    int32_t reduce[4];     /* 1 on reduced axes */
    int32_t count;         /* elements per mean */
    int32_t input_zero_point;
    int32_t output_offset;
    int32_t multiplier, shift; /* 1/count folded in (QuantizedMeanOrSum) */
} zo_mean_params;

void zo_mean_s8(const zo_mean_params *p, const int8_t *input, int8_t *output);

/* ---- data movement (zo_shape.c) ---------------------------------------------------------- */
typedef struct {
    int32_t in_shape[4];
    int32_t before[4], after[4];
    int8_t pad_value;      /* output zero point */
} zo_pad_params;

void zo_pad_s8(const zo_pad_params *p, const int8_t *input, int8_t *output);

typedef struct {
    int32_t out_shape[4];
    int32_t in_strides[4]; /* input element stride of each output axis */
} zo_transpose_params;

void zo_transpose_s8(const zo_transpose_params *p, const int8_t *input, int8_t *output);

typedef struct {
    int32_t outer;              /* product of the dims before the axis */
    int32_t out_inner;          /* output axis size * inner size */
    int32_t in_inner;           /* this input's axis size * inner size */
    int32_t out_start;          /* where this input's slab starts inside an output row */
    int32_t requantize;         /* 0: copy; 1: int8 -> int8 requantization below */
    int32_t input_offset, output_offset, multiplier, shift;
    int32_t act_min, act_max;
} zo_concat_part_params;

/* one call per input: writes that input's slab of the output */
void zo_concat_part_s8(const zo_concat_part_params *p, const int8_t *input, int8_t *output);

typedef struct {
    int32_t batches, in_h, in_w, channels, out_h, out_w;
    const int32_t *row_index;  /* source row per output row (TFLite float32 rule, precomputed) */
    const int32_t *col_index;
} zo_resize_params;

void zo_resize_nearest_s8(const zo_resize_params *p, const int8_t *input, int8_t *output);

typedef struct {
    int32_t bytes;
} zo_copy_params;

/* RESHAPE when its output cannot alias its input */
void zo_copy_bytes(const zo_copy_params *p, const void *input, void *output);

typedef struct {
    int32_t rows;               /* rows of the window */
    int32_t row_bytes;          /* bytes of one window row (columns * channels * element) */
    int32_t input_stride;       /* bytes from one row to the next in the input */
    int32_t output_stride;      /* ... and in the output */
} zo_window_params;

/* patch-based inference: copy a window of rows between a whole tensor and a patch */
void zo_copy_window(const zo_window_params *p, const void *input, void *output);

/* ---- QUANTIZE / DEQUANTIZE (zo_quantize.c); requantize in place ------------------------- */
typedef struct {
    int32_t size;
    float scale;            /* float <-> int8 */
    int32_t zero_point;
    int32_t input_offset, output_offset, multiplier, shift; /* int8 -> int8 */
} zo_quantize_params;

void zo_quantize_f32_s8(const zo_quantize_params *p, const float *input, int8_t *output);
void zo_requantize_s8(const zo_quantize_params *p, const int8_t *input, int8_t *output);
void zo_dequantize_s8_f32(const zo_quantize_params *p, const int8_t *input, float *output);

/* ---- SOFTMAX / LOG_SOFTMAX (zo_softmax.c); in place ------------------------------------- */
typedef struct {
    int32_t rows, depth;
    int32_t input_multiplier;            /* Q31 */
    int32_t input_left_shift;            /* >= 0 */
    int32_t diff_min;                    /* <= 0 */
    int32_t reverse_scaling_divisor;     /* LOG_SOFTMAX only */
    int32_t reverse_scaling_right_shift; /* LOG_SOFTMAX only */
} zo_softmax_params;

/* output scale 1/256, zero point -128 */
void zo_softmax_s8(const zo_softmax_params *p, const int8_t *input, int8_t *output);
/* output scale 16/256, zero point 127 */
void zo_log_softmax_s8(const zo_softmax_params *p, const int8_t *input, int8_t *output);
/* training loss: -log softmax(logits)[label] in Q5.26, with LOG_SOFTMAX's parameters */
int32_t zo_cross_entropy_q26(const zo_softmax_params *p, const int8_t *logits, int32_t label);
/* softmax(logits) - onehot(label), Q24, per class: the cross-entropy's gradient with respect
 * to the dequantized logits (the training engine's back-propagation, zo_backprop.c) */
void zo_softmax_gradient_q24(const zo_softmax_params *p, const int8_t *logits, int32_t label,
                             int32_t *gradient);

#endif /* ZO_KERNELS_H */
