/*
 * Zeroth-order training engine (DESIGN.md section 4; every numeric rule in docs/training.md,
 * numpy twin: zocodegen/training/simulator.py). The engine is model-independent: the
 * generated src/training.c describes the model's trainable layers in the tables below and
 * owns every buffer, so all memory is static and visible in the map file.
 */
#ifndef ZO_TRAIN_H
#define ZO_TRAIN_H

#include <stdint.h>

#include "zo_backprop.h"
#include "zo_kernels.h"
#include "zo_perturb.h"      /* zo_perturb_stream */
#include "zo_status.h"       /* ZO_TRAIN_OK, ZO_TRAIN_ERR_* */
#include "zo_train_config.h" /* ZO_TRAIN_INTEGER_ONLY */

#define ZO_TRAIN_WP 0 /* weight perturbation: perturb theta_i, rerun from layer i */
#define ZO_TRAIN_NP 1 /* node perturbation: perturb layer i's pre-activation, rerun from i + 1 */
#define ZO_TRAIN_BP 2 /* back-propagation through the head (--bp-layers, zo_backprop.c) */
#define ZO_TRAIN_INT8 3 /* ElasticZO-INT8: two-point sign estimate, integer-only (int8.py) */
#define ZO_TRAIN_CH 4 /* channel-wise node perturbation: one xi per output channel, biases only */

#define ZO_TRAIN_CONV 0
#define ZO_TRAIN_DEPTHWISE 1
#define ZO_TRAIN_FC 2


#define ZO_TRAIN_NO_BEST 0xFFFFFFFFu  /* best_step before the guard's first check */
#define ZO_MAX_LR_CANDIDATES 8u  /* --lr auto's trials keep each candidate's score */

/* A byte range of the arena that a partial forward needs from before its first layer, and
 * where the engine keeps a copy of it (offset inside one sample's saved-activation slot). */
typedef struct {
    uint32_t arena_offset;
    uint32_t bytes;
    uint32_t saved_offset;
} zo_train_span;

/* --query-batch: a tensor a batched forward reads from before its first layer: slot 0's
 * offset in the query arena (slot b follows b x bytes later), one slot's bytes, and where
 * the layer's saved slot keeps it. */
typedef struct {
    uint32_t batch_offset;
    uint32_t bytes;
    uint32_t saved_offset;
} zo_train_batch_span;

/* --scales: a CH layer's per-channel filter scales, trained beside its biases, and the
 * multipliers its kernels read, rebuilt from them (zo_scales.c; docs/training.md "Channel
 * scales"). */
typedef struct {
    float *scale;                 /* SRAM: the trained scales s_c, one per output channel */
    const float *scale_flash;     /* the model's s0_c */
    int32_t *multiplier, *shift;  /* SRAM: QuantizeMultiplier(s_in s_c / s_out), in TFLite's
                                   * double arithmetic; the kernels' parameters point here */
    const int32_t *multiplier_flash, *shift_flash;
    double input_scale, output_scale;  /* s_in, s_out */
    int32_t output_zero_point, act_min, act_max;  /* h's range, for h(z) from h(z -+ 1) */
    /* --block auto: model.c runs the layer with *params_active, aimed at params_flash, or
     * at params_ram (the SRAM multipliers) while its block is attached; NULL otherwise */
    const zo_conv_params **params_active;
    const zo_conv_params *params_flash, *params_ram;
} zo_train_scales;

