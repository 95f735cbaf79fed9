/*
 * zo_link.h - the device side of the host link (docs/link.md): framed, checked, stop-and-wait
 * requests from the firmware to the host over platform.h's byte stream.
 *
 * Two layers:
 *
 *   frame decoder    bytes in, frames out (COBS, CRC-32, the checks of docs/link.md "Frames").
 *                    No I/O and no globals: the caller owns the zo_link_decoder, so a test
 *                    driver can feed it anything (tests/data/link_decoder_main.c; zo_link.c
 *                    compiled with -DZO_LINK_DECODER_ONLY is the decoder alone).
 *   requests         one link per firmware (a static instance in zo_link.c, because
 *                    zo_blockdev.h has no context argument). zo_link_request() sends a request
 *                    and returns the host's response to it, retransmitting for as long as it
 *                    takes; the zo_link_<message>() helpers build and check each message of
 *                    docs/link.md "Requests".
 *
 *     platform_init();
 *     zo_link_init();
 *     for (;;) {
 *         if (zo_link_hello(&identity) != ZO_LINK_OK) continue;
 *         while (zo_link_next(&command) == ZO_LINK_OK) { ...do it, zo_link_done(...)... }
 *     }
 *
 * Every function that talks to the host returns ZO_LINK_OK (0), a negative status the host
 * sent (a ZO_BLOCKDEV_ERR_* code, READ / WRITE / FETCH / PUT) or a ZO_LINK_ERR_* code. After
 * the host has answered RESTART (it was restarted while the device was busy) every request
 * returns ZO_LINK_ERR_RESTART at once, without sending anything, until the next
 * zo_link_hello(): whatever the firmware was doing runs to its end quickly and the command
 * loop starts over with HELLO.
 *
 * C99, no heap, no frame held whole: received payloads are decoded straight into the buffer
 * the request names (a READ's sectors into the caller's buffer), and a request is sent, and
 * sent again, from the caller's own bytes, COBS-encoded through one group of 254 bytes. What
 * the link keeps is under 400 bytes, however many sectors a READ carries; the memory report
 * lists it as "host link buffers".
 */
#ifndef ZO_LINK_H
#define ZO_LINK_H

#include <stdint.h>

#include "zo_link_messages.h" /* ZO_LINK_<message>, ZO_LINK_CMD_*, sizes */
#include "zo_status.h"        /* ZO_LINK_OK, ZO_LINK_ERR_*, ZO_BLOCKDEV_ERR_* */

/* ---- frames (docs/link.md "Frames"): sizes, message types and commands in ------------ */
/* zo_link_messages.h, generated from zocodegen/formats/link.py                           */

/* Results of zo_link_decoder_feed(). */
#define ZO_LINK_NONE 0  /* no frame ended with this byte (an empty frame ends with nothing) */
#define ZO_LINK_FRAME 1 /* *frame is a valid frame */
#define ZO_LINK_BAD (-1) /* a frame ended here and was dropped */
#define ZO_LINK_UNEXPECTED 2 /* a valid frame too big for where the caller keeps payloads */

/* Results of the request layer: ZO_LINK_OK, the host's statuses (ZO_BLOCKDEV_ERR_*) or a
 * ZO_LINK_ERR_* code; every code is in zo_status.h, one range per subsystem. */

/* The i32 status that starts SECTORS / WRITTEN / BYTES / STORED. */
#define ZO_LINK_STATUS_BYTES 4u

typedef struct {
    uint8_t type;
    uint16_t seq;
    uint16_t len;            /* payload bytes */
    const uint8_t *payload;  /* payload bytes 0 .. ZO_LINK_STATUS_BYTES - 1, and all of them
                                when no bulk destination was set */
    const uint8_t *data;     /* payload bytes from ZO_LINK_STATUS_BYTES on (len > 4 only) */
} zo_link_frame;

/* The decoder undoes COBS and checks the CRC byte by byte as the frame arrives, so no frame
 * is ever held whole: the payload goes straight where the caller wants it (its small buffer,
 * or the bulk destination of zo_link_decoder_expect(): a READ's sectors land in the caller's
 * buffer). A frame is still only *reported* at its delimiter, when every check has passed. */
