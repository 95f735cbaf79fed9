/*
 * libFuzzer harness: the checkpoint loader (templates/train/zo_checkpoint.c through
 * zo_train_io.c's sector stream), for every training model of a generated project (one per
 * block with --block auto), from both slots of an image's checkpoint area made of the
 * fuzzer's bytes, as the firmware's L command and the guard's restore read them.
 *
 * Input: [flags u8][the checkpoint area: slot 0, then slot 1 at slot_sectors]. With flags
 * bit 0 the harness first writes the right CRC-32 at the end of each slot's checkpoint (a CRC
 * fix-up: the fuzzer then explores what is behind the CRC, and a mutated parameter must be
 * accepted as it is, never read out of bounds).
 */
#include <stdint.h>
#include <string.h>

#include "fuzz_blockdev.h"
#include "platform.h"
#include "training.h"
#include "zo_bytes.h"
#include "zo_crc32.h"
#include "zo_train_io.h"

#define MAX_AREA (1u << 20)

static uint8_t area[MAX_AREA];

/* The engine times its steps; loading a checkpoint takes no time here. */
uint32_t platform_cycles(void)
{
    return 0u;
}

static void fix_crc(const zo_train_model *m, uint32_t slot, size_t size)
{
    const uint32_t bytes = zo_checkpoint_bytes(m);
    const size_t at = (size_t)slot * m->slot_sectors * ZO_SECTOR_BYTES;
    if (at + bytes <= size) {
        zo_put_u32(area + at + bytes - 4u, zo_crc32(0u, area + at, bytes - 4u));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1u || size - 1u > MAX_AREA) {
        return 0;
    }
    const uint8_t flags = data[0];
    size -= 1u;
    memcpy(area, data + 1, size);
    fuzz_blockdev_use(area, size);
    for (uint32_t b = 0u; b < TRAINING_MODELS; ++b) {
        const zo_train_model *m = &training_models[b];
        for (uint32_t slot = ZO_SLOT_RUN; slot <= ZO_SLOT_BEST; ++slot) {
            zo_image img;
            zo_train_state state;
            memset(&img, 0, sizeof img);
            memset(&state, 0, sizeof state);
            img.is_open = 1u;
            img.checkpoint_lba = 0u;
            img.checkpoint_sectors = fuzz_blockdev_sectors();
            if (flags & 1u) {
                fix_crc(m, slot, size);
                fuzz_blockdev_use(area, size);
            }
            (void)zo_checkpoint_from_image(m, &state, &img, slot);
        }
    }
    return 0;
}
