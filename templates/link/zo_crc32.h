/*
 * zo_crc32.h - CRC-32 (IEEE 802.3, the one of zlib and PNG): the zocodegen data image, its
 * checkpoints and the frames of the host link (docs/link.md) all use it.
 *
 * Reflected polynomial 0xEDB88320, initial value and final XOR 0xFFFFFFFF, computed bit by bit
 * (no table: 0 bytes of RAM or flash beyond the code). The chaining convention is zlib's
 * crc32(): start with crc = 0, pass the previous result to continue, so
 *     zo_crc32(zo_crc32(0, a, na), b, nb) == zo_crc32(0, a ++ b, na + nb)
 * and zo_crc32(0, "123456789", 9) == 0xCBF43926.
 */
#ifndef ZO_CRC32_H
#define ZO_CRC32_H

#include <stdint.h>

uint32_t zo_crc32(uint32_t crc, const uint8_t *p, uint32_t n);

#endif /* ZO_CRC32_H */
