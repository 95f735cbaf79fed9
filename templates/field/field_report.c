/*
 * field_report.c - what main.c reports to its host, on a field trainer (field.h): LOG, ERROR,
 * TELEMETRY and EVENT become lines on the UART (`field: ...`, which `zocodegen monitor` or any
 * terminal shows) and entries of the run log on the card; the link calls no field command
 * needs answer that they are not there.
 */
#include <stdint.h>
#include <string.h>

#include "field.h"
#include "platform.h"
#include "zo_bytes.h"
#include "zo_status_names.h"

#define FIELD_STEP_LINES 100u /* progress lines per run, at most */

/* ---- text on the UART ------------------------------------------------------------------- */

void field_say(const char *text)
{
    platform_write((const uint8_t *)"field: ", 7u);
    platform_write((const uint8_t *)text, (uint32_t)strlen(text));
    platform_write((const uint8_t *)"\r\n", 2u);
}

/* Appends v / 10^decimals with that many decimals (v >= 0). */
void field_line_fixed(zo_log_line *l, const char *key, uint64_t v, uint32_t decimals)
{
    uint64_t unit = 1u;
    for (uint32_t i = 0u; i < decimals; ++i) {
        unit *= 10u;
    }
    zo_line_u64(l, key, v / unit);
    zo_line_text(l, ".");
    for (uint64_t rest = v % unit, digit = unit / 10u; digit > 0u; digit /= 10u) {
        zo_line_u64(l, "", rest / digit % 10u);
    }
}

uint64_t field_q16(int64_t q16)
{
    return q16 > 0 ? ((uint64_t)q16 * 10000u + 32768u) >> 16 : 0u;
}

void field_line_status(zo_log_line *l, int32_t status)
{
    zo_line_text(l, zo_status_name(status));
    zo_line_text(l, status < 0 ? " (-" : " (");
    zo_line_u64(l, "", (uint64_t)(status < 0 ? -(int64_t)status : status));
    zo_line_text(l, ")");
}

/* ---- the run log ------------------------------------------------------------------------ */

void field_entry(uint8_t *e, uint8_t kind, uint32_t step, uint32_t correct, uint32_t of,
                 uint32_t value)
{
    memset(e, 0, ZO_FIELD_ENTRY_BYTES);
    e[ZO_FIELD_ENTRY_KIND] = kind;
    zo_put_u32(e + ZO_FIELD_ENTRY_STEP, step);
    zo_put_u32(e + ZO_FIELD_ENTRY_CORRECT, correct);
    zo_put_u32(e + ZO_FIELD_ENTRY_OF, of);
    zo_put_u32(e + ZO_FIELD_ENTRY_VALUE, value);
}

void field_put_i64(uint8_t *p, int64_t v)
{
    zo_put_u32(p, (uint32_t)(uint64_t)v);
    zo_put_u32(p + 4, (uint32_t)((uint64_t)v >> 32));
}

/* An entry is what the host reads back; a card that fails to take it is met again by the
 * next write that matters (a slot or the status), so its result is not checked here. */
void field_log(uint8_t *e)
{
    if (field.ours && field.card.log != 0u) { /* the card's log, and this run's */
        (void)zo_field_log_append(&field.card, e);
    }
}

/* ---- the reports ------------------------------------------------------------------------ */

void zo_link_init(void)
{
    platform_write((const uint8_t *)"\r\n", 2u); /* the first line starts on a line of its own */
}

int zo_link_restarting(void)
{
    return 0; /* no host to restart */
}

int zo_link_log(const char *text)
{
    field_say(text);
    return ZO_LINK_OK;
}

int zo_link_error(int32_t code, const char *text)
{
    zo_log_line l;
    zo_line_start(&l);
    field_line_status(&l, code);
    zo_line_text(&l, ": ");
    zo_line_text(&l, text);
    field_say(l.text);
    return ZO_LINK_OK;
}

