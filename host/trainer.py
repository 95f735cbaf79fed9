"""`zocodegen train`: the host side of a training run on a device (DESIGN.md section 6).

The host serves the packed image, tells the device to train in chunks of
``checkpoint_every`` steps, pulls a checkpoint and measures test accuracy after each chunk,
and shows a live progress bar. ``RUN/`` gets ``checkpoint.bin`` (CRC-checked, written
atomically), ``metrics.csv`` (flushed every row), ``curves.png`` and ``run.json``. When the
device is reset, or the firmware the host started dies, the run goes on from the last
checkpoint; so does ``zocodegen train`` started again on the same ``RUN/``.
"""
from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from zocodegen.errors import DataError, UserError
from zocodegen.files import file_sha256, write_atomic
from zocodegen.training import checkpoint, replay
from zocodegen.training.config import run_steps
from zocodegen.training.guard import (Score, confirmation_where, trained_confirmation_records,
                                      trials_tied, unvalidated, validation_note)
from zocodegen.training.runner import check_step, delete_run, end_record, read_run_record
from zocodegen.training.simulator import Stop
from zocodegen.progress import in_lines, progress_bar
from .blocks import ImageBlocks
from .curve_drawer import CurveDrawer
from .devices import Device, DeviceExited
from zocodegen.formats import link as p
from zocodegen.formats import status
from .link.server import DeviceReset, DeviceSession, HostLink, LinkError, Port
from zocodegen.training.metrics import (MetricsLog, MetricsRow, format_confusion,
                                       load_curve_writers, write_confusion, write_curves)

from .evaluation import TestConfusion
from .image_fit import check_image

#: Saving a checkpoint is retried this often when what arrived does not verify.
SAVE_ATTEMPTS = 3


@dataclass(frozen=True)
class TrainSummary:
    first_step: int  # where this invocation started (0, or the resumed checkpoint's step)
    steps: int  # completed steps at the end
    accuracy_before: float | None  # before any training (from run.json when resumed)
    accuracy_after: float | None
    resets: int  # device resets / firmware restarts survived
    retransmissions: int  # requests the device sent again (answered from the cache)
    dropped_frames: int  # frames the host could not decode
    seconds: float
    confusion: np.ndarray | None = None  # the last test evaluation's, with train --model
    accuracy_split: str | None = None  # "test", or "validation" when the image has no test
    kept_start: bool = False  # the guard's best was the start: the result is the flash model
    unchanged: str = ""  # with kept_start, why (as RunSummary.unchanged says it)
    accuracy_note: str = ""  # with accuracy_split "validation": which records (as simulate's)


def identity_record(identity: p.Identity) -> dict:
    return {"model_sha256": identity.model_sha256.hex(), "target": identity.target,
            "checkpoint_bytes": identity.checkpoint_bytes, **identity.training_options()}


