/*
 * The training guard and --lr auto (zo_guard.h). Rules and their reasons: docs/training.md
 * "Training guard"; numpy twin: zocodegen/training/guard.py, simulator.Guard / choose_lr.
 */
#include <stddef.h>
#include <string.h>

#include "model.h"
#include "zo_checkpoint_format.h" /* ZO_CKPT_STOPPED */
#include "zo_guard.h"
#include "zo_requant.h"
#include "zo_train_io.h"

/* ---- events for the host (docs/link.md "Events") ---------------------------------------- */

#if !ZO_TRAIN_INTEGER_ONLY
static uint32_t eta_ppm(float eta)
{
    return (uint32_t)(eta * 1e6f + 0.5f);
}
#endif

/* ---- the measurement ------------------------------------------------------------------- */

/* The val split's first records, up to the schedule's samples: its last zo_image_held_out
 * records are the end confirmation's alone. */
static uint32_t validation_records(const zo_train_model *m, const zo_image *img)
{
    const uint32_t n = zo_image_count(img, ZO_SPLIT_VAL) - zo_image_held_out(img);
    return n < m->guard->samples ? n : m->guard->samples;
}

/* Bit i of a record bitmap (the end's confirmation: which records a measurement got right). */
static int bit(const uint8_t *bits, uint32_t i)
{
    return (bits[i >> 3] >> (i & 7u)) & 1;
}

/* ``right``: NULL, or a bitmap whose bit at + i is set when record i is classified right. */
static int measure(const zo_train_model *m, zo_image *img, int split, uint32_t first,
                   uint32_t records, zo_score *out, uint8_t *right, uint32_t at)
{
    uint8_t *arena = model_arena();
    const int8_t *logits = (const int8_t *)(arena + m->logits_offset);
    out->correct = 0u;
    out->loss = 0;
    for (uint32_t i = 0; i < records; ++i) {
        int32_t label = 0;
        const int rc = zo_image_read_sample(img, split, first + i, arena + m->input_offset,
                                            &label);
        if (rc != ZO_IMAGE_OK) {
            return rc;
        }
        if (label < 0 || label >= m->classes) {
            return ZO_TRAIN_ERR_LABEL;
        }
        model_run_range(0, m->logits_op);
        int32_t best = 0;
        for (int32_t k = 1; k < m->classes; ++k) {
            if (logits[k] > logits[best]) {
                best = k;
            }
        }
        out->correct += best == label ? 1u : 0u;
        out->loss += zo_rdbpot(zo_cross_entropy_q26(m->loss, logits, label), 10);
        if (right != NULL && best == label) {
            right[(at + i) >> 3] |= (uint8_t)(1u << ((at + i) & 7u));
        }
    }
    return ZO_TRAIN_OK;
}

int zo_measure(const zo_train_model *m, zo_image *img, int split, uint32_t first,
               uint32_t records, zo_score *out)
{
    return measure(m, img, split, first, records, out, NULL, 0u);
}

static uint32_t isqrt(uint32_t v)
{
    uint32_t r = 0u;
    while ((r + 1u) * (r + 1u) <= v) {
        ++r;
    }
    return r;
}

/* Two standard deviations of a difference of two counts of V records at the best's c
 * correct: max(2, isqrt(8 c (V - c) / V)) (training/guard.py fall_margin). */
static uint32_t fall_margin(uint32_t best_correct, uint32_t records)
{
    const uint64_t c = best_correct;
    const uint32_t spread = isqrt((uint32_t)(8u * c * (records - c) / records));
    return spread > 2u ? spread : 2u;
}

/* A new best (training/guard.py new_best): while the best is still the parameters from
 * before training, only with more than half the fall margin more correct AND a lower loss
 * sum (the maximum of many noisy counts is biased upward; drifting parameters raise the
 * loss); after that, more correct, or as many with a lower loss sum. */
static int better(const zo_score *a, const zo_train_state *s, uint32_t records)
{
    if (s->best_step == 0u) {
        return a->correct > s->best_correct + fall_margin(s->best_correct, records) / 2u
               && a->loss < s->best_loss;
    }
    return a->correct > s->best_correct
           || (a->correct == s->best_correct && a->loss < s->best_loss);
}

/* A fall, not noise (training/guard.py Score.falls_below): more than the fall margin fewer
 * correct than the best with a higher loss sum, or a loss sum a quarter above the best's. */
static int falls_below(const zo_score *a, uint32_t best_correct, int64_t best_loss,
                       uint32_t records)
{
    return (a->correct + fall_margin(best_correct, records) < best_correct
            && a->loss > best_loss)
           || a->loss > best_loss + best_loss / 4;
}

