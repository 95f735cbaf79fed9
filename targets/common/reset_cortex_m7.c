/*
 * Reset_Handler of both STM32 Cortex-M7 boards (zocodegen): enable the
 * FPU, point VTOR at the board's vector table, copy .data from flash, zero .bss, run static
 * constructors (none in C99 code, but the arrays are honoured), call main(); if main
 * returns, loop forever.
 */
#include <stdint.h>

#include "startup_cortex_m7.h"

#define ZO_REG32(addr) (*(volatile uint32_t *)(uintptr_t)(addr))

/* System control block (ARMv7-M ARM B3.2.2, table B3-4). */
#define SCB_VTOR   ZO_REG32(0xE000ED08u) /* vector table offset, B3.2.5 */
#define SCB_CPACR  ZO_REG32(0xE000ED88u) /* coprocessor access control, B3.2.20 */
#define CPACR_CP10_CP11_FULL (0xFu << 20) /* CP10 and CP11 = 0b11: full access */

extern void (*__preinit_array_start[])(void);
extern void (*__preinit_array_end[])(void);
extern void (*__init_array_start[])(void);
extern void (*__init_array_end[])(void);

extern int main(void);

static void call_array(void (**start)(void), void (**end)(void))
{
    uint32_t n = (uint32_t)((uintptr_t)end - (uintptr_t)start) / sizeof(*start);
    for (uint32_t i = 0; i < n; i++) {
        start[i]();
    }
}

void Reset_Handler(void)
{
    /* FPU first: anything compiled with -mfloat-abi=hard may use FP registers. */
    SCB_CPACR |= CPACR_CP10_CP11_FULL;
    __asm volatile("dsb\n\tisb" ::: "memory");

    /* Point VTOR at the address the table was linked at: the F746 kit boots through the
     * ITCM alias of flash (0x00200000, BOOT_ADD0, RM0385 section 2.5); the H7B3 boots from
     * BOOT_ADD0 (0x08000000 by default, RM0455 "Boot configuration"). */
    SCB_VTOR = (uint32_t)(uintptr_t)zo_vector_table;
    __asm volatile("dsb\n\tisb" ::: "memory");

    /* .data: copy the load image from flash. Word loops: the script aligns all bounds to 4. */
    {
        const uint32_t *src = _sidata;
        uint32_t *dst = _sdata;
        uint32_t n = (uint32_t)((uintptr_t)_edata - (uintptr_t)_sdata) / 4u;
        for (uint32_t i = 0; i < n; i++) {
            dst[i] = src[i];
        }
    }
    /* .bss: zero. */
    {
        uint32_t *dst = _sbss;
        uint32_t n = (uint32_t)((uintptr_t)_ebss - (uintptr_t)_sbss) / 4u;
        for (uint32_t i = 0; i < n; i++) {
            dst[i] = 0u;
        }
    }

    call_array(__preinit_array_start, __preinit_array_end);
    call_array(__init_array_start, __init_array_end);

    (void)main();
    for (;;) {
    }
}
