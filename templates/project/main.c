/*
 * The command loop of the host link (docs/link.md), the same C for every build: what differs
 * by model and build comes from the generated headers (firmware.h: FIRMWARE_TRAINING and
 * the identity; training.h: TRAINING_SELECTS_BLOCK and the training tables).
 *
 * The device says HELLO, then asks the host for work (NEXT) and does what each COMMAND says:
 * W wait, I infer, O open the image, B select the block (sparse --block auto), T train,
 * S / L save / load the checkpoint, A accuracy, R reset, Q quit; all but W and Q end with
 * DONE. Samples and checkpoints are sectors of the
 * host's image (blockdev_link.c).
 * Built without --train (FIRMWARE_TRAINING 0), O, B, T, S, L, A and R end with DONE status
 * ZO_LINK_ERR_UNSUPPORTED.
 *
 * When the host answers a request with RESTART (it was restarted while the device was busy),
 * the command is abandoned and the loop starts over with HELLO; the host then opens the
 * image again and loads the checkpoint (L) or resets (R).
 */
#include <stdint.h>

#include "firmware.h"
#include "model.h"
#include "platform.h"
#include "zo_bytes.h"
#include "zo_link.h"
#if FIRMWARE_TRAINING
#include "training.h"
#include "zo_guard.h"
#include "zo_log_line.h"
#include "zo_train_io.h"
#endif

/* The LOG line after each WELCOME. */
static const char firmware_log[] = FIRMWARE_LOG;
#if FIRMWARE_TRAINING

static zo_image image;
static zo_train_state state;
/* The run being trained: training_models[0], or with --block auto the block that B chose
 * (NULL until then: every layer computes with its flash parameters). */
static const zo_train_model *active;

/* The checkpoint area must hold any block's checkpoint. */
static uint32_t largest_checkpoint(void)
{
    uint32_t bytes = 0u;
    for (uint32_t b = 0u; b < TRAINING_MODELS; ++b) {
        const uint32_t n = zo_checkpoint_bytes(&training_models[b]);
        bytes = n > bytes ? n : bytes;
    }
    return bytes;
}

/* Back to the untrained model: the flash parameters; a fixed selection is copied to SRAM
 * again, while --block auto waits for B. */
static void reset_training(void)
{
    for (uint32_t b = 0u; b < TRAINING_MODELS; ++b) {
        zo_train_detach(&training_models[b]);
    }
    active = TRAINING_SELECTS_BLOCK ? 0 : &training_models[0];
    if (active) {
        zo_train_init(active, &state);
    }
    state.step = 0u;
    state.schedule_steps = zo_train_run_steps(&training_models[0], state.sample_count);
}
#endif /* FIRMWARE_TRAINING */

/* HELLO: who this firmware is (docs/link.md "HELLO"); starts a session. */
static int hello(void)
{
    zo_link_identity id = {0};
    id.model_sha256 = model_sha256;
    id.input_bytes = MODEL_INPUT_BYTES;
    id.output_bytes = MODEL_OUTPUT_BYTES;
    id.classes = MODEL_CLASSES;
    id.input_scale = MODEL_INPUT_SCALE;
    id.input_zero_point = MODEL_INPUT_ZERO_POINT;
    id.cycles_per_second = platform_cycles_per_second();
    id.target = platform_name();
#if FIRMWARE_TRAINING
    const zo_train_model *m = active ? active : &training_models[0];
    id.checkpoint_bytes = largest_checkpoint();
    id.flags = ZO_LINK_FLAG_TRAINING | (TRAINING_GNORM_SCALING ? ZO_LINK_FLAG_GNORM_SCALING : 0u) |
               (TRAINING_GUARD ? ZO_LINK_FLAG_GUARD : 0u) |
               (TRAINING_LR_AUTO ? ZO_LINK_FLAG_LR_AUTO : 0u) |
               (TRAINING_QUANT_SCALING ? ZO_LINK_FLAG_QUANT_SCALING : 0u) |
               (m->cosine ? ZO_LINK_FLAG_COSINE : 0u);
    id.estimator = TRAINING_ESTIMATOR;
    id.mode = TRAINING_SPARSE;
    id.block = TRAINING_BLOCK;
    id.blocks = TRAINING_BLOCKS;
    id.queries = m->queries;
    id.batch = m->batch;
    id.steps = m->steps;
    id.seed = m->seed;
    id.lr = m->lr;
    id.trainable_layers = TRAINING_LAYERS; /* --block auto: of every block */
    /* An image opened before belongs to the host's previous session: open it again. */
    state.sample_count = 0u;
#else
    id.block = ZO_LINK_NO_BLOCK; /* the other training fields stay 0 */
#endif
    return zo_link_hello(&id);
}

