/*
 * zo_link.c - the device side of the host link, see zo_link.h and docs/link.md.
 *
 * Compiled with -DZO_LINK_DECODER_ONLY it is just the frame decoder, without platform.h:
 * what a host-side test driver needs (tests/data/link_decoder_main.c).
 */
#include <string.h>

#if !defined(ZO_LINK_DECODER_ONLY)
#include "platform.h"
#endif
#include "zo_bytes.h"
#include "zo_crc32.h"
#include "zo_link.h"

#define ZO_COBS_MAX_RUN 254u  /* data bytes one COBS code byte can stand for */
#define ZO_COBS_FULL_RUN 0xFFu /* code of a run of 254 not followed by a zero */

/* docs/link.md "Sequence numbers, timeouts, retries" */
#define ZO_LINK_FIRST_TIMEOUT_MS 100u
#define ZO_LINK_LAST_TIMEOUT_MS 1600u

/* ---- frame decoder ------------------------------------------------------------------- */

/* Forgets the frame so far; where payloads go stays. */
static void frame_reset(zo_link_decoder *d)
{
    d->encoded = 0u;
    d->decoded = 0u;
    d->crc = 0u;
    d->len = 0u;
    d->run = 0u;
    d->zero_pending = 0u;
    d->full_group = 0u;
    d->bad = 0u;
    d->unstored = 0u;
}

void zo_link_decoder_init(zo_link_decoder *d, uint8_t *buffer, uint32_t capacity)
{
    d->buffer = buffer;
    d->capacity = capacity;
    d->bulk = 0;
    d->bulk_bytes = 0u;
    frame_reset(d);
}

void zo_link_decoder_expect(zo_link_decoder *d, uint8_t *data, uint32_t bytes)
{
    if (d->encoded > 0u) {
        d->unstored = 1u; /* a frame half stored in the old place is nobody's answer */
    }
    d->bulk = data;
    d->bulk_bytes = data != 0 ? bytes : 0u;
}

/* Payload byte i: to the bulk destination from ZO_LINK_STATUS_BYTES on when there is one,
 * otherwise to the buffer; a byte with no room is not kept and the frame is UNEXPECTED. */
static void put_payload(zo_link_decoder *d, uint32_t i, uint8_t byte)
{
    if (d->bulk != 0 && i >= ZO_LINK_STATUS_BYTES) {
        if (i - ZO_LINK_STATUS_BYTES < d->bulk_bytes) {
            d->bulk[i - ZO_LINK_STATUS_BYTES] = byte;
        } else {
            d->unstored = 1u;
        }
    } else if (i < d->capacity) {
        d->buffer[i] = byte;
    } else {
        d->unstored = 1u;
    }
}

/* One decoded body byte: header, payload (CRC'd as it passes) or CRC, by position. */
static void put_body(zo_link_decoder *d, uint8_t byte)
{
    const uint32_t pos = d->decoded++;
    uint32_t i;
    if (pos < ZO_LINK_HEADER_BYTES) {
        d->header[pos] = byte;
        d->crc = zo_crc32(d->crc, &byte, 1u);
        if (pos == ZO_LINK_HEADER_BYTES - 1u) {
            d->len = zo_get_u16(d->header + 4);
            if (d->len > ZO_LINK_MAX_PAYLOAD) {
                d->bad = 1u;
            }
        }
        return;
    }
    i = pos - ZO_LINK_HEADER_BYTES;
    if (i < d->len) {
        d->crc = zo_crc32(d->crc, &byte, 1u);
        put_payload(d, i, byte);
    } else if (i - d->len < ZO_LINK_CRC_BYTES) {
        d->crc_bytes[i - d->len] = byte;
    } else {
        d->bad = 1u; /* longer than its length field says */
    }
}

/* COBS (Cheshire & Baker): each code byte c (1..255) is followed by c - 1 data bytes, and a
 * zero follows them unless c is 255 or the group is the frame's last. Whether a group is the
 * last is known only at the delimiter, so its zero waits for the next code byte. */
static void cobs_byte(zo_link_decoder *d, uint8_t byte)
{
    if (d->run > 0u) {
        put_body(d, byte);
        if (--d->run == 0u && !d->full_group) {
            d->zero_pending = 1u;
        }
        return;
    }
    if (d->zero_pending) {
        d->zero_pending = 0u;
        put_body(d, 0u);
    }
    d->run = (uint8_t)(byte - 1u);
    d->full_group = (byte == ZO_COBS_FULL_RUN);
    if (d->run == 0u && !d->full_group) {
        d->zero_pending = 1u;
    }
}

