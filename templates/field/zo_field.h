/*
 * zo_field.h - what a field trainer (`build --data-source sdcard`, docs/sdcard.md) keeps in the
 * image's checkpoint area on its card, so a power cut at any write loses at most the steps
 * since the last checkpoint (docs/image.md "The checkpoint area of a field run"; Python twin:
 * zocodegen/formats/field.py, checked against these values by tests/test_field.py).
 *
 * Sectors from the area's first, S = slot sectors (the firmware's largest checkpoint):
 *
 *   [0, S)        run slot: what command S writes and L reads (main.c, as over the link)
 *   [S, 2S)       best slot: the training guard's best (zo_guard.c, as over the link)
 *   [2S, 3S)      copy of the run slot, made after each checkpoint
 *   [3S, 4S)      copy of the best slot, made after each checkpoint that follows a new best
 *   end-2-L ..    run log: L sectors of 64-byte entries, a ring ordered by sequence number
 *   end-2, end-1  status record, two copies written in turn (the higher sequence wins)
 *
 * A slot is only ever written while its twin holds a checkpoint that verifies and that the
 * newest status names (write, then copy), so one of the two always verifies: the firmware
 * loads the newer twin whose CRC-32 verifies, and the best twin of the step the run names.
 */
#ifndef ZO_FIELD_H
#define ZO_FIELD_H

#include <stdint.h>

#include "zo_blockdev.h" /* ZO_SECTOR_BYTES */
#include "zo_status.h"   /* ZO_FIELD_ERR_* */

#define ZO_FIELD_SLOTS 4u
#define ZO_FIELD_RUN 0u       /* main.c's ZO_SLOT_RUN */
#define ZO_FIELD_BEST 1u      /* main.c's ZO_SLOT_BEST */
#define ZO_FIELD_RUN_COPY 2u
#define ZO_FIELD_BEST_COPY 3u
#define ZO_FIELD_LOG_SECTORS 128u
#define ZO_FIELD_STATUS_SECTORS 2u
#define ZO_FIELD_ENTRY_BYTES 64u
#define ZO_FIELD_ENTRIES_PER_SECTOR (ZO_SECTOR_BYTES / ZO_FIELD_ENTRY_BYTES)

/* The status record (one sector; all integers little endian). */
#define ZO_FIELD_MAGIC "ZOFIELD1"
#define ZO_FIELD_VERSION 1u
#define ZO_FIELD_OFF_VERSION 8u
#define ZO_FIELD_OFF_SEQUENCE 12u
#define ZO_FIELD_OFF_STATE 16u       /* ZO_FIELD_STATE_* */
#define ZO_FIELD_OFF_STATUS 20u      /* i32: 0, or why the run stopped */
#define ZO_FIELD_OFF_VALUE 24u       /* the record a record problem names */
#define ZO_FIELD_OFF_STEP 28u        /* the step of the newest checkpoint */
#define ZO_FIELD_OFF_STEPS 32u       /* the run's T */
#define ZO_FIELD_OFF_EVERY 36u       /* steps between checkpoints */
#define ZO_FIELD_OFF_SLOT 40u        /* S */
#define ZO_FIELD_OFF_LOG 44u         /* L */
#define ZO_FIELD_OFF_BOOTS 48u       /* boots of this run */
#define ZO_FIELD_OFF_CORRECT 52u     /* the last accuracy measurement ... */
#define ZO_FIELD_OFF_OF 56u          /* ... of this many records */
#define ZO_FIELD_OFF_SPLIT 60u       /* ... of this split (ZO_SPLIT_*) */
#define ZO_FIELD_OFF_IDENTITY 64u    /* HELLO's identity (docs/link.md), ZO_LINK_HELLO_BYTES */
#define ZO_FIELD_OFF_CRC 508u        /* CRC-32 of bytes 0 .. 507 */
/* HELLO bytes a continued run must share: model hash .. trainable layers (not the platform's
 * clock or name: a card goes on training on another board, or under QEMU). */
#define ZO_FIELD_RUN_FIRST 8u
#define ZO_FIELD_RUN_END 96u

#define ZO_FIELD_STATE_TRAINING 1u
#define ZO_FIELD_STATE_COMPLETE 2u
#define ZO_FIELD_STATE_STOPPED 3u

