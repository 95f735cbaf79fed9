/*
 * libFuzzer harness: the data image reader (templates/train/zo_image.c) over a medium made of
 * the fuzzer's bytes: zo_image_open, the model checks, every record of every split (at most
 * MAX_RECORDS each) and the split CRCs, as the firmware's O and A commands use them.
 *
 * Input: [flags u8][the medium]. Random bytes almost never carry a right CRC-32, so for
 * inputs with flags bit 0 the harness first writes the right header CRC, and with bit 1 also
 * the right record and split CRCs (a CRC fix-up, as fuzzers of checksummed formats do): the
 * fuzzer then explores the checks behind the CRCs, and inputs without the bits keep
 * exploring the CRC checks themselves.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_blockdev.h"
#include "zo_bytes.h"
#include "zo_crc32.h"
#include "zo_image.h"

#define MAX_MEDIUM (1u << 20)
#define MAX_RECORDS 64u
/* docs/image.md: where the header keeps its CRC-32 and the split table */
#define HEADER_CRC_AT 12u
#define SPLITS_AT 80u
#define SPLIT_ENTRY_BYTES 16u

static uint8_t medium[MAX_MEDIUM];
static uint8_t sample[1u << 16];

static void fix_header_crc(uint8_t *h)
{
    zo_put_u32(h + HEADER_CRC_AT, 0u);
    zo_put_u32(h + HEADER_CRC_AT, zo_crc32(0u, h, ZO_SECTOR_BYTES));
}

/* The records' and splits' CRCs as the header's layout says they should be. */
static void fix_record_crcs(const zo_image *img, size_t size)
{
    const uint32_t crc_at = img->input_bytes + ZO_IMAGE_LABEL_BYTES;
    for (int s = 0; s < ZO_IMAGE_NUM_SPLITS; ++s) {
        uint32_t split_crc = 0u;
        for (uint32_t r = 0; r < img->splits[s].count && r < MAX_RECORDS; ++r) {
            const size_t at = ((size_t)img->splits[s].first_lba + (size_t)r *
                               img->sectors_per_record) * ZO_SECTOR_BYTES;
            if (at + crc_at + ZO_IMAGE_RECORD_CRC_BYTES > size) {
                return;
            }
            zo_put_u32(medium + at + crc_at, zo_crc32(0u, medium + at, crc_at));
            split_crc = zo_crc32(split_crc, medium + at, crc_at);
        }
        zo_put_u32(medium + SPLITS_AT + SPLIT_ENTRY_BYTES * (uint32_t)s + 8u, split_crc);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    zo_image img;
    if (size < 1u || size - 1u > MAX_MEDIUM) {
        return 0;
    }
    const uint8_t flags = data[0];
    size -= 1u;
    memcpy(medium, data + 1, size);
    if ((flags & 1u) && size >= ZO_SECTOR_BYTES) {
        fix_header_crc(medium);
        fuzz_blockdev_use(medium, size);
        if ((flags & 2u) && zo_image_open(&img) == ZO_IMAGE_OK) {
            fix_record_crcs(&img, size);
            fix_header_crc(medium);
        }
    }
    fuzz_blockdev_use(medium, size);
    if (zo_image_open(&img) != ZO_IMAGE_OK) {
        return 0;
    }
    (void)zo_image_expect_input(&img, img.input_bytes);
    (void)zo_image_expect_classes(&img, 10u);
    for (int s = 0; s < ZO_IMAGE_NUM_SPLITS; ++s) {
        const uint32_t count = zo_image_count(&img, s);
        for (uint32_t r = 0; r < count && r < MAX_RECORDS; ++r) {
            int32_t label;
            uint8_t *into = img.input_bytes <= sizeof sample ? sample : 0;
            (void)zo_image_read_sample(&img, s, r, into, &label);
        }
        if (count <= MAX_RECORDS) {
            (void)zo_image_verify_split(&img, s);
        }
    }
    return 0;
}
