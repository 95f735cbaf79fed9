/*
 * blockdev_link.c - zo_blockdev.h backend of every generated firmware (native, QEMU, boards):
 * the host serves the sectors over the host link (docs/link.md, READ / WRITE). They come
 * from the image given to the host tool (--image) with the run's checkpoint in its checkpoint
 * area; the host refuses writes outside that area (ZO_BLOCKDEV_ERR_READ_ONLY).
 *
 * There is nothing to open: the medium is attached as long as the host answers, so
 * zo_blockdev_attach() ignores its path. Transfers are split into requests of at most
 * ZO_LINK_MAX_SECTORS sectors.
 *
 * A host status is 0 or the ZO_BLOCKDEV_ERR_* code it carries, and is returned as it is.
 * Anything else means the transfer did not happen and is ZO_BLOCKDEV_ERR_IO; after a RESTART
 * answer zo_link_restarting() tells the command loop to abandon its command.
 */
#include "zo_blockdev.h"
#include "zo_link.h"

static int blockdev_status(int rc)
{
    if (rc <= ZO_BLOCKDEV_OK && rc >= ZO_BLOCKDEV_ERR_ARG) {
        return rc;
    }
    return ZO_BLOCKDEV_ERR_IO;
}

/* The checks both transfers share: a buffer, and no LBA beyond 2^32 - 1. */
static int blockdev_check(uint32_t lba, uint32_t count, const uint8_t *buffer)
{
    if (count == 0u) {
        return ZO_BLOCKDEV_OK;
    }
    if (buffer == 0) {
        return ZO_BLOCKDEV_ERR_ARG;
    }
    return lba <= UINT32_MAX - (count - 1u) ? ZO_BLOCKDEV_OK : ZO_BLOCKDEV_ERR_RANGE;
}

int zo_blockdev_attach(const char *path)
{
    (void)path;
    return ZO_BLOCKDEV_OK;
}

int zo_blockdev_read(uint32_t lba, uint32_t count, uint8_t *dst)
{
    int rc = blockdev_check(lba, count, dst);
    while (rc == ZO_BLOCKDEV_OK && count > 0u) {
        const uint32_t n = count < ZO_LINK_MAX_SECTORS ? count : ZO_LINK_MAX_SECTORS;
        rc = blockdev_status(zo_link_read(lba, n, dst));
        lba += n;
        count -= n;
        dst += n * ZO_SECTOR_BYTES;
    }
    return rc;
}

int zo_blockdev_write(uint32_t lba, uint32_t count, const uint8_t *src)
{
    int rc = blockdev_check(lba, count, src);
    while (rc == ZO_BLOCKDEV_OK && count > 0u) {
        const uint32_t n = count < ZO_LINK_MAX_SECTORS ? count : ZO_LINK_MAX_SECTORS;
        rc = blockdev_status(zo_link_write(lba, n, src));
        lba += n;
        count -= n;
        src += n * ZO_SECTOR_BYTES;
    }
    return rc;
}