static int falls(const zo_score *a, const zo_train_state *s, uint32_t records)
{
    return falls_below(a, s->best_correct, s->best_loss, records);
}

/* At the run's last check: the last parameters become the best, and so the result unless the
 * confirmation keeps the start, whenever they do not fall below the best, the start included
 * (training/guard.py last_is_result): the best is the maximum of many noisy checks, often an
 * early one, and a real gain of a few points rarely beats the start's margin on one check. */
static int last_is_result(const zo_score *a, const zo_train_state *s, uint32_t records)
{
    return !falls(a, s, records);
}

/* The best slot's parameters into the SRAM copies; the run's state stays as it is. */
static int restore_best(const zo_train_model *m, zo_train_state *s, zo_image *img)
{
    const zo_train_state keep = *s;
    const int rc = zo_checkpoint_from_image(m, s, img, ZO_SLOT_BEST);
    *s = keep;
    return rc;
}

/* The flash parameters into the SRAM copies; the run's state stays as it is. */
static void restore_start(const zo_train_model *m, zo_train_state *s)
{
    const zo_train_state keep = *s;
    zo_train_init(m, s);
    *s = keep;
}

/* The end of a run whose result is not the start (training/guard.py confirmed): the result
 * and the start on the image's held-out records (the val split's last, which no step trained
 * on and no check saw; at most the schedule's samples), or, on an image without them, on the
 * training split's last records, which no check saw, and, when the result is the last
 * parameters (last), on the validation records too. The result stays only
 * if its net gain over the start on the records where the two disagree stands out of their
 * number (100 net^2 >= confirm_z2 disagreements, confirm_z2 = 100 Z^2) and a lower loss sum.
 * Otherwise the start is the result and the best slot (written as of step 0, as a best
 * slot's step is its best step), scored on the validation records as the baseline was.
 * SRAM holds the result's parameters on entry; *kept says which is the result. The CONFIRM
 * events carry both scores; the result's `steps` is the records where they disagree. */
static int confirm(const zo_train_model *m, zo_train_state *s, zo_image *img,
                   uint32_t records, int last, zo_guard_report report, int *kept)
{
    const uint32_t held = zo_image_held_out(img);
    const int split = held ? ZO_SPLIT_VAL : ZO_SPLIT_TRAIN;
    const uint32_t pool = held ? held : zo_image_count(img, ZO_SPLIT_TRAIN);
    const uint32_t n = pool < m->guard->samples ? pool : m->guard->samples;
    const uint32_t first = held ? zo_image_count(img, ZO_SPLIT_VAL) - held : pool - n;
    const uint32_t val = last && !held ? records : 0u;
    uint8_t mine[ZO_GUARD_MARK_BYTES], theirs[ZO_GUARD_MARK_BYTES]; /* result's, start's */
    zo_score result, start, part, baseline;
    memset(mine, 0, sizeof mine);
    memset(theirs, 0, sizeof theirs);
    int rc = measure(m, img, split, first, n, &result, mine, 0u);
    if (rc == ZO_TRAIN_OK && val) {
        rc = measure(m, img, ZO_SPLIT_VAL, 0u, val, &part, mine, n);
        result.correct += part.correct;
        result.loss += part.loss;
    }
    if (rc != ZO_TRAIN_OK) {
        return rc;
    }
    restore_start(m, s);
    rc = measure(m, img, split, first, n, &start, theirs, 0u);
    if (rc == ZO_TRAIN_OK) { /* the start's validation score: the comparison's, the baseline's */
        rc = measure(m, img, ZO_SPLIT_VAL, 0u, records, &baseline, val ? theirs : NULL, n);
    }
    if (rc != ZO_TRAIN_OK) {
        return rc;
    }
    if (val) {
        start.correct += baseline.correct;
        start.loss += baseline.loss;
    }
    uint32_t gained = 0u, lost = 0u;
    for (uint32_t i = 0; i < n + val; ++i) {
        gained += (uint32_t)(bit(mine, i) & !bit(theirs, i));
        lost += (uint32_t)(bit(theirs, i) & !bit(mine, i));
    }
    zo_guard_event e;
    memset(&e, 0, sizeof e);
    e.kind = ZO_EVENT_CONFIRM;
    e.of = n + val;
    e.correct = start.correct;
    e.loss_q16 = start.loss;
    report(&e);
    e.step = s->best_step;
    e.correct = result.correct;
    e.loss_q16 = result.loss;
    e.steps = gained + lost;
    report(&e);
    const uint32_t net = gained > lost ? gained - lost : 0u;
    *kept = net > 0u
            && 100u * (uint64_t)net * net >= (uint64_t)m->guard->confirm_z2 * e.steps
            && result.loss < start.loss;
    if (*kept) {
        return restore_best(m, s, img);
    }
    const uint32_t done = s->step;
    s->best_step = 0u;
    s->best_correct = baseline.correct;
    s->best_loss = baseline.loss;
    s->step = 0u;
    rc = zo_checkpoint_to_image(m, s, img, ZO_SLOT_BEST);
    s->step = done;
    return rc;
}

