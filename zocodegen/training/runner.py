"""`zocodegen simulate`: a whole simulated training run into a RUN directory
(checkpoint.bin, metrics.csv, curves.png, run.json), with a live progress bar."""
from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..board_fit import resolve_budget
from ..progress import in_lines, progress_bar
from ..codegen.fit import check_sparse_options, fit, resolve_run
from ..codegen.project import BuildOptions, plan_project
from ..target import DEFAULT_TARGET
from ..errors import UserError
from ..files import MissingInput, file_sha256, read_text, write_atomic
from ..summary import duration
from ..frontends import load_model
from .metrics import (TENSORBOARD_DIR, MetricsLog, MetricsRow, confusion_matrix,
                      write_confusion, write_curves)
from . import checkpoint, simulator
from .config import (BLOCKS_AUTO, BLOCKS_FIT, BP_AUTO, DEFAULT_BLOCKS, LAYERS_FIRST, MODE_AUTO,
                     TrainConfig, run_steps)
from .data import Dataset, is_image, load_dataset
from .guard import (CONFIRM_Z2, GuardState, Score, confirmation_records, guard_schedule,
                    needed_net, trials_tied, unvalidated, validation_count,
                    validation_note)
from .plan import check_blocks, describe_layers, loss_head, trainable_ops, training_plans
from .plan_types import TrainingPlan

#: Where a run's progress lines go: the command line passes print; the API is silent unless
#: asked (docs/api.md).
Say = Callable[[str], None]


def silent(text: str) -> None:
    """The API's default: no progress lines."""

#: What simulate, train and export say when a run's result is its start.
NO_IMPROVEMENT = "no validated improvement: the result equals the starting model"

#: The loss summary compares the mean of this many first and last steps (fewer in a short
#: run: half its steps each, so the two windows never overlap).
LOSS_WINDOW = 50


@dataclass(frozen=True)
class RunSummary:
    steps: int
    first_loss: float
    last_loss: float
    accuracy_before: float | None
    accuracy_after: float | None
    forward_evaluations: int  # query forwards (partial or full) over the run
    lr: float  # eta the run used (the --lr auto winner)
    rollbacks: int  # the training guard's
    confusion: np.ndarray | None = None  # [true, predicted] counts on accuracy_split
    class_names: tuple[str, ...] = ()
    accuracy_split: str | None = None  # "test", or "validation" when there is no test split
    loss_window: int = LOSS_WINDOW  # first_loss / last_loss: means of this many steps
    unchanged: str = ""  # why the result equals the starting model; "" when it does not
    # why a result the guard kept is not a validated improvement (its confirmation compared
    # only records the run trained on or selected on); "" when it is, or the start was kept
    unvalidated: str = ""
    first_step: int = 0  # the step it started (a resumed run's checkpoint step)
    #: with accuracy_split "validation": which records those are (guard.validation_note)
    accuracy_note: str = ""


