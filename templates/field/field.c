/*
 * field.c - the field trainer (`zocodegen build --data-source sdcard`, docs/sdcard.md): a board that
 * trains with no host attached, its data image and checkpoints on its own card.
 *
 * The firmware is the link firmware's command loop (main.c, the same file) with this file in
 * place of the host link (zo_link.c): the zo_link.h functions main.c calls are answered here,
 * on the board. NEXT gets the command host/trainer.py would send (O, then R and B or L, then
 * T in chunks of the run's checkpoint interval, A, S), DONE says how it went, and TELEMETRY,
 * LOG and EVENT become text lines on the UART (`field: ...`, for `zocodegen monitor` or any
 * terminal) and entries of the run log on the card. So a field run trains exactly what
 * `zocodegen train` (and `simulate`) would, and ends with the same checkpoint bytes.
 *
 * After each checkpoint the run and best slots are copied to their twins (zo_field.h), so a
 * power cut at any write leaves a checkpoint that verifies; at boot the newer twin that
 * verifies is made whole again and loaded. A card error during a chunk is tried again from
 * the last checkpoint (FIELD_ATTEMPTS); every other fault ends the run with its status on the
 * UART and in the card's status record. The end is platform_exit: 0 when the run is complete,
 * FIELD_EXIT_STOPPED when it stopped (on a board without a debugger, an idle loop).
 */
#include <stdint.h>
#include <string.h>

#include "field.h"
#include "platform.h"
#include "training.h" /* training_models: T of the run (zo_train_run_steps) */
#include "zo_bytes.h"
#include "zo_image.h" /* ZO_SPLIT_* */

#define FIELD_CARD_PATH "card.img" /* file backends only (stdio: $ZO_CARD overrides it) */
#define FIELD_EXIT_STOPPED 1
#define FIELD_ATTEMPTS 3u     /* a chunk that meets a card error is tried this often */

/* The image header fields the field trainer checks itself (docs/image.md "Header"). */
#define IMAGE_OFF_FLAGS 20u
#define IMAGE_OFF_SCALE 72u
#define IMAGE_OFF_ZERO_POINT 76u
#define IMAGE_OFF_SPLITS 80u /* 16 bytes a split, its count at +4 */
#define IMAGE_OFF_AREA_LBA 128u
#define IMAGE_OFF_AREA_SECTORS 132u
#define IMAGE_OFF_SHA256 144u

field_run field;

/* ---- the status record on the card ---------------------------------------------------- */

static int write_status(uint32_t state, int32_t status, uint32_t value)
{
    uint8_t *s = field.card.sector;
    if (!field.ours || field.card.status == 0u) {
        return ZO_BLOCKDEV_OK; /* another build's record, or no room for one: left alone */
    }
    memset(s, 0, ZO_SECTOR_BYTES);
    zo_put_u32(s + ZO_FIELD_OFF_STATE, state);
    zo_put_u32(s + ZO_FIELD_OFF_STATUS, (uint32_t)status);
    zo_put_u32(s + ZO_FIELD_OFF_VALUE, value);
    zo_put_u32(s + ZO_FIELD_OFF_STEP, field.step);
    zo_put_u32(s + ZO_FIELD_OFF_STEPS, field.steps);
    zo_put_u32(s + ZO_FIELD_OFF_EVERY, field.every);
    zo_put_u32(s + ZO_FIELD_OFF_SLOT, field.slot);
    zo_put_u32(s + ZO_FIELD_OFF_LOG, ZO_FIELD_LOG_SECTORS);
    zo_put_u32(s + ZO_FIELD_OFF_BOOTS, field.boots);
    zo_put_u32(s + ZO_FIELD_OFF_CORRECT, field.correct);
    zo_put_u32(s + ZO_FIELD_OFF_OF, field.split_count);
    zo_put_u32(s + ZO_FIELD_OFF_SPLIT, field.split);
    memcpy(s + ZO_FIELD_OFF_IDENTITY, field.identity, ZO_LINK_HELLO_BYTES);
    return zo_field_status_write(&field.card);
}

/* ---- the end ---------------------------------------------------------------------------- */

/* The run stops on `status` (a record problem names record `value`) `during` what: said on the
 * UART, kept in the status record and the log where the card has them, and the firmware
 * ends. */
