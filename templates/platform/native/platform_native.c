/*
 * Native (host gcc) platform: the UART is the process's stdin (fd 0) and stdout (fd 1), so the
 * same firmware runs as a Linux process, under sanitizers, driven by the same host tool. The
 * host link (docs/link.md) connects them to a pty's master side (the host opens the slave,
 * raw); pipes work as well. No cycle counter.
 *
 * I/O goes through read(2), write(2) and poll(2), not stdio: platform_read_byte() needs a
 * timeout. Input is read in blocks of whatever has arrived; output is collected and written
 * before every wait for input (the host answers only what it has received), when the buffer
 * is full, and at exit. End of file or EIO on fd 0 (a pty whose slave was closed) means the
 * host closed the link: the process exits with status 0.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "platform.h"

#define ZO_NATIVE_BUFFER_BYTES 4096u
#define ZO_NATIVE_FOREVER (-1) /* poll(2) timeout */

static uint8_t rx_buf[ZO_NATIVE_BUFFER_BYTES];
static size_t rx_head, rx_tail;
static uint8_t tx_buf[ZO_NATIVE_BUFFER_BYTES];
static size_t tx_fill;

/* The host closed the link (EOF; EIO from a pty master, EPIPE from a pipe): nothing more to
 * do. Any other error is a failure. */
static void link_lost(int closed)
{
    exit(closed ? 0 : 3);
}

static void flush_output(void)
{
    size_t done = 0u;
    while (done < tx_fill) {
        const ssize_t n = write(STDOUT_FILENO, tx_buf + done, tx_fill - done);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            link_lost(errno == EIO || errno == EPIPE);
        }
        done += (size_t)n;
    }
    tx_fill = 0u;
}

/* Waits up to timeout (ms, or ZO_NATIVE_FOREVER) for input and reads what has arrived; 0 when
 * nothing came in time. */
static int fill_input(int timeout)
{
    struct pollfd in;
    ssize_t n;
    int ready;
    flush_output();
    in.fd = STDIN_FILENO;
    in.events = POLLIN;
    in.revents = 0;
    do {
        ready = poll(&in, 1, timeout);
    } while (ready < 0 && errno == EINTR);
    if (ready < 0) {
        link_lost(0);
    }
    if (ready == 0) {
        return 0;
    }
    do { /* POLLHUP / POLLERR included: read(2) then says what happened */
        n = read(STDIN_FILENO, rx_buf, sizeof rx_buf);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) {
        link_lost(n == 0 || errno == EIO);
    }
    rx_head = 0u;
    rx_tail = (size_t)n;
    return 1;
}

void platform_init(void)
{
    rx_head = rx_tail = 0u;
    tx_fill = 0u;
}

void platform_read(uint8_t *dst, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        while (rx_head == rx_tail) {
            (void)fill_input(ZO_NATIVE_FOREVER);
        }
        dst[i] = rx_buf[rx_head++];
    }
}

int platform_read_byte(uint8_t *byte, uint32_t timeout_ms)
{
    /* poll(2) takes an int: longer waits are cut at INT_MAX ms (24.8 days) */
    if (rx_head == rx_tail && !fill_input(timeout_ms > (uint32_t)INT_MAX ? INT_MAX
                                                                          : (int)timeout_ms)) {
        return 0;
    }
    *byte = rx_buf[rx_head++];
    return 1;
}

void platform_write(const uint8_t *src, uint32_t n)
{
    while (n > 0u) {
        size_t take = sizeof tx_buf - tx_fill;
        if (take == 0u) {
            flush_output();
            take = sizeof tx_buf;
        }
        if (take > n) {
            take = n;
        }
        memcpy(tx_buf + tx_fill, src, take);
        tx_fill += take;
        src += take;
        n -= (uint32_t)take;
    }
}

uint32_t platform_cycles(void)
{
    return 0;
}

uint32_t platform_cycles_per_second(void)
{
    return 0;
}

const char *platform_name(void)
{
    return "native";
}

void platform_exit(int status)
{
    flush_output();
    exit(status);
}
