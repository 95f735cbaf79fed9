/*
 * zo_link_hello.c - HELLO's identity in its wire layout (docs/link.md "HELLO"). The host link
 * sends it (zo_link.c); a field trainer keeps it in its card's status record, where
 * `zocodegen card read` finds it and a resumed run compares it (templates/field).
 */
#include <string.h>

#include "zo_bytes.h"
#include "zo_link.h"

void zo_link_pack_hello(const zo_link_identity *id, uint32_t flags,
                        uint8_t p[ZO_LINK_HELLO_BYTES])
{
    memset(p, 0, ZO_LINK_HELLO_BYTES);
    memcpy(p, "ZOLK", 4u);
    zo_put_u16(p + 4, (uint16_t)ZO_LINK_VERSION);
    zo_put_u16(p + 6, (uint16_t)ZO_LINK_MAX_PAYLOAD);
    memcpy(p + 8, id->model_sha256, 32u);
    zo_put_u32(p + 40, id->input_bytes);
    zo_put_u32(p + 44, id->output_bytes);
    zo_put_u32(p + 48, id->classes);
    zo_put_f32(p + 52, id->input_scale);
    zo_put_u32(p + 56, (uint32_t)id->input_zero_point);
    zo_put_u32(p + 60, id->checkpoint_bytes);
    zo_put_u32(p + 64, flags);
    p[68] = id->estimator;
    p[69] = id->mode;
    p[70] = id->block;
    p[71] = id->blocks;
    zo_put_u32(p + 72, id->queries);
    zo_put_u32(p + 76, id->batch);
    zo_put_u32(p + 80, id->steps);
    zo_put_u32(p + 84, id->seed);
    zo_put_f32(p + 88, id->lr);
    zo_put_u32(p + 92, id->trainable_layers);
    zo_put_u32(p + 96, id->cycles_per_second);
    for (uint32_t n = 0u; n < ZO_LINK_TARGET_BYTES && id->target[n] != '\0'; ++n) {
        p[100u + n] = (uint8_t)id->target[n]; /* NUL padded */
    }
}
