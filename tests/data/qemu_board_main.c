/* Test firmware for tests/test_qemu_board.py: the harness protocol of docs/firmware.md with
 * a fake "model" (output = input XOR 0x5A, repeated input[0] + 1 times so the reported
 * cycles grow with the work), plus commands that only this test firmware understands:
 *   'L' u32 n  -> 'L' u32 cycles: a loop of exactly 2*n instructions (n >= 1)
 *   'X'        -> platform_exit(3)
 *   'F'        -> undefined instruction (UsageFault, escalated to HardFault)
 *   'B'        -> load from unmapped 0x30000000 (BusFault, escalated to HardFault)
 * At start it checks that .data was copied, .bss zeroed and the FPU works (exit 50..52).
 * Build-time knobs: ZO_TEST_IO_BYTES (default 300), ZO_TEST_BIG_BSS / ZO_TEST_ARENA_BYTES
 * (to make the link overflow RAM).
 */
#include <stdint.h>
#include <string.h>

#include "platform.h"
#include "zo_bytes.h"

#ifndef ZO_TEST_IO_BYTES
#define ZO_TEST_IO_BYTES 300u
#endif
#ifndef ZO_TEST_ARENA_BYTES
#define ZO_TEST_ARENA_BYTES (2u * ZO_TEST_IO_BYTES)
#endif

static uint8_t arena[ZO_TEST_ARENA_BYTES] __attribute__((section(".zo_arena"), aligned(8)));
static uint8_t *const in_buf = arena;
static uint8_t *const out_buf = arena + ZO_TEST_IO_BYTES;

#ifdef ZO_TEST_BIG_BSS
static volatile uint8_t big_bss[ZO_TEST_BIG_BSS];
#endif

static volatile uint32_t data_magic = 0x600DDA7Au; /* .data */
static volatile uint32_t bss_word;          /* .bss */
static volatile float fp_a = 1.5f;
static volatile float fp_b = 2.25f;

static void fake_model_run(void)
{
    volatile uint8_t *out = out_buf;
    uint32_t passes = (uint32_t)in_buf[0] + 1u;
    uint32_t p;
    uint32_t i;
    for (p = 0u; p < passes; p++) {
        for (i = 0u; i < ZO_TEST_IO_BYTES; i++) {
            out[i] = (uint8_t)(in_buf[i] ^ 0x5Au);
        }
    }
}

static uint32_t known_loop(uint32_t n)
{
    uint32_t t0;
    uint32_t t1;
    t0 = platform_cycles();
    __asm__ volatile(
        "1:\n\t"
        "subs %0, %0, #1\n\t"
        "bne 1b\n\t"
        : "+r"(n)
        :
        : "cc");
    t1 = platform_cycles();
    return t1 - t0;
}

int main(void)
{
    uint8_t hdr[12];
    uint8_t cmd;
    uint8_t tail[4];

    platform_init();
    if (data_magic != 0x600DDA7Au) {
        platform_exit(50);
    }
    if (bss_word != 0u) {
        platform_exit(51);
    }
    if (fp_a * fp_b != 3.375f) {
        platform_exit(52);
    }
#ifdef ZO_TEST_BIG_BSS
    big_bss[ZO_TEST_BIG_BSS - 1u] = 1u;
#endif

    memcpy(hdr, "ZOCG", 4);
    zo_put_u32(hdr + 4, ZO_TEST_IO_BYTES);
    zo_put_u32(hdr + 8, ZO_TEST_IO_BYTES);
    platform_write(hdr, sizeof hdr);

    for (;;) {
        platform_read(&cmd, 1u);
        if (cmd == 'I') {
            uint32_t t0;
            uint32_t t1;
            platform_read(in_buf, ZO_TEST_IO_BYTES);
            t0 = platform_cycles();
            fake_model_run();
            t1 = platform_cycles();
            cmd = 'O';
            platform_write(&cmd, 1u);
            platform_write(out_buf, ZO_TEST_IO_BYTES);
            zo_put_u32(tail, t1 - t0);
            platform_write(tail, 4u);
        } else if (cmd == 'Q') {
            platform_exit(0);
        } else if (cmd == 'L') {
            platform_read(tail, 4u);
            zo_put_u32(tail, known_loop(zo_get_u32(tail)));
            platform_write(&cmd, 1u);
            platform_write(tail, 4u);
        } else if (cmd == 'X') {
            platform_exit(3);
        } else if (cmd == 'F') {
            __asm__ volatile("udf #0");
        } else if (cmd == 'B') {
            bss_word = *(volatile uint32_t *)(uintptr_t)0x30000000u;
        } else {
            cmd = 'E';
            platform_write(&cmd, 1u);
        }
    }
}
