/*
 * blockdev_semihosting.c - zo_blockdev.h backend for Cortex-M: the data image is a file on
 * the host, reached through Arm semihosting (the debug host does the file I/O while the core
 * is halted on BKPT 0xAB).
 *
 * The card of a field trainer built for QEMU (`build --data-source sdcard`, docs/sdcard.md: the file
 * card.img in QEMU's working folder), and the image reader's QEMU test driver
 * (tests/test_image.py); link firmware reads its image over the host link (blockdev_link.c),
 * which needs no debugger.
 *
 * Works under QEMU with `-semihosting-config enable=on,target=native` (the zocodegen QEMU
 * runner passes it; the path is relative to QEMU's working directory) and on a real board
 * whose debugger has semihosting enabled (OpenOCD: `arm semihosting enable`). On a board
 * WITHOUT a debugger attached BKPT faults (HardFault), so firmware for stand-alone boards must
 * use the serial or SD card backend instead. Each call halts the core for a round trip to
 * the host: slow on hardware, fine under QEMU.
 *
 * Limits: semihosting positions are 32-bit words, so only the first 4 GiB of an image
 * (8388608 sectors) are reachable; beyond that the calls return ZO_BLOCKDEV_ERR_RANGE.
 *
 * Source of the operation numbers, parameter blocks and results: "Semihosting for AArch32
 * and AArch64" (Arm, version 3.0), SYS_OPEN (0x01), SYS_CLOSE (0x02), SYS_WRITE (0x05),
 * SYS_READ (0x06), SYS_SEEK (0x0A); the T32 trap instruction BKPT 0xAB, operation in r0,
 * pointer to the parameter block (32-bit words) in r1, result in r0.
 */
#include <stdint.h>

#include "zo_blockdev.h"

#if !defined(__thumb__)
#error "blockdev_semihosting.c is for Thumb (Cortex-M) targets: it traps with BKPT 0xAB"
#endif

#define ZO_SH_SYS_OPEN 0x01u
#define ZO_SH_SYS_CLOSE 0x02u
#define ZO_SH_SYS_WRITE 0x05u
#define ZO_SH_SYS_READ 0x06u
#define ZO_SH_SYS_SEEK 0x0Au

/* SYS_OPEN modes are indices into the fopen() mode strings:
 * 0 "r", 1 "rb", 2 "r+", 3 "r+b", 4 "w", 5 "wb", 6 "w+", 7 "w+b", 8 "a", ... 11 "a+b". */
#define ZO_SH_MODE_RB 1u
#define ZO_SH_MODE_RPLUSB 3u

#define ZO_SH_NO_HANDLE 0xFFFFFFFFu /* SYS_OPEN returns -1 on failure */
#define ZO_SH_MAX_SECTORS 0x800000u  /* 2^23 sectors = 2^32 bytes */

static uint32_t zo_bd_handle = ZO_SH_NO_HANDLE;
static int zo_bd_writable = 0;

