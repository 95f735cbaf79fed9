/*
 * What the per-board startup files (vector tables) and reset_cortex_m7.c share (zocodegen).
 */
#ifndef ZO_STARTUP_CORTEX_M7_H
#define ZO_STARTUP_CORTEX_M7_H

#include <stdint.h>

typedef void (*zo_handler)(void);

/* One table word: either the initial stack pointer or a handler address (no casts needed). */
typedef union {
    zo_handler handler;
    const void *stack_top;
} zo_vector;

/* Defined by startup_<target>.c, placed at the flash origin by the linker script. */
extern const zo_vector zo_vector_table[];

/* Symbols of the linker script (docs/firmware.md "Linker scripts"). */
/* Declared as arrays of unknown size: they are addresses, not single objects. */
extern uint32_t _sidata[], _sdata[], _edata[], _sbss[], _ebss[], _estack[];

void Reset_Handler(void) __attribute__((noreturn));
void Default_Handler(void);

#endif /* ZO_STARTUP_CORTEX_M7_H */
