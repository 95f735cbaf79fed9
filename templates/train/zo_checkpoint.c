/*
 * Checkpoints (zo_train.h): the header, the layer table and every trained layer's
 * parameters, CRC-32 checked; the byte layout of zocodegen/training/checkpoint.py.
 */
#include "zo_bytes.h"
#include "zo_checkpoint_format.h"
#include "zo_train_engine.h"

static uint32_t pad4(uint32_t n)
{
    return (n + 3u) & ~3u;
}

/* --scales: a layer's trained filter scales, one per channel (else none) */
static uint32_t scale_count(const zo_train_layer *L)
{
    return L->scales ? L->channels : 0u;
}

uint32_t zo_checkpoint_bytes(const zo_train_model *m)
{
    uint32_t total = ZO_CKPT_HEADER_BYTES + ZO_CKPT_ENTRY_BYTES * m->layer_count + 4u;
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        const zo_train_layer *L = &m->layers[i];
        total += pad4(L->weight_count) + 4u * L->bias_count + 4u * scale_count(L);
    }
    return total;
}

static void header_bytes(const zo_train_model *m, const zo_train_state *s, uint32_t step,
                         uint8_t *h)
{
    uint32_t lr_bits;
    memcpy(&lr_bits, &s->lr, 4);
    memset(h, 0, ZO_CKPT_HEADER_BYTES);
    memcpy(h + ZO_CKPT_OFF_MAGIC, ZO_CKPT_MAGIC, ZO_CKPT_MAGIC_BYTES);
    zo_put_u32(h + ZO_CKPT_OFF_VERSION, ZO_CKPT_VERSION);
    zo_put_u32(h + ZO_CKPT_OFF_HEADER_BYTES, ZO_CKPT_HEADER_BYTES);
    memcpy(h + ZO_CKPT_OFF_SHA256, m->model_sha256, 32);
    zo_put_u32(h + ZO_CKPT_OFF_STEP, step);
    zo_put_u32(h + ZO_CKPT_OFF_LAYERS, m->layer_count);
    zo_put_u32(h + ZO_CKPT_OFF_BYTES, zo_checkpoint_bytes(m));
    zo_put_u32(h + ZO_CKPT_OFF_SEED, s->seed);
    zo_put_u32(h + ZO_CKPT_OFF_LR, lr_bits);
    zo_put_u32(h + ZO_CKPT_OFF_HALVINGS, s->halvings);
    zo_put_u32(h + ZO_CKPT_OFF_BEST_STEP, s->best_step);
    zo_put_u32(h + ZO_CKPT_OFF_BEST_CORRECT, s->best_correct);
    zo_put_u32(h + ZO_CKPT_OFF_BEST_LOSS, (uint32_t)(uint64_t)s->best_loss);
    zo_put_u32(h + ZO_CKPT_OFF_BEST_LOSS + 4, (uint32_t)((uint64_t)s->best_loss >> 32));
    zo_put_u32(h + ZO_CKPT_OFF_ROLLBACKS, s->rollbacks);
    zo_put_u32(h + ZO_CKPT_OFF_FALLING, s->falling);
}

static void table_entry(const zo_train_layer *L, uint8_t *e)
{
    zo_put_u32(e, L->op);
    zo_put_u32(e + 4, L->weight_count);
    zo_put_u32(e + 8, L->bias_count);
    zo_put_u32(e + 12, scale_count(L));
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
        emit(&w, buf, ZO_CKPT_ENTRY_BYTES);
    }
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        const zo_train_layer *L = &m->layers[i];
        static const uint8_t zeros[4] = {0, 0, 0, 0};
        emit(&w, (const uint8_t *)L->weights, L->weight_count);
        emit(&w, zeros, pad4(L->weight_count) - L->weight_count);
        for (uint32_t c = 0; c < L->bias_count; ++c) {
            zo_put_u32(buf, (uint32_t)L->bias[c]);
            emit(&w, buf, 4u);
        }
        for (uint32_t c = 0; c < scale_count(L); ++c) {
            uint32_t bits;
            memcpy(&bits, &L->scales->scale[c], 4);
            zo_put_u32(buf, bits);
            emit(&w, buf, 4u);
        }
    }
    zo_put_u32(buf, w.crc);
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
    header_bytes(m, s, zo_get_u32(h + ZO_CKPT_OFF_STEP), expect);
    /* the run's seed and the guard state are the checkpoint's own, not enforced, except
     * that a pending fall count below the build's rollback count (or the guard's stop) */
    const uint32_t falls = m->guard != NULL && m->guard->guard ? m->guard->falls_to_roll_back
                                                               : 1u;
    const uint32_t falling = zo_get_u32(h + ZO_CKPT_OFF_FALLING);
    if (memcmp(h, expect, ZO_CKPT_IDENTITY_BYTES) != 0
        || (falling >= falls && !(falling == ZO_CKPT_STOPPED && falls > 1u))) {
        return ZO_TRAIN_ERR_CHECKPOINT;
    }
    uint32_t crc = zo_crc32(0u, h, ZO_CKPT_HEADER_BYTES);
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        uint8_t e[ZO_CKPT_ENTRY_BYTES], want[ZO_CKPT_ENTRY_BYTES];
        table_entry(&m->layers[i], want);
        if (source(context, e, ZO_CKPT_ENTRY_BYTES) != 0) {
            return ZO_TRAIN_ERR_IO;
        }
        if (memcmp(e, want, ZO_CKPT_ENTRY_BYTES) != 0) {
            return ZO_TRAIN_ERR_CHECKPOINT;
        }
        crc = zo_crc32(crc, e, ZO_CKPT_ENTRY_BYTES);
    }
    int scales_ok = 1;
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        const zo_train_layer *L = &m->layers[i];
        uint32_t remaining = pad4(L->weight_count) + 4u * L->bias_count;
        while (remaining) {
            uint8_t chunk[64];
            const uint32_t n = remaining < sizeof chunk ? remaining : (uint32_t)sizeof chunk;
            if (source(context, chunk, n) != 0) {
                return ZO_TRAIN_ERR_IO;
            }
            crc = zo_crc32(crc, chunk, n);
            remaining -= n;
        }