static void stop(int32_t status, uint32_t value, const char *during)
{
    zo_log_line l;
    uint8_t e[ZO_FIELD_ENTRY_BYTES];
    zo_line_start(&l);
    zo_line_text(&l, "end: stopped: ");
    field_line_status(&l, status);
    zo_line_text(&l, during);
    if (status == ZO_IMAGE_ERR_RECORD_CRC || status == ZO_IMAGE_ERR_LABEL) {
        zo_line_u64(&l, " at record ", value);
    }
    zo_line_u64(&l, "; step ", field.step);
    zo_line_u64(&l, " of ", field.steps);
    field_say(l.text);
    field_entry(e, ZO_FIELD_LOG_FAULT, field.step, value, 0u, (uint32_t)status);
    field_log(e);
    (void)write_status(ZO_FIELD_STATE_STOPPED, status, value);
    platform_exit(FIELD_EXIT_STOPPED);
}

static void complete(void)
{
    zo_log_line l;
    uint8_t e[ZO_FIELD_ENTRY_BYTES];
    field_entry(e, ZO_FIELD_LOG_END, field.step, field.correct, field.split_count, 0u);
    field_log(e);
    const int rc = write_status(ZO_FIELD_STATE_COMPLETE, 0, 0u);
    if (rc != ZO_BLOCKDEV_OK) {
        stop(rc, 0u, " writing the status record");
    }
    zo_line_start(&l);
    zo_line_u64(&l, "end: complete: ", field.step);
    zo_line_text(&l, field.guard_stopped ? " steps (the guard's stop)" : " steps");
    if (field.split != FIELD_NO_SPLIT) {
        zo_line_text(&l, field.split == ZO_SPLIT_TEST ? ", test " : ", validation ");
        zo_line_u64(&l, "", field.correct);
        zo_line_u64(&l, " of ", field.split_count);
    }
    field_say(l.text);
    platform_exit(0);
}

/* ---- the commands main.c is given (docs/link.md "COMMAND") ------------------------------ */

static void give(uint8_t command, uint32_t argument, uint16_t argument_bytes)
{
    field.command[0] = command;
    zo_put_u32(field.command + 1, argument);
    field.command_len = (uint16_t)(1u + argument_bytes);
}

/* The next chunk of host/trainer.py's loop, or the end. */
static void next_chunk(void)
{
    if (field.step >= field.steps || field.guard_stopped) {
        complete();
    }
    const uint32_t left = field.every - field.step % field.every;
    give(ZO_LINK_CMD_TRAIN, left < field.steps - field.step ? left : field.steps - field.step, 4u);
}

/* Accuracy on the run's split, as `train` measures it (before training and after each
 * chunk); without a test or val split, on at once. */
static void measure_then_train(void)
{
    if (field.split == FIELD_NO_SPLIT) {
        next_chunk();
    } else {
        give(ZO_LINK_CMD_ACCURACY, field.split, 1u);
    }
}

/* ---- boot: the image, the card's run, its slots ----------------------------------------- */

/* The header checks `train` makes on the host (host/image_fit.py) that zo_image_open does
 * not: the model the image was packed for, its input quantization. */
static int image_fits(const uint8_t *h)
{
    static const uint8_t none[32] = {0};
    const uint32_t bits = zo_get_u32(h + IMAGE_OFF_SCALE);
    float scale;
    memcpy(&scale, &bits, 4u);
    if (memcmp(h + IMAGE_OFF_SHA256, none, 32u) != 0
        && memcmp(h + IMAGE_OFF_SHA256, field.model_sha256, 32u) != 0) {
        return 0;
    }
    if ((zo_get_u32(h + IMAGE_OFF_FLAGS) & 1u) == 0u || field.input_scale == 0.0f) {
        return 1;
    }
    const float diff = scale > field.input_scale ? scale - field.input_scale
                                                 : field.input_scale - scale;
    return diff <= 1e-6f * field.input_scale
           && (int32_t)zo_get_u32(h + IMAGE_OFF_ZERO_POINT) == field.input_zero_point;
}

/* The status record found on the card: another build's run is not touched, a complete one
 * is said again. */