typedef struct {
    uint8_t kind;     /* ZO_TRAIN_CONV / _DEPTHWISE / _FC */
    uint8_t mode;     /* ZO_TRAIN_WP / _NP / _CH / _INT8 / _BP (always the last layers) */
    uint16_t seed_index; /* i of S(t, i) */
    uint16_t op;      /* model layer index */
    uint16_t next_op; /* first layer of the next trainable layer (== op when this is the last) */
    /* the op its queries restart at, from the saved activations of its restart group's
     * first layer: == op, or an earlier trained layer's op whose queries' forwards rerun
     * the ops between with their old weights, the group's updates waiting for its end
     * (zocodegen/codegen/training_regions.py) */
    uint16_t restart_op;
    int8_t *weights;  /* trainable SRAM copy */
    const int8_t *weights_flash;
    uint32_t weight_count;
    int32_t *bias;    /* NULL when the layer has none */
    const int32_t *bias_flash;
    uint32_t bias_count;
    /* CONV_2D: bias + input_offset x (sum of the channel's weights), what its kernels take
     * instead of the bias (zo_conv.c); recomputed whenever weights or bias change. NULL for
     * the other kinds. */
    int32_t *folded;
    const int32_t *folded_flash;
    uint32_t folded_count;
    int32_t input_offset;
    /* --block auto: the pointers model.c reads this layer's parameters through (flash or
     * the SRAM copy); NULL when model.c always reads the SRAM copy. */
    const int8_t **weights_active;
    const int32_t **bias_active;
    const int32_t **folded_active;
    zo_conv_kernel conv_kernel; /* CONV / DEPTHWISE: the kernel model.c runs (NP shifts) */
    uint32_t channels, channel_inner; /* weight j belongs to channel (j / inner) % channels */
    float gscale;                     /* N Q / (N Q + d - 1), or 1 without scaling */
    const float *weight_inv_s2;       /* per channel */
    const float *bias_inv_s2;
    uint32_t output_offset, output_count; /* the layer's int8 output in the arena */
    uint32_t input_saved_offset;          /* the layer's input inside a saved slot (NP) */
    const zo_train_span *restart;         /* what a forward from restart_op needs */
    uint32_t restart_count;
    const zo_train_span *next_restart;    /* what a forward from next_op needs */
    uint32_t next_restart_count;
    /* slot 0 of its restart group's saved activations (slot n: n x saved_stride after it):
     * arena bytes dead while they are live; NULL: the model's static buffer (split) */
    uint8_t *saved;
    uint32_t saved_stride;
    /* the layer's kernel parameters: the geometry of the NP / BP outer product */
    const zo_conv_params *conv; /* CONV / DEPTHWISE */
    const zo_fc_params *fc;     /* FC */
    /* NP, CH: the layer's kernel parameters with the output zero point moved by each delta
     * a perturbation can take (ZO_NP_SHIFTS of them, zo_train_engine.h), so the kernel writes
     * h(z + delta), z the pre-activation and h the fused activation's clamp
     * (docs/training.md). */
    const zo_conv_params *conv_shifted; /* CONV / DEPTHWISE */
    const zo_fc_params *fc_shifted;     /* FC */
    int8_t perturb_shift; /* --distribution uniform with XORShift: the layer's scale */
    /* --query-batch (model_run_batch_range): what ops op + 1 .. logits read from before
     * them, but the layer's output, copied into every slot of the query arena; slot 0 of
     * the layer's output there */
    const zo_train_batch_span *batch_restart;
    uint32_t batch_restart_count;
    uint32_t batch_output_offset;
    /* the layer's gradient region, live from its first query to its (group's) update: arena
     * bytes no op from restart_op on uses (zocodegen/codegen/training_regions.py), or NULL:
     * the model's shared gradient buffer */
    int32_t *gradient;
    const zo_train_scales *scales; /* --scales: its filter scales (CH), else NULL */
} zo_train_layer;

/* Reads training sample `index` into the model input (arena) and its label. */
typedef int (*zo_sample_reader)(void *context, uint32_t index, uint8_t *input, int32_t *label);

typedef struct {
    uint32_t step;      /* completed steps */
    int32_t layer;      /* trainable layer index, -1 for the end-of-step record */
    int32_t loss_q16;   /* mean clean loss of the step's batch, 2^-16 nats */
    float lr;           /* eta_t */
    uint32_t cycles;    /* platform_cycles() spent computing this layer / step: reading
                           samples and sending telemetry are not counted */
} zo_train_telemetry;

typedef void (*zo_telemetry_hook)(void *context, const zo_train_telemetry *record);

/* The scalars a WP layer's update was computed from besides its seed: the Q query sums
 * D_q of step `step`, trainable layer `layer` (i of S(t, i): its index among the model's
 * trainable layers). With them, the starting parameters and the build's options,
 * `zocodegen replay` rebuilds the parameters exactly (docs/training.md "Replay"). */
typedef void (*zo_scalars_hook)(void *context, uint32_t step, int32_t layer,
                                const int32_t *values, uint32_t count);
#ifdef ZO_PROFILE_TRAIN

/* Profiling build (-DZO_PROFILE_TRAIN, benchmarks/training_overheads.py): what a step's
 * cycles went to. After its end-of-step record a step sends one record per category,
 * layer ZO_PROFILE_LAYER + category, cycles the category's count; together
 * they add up to the end-of-step record's cycles. */
