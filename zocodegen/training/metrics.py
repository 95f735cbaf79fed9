"""Training curves on the host: ``metrics.csv`` (one row per step), ``curves.png`` and
TensorBoard scalars in ``tensorboard/`` (``tensorboard --logdir RUN``). Shared by
``simulate`` and the device trainer, so both runs look alike and compare directly."""
from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from ..errors import DataError, UserError
from ..files import atomic_writer, displayable, open_append, open_input, write_atomic

COLUMNS = ("step", "loss", "lr", "accuracy", "val_accuracy", "event")


@dataclass(frozen=True)
class MetricsRow:
    step: int
    loss: float  # nats
    lr: float
    accuracy: float | None = None  # test split
    val_accuracy: float | None = None  # the training guard's check
    event: str = ""  # the guard's decision: best, rollback, restore, start


class MetricsLog:
    """Appends rows to ``metrics.csv`` as they arrive (flushed, so a crash loses nothing).

    ``resume_at``: the run's log as it stood at that step, its checkpoint's. The rows after
    it were logged before an interruption (Ctrl-C, a kill, a device reset) and the resumed run
    computes those steps again, so they are dropped and every step is logged once: the one
    rule of `simulate --resume` and `train`. A file that is not a metrics.csv is refused, not
    appended to."""

    def __init__(self, path: Path, resume_at: int | None = None):
        self.path = Path(path)
        self.rows: list[MetricsRow] = []
        if resume_at is not None:
            try:
                self.rows = [r for r in read_metrics(self.path) if r.step <= resume_at]
            except DataError as exc:
                raise UserError(f"{exc}; move it away (the run goes on without its earlier "
                                "rows) or start anew with --force") from None
        self._file: TextIO | None = None
        self._rewrite()

    def add(self, row: MetricsRow) -> None:
        self.rows.append(row)
        self._write(row)
        self._file.flush()

    def amend(self, row: MetricsRow) -> None:
        """Replace the last row (the same step, more measured: the guard's baseline joins the
        accuracy measured before training)."""
        self.rows[-1] = row
        self._rewrite()

    def keep_through(self, step: int) -> None:
        """Forget the rows after ``step``: a device restarted mid-run computes those steps
        again (the same values) and logs them anew."""
        if all(r.step <= step for r in self.rows):
            return
        self.rows = [r for r in self.rows if r.step <= step]
        self._rewrite()

    def _rewrite(self) -> None:
        """The file as ``rows`` say, replaced whole (a crash keeps the old one), then
        appended to."""
        if self._file is not None:
            self._file.close()
        text = io.StringIO(newline="")
        self._writer = csv.writer(text)
        self._writer.writerow(COLUMNS)
        for row in self.rows:
            self._write(row)
        write_atomic(self.path, text.getvalue().encode())
        self._file = open_append(self.path, "a", newline="")
        self._writer = csv.writer(self._file)

    def _write(self, row: MetricsRow) -> None:
        self._writer.writerow([row.step, f"{row.loss:.6f}", f"{row.lr:.9g}",
                               "" if row.accuracy is None else f"{row.accuracy:.6f}",
                               "" if row.val_accuracy is None else f"{row.val_accuracy:.6f}",
                               row.event])

    def close(self) -> None:
        self._file.close()


def write_metrics(path: Path, rows: Sequence[MetricsRow]) -> None:
    """metrics.csv holding ``rows``, written whole (a crash keeps the old file)."""
    log = MetricsLog(path)
    log.rows = list(rows)
    log._rewrite()
    log.close()