static void report_check(zo_guard_report report, uint32_t step, const zo_score *sc,
                         uint32_t records, uint8_t decision, uint32_t halvings)
{
    zo_guard_event e;
    memset(&e, 0, sizeof e);
    e.kind = ZO_EVENT_GUARD_CHECK;
    e.decision = decision;
    e.step = step;
    e.correct = sc->correct;
    e.of = records;
    e.loss_q16 = sc->loss;
    e.halvings = halvings;
    report(&e);
}

/* K of a run of T steps (training/guard.py guard_schedule, the same integers): --guard-every,
 * or so that the checks cost about 1 / share_divisor of the run's forwards. */
static uint32_t guard_every(const zo_guard_config *g, uint32_t T)
{
    if (g->every_given) {
        return g->every_given;
    }
    uint64_t checks = (uint64_t)T * g->forwards_per_step / g->share_divisor / g->samples;
    checks = checks > 1u ? checks : 1u;
    const uint64_t every = ((uint64_t)T + checks - 1u) / checks;
    return every > 1u ? (uint32_t)every : 1u;
}

/* ---- --lr auto -------------------------------------------------------------------------- */
#if !ZO_TRAIN_INTEGER_ONLY /* --estimator int8 has no eta to pick (its step is bits) */

/* Steps of each --lr auto trial: T / share_divisor rounded half to even, at least 1
 * (guard_schedule). */
static uint32_t trial_steps(const zo_guard_config *g, uint32_t T)
{
    const uint32_t whole = T / g->share_divisor, part = T % g->share_divisor;
    const uint32_t steps = whole + (2u * part > g->share_divisor
                                    || (2u * part == g->share_divisor && (whole & 1u)));
    return steps > 1u ? steps : 1u;
}

/* Each candidate trains trial_steps steps from the flash parameters at a constant eta on the
 * run's first samples; the largest eta whose trial does not fall below the lowest validation
 * loss's (falls_below: the guard's own noise margin) wins (training/simulator.py choose_lr):
 * trials of 2 % of a run cannot tell a slower start from a worse eta. */
static int choose_lr(const zo_train_model *m, zo_train_state *s, zo_image *img,
                     uint32_t records, zo_guard_report report)
{
    const zo_guard_config *g = m->guard;
    const uint32_t steps = trial_steps(g, s->schedule_steps);
    zo_score scores[ZO_MAX_LR_CANDIDATES];
    uint32_t best = 0u;
    for (uint32_t k = 0; k < g->candidate_count; ++k) {
        zo_train_state trial = *s;
        zo_train_init(m, &trial);
        trial.lr = g->candidates[k];
        trial.constant_lr = 1;
        trial.schedule_steps = steps;
        trial.telemetry = NULL;
        trial.scalars = NULL;
        int rc = ZO_TRAIN_OK;
        for (uint32_t t = 0; t < steps && rc == ZO_TRAIN_OK; ++t) {
            rc = zo_train_step(m, &trial);
        }
        zo_score sc;
        if (rc == ZO_TRAIN_OK) {
            rc = zo_measure(m, img, ZO_SPLIT_VAL, 0u, records, &sc);
        }
        if (rc != ZO_TRAIN_OK) {
            return rc;
        }
        zo_guard_event e;
        memset(&e, 0, sizeof e);
        e.kind = ZO_EVENT_LR_TRIAL;
        e.eta_ppm = eta_ppm(g->candidates[k]);
        e.steps = steps;
        e.correct = sc.correct;
        e.of = records;
        e.loss_q16 = sc.loss;
        report(&e);
        scores[k] = sc;
        if (sc.loss < scores[best].loss) {
            best = k;
        }
    }
    uint32_t chosen = best;
    for (uint32_t k = best + 1u; k < g->candidate_count; ++k) {
        if (!falls_below(&scores[k], scores[best].correct, scores[best].loss, records)) {
            chosen = k;
        }
    }
    zo_train_init(m, s); /* back to the flash parameters */
    s->lr = g->candidates[chosen];
    zo_guard_event e;
    memset(&e, 0, sizeof e);
    e.kind = ZO_EVENT_LR_CHOSEN;
    e.eta_ppm = eta_ppm(s->lr);
    report(&e);
    return ZO_TRAIN_OK;
}
#endif

/* ---- the guard ----------------------------------------------------------------------------- */