/* ---- I: the host's input in, the model's output out ---------------------------------- */

/* The host sees the inputs (and the outputs) as one byte string, the tensors in graph
 * order; `at` is where tensor t starts in it. */
static int fetch_tensor(const model_tensor *t, uint32_t at)
{
    uint8_t *bytes = model_arena() + t->offset;
    for (uint32_t pos = 0u; pos < t->bytes; pos += ZO_LINK_MAX_CHUNK) {
        const uint32_t left = t->bytes - pos;
        const int rc = zo_link_fetch(at + pos, bytes + pos,
                                     left < ZO_LINK_MAX_CHUNK ? left : ZO_LINK_MAX_CHUNK);
        if (rc != ZO_LINK_OK) {
            return rc;
        }
    }
    return ZO_LINK_OK;
}

static int put_tensor(const model_tensor *t, uint32_t at)
{
    const uint8_t *bytes = model_arena() + t->offset;
    for (uint32_t pos = 0u; pos < t->bytes; pos += ZO_LINK_MAX_CHUNK) {
        const uint32_t left = t->bytes - pos;
        const int rc = zo_link_put(at + pos, bytes + pos,
                                   left < ZO_LINK_MAX_CHUNK ? left : ZO_LINK_MAX_CHUNK);
        if (rc != ZO_LINK_OK) {
            return rc;
        }
    }
    return ZO_LINK_OK;
}
#ifdef ZO_PROFILE_LAYERS

/* Profiling build (-DZO_PROFILE_LAYERS): model.c's per-layer counts of the last I, sent
 * after its outputs as one TELEMETRY per layer (step 0, the layer's index, loss 0, lr 0,
 * its cycles), before DONE. benchmarks/inference.py reads them. */
extern uint32_t model_layer_cycles[MODEL_LAYER_COUNT];

static int send_layer_cycles(void)
{
    int rc = ZO_LINK_OK;
    for (int i = 0; i < MODEL_LAYER_COUNT && rc == ZO_LINK_OK; ++i) {
        rc = zo_link_telemetry(0u, i, 0, 0.0f, model_layer_cycles[i]);
    }
    return rc;
}
#endif

static int infer(uint32_t *cycles)
{
    uint32_t at = 0u;
    uint32_t start;
    int rc = ZO_LINK_OK;
    for (int k = 0; k < MODEL_INPUT_COUNT && rc == ZO_LINK_OK; ++k) {
        rc = fetch_tensor(&model_inputs[k], at);
        at += model_inputs[k].bytes;
    }
    if (rc != ZO_LINK_OK) {
        return rc;
    }
#ifdef ZO_PROFILE_LAYERS
    for (int i = 0; i < MODEL_LAYER_COUNT; ++i) {
        model_layer_cycles[i] = 0u;
    }
#endif
    start = platform_cycles();
    model_run();
    *cycles = platform_cycles() - start;
    at = 0u;
    for (int k = 0; k < MODEL_OUTPUT_COUNT && rc == ZO_LINK_OK; ++k) {
        rc = put_tensor(&model_outputs[k], at);
        at += model_outputs[k].bytes;
    }
#ifdef ZO_PROFILE_LAYERS
    if (rc == ZO_LINK_OK) {
        rc = send_layer_cycles();
    }
#endif
    return rc;
}
#if FIRMWARE_TRAINING

