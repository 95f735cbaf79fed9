/*
 * zo_bytes.h - little-endian fields in byte buffers: every format the firmware reads or
 * writes (link frames and payloads, the data image, checkpoints) stores its integers
 * little-endian at fixed offsets (docs/link.md, docs/image.md), whatever the core's order.
 */
#ifndef ZO_BYTES_H
#define ZO_BYTES_H

#include <stdint.h>
#include <string.h>

static inline uint16_t zo_get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t zo_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static inline void zo_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void zo_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline void zo_put_f32(uint8_t *p, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits); /* IEEE 754 binary32 on every target */
    zo_put_u32(p, bits);
}

#endif /* ZO_BYTES_H */