def read_metrics(path: Path) -> list[MetricsRow]:
    """The rows of a run's metrics.csv (none without the file); a file that is not one is a
    DataError naming the line."""
    if not Path(path).is_file():
        return []
    with io.TextIOWrapper(open_input(path, "metrics"), encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        try:
            header = tuple(next(reader, COLUMNS))
            if len(header) < 4 or header != COLUMNS[:len(header)]:  # older runs: 4 columns
                raise ValueError(f"the header is not {','.join(COLUMNS)}")
            rows = []
            for fields in reader:
                if len(fields) != len(header):
                    raise ValueError(f"{len(fields)} fields, the header has {len(header)}")
                r = dict(zip(header, fields))
                rows.append(MetricsRow(int(r["step"]), float(r["loss"]), float(r["lr"]),
                                       float(r["accuracy"]) if r["accuracy"] else None,
                                       float(r["val_accuracy"]) if r.get("val_accuracy")
                                       else None, r.get("event", "")))
        except (ValueError, UnicodeDecodeError, csv.Error) as exc:
            raise DataError(f"{path} is not a run's metrics.csv (line {reader.line_num}: "
                            f"{exc})") from None
    return rows


def moving_average(values: Sequence[float], window: int) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if len(v) == 0:
        return v
    window = max(1, min(window, len(v)))
    kernel = np.ones(window) / window
    return np.convolve(v, kernel, mode="valid")


def write_curves(rows: Sequence[MetricsRow], run_dir: Path, title: str,
                 split: str = "test") -> None:
    """curves.png and the TensorBoard log of a run, from its rows as they stand (``split``:
    the split the ``accuracy`` column measured)."""
    plot_curves(rows, Path(run_dir) / "curves.png", title, split)
    write_tensorboard(rows, Path(run_dir) / TENSORBOARD_DIR, split)


def load_curve_writers() -> None:
    """Import what write_curves draws with (about a second): `zocodegen train` does it
    before the device waits on it, not in the middle of a run, where a host that stops
    answering for 100 ms makes the device retransmit (docs/link.md "Pacing under QEMU")."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401
    import tensorboardX  # noqa: F401


#: The run's TensorBoard log, rewritten whole with curves.png: a resumed run's rows replace
#: the steps it computes again, as they do in metrics.csv.
TENSORBOARD_DIR = "tensorboard"


def write_tensorboard(rows: Sequence[MetricsRow], directory: Path, split: str = "test"
                      ) -> None:
    """Scalars per step: loss, eta, the accuracy column (under its split's name), the guard's
    validation checks and its decisions (1 at a new best, a rollback, the
    final restore), through tensorboardX's writer."""
    from tensorboardX import SummaryWriter

    # the guard's checks are accuracy/validation; the column on every validation record not
    column = "accuracy/test" if split == "test" else "accuracy/validation split (all records)"
    directory = Path(directory)
    for old in directory.glob("events.out.tfevents.*"):
        old.unlink()
    with SummaryWriter(str(directory)) as writer:
        for row in rows:
            if not np.isnan(row.loss):
                writer.add_scalar("train/loss", row.loss, row.step)
                writer.add_scalar("train/eta", row.lr, row.step)
            if row.accuracy is not None:
                writer.add_scalar(column, row.accuracy, row.step)
            if row.val_accuracy is not None:
                writer.add_scalar("accuracy/validation", row.val_accuracy, row.step)
            if row.event:
                writer.add_scalar(f"guard/{row.event}", 1.0, row.step)


def confusion_matrix(labels: np.ndarray, predicted: np.ndarray, classes: int) -> np.ndarray:
    """counts[true, predicted]."""
    counts = np.zeros((classes, classes), np.int64)
    np.add.at(counts, (np.asarray(labels, np.int64), np.asarray(predicted, np.int64)), 1)
    return counts


def class_labels(names: Sequence[str], classes: int) -> list[str]:
    """One label per model output: the packed class names, then "output k" for the outputs
    no class was packed for (a folder of fewer classes than the model has outputs), so a
    matrix's header is as wide as its rows."""
    if not names:
        return [str(k) for k in range(classes)]
    return [str(n) for n in names][:classes] + [f"output {k}"
                                                for k in range(len(names), classes)]


def write_confusion(path: Path, counts: np.ndarray, names: Sequence[str],
                    note: str = "") -> None:
    """confusion.csv: the matrix, its header naming every column."""
    labels = class_labels(names, len(counts))
    with atomic_writer(Path(path)) as f:
        np.savetxt(f, counts, fmt="%d", delimiter=",",
                   header=f"{note}rows: true class, columns: predicted class; classes: "
                   + ", ".join(labels))


def format_confusion(counts: np.ndarray, names: Sequence[str] = ()) -> str:
    """The matrix as text, rows = true class, columns = predicted, with class names."""
    names = class_labels(names, len(counts))
    width = max(4, *(len(n) for n in names), len(str(int(counts.max(initial=0)))))
    head = " " * width + " | " + " ".join(n[:width].rjust(width) for n in names)
    lines = ["true \\ predicted", head, "-" * len(head)]
    for name, row in zip(names, counts):
        lines.append(name[:width].rjust(width) + " | "
                     + " ".join(str(int(v)).rjust(width) for v in row))
    return "\n".join(lines)


@dataclass(frozen=True)
class DeviceHours:
    """Where a run's steps fall in device time (`zocodegen device-time`): the device hours
    at which each evaluated step was done, and the accuracies whose first crossing the
    figure marks (label, accuracy, the hours it was first reached or None)."""

    at_step: dict[int, float]
    marks: tuple[tuple[str, float, float | None], ...] = ()


def plot_curves(rows: Sequence[MetricsRow], path: Path, title: str = "", split: str = "test",
                hours: DeviceHours | None = None) -> None:
    """Loss per step (raw and smoothed), the accuracy column (named by its ``split``) and the
    guard's validation checks where measured, the guard's rollbacks as red marks; with
    ``hours``, a second panel: the accuracy against device hours, each mark's accuracy a
    dotted line and its first crossing a dot (the time-to-accuracy figure, issue 63)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = rows  # accuracies: every row, the rows before the first step included
    rows = [r for r in rows if not np.isnan(r.loss)]
    steps = [r.step for r in rows]
    if hours is None:
        fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    else:
        fig, (ax, hours_ax) = plt.subplots(2, 1, figsize=(8, 8), dpi=100)
    ax.plot(steps, [r.loss for r in rows], color="0.75", linewidth=0.6, label="loss (step)")
    window = max(1, len(rows) // 20)
    smooth = moving_average([r.loss for r in rows], window)
    if len(smooth):
        ax.plot(steps[window - 1:], smooth, color="C0", label=f"loss ({window}-step mean)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    evaluated = [r for r in measured if r.accuracy is not None]
    checked = [r for r in measured if r.val_accuracy is not None]
    if evaluated or checked:
        acc_ax = ax.twinx()
        if evaluated:
            acc_ax.plot([r.step for r in evaluated], [100 * r.accuracy for r in evaluated],
                        "o-", color="C1", label=f"{split} accuracy")
        if checked:
            acc_ax.plot([r.step for r in checked], [100 * r.val_accuracy for r in checked],
                        ".-", color="C2", label="validation accuracy (guard)")
        falls = [r for r in checked if r.event == "rollback"]
        if falls:
            acc_ax.plot([r.step for r in falls], [100 * r.val_accuracy for r in falls], "x",
                        color="red", markersize=9, label="rollback (eta halved)")
        acc_ax.set_ylabel("accuracy (%)")
        acc_ax.legend(loc="upper right")
    ax.legend(loc="upper left")
    ax.set_title(displayable(title) or "zeroth-order training")  # a model name need not be UTF-8
    if hours is not None:
        _plot_hours(hours_ax, evaluated, split, hours)
    fig.tight_layout()
    with atomic_writer(Path(path)) as f:
        fig.savefig(f, format=Path(path).suffix.lstrip(".") or "png")
    plt.close(fig)


def _plot_hours(ax, evaluated: Sequence[MetricsRow], split: str, hours: DeviceHours) -> None:
    """Accuracy against device hours, with the marks' levels and first crossings."""
    timed = [r for r in evaluated if r.step in hours.at_step]
    ax.plot([hours.at_step[r.step] for r in timed], [100 * r.accuracy for r in timed], "o-",
            color="C1", label=f"{split} accuracy")
    for k, (label, level, reached) in enumerate(hours.marks):
        ax.axhline(100 * level, color=f"C{3 + k}", linestyle=":", linewidth=1,
                   label=label + ("" if reached is not None else " (not reached)"))
        if reached is not None:
            ax.plot([reached], [100 * level], "o", color=f"C{3 + k}", markersize=7)
    ax.set_xlabel("device hours (from power-on: trials, checks and the link included)")
    ax.set_ylabel(f"{split} accuracy (%)")
    ax.legend(loc="lower right", fontsize="small")