int zo_guard_begin(const zo_train_model *m, zo_train_state *s, zo_image *img,
                   zo_guard_report report)
{
    const zo_guard_config *g = m->guard;
    if (g == NULL) {
        return ZO_TRAIN_OK;
    }
    const uint32_t records = validation_records(m, img);
    if (records < g->min_samples) {
        return ZO_TRAIN_ERR_VAL;
    }
    int rc = ZO_TRAIN_OK;
#if !ZO_TRAIN_INTEGER_ONLY
    if (s->lr == 0.0f) {
        rc = choose_lr(m, s, img, records, report);
    }
#endif
    if (rc == ZO_TRAIN_OK && g->guard && s->best_step == ZO_TRAIN_NO_BEST) {
        zo_score sc;
        rc = zo_measure(m, img, ZO_SPLIT_VAL, 0u, records, &sc);
        if (rc == ZO_TRAIN_OK) {
            s->best_step = s->step;
            s->best_correct = sc.correct;
            s->best_loss = sc.loss;
            rc = zo_checkpoint_to_image(m, s, img, ZO_SLOT_BEST);
            report_check(report, s->step, &sc, records, ZO_DECISION_BEST, s->halvings);
        }
    }
    return rc;
}

/* The guard's stop (training/guard.py patience_ends): a check that is not a new best, once
 * patience checks of every K steps have passed since the best (the start's step 0 before a
 * check beat it); patience 0 never. */
static int patience_ends(const zo_guard_config *g, const zo_train_state *s, uint32_t done)
{
    return g->patience > 0u && (uint64_t)(done - s->best_step)
                                   >= (uint64_t)g->patience * guard_every(g, s->schedule_steps);
}

/* STOP: the step, the steps since the best and the best's score (docs/link.md "Events"). */
static void report_stop(zo_guard_report report, const zo_train_state *s, uint32_t done,
                        uint32_t records)
{
    zo_guard_event e;
    memset(&e, 0, sizeof e);
    e.kind = ZO_EVENT_STOP;
    e.step = done;
    e.steps = done - s->best_step;
    e.correct = s->best_correct;
    e.of = records;
    e.loss_q16 = s->best_loss;
    e.halvings = s->halvings;
    report(&e);
}

int zo_guard_stopped(const zo_train_state *s)
{
    return s->falling == ZO_CKPT_STOPPED;
}

int zo_guard_after_step(const zo_train_model *m, zo_train_state *s, zo_image *img,
                        zo_guard_report report)
{
    const zo_guard_config *g = m->guard;
    if (g == NULL || !g->guard) {
        return ZO_TRAIN_OK;
    }
    const uint32_t done = s->step;
    int last = done == s->schedule_steps;
    if (done % guard_every(g, s->schedule_steps) != 0u && !last) {
        return ZO_TRAIN_OK;
    }
    const uint32_t records = validation_records(m, img);
    zo_score sc;
    int rc = zo_measure(m, img, ZO_SPLIT_VAL, 0u, records, &sc);
    uint8_t decision = ZO_DECISION_NONE;
    int rolled_back = 0;
    if (rc != ZO_TRAIN_OK) {
        return rc;
    }
    const int stop = !last && !better(&sc, s, records) && patience_ends(g, s, done);
    if (stop) { /* the stopping check ends the run as the last step's does */
        report_stop(report, s, done, records);
        last = 1;
    }
    if (better(&sc, s, records) || (last && last_is_result(&sc, s, records))) {
        s->halvings -= s->halvings > 0u ? 1u : 0u; /* a new best undoes a halving */
        s->falling = 0u;
        s->best_step = done;
        s->best_correct = sc.correct;
        s->best_loss = sc.loss;
        rc = zo_checkpoint_to_image(m, s, img, ZO_SLOT_BEST);
        decision = ZO_DECISION_BEST;
    } else if (!falls(&sc, s, records)) {
        s->falling = 0u;
    } else if (s->falling + 1u < g->falls_to_roll_back) { /* wait for the next check */
        ++s->falling;
    } else {
        s->falling = 0u;
        ++s->halvings;
        ++s->rollbacks;
        rc = restore_best(m, s, img);
        decision = ZO_DECISION_ROLLBACK;
        rolled_back = 1;
    }
    if (rc == ZO_TRAIN_OK && last && s->best_step != done && !rolled_back) {
        rc = restore_best(m, s, img);
        decision = ZO_DECISION_RESTORE;
    }
    if (rc == ZO_TRAIN_OK && last && s->best_step != 0u) {
        int kept = 1;
        rc = confirm(m, s, img, records, s->best_step == done, report, &kept);
        decision = kept ? decision : ZO_DECISION_START;
    }
    if (stop) {
        s->falling = ZO_CKPT_STOPPED;
    }
    report_check(report, done, &sc, records, decision, s->halvings);
    return rc;
}