static void check_status(void)
{
    const int found = zo_field_status_read(&field.card);
    const uint8_t *s = field.card.sector;
    if (found < 0) {
        stop(found, 0u, " reading the status record");
    }
    if (!found) {
        return;
    }
    if (memcmp(s + ZO_FIELD_OFF_IDENTITY + ZO_FIELD_RUN_FIRST,
               field.identity + ZO_FIELD_RUN_FIRST, ZO_FIELD_RUN_END - ZO_FIELD_RUN_FIRST) != 0) {
        field.ours = 0;
        stop(ZO_FIELD_ERR_OTHER_RUN, 0u, "");
    }
    field.boots = zo_get_u32(s + ZO_FIELD_OFF_BOOTS);
    if (zo_get_u32(s + ZO_FIELD_OFF_STATE) == ZO_FIELD_STATE_COMPLETE) {
        zo_log_line l;
        zo_line_start(&l);
        field_line_status(&l, ZO_FIELD_ERR_DONE);
        zo_line_u64(&l, ": the card's run completed its ", zo_get_u32(s + ZO_FIELD_OFF_STEP));
        zo_line_u64(&l, " steps, accuracy ", zo_get_u32(s + ZO_FIELD_OFF_CORRECT));
        zo_line_u64(&l, " of ", zo_get_u32(s + ZO_FIELD_OFF_OF));
        field_say(l.text);
        platform_exit(0);
    }
}

/* After O: the image is this model's, the area holds a field run, and the run goes on from
 * its newest checkpoint (L) or starts (R). */
static void open_run(void)
{
    uint8_t *h = field.card.sector;
    zo_log_line l;
    uint8_t e[ZO_FIELD_ENTRY_BYTES];
    int rc = zo_blockdev_read(0u, 1u, h);
    if (rc != ZO_BLOCKDEV_OK) {
        stop(rc, 0u, " reading the image header");
    }
    const int fits = image_fits(h);
    const uint32_t test = zo_get_u32(h + IMAGE_OFF_SPLITS + 16u * ZO_SPLIT_TEST + 4u);
    const uint32_t val = zo_get_u32(h + IMAGE_OFF_SPLITS + 16u * ZO_SPLIT_VAL + 4u);
    field.split = test ? ZO_SPLIT_TEST : val ? ZO_SPLIT_VAL : FIELD_NO_SPLIT;
    field.split_count = test ? test : val;
    rc = zo_field_card_init(&field.card, zo_get_u32(h + IMAGE_OFF_AREA_LBA),
                            zo_get_u32(h + IMAGE_OFF_AREA_SECTORS), field.slot);
    if (field.card.status != 0u) {
        check_status();
    }
    if (!fits) {
        stop(ZO_FIELD_ERR_IMAGE, 0u, "");
    }
    if (rc != ZO_FIELD_OK) {
        zo_line_start(&l);
        zo_line_u64(&l, "the checkpoint area has ", zo_get_u32(h + IMAGE_OFF_AREA_SECTORS));
        zo_line_u64(&l, " sectors, a field run needs ", zo_field_area_sectors(field.slot));
        field_say(l.text);
        stop(rc, 0u, "");
    }
    int best_lost = 0;
    field.step = 0u;
    rc = zo_field_log_scan(&field.card);
    const int resume = rc != ZO_BLOCKDEV_OK ? rc : zo_field_restore(
        &field.card, field.model_sha256, field.guard, &field.step, &best_lost);
    if (resume < 0) {
        stop(resume, 0u, " restoring the checkpoint slots");
    }
    if (best_lost) {
        zo_line_start(&l);
        field_line_status(&l, ZO_FIELD_ERR_BEST);
        zo_line_u64(&l, ": the guard's best restarts from the checkpoint of step ", field.step);
        field_say(l.text);
        field_entry(e, ZO_FIELD_LOG_FAULT, field.step, 0u, 0u, (uint32_t)ZO_FIELD_ERR_BEST);
        field_log(e);
    }
    field.boots += 1u;
    field.loss_sum = 0;
    field.loss_steps = 0u;
    field.new_best = 0;
    field_entry(e, ZO_FIELD_LOG_START, field.step, 0u, 0u, field.boots);
    field_log(e);
    rc = write_status(ZO_FIELD_STATE_TRAINING, 0, 0u);
    if (rc != ZO_BLOCKDEV_OK) {
        stop(rc, 0u, " writing the status record");
    }
    zo_line_start(&l);
    zo_line_u64(&l, resume ? "resuming from step " : "a new run of ",
                resume ? field.step : field.steps);
    zo_line_text(&l, resume ? " (the newest checkpoint that verifies)" : " steps");
    zo_line_u64(&l, ", boot ", field.boots);
    field_say(l.text);
    give(resume ? ZO_LINK_CMD_LOAD : ZO_LINK_CMD_RESET, 0u, 0u);
}