/* The checks of docs/link.md "Frames" at the delimiter. */
static int frame_end(const zo_link_decoder *d, zo_link_frame *frame)
{
    if (d->bad || d->run != 0u) {
        return ZO_LINK_BAD; /* too long, or a code byte pointed past the end */
    }
    if (d->decoded < ZO_LINK_HEADER_BYTES + ZO_LINK_CRC_BYTES ||
        d->decoded != ZO_LINK_HEADER_BYTES + (uint32_t)d->len + ZO_LINK_CRC_BYTES) {
        return ZO_LINK_BAD;
    }
    if (d->crc != zo_get_u32(d->crc_bytes) || d->header[1] != ZO_LINK_VERSION) {
        return ZO_LINK_BAD;
    }
    if (d->unstored) {
        return ZO_LINK_UNEXPECTED;
    }
    frame->type = d->header[0];
    frame->seq = zo_get_u16(d->header + 2);
    frame->len = d->len;
    frame->payload = d->buffer;
    frame->data = d->bulk != 0 ? d->bulk : d->buffer + ZO_LINK_STATUS_BYTES;
    return ZO_LINK_FRAME;
}

int zo_link_decoder_feed(zo_link_decoder *d, uint8_t byte, zo_link_frame *frame)
{
    int event;
    if (byte != 0u) {
        if (d->encoded <= ZO_LINK_MAX_ENCODED) {
            d->encoded++; /* stops counting past the limit: bounded on endless garbage */
        }
        if (d->encoded > ZO_LINK_MAX_ENCODED) {
            d->bad = 1u;
        } else if (!d->bad) {
            cobs_byte(d, byte);
        }
        return ZO_LINK_NONE;
    }
    if (d->encoded == 0u) {
        return ZO_LINK_NONE; /* two zeros in a row, or the zero a device sends at boot */
    }
    event = frame_end(d, frame); /* a pending zero is the delimiter's: dropped */
    frame_reset(d);
    return event;
}

#if !defined(ZO_LINK_DECODER_ONLY)
/* ---- the link ------------------------------------------------------------------------ */

static struct {
    zo_link_decoder rx;
    uint8_t rx_buffer[ZO_LINK_RESPONSE_BUFFER]; /* payloads other than READ / FETCH data */
    uint8_t group[ZO_COBS_MAX_RUN];             /* the COBS group being sent */
    /* The pending request, kept for retransmissions: its header and CRC, and where the
     * caller's bytes are (they stay put until zo_link_request() returns). */
    uint8_t header[ZO_LINK_HEADER_BYTES];
    uint8_t crc[ZO_LINK_CRC_BYTES];
    const uint8_t *head;
    uint32_t head_bytes;
    const uint8_t *data;
    uint32_t data_bytes;
    uint16_t next_seq;
    uint8_t restart; /* RESTART received: every request fails until the next HELLO */
} link_state;

/* COBS on the fly, through one group: a zero byte (or 254 bytes without one) sends the group
 * with its code byte. The groups are cut exactly where Python's cobs.encode() cuts them. */
typedef struct {
    uint32_t fill;
    uint8_t after_full; /* the last group sent was a full one (code 255) */
} cobs_writer;

static void cobs_send_group(cobs_writer *w, uint8_t code)
{
    platform_write(&code, 1u);
    platform_write(link_state.group, w->fill);
    w->fill = 0u;
    w->after_full = (code == ZO_COBS_FULL_RUN);
}

static void cobs_put(cobs_writer *w, const uint8_t *bytes, uint32_t n)
{
    for (uint32_t i = 0u; i < n; i++) {
        if (bytes[i] == 0u) {
            cobs_send_group(w, (uint8_t)(w->fill + 1u));
            continue;
        }
        link_state.group[w->fill++] = bytes[i];
        if (w->fill == ZO_COBS_MAX_RUN) {
            cobs_send_group(w, ZO_COBS_FULL_RUN);
        }
    }
}

/* Sends the pending request as one frame: header, the caller's head and data, CRC. */
static void send_request(void)
{
    static const uint8_t delimiter = 0u;
    cobs_writer w = {0u, 0u};
    cobs_put(&w, link_state.header, ZO_LINK_HEADER_BYTES);
    cobs_put(&w, link_state.head, link_state.head_bytes);
    cobs_put(&w, link_state.data, link_state.data_bytes);
    cobs_put(&w, link_state.crc, ZO_LINK_CRC_BYTES);
    if (w.fill > 0u || !w.after_full) {
        cobs_send_group(&w, (uint8_t)(w.fill + 1u)); /* the last group: no zero after it */
    }
    platform_write(&delimiter, 1u);
}

