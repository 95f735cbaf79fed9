/*
 * The field trainer's checkpoint area on the card (zo_field.h): the slots and their copies,
 * the status record and the run log, read and written one sector at a time through the
 * block device.
 */
#include <string.h>

#include "zo_bytes.h"
#include "zo_checkpoint_format.h"
#include "zo_crc32.h"
#include "zo_field.h"

uint32_t zo_field_area_sectors(uint32_t slot)
{
    return ZO_FIELD_SLOTS * slot + ZO_FIELD_LOG_SECTORS + ZO_FIELD_STATUS_SECTORS;
}

int zo_field_card_init(zo_field_card *c, uint32_t first, uint32_t sectors, uint32_t slot)
{
    const int fits = sectors >= zo_field_area_sectors(slot);
    c->first = first;
    c->slot = slot;
    c->status = sectors >= ZO_FIELD_STATUS_SECTORS ? first + sectors - ZO_FIELD_STATUS_SECTORS
                                                   : 0u; /* 0: not even room to say so */
    c->log = fits ? c->status - ZO_FIELD_LOG_SECTORS : 0u; /* 0: no log in a small area */
    c->next_entry = 0u;
    c->sequence = 0u;
    return fits ? ZO_FIELD_OK : ZO_FIELD_ERR_AREA;
}

static uint32_t slot_lba(const zo_field_card *c, uint32_t slot)
{
    return c->first + slot * c->slot;
}

int zo_field_slot_read(zo_field_card *c, uint32_t slot, const uint8_t *model_sha256,
                       zo_field_slot *out)
{
    const uint32_t lba = slot_lba(c, slot);
    uint8_t stored[4];
    uint32_t crc = 0u;
    uint32_t pos = 0u;
    memset(out, 0, sizeof *out);
    int rc = zo_blockdev_read(lba, 1u, c->sector);
    if (rc != ZO_BLOCKDEV_OK) {
        return rc;
    }
    const uint32_t bytes = zo_get_u32(c->sector + ZO_CKPT_OFF_BYTES);
    if (memcmp(c->sector, ZO_CKPT_MAGIC, ZO_CKPT_MAGIC_BYTES) != 0
        || zo_get_u32(c->sector + ZO_CKPT_OFF_VERSION) != ZO_CKPT_VERSION
        || memcmp(c->sector + ZO_CKPT_OFF_SHA256, model_sha256, 32u) != 0
        || bytes < ZO_CKPT_HEADER_BYTES + 4u || bytes > c->slot * ZO_SECTOR_BYTES) {
        return ZO_BLOCKDEV_OK; /* never written, another model's, or torn in its header */
    }
    out->bytes = bytes;
    out->step = zo_get_u32(c->sector + ZO_CKPT_OFF_STEP);
    out->best_step = zo_get_u32(c->sector + ZO_CKPT_OFF_BEST_STEP);
    for (uint32_t s = 0u; pos < bytes; ++s) { /* the CRC-32 of all but the last 4 bytes */
        if (s > 0u && (rc = zo_blockdev_read(lba + s, 1u, c->sector)) != ZO_BLOCKDEV_OK) {
            return rc;
        }
        const uint32_t n = bytes - pos < ZO_SECTOR_BYTES ? bytes - pos : ZO_SECTOR_BYTES;
        const uint32_t left = pos < bytes - 4u ? bytes - 4u - pos : 0u;
        const uint32_t body = left < n ? left : n;
        crc = zo_crc32(crc, c->sector, body);
        for (uint32_t i = body; i < n; ++i) { /* the stored CRC may straddle two sectors */
            stored[pos + i - (bytes - 4u)] = c->sector[i];
        }
        pos += n;
    }
    out->crc = crc;
    out->valid = zo_get_u32(stored) == crc;
    return ZO_BLOCKDEV_OK;
}

