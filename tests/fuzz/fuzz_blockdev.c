/*
 * A block device over the fuzzer's bytes for the harnesses that read an image directly
 * (fuzz_image.c, fuzz_checkpoint.c): sector k is bytes [512 k, 512 k + 512) of the input,
 * zero-padded; reads past the end fail as a card's would (ZO_BLOCKDEV_ERR_RANGE); writes
 * are accepted and dropped (the parsers under test never read back what they wrote).
 */
#include <stddef.h>
#include <string.h>

#include "fuzz_blockdev.h"

static const uint8_t *medium;
static size_t medium_bytes;

void fuzz_blockdev_use(const uint8_t *data, size_t size)
{
    medium = data;
    medium_bytes = size;
}

uint32_t fuzz_blockdev_sectors(void)
{
    return (uint32_t)((medium_bytes + ZO_SECTOR_BYTES - 1u) / ZO_SECTOR_BYTES);
}

int zo_blockdev_attach(const char *path)
{
    (void)path;
    return ZO_BLOCKDEV_OK;
}

int zo_blockdev_read(uint32_t lba, uint32_t count, uint8_t *dst)
{
    if ((uint64_t)lba + count > fuzz_blockdev_sectors()) {
        return ZO_BLOCKDEV_ERR_RANGE;
    }
    for (uint32_t i = 0; i < count; ++i) {
        const size_t at = ((size_t)lba + i) * ZO_SECTOR_BYTES;
        const size_t have = medium_bytes - at < ZO_SECTOR_BYTES ? medium_bytes - at
                                                                : ZO_SECTOR_BYTES;
        memcpy(dst + (size_t)i * ZO_SECTOR_BYTES, medium + at, have);
        memset(dst + (size_t)i * ZO_SECTOR_BYTES + have, 0, ZO_SECTOR_BYTES - have);
    }
    return ZO_BLOCKDEV_OK;
}

int zo_blockdev_write(uint32_t lba, uint32_t count, const uint8_t *src)
{
    (void)src;
    return (uint64_t)lba + count > fuzz_blockdev_sectors() ? ZO_BLOCKDEV_ERR_RANGE
                                                           : ZO_BLOCKDEV_OK;
}