#if ZO_TRAIN_SCALES
        /* --scales: what an update can reach, [s0 / 4, 4 s0] (NaN is not), or the load
         * changes nothing: a rebuild needs a positive finite scale */
        for (uint32_t c = 0; c < scale_count(L); ++c) {
            uint8_t b[4];
            if (source(context, b, 4u) != 0) {
                return ZO_TRAIN_ERR_IO;
            }
            crc = zo_crc32(crc, b, 4u);
            const uint32_t bits = zo_get_u32(b);
            float v;
            memcpy(&v, &bits, 4);
            const float s0 = L->scales->scale_flash[c];
            scales_ok &= v >= 0.25f * s0 && v <= 4.0f * s0;
        }
#endif
    }
    uint8_t tail[4];
    if (source(context, tail, 4u) != 0) {
        return ZO_TRAIN_ERR_IO;
    }
    if (zo_get_u32(tail) != crc) {
        return ZO_TRAIN_ERR_CRC;
    }
    return scales_ok ? ZO_TRAIN_OK : ZO_TRAIN_ERR_CHECKPOINT;
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
            L->bias[c] = (int32_t)zo_get_u32(b);
        }
        for (uint32_t c = 0; c < scale_count(L); ++c) {
            uint8_t b[4];
            if (source(context, b, 4u) != 0) {
                return ZO_TRAIN_ERR_IO;
            }
            const uint32_t bits = zo_get_u32(b);
            memcpy(&L->scales->scale[c], &bits, 4);
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
        if (source(context, skip, ZO_CKPT_ENTRY_BYTES) != 0) {
            return ZO_TRAIN_ERR_IO;
        }
    }
    const int read = read_parameters(m, source, context);
    for (uint32_t i = 0; i < m->layer_count; ++i) {
        /* also after a failed read: the folds and multipliers match what is there */
        zo_refold(&m->layers[i]);
#if ZO_TRAIN_SCALES
        if (m->layers[i].scales) {
            zo_scales_rebuild(&m->layers[i]);
        }
#endif
    }
    if (read != ZO_TRAIN_OK) {
        return read;
    }
    s->step = zo_get_u32(h + ZO_CKPT_OFF_STEP);
    s->seed = zo_get_u32(h + ZO_CKPT_OFF_SEED);
    memcpy(&s->lr, h + ZO_CKPT_OFF_LR, 4);
    s->halvings = zo_get_u32(h + ZO_CKPT_OFF_HALVINGS);
    s->best_step = zo_get_u32(h + ZO_CKPT_OFF_BEST_STEP);
    s->best_correct = zo_get_u32(h + ZO_CKPT_OFF_BEST_CORRECT);
    s->best_loss = (int64_t)((uint64_t)zo_get_u32(h + ZO_CKPT_OFF_BEST_LOSS)
                             | ((uint64_t)zo_get_u32(h + ZO_CKPT_OFF_BEST_LOSS + 4) << 32));
    s->rollbacks = zo_get_u32(h + ZO_CKPT_OFF_ROLLBACKS);
    s->falling = zo_get_u32(h + ZO_CKPT_OFF_FALLING);
    return ZO_TRAIN_OK;
}
