/*
 * libFuzzer harness: the whole firmware's command loop (templates/project/main.c) with a fake
 * host whose answers are the fuzzer's bytes. Everything a device reads from the line passes
 * through here: the frame decoder, HELLO/WELCOME, every COMMAND and its arguments, SECTORS
 * (so the image header and records, both checkpoint slots), BYTES of an inference input,
 * and the statuses of WRITTEN / STORED / ACK, RESTART and NAK.
 *
 * The input is a list of records, each [kind u8][length u16 LE][length bytes]:
 *   kind % 4 == 0  the answer to the request the device is waiting for: a well-formed frame
 *                  with its sequence number and type | RESPONSE around these payload bytes
 *                  (so the fuzzer explores payloads rather than guessing CRCs);
 *   kind % 4 == 1  these bytes on the line as they are (garbage, broken or foreign frames);
 *   kind % 4 == 2  silence: the device's next wait for a byte times out once;
 *   kind % 4 == 3  a well-formed frame whose first payload byte is its type and second its
 *                  sequence number (stale, foreign, RESTART 0xFE, NAK 0xFF).
 * When the records run out the device has been driven as far as this input goes: the harness
 * leaves the firmware (longjmp) and the next input starts it afresh. QUIT ends it the same way.
 *
 * Built by tests/fuzz/run.py against a generated training project (main.c is included here
 * with its main renamed, so its static state can be reset before every input).
 */
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define main zo_firmware_main
#include "main.c"
#undef main

#include "zo_crc32.h"

static jmp_buf leave_firmware;
static const uint8_t *input;
static size_t input_left;

/* What the fake host has put on the line and the device has not read yet. */
static uint8_t line[2 * ZO_LINK_MAX_ENCODED + 8];
static size_t line_head, line_tail;
static int timeout_pending;

/* The device's own frames, decoded to learn the request waiting for its answer. */
static zo_link_decoder outgoing;
static uint8_t outgoing_payload[ZO_LINK_MAX_PAYLOAD]; /* any request the firmware sends */
static uint8_t pending_type;
static uint16_t pending_seq;
static uint32_t cycles;

static void put_byte(uint8_t b)
{
    if (line_tail < sizeof line) {
        line[line_tail++] = b;
    }
}

/* COBS, as docs/link.md "Frames" defines it, then the delimiter. */
static void put_frame(uint8_t type, uint16_t seq, const uint8_t *payload, uint32_t len)
{
    uint8_t body[ZO_LINK_MAX_BODY];
    uint32_t n = ZO_LINK_HEADER_BYTES + len + ZO_LINK_CRC_BYTES;
    uint32_t pos = 0u;
    body[0] = type;
    body[1] = (uint8_t)ZO_LINK_VERSION;
    zo_put_u16(body + 2, seq);
    zo_put_u16(body + 4, (uint16_t)len);
    memcpy(body + ZO_LINK_HEADER_BYTES, payload, len);
    zo_put_u32(body + ZO_LINK_HEADER_BYTES + len, zo_crc32(0u, body, ZO_LINK_HEADER_BYTES + len));
    for (;;) {
        uint32_t run = 0u;
        while (pos + run < n && run < 254u && body[pos + run] != 0u) {
            run++;
        }
        put_byte((uint8_t)(run + 1u));
        for (uint32_t i = 0; i < run; ++i) {
            put_byte(body[pos + i]);
        }
        pos += run;
        if (pos == n) {
            break;
        }
        if (run < 254u) {
            pos++;
        }
    }
    put_byte(0u);
}

/* The next record onto the line; leaves the firmware when there is none. */
static void next_record(void)
{
    uint8_t kind;
    uint32_t len;
    if (input_left < 3u) {
        longjmp(leave_firmware, 1);
    }
    kind = input[0] & 3u;
    len = zo_get_u16(input + 1);
    input += 3;
    input_left -= 3u;
    if (len > input_left) {
        len = (uint32_t)input_left;
    }
    line_head = line_tail = 0u;
    if (kind == 0u && len <= ZO_LINK_MAX_PAYLOAD) {
        put_frame((uint8_t)(pending_type | ZO_LINK_RESPONSE), pending_seq, input, len);
    } else if (kind == 1u) {
        for (uint32_t i = 0; i < len; ++i) {
            put_byte(input[i]);
        }
    } else if (kind == 2u) {
        timeout_pending = 1;
    } else if (kind == 3u && len >= 2u && len - 2u <= ZO_LINK_MAX_PAYLOAD) {
        put_frame(input[0], (uint16_t)(pending_seq + (int8_t)input[1]), input + 2, len - 2u);
    }
    input += len;
    input_left -= len;
}

void platform_init(void) {}

int platform_read_byte(uint8_t *byte, uint32_t timeout_ms)
{
    (void)timeout_ms;
    while (line_head == line_tail) {
        if (timeout_pending) {
            timeout_pending = 0;
            return 0;
        }
        next_record();
    }
    *byte = line[line_head++];
    return 1;
}

void platform_read(uint8_t *dst, uint32_t n)
{
    for (uint32_t i = 0; i < n; ++i) {
        while (!platform_read_byte(dst + i, 0u)) {
        }
    }
}

void platform_write(const uint8_t *src, uint32_t n)
{
    for (uint32_t i = 0; i < n; ++i) {
        zo_link_frame frame;
        if (zo_link_decoder_feed(&outgoing, src[i], &frame) == ZO_LINK_FRAME) {
            pending_type = frame.type;
            pending_seq = frame.seq;
        }
    }
}

uint32_t platform_cycles(void)
{
    return cycles += 1000u;
}

uint32_t platform_cycles_per_second(void)
{
    return 0u;
}

const char *platform_name(void)
{
    return "fuzz";
}

void platform_exit(int status)
{
    (void)status;
    longjmp(leave_firmware, 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    input = data;
    input_left = size;
    line_head = line_tail = 0u;
    timeout_pending = 0;
    pending_type = 0u;
    pending_seq = 0u;
    zo_link_decoder_init(&outgoing, outgoing_payload, sizeof outgoing_payload);
    memset(&image, 0, sizeof image);
    memset(&state, 0, sizeof state);
    active = 0;
    if (setjmp(leave_firmware) == 0) {
        (void)zo_firmware_main();
    }
    return 0;
}
