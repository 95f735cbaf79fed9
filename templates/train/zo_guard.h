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
#include "zo_train.h"

/* A line for the host's log (docs/link.md "Guard lines"). */
typedef void (*zo_guard_log)(const char *line);

/* Before the first step of a run: the lr trials (--lr auto) and the guard's baseline check.
 * Nothing to do when the run is under way (resumed from a checkpoint). */
int zo_guard_begin(const zo_train_model *m, zo_train_state *s, zo_image *img,
                   zo_guard_log log);

/* After each step: the check when it is due; a new best goes to the best slot, a fall
 * restores it and halves eta, and after the last step the best parameters are the result. */
int zo_guard_after_step(const zo_train_model *m, zo_train_state *s, zo_image *img,
                        zo_guard_log log);

#endif /* ZO_GUARD_H */
