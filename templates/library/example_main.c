/*
 * An example firmware around the library: a main() as an STM32Cube project has one, with
 * the board's bring-up first (here platform_init() of zocodegen's board support: clocks to
 * full speed, USART1 on the ST-LINK virtual COM port; in a Cube project HAL_Init(),
 * SystemClock_Config() and MX_USART1_UART_Init()), then the library's calls.
 *
 * It serves one-byte commands on USART1:
 *   'I' + ZO_LIBRARY_INPUT_BYTES    -> ZO_LIBRARY_OUTPUT_BYTES: one inference
 * and with a training library:
 *   'T' + u32 count                 -> one training step; for each sample it reads, the
 *                                      device sends its u32 index and receives the input and
 *                                      a u32 label; then u32 status and i32 loss (Q16)
 *   'S'                             -> u32 status, then ZO_LIBRARY_CHECKPOINT_BYTES
 *   'L' + ZO_LIBRARY_CHECKPOINT_BYTES -> u32 status
 * (u32 and i32 little endian). Any other byte is ignored.
 */
#include <stdint.h>

#include "platform.h"
#include "zo_library.h"

static uint8_t input[ZO_LIBRARY_INPUT_BYTES];
static uint8_t output[ZO_LIBRARY_OUTPUT_BYTES];

#if ZO_LIBRARY_TRAINING
#include "zo_bytes.h"

static uint8_t checkpoint[ZO_LIBRARY_CHECKPOINT_BYTES];

/* u32 little endian on the line (zo_bytes.h, part of a training library) */
static void send_u32(uint32_t value)
{
    uint8_t bytes[4];
    zo_put_u32(bytes, value);
    platform_write(bytes, 4u);
}

static uint32_t read_u32(void)
{
    uint8_t bytes[4];
    platform_read(bytes, 4u);
    return zo_get_u32(bytes);
}

/* The library's sample reader: here the host serves each sample the step asks for. */
static int sample_from_host(void *context, uint32_t index, uint8_t *sample, int32_t *label)
{
    (void)context;
    send_u32(index);
    platform_read(sample, ZO_LIBRARY_INPUT_BYTES);
    *label = (int32_t)read_u32();
    return 0;
}

static void train_step(void)
{
    zo_train_telemetry report = {0};
    int rc = zo_library_train_data(sample_from_host, 0, read_u32());
    if (rc == 0) {
        rc = zo_library_train_step(&report);
    }
    send_u32((uint32_t)rc);
    send_u32((uint32_t)report.loss_q16);
}

static void save(void)
{
    const int rc = zo_library_checkpoint_save(checkpoint, sizeof checkpoint);
    send_u32((uint32_t)rc);
    platform_write(checkpoint, sizeof checkpoint);
}

static void restore(void)
{
    platform_read(checkpoint, sizeof checkpoint);
    send_u32((uint32_t)zo_library_checkpoint_restore(checkpoint, sizeof checkpoint));
}
#endif

int main(void)
{
    platform_init();
    (void)zo_library_init();
    for (;;) {
        uint8_t command;
        platform_read(&command, 1u);
        if (command == 'I') {
            platform_read(input, sizeof input);
            zo_library_run(input, output);
            platform_write(output, sizeof output);
        }
#if ZO_LIBRARY_TRAINING
        else if (command == 'T') {
            train_step();
        } else if (command == 'S') {
            save();
        } else if (command == 'L') {
            restore();
        }
#endif
    }
}
