/*
 * blockdev_stdio.c - zo_blockdev.h backend for the native build (host gcc): the data image is
 * a file, accessed with stdio. Reading past the end of the file is ZO_BLOCKDEV_ERR_RANGE;
 * writing past it extends the file (as a card would not: keep writes inside the image's
 * checkpoint area).
 */
#include <limits.h>
#include <stdio.h>

#include "zo_blockdev.h"

static FILE *zo_bd_file = NULL;
static int zo_bd_writable = 0;

/* Byte offset of lba, or -1 when it does not fit fseek's long. */
static long zo_bd_offset(uint32_t lba, uint32_t count)
{
    unsigned long long end = ((unsigned long long)lba + count) * ZO_SECTOR_BYTES;
    if (end > (unsigned long long)LONG_MAX) {
        return -1L;
    }
    return (long)((unsigned long long)lba * ZO_SECTOR_BYTES);
}

int zo_blockdev_attach(const char *path)
{
    if (zo_bd_file != NULL) {
        (void)fclose(zo_bd_file);
        zo_bd_file = NULL;
    }
    if (path == NULL) {
        return ZO_BLOCKDEV_ERR_ARG;
    }
    zo_bd_file = fopen(path, "r+b");
    zo_bd_writable = 1;
    if (zo_bd_file == NULL) {
        zo_bd_file = fopen(path, "rb");
        zo_bd_writable = 0;
    }
    return zo_bd_file != NULL ? ZO_BLOCKDEV_OK : ZO_BLOCKDEV_ERR_OPEN;
}

int zo_blockdev_read(uint32_t lba, uint32_t count, uint8_t *dst)
{
    long offset;
    size_t want;
    size_t got;
    if (zo_bd_file == NULL) {
        return ZO_BLOCKDEV_ERR_NOT_ATTACHED;
    }
    if (count == 0u) {
        return ZO_BLOCKDEV_OK;
    }
    if (dst == NULL) {
        return ZO_BLOCKDEV_ERR_ARG;
    }
    offset = zo_bd_offset(lba, count);
    if (offset < 0L) {
        return ZO_BLOCKDEV_ERR_RANGE;
    }
    if (fseek(zo_bd_file, offset, SEEK_SET) != 0) {
        return ZO_BLOCKDEV_ERR_IO;
    }
    want = (size_t)count * ZO_SECTOR_BYTES;
    got = fread(dst, 1u, want, zo_bd_file);
    if (got != want) {
        int at_end = feof(zo_bd_file);
        clearerr(zo_bd_file);
        return at_end ? ZO_BLOCKDEV_ERR_RANGE : ZO_BLOCKDEV_ERR_IO;
    }
    return ZO_BLOCKDEV_OK;
}

int zo_blockdev_write(uint32_t lba, uint32_t count, const uint8_t *src)
{
    long offset;
    size_t want;
    if (zo_bd_file == NULL) {
        return ZO_BLOCKDEV_ERR_NOT_ATTACHED;
    }
    if (count == 0u) {
        return ZO_BLOCKDEV_OK;
    }
    if (src == NULL) {
        return ZO_BLOCKDEV_ERR_ARG;
    }
    if (!zo_bd_writable) {
        return ZO_BLOCKDEV_ERR_READ_ONLY;
    }
    offset = zo_bd_offset(lba, count);
    if (offset < 0L) {
        return ZO_BLOCKDEV_ERR_RANGE;
    }
    /* fseek also satisfies C99's rule that a read and a write on an update stream are
     * separated by a positioning call. */
    if (fseek(zo_bd_file, offset, SEEK_SET) != 0) {
        return ZO_BLOCKDEV_ERR_IO;
    }
    want = (size_t)count * ZO_SECTOR_BYTES;
    if (fwrite(src, 1u, want, zo_bd_file) != want || fflush(zo_bd_file) != 0) {
        clearerr(zo_bd_file);
        return ZO_BLOCKDEV_ERR_IO;
    }
    return ZO_BLOCKDEV_OK;
}
