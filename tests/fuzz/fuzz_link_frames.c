/*
 * libFuzzer harness: the device's frame decoder (templates/link/zo_link.c built with
 * -DZO_LINK_DECODER_ONLY) on any byte stream. Besides the sanitizers it checks what
 * zo_link.h promises of every frame it lets through: its payload is at most ZO_LINK_MAX_PAYLOAD
 * bytes and fitted where the decoder keeps payloads (a small buffer and a bulk destination, as
 * a READ sets them up), and a frame that did not fit is UNEXPECTED, never FRAME.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "zo_link.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t buffer[ZO_LINK_RESPONSE_BUFFER];
    static uint8_t bulk[2u * ZO_LINK_SECTOR_BYTES];
    zo_link_decoder d;
    zo_link_decoder_init(&d, buffer, sizeof buffer);
    /* The first byte picks the setup: the small buffer alone, or a READ of two sectors. */
    if (size > 0u && (data[0] & 1u)) {
        zo_link_decoder_expect(&d, bulk, sizeof bulk);
    }
    for (size_t i = 1; i < size; ++i) {
        zo_link_frame frame;
        if (zo_link_decoder_feed(&d, data[i], &frame) != ZO_LINK_FRAME) {
            continue;
        }
        const uint32_t room = d.bulk != 0 ? ZO_LINK_STATUS_BYTES + d.bulk_bytes : d.capacity;
        if (frame.len > ZO_LINK_MAX_PAYLOAD || frame.len > room || frame.payload != buffer) {
            abort();
        }
    }
    return 0;
}