static uint32_t zo_bd_semihost(uint32_t op, const uint32_t *block)
{
    register uint32_t r0 __asm__("r0") = op;
    register const uint32_t *r1 __asm__("r1") = block;
    /* "memory": the host reads the block and the buffers it points to, and writes into
     * read buffers. */
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

static uint32_t zo_bd_strlen(const char *s)
{
    uint32_t n = 0u;
    while (s[n] != '\0') {
        n++;
    }
    return n;
}

static uint32_t zo_bd_open(const char *path, uint32_t mode)
{
    uint32_t block[3];
    block[0] = (uint32_t)(uintptr_t)path;
    block[1] = mode;
    block[2] = zo_bd_strlen(path); /* length without the terminating NUL */
    return zo_bd_semihost(ZO_SH_SYS_OPEN, block);
}

int zo_blockdev_attach(const char *path)
{
    if (zo_bd_handle != ZO_SH_NO_HANDLE) {
        uint32_t block[1];
        block[0] = zo_bd_handle;
        (void)zo_bd_semihost(ZO_SH_SYS_CLOSE, block);
        zo_bd_handle = ZO_SH_NO_HANDLE;
    }
    if (path == 0) {
        return ZO_BLOCKDEV_ERR_ARG;
    }
    zo_bd_handle = zo_bd_open(path, ZO_SH_MODE_RPLUSB);
    zo_bd_writable = 1;
    if (zo_bd_handle == ZO_SH_NO_HANDLE) {
        zo_bd_handle = zo_bd_open(path, ZO_SH_MODE_RB);
        zo_bd_writable = 0;
    }
    return zo_bd_handle != ZO_SH_NO_HANDLE ? ZO_BLOCKDEV_OK : ZO_BLOCKDEV_ERR_OPEN;
}

/* Checks shared by read and write, then SYS_SEEK to lba. */
static int zo_bd_seek(uint32_t lba, uint32_t count, const void *buf)
{
    uint32_t block[2];
    if (zo_bd_handle == ZO_SH_NO_HANDLE) {
        return ZO_BLOCKDEV_ERR_NOT_ATTACHED;
    }
    if (buf == 0) {
        return ZO_BLOCKDEV_ERR_ARG;
    }
    if (count > ZO_SH_MAX_SECTORS || lba > ZO_SH_MAX_SECTORS - count) {
        return ZO_BLOCKDEV_ERR_RANGE;
    }
    block[0] = zo_bd_handle;
    block[1] = lba * ZO_SECTOR_BYTES;
    /* SYS_SEEK: 0 on success, negative on error */
    return zo_bd_semihost(ZO_SH_SYS_SEEK, block) == 0u ? ZO_BLOCKDEV_OK : ZO_BLOCKDEV_ERR_IO;
}

int zo_blockdev_read(uint32_t lba, uint32_t count, uint8_t *dst)
{
    uint32_t block[3];
    uint32_t len;
    uint32_t missing;
    int rc;
    if (count == 0u) {
        return zo_bd_handle == ZO_SH_NO_HANDLE ? ZO_BLOCKDEV_ERR_NOT_ATTACHED : ZO_BLOCKDEV_OK;
    }
    rc = zo_bd_seek(lba, count, dst);
    if (rc != ZO_BLOCKDEV_OK) {
        return rc;
    }
    len = count * ZO_SECTOR_BYTES;
    block[0] = zo_bd_handle;
    block[1] = (uint32_t)(uintptr_t)dst;
    block[2] = len;
    /* SYS_READ: 0 when all len bytes were read, else the number of bytes NOT read (len at
     * end of file; a short count when the file ends inside the request). */
    missing = zo_bd_semihost(ZO_SH_SYS_READ, block);
    if (missing == 0u) {
        return ZO_BLOCKDEV_OK;
    }
    return missing <= len ? ZO_BLOCKDEV_ERR_RANGE : ZO_BLOCKDEV_ERR_IO;
}

int zo_blockdev_write(uint32_t lba, uint32_t count, const uint8_t *src)
{
    uint32_t block[3];
    int rc;
    if (count == 0u) {
        return zo_bd_handle == ZO_SH_NO_HANDLE ? ZO_BLOCKDEV_ERR_NOT_ATTACHED : ZO_BLOCKDEV_OK;
    }
    if (zo_bd_handle != ZO_SH_NO_HANDLE && !zo_bd_writable) {
        return ZO_BLOCKDEV_ERR_READ_ONLY;
    }
    rc = zo_bd_seek(lba, count, src);
    if (rc != ZO_BLOCKDEV_OK) {
        return rc;
    }
    block[0] = zo_bd_handle;
    block[1] = (uint32_t)(uintptr_t)src;
    block[2] = count * ZO_SECTOR_BYTES;
    /* SYS_WRITE: 0 on success, else the number of bytes NOT written */
    return zo_bd_semihost(ZO_SH_SYS_WRITE, block) == 0u ? ZO_BLOCKDEV_OK : ZO_BLOCKDEV_ERR_IO;
}
