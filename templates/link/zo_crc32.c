/* zo_crc32.c - bitwise CRC-32, see zo_crc32.h. */
#include "zo_crc32.h"

#define ZO_CRC32_POLY 0xEDB88320u

uint32_t zo_crc32(uint32_t crc, const uint8_t *p, uint32_t n)
{
    uint32_t i;
    int bit;
    crc = ~crc;
    for (i = 0u; i < n; i++) {
        crc ^= (uint32_t)p[i];
        for (bit = 0; bit < 8; bit++) {
            /* shift right; XOR the polynomial in when the bit shifted out was 1 */
            crc = (crc >> 1) ^ (ZO_CRC32_POLY & (0u - (crc & 1u)));
        }
    }
    return ~crc;
}