/* ---- O T S L A R: training --------------------------------------------------------- */

static void send_telemetry(void *context, const zo_train_telemetry *record)
{
    (void)context;
    /* A RESTART is noticed by the training loop, through zo_link_restarting(). */
    (void)zo_link_telemetry(record->step, record->layer, record->loss_q16, record->lr,
                            record->cycles);
}

#if FIRMWARE_RECORD_SCALARS
/* --record-scalars: each WP layer's query sums, for `zocodegen replay` */
static void send_scalars(void *context, uint32_t step, int32_t layer, const int32_t *values,
                         uint32_t count)
{
    (void)context;
    (void)zo_link_scalars(step, layer, values, count);
}

#endif
/* O: read and check the image's header; value = its train records, which set the run's T
 * when the build left it to the data (zo_train_run_steps). */
static int open_image(uint32_t *value)
{
    int rc = zo_image_open(&image);
    state.sample_count = 0u;
    if (rc == ZO_IMAGE_OK) {
        rc = zo_image_expect_input(&image, training_models[0].input_bytes);
    }
    if (rc == ZO_IMAGE_OK) {
        rc = zo_image_expect_classes(&image, (uint32_t)training_models[0].classes);
    }
    if (rc == ZO_IMAGE_OK && zo_image_count(&image, ZO_SPLIT_TRAIN) == 0u) {
        rc = ZO_IMAGE_ERR_INDEX; /* nothing to train on */
    }
    if (rc == ZO_IMAGE_OK) {
        state.sample_count = zo_image_count(&image, ZO_SPLIT_TRAIN);
        state.schedule_steps = zo_train_run_steps(&training_models[0], state.sample_count);
    }
    *value = state.sample_count;
    return rc;
}

/* T: value = the steps completed so far (the training state's step). Each step runs to its
 * end, so a RESTART in its TELEMETRY leaves consistent parameters behind. */
static void guard_report(const zo_guard_event *e)
{
    (void)zo_link_event(e->kind, e->decision, e->step, e->correct, e->of, e->halvings,
                        e->eta_ppm, e->steps, e->loss_q16);
}

/* The first T of a run also picks eta (--lr auto) and takes the guard's baseline; every
 * step is followed by the guard's check when one is due (docs/training.md). A run the guard
 * has ended (its patience) trains no further step: value stays its step. */
static int train(uint32_t steps, uint32_t *value)
{
    int rc = state.sample_count == 0u ? ZO_IMAGE_ERR_NOT_OPEN
             : active == 0 ? ZO_TRAIN_ERR_NO_BLOCK : ZO_TRAIN_OK;
    if (rc == ZO_TRAIN_OK) {
        rc = zo_guard_begin(active, &state, &image, guard_report);
    }
    for (uint32_t k = 0u; k < steps && rc == ZO_TRAIN_OK && !zo_link_restarting()
                          && !zo_guard_stopped(&state); ++k) {
        rc = zo_train_step(active, &state);
        if (rc == ZO_TRAIN_OK) {
            rc = zo_guard_after_step(active, &state, &image, guard_report);
        }
    }
    *value = state.step;
    return rc;
}

/* Index of the largest score of output 0; the lowest index wins ties. */
static uint32_t predicted_class(void)
{
    const void *output = model_arena() + model_outputs[0].offset;
    const firmware_score *score = (const firmware_score *)output;
    uint32_t best = 0u;
    for (uint32_t k = 1u; k < MODEL_CLASSES; ++k) {
        if (score[k] > score[best]) {
            best = k;
        }
    }
    return best;
}

/* Correct predictions on records first .. first + count - 1 of the split, with the
 * parameters model.c computes with now. */