int zo_field_slot_copy(zo_field_card *c, uint32_t from, uint32_t to, uint32_t bytes)
{
    const uint32_t sectors = (bytes + ZO_SECTOR_BYTES - 1u) / ZO_SECTOR_BYTES;
    for (uint32_t s = 0u; s < sectors; ++s) {
        int rc = zo_blockdev_read(slot_lba(c, from) + s, 1u, c->sector);
        if (rc == ZO_BLOCKDEV_OK) {
            rc = zo_blockdev_write(slot_lba(c, to) + s, 1u, c->sector);
        }
        if (rc != ZO_BLOCKDEV_OK) {
            return rc;
        }
    }
    return ZO_BLOCKDEV_OK;
}

/* Copy k (0 or 1) of the status record into c->sector; its sequence, 0 when it does not
 * verify. */
static int status_copy(zo_field_card *c, uint32_t k, uint32_t *sequence)
{
    *sequence = 0u;
    const int rc = zo_blockdev_read(c->status + k, 1u, c->sector);
    if (rc == ZO_BLOCKDEV_OK && memcmp(c->sector, ZO_FIELD_MAGIC, 8u) == 0
        && zo_get_u32(c->sector + ZO_FIELD_OFF_VERSION) == ZO_FIELD_VERSION
        && zo_get_u32(c->sector + ZO_FIELD_OFF_CRC)
               == zo_crc32(0u, c->sector, ZO_FIELD_OFF_CRC)) {
        *sequence = zo_get_u32(c->sector + ZO_FIELD_OFF_SEQUENCE);
    }
    return rc;
}

int zo_field_status_read(zo_field_card *c)
{
    uint32_t first, second;
    int rc = status_copy(c, 0u, &first);
    if (rc == ZO_BLOCKDEV_OK) {
        rc = status_copy(c, 1u, &second);
    }
    if (rc != ZO_BLOCKDEV_OK) {
        return rc;
    }
    c->sequence = first > second ? first : second;
    if (first > second) {
        rc = status_copy(c, 0u, &first); /* the sector holds copy 1: read copy 0 again */
    }
    return rc != ZO_BLOCKDEV_OK ? rc : c->sequence > 0u;
}

int zo_field_status_write(zo_field_card *c)
{
    c->sequence += 1u;
    memcpy(c->sector, ZO_FIELD_MAGIC, 8u);
    zo_put_u32(c->sector + ZO_FIELD_OFF_VERSION, ZO_FIELD_VERSION);
    zo_put_u32(c->sector + ZO_FIELD_OFF_SEQUENCE, c->sequence);
    zo_put_u32(c->sector + ZO_FIELD_OFF_CRC, zo_crc32(0u, c->sector, ZO_FIELD_OFF_CRC));
    /* in turn: the copy written now is never the one that holds the newest record */
    return zo_blockdev_write(c->status + (c->sequence & 1u), 1u, c->sector);
}

static int entry_valid(const uint8_t *e)
{
    return zo_get_u32(e + ZO_FIELD_ENTRY_CRC) == zo_crc32(0u, e, ZO_FIELD_ENTRY_CRC)
           && e[ZO_FIELD_ENTRY_KIND] != 0u;
}

int zo_field_log_scan(zo_field_card *c)
{
    c->next_entry = 0u;
    for (uint32_t s = 0u; s < ZO_FIELD_LOG_SECTORS; ++s) {
        const int rc = zo_blockdev_read(c->log + s, 1u, c->sector);
        if (rc != ZO_BLOCKDEV_OK) {
            return rc;
        }
        for (uint32_t k = 0u; k < ZO_FIELD_ENTRIES_PER_SECTOR; ++k) {
            const uint8_t *e = c->sector + k * ZO_FIELD_ENTRY_BYTES;
            const uint32_t sequence = zo_get_u32(e + ZO_FIELD_ENTRY_SEQUENCE);
            if (entry_valid(e) && sequence + 1u > c->next_entry) {
                c->next_entry = sequence + 1u;
            }
        }
    }
    return ZO_BLOCKDEV_OK;
}

