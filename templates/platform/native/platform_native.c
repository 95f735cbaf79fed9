/*
 * Native (host gcc) platform: the UART is the process's stdin/stdout, so the same harness runs
 * as a Linux process, under sanitizers, driven by the same host tool. No cycle counter.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include "platform.h"

void platform_init(void)
{
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
}

void platform_read(uint8_t *dst, uint32_t n)
{
    fflush(stdout); /* the host waits for our reply before it sends more */
    if (n > 0 && fread(dst, 1, n, stdin) != n) {
        exit(feof(stdin) ? 0 : 3); /* host closed the link: nothing more to do */
    }
}

void platform_write(const uint8_t *src, uint32_t n)
{
    if (n > 0 && fwrite(src, 1, n, stdout) != n) {
        exit(3);
    }
}

uint32_t platform_cycles(void)
{
    return 0;
}

void platform_exit(int status)
{
    fflush(stdout);
    exit(status);
}