static int count_correct(uint8_t split, uint32_t first, uint32_t count, uint32_t *correct)
{
    *correct = 0u;
    for (uint32_t i = first; i < first + count; ++i) {
        uint8_t *input = model_arena() + training_models[0].input_offset;
        int32_t label = 0;
        const int rc = zo_image_read_sample(&image, split, i, input, &label);
        if (rc != ZO_IMAGE_OK) {
            return rc;
        }
        model_run();
        if (predicted_class() == (uint32_t)label) {
            ++*correct;
        }
    }
    return ZO_IMAGE_OK;
}

/* A: value = the correct predictions on every record of the split, with the parameters
 * trained so far (model.c computes with the SRAM copies training.c holds). */
static int accuracy(uint8_t split, uint32_t *value)
{
    *value = 0u;
    if (state.sample_count == 0u) {
        return ZO_IMAGE_ERR_NOT_OPEN;
    }
    if (split >= ZO_IMAGE_NUM_SPLITS) {
        return ZO_IMAGE_ERR_SPLIT;
    }
    return count_correct(split, 0u, zo_image_count(&image, split), value);
}
#if TRAINING_SELECTS_BLOCK

/* Appends key, then a Q16 loss sum over n records as its mean in nats with three decimals,
 * rounded half up (simulator.mean_loss_milli). */
static void line_mean_loss(zo_log_line *l, const char *key, int64_t loss_q16, uint32_t n)
{
    const uint64_t milli = ((uint64_t)loss_q16 * 1000u + 32768u * (uint64_t)n) /
                           (65536u * (uint64_t)n);
    const uint64_t thousandths = milli % 1000u;
    zo_line_u64(l, key, milli / 1000u);
    zo_line_text(l, thousandths < 10u ? ".00" : thousandths < 100u ? ".0" : ".");
    zo_line_u64(l, "", thousandths);
}

/* LOG "block K: S trial records; held-out A -> B of H correct, mean loss X -> Y" */
static void trial_line(uint32_t block, uint32_t size, uint32_t held, const zo_score *before,
                       const zo_score *after)
{
    zo_log_line l;
    zo_line_start(&l);
    zo_line_u64(&l, "block ", block);
    zo_line_u64(&l, ": ", size);
    zo_line_u64(&l, " trial records; held-out ", before->correct);
    zo_line_u64(&l, " -> ", after->correct);
    zo_line_u64(&l, " of ", held);
    line_mean_loss(&l, " correct, mean loss ", before->loss, held);
    line_mean_loss(&l, " -> ", after->loss, held);
    (void)zo_link_log(l.text);
}

/* B (sparse --block auto, docs/training.md "Block selection"): each block trains one epoch
 * of the first S training records from the flash parameters, with the schedule over that
 * epoch, and is scored on the last H records; the first block with the lowest held-out loss
 * is copied from flash again and attached. value = the block. */
static int select_block(uint32_t *value)
{
    const uint32_t records = state.sample_count;
    const uint32_t size = TRAINING_TRIAL_SAMPLES < records / 2u ? TRAINING_TRIAL_SAMPLES
                                                                : records / 2u;
    const uint32_t held = TRAINING_TRIAL_HELD_OUT < records - size ? TRAINING_TRIAL_HELD_OUT
                                                                   : records - size;
    const uint32_t batch = training_models[0].batch;
    zo_score baseline = {0u, 0}, best_score = {0u, 0};
    uint32_t best = 0u;
    *value = 0u;
    if (records == 0u) {
        return ZO_IMAGE_ERR_NOT_OPEN;
    }
    if (size == 0u) {
        return ZO_IMAGE_ERR_INDEX; /* fewer than two training records */
    }
    reset_training();
    int rc = zo_measure(&training_models[0], &image, ZO_SPLIT_TRAIN, records - held, held,
                        &baseline);
    for (uint32_t b = 0u; b < TRAINING_MODELS && rc == ZO_IMAGE_OK; ++b) {
        zo_train_state trial = state;
        zo_score scored;
        zo_train_init(&training_models[b], &trial);
        trial.lr = training_models[b].lr; /* --lr (0.01 with --lr auto, chosen later) */
        trial.sample_count = size;
        trial.schedule_steps = (size + batch - 1u) / batch;
        trial.telemetry = 0;
        trial.scalars = 0;
        for (uint32_t t = 0u; t < trial.schedule_steps && rc == ZO_TRAIN_OK; ++t) {
            rc = zo_link_restarting() ? ZO_LINK_ERR_RESTART
                                      : zo_train_step(&training_models[b], &trial);
        }
        if (rc == ZO_TRAIN_OK) {
            rc = zo_measure(&training_models[b], &image, ZO_SPLIT_TRAIN, records - held, held,
                            &scored);
        }
        zo_train_detach(&training_models[b]);
        if (rc == ZO_TRAIN_OK) {
            trial_line(b, size, held, &baseline, &scored);
            if (b == 0u || scored.loss < best_score.loss) {
                best = b;
                best_score = scored;
            }
        }
    }
    if (rc != ZO_TRAIN_OK) {
        return rc;
    }
    active = &training_models[best];
    zo_train_init(active, &state);
    *value = best;
    return ZO_TRAIN_OK;
}
#endif /* TRAINING_SELECTS_BLOCK */

