/*
 * zo_blockdev.h - the block device the firmware reads its data image from (docs/image.md).
 *
 * A block device is an array of 512-byte sectors addressed by LBA (logical block address,
 * sector 0 first). Exactly one device is attached at a time. Every backend implements the
 * same three functions, so the image reader (zo_image.c) and the training loop do not know
 * where the sectors come from:
 *
 *   blockdev_link.c         (templates/link/) what every generated firmware uses: the host
 *                           tool serves the sectors of the image over the host link
 *                           (docs/link.md); attach ignores the path
 *   blockdev_stdio.c        (tests/data/) native test programs (tests/test_image.py): stdio
 *                           fopen("r+b") of an image file
 *   blockdev_semihosting.c  (tests/data/) Cortex-M test programs under QEMU (-semihosting-config
 *                           enable=on,target=native), or a board whose debugger has
 *                           semihosting enabled: an image file on the host, through Arm
 *                           semihosting
 *   SD card                 (later) SPI/SDMMC driver; the card holds the image written raw
 *                           with dd, so LBA n of the image is block n of the card
 *
 * The stdio and semihosting backends stay next to this header for the image reader's tests;
 * `zocodegen build` does not put them into projects.
 *
 * All functions return ZO_BLOCKDEV_OK (0) on success and a negative ZO_BLOCKDEV_ERR_* code
 * on failure. Transfers are whole sectors: count sectors of ZO_SECTOR_BYTES bytes each;
 * count == 0 succeeds (once attached) without touching the device. A failed read may have
 * changed dst.
 */
#ifndef ZO_BLOCKDEV_H
#define ZO_BLOCKDEV_H

#include <stdint.h>

#include "zo_status.h" /* ZO_BLOCKDEV_OK, ZO_BLOCKDEV_ERR_* */

#define ZO_SECTOR_BYTES 512u


/* Attach the medium. File backends open the image file at path (read-write if allowed,
 * otherwise read-only; writes then fail with ZO_BLOCKDEV_ERR_READ_ONLY); a second attach
 * replaces the first. Backends without files (serial link, SD card) may ignore path. */
int zo_blockdev_attach(const char *path);

/* Read sectors lba .. lba + count - 1 into dst (count * ZO_SECTOR_BYTES bytes). */
int zo_blockdev_read(uint32_t lba, uint32_t count, uint8_t *dst);

/* Write count sectors from src to lba .. lba + count - 1. The data has reached the medium
 * (or the host's file) when the call returns 0. */
int zo_blockdev_write(uint32_t lba, uint32_t count, const uint8_t *src);

#endif /* ZO_BLOCKDEV_H */
