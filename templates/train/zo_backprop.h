/*
 * Back-propagation through the model's head (--bp-layers C, ElasticZO's hybrid: the last C
 * trainable layers by BP, the rest by zeroth-order). All integer; rules and reasons in
 * docs/training.md "Back-propagation for the last layers"; numpy twin:
 * zocodegen/training/backprop.py.
 *
 * An error is int32 2^24 x dl/dT_q (nats per LSB of tensor T). The generated training.c
 * describes the head as one zo_bp_op per op, in forward order, and where each tensor's int8
 * copy and int32 error live inside the gradient region.
 */
#ifndef ZO_BACKPROP_H
#define ZO_BACKPROP_H

#include <stdint.h>

#include "zo_kernels.h"

#define ZO_BP_FC 0
#define ZO_BP_CONV 1
#define ZO_BP_DEPTHWISE 2
#define ZO_BP_AVERAGE_POOL 3
#define ZO_BP_MAX_POOL 4
#define ZO_BP_MEAN 5
#define ZO_BP_RESHAPE 6
#define ZO_BP_ADD 7

#define ZO_BP_GRADIENT_SHIFT 8 /* node gradients Q24 -> parameter gradients Q16 */
#define ZO_BP_NONE 0xFFFFFFFFu /* an input without an error (not computed in the head) */

typedef struct {
    uint8_t kind;           /* ZO_BP_* */
    uint8_t propagate;      /* 0 for the first BP layer: its input needs no error */
    int16_t layer;          /* FC / CONV / DEPTHWISE: index of the layer in zo_train_model */
    uint16_t op;            /* model layer index */
    int32_t lo, hi;         /* the output passes its error where lo < out < hi */
    uint32_t out_count;
    uint32_t out_copy;      /* byte offset of the int8 output's copy in the gradient region */
    uint32_t out_error;     /* word offset of the output's int32 error */
    uint32_t in_count;
    uint32_t in_copy[2];    /* byte offsets of the int8 inputs' copies (ADD: two) */
    uint32_t in_error[2];   /* word offsets of their errors, or ZO_BP_NONE */
    /* d out_q / d in_q as TFLite quantized multipliers: per output channel (FC, CONV,
     * DEPTHWISE: s_in s_w / s_out), per input (ADD: s_in / s_out), per window size
     * (AVERAGE_POOL: index count, s_in / (s_out count)), or one (MAX_POOL, MEAN) */
    const int32_t *multiplier;
    const int32_t *shift;
    const zo_conv_params *conv; /* CONV / DEPTHWISE geometry */
    const zo_fc_params *fc;     /* FC geometry */
    const zo_pool_params *pool; /* AVERAGE_POOL / MAX_POOL geometry */
    const zo_mean_params *mean; /* MEAN geometry */
} zo_bp_op;

/* A byte range the head's backward pass reads: copied from the arena into the head's
 * copies before the head runs (after_op < 0) or after op after_op. */
typedef struct {
    int32_t after_op;
    uint32_t arena_offset;
    uint32_t bytes;
    uint32_t copy_offset; /* in the gradient region */
} zo_bp_copy;

typedef struct {
    const zo_bp_op *ops; /* forward order; the last one computes the logits */
    uint32_t op_count;
    const zo_bp_copy *copies;
    uint32_t copy_count;
    uint32_t first_op, last_op; /* the ops the head's forward runs */
    /* the gradient region, in int32 words: the errors from word 0, then the scaled output
     * error of the op being propagated, then (N > 1) the BP parameter gradients; then the
     * int8 copies */
    uint32_t error_words;
    uint32_t scaled_offset, scaled_words;
    uint32_t accumulator_offset, accumulator_words;
    uint32_t copy_offset;       /* bytes: where the copies start */
    int32_t logits_multiplier, logits_shift; /* s_logits */
} zo_bp_head;

#endif /* ZO_BACKPROP_H */
