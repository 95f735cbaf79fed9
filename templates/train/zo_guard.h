/*
 * The training guard and --lr auto on the device (docs/training.md "Training guard"; numpy
 * twin: zocodegen/training/guard.py and simulator.Guard). A device in the field has nobody
 * to tune eta or to notice a run going wrong: it measures itself on the image's validation
 * split, keeps its best parameters in the checkpoint area's second slot, rolls back and
 * halves eta when validation falls, and ends with the best validated parameters. Every
 * decision is on integers, so it is the simulator's decision, bit for bit.
 */
#ifndef ZO_GUARD_H
#define ZO_GUARD_H

#include "zo_image.h"
#include "zo_link_messages.h" /* ZO_EVENT_*, ZO_DECISION_* */
#include "zo_train.h"

/* A decision for the host, the fields of an EVENT message (docs/link.md "Events"). */
typedef struct {
    uint8_t kind;       /* ZO_EVENT_GUARD_CHECK, _LR_TRIAL, _LR_CHOSEN, _CONFIRM, _STOP */
    uint8_t decision;   /* a guard check's ZO_DECISION_* */
    uint32_t step;      /* a guard check's step */
    uint32_t correct;   /* validation records classified right ... */
    uint32_t of;        /* ... of this many */
    int64_t loss_q16;   /* their summed Q16 cross-entropy */
    uint32_t halvings;  /* eta halvings so far (guard checks) */
    uint32_t eta_ppm;   /* --lr auto: the candidate tried or chosen, in millionths */
    uint32_t steps;     /* --lr auto: steps of the trial; STOP: steps since the best */
} zo_guard_event;

typedef void (*zo_guard_report)(const zo_guard_event *event);

/* A measurement of records: how many the model classifies right and their loss. */
typedef struct {
    uint32_t correct; /* argmax of the logits == label, lowest index on ties */
    int64_t loss;     /* sum of Q16 cross-entropy losses */
} zo_score;

/* Records first .. first + records - 1 of a split through the model: the guard's checks (the
 * validation split), its confirmation and the block trials (the training split's last). */
int zo_measure(const zo_train_model *m, zo_image *img, int split, uint32_t first,
               uint32_t records, zo_score *out);

/* Before the first step of a run: the lr trials (--lr auto) and the guard's baseline check.
 * Nothing to do when the run is under way (resumed from a checkpoint). */
int zo_guard_begin(const zo_train_model *m, zo_train_state *s, zo_image *img,
                   zo_guard_report report);

/* After each step: the check when it is due; a new best goes to the best slot, a fall
 * restores it and halves eta, and after the last step the best parameters are the result.
 * A check that finds no new best for the build's patience ends the run there (a STOP event,
 * then the last step's rules; docs/training.md "Training guard"). */
int zo_guard_after_step(const zo_train_model *m, zo_train_state *s, zo_image *img,
                        zo_guard_report report);

/* Whether the guard has ended the run (its patience): no step may follow. */
int zo_guard_stopped(const zo_train_state *s);

#endif /* ZO_GUARD_H */