/* After S: the new checkpoint into both twins (the best first, when it changed), then the
 * status record and the log say so. */
static int keep_checkpoint(uint32_t bytes)
{
    int rc = ZO_BLOCKDEV_OK;
    uint8_t e[ZO_FIELD_ENTRY_BYTES];
    zo_log_line l;
    if (field.new_best) {
        rc = zo_field_slot_copy(&field.card, ZO_FIELD_BEST, ZO_FIELD_BEST_COPY, bytes);
    }
    if (rc == ZO_BLOCKDEV_OK) {
        rc = zo_field_slot_copy(&field.card, ZO_FIELD_RUN, ZO_FIELD_RUN_COPY, bytes);
    }
    if (rc == ZO_BLOCKDEV_OK) {
        rc = write_status(ZO_FIELD_STATE_TRAINING, 0, 0u);
    }
    if (rc != ZO_BLOCKDEV_OK) {
        return rc;
    }
    field.new_best = 0;
    field.attempts = 0u;
    const int64_t mean = field.loss_steps ? field.loss_sum / (int64_t)field.loss_steps : 0;
    field_entry(e, ZO_FIELD_LOG_CHECKPOINT, field.step, field.correct, field.split_count,
                field.loss_steps);
    field_put_i64(e + ZO_FIELD_ENTRY_LOSS, mean);
    zo_put_f32(e + ZO_FIELD_ENTRY_LR, field.lr);
    field_log(e);
    zo_line_start(&l);
    zo_line_u64(&l, "checkpoint at step ", field.step);
    zo_line_u64(&l, " of ", field.steps);
    field_line_fixed(&l, ": mean loss ", field_q16(mean), 4u);
    if (field.split != FIELD_NO_SPLIT) {
        zo_line_text(&l, field.split == ZO_SPLIT_TEST ? ", test " : ", validation ");
        zo_line_u64(&l, "", field.correct);
        zo_line_u64(&l, " of ", field.split_count);
    }
    field_say(l.text);
    field.loss_sum = 0;
    field.loss_steps = 0u;
    return ZO_BLOCKDEV_OK;
}

/* ---- DONE: what the command did decides the next one ------------------------------------ */

static const char *doing(uint8_t command)
{
    switch (command) {
    case ZO_LINK_CMD_OPEN:
        return " opening the image";
    case ZO_LINK_CMD_SELECT:
        return " selecting the block";
    case ZO_LINK_CMD_TRAIN:
        return " training";
    case ZO_LINK_CMD_SAVE:
        return " saving the checkpoint";
    case ZO_LINK_CMD_LOAD:
        return " loading the checkpoint";
    case ZO_LINK_CMD_ACCURACY:
        return " measuring accuracy";
    default:
        return " resetting the parameters";
    }
}

/* The card failed (its block device, or a transfer through it): worth trying again. */
static int card_error(int32_t status)
{
    return (status < ZO_BLOCKDEV_OK && status > ZO_IMAGE_ERR_IO)
           || (status <= ZO_BLOCKDEV_ERR_NO_CARD && status > ZO_BLOCKDEV_ERR_NO_CARD - 10)
           || status == ZO_IMAGE_ERR_IO || status == ZO_TRAIN_ERR_IO;
}

/* A command failed: a card error is tried again from the last checkpoint (the card attached
 * anew, the image opened again), anything else stops the field. */
static void failed(uint8_t command, int32_t status, uint32_t value)
{
    zo_log_line l;
    if (status == ZO_IMAGE_ERR_IO || status == ZO_TRAIN_ERR_IO) {
        /* the reader and the checkpoint stream keep only that the card failed: asked
         * again, the card names how (no card, a timeout, ...), unless it recovered */
        const int rc = zo_blockdev_read(0u, 1u, field.card.sector);
        status = rc != ZO_BLOCKDEV_OK ? rc : status;
    }
    if (!card_error(status) || field.attempts + 1u >= FIELD_ATTEMPTS) {
        stop(status, value, doing(command));
    }
    field.attempts += 1u;
    zo_line_start(&l);
    field_line_status(&l, status);
    zo_line_text(&l, doing(command));
    zo_line_u64(&l, "; again from the last checkpoint, attempt ", field.attempts + 1u);
    zo_line_u64(&l, " of ", FIELD_ATTEMPTS);
    field_say(l.text);
    const int rc = zo_blockdev_attach(FIELD_CARD_PATH);
    if (rc != ZO_BLOCKDEV_OK) {
        stop(rc, 0u, " attaching the card");
    }
    field.trained = 0;
    give(ZO_LINK_CMD_OPEN, 0u, 0u);
}

