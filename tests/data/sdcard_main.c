/* Test firmware for tests/test_sdcard.py: the SD card driver (targets/common/blockdev_sdmmc.c)
 * on the emulated board, driven by text lines on USART1; every answer is one line.
 *
 *   A                 -> "A <zo_blockdev_attach rc>"
 *   R <lba> <count>   -> "R <zo_blockdev_read rc> <crc32 of the count sectors, hex>"
 *   W <lba> <count> <seed>
 *                     -> "W <zo_blockdev_write rc>", the sectors' byte i being
 *                        (seed + 7 * i + i / 512) mod 256
 *   Q <status>        -> platform_exit(status)
 *   anything else     -> "?"
 * At most ZO_TEST_SECTORS sectors a command; the buffer starts one byte past a word boundary,
 * so the driver's byte-wise FIFO copy is what is tested. The banner is "SD".
 */
#include <stdint.h>

#include "platform.h"
#include "zo_blockdev.h"
#include "zo_crc32.h"

#define ZO_TEST_SECTORS 8u

static uint8_t buf[ZO_TEST_SECTORS * ZO_SECTOR_BYTES + 4u] __attribute__((aligned(4)));

static void put_text(const char *s)
{
    uint32_t n = 0u;
    while (s[n] != '\0') {
        n++;
    }
    platform_write((const uint8_t *)s, n);
}

static void put_int(int32_t v)
{
    char text[12];
    char *p = text + sizeof text - 1u;
    uint32_t u = v < 0 ? 0u - (uint32_t)v : (uint32_t)v;
    *p = '\0';
    do {
        *--p = (char)('0' + u % 10u);
        u /= 10u;
    } while (u != 0u);
    if (v < 0) {
        *--p = '-';
    }
    put_text(p);
}

static void put_hex(uint32_t v)
{
    char text[9];
    for (uint32_t i = 0u; i < 8u; i++) {
        text[i] = "0123456789abcdef"[(v >> (28u - 4u * i)) & 0xFu];
    }
    text[8] = '\0';
    put_text(text);
}

/* The next number of the line (decimal, at most one leading '-'); *end set at the newline. */
static int32_t get_int(int *end)
{
    uint8_t c = ' ';
    int32_t sign = 1, v = 0;
    while (c == ' ') {
        platform_read(&c, 1u);
    }
    if (c == '-') {
        sign = -1;
        platform_read(&c, 1u);
    }
    while (c >= '0' && c <= '9') {
        v = 10 * v + (int32_t)(c - '0');
        platform_read(&c, 1u);
    }
    *end = c == '\n';
    return sign * v;
}

static void skip_line(int end)
{
    uint8_t c = end ? '\n' : ' ';
    while (c != '\n') {
        platform_read(&c, 1u);
    }
}

int main(void)
{
    uint8_t *data = buf + 1;
    platform_init();
    put_text("SD\n");
    for (;;) {
        uint8_t cmd;
        int end = 0;
        platform_read(&cmd, 1u);
        if (cmd == '\n') {
            continue;
        }
        if (cmd == 'A') {
            put_text("A ");
            put_int(zo_blockdev_attach(""));
        } else if (cmd == 'R' || cmd == 'W') {
            uint32_t lba = (uint32_t)get_int(&end);
            uint32_t count = (uint32_t)get_int(&end);
            if (count > ZO_TEST_SECTORS) {
                platform_exit(4);
            }
            int rc;
            if (cmd == 'R') {
                rc = zo_blockdev_read(lba, count, data);
            } else {
                uint32_t seed = (uint32_t)get_int(&end);
                for (uint32_t i = 0u; i < count * ZO_SECTOR_BYTES; i++) {
                    data[i] = (uint8_t)(seed + 7u * i + i / ZO_SECTOR_BYTES);
                }
                rc = zo_blockdev_write(lba, count, data);
            }
            put_text(cmd == 'R' ? "R " : "W ");
            put_int(rc);
            if (cmd == 'R') {
                put_text(" ");
                put_hex(zo_crc32(0u, data, count * ZO_SECTOR_BYTES));
            }
        } else if (cmd == 'Q') {
            platform_exit(get_int(&end));
        } else {
            put_text("?");
        }
        skip_line(end);
        put_text("\n");
    }
}
