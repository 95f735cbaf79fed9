/*
 * field.h - the field trainer's state and its reports, shared by field.c (the host on the
 * board: which command main.c gets next) and field_report.c (what main.c reports, turned into
 * lines on the UART and entries of the run log on the card). docs/sdcard.md.
 */
#ifndef FIELD_H
#define FIELD_H

#include <stdint.h>

#include "zo_field.h"
#include "zo_link.h"
#include "zo_log_line.h"

#define FIELD_NO_SPLIT 0xFFu

typedef struct {
    zo_field_card card;
    uint8_t identity[ZO_LINK_HELLO_BYTES]; /* HELLO's bytes, kept in the status record */
    const uint8_t *model_sha256;
    float input_scale;
    int32_t input_zero_point;
    uint32_t steps, every, slot;
    int guard, selects_block;
    uint32_t step;      /* completed steps, as the last T, L or the boot's choice said */
    uint32_t boots;
    uint32_t attempts;  /* card errors since the last checkpoint */
    int ours;           /* the card's status record is this run's (or there is none) */
    int trained;        /* a chunk ran since the last S: A then measures its result */
    int new_best;       /* the guard wrote its best slot since the last copy */
    int guard_stopped;  /* the last T trained fewer steps than asked: the guard's stop */
    uint8_t split;      /* where accuracy is measured: test, else val, else none */
    uint32_t split_count;
    uint32_t correct;   /* the last accuracy */
    int64_t loss_sum;   /* step losses (Q16) since the last checkpoint */
    uint32_t loss_steps;
    float lr;
    uint8_t command[5]; /* the COMMAND main.c asks for next */
    uint16_t command_len;
} field_run;

extern field_run field;

/* A line on the UART: "field: " text CR LF. */
void field_say(const char *text);
/* Appends key, then v / 10^decimals with that many decimals. */
void field_line_fixed(zo_log_line *l, const char *key, uint64_t v, uint32_t decimals);
/* Appends a status's name and code, e.g. "ZO_FIELD_ERR_AREA (-60)". */
void field_line_status(zo_log_line *l, int32_t status);
/* A Q16 loss in units of 1e-4 (what field_line_fixed prints with 4 decimals). */
uint64_t field_q16(int64_t q16);

/* A run log entry (zo_field.h) with its common fields; the rest are set by the caller. */
void field_entry(uint8_t *e, uint8_t kind, uint32_t step, uint32_t correct, uint32_t of,
                 uint32_t value);
void field_put_i64(uint8_t *p, int64_t v);
/* Appends it to the card's run log, when the card's run is this one. */
void field_log(uint8_t *e);

#endif /* FIELD_H */