void zo_link_init(void)
{
    static const uint8_t delimiter = 0u;
    zo_link_decoder_init(&link_state.rx, link_state.rx_buffer, sizeof link_state.rx_buffer);
    link_state.next_seq = 0u;
    link_state.restart = 0u;
    /* docs/link.md "Frames": whatever the host received before this reset ends here, so the
     * first frame is decoded on its own. */
    platform_write(&delimiter, 1u);
}

int zo_link_restarting(void)
{
    return link_state.restart;
}

int zo_link_request(uint8_t type, const uint8_t *head, uint32_t head_bytes,
                    const uint8_t *data, uint32_t data_bytes, zo_link_frame *response)
{
    const uint16_t seq = link_state.next_seq;
    uint32_t timeout_ms = ZO_LINK_FIRST_TIMEOUT_MS;
    uint32_t len;
    uint32_t crc;
    if (link_state.restart) {
        return ZO_LINK_ERR_RESTART;
    }
    if (head_bytes > ZO_LINK_MAX_PAYLOAD || data_bytes > ZO_LINK_MAX_PAYLOAD - head_bytes) {
        return ZO_LINK_ERR_PROTOCOL;
    }
    len = head_bytes + data_bytes;
    link_state.next_seq = (uint16_t)(seq + 1u);
    link_state.header[0] = type;
    link_state.header[1] = (uint8_t)ZO_LINK_VERSION;
    zo_put_u16(link_state.header + 2, seq);
    zo_put_u16(link_state.header + 4, (uint16_t)len);
    link_state.head = head;
    link_state.head_bytes = head_bytes;
    link_state.data = data;
    link_state.data_bytes = data_bytes;
    crc = zo_crc32(0u, link_state.header, ZO_LINK_HEADER_BYTES);
    crc = zo_crc32(crc, head, head_bytes);
    crc = zo_crc32(crc, data, data_bytes);
    zo_put_u32(link_state.crc, crc);
    send_request();

    for (;;) {
        uint8_t byte;
        zo_link_frame frame;
        int event;
        if (!platform_read_byte(&byte, timeout_ms)) {
            /* Silence: the request or its response was lost. The host answers a repeated
             * request from its cache, so retransmitting is always safe. */
            if (timeout_ms < ZO_LINK_LAST_TIMEOUT_MS) {
                timeout_ms *= 2u;
            }
            send_request();
            continue;
        }
        event = zo_link_decoder_feed(&link_state.rx, byte, &frame);
        if (event == ZO_LINK_BAD || (event == ZO_LINK_FRAME && frame.type == ZO_LINK_NAK)) {
            /* The dropped frame may have been the response, or the host could not read the
             * request: no point waiting for the timeout. */
            send_request();
        } else if (event == ZO_LINK_FRAME && frame.seq == seq) {
            if (frame.type == (uint8_t)(type | ZO_LINK_RESPONSE)) {
                *response = frame;
                return ZO_LINK_OK;
            }
            if (frame.type == ZO_LINK_RESTART) {
                link_state.restart = 1u;
                return ZO_LINK_ERR_RESTART;
            }
        }
        /* Anything else answers an earlier request (a duplicate, or a response to a
         * retransmission; UNEXPECTED: one too big for this request): stale, ignored. */
    }
}

/* A response that must be empty (WELCOME, ACK). */
static int empty_response(int rc, const zo_link_frame *response)
{
    if (rc != ZO_LINK_OK) {
        return rc;
    }
    return response->len == 0u ? ZO_LINK_OK : ZO_LINK_ERR_PROTOCOL;
}

/* A response that starts with an i32 status: 0 followed by exactly `bytes` bytes, or a
 * negative status and nothing else. Returns the status. */
static int status_response(int rc, const zo_link_frame *response, uint32_t bytes)
{
    int32_t status;
    if (rc != ZO_LINK_OK) {
        return rc;
    }
    if (response->len < ZO_LINK_STATUS_BYTES) {
        return ZO_LINK_ERR_PROTOCOL;
    }
    status = (int32_t)zo_get_u32(response->payload);
    if (status > 0 || response->len != ZO_LINK_STATUS_BYTES + (status == 0 ? bytes : 0u)) {
        return ZO_LINK_ERR_PROTOCOL;
    }
    return (int)status;
}

