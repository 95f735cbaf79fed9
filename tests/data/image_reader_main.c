/* Test driver for tests/test_image.py: the data image reader (templates/train/zo_image.c) and
 * a block device backend behind a small binary protocol on platform.h (stdin/stdout natively,
 * UART0 under QEMU). Native build: blockdev_stdio.c; QEMU build: blockdev_semihosting.c.
 * All integers little endian; replies start with the command byte.
 *
 *   'A' u32 n, n path bytes   -> 'A' i32 attach_rc i32 open_rc, 26 u32 header fields
 *                                (version flags image_sectors rank dims[4] dtype input_bytes
 *                                record_bytes sectors_per_record num_classes scale_bits
 *                                zero_point 3 x (first_lba count crc32) checkpoint_lba
 *                                checkpoint_sectors), 32 bytes model hash
 *   'S' u8 split u32 index    -> 'S' i32 rc i32 label i32 blockdev_rc, input_bytes bytes
 *   'L' u8 split u32 index    -> 'L' i32 rc i32 label          (input pointer NULL)
 *   'D'                       -> 'D', then for every record of train, val, test in order:
 *                                i32 rc i32 label, input_bytes bytes
 *   'V' u8 split              -> 'V' i32 zo_image_verify_split result
 *   'F'                       -> 'F' i32 read_rc i32 read_split u32 read_index (the last read)
 *   'E' u32 bytes u32 classes -> 'E' i32 expect_input i32 expect_classes
 *   'C' u32 crc u32 n, n bytes-> 'C' u32 zo_crc32(crc, bytes, n)
 *   'W' u32 lba u32 count, count sectors -> 'W' i32 zo_blockdev_write result
 *   'R' u32 lba u32 count     -> 'R' i32 zo_blockdev_read result, count sectors
 *   'Q'                       -> platform_exit(0)
 *   anything else             -> '?'
 * The banner is "ZOIR". Buffers: ZO_TEST_MAX_BYTES bytes (input, CRC data, sectors); a
 * request beyond it ends the program with status 4.
 */
#include <stdint.h>
#include <string.h>

#include "platform.h"
#include "zo_blockdev.h"
#include "zo_crc32.h"
#include "zo_image.h"

#define ZO_TEST_MAX_BYTES 4096u
#define ZO_TEST_MAX_PATH 512u

static zo_image img;
static uint8_t buf[ZO_TEST_MAX_BYTES];
static char path[ZO_TEST_MAX_PATH + 1u];

static void put_u32(uint32_t v)
{
    uint8_t b[4];
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
    b[2] = (uint8_t)(v >> 16);
    b[3] = (uint8_t)(v >> 24);
    platform_write(b, 4u);
}

static void put_i32(int32_t v)
{
    put_u32((uint32_t)v);
}

static uint32_t get_u32(void)
{
    uint8_t b[4];
    platform_read(b, 4u);
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
           ((uint32_t)b[3] << 24);
}

static uint8_t get_u8(void)
{
    uint8_t b;
    platform_read(&b, 1u);
    return b;
}

static void need(uint32_t bytes)
{
    if (bytes > ZO_TEST_MAX_BYTES) {
        platform_exit(4);
    }
}

static void need_sectors(uint32_t count)
{
    if (count > ZO_TEST_MAX_BYTES / ZO_SECTOR_BYTES) {
        platform_exit(4);
    }
}

static void reply(uint8_t cmd)
{
    platform_write(&cmd, 1u);
}

