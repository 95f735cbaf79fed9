"""The training guard and ``--lr auto`` (docs/training.md "Training guard"): a device in the
field has nobody to tune eta or to notice a run going wrong, so the engine measures itself on
the validation split, keeps the best parameters it has seen, rolls back and halves eta when
validation falls, and starts by choosing eta from short trials. The run's result is its last
parameters when they stay within noise of the best (else the best), and it replaces the
starting model only when it beats it on records no choice among checks saw.

At scale the validation split is small (101 records in docs/scale.md) and a run at a good eta
wanders by several records between checks, so a fall must stand out of that noise, and a
rollback needs a fall at two checks in a row (a run at a good eta comes back from a bad
check by itself), and its halving is undone by the next new best (the "bold driver" rule):
an excursion costs the steps since the best, not the rest of the run's eta
(docs/decisions/guard-fall-rule.md).

Every decision is made on integers (correct predictions, a sum of Q16 losses), so the
simulator and the firmware (``templates/train/zo_guard.c``) decide identically.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..errors import DataError
from .checkpoint import NO_BEST, STOPPED

#: --lr auto tries these, smallest first; the largest the trials cannot show worse wins.
LR_CANDIDATES = (0.003, 0.01, 0.03)
#: Share of the run's forward passes the guard's checks and the lr trials may spend each:
#: 1 / SHARE_DIVISOR, in integers on both sides (guard_schedule, zo_guard.c)
SHARE_DIVISOR = 50
CHECK_SHARE = TRIAL_SHARE = 1 / SHARE_DIVISOR
#: Fewer validation records than this cannot tell a fall from noise.
MIN_VAL_RECORDS = 16
#: Checks in a row that must fall below the best before the guard rolls back.
FALLS_TO_ROLL_BACK = 2
#: The guard's stop (``--patience``): a run ends by itself once this many checks in a row
#: have passed since its best (no new best, ``new_best``), the stopping check treated as the
#: last one (the result and the end's confirmation as after the last step). Conservative on
#: purpose until the frontier experiments (issue 63) measure it: the best is the maximum of
#: noisy counts of ~101 records, so new bests grow rare even while a run still learns
#: (docs/decisions/guard-patience.md): on fog seed 1 the validation best came at step 99
#: (78/101) and none of the 72 checks after it, to the end of the epoch, beat it, while test
#: accuracy rose from 61.5 % to 69.6 % by step 660. A patience under 51 checks would have
#: ended that run about 8 points short, one under 72 before its end. 80 keeps that run whole;
#: a shorter run's checks are fewer, so there it rarely acts; the experiments will say how
#: low it can go.
PATIENCE_CHECKS = 80


@dataclass(frozen=True)
class GuardSchedule:
    """When the guard measures and how long the lr trials are (fixed at build time)."""

    every: int  # K: a check after every K steps (and after the last)
    samples: int  # at most this many validation records per check (the first ones)
    trial_steps: int  # steps of each --lr auto trial
    candidates: tuple[float, ...]


class PlanShape(Protocol):
    """What guard_schedule reads of a TrainingPlan (plan_types.py: config.py reads
    PATIENCE_CHECKS from here, so this module imports no plan, not even for its types)."""

    @property
    def config(self): ...

    @property
    def forwards_per_step(self) -> int: ...


def guard_schedule(plan: PlanShape, steps: int | None = None) -> GuardSchedule:
    """K so that the checks cost about CHECK_SHARE of the run's forwards (each check is
    ``samples`` full forwards, a step ``plan.forwards_per_step`` query forwards), unless
    --guard-every fixes it; trials of TRIAL_SHARE of the run's steps per candidate, rounded
    half to even. On integers (CHECK_SHARE = TRIAL_SHARE = 1/50), as zo_guard.c computes them
    from the T it counts on the device; ``steps``: T when the plan's is 0 (the data's)."""
    cfg = plan.config
    steps = steps or cfg.steps
    checks = max(1, steps * plan.forwards_per_step // SHARE_DIVISOR // cfg.guard_samples)
    every = cfg.guard_every or max(1, -(-steps // checks))
    whole, part = divmod(steps, SHARE_DIVISOR)
    trial = max(1, whole + (2 * part > SHARE_DIVISOR
                            or (2 * part == SHARE_DIVISOR and whole % 2 == 1)))
    return GuardSchedule(every, cfg.guard_samples, trial, LR_CANDIDATES)


def patience_ends(done: int, state: "GuardState", every: int, patience: int) -> bool:
    """Whether the check after step ``done``, not a new best, ends the run: ``patience``
    checks of every ``every`` steps have passed since the best (the start's step 0 before a
    check beat it); 0 never. On integers the simulator and zo_guard.c share, from the best
    step the checkpoint carries, so a resumed run stops where an uninterrupted one does."""
    return patience > 0 and done - state.best_step >= patience * every


def trials_tied(losses: list[int], schedule_steps: int) -> str:
    """The line that says --lr auto's trials could not tell the candidates apart (every
    validation loss sum the same, e.g. after too short trials), and so which rule chose;
    empty when they could."""
    if len(losses) < 2 or len(set(losses)) > 1:
        return ""
    return (f"lr auto: the {len(losses)} trials cannot tell eta apart (the same validation "
            f"loss after {schedule_steps} step(s) each: trials run {TRIAL_SHARE:.0%} of the "
            f"run's steps, at least 1); ties take the largest, {LR_CANDIDATES[-1]:g}: pass "
            "--lr to choose, or run more --steps")


def validation_count(available: int, schedule: GuardSchedule, what: str) -> int:
    """Records a check uses; refuses a validation split too small to measure."""
    if available < MIN_VAL_RECORDS:
        raise DataError(f"{what} needs at least {MIN_VAL_RECORDS} validation records to "
                        f"measure, the data has {available}: add x_val/y_val, pack with a "
                        "larger --val-fraction, or pass --no-guard and a fixed --lr")
    return min(available, schedule.samples)


@dataclass(frozen=True)
class Score:
    """A validation measurement: correct predictions (argmax of the logits, lowest index on
    ties) and the sum of the Q16 cross-entropy losses over the same records."""

    correct: int
    loss: int

    def better_than(self, other: "Score") -> bool:
        return self.correct > other.correct or (self.correct == other.correct
                                                and self.loss < other.loss)

    def falls_below(self, best: "Score", records: int) -> bool:
        """A fall, not noise: more than fall_margin fewer correct with a higher loss sum, or
        a loss sum a quarter above the best's (a diverging run does both)."""
        return ((self.correct + fall_margin(best.correct, records) < best.correct
                 and self.loss > best.loss)
                or self.loss > best.loss + best.loss // 4)


def fall_margin(best_correct: int, records: int) -> int:
    """Two standard deviations of the difference of two independent counts of V records at
    the best's accuracy p = c / V: 2 sqrt(2 V p (1 - p)) = isqrt(8 c (V - c) / V), at least
    2 (13 records of 101 at 40 %). The best is the maximum of many noisy checks, so a
    margin of one deviation called falls that were only noise."""
    return max(2, math.isqrt(8 * best_correct * (records - best_correct) // records))


def new_best(score: Score, state: "GuardState", records: int) -> bool:
    """Whether a check becomes the run's best. While the best is still the parameters from
    before training (best_step 0), only with more than half the fall margin (one standard
    deviation of a difference of two counts) more correct records AND a lower loss sum: the
    best of many noisy counts is biased upward (a run with nothing to gain ended up to 3.1
    test points below its start), and parameters that drift without learning raise the loss
    sum, a far finer measurement than the count. The whole margin kept the start on 10 of
    the 16 digits cells, where 53 validation records cannot show a real 6-9 point gain by
    two deviations (docs/decisions/start-rule.md)."""
    if state.best_step == 0:
        return (score.correct > state.best.correct + fall_margin(state.best.correct, records) // 2
                and score.loss < state.best.loss)
    return score.better_than(state.best)


def last_is_result(score: Score, state: "GuardState", records: int) -> bool:
    """Whether the last check's parameters become the best, and so the run's result unless
    the end's confirmation keeps the start: whenever they do not fall below the best, the
    start included. The best is the maximum of ~100 noisy checks on one small split, so it
    is often an early lucky one: at scale, a run whose test accuracy rose from 61 to 70 %
    after its best check (step 99) ended on that check (docs/decisions/last-is-result.md),
    and runs whose last parameters tested 1.2-3.6 points above the start ended on the start
    because no check had beaten it by the start rule's margin
    (docs/decisions/paired-confirmation.md). The last parameters are where the decayed
    schedule has settled; the rollbacks keep them within noise of the best,
    and the end's confirmation weighs them against the start."""
    return not score.falls_below(state.best, records)


def confirmation_records(train_count: int, schedule: GuardSchedule) -> slice:
    """The training records the end's confirmation measures: the last ``schedule.samples``
    (a one-epoch run trains on them last, so a best chosen before then never saw them)."""
    return slice(train_count - min(train_count, schedule.samples), train_count)


def trained_confirmation_records(train_count: int, held: int, steps: int, batch: int) -> int:
    """How many of the confirmation's ``held`` records (the training split's last) a step of
    the run trained on: step t trains on records t N .. t N + N - 1, modulo the split
    (simulator.batch_indices). On a small split every run of an epoch trains on all of
    them, and the last parameters were fitted to the very records that confirm them."""
    seen = min(train_count, steps * batch)
    return max(0, seen - (train_count - held))


def confirmation_where(training_records: int, trained: int, validation_records: int,
                       held_out: bool = False) -> str:
    """The records the end's confirmation compares, in words: `simulate` and `train` say
    the same, including how many of them the run's steps trained on; ``held_out``: the
    records are the image's held-out ones (``pack`` set them aside), which neither did."""
    if held_out:
        return (f"on the image's {training_records} held-out records, which no step trained "
                "on and no check saw")
    seen = ("which no check saw" if not trained else
            f"which no check saw but the run's steps trained on ({trained} of them)"
            if trained < training_records else
            "which no check saw but the run's steps all trained on")
    return (f"on the last {training_records} training records, {seen}"
            + (f", and the {validation_records} validation records of its last check"
               if validation_records else ""))


def validation_note(records: int, held_out: int) -> str:
    """The line under a run's accuracies when the image has no test split: they are measured
    on the whole val split (as the device's accuracy command counts it), whose last
    ``held_out`` records pack held out for the end's confirmation, so the guard selects on
    the first ``records - held_out`` only (zo_guard.c). `simulate` and `train` say it alike."""
    if held_out:
        return (f"(no test split: accuracy is measured on the validation split's {records} "
                f"records: the guard's checks select on {records - held_out} of them, and "
                f"{held_out} are the held-out records of the end's confirmation)")
    return ("(no test split: accuracy is measured on the validation split, which the guard "
            "also selects on)")


def unvalidated(trained: int, training_records: int, validation_records: int,
                test_records: int = 0) -> str:
    """Why the end's confirmation of a result cannot validate it ("" when it can): the image
    has no held-out records (``pack`` holds them out where it can afford to), and every
    record it compared was trained on by the run's steps, or chose the result (the
    validation records of the last check, which the guard selects on). With a test split
    ("" too) the run's test accuracy is the measure that no step and no check touched; a
    confirmation on held-out records has ``trained`` 0."""
    if training_records == 0 or trained < training_records or test_records:
        return ""
    chose = (f" and the {validation_records} validation records are the ones the guard's "
             "checks selected it on" if validation_records else "")
    return (f"no validated improvement: too few held-out records to confirm (0; pack holds "
            "some out when the data can spare them): all "
            f"{training_records} training records of the end's confirmation were trained on "
            f"by the run's steps{chose}, so no record that no step trained on and no check saw "
            "is left to confirm a gain (pack more images, or add a test/ folder)")


#: The end's confirmation: the result's net gain over the start must stand out of the records
#: on which the two disagree, net >= Z sqrt(disagreements) with Z^2 = CONFIRM_Z2 / 100
#: (Z = 1.28: a one-sided sign test at 10 %), and their loss sum must be lower.
CONFIRM_Z2 = 164


@dataclass(frozen=True)
class Comparison:
    """The result and the start on the same records (the end's confirmation): the records
    only one of them classifies right, and both loss sums. A paired count: two parameter
    sets a few LSB apart agree on most records, and the net of the rest is the evidence."""

    gained: int  # the result right, the start wrong
    lost: int  # the start right, the result wrong
    loss: int  # the result's sum of Q16 losses
    start_loss: int

    def __add__(self, other: "Comparison") -> "Comparison":
        return Comparison(self.gained + other.gained, self.lost + other.lost,
                          self.loss + other.loss, self.start_loss + other.start_loss)


def confirmed(c: Comparison) -> bool:
    """Whether the run's result replaces the start at the end of the run, measured on the last
    ``schedule.samples`` training records, which no check saw, and, when the result is the
    last parameters, on the validation records too (their last check is one measurement,
    not a maximum over checks). A best chosen among ~100 checks is biased upward by the
    choice itself (a run with nothing to gain kept a best that tested 3.1 points below its
    start, docs/decisions/end-confirmation.md), so a restored best is confirmed on the
    training records alone. Counts of 128 records could not see gains of 1-4 points that the
    loss showed, and an even count let through a result 0.7 below the start
    (docs/decisions/paired-confirmation.md): the
    net of the records on which the two disagree must stand out of their number."""
    net = c.gained - c.lost
    return net >= needed_net(c.gained + c.lost) and c.loss < c.start_loss


def needed_net(disagreements: int) -> int:
    """The least net gain the end's confirmation takes on records where the result and the
    start disagree: more than none, and 1.28 sqrt(disagreements) (with none, the rule's
    0 >= 0 alone would confirm a result that changed no record)."""
    least = math.isqrt(CONFIRM_Z2 * disagreements // 100)
    while 100 * least * least < CONFIRM_Z2 * disagreements:
        least += 1
    return max(1, least)


@dataclass(frozen=True)
class GuardState:
    """What the checkpoint carries so a resumed run decides exactly as an uninterrupted one:
    eta in use (the --lr auto winner), how often it was halved, and the best check so far
    (best_step = NO_BEST before the baseline check)."""

    lr: float  # float32 value
    halvings: int = 0
    best_step: int = NO_BEST
    best: Score = Score(0, 0)
    rollbacks: int = 0
    falling: int = 0  # checks in a row that fell below the best, since the last rollback;
    # STOPPED once the guard has ended the run (patience_ends)

    @property
    def started(self) -> bool:
        return self.best_step != NO_BEST

    @property
    def stopped(self) -> bool:
        return self.falling == STOPPED



def lr_scale(halvings: int) -> np.float32:
    """2^-halvings, exact in float32."""
    return np.float32(np.ldexp(np.float32(1.0), -halvings))
