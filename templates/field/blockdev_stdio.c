/*
 * blockdev_stdio.c - zo_blockdev.h backend for native programs (host gcc): the data image is
 * a file, accessed with stdio. The card of a native field trainer (`build --data-source sdcard`,
 * docs/sdcard.md), and the image reader's test driver (tests/test_image.py).
 * Reading past the end of the file is ZO_BLOCKDEV_ERR_RANGE;
 * writing past it extends the file (as a card would not: keep writes inside the image's
 * checkpoint area).
 *
 * The environment, so a native run stands in for a board's card:
 *   ZO_CARD=FILE             the file to attach, whatever path the firmware names
 *   ZO_CARD_CUT_AT_WRITE=N   a power cut: the Nth write from the start of the process puts
 *                            only a prefix of its bytes (ZO_CARD_CUT_BYTES, default half)
 *                            into the file, and the process exits with ZO_BD_CUT_STATUS
 *   ZO_CARD_FAIL_READS=N[:K] a failing card: reads N .. N+K-1 (K default 1) return
 *                            ZO_BLOCKDEV_ERR_IO
 */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "zo_blockdev.h"

#define ZO_BD_CUT_STATUS 86 /* what a power cut looks like to the test that caused it */

static FILE *zo_bd_file = NULL;
static int zo_bd_writable = 0;
static unsigned long zo_bd_writes = 0u;
static unsigned long zo_bd_reads = 0u;

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
    if (getenv("ZO_CARD") != NULL && *getenv("ZO_CARD") != '\0') {
        path = getenv("ZO_CARD");
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

/* ZO_CARD_FAIL_READS: whether this read is one the card fails. */
static int zo_bd_read_fails(void)
{
    const char *spec = getenv("ZO_CARD_FAIL_READS");
    char *rest = NULL;
    unsigned long first, count = 1u;
    ++zo_bd_reads;
    if (spec == NULL) {
        return 0;
    }
    first = strtoul(spec, &rest, 10);
    if (rest != NULL && *rest == ':') {
        count = strtoul(rest + 1, NULL, 10);
    }
    return zo_bd_reads >= first && zo_bd_reads - first < count;
}

int zo_blockdev_read(uint32_t lba, uint32_t count, uint8_t *dst)
{
    size_t want;
    int skip;
    int rc = zo_bd_seek(lba, count, dst, &skip);
    if (rc != ZO_BLOCKDEV_OK || skip) {
        return rc;
    }
    if (zo_bd_read_fails()) {
        return ZO_BLOCKDEV_ERR_IO;
    }
    want = (size_t)count * ZO_SECTOR_BYTES;
    if (fread(dst, 1u, want, zo_bd_file) != want) {
        int at_end = feof(zo_bd_file);
        clearerr(zo_bd_file);
        return at_end ? ZO_BLOCKDEV_ERR_RANGE : ZO_BLOCKDEV_ERR_IO;
    }
    return ZO_BLOCKDEV_OK;
}

/* ZO_CARD_CUT_AT_WRITE: this write is the one the power fails in. */
static void zo_bd_maybe_cut(size_t want, const uint8_t *src)
{
    const char *at = getenv("ZO_CARD_CUT_AT_WRITE");
    const char *bytes = getenv("ZO_CARD_CUT_BYTES");
    size_t prefix = want / 2u;
    ++zo_bd_writes;
    if (at == NULL || strtoul(at, NULL, 10) != zo_bd_writes) {
        return;
    }
    if (bytes != NULL && strtoul(bytes, NULL, 10) < want) {
        prefix = (size_t)strtoul(bytes, NULL, 10);
    }
    (void)fwrite(src, 1u, prefix, zo_bd_file);
    (void)fflush(zo_bd_file);
    _Exit(ZO_BD_CUT_STATUS);
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
    zo_bd_maybe_cut(want, src);
    if (fwrite(src, 1u, want, zo_bd_file) != want || fflush(zo_bd_file) != 0) {
        clearerr(zo_bd_file);
        return ZO_BLOCKDEV_ERR_IO;
    }
    return ZO_BLOCKDEV_OK;
}