static void cmd_attach(void)
{
    uint32_t n = get_u32();
    uint32_t i;
    uint32_t scale_bits;
    int attach_rc;
    int open_rc;
    if (n > ZO_TEST_MAX_PATH) {
        platform_exit(4);
    }
    platform_read((uint8_t *)path, n);
    path[n] = '\0';
    attach_rc = zo_blockdev_attach(path);
    open_rc = attach_rc == ZO_BLOCKDEV_OK ? zo_image_open(&img) : ZO_IMAGE_ERR_IO;
    reply('A');
    put_i32(attach_rc);
    put_i32(open_rc);
    put_u32(img.version);
    put_u32(img.flags);
    put_u32(img.image_sectors);
    put_u32(img.input_rank);
    for (i = 0u; i < ZO_IMAGE_MAX_RANK; i++) {
        put_u32(img.input_dims[i]);
    }
    put_u32(img.dtype);
    put_u32(img.input_bytes);
    put_u32(img.record_bytes);
    put_u32(img.sectors_per_record);
    put_u32(img.num_classes);
    memcpy(&scale_bits, &img.input_scale, sizeof scale_bits);
    put_u32(scale_bits);
    put_i32(img.input_zero_point);
    for (i = 0u; i < (uint32_t)ZO_IMAGE_NUM_SPLITS; i++) {
        put_u32(img.splits[i].first_lba);
        put_u32(img.splits[i].count);
        put_u32(img.splits[i].crc32);
    }
    put_u32(img.checkpoint_lba);
    put_u32(img.checkpoint_sectors);
    platform_write(img.model_sha256, sizeof img.model_sha256);
}

/* rc, label, [blockdev_rc], input bytes of one record */
static void send_sample(int split, uint32_t index, int with_blockdev_rc)
{
    int32_t label = -1;
    int rc;
    need(img.input_bytes);
    memset(buf, 0xEE, img.input_bytes);
    img.blockdev_rc = 0;
    rc = zo_image_read_sample(&img, split, index, buf, &label);
    put_i32(rc);
    put_i32(label);
    if (with_blockdev_rc) {
        put_i32(img.blockdev_rc);
    }
    platform_write(buf, img.input_bytes);
}

int main(void)
{
    static const uint8_t banner[4] = {'Z', 'O', 'I', 'R'};
    platform_init();
    platform_write(banner, sizeof banner);
    for (;;) {
        uint8_t cmd = get_u8();
        if (cmd == 'A') {
            cmd_attach();
        } else if (cmd == 'S') {
            int split = (int)get_u8();
            uint32_t index = get_u32();
            reply('S');
            send_sample(split, index, 1);
        } else if (cmd == 'L') {
            int split = (int)get_u8();
            uint32_t index = get_u32();
            int32_t label = -1;
            int rc = zo_image_read_sample(&img, split, index, 0, &label);
            reply('L');
            put_i32(rc);
            put_i32(label);
        } else if (cmd == 'D') {
            int split;
            uint32_t i;
            reply('D');
            for (split = 0; split < ZO_IMAGE_NUM_SPLITS; split++) {
                for (i = 0u; i < zo_image_count(&img, split); i++) {
                    send_sample(split, i, 0);
                }
            }
        } else if (cmd == 'V') {
            int split = (int)get_u8();
            reply('V');
            put_i32(zo_image_verify_split(&img, split));
        } else if (cmd == 'F') {
            reply('F');
            put_i32(img.read_rc);
            put_i32(img.read_split);
            put_u32(img.read_index);
        } else if (cmd == 'E') {
            uint32_t bytes = get_u32();
            uint32_t classes = get_u32();
            reply('E');
            put_i32(zo_image_expect_input(&img, bytes));
            put_i32(zo_image_expect_classes(&img, classes));
        } else if (cmd == 'C') {
            uint32_t crc = get_u32();
            uint32_t n = get_u32();
            need(n);
            platform_read(buf, n);
            reply('C');
            put_u32(zo_crc32(crc, buf, n));
        } else if (cmd == 'W') {
            uint32_t lba = get_u32();
            uint32_t count = get_u32();
            need_sectors(count);
            platform_read(buf, count * ZO_SECTOR_BYTES);
            reply('W');
            put_i32(zo_blockdev_write(lba, count, buf));
        } else if (cmd == 'R') {
            uint32_t lba = get_u32();
            uint32_t count = get_u32();
            int rc;
            need_sectors(count);
            memset(buf, 0, count * ZO_SECTOR_BYTES);
            rc = zo_blockdev_read(lba, count, buf);
            reply('R');
            put_i32(rc);
            platform_write(buf, count * ZO_SECTOR_BYTES);
        } else if (cmd == 'Q') {
            platform_exit(0);
        } else {
            reply('?');
        }
    }
}
