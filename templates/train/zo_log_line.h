/*
 * A log line built from text and decimal numbers without printf (no libc formatting on the
 * device): the block trials' and the training guard's LOG lines (docs/link.md).
 */
#ifndef ZO_LOG_LINE_H
#define ZO_LOG_LINE_H

#include <stdint.h>

typedef struct {
    char text[128];
    uint32_t len;
} zo_log_line;

static inline void zo_line_start(zo_log_line *l)
{
    l->len = 0u;
    l->text[0] = '\0';
}

/* Appends t; a line that would overflow is cut, still terminated. */
static inline void zo_line_text(zo_log_line *l, const char *t)
{
    while (*t && l->len + 1u < sizeof l->text) {
        l->text[l->len++] = *t++;
    }
    l->text[l->len] = '\0';
}

/* Appends key, then v in decimal. */
static inline void zo_line_u64(zo_log_line *l, const char *key, uint64_t v)
{
    char digits[21];
    int n = 0;
    zo_line_text(l, key);
    do {
        digits[n++] = (char)('0' + v % 10u);
        v /= 10u;
    } while (v);
    while (n && l->len + 1u < sizeof l->text) {
        l->text[l->len++] = digits[--n];
    }
    l->text[l->len] = '\0';
}

#endif /* ZO_LOG_LINE_H */
