/*
 * The training engine's data and checkpoints on the block device (DESIGN.md section 6):
 * samples are the image's train records, checkpoints live in the image's checkpoint area.
 */
#ifndef ZO_TRAIN_IO_H
#define ZO_TRAIN_IO_H

#include "zo_image.h"
#include "zo_train.h"

/* zo_sample_reader over the train split of an open image (context: zo_image *). */
int zo_image_train_sample(void *context, uint32_t index, uint8_t *input, int32_t *label);

/* The checkpoint area holds two slots of m->slot_sectors sectors: ZO_SLOT_RUN (what S writes
 * and L reads) and ZO_SLOT_BEST (the training guard's best validated parameters). */
#define ZO_SLOT_RUN 0u
#define ZO_SLOT_BEST 1u
int zo_checkpoint_to_image(const zo_train_model *m, const zo_train_state *s, zo_image *img,
                           uint32_t slot);
int zo_checkpoint_from_image(const zo_train_model *m, zo_train_state *s, zo_image *img,
                             uint32_t slot);

#endif /* ZO_TRAIN_IO_H */