enum {
    ZO_PROFILE_FORWARD, /* model kernels: clean, query and advance forwards, NP's h(z -+ 1) */
    ZO_PROFILE_PERTURB, /* PRNG draws applying a perturbation: WP weights, NP nodes */
    ZO_PROFILE_RESTORE, /* saved activations restored / saved, weight backup, refold */
    ZO_PROFILE_LOSS,    /* cross-entropy of the logits */
    ZO_PROFILE_UPDATE,  /* gradient (replayed PRNG, outer products) and the update */
    ZO_PROFILE_OTHER,   /* everything else: loop control, seeds, loss differences */
    ZO_PROFILE_COUNT
};
#define ZO_PROFILE_LAYER 1000
extern uint32_t zo_train_profile_cycles[ZO_PROFILE_COUNT];
#ifdef ZO_PROFILE_LAYERS
/* With -DZO_PROFILE_LAYERS too (benchmarks/training_layers.py): then one record per model
 * layer i, layer ZO_PROFILE_OP + i, cycles the layer's kernels took in the step (every
 * forward through it and its own kernel run by the estimators), and one at
 * ZO_PROFILE_OP_RUNS + i, cycles how many times it ran. */
#define ZO_PROFILE_OP 2000
#define ZO_PROFILE_OP_RUNS 3000
#endif
#endif

/* The training guard and --lr auto (docs/training.md "Training guard"), fixed at build. */
typedef struct {
    uint8_t guard;            /* validation checks, keep the best, roll back on a fall */
    uint8_t lr_auto;          /* short trials of the candidates pick eta */
    uint32_t every_given;     /* --guard-every K; 0: K from T (zo_guard_every) */
    uint32_t forwards_per_step; /* query forwards of a step: the checks' share of them */
    uint32_t share_divisor;   /* the checks and each lr trial cost 1 / share_divisor of a run */
    uint32_t samples;         /* at most this many validation records per check */
    uint32_t min_samples;     /* fewer validation records than this: ZO_TRAIN_ERR_VAL */
    uint32_t falls_to_roll_back; /* checks in a row below the best before a rollback */
    uint32_t patience;        /* checks without a new best that end the run (0: never) */
    uint32_t confirm_z2;         /* the end's confirmation: net^2 >= confirm_z2 / 100 x
                                  * the records on which result and start disagree */
    uint32_t candidate_count; /* at most ZO_MAX_LR_CANDIDATES (the build checks) */
    const float *candidates;  /* smallest first */
} zo_guard_config;

typedef struct {
    const zo_train_layer *layers;
    uint32_t layer_count;
    uint32_t queries, batch, seed;
    uint32_t steps;  /* T; 0: epochs passes over the image's training records */
    uint32_t epochs;
    float lr;
    int cosine;
    float inv_nq; /* 1 / (N Q) */
    int32_t diff_limit; /* |loss difference| clamp, Q16: (2^31 - 1) / (N Q) */
    float max_step;     /* update clipping: largest weight step per update, LSB (0: off) */
    int32_t logits_op;
    uint32_t logits_offset;
    int32_t classes;
    const zo_softmax_params *loss;
    uint32_t input_offset, input_bytes;
    uint8_t model_sha256[32];
    /* buffers (sizes in docs/training.md, reported by the memory report) */
    uint8_t *saved;        /* split: batch + 1 slots of saved_stride (else NULL) */
    uint32_t saved_stride;
    int32_t *gradient;     /* the one gradient region */
    int32_t *clean_q16;    /* [batch] */
    int32_t *labels;       /* [batch] */
    int32_t *query_sums;   /* [queries] */
    const zo_guard_config *guard; /* NULL: neither guard nor --lr auto */
    const zo_bp_head *head;       /* --bp-layers: the head back-propagation runs through */
    uint32_t batch_logits_offset; /* --query-batch: slot 0 of the logits, query arena */
    /* --estimator int8 (ZO_TRAIN_INTEGER_ONLY builds): perturbations uniform on
     * [-r_max, r_max], zero where a draw's low 16 bits fall below p_zero (Q16; -1: the
     * paper's schedule), updates of b_zo (ZO) / b_bp (BP) bits */
    int32_t r_max, p_zero_q16, b_zo, b_bp;
    uint32_t slot_sectors; /* checkpoint slots in the image's area: 0 = run, 1 = best */
    /* --estimator split (ZO_TRAIN_SPLIT builds): block 2 starts at layers[split]; block 1's
     * loss-difference clamp; 2 x layer_count streams (each layer's, and a copy for the -
     * side); the query sums are P_1 block-1 sums then P_2 = 2 P_1 P_s block-2 sums */
    uint32_t split;
    int32_t block1_diff_limit;
    zo_perturb_stream *streams;
} zo_train_model;