def steps_for(config: TrainConfig, epochs: int | None, samples: int) -> TrainConfig:
    """--epochs E -> T = E * ceil(M / N) steps."""
    if epochs is None:
        return config
    if epochs < 1:
        raise UserError("--epochs must be at least 1")
    steps = epochs * -(-samples // config.batch)
    return TrainConfig(**{**config.as_dict(), "steps": steps})


def _plan_of(plans: tuple[TrainingPlan, ...], ckpt: checkpoint.Checkpoint) -> TrainingPlan:
    """The plan whose layers a checkpoint holds (with --block auto: the block it chose)."""
    ops = [lp.op_index for lp in ckpt.layers]
    for plan in plans:
        if [layer.op_index for layer in plan.layers] == ops:
            return plan
    return plans[0]  # from_checkpoint() names the mismatch


def _select(graph, plans: tuple[TrainingPlan, ...], x: np.ndarray, y: np.ndarray,
            progress: bool | None, say: Say) -> simulator.BlockSelection:
    """Sparse --block auto: the block trials, with a progress bar and one line per block."""
    cfg = plans[0].config
    size = simulator.trial_size(len(x), cfg.trial_samples)
    steps = -(-size // cfg.batch)
    held = simulator.held_out_size(len(x), cfg.trial_samples, cfg.trial_held_out)
    # announced before they run: on a large model they take minutes (issue 64 item 4)
    say(f"block trials: {len(plans)} blocks, each {steps} step(s) on the first {size} training "
        f"records, then scored on the last {held}: {steps * len(plans)} trial steps and "
        f"{held * (len(plans) + 1)} forward passes before the run's {cfg.steps} steps "
        "(--block K skips them; --trial-samples and --trial-held-out bound them)")
    bar = progress_bar(progress, total=steps * len(plans), desc="block trials", unit="step")
    try:
        selection = simulator.select_block(graph, plans, x, y, lambda: bar.update(1))
    finally:
        bar.close()
    for k, score in enumerate(selection.scores):
        say(trial_line(k, selection, score) + ("  <- selected" if k == selection.block else ""))
    return selection


def trial_line(block: int, selection: simulator.BlockSelection, score: Score) -> str:
    """The device's LOG line of a block trial (templates/project/main.c trial_line)."""
    before, after = (simulator.mean_loss_milli(s.loss, selection.held_out)
                     for s in (selection.baseline, score))
    return (f"block {block}: {selection.samples} trial records; held-out "
            f"{selection.baseline.correct} -> {score.correct} of {selection.held_out} correct, "
            f"mean loss {before // 1000}.{before % 1000:03d} -> {after // 1000}.{after % 1000:03d}")


def _validation(data: Dataset, plan: TrainingPlan):
    """The guard's validation records and schedule (None without guard and --lr auto)."""
    cfg = plan.config
    if not (cfg.guard or cfg.lr_auto):
        return None, None, None
    schedule = guard_schedule(plan)
    available = 0 if data.x_val is None else len(data.x_val) - data.held_out
    count = validation_count(available, schedule,
                             "the training guard" if cfg.guard else "--lr auto")
    return data.x_val[:count], data.y_val[:count], schedule


def _lr_trials(graph, plan: TrainingPlan, params, data: Dataset, x_val, y_val, schedule,
               say: Say) -> float:
    """--lr auto, with one line per candidate (the device logs the same)."""
    lr, scores = simulator.choose_lr(graph, plan, params, data.x, data.y, x_val, y_val,
                                     schedule)
    for eta, score in zip(schedule.candidates, scores):
        say(f"lr trial {eta:g}: {schedule.trial_steps} steps, validation "
            f"{score.correct}/{len(y_val)} correct, loss {score.loss / 65536 / len(y_val):.4f}"
            f"{'  <- chosen' if float(np.float32(eta)) == lr else ''}")
    tied = trials_tied([score.loss for score in scores], schedule.trial_steps)
    if tied:
        say(tied)
    return lr


def begin(graph, plan: TrainingPlan, params, data: Dataset,
          ckpt: checkpoint.Checkpoint | None = None, say: Say = silent, start=None
          ) -> tuple[TrainingPlan, GuardState, simulator.Guard | None]:
    """A run's start as the device makes it: --lr auto trials and the guard's baseline on a
    new run, the guard state from the checkpoint on a resumed one (``start``: the parameters
    before training, which the end's confirmation needs; a new run's are ``params``). Returns
    the plan with the eta in use, that state, and the guard (None without). Prints what the
    device logs."""
    config = plan.config
    x_val, y_val, schedule = _validation(data, plan)
    state = GuardState(float(np.float32(config.lr)))
    if ckpt is not None:
        state = simulator.guard_state(ckpt)
    elif config.lr_auto:
        state = replace(state, lr=_lr_trials(graph, plan, params, data, x_val, y_val, schedule,
                                             say))
    plan = replace(plan, config=replace(config, lr=state.lr))
    if not config.guard:
        return plan, state, None
    if data.held_out:  # the image's held-out records (the val split's last), up to V_max
        held = slice(len(data.x_val) - data.held_out,
                     len(data.x_val) - data.held_out + min(data.held_out, schedule.samples))
        x_confirm, y_confirm = data.x_val[held], data.y_val[held]
    else:
        held = confirmation_records(len(data.x), schedule)
        x_confirm, y_confirm = data.x[held], data.y[held]
    guard = simulator.Guard(x_val, y_val, schedule, state, x_confirm, y_confirm,
                            params if start is None else start, len(data.x),
                            0 if data.x_test is None else len(data.x_test),
                            held_out=data.held_out > 0)
    if ckpt is None:
        score = guard.baseline(graph, plan, params)
        say(f"guard: a check every {schedule.every} steps on {len(y_val)} validation "
            f"records; before training {score.correct}/{len(y_val)} correct, loss "
            f"{score.loss / 65536 / len(y_val):.4f}")
    return plan, guard.state, guard


def _trials_record(plan: TrainingPlan, data: Dataset, record: Path, new_run: bool) -> dict:
    """What run.json keeps of the --lr auto trials and the validation checks, so that the
    run's device time can be added up later (host/device_time.py); a resumed run keeps the
    trials and the block selection its start ran (``record``, the run.json it is about to
    replace)."""
    x_val, _, schedule = _validation(data, plan)
    if new_run:
        trials = plan.config.lr_auto
        ran = {"lr_trials": len(schedule.candidates) if trials else 0,
               "lr_trial_steps": schedule.trial_steps if trials else 0}
    else:
        earlier = json.loads(read_text(record, "run record"))
        ran = {key: earlier.get(key, 0) for key in ("lr_trials", "lr_trial_steps")}
        ran["selection"] = earlier.get("selection")
        if "end" in earlier:  # a run the guard ended stays ended
            ran["end"] = earlier["end"]
    return {**ran, "validation_records": 0 if x_val is None else len(x_val)}


def end_record(step: int, since_best: int | None = None, best_correct: int = 0,
               of: int = 0) -> dict:
    """run.json's "end": why and where the run ended, its last step or the guard's stop
    (``since_best``: the steps since the best when the guard's patience ended it; the device
    says so in its STOP event, docs/link.md)."""
    if since_best is None:
        return {"reason": "steps", "step": step}
    return {"reason": "patience", "step": step, "steps_since_best": since_best,
            "best_step": step - since_best, "best_correct": best_correct, "of": of}


RUN_FILES = ("checkpoint.bin", "best.bin", "metrics.csv", "curves.png", "run.json",
             "confusion.csv")


def delete_run(out_dir: Path, extra: tuple[str, ...] = ()) -> None:
    """--force: a run's files and its TensorBoard log (nothing else in the folder)."""
    for name in (*RUN_FILES, *extra):
        (out_dir / name).unlink(missing_ok=True)
    shutil.rmtree(out_dir / TENSORBOARD_DIR, ignore_errors=True)


def run_identity(model_sha: bytes, data_path: Path, config: TrainConfig,
                 target: str | None) -> dict:
    """What makes a run the same run: the model, the data, the board and every option."""
    kind = "data image" if is_image(Path(data_path)) else "data"
    data_sha = file_sha256(Path(data_path), kind).hex()
    return {"model_sha256": model_sha.hex(), "data_sha256": data_sha, "target": target,
            "config": config.as_dict()}


def read_run_record(out_dir: Path) -> dict:
    path = out_dir / "run.json"
    try:
        record = json.loads(read_text(path, "run record"))
    except MissingInput:
        raise UserError(f"{path} is missing, so nothing says which model, data and options "
                        f"the run used: start anew with --force (deletes the run)") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is damaged ({exc}): start anew with --force (deletes the "
                        "run)") from None
    if not isinstance(record, dict):
        raise UserError(f"{path} is damaged (not a JSON object): start anew with --force")
    return record


def check_step(ckpt_path: Path, step: int, planned: int, plan: str) -> None:
    """A checkpoint past the steps the run plans is not resumed (its schedule ended there):
    `simulate --resume` and `train` refuse it alike."""
    if step > planned:
        raise UserError(f"{ckpt_path} is at step {step}, beyond the {planned} steps {plan}; "
                        "use another -o RUN, or start anew with --force (deletes the run)")


def prepare_run_dir(out_dir: Path, identity: dict, resume: bool, force: bool) -> None:
    """Never over an existing run unless asked: --resume continues it only when model, data
    and options are the run's; --force deletes it first."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir} is a file, not a directory: choose another -o RUN")
    present = [n for n in RUN_FILES if (out_dir / n).exists()]
    if resume:
        if not (out_dir / "checkpoint.bin").is_file() and present:
            raise UserError(f"--resume: {out_dir} holds no checkpoint.bin to continue from "
                            f"(the run stopped before its first), only {', '.join(present)}: "
                            "start it anew with --force (deletes them)")
        if not (out_dir / "checkpoint.bin").is_file():
            raise UserError(f"--resume: {out_dir} holds no checkpoint.bin to continue from; "
                            "drop --resume to start a new run")
        record = read_run_record(out_dir)
        differs = [key for key in ("model_sha256", "data_sha256") if record.get(key)
                   != identity[key]]
        if record.get("target") != identity["target"]:
            differs.append(f"--target {record.get('target') or '(none)'} -> "
                           f"{identity['target'] or '(none)'}")
        old = record.get("config") if isinstance(record.get("config"), dict) else {}
        new = json.loads(json.dumps(identity["config"]))  # as run.json stores it
        differs += [f"--{k.replace('_', '-')} {old.get(k)!r} -> {v!r}"
                    for k, v in new.items() if old.get(k) != v]
        if differs:
            raise UserError(f"--resume: {out_dir} was run with other inputs or options "
                            f"({'; '.join(differs)}); resume with the run's own, or start "
                            "anew with --force")
        return
    if present and not force and "checkpoint.bin" not in present:
        raise UserError(f"{out_dir} holds a run that stopped before its first checkpoint "
                        f"({', '.join(present)}): start it anew with --force (deletes it)")
    if present and not force:
        raise UserError(f"{out_dir} holds a run ({', '.join(present)}): continue it with "
                        "--resume, or start anew with --force (deletes it)")
    delete_run(out_dir)


def board_run(graph, config: TrainConfig, target: str | None, say: Say = silent,
              estimator_fit: bool = False) -> TrainConfig:
    """The run a board takes. With ``target``: the one `build --target T` puts on it, from
    the build's own fit search, refused with the build's message when it does not fit.
    Without: --train auto is full training (no budget to fit) and --bp-layers / --blocks
    auto are the DEFAULT_TARGET build's. Says each choice an auto option made (``estimator_fit``:
    --estimator was not given, fit.resolve_estimator)."""
    check_blocks(graph, config)
    board = target or DEFAULT_TARGET
    if target is None and config.mode == MODE_AUTO:
        check_sparse_options(config, replace(config, mode="full"),
                             "without --target, --train auto is full training")
        config = replace(config, mode="full")
    if target is None:
        options = resolve_budget(graph, resolve_run(graph, BuildOptions("native", board,
                                                                        config)))
    else:
        device, options = fit(graph, BuildOptions(target, board, config,
                                                  estimator_fit=estimator_fit))
        plan_project(device, options)  # a board refuses a build that does not fit it
        options = resolve_budget(device, options)
    chosen = options.train
    picks = f"as `build --target {board}` picks"
    if config.layers == LAYERS_FIRST and len(chosen.layers) < len(trainable_ops(graph)):
        say(f"--layers first (default): {describe_layers(chosen.layers, graph)}")
    if chosen.estimator != config.estimator:
        say(f"--estimator (default): {chosen.estimator} ({picks}; {config.estimator} does not "
            f"fit)")
    if config.mode == MODE_AUTO:
        say(f"--train auto: {chosen.mode} ({picks}"
            + ("" if chosen.mode == "full" else "; full training does not fit") + ")")
    if config.bp_layers == BP_AUTO:
        say(f"--bp-layers auto: the last {chosen.bp_layers} trainable layer(s) by "
            f"back-propagation ({picks})")
    if config.budget:
        say(f"--budget {duration(config.budget)}: {chosen.steps} steps on the {board} (its "
            "step estimated as `inspect` estimates it, with the trials and checks)")
    if chosen.mode == "sparse" and (config.blocks == BLOCKS_AUTO
                                    or (config.blocks == BLOCKS_FIT
                                        and chosen.blocks != DEFAULT_BLOCKS)):
        say(f"--blocks {'auto' if config.blocks == BLOCKS_AUTO else '(default)'}: "
            f"{chosen.blocks} block(s) ({picks})")
    return chosen


def simulate(model_path: Path, data_path: Path, out_dir: Path, config: TrainConfig,
             epochs: int | None = None, eval_every: int | None = None, resume: bool = False,
             progress: bool | None = None, force: bool = False, say: Say = silent,
             target: str | None = None, estimator_fit: bool = False) -> RunSummary:
    """The run; its progress lines go to ``say`` and its bars show when ``progress`` (None:
    when the output is a terminal). ``target``: the board whose build the run is
    (``estimator_fit``: as board_run)."""
    graph = load_model(model_path)
    logits, _ = loss_head(graph)
    data = load_dataset(data_path, graph, graph.tensor(logits).shape[-1], model_path)
    config = board_run(graph, steps_for(config, epochs, len(data.x)), target, say,
                       estimator_fit)
    # --steps, --epochs and --budget not given: an epoch of the data, as the device counts
    # its image's records (a budget has set T above, as the build does)
    config = replace(config, steps=run_steps(config.steps, config.batch, len(data.x)))
    plans = training_plans(graph, config)
    sha = file_sha256(Path(model_path), "model")
    identity = run_identity(sha, data_path, config, target)
    prepare_run_dir(out_dir, identity, resume, force)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot make {out_dir}: {exc.strerror or exc}") from None
    ckpt_path = out_dir / "checkpoint.bin"
    ckpt = checkpoint.load(ckpt_path) if resume else None
    if ckpt is not None:
        check_step(ckpt_path, ckpt.step, config.steps, "of the run (--steps)")
    selection = None
    if ckpt is not None:
        plan = _plan_of(plans, ckpt)
    elif len(plans) > 1:
        selection = _select(graph, plans, data.x, data.y, progress, say)
        plan = plans[selection.block]
    else:
        plan = plans[0]
    params, first = simulator.initial_params(graph, plan), 0
    start = {name: np.copy(value) for name, value in params.items()}  # for `unchanged`
    if ckpt is not None:  # the device goes on with the checkpoint's seed too
        plan = replace(plan, run_seed=ckpt.seed)
        params = simulator.from_checkpoint(graph, plan, ckpt, sha)
        first = ckpt.step
    plan, state, guard = begin(graph, plan, params, data, ckpt, say, start)
    best_path = out_dir / "best.bin"
    baseline = None
    if guard is not None:
        if ckpt is None:
            baseline = guard.state.best
            checkpoint.save(best_path, simulator.to_checkpoint(plan, params, 0, sha, guard.state))
        elif state.started:
            try:
                best = simulator.from_checkpoint(graph, plan, checkpoint.load(best_path), sha)
            except UserError as exc:  # damaged, missing or another model's
                raise UserError(f"{exc}: the run's best parameters cannot be resumed; start "
                                "anew with --force (deletes the run)") from None
            guard.best_params = best
    y_val = None if guard is None else guard.y_val
    every = eval_every if eval_every is not None else max(1, config.steps // 20)
    split, x_acc, y_acc = _accuracy_split(data)
    has_test = x_acc is not None
    before = (float((simulator.predict(graph, params, x_acc) == y_acc).mean())
              if has_test else None)
    log = MetricsLog(out_dir / "metrics.csv", resume_at=first if ckpt is not None else None)
    write_atomic(out_dir / "run.json", (json.dumps({
        "model": str(model_path), "data": str(data_path), **identity,
        "modes": [l.mode for l in plan.layers],
        "trainable_ops": [l.op_index for l in plan.layers], "block": plan.config.block,
        "selection": None if selection is None else {
            "samples": selection.samples, "held_out": selection.held_out,
            "baseline_correct": selection.baseline.correct,
            "baseline_loss_q16": selection.baseline.loss, "correct": list(selection.correct),
            "loss_q16": [s.loss for s in selection.scores], "block": selection.block},
        "lr": state.lr, "guard_every": guard.schedule.every if guard else None,
        **_trials_record(plan, data, out_dir / "run.json", ckpt is None),
        "accuracy_before": before, "accuracy_split": split if has_test else None},
        indent=2) + "\n").encode())
    if not log.rows and (has_test or baseline is not None):
        log.add(MetricsRow(first, float("nan"), 0.0, before,
                           None if baseline is None else baseline.correct / len(y_val),
                           "" if baseline is None else "best"))
    bar = progress_bar(progress, total=config.steps, initial=first, desc="simulate",
                       unit="step")
    losses, done = [], first
    try:
        for record, params in simulator.run(graph, plan, params, data.x, data.y, first,
                                            x_acc, y_acc, every if has_test else 0,
                                            guard):
            losses.append(record.loss)
            done = record.step
            if guard is not None and guard.stop is not None and guard.stop.step == done:
                (say if in_lines(bar) else bar.write)(guard.stop.line(len(guard.y_val)))
            log.add(MetricsRow(record.step, record.loss, record.lr, record.accuracy,
                               record.val_accuracy, record.event))
            recent = np.mean(losses[-50:])
            post = {"loss": f"{recent:.3f}"}
            if record.event in ("best", "start"):  # a best slot's step is its best step
                checkpoint.save(best_path, simulator.to_checkpoint(
                    plan, params, guard.state.best_step, sha, guard.slot_state()))
            if record.event not in ("", "best") or (guard and guard.confirmation):
                (say if in_lines(bar) else bar.write)(_event_line(record, guard))
            if record.accuracy is not None:
                post["acc"] = f"{100 * record.accuracy:.1f}%"
                checkpoint.save(ckpt_path, simulator.to_checkpoint(
                    plan, params, record.step, sha, guard.state if guard else state))
            bar.set_postfix(post, refresh=False)
            bar.update(1)
    finally:
        bar.close()
        log.close()
    checkpoint.save(ckpt_path, simulator.to_checkpoint(plan, params, done, sha,
                                                       guard.state if guard else state))
    write_curves(log.rows, out_dir, curves_title(model_path, config, state.lr), split)
    confusion = None
    if has_test:
        classes = graph.tensor(loss_head(graph)[0]).shape[-1]
        confusion = confusion_matrix(y_acc, simulator.predict(graph, params, x_acc), classes)
        write_confusion(out_dir / "confusion.csv", confusion, data.class_names,
                        f"{split} split; ")
    rows = [r for r in log.rows if not np.isnan(r.loss)]
    after = rows[-1].accuracy if rows and rows[-1].accuracy is not None else None
    record = read_run_record(out_dir)
    stop = guard.stop if guard else None
    note = (validation_note(len(y_acc), data.held_out) if has_test and split == "validation"
            else "")
    record.update(accuracy_after=after, accuracy_split=split if has_test else None,
                  accuracy_note=note,
                  rollbacks=guard.state.rollbacks if guard else 0,
                  confirmation_records=guard.confirmation.records
                  if guard and guard.confirmation else 0,
                  end=end_record(done) if stop is None and not (guard and guard.state.stopped)
                  else record["end"] if stop is None  # resumed after the guard's stop
                  else end_record(stop.step, stop.since_best, stop.best.correct,
                                  len(guard.y_val)))
    write_atomic(out_dir / "run.json", (json.dumps(record, indent=2) + "\n").encode())
    per_step = plan.forwards_per_step
    window = max(1, min(LOSS_WINDOW, len(losses) // 2))
    return RunSummary(done, float(np.mean(losses[:window])) if losses else float("nan"),
                      float(np.mean(losses[-window:])) if losses else float("nan"), before,
                      after, per_step * (done - first), state.lr,
                      guard.state.rollbacks if guard else 0, confusion, data.class_names,
                      split if has_test else None, window,
                      _unchanged(start, params, guard, ckpt is not None),
                      _kept_unvalidated(guard), first, note)


def curves_title(model_path: Path, config: TrainConfig, lr: float) -> str:
    """curves.png's title: the model, estimator, Q and eta (`device-time` redraws it)."""
    return (f"{Path(model_path).name}: {config.estimator}, Q={config.queries}, "
            f"eta={'auto: ' if config.lr_auto else ''}{lr:g}")


def _accuracy_split(data: Dataset) -> tuple[str, np.ndarray | None, np.ndarray | None]:
    """The split accuracy is measured on: test, else validation (as `train` measures on the
    device), named in every line that prints it."""
    if data.x_test is not None:
        return "test", data.x_test, data.y_test
    return "validation", data.x_val, data.y_val


def _unchanged(start, params, guard: simulator.Guard | None, resumed: bool) -> str:
    """Why the run's result equals the parameters it started from ("" when it differs): the
    guard kept the start (the result did not confirm against it, or the last check fell below
    it), or every update rounded to zero."""
    if resumed or any(not np.array_equal(start[k], params[k]) for k in start):
        return ""
    if guard is not None and guard.state.best_step == 0 and guard.confirmation:
        c = guard.confirmation
        return f"the result (step {c.step}) did not confirm against the start {c.where()}"
    if guard is not None and guard.state.best_step == 0:
        best = guard.state.best
        return (f"the last check fell below the start ({best.correct}/{len(guard.y_val)} "
                "validation records correct before training)")
    return "every update rounded to zero (try a larger --lr or more --queries)"


def _kept_unvalidated(guard: simulator.Guard | None) -> str:
    conf = guard.confirmation if guard else None
    if conf is None or guard.state.best_step == 0:
        return ""
    return unvalidated(conf.trained, conf.training_records, conf.validation_records,
                       guard.test_records)


def _unvalidated(conf: simulator.Confirmation, test_records: int) -> str:
    """A kept result whose confirmation compared only records the run fitted: said plainly."""
    why = unvalidated(conf.trained, conf.training_records, conf.validation_records,
                      test_records)
    return f", but {why}" if why else ""


def _event_line(record: simulator.StepRecord, guard: simulator.Guard) -> str:
    """A rollback, the final restore or the end's confirmation, never silent (the device
    logs the same)."""
    best = guard.state
    if record.event == "rollback" and guard.confirmation is None:
        return (f"guard: step {record.step}: validation {100 * record.val_accuracy:.1f}% fell "
                f"below the best ({best.best.correct}/{len(guard.y_val)} at step "
                f"{best.best_step}); rolled back, eta halved {best.halvings}x")
    if guard.confirmation is None:
        return (f"guard: step {record.step}: the result is the best validated parameters "
                f"(step {best.best_step}, {best.best.correct}/{len(guard.y_val)} correct)")
    conf = guard.confirmation
    what = "the last parameters" if conf.last else "the best"
    c, records = conf.comparison, conf.records
    return (f"guard: step {record.step}: {conf.where()}, {what} (step {conf.step}) gets "
            f"{c.gained} record(s) right that the start gets wrong and {c.lost} the other way, "
            f"loss {c.loss / 65536 / records:.4f} against {c.start_loss / 65536 / records:.4f}: "
            "the result is "
            + (what + _unvalidated(conf, guard.test_records) if record.event != "start" else
               f"the start ({what} did not confirm: a net gain of at least "
               f"{needed_net(c.gained + c.lost)} record(s) (more than none, and "
               f"{math.sqrt(CONFIRM_Z2 / 100):.2f} sqrt({c.gained + c.lost})) and a lower "
               "loss needed)"))