/* A command stopped by a record zo_image_read_sample refused (the engine reports any failed
 * read as ZO_TRAIN_ERR_SAMPLE): DONE carries the reader's own code and, for a corrupted record
 * or a bad label, the record's index as its value; the split is the command's (docs/link.md). */
static int record_status(int rc, uint32_t *value)
{
    if (rc == ZO_TRAIN_ERR_SAMPLE) {
        rc = image.read_rc;
    }
    if (rc == ZO_IMAGE_ERR_RECORD_CRC || rc == ZO_IMAGE_ERR_LABEL) {
        *value = image.read_index;
    }
    return rc;
}

/* S: value = the checkpoint's bytes. */
static int save(uint32_t *value)
{
    *value = 0u;
    if (state.sample_count == 0u) {
        return ZO_IMAGE_ERR_NOT_OPEN;
    }
    if (active == 0) {
        return ZO_TRAIN_ERR_NO_BLOCK;
    }
    *value = zo_checkpoint_bytes(active);
    return zo_checkpoint_to_image(active, &state, &image, ZO_SLOT_RUN);
}

/* L: verified completely before it changes anything; value = its step. With --block auto
 * the checkpoint's layer table says which block it trained: that block is attached. */
static int load(uint32_t *value)
{
    int rc = state.sample_count > 0u ? ZO_TRAIN_ERR_CHECKPOINT : ZO_IMAGE_ERR_NOT_OPEN;
    for (uint32_t b = 0u; b < TRAINING_MODELS && rc == ZO_TRAIN_ERR_CHECKPOINT; ++b) {
        rc = zo_checkpoint_from_image(&training_models[b], &state, &image, ZO_SLOT_RUN);
        if (rc == ZO_TRAIN_OK) {
            if (active && active != &training_models[b]) {
                zo_train_detach(active);
            }
            active = &training_models[b];
            zo_train_attach(active);
        }
    }
    *value = state.step;
    return rc;
}
#endif /* FIRMWARE_TRAINING */

/* ---- the command loop (docs/link.md "COMMAND") ------------------------------------- */

/* Argument bytes after the command byte, or -1 for a command this firmware does not have. */
static int argument_bytes(uint8_t command)
{
    switch (command) {
    case ZO_LINK_CMD_WAIT:
#if FIRMWARE_TRAINING
    case ZO_LINK_CMD_TRAIN:
#endif
        return 4;
#if FIRMWARE_TRAINING
    case ZO_LINK_CMD_ACCURACY:
        return 1;
    case ZO_LINK_CMD_OPEN:
#if TRAINING_SELECTS_BLOCK
    case ZO_LINK_CMD_SELECT:
#endif
    case ZO_LINK_CMD_SAVE:
    case ZO_LINK_CMD_LOAD:
    case ZO_LINK_CMD_RESET:
#endif
    case ZO_LINK_CMD_INFER:
    case ZO_LINK_CMD_QUIT:
        return 0;
    default:
        return -1;
    }
}