typedef struct {
    uint32_t step; /* completed optimisation steps */
    uint32_t schedule_steps; /* T of the learning-rate schedule (a block trial: its epoch) */
    int constant_lr;         /* 1: eta without the schedule (an lr trial) */
    /* carried by the checkpoint, so a resumed run decides as an uninterrupted one */
    float lr;                /* eta in use: --lr, or the --lr auto winner (0: not chosen) */
    uint32_t seed;           /* base seed of S(t, i): --seed, or the loaded checkpoint's (a
                              * fleet server gives each device its own) */
    uint32_t halvings;       /* the guard halved eta this often */
    uint32_t best_step;      /* step of the best validated parameters (checkpoint slot 1) */
    uint32_t best_correct;
    int64_t best_loss;       /* sum of Q16 validation losses */
    uint32_t rollbacks;
    uint32_t falling;        /* checks in a row that fell below the best (a rollback: 2);
                              * ZO_CKPT_STOPPED once the guard has ended the run */
    zo_sample_reader read_sample;
    void *sample_context;
    uint32_t sample_count;
    zo_telemetry_hook telemetry; /* may be NULL */
    void *telemetry_context;
    zo_scalars_hook scalars;     /* may be NULL: --record-scalars builds set it */
    void *scalars_context;
} zo_train_state;

/* --bp-layers (zo_backprop.c): the head's forward from the arena as it stands (the first BP
 * layer's inputs restored), keeping the int8 copies the backward pass reads in the gradient
 * region; then one sample's backward pass: every head error, the BP layers' output errors
 * masked into their node gradients. */
void zo_bp_forward(const zo_train_model *m);
void zo_bp_backward(const zo_train_model *m, int32_t label);

/* Copies the flash parameters to their SRAM copies and attaches them; step = 0,
 * schedule_steps = the run's T (zo_train_run_steps of s->sample_count), eta = m->lr (0 with
 * --lr auto: not chosen yet), seed = m->seed, no guard check yet. */
void zo_train_init(const zo_train_model *m, zo_train_state *s);

/* T of the run: m->steps, or m->epochs passes over `records` training records at m->batch a
 * step when the build left it to the data (training/config.py run_steps). */
uint32_t zo_train_run_steps(const zo_train_model *m, uint32_t records);

/* --block auto: model.c computes m's layers with their SRAM copies (attach) or with the
 * flash originals (detach). No-ops for layers without *_active pointers. */
void zo_train_attach(const zo_train_model *m);
void zo_train_detach(const zo_train_model *m);

/* One optimisation step on samples (step * N + n) mod sample_count. */
int zo_train_step(const zo_train_model *m, zo_train_state *s);

#if !ZO_TRAIN_INTEGER_ONLY
/* eta_t: s->lr under the schedule over s->schedule_steps (float32 polynomial cosine,
 * identical on every target), times 2^-halvings. */
float zo_train_learning_rate(const zo_train_model *m, const zo_train_state *s, uint32_t step);
#endif

/* Checkpoint (format: zocodegen/training/checkpoint.py) through a byte sink / source. */
typedef int (*zo_byte_sink)(void *context, const uint8_t *bytes, uint32_t n);
typedef int (*zo_byte_source)(void *context, uint8_t *bytes, uint32_t n);
uint32_t zo_checkpoint_bytes(const zo_train_model *m);
int zo_checkpoint_save(const zo_train_model *m, const zo_train_state *s, zo_byte_sink sink,
                       void *context);
/* Verifies the whole checkpoint (header, layer table, CRC) before it changes anything;
 * reads the source twice, so the source must be rewindable (`rewind` is called between). */
int zo_checkpoint_load(const zo_train_model *m, zo_train_state *s, zo_byte_source source,
                       void (*rewind)(void *context), void *context);

#endif /* ZO_TRAIN_H */
