/*
 * blockdev_stdio.c - zo_blockdev.h backend for native programs (host gcc): the data image is
 * a file, accessed with stdio. Used by the image reader's test driver (tests/test_image.py);
 * generated firmware reads its image over the host link instead (blockdev_link.c).
 * Reading past the end of the file is ZO_BLOCKDEV_ERR_RANGE;
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

/* The checks and the positioning both transfers share. ZO_BLOCKDEV_OK means: seek done,
 * transfer `count` sectors; *skip is set when there is nothing to transfer. fseek also
 * satisfies C99's rule that a read and a write on an update stream are separated by a
 * positioning call. */
static int zo_bd_seek(uint32_t lba, uint32_t count, const void *buffer, int *skip)
{
    long offset;
    *skip = 0;
    if (zo_bd_file == NULL) {
        return ZO_BLOCKDEV_ERR_NOT_ATTACHED;
    }
    if (count == 0u) {
        *skip = 1;
        return ZO_BLOCKDEV_OK;
    }
    if (buffer == NULL) {
        return ZO_BLOCKDEV_ERR_ARG;
    }
    offset = zo_bd_offset(lba, count);
    if (offset < 0L) {
        return ZO_BLOCKDEV_ERR_RANGE;
    }
    return fseek(zo_bd_file, offset, SEEK_SET) == 0 ? ZO_BLOCKDEV_OK : ZO_BLOCKDEV_ERR_IO;
}

int zo_blockdev_read(uint32_t lba, uint32_t count, uint8_t *dst)
{
    size_t want;
    int skip;
    int rc = zo_bd_seek(lba, count, dst, &skip);
    if (rc != ZO_BLOCKDEV_OK || skip) {
        return rc;
    }
    want = (size_t)count * ZO_SECTOR_BYTES;
    if (fread(dst, 1u, want, zo_bd_file) != want) {
        int at_end = feof(zo_bd_file);
        clearerr(zo_bd_file);
        return at_end ? ZO_BLOCKDEV_ERR_RANGE : ZO_BLOCKDEV_ERR_IO;
    }
    return ZO_BLOCKDEV_OK;
}

int zo_blockdev_write(uint32_t lba, uint32_t count, const uint8_t *src)
{
    size_t want;
    int skip;
    int rc;
    if (zo_bd_file != NULL && count != 0u && src != NULL && !zo_bd_writable) {
        return ZO_BLOCKDEV_ERR_READ_ONLY;
    }
    rc = zo_bd_seek(lba, count, src, &skip);
    if (rc != ZO_BLOCKDEV_OK || skip) {
        return rc;
    }
    want = (size_t)count * ZO_SECTOR_BYTES;
    if (fwrite(src, 1u, want, zo_bd_file) != want || fflush(zo_bd_file) != 0) {
        clearerr(zo_bd_file);
        return ZO_BLOCKDEV_ERR_IO;
    }
    return ZO_BLOCKDEV_OK;
}
