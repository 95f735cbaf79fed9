/* The fuzzer's bytes as the medium of zo_blockdev.h (fuzz_blockdev.c). */
#ifndef FUZZ_BLOCKDEV_H
#define FUZZ_BLOCKDEV_H

#include <stddef.h>
#include <stdint.h>

#include "zo_blockdev.h"

void fuzz_blockdev_use(const uint8_t *data, size_t size);
uint32_t fuzz_blockdev_sectors(void);

#endif /* FUZZ_BLOCKDEV_H */