/* Each step's mean loss; a line every 1/FIELD_STEP_LINES of the run. */
int zo_link_telemetry(uint32_t step, int32_t layer, int32_t loss_q16, float lr,
                      uint32_t cycles)
{
    const uint32_t lines = field.steps / FIELD_STEP_LINES;
    const uint32_t every = lines > 1u ? lines : 1u;
    zo_log_line l;
    (void)cycles;
    if (layer >= 0) {
        return ZO_LINK_OK;
    }
    field.loss_sum += loss_q16;
    field.loss_steps += 1u;
    field.lr = lr;
    if (step % every == 0u || step == field.steps) {
        zo_line_start(&l);
        zo_line_u64(&l, "step ", step);
        zo_line_u64(&l, " of ", field.steps);
        field_line_fixed(&l, ": loss ", field_q16(loss_q16), 4u);
        /* to uint32, not uint64: the boards' builds are single precision only */
        field_line_fixed(&l, ", eta ", (uint32_t)(lr * 1e6f + 0.5f), 6u);
        field_say(l.text);
    }
    return ZO_LINK_OK;
}

static const char *const decisions[] = {"", ", best", ", rolled back", ", the best is the result",
                                        ", the result did not confirm: the start is the result"};

/* The guard's checks and --lr auto's trials (docs/link.md "Events"): a line and a log entry. */
int zo_link_event(uint8_t kind, uint8_t decision, uint32_t step, uint32_t correct,
                  uint32_t of, uint32_t halvings, uint32_t eta_ppm, uint32_t steps,
                  int64_t loss_q16)
{
    uint8_t e[ZO_FIELD_ENTRY_BYTES];
    zo_log_line l;
    field_entry(e, kind, step, correct, of, steps);
    e[ZO_FIELD_ENTRY_DECISION] = decision;
    zo_put_u32(e + ZO_FIELD_ENTRY_HALVINGS, halvings);
    zo_put_u32(e + ZO_FIELD_ENTRY_ETA_PPM, eta_ppm);
    field_put_i64(e + ZO_FIELD_ENTRY_LOSS, loss_q16);
    field_log(e);
    zo_line_start(&l);
    if (kind == ZO_EVENT_GUARD_CHECK) {
        field.new_best |= decision == ZO_DECISION_BEST || decision == ZO_DECISION_START;
        zo_line_u64(&l, "guard check at step ", step);
        zo_line_u64(&l, ": validation ", correct);
        zo_line_u64(&l, " of ", of);
        zo_line_text(&l, decision < 5u ? decisions[decision] : "");
        if (halvings) {
            zo_line_u64(&l, ", eta halved ", halvings);
            zo_line_text(&l, "x");
        }
    } else if (kind == ZO_EVENT_CONFIRM) {
        if (step) {
            zo_line_u64(&l, "confirmation: the result of step ", step);
        } else {
            zo_line_text(&l, "confirmation: the start");
        }
        zo_line_u64(&l, ": records ", correct);
        zo_line_u64(&l, " of ", of);
    } else if (kind == ZO_EVENT_STOP) {
        zo_line_u64(&l, "guard stop at step ", step);
        zo_line_u64(&l, ": no new best in ", steps);
        zo_line_u64(&l, " steps (the best: step ", step - steps);
        zo_line_u64(&l, ", validation ", correct);
        zo_line_u64(&l, " of ", of);
        zo_line_text(&l, "); the run ends here");
    } else if (kind == ZO_EVENT_LR_TRIAL) {
        field_line_fixed(&l, "lr trial eta ", eta_ppm, 6u);
        zo_line_u64(&l, ": ", steps);
        zo_line_u64(&l, " steps, validation ", correct);
        zo_line_u64(&l, " of ", of);
    } else {
        field_line_fixed(&l, "lr auto: eta ", eta_ppm, 6u);
    }
    field_say(l.text);
    return ZO_LINK_OK;
}

/* Asked for by no command the field trainer gives (W, I, --record-scalars is refused). */
void zo_link_wait(uint32_t ms)
{
    (void)ms;
}

int zo_link_fetch(uint32_t offset, uint8_t *dst, uint32_t length)
{
    (void)offset;
    (void)dst;
    (void)length;
    return ZO_LINK_ERR_UNSUPPORTED;
}

int zo_link_put(uint32_t offset, const uint8_t *src, uint32_t length)
{
    (void)offset;
    (void)src;
    (void)length;
    return ZO_LINK_ERR_UNSUPPORTED;
}