static uint32_t text_bytes(const char *text, uint32_t limit)
{
    uint32_t n = 0u;
    while (n < limit && text[n] != '\0') {
        n++;
    }
    return n;
}

int zo_link_hello(const zo_link_identity *id)
{
    uint8_t p[ZO_LINK_HELLO_BYTES];
    zo_link_frame welcome;
    zo_link_pack_hello(id, id->flags | ZO_LINK_FLAG_TRIMMED_READS, p); /* zo_link_read fills zeros */
    /* docs/link.md: HELLO is request 0; a session the host restarted begins here too. */
    link_state.next_seq = 0u;
    link_state.restart = 0u;
    return empty_response(zo_link_request(ZO_LINK_HELLO, p, sizeof p, 0, 0u, &welcome),
                          &welcome);
}

int zo_link_next(zo_link_frame *command)
{
    const int rc = zo_link_request(ZO_LINK_NEXT, 0, 0u, 0, 0u, command);
    if (rc != ZO_LINK_OK) {
        return rc;
    }
    return command->len > 0u ? ZO_LINK_OK : ZO_LINK_ERR_PROTOCOL;
}

void zo_link_wait(uint32_t ms)
{
    uint8_t byte;
    zo_link_frame frame;
    while (platform_read_byte(&byte, ms)) {
        (void)zo_link_decoder_feed(&link_state.rx, byte, &frame); /* no request is pending */
    }
}

/* READ and FETCH: a request of (u32 where, u16 how many) answered by a status and `bytes`
 * bytes, which the decoder writes straight into dst (a dropped or stale frame may have
 * written there too: dst holds the answer only when this returns ZO_LINK_OK). With trimmed,
 * a successful answer may leave out trailing zero bytes (READ's SECTORS, HELLO's
 * TRIMMED_READS flag): they are zero in dst. */
static int ask_for_bytes(uint8_t type, uint32_t where, uint16_t count, uint8_t *dst,
                         uint32_t bytes, int trimmed)
{
    uint8_t head[6];
    zo_link_frame answer;
    uint32_t came;
    int rc;
    zo_put_u32(head, where);
    zo_put_u16(head + 4, count);
    zo_link_decoder_expect(&link_state.rx, dst, bytes);
    rc = zo_link_request(type, head, sizeof head, 0, 0u, &answer);
    zo_link_decoder_expect(&link_state.rx, 0, 0u); /* later frames must not reach dst */
    if (rc != ZO_LINK_OK || !trimmed || answer.len < ZO_LINK_STATUS_BYTES
        || zo_get_u32(answer.payload) != 0u) {
        return status_response(rc, &answer, bytes);
    }
    came = answer.len - ZO_LINK_STATUS_BYTES;
    if (came > bytes) {
        return ZO_LINK_ERR_PROTOCOL;
    }
    memset(dst + came, 0, bytes - came);
    return ZO_LINK_OK;
}

int zo_link_read(uint32_t lba, uint32_t count, uint8_t *dst)
{
    if (count < 1u || count > ZO_LINK_MAX_SECTORS) {
        return ZO_LINK_ERR_PROTOCOL;
    }
    return ask_for_bytes(ZO_LINK_READ, lba, (uint16_t)count, dst,
                         count * ZO_LINK_SECTOR_BYTES, 1);
}

int zo_link_write(uint32_t lba, uint32_t count, const uint8_t *src)
{
    uint8_t head[6];
    zo_link_frame written;
    int rc;
    if (count < 1u || count > ZO_LINK_MAX_SECTORS) {
        return ZO_LINK_ERR_PROTOCOL;
    }
    zo_put_u32(head, lba);
    zo_put_u16(head + 4, (uint16_t)count);
    rc = zo_link_request(ZO_LINK_WRITE, head, sizeof head, src, count * ZO_LINK_SECTOR_BYTES,
                         &written);
    return status_response(rc, &written, 0u);
}