/* ERROR with a line for a person, for a command that is refused. */
static void refuse(int32_t code, uint8_t command)
{
    char text[] = "command 'X' is not supported by this firmware";
    char size[] = "command 'X' has the wrong number of argument bytes";
    char *line = code == ZO_LINK_ERR_UNSUPPORTED ? text : size;
    line[9] = command >= ' ' && command <= '~' ? (char)command : '?';
    (void)zo_link_error(code, line);
}

/* Runs one command (its arguments already checked); the status goes into DONE. */
static int execute(uint8_t command, const uint8_t *args, uint32_t *value, uint32_t *cycles)
{
#if !FIRMWARE_TRAINING
    (void)args; /* no command of this firmware takes arguments or reports a value */
    (void)value;
#endif
    switch (command) {
    case ZO_LINK_CMD_INFER:
        return infer(cycles);
#if FIRMWARE_TRAINING
    case ZO_LINK_CMD_OPEN:
        return open_image(value);
#if TRAINING_SELECTS_BLOCK
    case ZO_LINK_CMD_SELECT:
        return select_block(value);
#endif
    case ZO_LINK_CMD_TRAIN:
        return train(zo_get_u32(args), value);
    case ZO_LINK_CMD_SAVE:
        return save(value);
    case ZO_LINK_CMD_LOAD:
        return load(value);
    case ZO_LINK_CMD_ACCURACY:
        return accuracy(args[0], value);
    case ZO_LINK_CMD_RESET:
        reset_training();
        return ZO_TRAIN_OK;
#endif
    default:
        return ZO_LINK_ERR_UNSUPPORTED; /* argument_bytes() lets no other command through */
    }
}

/* NEXT, do it, DONE; returns when the host answered RESTART. */
static void serve(void)
{
    for (;;) {
        zo_link_frame next;
        uint8_t command;
        uint8_t args[4] = {0};
        int expected;
        uint32_t value = 0u;
        uint32_t cycles = 0u;
        int rc = zo_link_next(&next);
        if (rc == ZO_LINK_ERR_RESTART) {
            return;
        }
        if (rc != ZO_LINK_OK) {
            (void)zo_link_error(rc, "COMMAND without a command byte");
            continue;
        }
        /* The payload lives in the link's receive buffer: copy it out before the next
         * request. */
        command = next.payload[0];
        expected = argument_bytes(command);
        if (expected < 0 || (uint32_t)next.len != 1u + (uint32_t)expected) {
            rc = expected < 0 ? ZO_LINK_ERR_UNSUPPORTED : ZO_LINK_ERR_PROTOCOL;
            refuse(rc, command);
        } else {
            for (int i = 0; i < expected; ++i) {
                args[i] = next.payload[1 + i];
            }
            if (command == ZO_LINK_CMD_WAIT) {
                zo_link_wait(zo_get_u32(args));
                continue; /* no DONE: the next NEXT says the wait is over */
            }
            if (command == ZO_LINK_CMD_QUIT) {
                platform_exit(0);
            }
            rc = execute(command, args, &value, &cycles);
#if FIRMWARE_TRAINING
            rc = record_status(rc, &value);
#endif
        }
        if (zo_link_restarting()) {
            return;
        }
        (void)zo_link_done(command, rc, value, cycles);
    }
}

int main(void)
{
    platform_init();
    zo_link_init();
#if FIRMWARE_TRAINING
    reset_training();
    state.read_sample = zo_image_train_sample;
    state.sample_context = &image;
    state.telemetry = send_telemetry;
#if FIRMWARE_RECORD_SCALARS
    state.scalars = send_scalars;
#endif
#endif
    for (;;) {
        if (hello() == ZO_LINK_OK && zo_link_log(firmware_log) != ZO_LINK_ERR_RESTART) {
            serve();
        }
    }
}