typedef struct {
    uint8_t *buffer;           /* payloads, or their status bytes when bulk is set */
    uint32_t capacity;
    uint8_t *bulk;             /* payload bytes from ZO_LINK_STATUS_BYTES on, when set */
    uint32_t bulk_bytes;
    uint8_t header[ZO_LINK_HEADER_BYTES];
    uint8_t crc_bytes[ZO_LINK_CRC_BYTES];
    uint32_t encoded;          /* bytes of this frame so far, as they came (COBS) */
    uint32_t decoded;          /* body bytes so far */
    uint32_t crc;              /* running CRC-32 of header and payload */
    uint16_t len;              /* the header's payload length, once decoded */
    uint8_t run;               /* data bytes left in the current COBS group */
    uint8_t zero_pending;      /* the group ended; a zero follows unless the frame ends */
    uint8_t full_group;        /* code 255: no zero after this group */
    uint8_t bad;               /* a check failed: drop the frame at its delimiter */
    uint8_t unstored;          /* payload bytes that had no room: UNEXPECTED, not FRAME */
} zo_link_decoder;

/* A decoder that keeps payloads of up to `capacity` bytes in buffer[]. */
void zo_link_decoder_init(zo_link_decoder *d, uint8_t *buffer, uint32_t capacity);

/* From the next frame on, payload bytes ZO_LINK_STATUS_BYTES .. go to data[0..bytes) (the
 * first ZO_LINK_STATUS_BYTES still to the buffer); data = 0 goes back to the buffer alone.
 * A frame under way when this is called ends as ZO_LINK_UNEXPECTED at best. */
void zo_link_decoder_expect(zo_link_decoder *d, uint8_t *data, uint32_t bytes);

/* One received byte. Non-zero bytes are decoded as they come; a zero ends the frame:
 * ZO_LINK_NONE when it was empty, ZO_LINK_BAD when it is dropped (longer than
 * ZO_LINK_MAX_ENCODED, COBS error, shorter than header + CRC, length field != payload size,
 * length above ZO_LINK_MAX_PAYLOAD, CRC mismatch, version != 1), ZO_LINK_UNEXPECTED when it
 * is valid but its payload did not fit where the caller keeps payloads (a stale answer: no
 * request the caller is waiting for has it), otherwise ZO_LINK_FRAME with *frame set (valid
 * until the next byte). host/link/framing.py drops exactly the same frames. */
int zo_link_decoder_feed(zo_link_decoder *d, uint8_t byte, zo_link_frame *frame);

/* ---- requests (docs/link.md "Sequence numbers, timeouts, retries", "Requests") ---------- */

/* HELLO's identity of the firmware (docs/link.md "HELLO"; sizes and flags in
 * zo_link_messages.h). */
typedef struct {
    const uint8_t *model_sha256; /* 32 bytes */
    uint32_t input_bytes;
    uint32_t output_bytes;
    uint32_t classes;         /* elements of output 0 */
    float input_scale;        /* 0 for float inputs */
    int32_t input_zero_point;
    uint32_t checkpoint_bytes; /* 0 without training */
    uint32_t flags;            /* ZO_LINK_FLAG_* */
    uint8_t estimator;         /* --estimator's wire code (docs/link.md) */
    uint8_t mode;              /* 0 full, 1 sparse */
    uint8_t block;             /* ZO_LINK_NO_BLOCK unless sparse */
    uint8_t blocks;
    uint32_t queries, batch, steps, seed;
    float lr;
    uint32_t trainable_layers;
    uint32_t cycles_per_second; /* of platform_cycles(); 0 when unknown */
    const char *target;         /* up to ZO_LINK_TARGET_BYTES characters are sent */
} zo_link_identity;

/* The identity in HELLO's bytes with these flags (zo_link_hello.c): what HELLO sends and what
 * a field trainer's status record keeps. */