int zo_link_scalars(uint32_t step, int32_t layer, const int32_t *values, uint32_t count)
{
    int rc = ZO_LINK_OK;
    for (uint32_t first = 0u; rc == ZO_LINK_OK && first < count;
         first += ZO_LINK_SCALARS_PER_FRAME) {
        const uint32_t n = count - first < ZO_LINK_SCALARS_PER_FRAME
                               ? count - first : ZO_LINK_SCALARS_PER_FRAME;
        uint8_t head[12];
        zo_link_frame ack;
        zo_put_u32(head, step);
        zo_put_u16(head + 4, (uint16_t)layer);
        zo_put_u16(head + 6, (uint16_t)first);
        zo_put_u16(head + 8, (uint16_t)n);
        zo_put_u16(head + 10, (uint16_t)count);
        rc = empty_response(zo_link_request(ZO_LINK_SCALARS, head, sizeof head,
                                            (const uint8_t *)(values + first), 4u * n, &ack),
                            &ack);
    }
    return rc;
}

int zo_link_telemetry(uint32_t step, int32_t layer, int32_t loss_q16, float lr,
                      uint32_t cycles)
{
    uint8_t p[20];
    zo_link_frame ack;
    zo_put_u32(p, step);
    zo_put_u32(p + 4, (uint32_t)layer);
    zo_put_u32(p + 8, (uint32_t)loss_q16);
    zo_put_f32(p + 12, lr);
    zo_put_u32(p + 16, cycles);
    return empty_response(zo_link_request(ZO_LINK_TELEMETRY, p, sizeof p, 0, 0u, &ack), &ack);
}

int zo_link_log(const char *text)
{
    zo_link_frame ack;
    const uint32_t n = text_bytes(text, ZO_LINK_MAX_PAYLOAD);
    return empty_response(zo_link_request(ZO_LINK_LOG, 0, 0u, (const uint8_t *)text, n, &ack),
                          &ack);
}

int zo_link_event(uint8_t kind, uint8_t decision, uint32_t step, uint32_t correct,
                  uint32_t of, uint32_t halvings, uint32_t eta_ppm, uint32_t steps,
                  int64_t loss_q16)
{
    uint8_t p[ZO_LINK_EVENT_BYTES];
    zo_link_frame ack;
    memset(p, 0, sizeof p);
    p[0] = kind;
    p[1] = decision; /* then 2 zero bytes */
    zo_put_u32(p + 4, step);
    zo_put_u32(p + 8, correct);
    zo_put_u32(p + 12, of);
    zo_put_u32(p + 16, halvings);
    zo_put_u32(p + 20, eta_ppm);
    zo_put_u32(p + 24, steps);
    zo_put_u32(p + 28, (uint32_t)((uint64_t)loss_q16 & 0xFFFFFFFFu));
    zo_put_u32(p + 32, (uint32_t)((uint64_t)loss_q16 >> 32));
    return empty_response(zo_link_request(ZO_LINK_EVENT, p, sizeof p, 0, 0u, &ack), &ack);
}

int zo_link_done(uint8_t command, int32_t status, uint32_t value, uint32_t cycles)
{
    uint8_t p[16];
    zo_link_frame ack;
    memset(p, 0, sizeof p);
    p[0] = command; /* then 3 zero bytes */
    zo_put_u32(p + 4, (uint32_t)status);
    zo_put_u32(p + 8, value);
    zo_put_u32(p + 12, cycles);
    return empty_response(zo_link_request(ZO_LINK_DONE, p, sizeof p, 0, 0u, &ack), &ack);
}

int zo_link_error(int32_t code, const char *text)
{
    uint8_t head[4];
    zo_link_frame ack;
    const uint32_t n = text_bytes(text, ZO_LINK_MAX_PAYLOAD - sizeof head);
    zo_put_u32(head, (uint32_t)code);
    return empty_response(zo_link_request(ZO_LINK_ERROR, head, sizeof head,
                                          (const uint8_t *)text, n, &ack),
                          &ack);
}

int zo_link_fetch(uint32_t offset, uint8_t *dst, uint32_t length)
{
    if (length < 1u || length > ZO_LINK_MAX_CHUNK) {
        return ZO_LINK_ERR_PROTOCOL;
    }
    return ask_for_bytes(ZO_LINK_FETCH, offset, (uint16_t)length, dst, length, 0);
}

int zo_link_put(uint32_t offset, const uint8_t *src, uint32_t length)
{
    uint8_t head[4];
    zo_link_frame stored;
    if (length < 1u || length > ZO_LINK_MAX_CHUNK) {
        return ZO_LINK_ERR_PROTOCOL;
    }
    zo_put_u32(head, offset);
    const int rc = zo_link_request(ZO_LINK_PUT, head, sizeof head, src, length, &stored);
    return status_response(rc, &stored, 0u);
}
#endif /* !ZO_LINK_DECODER_ONLY */
