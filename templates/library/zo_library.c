/*
 * The calls of zo_library.h over the generated model (model.c) and, when the library
 * trains, the training engine (zo_train.c, zo_checkpoint.c). The same C for every library:
 * what differs by model comes from the generated headers.
 */
#include <string.h>

#include "model.h"
#include "zo_library.h"
#if ZO_LIBRARY_TRAINING
#include "platform.h"
#include "training.h"

static zo_train_state state;
static zo_train_telemetry last_step; /* the end-of-step record of the last step */

/* The engine's clock (platform.h) for a firmware that defines none: steps then report 0
 * cycles. A firmware's own platform_cycles() replaces it at link time. */
__attribute__((weak)) uint32_t platform_cycles(void)
{
    return 0u;
}

static void keep_step_record(void *context, const zo_train_telemetry *record)
{
    (void)context;
    if (record->layer < 0) {
        last_step = *record;
    }
}
#endif

int zo_library_init(void)
{
#if ZO_LIBRARY_TRAINING
    zo_train_init(&training_models[0], &state);
    state.telemetry = keep_step_record;
#endif
    return 0;
}

/* The host link's view of the tensors (docs/link.md): one byte string each way, the
 * tensors in graph order. */
void zo_library_run(const void *input, void *output)
{
    const uint8_t *in = (const uint8_t *)input;
    uint8_t *out = (uint8_t *)output;
    for (int k = 0; k < MODEL_INPUT_COUNT; ++k) {
        memcpy(model_arena() + model_inputs[k].offset, in, model_inputs[k].bytes);
        in += model_inputs[k].bytes;
    }
    model_run();
    for (int k = 0; k < MODEL_OUTPUT_COUNT; ++k) {
        memcpy(out, model_arena() + model_outputs[k].offset, model_outputs[k].bytes);
        out += model_outputs[k].bytes;
    }
}
#if ZO_LIBRARY_TRAINING

int zo_library_train_data(zo_sample_reader read, void *context, uint32_t count)
{
    state.read_sample = read;
    state.sample_context = context;
    state.sample_count = read != 0 ? count : 0u;
    state.schedule_steps = zo_train_run_steps(&training_models[0], state.sample_count);
    return state.sample_count > 0u ? ZO_TRAIN_OK : ZO_TRAIN_ERR_SAMPLE;
}

int zo_library_train_step(zo_train_telemetry *report)
{
    if (state.sample_count == 0u) {
        return ZO_TRAIN_ERR_SAMPLE; /* no zo_library_train_data yet */
    }
    const int rc = zo_train_step(&training_models[0], &state);
    if (report != 0) {
        *report = last_step;
    }
    return rc;
}

/* A checkpoint in a caller's buffer: the engine's byte sink and source over it. */
typedef struct {
    uint8_t *bytes;       /* save */
    const uint8_t *from;  /* restore */
    uint32_t capacity;
    uint32_t at;
} buffer_cursor;

static int to_buffer(void *context, const uint8_t *bytes, uint32_t n)
{
    buffer_cursor *c = (buffer_cursor *)context;
    if (n > c->capacity - c->at) {
        return ZO_TRAIN_ERR_SPACE;
    }
    memcpy(c->bytes + c->at, bytes, n);
    c->at += n;
    return 0;
}

static int from_buffer(void *context, uint8_t *bytes, uint32_t n)
{
    buffer_cursor *c = (buffer_cursor *)context;
    if (n > c->capacity - c->at) {
        return ZO_TRAIN_ERR_IO;
    }
    memcpy(bytes, c->from + c->at, n);
    c->at += n;
    return 0;
}

static void rewind_buffer(void *context)
{
    ((buffer_cursor *)context)->at = 0u;
}

int zo_library_checkpoint_save(uint8_t *buffer, uint32_t capacity)
{
    buffer_cursor c = {buffer, 0, capacity, 0u};
    if (capacity < zo_checkpoint_bytes(&training_models[0])) {
        return ZO_TRAIN_ERR_SPACE;
    }
    return zo_checkpoint_save(&training_models[0], &state, to_buffer, &c);
}

int zo_library_checkpoint_restore(const uint8_t *buffer, uint32_t bytes)
{
    buffer_cursor c = {0, buffer, bytes, 0u};
    return zo_checkpoint_load(&training_models[0], &state, from_buffer, rewind_buffer, &c);
}
#endif /* ZO_LIBRARY_TRAINING */