int zo_link_done(uint8_t command, int32_t status, uint32_t value, uint32_t cycles)
{
    uint8_t e[ZO_FIELD_ENTRY_BYTES];
    zo_log_line l;
    (void)cycles;
    if (status == 0 && command == ZO_LINK_CMD_SAVE) {
        status = keep_checkpoint(value);
    }
    if (status != 0) {
        failed(command, status, value);
        return ZO_LINK_OK;
    }
    switch (command) {
    case ZO_LINK_CMD_OPEN: /* value: the image's training records, which may set T */
        field.steps = zo_train_run_steps(&training_models[0], value);
        field.every = field.steps / 10u > 1u ? field.steps / 10u : 1u; /* `train`'s default */
        open_run();
        break;
    case ZO_LINK_CMD_RESET:
        if (field.selects_block) {
            field_say("selecting the block to train: a trial of each block");
            give(ZO_LINK_CMD_SELECT, 0u, 0u);
        } else {
            measure_then_train();
        }
        break;
    case ZO_LINK_CMD_SELECT:
        field_entry(e, ZO_FIELD_LOG_BLOCK, 0u, 0u, 0u, value);
        field_log(e);
        zo_line_start(&l);
        zo_line_u64(&l, "training block ", value);
        field_say(l.text);
        measure_then_train();
        break;
    case ZO_LINK_CMD_ACCURACY:
        field.correct = value;
        if (field.trained) {
            give(ZO_LINK_CMD_SAVE, 0u, 0u);
        } else {
            field_entry(e, ZO_FIELD_LOG_EVALUATION, field.step, value, field.split_count, 0u);
            field_log(e);
            zo_line_start(&l);
            zo_line_u64(&l, "before training: ", value);
            zo_line_u64(&l, " of ", field.split_count);
            zo_line_text(&l, field.split == ZO_SPLIT_TEST ? " test records right"
                                                        : " validation records right");
            field_say(l.text);
            next_chunk();
        }
        break;
    case ZO_LINK_CMD_TRAIN:
        /* fewer steps than asked, and no error: the guard ended the run (its STOP event, or
         * a run resumed after it, whose T trains nothing) */
        field.guard_stopped = value < field.step + zo_get_u32(field.command + 1);
        field.step = value;
        field.trained = 1;
        if (field.split == FIELD_NO_SPLIT) {
            give(ZO_LINK_CMD_SAVE, 0u, 0u);
        } else {
            give(ZO_LINK_CMD_ACCURACY, field.split, 1u);
        }
        break;
    case ZO_LINK_CMD_SAVE:
        field.trained = 0;
        next_chunk();
        break;
    default: /* L */
        field.step = value;
        next_chunk();
        break;
    }
    return ZO_LINK_OK;
}

/* ---- HELLO and NEXT --------------------------------------------------------------------- */

/* HELLO: who trains, and the card attached. */
int zo_link_hello(const zo_link_identity *id)
{
    zo_link_pack_hello(id, id->flags, field.identity); /* the status record keeps it */
    field.model_sha256 = id->model_sha256;
    field.input_scale = id->input_scale;
    field.input_zero_point = id->input_zero_point;
    field.slot = (id->checkpoint_bytes + ZO_SECTOR_BYTES - 1u) / ZO_SECTOR_BYTES;
    field.guard = (id->flags & ZO_LINK_FLAG_GUARD) != 0u;
    field.selects_block = id->mode == 1u && id->block == ZO_LINK_NO_BLOCK;
    field.ours = 1;
    const int rc = zo_blockdev_attach(FIELD_CARD_PATH);
    if (rc != ZO_BLOCKDEV_OK) {
        stop(rc, 0u, " attaching the card");
    }
    give(ZO_LINK_CMD_OPEN, 0u, 0u);
    return ZO_LINK_OK;
}

int zo_link_next(zo_link_frame *command)
{
    memset(command, 0, sizeof *command);
    command->type = ZO_LINK_NEXT | ZO_LINK_RESPONSE;
    command->len = field.command_len;
    command->payload = field.command;
    return ZO_LINK_OK;
}

