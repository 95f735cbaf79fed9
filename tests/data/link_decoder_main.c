/* Fuzz / differential driver for the host link's frame decoder (templates/link/zo_link.c,
 * docs/link.md "Frames"): reads all of stdin, feeds every byte to zo_link_decoder_feed() and
 * prints one line per event, to compare with host/link/framing.py's FrameDecoder:
 *
 *   F <type> <seq> <len> <payload>   a frame; numbers in decimal, the payload in lowercase hex
 *                                    (empty when len is 0: the line ends with a space)
 *   B                                a dropped frame
 *   U                                a valid frame with no room (never: the buffer takes any)
 *
 * (nothing for ZO_LINK_NONE). Build natively, e.g. with -fsanitize=address,undefined:
 *   cc -std=c99 -Itemplates/link -DZO_LINK_DECODER_ONLY tests/data/link_decoder_main.c \
 *      templates/link/zo_link.c templates/link/zo_crc32.c -o link_decoder
 */
#include <stdio.h>

#include "zo_link.h"

static zo_link_decoder decoder;
static uint8_t payload[ZO_LINK_MAX_PAYLOAD]; /* room for any frame: nothing is UNEXPECTED */

int main(void)
{
    int c;
    zo_link_decoder_init(&decoder, payload, sizeof payload);
    while ((c = getchar()) != EOF) {
        zo_link_frame frame;
        const int event = zo_link_decoder_feed(&decoder, (uint8_t)c, &frame);
        if (event == ZO_LINK_BAD) {
            fputs("B\n", stdout);
        } else if (event == ZO_LINK_UNEXPECTED) {
            fputs("U\n", stdout);
        } else if (event == ZO_LINK_FRAME) {
            printf("F %u %u %u ", (unsigned)frame.type, (unsigned)frame.seq,
                   (unsigned)frame.len);
            for (unsigned i = 0; i < frame.len; i++) {
                printf("%02x", (unsigned)frame.payload[i]);
            }
            putchar('\n');
        }
    }
    return ferror(stdin) ? 1 : 0;
}
