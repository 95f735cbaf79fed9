/*
 * Checkpoints (zo_train.h): the header, the layer table and every trained layer's
 * parameters, CRC-32 checked; the byte layout of zocodegen/training/checkpoint.py.
 */
#include "zo_train_engine.h"

#define ZO_CKPT_HEADER_BYTES 96u
#define ZO_CKPT_IDENTITY_BYTES 60u /* what must match; the seed and the guard state follow */
static const uint8_t ckpt_magic[8] = {'Z', 'O', 'C', 'K', 'P', 'T', '0', '1'};

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16)
           | ((uint32_t)p[3] << 24);
}

static uint32_t pad4(uint32_t n)
{
    return (n + 3u) & ~3u;
}

uint32_t zo_checkpoint_bytes(const zo_train_model *m)
{
    uint32_t total = ZO_CKPT_HEADER_BYTES + 12u * m->layer_count + 4u;
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        total += pad4(m->layers[i].weight_count) + 4u * m->layers[i].bias_count;
    }
    return total;
}

static void header_bytes(const zo_train_model *m, const zo_train_state *s, uint32_t step,
                         uint8_t *h)
{
    uint32_t lr_bits;
    memcpy(&lr_bits, &s->lr, 4);
    memset(h, 0, ZO_CKPT_HEADER_BYTES);
    memcpy(h, ckpt_magic, sizeof ckpt_magic);
    put_u32(h + 8, 2u);
    put_u32(h + 12, ZO_CKPT_HEADER_BYTES);
    memcpy(h + 16, m->model_sha256, 32);
    put_u32(h + 48, step);
    put_u32(h + 52, m->layer_count);
    put_u32(h + 56, zo_checkpoint_bytes(m));
    put_u32(h + 60, s->seed);
    put_u32(h + 64, lr_bits);
    put_u32(h + 68, s->halvings);
    put_u32(h + 72, s->best_step);
    put_u32(h + 76, s->best_correct);
    put_u32(h + 80, (uint32_t)(uint64_t)s->best_loss);
    put_u32(h + 84, (uint32_t)((uint64_t)s->best_loss >> 32));
    put_u32(h + 88, s->rollbacks);
}

static void table_entry(const zo_train_layer *L, uint8_t *e)
{
    put_u32(e, L->op);
    put_u32(e + 4, L->weight_count);
    put_u32(e + 8, L->bias_count);
}

typedef struct {
    zo_byte_sink sink;
    void *context;
    uint32_t crc;
    int rc;
} ckpt_writer;

static void emit(ckpt_writer *w, const uint8_t *bytes, uint32_t n)
{
    if (w->rc == 0 && n) {
        w->crc = zo_crc32(w->crc, bytes, n);
        w->rc = w->sink(w->context, bytes, n);
    }
}

int zo_checkpoint_save(const zo_train_model *m, const zo_train_state *s, zo_byte_sink sink,
                       void *context)
{
    ckpt_writer w = {sink, context, 0u, 0};
    uint8_t buf[ZO_CKPT_HEADER_BYTES];
    header_bytes(m, s, s->step, buf);
    emit(&w, buf, ZO_CKPT_HEADER_BYTES);
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        table_entry(&m->layers[i], buf);
        emit(&w, buf, 12u);
    }
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        const zo_train_layer *L = &m->layers[i];
        static const uint8_t zeros[4] = {0, 0, 0, 0};
        emit(&w, (const uint8_t *)L->weights, L->weight_count);
        emit(&w, zeros, pad4(L->weight_count) - L->weight_count);
        for (uint32_t c = 0; c < L->bias_count; ++c) {
            put_u32(buf, (uint32_t)L->bias[c]);
            emit(&w, buf, 4u);
        }
    }
    put_u32(buf, w.crc);
    if (w.rc == 0) {
        w.rc = sink(context, buf, 4u);
    }
    return w.rc ? ZO_TRAIN_ERR_IO : ZO_TRAIN_OK;
}

