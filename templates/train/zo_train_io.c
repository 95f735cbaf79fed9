/*
 * Block-device glue of the training engine: a sector-buffered byte stream over the image's
 * checkpoint area, so a checkpoint of any size is written and read with one 512-byte buffer.
 */
#include <string.h>

#include "zo_train_io.h"

int zo_image_train_sample(void *context, uint32_t index, uint8_t *input, int32_t *label)
{
    return zo_image_read_sample((zo_image *)context, ZO_SPLIT_TRAIN, index, input, label);
}

typedef struct {
    zo_image *img;
    uint32_t first; /* the slot's first sector */
    uint32_t lba;  /* next sector of the checkpoint area */
    uint32_t fill; /* bytes used (writing) or consumed (reading) in img->sector */
} sector_stream;

static int stream_put(void *context, const uint8_t *bytes, uint32_t n)
{
    sector_stream *st = (sector_stream *)context;
    while (n) {
        uint32_t take = ZO_SECTOR_BYTES - st->fill;
        take = take < n ? take : n;
        memcpy(st->img->sector + st->fill, bytes, take);
        st->fill += take;
        bytes += take;
        n -= take;
        if (st->fill == ZO_SECTOR_BYTES) {
            if (zo_blockdev_write(st->lba++, 1u, st->img->sector) != 0) {
                return -1;
            }
            st->fill = 0;
        }
    }
    return 0;
}

static int stream_get(void *context, uint8_t *bytes, uint32_t n)
{
    sector_stream *st = (sector_stream *)context;
    while (n) {
        if (st->fill == ZO_SECTOR_BYTES) {
            if (zo_blockdev_read(st->lba++, 1u, st->img->sector) != 0) {
                return -1;
            }
            st->fill = 0;
        }
        uint32_t take = ZO_SECTOR_BYTES - st->fill;
        take = take < n ? take : n;
        memcpy(bytes, st->img->sector + st->fill, take);
        st->fill += take;
        bytes += take;
        n -= take;
    }
    return 0;
}

static void stream_rewind(void *context)
{
    sector_stream *st = (sector_stream *)context;
    st->lba = st->first;
    st->fill = ZO_SECTOR_BYTES;
}

static int fits(const zo_train_model *m, const zo_image *img, uint32_t slot)
{
    return (uint64_t)(slot + 1u) * m->slot_sectors <= img->checkpoint_sectors
           && (uint64_t)m->slot_sectors * ZO_SECTOR_BYTES >= zo_checkpoint_bytes(m);
}

int zo_checkpoint_to_image(const zo_train_model *m, const zo_train_state *s, zo_image *img,
                           uint32_t slot)
{
    if (!fits(m, img, slot)) {
        return ZO_TRAIN_ERR_SPACE;
    }
    const uint32_t first = img->checkpoint_lba + slot * m->slot_sectors;
    sector_stream st = {img, first, first, 0u};
    int rc = zo_checkpoint_save(m, s, stream_put, &st);
    if (rc == ZO_TRAIN_OK && st.fill) { /* zero the rest of the last sector */
        memset(img->sector + st.fill, 0, ZO_SECTOR_BYTES - st.fill);
        rc = zo_blockdev_write(st.lba, 1u, img->sector) == 0 ? ZO_TRAIN_OK : ZO_TRAIN_ERR_IO;
    }
    return rc;
}

int zo_checkpoint_from_image(const zo_train_model *m, zo_train_state *s, zo_image *img,
                             uint32_t slot)
{
    if (!fits(m, img, slot)) {
        return ZO_TRAIN_ERR_SPACE;
    }
    sector_stream st;
    st.img = img;
    st.first = img->checkpoint_lba + slot * m->slot_sectors;
    stream_rewind(&st);
    return zo_checkpoint_load(m, s, stream_get, stream_rewind, &st);
}