class Trainer:
    """One `zocodegen train` invocation. ``on_step`` (tests, scripts) is called with each
    end-of-step telemetry record after it was logged."""

    def __init__(self, device: Device, image: Path, run_dir: Path, steps: int | None = None,
                 checkpoint_every: int | None = None, timeout: float = 60.0,
                 max_resets: int = 5, progress: bool | None = None,
                 on_step: Callable[[p.Telemetry], None] | None = None,
                 log: Callable[[str], None] = print, force: bool = False,
                 start: bytes | None = None, model: Path | None = None):
        self.device, self.image_path, self.run_dir = device, Path(image), Path(run_dir)
        self.steps, self.checkpoint_every, self.force = steps, checkpoint_every, force
        self.start = start  # a checkpoint a new run starts from (a fleet round's model)
        self.model = model  # with it, each test evaluation's confusion matrix (evaluation.py)
        self.confusion: np.ndarray | None = None
        self._test: TestConfusion | None = None
        self.timeout, self.max_resets, self.progress = timeout, max_resets, progress
        self.on_step = on_step or (lambda t: None)
        self.log = log
        self.blocks = ImageBlocks(self.image_path)
        self.ckpt_path = self.run_dir / "checkpoint.bin"
        self.best_path = self.run_dir / "best.bin"  # the guard's best slot
        # --record-scalars builds: every WP layer's query sums, for `zocodegen replay`;
        # written with each checkpoint (the steps it covers are final then)
        self.scalars_path = self.run_dir / "scalars.bin"
        self._scalar_pieces: list[p.Scalars] = []
        self._scalars: replay.Scalars | None = None  # what the file holds, read once
        self.metrics: MetricsLog | None = None
        self.bar: tqdm | None = None
        self.identity: p.Identity | None = None
        self._losses: list[float] = []
        self._trials: list[tuple[int, int]] = []  # --lr auto's (loss sum, steps), as they come
        self._start_confirmed = p.Event(p.EventKind.CONFIRM, p.Decision.NONE, 0, 0, 0, 0)
        #: the end's confirmation of this session: what it compared with the start, its step
        #: and records in words; None when none came (no guard, or a resumed finished run)
        self._confirmed: tuple[str, int, str] | None = None
        self._checked = 0  # validation records of the guard's checks
        self._accuracy: float | None = None
        self._split: str | None = None  # where _accuracy was measured
        self._chunk_end = -1
        self._pending: MetricsRow | None = None  # a chunk's last step waits for its accuracy
        self._image_sha = ""  # the image's SHA-256 when the run began (run.json's)
        self._image_stat: tuple[int, int, int] | None = None  # its inode, size, mtime then
        self._drawer: CurveDrawer | None = None  # draws the curves during the run

    # ---- the run --------------------------------------------------------------------
    def run(self) -> TrainSummary:
        """The run, resumed where RUN/ left it. Every failure the host foresees (a device
        that stays silent, sends garbage, exits or keeps failing) ends as one UserError that
        says where the run stands; the firmware the host started is always reaped."""
        started = time.monotonic()
        resets, retransmissions, dropped = 0, 0, 0
        session: DeviceSession | None = None
        try:
            load_curve_writers()
            session = self._connect()
            self._check(session.identity)
            total = self.steps or self._planned()
            every = self.checkpoint_every or max(1, total // 10)
            first_step = self._saved_step()
            self.metrics = MetricsLog(self.run_dir / "metrics.csv", resume_at=first_step)
            self.bar = progress_bar(self.progress, total=total, initial=first_step,
                                    desc="train", unit="step")
            while True:
                try:
                    self._train(session, total, every)
                    break
                except (DeviceReset, DeviceExited, LinkError) as exc:
                    retransmissions += session.link.retransmissions
                    dropped += session.link.dropped
                    resets += 1
                    if resets > self.max_resets:
                        raise LinkError(f"{exc} ({self.max_resets} restarts did not help)") \
                            from None
                    session = self._recover(session, exc)
            self.device.finish(session)
        except LinkError as exc:
            where = (f"; {self.run_dir} keeps step {self._saved_step()}: `zocodegen train` "
                     "again resumes it" if self.identity is not None else
                     " (is it a zocodegen firmware, on this port?)")
            raise UserError(f"{self.device.describe()}: {exc}{where}") from None
        finally:
            if self.bar is not None:
                self.bar.close()
            if self.metrics is not None:
                self.metrics.close()
            self.device.close()
            self.blocks.close()
            if self._drawer is not None:  # the drawing under way finishes first
                self._drawer.close()
        self._plot(background=False)
        return TrainSummary(first_step, self._saved_step(), self._record().get(
            "accuracy_before"), self._accuracy, resets,
            retransmissions + session.link.retransmissions, dropped + session.link.dropped,
            time.monotonic() - started, self.confusion, self._split, self._kept_start(),
            self._unchanged(), self._accuracy_note())

    def _accuracy_note(self) -> str:
        """Which records the accuracies count, without a test split (as simulate's)."""
        return (validation_note(self.blocks.layout.count("val"), self.blocks.layout.held_out)
                if self._split == "validation" else "")

    def _kept_start(self) -> bool:
        """The device's guard ended on its baseline (best step 0): the result is the model's
        own parameters."""
        return (self.ckpt_path.is_file()
                and checkpoint.load(self.ckpt_path).best_step == 0)

    def _unchanged(self) -> str:
        """Why the guard kept the start: the result did not confirm against it (the end's
        confirmation came), else no check beat it."""
        if not self._kept_start():
            return ""
        if self._confirmed is not None:
            _, step, where = self._confirmed
            return f"the result (step {step}) did not confirm against the start {where}"
        return "no validation check on the device beat the start"

    def _connect(self) -> DeviceSession:
        port = self.device.connect()
        link = HostLink(port, self.timeout, alive=self.device.alive)
        session = DeviceSession(link, self.blocks, telemetry=self._telemetry,
                                log=self._device_log, scalars=self._scalar_pieces.append,
                                event=self._device_event)
        session.hello()
        return session

    def _recover(self, session: DeviceSession, exc: Exception) -> DeviceSession:
        """After a reset: a new HELLO (same firmware), then on from the last checkpoint."""
        if isinstance(exc, DeviceReset):
            self._say(f"device reset; resuming from step {self._saved_step()}")
            identity = session.hello(exc.hello)
        elif self.device.restartable:
            self._say(f"{exc}; restarting it, resuming from step {self._saved_step()}")
            session = self._connect()
            identity = session.identity
        else:
            raise exc
        if identity_record(identity) != identity_record(self.identity):
            raise UserError("after the reset a different firmware answered; start a new run")
        self._check_image_unchanged(reopened=True)
        return session

    def _train(self, session: DeviceSession, total: int, every: int) -> None:
        step = self._restore(session)
        self.metrics.keep_through(step)
        self._pending = None  # a step after the checkpoint, which the device computes again
        self._losses = [r.loss for r in self.metrics.rows if not math.isnan(r.loss)]
        self.bar.n = step
        self.bar.refresh()
        record = self._record()
        if "accuracy_before" not in record:
            record["accuracy_before"] = self._evaluate(session, step)
            record["accuracy_split"] = self._split
            record["accuracy_note"] = self._accuracy_note()
            self._write_record(record)
        while step < total and not self._stopped():
            chunk = min(every - step % every, total - step)
            self._chunk_end = step + chunk
            step = self._command(session, "training", p.train(chunk)).value
            self._check_image_unchanged(reopened=False)
            self._save(session, step)
            self._evaluate(session, step)
            if step < total and not self._stopped():  # else run() draws them once, here
                self._plot(background=True)
        if "end" not in self._record():
            self._write_record({**self._record(), "end": end_record(step)})

    def _stopped(self) -> bool:
        """The device's guard ended the run (its STOP event, in run.json; its checkpoint, which
        a T then leaves where it is): no T follows."""
        return (self._record().get("end", {}).get("reason") == "patience"
                or (self.ckpt_path.is_file()
                    and checkpoint.load(self.ckpt_path).falling == checkpoint.STOPPED))

    def _restore(self, session: DeviceSession) -> int:
        """Device state = RUN/checkpoint.bin (or the flash parameters); returns the step."""
        self._command(session, f"opening {self.image_path}", p.Command.OPEN.value)
        if self.ckpt_path.is_file():  # the image's header says where the checkpoint area is
            self.blocks.set_checkpoint(checkpoint.read_bytes(self.ckpt_path))
            if self.identity.guard and self.best_path.is_file():
                self.blocks.set_best(self.identity.checkpoint_bytes,
                                     checkpoint.read_bytes(self.best_path))
            return self._command(session, "loading the checkpoint", p.Command.LOAD.value).value
        self._command(session, "resetting the parameters", p.Command.RESET.value)
        if self.identity.selects_block:
            self._say(f"selecting the block to train: a trial of each of "
                      f"{self.identity.blocks} blocks")
            block = self._command(session, "selecting the block",
                                  p.Command.SELECT.value).value
            self._say(f"training block {block}")
            self._write_record({**self._record(), "block": block})
        return 0

    def _save(self, session: DeviceSession, step: int) -> None:
        for attempt in range(SAVE_ATTEMPTS):
            size = self._command(session, "saving the checkpoint", p.Command.SAVE.value).value
            blob = self.blocks.checkpoint(size)
            try:
                ckpt = checkpoint.decode(blob, "the device's checkpoint")
            except DataError as exc:
                self._say(f"{exc}; asking again")
                continue
            if ckpt.model_sha256 != self.identity.model_sha256 or ckpt.step != step:
                raise LinkError(f"the device saved a checkpoint of step {ckpt.step} for "
                                f"model {ckpt.model_sha256.hex()[:12]}..., expected step {step}")
            best = self.blocks.best(self.identity.checkpoint_bytes, size)
            try:  # the guard's slot, so a reset resumes with the same best
                if self.identity.guard:
                    checkpoint.decode(best, "the device's best parameters")
            except DataError as exc:
                self._say(f"{exc}; asking again")
                continue
            if self.identity.guard:
                checkpoint.save_bytes(self.best_path, best)
            checkpoint.save_bytes(self.ckpt_path, blob)
            self._save_scalars(step)
            return
        raise LinkError(f"the device's checkpoint or best parameters did not verify "
                        f"{SAVE_ATTEMPTS} times")

    def _save_scalars(self, step: int) -> None:
        """RUN/scalars.bin with every step before ``step`` (a resumed run's earlier ones
        kept, steps the device repeated after a reset replaced), written atomically."""
        if not self._scalar_pieces:
            return
        if self._scalars is None:  # a resumed run's earlier steps
            self._scalars = (replay.read(self.scalars_path) if self.scalars_path.is_file()
                             else {})
        self._scalars.update(replay.assemble(self._scalar_pieces))
        self._scalar_pieces.clear()
        self._scalars = {k: v for k, v in self._scalars.items() if k[0] < step}
        replay.write(self.scalars_path, self._scalars, replay.ScalarOwner(
            self.identity.model_sha256, self.identity.seed, self.identity.steps,
            self.identity.queries, self.identity.lr))

    def _evaluate(self, session: DeviceSession, step: int) -> float | None:
        layout = self.blocks.layout
        split, name = ((p.Split.TEST, "test") if layout.count("test")
                       else (p.Split.VAL, "val") if layout.count("val") else (None, None))
        row, self._pending = self._pending, None
        if row is None or row.step != step:
            row = MetricsRow(step, float("nan"), 0.0)  # before training: accuracy only
        if split is not None:
            correct = self._command(session, f"measuring {name} accuracy",
                                    p.accuracy(split)).value
            self._accuracy = correct / layout.count(name)
            self._split = "test" if name == "test" else "validation"
            row = replace(row, accuracy=self._accuracy)
            if name == "test" and self.model is not None and self.ckpt_path.is_file():
                self._confusion(step, correct)
        if split is not None or not math.isnan(row.loss):
            self.metrics.add(row)
        self._postfix()
        return self._accuracy if split is not None else None

    def _confusion(self, step: int, correct: int) -> None:
        """The test split's confusion matrix at this evaluation (RUN/checkpoint.bin is the
        device's state at ``step``), printed with the class names and kept in
        RUN/confusion.csv."""
        if self._test is None:
            self._test = TestConfusion(self.model, self.image_path, self.identity.model_sha256)
        if checkpoint.load(self.ckpt_path).step != step:
            return  # the evaluation before training: the flash parameters, no checkpoint
        self.confusion = self._test.matrix(self.ckpt_path, correct)
        self._say(f"step {step}: test confusion (rows true, columns predicted)\n"
                  + format_confusion(self.confusion, self._test.names))
        write_confusion(self.run_dir / "confusion.csv", self.confusion, self._test.names,
                        f"step {step}; ")

    def _command(self, session: DeviceSession, what: str, command: bytes) -> p.Done:
        done = session.run(command).done
        if done.status in RECORD_PROBLEMS:
            # T and B read the train split, A the split it names (docs/link.md)
            split = (p.Split(command[1]).name.lower()
                     if command[:1] == p.Command.ACCURACY.value else "train")
            raise UserError(f"{what} failed on the device: {split} record {done.value} of "
                            f"{self.image_path} {RECORD_PROBLEMS[done.status]}")
        if done.status != 0:
            raise UserError(f"{what} failed on the device: error {done.status} "
                            f"({status.describe(done.status)})")
        return done

    # ---- RUN/ -----------------------------------------------------------------------
    def _check(self, identity: p.Identity) -> None:
        """Refuse what cannot continue RUN/ (other firmware, data or checkpoint), before
        anything in it changes; --force starts anew instead."""
        self.identity = identity
        check_image(identity, self.blocks.layout, self.image_path)
        # --steps is the user's bound; only what the firmware fixes at T refuses more: the
        # cosine schedule ends there, the guard's last check keeps its best there
        if self.steps is not None and self.steps > self._planned() and (
                self.identity.cosine or self.identity.guard):
            why = ("its learning-rate schedule ends there" if self.identity.cosine else
                   "the guard's last check keeps its best parameters there")
            raise UserError(f"--steps {self.steps} is beyond the {self._planned()} steps the "
                            f"firmware plans ({why}): rebuild with `zocodegen build ... "
                            f"--steps {self.steps}`")
        if self.run_dir.exists() and not self.run_dir.is_dir():
            raise UserError(f"{self.run_dir} exists and is not a directory; choose another "
                            f"-o RUN")
        if self.force:
            delete_run(self.run_dir, (self.scalars_path.name,))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        mine = identity_record(identity)
        self._image_stat = self._image_signature()
        image_sha = self._image_sha = file_sha256(self.image_path, "data image").hex()
        record = self._record() if self.ckpt_path.is_file() or self._has_record() else {}
        if self.start is not None:
            if self.ckpt_path.is_file():
                raise UserError(f"{self.run_dir} already holds a run; a run that starts from "
                                "a given checkpoint needs an empty one")
            record = {"firmware": mine, "image_sha256": image_sha}
            checkpoint.save_bytes(self.ckpt_path, self.start)
            if identity.guard:  # the guard's best starts as the starting point
                checkpoint.save_bytes(self.best_path, self.start)
        if self.ckpt_path.is_file():
            self._check_run(record, mine, image_sha)
        record.update({"image": str(self.image_path), "image_sha256": image_sha,
                       "firmware": mine, "device": self.device.describe()})
        self._write_record(record)

    def _image_signature(self) -> tuple[int, int, int]:
        try:
            stat = os.stat(self.image_path)
        except OSError as exc:
            raise UserError(f"cannot read {self.image_path}: {exc.strerror or exc}") from None
        return stat.st_ino, stat.st_size, stat.st_mtime_ns

    def _check_image_unchanged(self, reopened: bool) -> None:
        """`cp other.img IMG` mid-run rewrites the image the device reads: its SHA-256 is
        checked again when the device reopens it after a restart, and after every chunk whose
        image moved (inode, size or time), so a changed image ends the run before the steps
        trained on it are saved."""
        signature = self._image_signature()
        if signature == self._image_stat and not reopened:
            return
        sha = file_sha256(self.image_path, "data image").hex()
        if sha != self._image_sha:
            raise UserError(f"{self.image_path} changed during the run (sha256 "
                            f"{self._image_sha[:12]}... when it began, {sha[:12]}... now); "
                            f"{self.run_dir} keeps step {self._saved_step()}: put the image "
                            "back and run `zocodegen train` again, or train on the new one "
                            "in another -o RUN")
        self._image_stat = signature

    def _check_run(self, record: dict, mine: dict, image_sha: str) -> None:
        """RUN/ holds a checkpoint: it continues only with the firmware and image that made
        it; a missing or damaged best.bin is rebuilt from the checkpoint, said aloud."""
        again = "; use another -o RUN, or start anew with --force (deletes the run)"
        if "firmware" not in record:
            raise UserError(f"{self.run_dir / 'run.json'} does not say which firmware made "
                            f"{self.ckpt_path} (not a `zocodegen train` run){again}")
        if record["firmware"] != mine:  # an edited run.json may hold anything here
            earlier = record["firmware"] if isinstance(record["firmware"], dict) else {}
            diff = [k for k in mine if earlier.get(k) != mine[k]]
            raise UserError(f"{self.run_dir} holds a run of other firmware ({', '.join(diff)} "
                            f"differ){again}")
        if (recorded := record.get("image_sha256", image_sha)) != image_sha:
            raise UserError(f"{self.run_dir} was trained on another image than "
                            f"{self.image_path} (sha256 {str(recorded)[:12]}... "
                            f"against {image_sha[:12]}...){again}")
        try:
            ckpt = checkpoint.load(self.ckpt_path)
        except DataError as exc:
            raise UserError(f"{exc}{again}") from None
        if ckpt.model_sha256 != self.identity.model_sha256:
            raise UserError(f"{self.ckpt_path} belongs to another model{again}")
        size = len(checkpoint.read_bytes(self.ckpt_path))
        if (size > self.identity.checkpoint_bytes if self.identity.selects_block
                else size != self.identity.checkpoint_bytes):
            raise UserError(f"{self.ckpt_path} has other trainable layers than the "
                            f"firmware{again}")
        check_step(self.ckpt_path, ckpt.step, self._planned(), "the firmware plans")
        if self.identity.guard:
            self._check_best(ckpt.step)

    def _check_best(self, step: int) -> None:
        """The guard's best slot of a resumed run; lost, it restarts from the checkpoint
        (the guard then keeps the better of it and what follows), never looped on."""
        try:
            best = checkpoint.load(self.best_path)
        except DataError as exc:
            problem = str(exc)
        else:
            if best.model_sha256 == self.identity.model_sha256:
                return
            problem = f"{self.best_path} belongs to another model"
        self._say(f"{problem}; the guard's best parameters restart from "
                  f"{self.ckpt_path.name} (step {step})")
        write_atomic(self.best_path, checkpoint.read_bytes(self.ckpt_path), sync=True)

    def _planned(self) -> int:
        """T of the firmware's run: its --steps, or (0) an epoch of the image's training
        records as the device counts it (config.run_steps, zo_train_run_steps)."""
        return run_steps(self.identity.steps, self.identity.batch,
                         self.blocks.layout.count("train"))

    def _saved_step(self) -> int:
        return checkpoint.load(self.ckpt_path).step if self.ckpt_path.is_file() else 0

    def _has_record(self) -> bool:
        return (self.run_dir / "run.json").is_file()

    def _record(self) -> dict:
        """RUN/run.json (empty before the first write); a damaged one is one line."""
        return read_run_record(self.run_dir) if self._has_record() else {}

    def _write_record(self, record: dict) -> None:
        write_atomic(self.run_dir / "run.json", (json.dumps(record, indent=2) + "\n").encode())

    def _plot(self, background: bool) -> None:
        """curves.png and the TensorBoard log from the rows so far. During the run they are
        drawn in a child process (curve_drawer.py says why), whose failure (a full disk) is
        raised here: one line. While the child still draws the last rows, a background
        drawing is left to the next checkpoint (or the end's), so the host keeps answering."""
        if self._drawer is not None:
            if background and not self._drawer.idle():
                return
            self._drawer.wait()
        rows = list(self.metrics.rows) if self.metrics else []
        if not any(not math.isnan(r.loss) for r in rows):
            return
        eta = (f"auto: {self._record()['lr']:g}" if "lr" in self._record()
               else f"{self.identity.lr:g}")
        title = (f"{self.identity.target}: {self.identity.estimator}, "
                 f"Q={self.identity.queries}, eta={eta}")
        split = self._split or "test"
        if not background:
            write_curves(rows, self.run_dir, title, split)
            return
        if self._drawer is None:
            self._drawer = CurveDrawer()
        self._drawer.submit(rows, self.run_dir, title, split)

    # ---- live output ----------------------------------------------------------------
    def _telemetry(self, t: p.Telemetry) -> None:
        if t.layer >= 0:
            return
        if self._pending is not None and self._pending.step != t.step:
            self.metrics.add(self._pending)
        # held until the next step (or the chunk's accuracy): a guard line may amend it
        self._pending = MetricsRow(t.step, t.loss, t.lr)
        self._losses.append(t.loss)
        self.bar.update(t.step - self.bar.n)  # shown at most every mininterval
        self._postfix()
        self.on_step(t)

    def _postfix(self) -> None:
        post = {}
        if self._losses:
            recent = self._losses[-20:]
            post["loss"] = f"{sum(recent) / len(recent):.3f}"
        if self._accuracy is not None:
            post["acc"] = f"{100 * self._accuracy:.1f}%"
        self.bar.set_postfix(post, refresh=not in_lines(self.bar))  # lines: with the step

    def _device_log(self, text: str) -> None:
        self._say(f"device: {text}")

    def _device_event(self, e: p.Event) -> None:
        """The guard's checks and --lr auto's trials (docs/link.md "Events")."""
        if e.kind == p.EventKind.GUARD_CHECK:
            self._guard_check(e)
        elif e.kind == p.EventKind.CONFIRM and e.step == 0:
            self._start_confirmed = e
        elif e.kind == p.EventKind.CONFIRM:
            start, of = self._start_confirmed, max(1, e.of)
            # the last parameters (then the validation records count too): the last step's,
            # or the guard's stop's
            last = e.step in (self._planned(), self._record().get("end", {}).get("step"))
            what = "the last parameters" if last else "the best"
            held = self.blocks.layout.held_out > 0  # then on those alone (zo_guard.c confirm)
            validation = self._checked if last and not held else 0
            training = e.of - validation
            trained = 0 if held else trained_confirmation_records(
                self.blocks.layout.count("train"), training, e.step, self.identity.batch)
            net = e.correct - start.correct  # e.steps: the records where the two disagree
            why = unvalidated(trained, training, validation,
                              self.blocks.layout.count("test"))
            where = confirmation_where(training, trained, validation, held)
            self._confirmed = (what, e.step, where)
            self._say(f"guard: {where}, {what} "
                      f"(step {e.step}) gets {(e.steps + net) // 2} record(s) right that the "
                      f"start gets wrong and {(e.steps - net) // 2} the other way, loss "
                      f"{e.loss_q16 / 65536 / of:.4f} against "
                      f"{start.loss_q16 / 65536 / of:.4f}" + (f" ({why})" if why else ""))
        elif e.kind == p.EventKind.STOP:
            self._say(Stop(e.step, e.steps, e.step - e.steps, Score(e.correct, e.loss_q16)
                           ).line(e.of))
            self._write_record({**self._record(),
                                "end": end_record(e.step, e.steps, e.correct, e.of)})
        elif e.kind == p.EventKind.LR_TRIAL:
            self._trials.append((e.loss_q16, e.steps))
            self._say(f"lr trial {e.eta_ppm / 1e6:g}: {e.steps} steps, validation "
                      f"{e.correct}/{e.of} correct, loss "
                      f"{e.loss_q16 / 65536 / max(1, e.of):.4f}")
        else:
            eta = e.eta_ppm / 1e6
            self._say(f"lr auto: eta {eta:g}")
            tied = trials_tied([loss for loss, _ in self._trials],
                               self._trials[0][1] if self._trials else 0)
            if tied:
                self._say(tied)
            self._write_record({**self._record(), "lr": eta})

    def _guard_check(self, e: p.Event) -> None:
        """The check's validation accuracy and decision go into metrics.csv with the step; a
        rollback or the final restore is said aloud."""
        accuracy = e.correct / max(1, e.of)
        self._checked = e.of  # validation records per check: the end's confirmation adds them
        event = "" if e.decision == p.Decision.NONE else e.decision.name.lower()
        row = self._pending
        if row is not None and row.step == e.step:
            self._pending = MetricsRow(row.step, row.loss, row.lr, row.accuracy, accuracy,
                                       event)
        elif self.metrics.rows and self.metrics.rows[-1].step == e.step:
            # the baseline before the first step joins the accuracy measured before training
            self.metrics.amend(replace(self.metrics.rows[-1], val_accuracy=accuracy,
                                       event=event))
        else:
            self.metrics.add(MetricsRow(e.step, float("nan"), 0.0, None, accuracy, event))
        if e.decision == p.Decision.ROLLBACK:
            self._say(f"guard: step {e.step}: validation {100 * accuracy:.1f}% fell below "
                      f"the best; rolled back, eta halved {e.halvings}x")
        elif e.decision == p.Decision.RESTORE:
            self._say(f"guard: step {e.step}: the result is the best validated parameters")
        elif e.decision == p.Decision.START:
            what = "the best" if self._confirmed is None else self._confirmed[0]
            self._say(f"guard: step {e.step}: the result is the start ({what} did not "
                      "confirm)")

    def _say(self, text: str) -> None:
        if self.bar is not None and not in_lines(self.bar):  # lines and no bar: print
            self.bar.write(text)
        else:
            self.log(text)


#: DONE statuses about one record, whose index is then DONE's value: what to tell the user.
RECORD_PROBLEMS = {
    status.code("ZO_IMAGE_ERR_RECORD_CRC"): "does not match its CRC-32 (ZO_IMAGE_ERR_RECORD_CRC):"
                                            " the data is corrupted; pack the image again",
    status.code("ZO_IMAGE_ERR_LABEL"): "has a label outside the image's classes "
                                       "(ZO_IMAGE_ERR_LABEL)"}