void zo_link_pack_hello(const zo_link_identity *id, uint32_t flags,
                        uint8_t p[ZO_LINK_HELLO_BYTES]);

/* After platform_init(): resets the link and sends the one zero byte that puts the host's
 * decoder in sync before the first frame. */
void zo_link_init(void);

/* Sends a request of type `type` whose payload is head[0..head_bytes) followed by
 * data[0..data_bytes) (either may be empty), and waits for the response: a frame with the
 * request's sequence number and type | ZO_LINK_RESPONSE, which *response then describes
 * (valid until the next request). Retransmits after 100 ms without a byte from the host,
 * doubling up to 1600 ms, forever; at once on a NAK or a dropped frame. Returns ZO_LINK_OK,
 * ZO_LINK_ERR_RESTART, or ZO_LINK_ERR_PROTOCOL for a payload above ZO_LINK_MAX_PAYLOAD. */
int zo_link_request(uint8_t type, const uint8_t *head, uint32_t head_bytes,
                    const uint8_t *data, uint32_t data_bytes, zo_link_frame *response);

/* Nonzero from a RESTART answer until the next zo_link_hello(). */
int zo_link_restarting(void);

/* HELLO -> WELCOME. Starts the session: sequence number 0, RESTART forgotten. */
int zo_link_hello(const zo_link_identity *id);

/* NEXT -> COMMAND; *command's payload is the command byte and its arguments. */
int zo_link_next(zo_link_frame *command);

/* Command 'W': lets `ms` milliseconds pass without a byte from the host (whatever arrives
 * meanwhile is stale and dropped). */
void zo_link_wait(uint32_t ms);

/* READ -> SECTORS: count (1..ZO_LINK_MAX_SECTORS) sectors of the host's image into dst. */
int zo_link_read(uint32_t lba, uint32_t count, uint8_t *dst);

/* WRITE -> WRITTEN: count (1..ZO_LINK_MAX_SECTORS) sectors from src. */
int zo_link_write(uint32_t lba, uint32_t count, const uint8_t *src);

/* TELEMETRY -> ACK (zo_train_telemetry's fields). */
int zo_link_telemetry(uint32_t step, int32_t layer, int32_t loss_q16, float lr,
                      uint32_t cycles);

/* SCALARS -> ACK: a WP layer's query sums of one step (zo_scalars_hook), in pieces of at
 * most ZO_LINK_SCALARS_PER_FRAME: u32 step, u16 layer, u16 first, u16 count, u16 total,
 * then count int32 (little-endian, as both cores store them). */
#define ZO_LINK_SCALARS_PER_FRAME 256u
int zo_link_scalars(uint32_t step, int32_t layer, const int32_t *values, uint32_t count);

/* LOG -> ACK: a line of text for the host's log (cut at ZO_LINK_MAX_PAYLOAD bytes). */
int zo_link_log(const char *text);

/* EVENT -> ACK: a decision of the training guard or --lr auto (docs/link.md "Events"):
 * kind ZO_EVENT_*, decision ZO_DECISION_*, then the fields of formats/link.py's Event. */
int zo_link_event(uint8_t kind, uint8_t decision, uint32_t step, uint32_t correct,
                  uint32_t of, uint32_t halvings, uint32_t eta_ppm, uint32_t steps,
                  int64_t loss_q16);

/* DONE -> ACK: the end of command `command`. */
int zo_link_done(uint8_t command, int32_t status, uint32_t value, uint32_t cycles);

/* ERROR -> ACK: why a command was refused, for a person to read. */
int zo_link_error(int32_t code, const char *text);

/* FETCH -> BYTES: length (1..ZO_LINK_MAX_CHUNK) bytes of the host's input from offset. */
int zo_link_fetch(uint32_t offset, uint8_t *dst, uint32_t length);

/* PUT -> STORED: length (1..ZO_LINK_MAX_CHUNK) bytes of output at offset. */
int zo_link_put(uint32_t offset, const uint8_t *src, uint32_t length);

#endif /* ZO_LINK_H */