/* A run log entry (64 bytes). Kinds 1..3 are the link's EVENT kinds (ZO_EVENT_*). */
#define ZO_FIELD_LOG_START 16u      /* a boot: step = where it starts, value = boots */
#define ZO_FIELD_LOG_BLOCK 17u      /* value = the sparse block chosen */
#define ZO_FIELD_LOG_EVALUATION 18u /* correct of `of` before training (step 0) */
#define ZO_FIELD_LOG_CHECKPOINT 19u /* correct of `of` after the chunk; loss = its mean */
#define ZO_FIELD_LOG_END 20u        /* the run is complete */
#define ZO_FIELD_LOG_FAULT 21u      /* value = status, correct = the record it names */
#define ZO_FIELD_ENTRY_SEQUENCE 0u
#define ZO_FIELD_ENTRY_KIND 4u
#define ZO_FIELD_ENTRY_DECISION 5u
#define ZO_FIELD_ENTRY_STEP 8u
#define ZO_FIELD_ENTRY_CORRECT 12u
#define ZO_FIELD_ENTRY_OF 16u
#define ZO_FIELD_ENTRY_HALVINGS 20u
#define ZO_FIELD_ENTRY_ETA_PPM 24u
#define ZO_FIELD_ENTRY_VALUE 28u     /* steps of a trial or a mean, a block, a status */
#define ZO_FIELD_ENTRY_LOSS 32u      /* i64 Q16: a check's sum, a checkpoint's mean */
#define ZO_FIELD_ENTRY_LR 40u        /* f32: eta of the chunk's last step */
#define ZO_FIELD_ENTRY_CRC 60u       /* CRC-32 of bytes 0 .. 59 */

/* The area on the card: where each part starts. */
typedef struct {
    uint32_t first;       /* the area's first sector (image header checkpoint_lba) */
    uint32_t slot;        /* S */
    uint32_t log;         /* first sector of the run log; 0 when the area is too small */
    uint32_t status;      /* first sector of the two status records; 0: not even they fit */
    uint32_t next_entry;  /* sequence number of the next log entry */
    uint32_t sequence;    /* of the newest status record written or found */
    uint8_t sector[ZO_SECTOR_BYTES];
} zo_field_card;

/* Sectors the area needs for slots of `slot` sectors. */
uint32_t zo_field_area_sectors(uint32_t slot);

/* The parts of an area of `sectors` sectors from `first`; ZO_FIELD_ERR_AREA when they do not
 * fit. The status records sit at the area's end even then, so the refusal can be kept. */
int zo_field_card_init(zo_field_card *c, uint32_t first, uint32_t sectors, uint32_t slot);

/* What a slot holds: a checkpoint of the model whose CRC-32 verifies, or nothing. */
typedef struct {
    int valid;
    uint32_t bytes;      /* the checkpoint's length */
    uint32_t step;
    uint32_t best_step;  /* the guard's, ZO_TRAIN_NO_BEST without one */
    uint32_t crc;
} zo_field_slot;

int zo_field_slot_read(zo_field_card *c, uint32_t slot, const uint8_t *model_sha256,
                       zo_field_slot *out);

/* Slot `from`'s checkpoint (`bytes` long) into slot `to`. */
int zo_field_slot_copy(zo_field_card *c, uint32_t from, uint32_t to, uint32_t bytes);

/* At boot: both run twins made to hold the newer checkpoint that verifies and, with the
 * guard, both best twins the best of the step it names. 1 with *step set when there is one
 * (load it), 0 when there is none (a new run), < 0 a card error. *best_lost: neither best
 * twin held that best; both now hold the run's checkpoint, as `train` rebuilds a lost
 * best.bin. */
#define ZO_FIELD_NO_BEST 0xFFFFFFFFu /* zo_train.h's ZO_TRAIN_NO_BEST: no guard check yet */
int zo_field_restore(zo_field_card *c, const uint8_t *model_sha256, int guard, uint32_t *step,
                     int *best_lost);

/* The newer status record that verifies into c->sector (1), or none (0, c->sequence 0);
 * < 0 a block device error. */
int zo_field_status_read(zo_field_card *c);

/* c->sector as the next status record (magic, version, sequence and CRC set here). */
int zo_field_status_write(zo_field_card *c);

/* Finds the next log entry's sequence number (c->next_entry). */
int zo_field_log_scan(zo_field_card *c);

/* Appends a 64-byte entry (sequence and CRC set here); uses c->sector. */
int zo_field_log_append(zo_field_card *c, uint8_t *entry);

#endif /* ZO_FIELD_H */
