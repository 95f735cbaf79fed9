/*
 * What each platform (native, QEMU mps2-an500, STM32) provides to the generated firmware.
 * See docs/firmware.md.
 */
#ifndef PLATFORM_H
#define PLATFORM_H

#include <stdint.h>

void platform_init(void);                            /* clocks, UART, cycle counter */
void platform_read(uint8_t *dst, uint32_t n);        /* blocks until n bytes arrived */
/* 1 with *byte set when a byte arrives within timeout_ms milliseconds, 0 when none did
 * (the host link's retransmission timeouts, docs/link.md). */
int platform_read_byte(uint8_t *byte, uint32_t timeout_ms);
void platform_write(const uint8_t *src, uint32_t n); /* blocks until queued */
uint32_t platform_cycles(void);                      /* free-running up-counter */
uint32_t platform_cycles_per_second(void);           /* of platform_cycles(); 0 if unknown */
const char *platform_name(void);                     /* "native", "qemu", "stm32f746", ... */
#if defined(__GNUC__)
__attribute__((noreturn))
#endif
void platform_exit(int status);                      /* does not return */

#endif /* PLATFORM_H */