/* Pass 1 of a load: header and layer table match this model, CRC over everything. */
static int verify_checkpoint(const zo_train_model *m, const zo_train_state *s,
                             zo_byte_source source, void *context, uint8_t *h)
{
    uint8_t expect[ZO_CKPT_HEADER_BYTES];
    if (source(context, h, ZO_CKPT_HEADER_BYTES) != 0) {
        return ZO_TRAIN_ERR_IO;
    }
    header_bytes(m, s, get_u32(h + 48), expect);
    /* the run's seed and the guard state are the checkpoint's own, not enforced */
    if (memcmp(h, expect, ZO_CKPT_IDENTITY_BYTES) != 0 || get_u32(h + 92) != 0u) {
        return ZO_TRAIN_ERR_CHECKPOINT;
    }
    uint32_t crc = zo_crc32(0u, h, ZO_CKPT_HEADER_BYTES);
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        uint8_t e[12], want[12];
        table_entry(&m->layers[i], want);
        if (source(context, e, 12u) != 0) {
            return ZO_TRAIN_ERR_IO;
        }
        if (memcmp(e, want, 12u) != 0) {
            return ZO_TRAIN_ERR_CHECKPOINT;
        }
        crc = zo_crc32(crc, e, 12u);
    }
    uint32_t remaining = zo_checkpoint_bytes(m) - ZO_CKPT_HEADER_BYTES - 12u * m->layer_count - 4u;
    while (remaining) {
        uint8_t chunk[64];
        const uint32_t n = remaining < sizeof chunk ? remaining : (uint32_t)sizeof chunk;
        if (source(context, chunk, n) != 0) {
            return ZO_TRAIN_ERR_IO;
        }
        crc = zo_crc32(crc, chunk, n);
        remaining -= n;
    }
    uint8_t tail[4];
    if (source(context, tail, 4u) != 0) {
        return ZO_TRAIN_ERR_IO;
    }
    if (get_u32(tail) != crc) {
        return ZO_TRAIN_ERR_CRC;
    }
    return ZO_TRAIN_OK;
}

/* The layers' parameters, after the header and the layer table. */
static int read_parameters(const zo_train_model *m, zo_byte_source source, void *context)
{
    uint8_t skip[4];
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        const zo_train_layer *L = &m->layers[i];
        if (source(context, (uint8_t *)L->weights, L->weight_count) != 0
            || source(context, skip, pad4(L->weight_count) - L->weight_count) != 0) {
            return ZO_TRAIN_ERR_IO;
        }
        for (uint32_t c = 0; c < L->bias_count; ++c) {
            uint8_t b[4];
            if (source(context, b, 4u) != 0) {
                return ZO_TRAIN_ERR_IO;
            }
            L->bias[c] = (int32_t)get_u32(b);
        }
    }
    return ZO_TRAIN_OK;
}

int zo_checkpoint_load(const zo_train_model *m, zo_train_state *s, zo_byte_source source,
                       void (*rewind)(void *context), void *context)
{
    uint8_t h[ZO_CKPT_HEADER_BYTES];
    const int rc = verify_checkpoint(m, s, source, context, h);
    if (rc != ZO_TRAIN_OK) {
        return rc;
    }
    rewind(context);
    uint8_t skip[ZO_CKPT_HEADER_BYTES];
    if (source(context, skip, ZO_CKPT_HEADER_BYTES) != 0) {
        return ZO_TRAIN_ERR_IO;
    }
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        if (source(context, skip, 12u) != 0) {
            return ZO_TRAIN_ERR_IO;
        }
    }
    const int read = read_parameters(m, source, context);
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        zo_refold(&m->layers[i]); /* also after a failed read: the folds match what is there */
    }
    if (read != ZO_TRAIN_OK) {
        return read;
    }
    s->step = get_u32(h + 48);
    s->seed = get_u32(h + 60);
    memcpy(&s->lr, h + 64, 4);
    s->halvings = get_u32(h + 68);
    s->best_step = get_u32(h + 72);
    s->best_correct = get_u32(h + 76);
    s->best_loss = (int64_t)((uint64_t)get_u32(h + 80) | ((uint64_t)get_u32(h + 84) << 32));
    s->rollbacks = get_u32(h + 88);
    return ZO_TRAIN_OK;
}
