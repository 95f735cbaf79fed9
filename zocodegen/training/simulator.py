"""The numpy training simulator: DESIGN.md section 4 exactly as the generated C runs it
(docs/training.md), so parameters after any number of steps are bit-identical.

The device evaluates the Q perturbed copies of a layer one after the other; the simulator
evaluates the copies of all layers of a step as one batch (training/wavefront.py) on the
fast twins of the reference kernels (reference/fast.py), which gives the same integers far
faster. Activations of the clean forward stay in a dict, so the "global update" rule (every
layer's estimate sees step t's network) holds by construction here; the C engine gets the
same effect by re-running from saved activations.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from ..errors import DataError
from ..ir import Graph
from . import scales
from .backprop import node_gradients, parameter_gradient
from .checkpoint import STOPPED, Checkpoint, LayerParams
from .estimators import REGISTRY
from .guard import (FALLS_TO_ROLL_BACK, Comparison, GuardSchedule, GuardState, Score,
                    confirmation_where, confirmed, last_is_result, lr_scale, new_best,
                    patience_ends, trained_confirmation_records)
from .plan_types import TrainingPlan
from .prng import step_seed
from .steps import STEPS
from .step_parts import (Params, StepBatch, accumulate_int32, forward, int8_update,
                         losses_q16, node_to_parameter_gradient, update_layer, wp_gradient,
                         wp_perturbations)
from .update import learning_rate


def initial_params(graph: Graph, plan: TrainingPlan) -> Params:
    params: Params = {}
    for layer in plan.layers:
        params[layer.weights] = np.array(graph.tensor(layer.weights).data, dtype=np.int8)
        if layer.bias:
            params[layer.bias] = np.array(graph.tensor(layer.bias).data, dtype=np.int32)
        if layer.scaled:
            params[scales.key(layer.weights)] = scales.model_scales(graph, layer)
    return params


def _bp_step(graph: Graph, plan: TrainingPlan, params: Params, env: dict,
             labels: np.ndarray, eta_t: np.float32, t: int, halvings: int) -> None:
    """--bp-layers: the head's exact gradients from the clean forward's activations (the
    ZO layers' updates do not reach them: step t's network, as the global update rule
    wants), then each BP layer's update in forward order, as NP's with an exact node
    gradient (training/backprop.py)."""
    layers = plan.bp_layers
    grads = node_gradients(graph, plan.head, env, params, labels, plan.logits,
                           plan.loss_params, tuple(layer.op_index for layer in layers))
    for layer in layers:
        gw, gb = node_to_parameter_gradient(graph, layer, env[layer.input], grads[layer.op_index])
        if plan.config.integer_only:  # weights only, rounded to b_BP bits (Alg. 2 line 11)
            int8_update(layer, params, accumulate_int32(parameter_gradient(gw)),
                         plan.config.b_bp, halvings, step_seed(plan.seed, t, layer.index))
            continue
        grad = (accumulate_int32(parameter_gradient(gw)),
                accumulate_int32(parameter_gradient(gb)) if layer.bias else None)
        update_layer(plan, layer, params, grad, eta_t)


def replay_step(plan: TrainingPlan, params: Params, t: int, sums: dict[int, np.ndarray]
                ) -> Params:
    """Step t rebuilt without data: every trained layer is WP, and its update follows from
    the stream S(t, i) and the query sums the device recorded (no guard, fixed eta); ``sums``
    by scalar key (plan.scalar_source)."""
    params = dict(params)
    eta_t = step_learning_rate(plan, t)
    for layer in plan.layers:
        xi = wp_perturbations(plan, layer, step_seed(plan.seed, t, layer.index))
        sums_of = sums[plan.scalar_source(layer)[0]]
        update_layer(plan, layer, params, wp_gradient(xi, sums_of), eta_t)
    return params


def step_learning_rate(plan: TrainingPlan, t: int, halvings: int = 0) -> np.float32:
    """eta_t of the schedule, times 2^-halvings (the guard's rollbacks), float32."""
    cfg = plan.config
    return np.float32(learning_rate(cfg.lr, t, cfg.steps, cfg.schedule) * lr_scale(halvings))


def train_step(graph: Graph, plan: TrainingPlan, params: Params, t: int, xs: np.ndarray,
               labels: np.ndarray, halvings: int = 0, record: dict | None = None
               ) -> tuple[Params, float]:
    """One optimisation step on a batch of N samples; returns the new parameters and the
    batch's mean clean loss in nats (before the update). ``record``: filled with each WP
    layer's query sums (trainable-layer index -> int32 (Q,)), what the device sends with
    --record-scalars."""
    params = dict(params)
    cfg = plan.config
    eta_t = step_learning_rate(plan, t, halvings)
    env = {graph.inputs[0]: xs}
    env.update(params)
    env = forward(graph, env, 0, plan.logits_op)
    clean = losses_q16(plan, env[plan.logits], labels)
    estimator = REGISTRY[cfg.estimator]
    if plan.zo_layers or plan.split or estimator.whole_model:
        STEPS[estimator.step](graph, plan, params,
                              StepBatch(xs, labels, env, clean, t, eta_t, halvings, record))
    if plan.head is not None:
        _bp_step(graph, plan, params, env, labels, eta_t, t, halvings)
    return params, float(clean.mean()) / 65536.0


def batch_indices(step: int, batch: int, count: int) -> np.ndarray:
    """Samples of step t: (t N + n) mod M, in the order of the data (docs/training.md)."""
    return (step * batch + np.arange(batch)) % count


def predict(graph: Graph, params: Params, x: np.ndarray, chunk: int = 256) -> np.ndarray:
    """Class index per sample (argmax of the model's output), with the given parameters."""
    out = []
    for k in range(0, len(x), chunk):
        env = {graph.inputs[0]: x[k:k + chunk]}
        env.update(params)
        y = forward(graph, env, 0, len(graph.ops) - 1, (graph.outputs[0],))[graph.outputs[0]]
        out.append(y.reshape(y.shape[0], -1).argmax(axis=1))
    return np.concatenate(out)


def trial_size(train_count: int, trial_samples: int) -> int:
    """S of the block trials: each trains on the first S training samples."""
    size = min(trial_samples, train_count // 2)
    if size < 1:
        raise DataError("sparse --block auto needs at least 2 training samples (a trial "
                        "subset and a held-out subset)")
    return size


def held_out_size(train_count: int, trial_samples: int, held_out: int) -> int:
    """H of the block trials: the last H training samples, none of them a trial's."""
    return min(held_out, train_count - trial_size(train_count, trial_samples))


@dataclass(frozen=True)
class BlockSelection:
    """Sparse --block auto (docs/training.md "Block selection"): the held-out score before
    any training and after each block's one-epoch trial; the first block with the lowest
    held-out loss wins (a loss sum over H records sees a gain that a count of correct
    predictions on them does not: docs/decisions/block-trials.md)."""

    samples: int  # S
    held_out: int  # H
    baseline: Score
    scores: tuple[Score, ...]

    @property
    def block(self) -> int:
        return min(range(len(self.scores)), key=lambda k: (self.scores[k].loss, k))

    @property
    def correct(self) -> tuple[int, ...]:
        return tuple(s.correct for s in self.scores)


def mean_loss_milli(loss_q16: int, records: int) -> int:
    """A Q16 loss sum as the mean loss per record in thousandths of a nat, rounded half up:
    how the device's block-trial LOG line prints it (integers on both sides)."""
    return (loss_q16 * 1000 + 32768 * records) // (65536 * records)


def select_block(graph: Graph, plans: tuple[TrainingPlan, ...], x: np.ndarray, y: np.ndarray,
                 on_trial_step: Callable[[], None] | None = None) -> BlockSelection:
    """Each block trains for one epoch of the trial subset from the original parameters
    (a cosine schedule over the trial's steps), then scores the held-out subset."""
    cfg = plans[0].config
    size = trial_size(len(x), cfg.trial_samples)
    held = held_out_size(len(x), cfg.trial_samples, cfg.trial_held_out)
    steps = -(-size // cfg.batch)
    held_x, held_y = x[len(x) - held:], y[len(y) - held:]
    baseline = validation_score(graph, plans[0], {}, held_x, held_y)
    scores = []
    for plan in plans:
        trial = replace(plan, config=replace(plan.config, steps=steps))
        params = initial_params(graph, plan)
        for t in range(steps):
            idx = batch_indices(t, cfg.batch, size)
            params, _ = train_step(graph, trial, params, t, x[idx], y[idx])
            if on_trial_step is not None:
                on_trial_step()
        scores.append(validation_score(graph, plan, params, held_x, held_y))
    return BlockSelection(size, held, baseline, tuple(scores))


def validation_score(graph: Graph, plan: TrainingPlan, params: Params, x: np.ndarray,
                     y: np.ndarray) -> Score:
    """The guard's measurement: correct argmax of the logits (lowest index on ties) and the
    sum of Q16 losses, over the records given."""
    logits = _logits(graph, plan, params, x)
    return Score(int((logits.argmax(axis=1) == y).sum()),
                 int(losses_q16(plan, logits, y).sum()))


def _logits(graph: Graph, plan: TrainingPlan, params: Params, x: np.ndarray) -> np.ndarray:
    env = {graph.inputs[0]: x}
    env.update(params)
    return forward(graph, env, 0, plan.logits_op, (plan.logits,))[plan.logits].reshape(
        len(x), -1)


def compare(graph: Graph, plan: TrainingPlan, result: Params, start: Params, x: np.ndarray,
            y: np.ndarray) -> Comparison:
    """The end's confirmation on records x, y: which of them only the result or only the
    start classifies right, and both loss sums (what zo_guard.c's confirm counts)."""
    right, loss = [], []
    for params in (result, start):
        logits = _logits(graph, plan, params, x)
        right.append(logits.argmax(axis=1) == y)
        loss.append(int(losses_q16(plan, logits, y).sum()))
    return Comparison(int((right[0] & ~right[1]).sum()), int((right[1] & ~right[0]).sum()),
                      loss[0], loss[1])


def choose_lr(graph: Graph, plan: TrainingPlan, params: Params, x: np.ndarray, y: np.ndarray,
              x_val: np.ndarray, y_val: np.ndarray, schedule: GuardSchedule
              ) -> tuple[float, tuple[Score, ...]]:
    """--lr auto: each candidate trains ``schedule.trial_steps`` steps from ``params`` at a
    constant eta on the run's first samples; the largest eta whose trial does not fall
    below the lowest validation loss's trial (Score.falls_below, the guard's noise margin)
    wins: trials of 2 % of a run cannot tell a slower start from a worse eta, and the guard
    halves an eta that falls later (docs/decisions/first-layers.md). Returns the winner
    (float32 value) and every score."""
    scores = []
    for eta in schedule.candidates:
        trial = replace(plan, config=replace(plan.config, lr=eta, schedule="constant",
                                             steps=schedule.trial_steps))
        p = params
        for t in range(schedule.trial_steps):
            idx = batch_indices(t, plan.config.batch, len(x))
            p, _ = train_step(graph, trial, p, t, x[idx], y[idx])
        scores.append(validation_score(graph, plan, p, x_val, y_val))
    best = min(range(len(scores)), key=lambda k: (scores[k].loss, k))
    chosen = max(k for k in range(best, len(scores))
                 if k == best or not scores[k].falls_below(scores[best], len(y_val)))
    return float(np.float32(schedule.candidates[chosen])), tuple(scores)


@dataclass(frozen=True)
class StepRecord:
    step: int  # completed steps after this one
    loss: float  # mean clean loss of the step's batch, nats
    lr: float
    accuracy: float | None  # on the test split, when evaluated at this step
    val_accuracy: float | None = None  # the guard's check at this step
    event: str = ""  # the guard's decision: best, rollback, restore (the final best), start


@dataclass(frozen=True)
class Confirmation:
    """The end's comparison of the result with the start (guard.confirmed)."""

    comparison: Comparison
    step: int  # the result's: the last step for the last parameters, else a restored best's
    training_records: int  # the training split's last records, or the image's held-out ones
    validation_records: int  # for the last parameters without held-out records; else 0
    trained: int = 0  # of the training records, how many a step of the run trained on
    held_out: bool = False  # training_records are the image's held-out records
    last: bool = False  # the result is the last parameters (else a restored best)

    @property
    def records(self) -> int:
        return self.training_records + self.validation_records

    def where(self) -> str:
        """The records compared, in words."""
        return confirmation_where(self.training_records, self.trained, self.validation_records,
                                  self.held_out)


@dataclass(frozen=True)
class Stop:
    """The guard ended the run by its patience (guard.patience_ends): what the device's STOP
    event carries."""

    step: int  # the stopping check's
    since_best: int  # steps since the best (patience x K)
    best_step: int  # the best's before the stopping check (0: the start)
    best: Score
    falling: int = 0  # the state's falls in a row after the check's decision, before the mark

    def line(self, records: int) -> str:
        """What simulate and train print (the device's STOP event in words)."""
        whose = "the start" if self.best_step == 0 else f"step {self.best_step}"
        return (f"guard: step {self.step}: no new best in {self.since_best} steps (the best: "
                f"{whose}, {self.best.correct}/{records} validation records correct); the "
                "run stops here (--patience)")


@dataclass
class Guard:
    """The guard of one simulated run: its validation records, schedule and state, and the
    best parameters (the device keeps them in the image's second checkpoint slot)."""

    x_val: np.ndarray
    y_val: np.ndarray
    schedule: GuardSchedule
    state: GuardState
    x_confirm: np.ndarray  # the end's confirmation: the image's held-out records, else the
    y_confirm: np.ndarray  # training split's last
    start_params: Params  # the parameters before training, the end's alternative
    train_count: int = 0  # the training split's records (which of them the steps trained)
    test_records: int = 0  # the test split's: with one, it measures the result independently
    held_out: bool = False  # x_confirm are held-out records (the validation records do not join)
    best_params: Params | None = None
    confirmation: Confirmation | None = None  # the end's, once made
    stop: Stop | None = None  # the guard's stop (patience), once made

    def baseline(self, graph: Graph, plan: TrainingPlan, params: Params) -> Score:
        """The check before the first step: the parameters to beat."""
        score = validation_score(graph, plan, params, self.x_val, self.y_val)
        self.state = replace(self.state, best_step=0, best=score)
        self.best_params = params
        return score

    def check(self, graph: Graph, plan: TrainingPlan, params: Params, done: int
              ) -> tuple[Params, Score | None, str]:
        """After step ``done``: measure when due, keep a new best, roll back on a fall; after
        the last step the result is the last parameters (guard.last_is_result) or the best,
        then confirmed against the start."""
        last = done == plan.config.steps
        if done % self.schedule.every and not last:
            return params, None, ""
        score = validation_score(graph, plan, params, self.x_val, self.y_val)
        stop = not last and not new_best(score, self.state, len(self.y_val)) and patience_ends(
            done, self.state, self.schedule.every, plan.config.patience)
        last = last or stop  # the stopping check ends the run as the last step's does
        if stop:  # the best it gave up on (the device's STOP event, before the decision's)
            self.stop = Stop(done, done - self.state.best_step, self.state.best_step,
                             self.state.best)
        event = ""
        if new_best(score, self.state, len(self.y_val)) or (  # (and undo one halving)
                last and last_is_result(score, self.state, len(self.y_val))):
            self.state = replace(self.state, best_step=done, best=score, falling=0,
                                 halvings=max(0, self.state.halvings - 1))
            self.best_params, event = params, "best"
        elif not score.falls_below(self.state.best, len(self.y_val)):
            self.state = replace(self.state, falling=0)
        elif self.state.falling + 1 < FALLS_TO_ROLL_BACK:  # wait for the next check
            self.state = replace(self.state, falling=self.state.falling + 1)
        else:
            self.state = replace(self.state, halvings=self.state.halvings + 1,
                                 rollbacks=self.state.rollbacks + 1, falling=0)
            params, event = self.best_params, "rollback"
        if last and self.state.best_step != done and event != "rollback":
            params, event = self.best_params, "restore"
        if last and self.state.best_step != 0 and not self._confirm(
                graph, plan, self.state.best_step == done):
            params, event = self.start_params, "start"
        if stop:  # the best slot written at this check keeps the state before the mark
            self.stop = replace(self.stop, falling=self.state.falling)
            self.state = replace(self.state, falling=STOPPED)
        return params, score, event

    def slot_state(self) -> GuardState:
        """The state the best slot is written with: the run's, but before a stop marks it
        (zo_guard.c writes the slot during the stopping check's decision)."""
        if self.stop is None or not self.state.stopped:
            return self.state
        return replace(self.state, falling=self.stop.falling)

    def _confirm(self, graph: Graph, plan: TrainingPlan, last: bool) -> bool:
        """Whether the result stays (guard.confirmed): compared with the start on the
        confirmation records and, for the last parameters without held-out records, the
        validation records too; if not, the start is the best again, scored on the
        validation records as its baseline was."""
        comparison = compare(graph, plan, self.best_params, self.start_params, self.x_confirm,
                             self.y_confirm)
        with_val = last and not self.held_out
        if with_val:
            comparison += compare(graph, plan, self.best_params, self.start_params, self.x_val,
                                  self.y_val)
        trained = 0 if self.held_out else trained_confirmation_records(  # up to the result's
            self.train_count, len(self.y_confirm), self.state.best_step, plan.config.batch)
        self.confirmation = Confirmation(comparison, self.state.best_step, len(self.y_confirm),
                                         len(self.y_val) if with_val else 0, trained,
                                         self.held_out, last)
        if confirmed(comparison):
            return True
        baseline = validation_score(graph, plan, self.start_params, self.x_val, self.y_val)
        self.state = replace(self.state, best_step=0, best=baseline)
        self.best_params = self.start_params
        return False


def run(graph: Graph, plan: TrainingPlan, params: Params, x: np.ndarray, y: np.ndarray,
        first_step: int = 0, x_test: np.ndarray | None = None, y_test: np.ndarray | None = None,
        eval_every: int = 0, guard: Guard | None = None
        ) -> Iterator[tuple[StepRecord, Params]]:
    """Steps first_step..T-1; yields a record and the parameters after each step. With a
    guard, ``plan.config.lr`` is the eta the run uses (the --lr auto winner) and the guard
    must have its baseline."""
    cfg = plan.config
    for t in range(first_step, cfg.steps):
        if guard is not None and guard.state.stopped:  # the guard's stop: nothing resumes it
            return
        idx = batch_indices(t, cfg.batch, len(x))
        halvings = guard.state.halvings if guard else 0
        params, loss = train_step(graph, plan, params, t, x[idx], y[idx], halvings)
        done = t + 1
        score, event = None, ""
        if guard is not None:
            params, score, event = guard.check(graph, plan, params, done)
        acc = None
        end = done == cfg.steps or (guard is not None and guard.state.stopped)
        if x_test is not None and eval_every and (done % eval_every == 0 or end):
            acc = float((predict(graph, params, x_test) == y_test).mean())
        yield StepRecord(done, loss, float(step_learning_rate(plan, t, halvings)), acc,
                         None if score is None else score.correct / len(guard.y_val),
                         event), params


def to_checkpoint(plan: TrainingPlan, params: Params, step: int, model_sha256: bytes,
                  state: GuardState | None = None) -> Checkpoint:
    """The checkpoint of a run at ``step``; without a guard state, eta is the plan's."""
    state = state or GuardState(float(np.float32(plan.config.lr)))
    return Checkpoint(model_sha256, step, plan.seed, tuple(
        LayerParams(layer.op_index, params[layer.weights].reshape(-1),
                    params[layer.bias] if layer.bias else np.zeros(0, np.int32),
                    params[scales.key(layer.weights)] if layer.scaled
                    else np.zeros(0, np.float32))
        for layer in plan.layers), state.lr, state.halvings, state.best_step,
        state.best.correct, state.best.loss, state.rollbacks, state.falling)


def guard_state(ckpt: Checkpoint) -> GuardState:
    return GuardState(ckpt.lr, ckpt.halvings, ckpt.best_step,
                      Score(ckpt.best_correct, ckpt.best_loss), ckpt.rollbacks, ckpt.falling)


def from_checkpoint(graph: Graph, plan: TrainingPlan, ckpt: Checkpoint,
                    model_sha256: bytes | None = None) -> Params:
    """Parameters from a checkpoint, refusing one that belongs to another model or run."""
    if model_sha256 is not None and ckpt.model_sha256 != model_sha256:
        raise DataError("the checkpoint belongs to a different model file (sha256 differs)")
    layers = {lp.op_index: lp for lp in ckpt.layers}
    params: Params = {}
    for layer in plan.layers:
        lp = layers.get(layer.op_index)
        if (lp is None or lp.weights.size != layer.weight_count
                or lp.bias.size != layer.bias_count or lp.scales.size != layer.scale_count):
            raise DataError(f"the checkpoint has no matching parameters for layer "
                            f"{layer.op_index} ('{layer.op.name}'); was it trained with "
                            "other --layers or --scales?")
        params[layer.weights] = lp.weights.reshape(graph.tensor(layer.weights).shape)
        if layer.bias:
            params[layer.bias] = lp.bias.copy()
        if layer.scaled:
            params[scales.key(layer.weights)] = scales.checked(graph, layer, lp.scales)
    return params

