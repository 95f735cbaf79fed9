/*
 * What each platform (native, QEMU mps2-an500, STM32) provides to the generated firmware.
 * See docs/firmware.md.
 */
#ifndef PLATFORM_H
#define PLATFORM_H

#include <stdint.h>

void platform_init(void);                            /* clocks, UART, cycle counter */
void platform_read(uint8_t *dst, uint32_t n);        /* blocks until n bytes arrived */
void platform_write(const uint8_t *src, uint32_t n); /* blocks until queued */
uint32_t platform_cycles(void);                      /* free-running up-counter */
#if defined(__GNUC__)
__attribute__((noreturn))
#endif
void platform_exit(int status);                      /* does not return */

#endif /* PLATFORM_H */