int zo_field_log_append(zo_field_card *c, uint8_t *entry)
{
    const uint32_t place = c->next_entry % (ZO_FIELD_LOG_SECTORS * ZO_FIELD_ENTRIES_PER_SECTOR);
    const uint32_t lba = c->log + place / ZO_FIELD_ENTRIES_PER_SECTOR;
    zo_put_u32(entry + ZO_FIELD_ENTRY_SEQUENCE, c->next_entry);
    zo_put_u32(entry + ZO_FIELD_ENTRY_CRC, zo_crc32(0u, entry, ZO_FIELD_ENTRY_CRC));
    int rc = zo_blockdev_read(lba, 1u, c->sector);
    if (rc == ZO_BLOCKDEV_OK) {
        memcpy(c->sector + (place % ZO_FIELD_ENTRIES_PER_SECTOR) * ZO_FIELD_ENTRY_BYTES, entry,
               ZO_FIELD_ENTRY_BYTES);
        rc = zo_blockdev_write(lba, 1u, c->sector);
    }
    c->next_entry += 1u;
    return rc;
}

static int same(const zo_field_slot *a, const zo_field_slot *b)
{
    return a->valid && b->valid && a->step == b->step && a->crc == b->crc;
}

/* Both twins hold what `keep` (one of them) holds. */
static int mirror(zo_field_card *c, uint32_t slot, const zo_field_slot *mine, uint32_t twin,
                  const zo_field_slot *theirs, const zo_field_slot *keep)
{
    if (!same(mine, keep)) {
        return zo_field_slot_copy(c, twin, slot, keep->bytes);
    }
    return same(theirs, keep) ? ZO_BLOCKDEV_OK : zo_field_slot_copy(c, slot, twin, keep->bytes);
}

/* The guard's best of step `best` in both best slots; lost, both get the run's checkpoint
 * (`bytes` long), as `train` rebuilds a lost best.bin. */
static int restore_best(zo_field_card *c, const uint8_t *model_sha256, uint32_t best,
                        uint32_t bytes, int *best_lost)
{
    zo_field_slot a, b;
    int rc = zo_field_slot_read(c, ZO_FIELD_BEST, model_sha256, &a);
    if (rc == ZO_BLOCKDEV_OK) {
        rc = zo_field_slot_read(c, ZO_FIELD_BEST_COPY, model_sha256, &b);
    }
    if (rc != ZO_BLOCKDEV_OK) {
        return rc;
    }
    a.valid = a.valid && a.step == best;
    b.valid = b.valid && b.step == best;
    if (a.valid || b.valid) {
        return mirror(c, ZO_FIELD_BEST, &a, ZO_FIELD_BEST_COPY, &b, a.valid ? &a : &b);
    }
    *best_lost = 1;
    rc = zo_field_slot_copy(c, ZO_FIELD_RUN, ZO_FIELD_BEST, bytes);
    return rc != ZO_BLOCKDEV_OK ? rc : zo_field_slot_copy(c, ZO_FIELD_RUN, ZO_FIELD_BEST_COPY,
                                                          bytes);
}

int zo_field_restore(zo_field_card *c, const uint8_t *model_sha256, int guard, uint32_t *step,
                     int *best_lost)
{
    zo_field_slot a, b;
    *best_lost = 0;
    int rc = zo_field_slot_read(c, ZO_FIELD_RUN, model_sha256, &a);
    if (rc == ZO_BLOCKDEV_OK) {
        rc = zo_field_slot_read(c, ZO_FIELD_RUN_COPY, model_sha256, &b);
    }
    if (rc != ZO_BLOCKDEV_OK || (!a.valid && !b.valid)) {
        return rc;
    }
    const zo_field_slot *keep = a.valid && (!b.valid || a.step >= b.step) ? &a : &b;
    *step = keep->step;
    rc = mirror(c, ZO_FIELD_RUN, &a, ZO_FIELD_RUN_COPY, &b, keep);
    if (rc == ZO_BLOCKDEV_OK && guard && keep->best_step != ZO_FIELD_NO_BEST) {
        rc = restore_best(c, model_sha256, keep->best_step, keep->bytes, best_lost);
    }
    return rc != ZO_BLOCKDEV_OK ? rc : 1;
}
