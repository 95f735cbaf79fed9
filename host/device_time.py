"""How long a run takes on a board (`zocodegen device-time RUN --target BOARD`): what the
board would spend on a finished `zocodegen simulate` run, from instructions measured under
``qemu-system-arm -icount`` at the board's clock, plus the host link's time for every record
the device reads (docs/your-model.md "Device time").

A run on the device is more than its training steps. It spends, in order:

* ``--lr auto``: each candidate's trial steps, then a validation check (R records) each;
* sparse ``--block auto``: a held-out baseline of H records, then per block S trial steps
  (one epoch of the trial subset at N = 1) and H held-out records;
* the guard's baseline check, then T training steps with a check of R records every K steps.

A training step costs its instructions (measured at Q = 1 and 2 and extrapolated: a + b Q,
since only the queries repeat) and the link time of its N samples; a checked or scored record
costs one inference and its link time. Every count comes from what the run recorded
(RUN/run.json; ``run_shape`` reads the same counts from a run's printed log, as the
benchmarks keep it), so nothing is assumed about defaults. The simulator's integers are the
firmware's (tested), so what it did is what the device would do.
"""
from __future__ import annotations

import dataclasses
import json
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zocodegen.codegen.fit import device_graph
from zocodegen.codegen.project import BuildOptions
from zocodegen.errors import UserError
from zocodegen.files import MissingInput, read_text
from zocodegen.formats import link
from zocodegen.formats.image import pack_image
from zocodegen.frontends import load_model
from zocodegen.ir import Graph
from zocodegen.summary import duration
from zocodegen.training.folders import InputSpec
from zocodegen.projects import cached_build
from zocodegen.qemu.runner import require_qemu
from zocodegen.target import TARGET_NAMES, check_baud, target_data
from zocodegen.training.config import TrainConfig
from zocodegen.training.metrics import DeviceHours, MetricsRow, plot_curves, read_metrics
from zocodegen.training.plan import training_plans
from zocodegen.training.runner import curves_title

from .devices import Firmware
from .engines import run_samples
from .devices import LaunchedDevice
from .trainer import Trainer

@dataclass(frozen=True)
class Costs:
    """Seconds on one board: a training step's compute, one inference, one record's link."""

    step: float
    forward: float
    link: float
    block_steps: tuple[float, ...] = ()  # sparse: a step's compute training each block


@dataclass(frozen=True)
class RunShape:
    """What a run did, from its log (counts only)."""

    steps: int
    batch: int
    lr_trials: int = 0
    lr_trial_steps: int = 0
    guard_every: int = 0  # 0: no guard
    val_records: int = 0
    blocks: int = 0
    block_samples: int = 0  # S
    block_held_out: int = 0  # H
    #: the end's confirmation: the records the result and the start are each measured on (the
    #: image's held-out records, else the last training records and the validation records
    #: when the result is the last parameters; a start it keeps is scored on the validation
    #: records once more when they were not among them: V forwards, about 0.01 % of a run,
    #: not counted)
    confirm_records: int = 0


def run_shape(log_text: str, steps: int, batch: int) -> RunShape:
    trials = [(int(n), int(r)) for n, r in
              re.findall(r"lr trial [^:]+: (\d+) steps, validation \d+/(\d+)", log_text)]
    guard = re.search(r"a check every (\d+) steps on (\d+) validation records", log_text)
    # "block K: S trial records; held-out ..." (a log before H: "block K: held-out", H = S)
    blocks = re.findall(r"block \d+: (?:(\d+) trial records; )?held-out \d+ -> \d+ of (\d+) "
                        r"correct", log_text)
    confirm = re.search(r"on the (?:last (\d+) training records, which no check saw[^,]*(, and "
                        r"the (\d+) validation records)?|image's (\d+) held-out records)",
                        log_text)
    stop = re.search(r"guard: step (\d+): no new best in \d+ steps", log_text)
    steps = int(stop.group(1)) if stop else steps  # the guard's stop ended the run there
    val = int(guard.group(2)) if guard else (trials[0][1] if trials else 0)
    return RunShape(steps, batch, len(trials), trials[0][0] if trials else 0,
                    int(guard.group(1)) if guard else 0, val, len(blocks),
                    int(blocks[0][0] or blocks[0][1]) if blocks else 0,
                    int(blocks[0][1]) if blocks else 0,
                    sum(int(g or 0) for g in confirm.groups()[::2] + confirm.groups()[3:])
                    if confirm else 0)


def recorded_shape(record: dict) -> RunShape:
    """What a `zocodegen simulate` run did, from its run.json."""
    config, selection = record["config"], record.get("selection") or {}
    end = record.get("end") or {}  # the step the run ended at (the guard's stop: earlier)
    return RunShape(end.get("step", config["steps"]), config["batch"], record.get("lr_trials", 0),
                    record.get("lr_trial_steps", 0), record.get("guard_every") or 0,
                    record.get("validation_records", 0), len(selection.get("correct", ())),
                    selection.get("samples", 0),
                    selection.get("held_out", selection.get("samples", 0)),
                    record.get("confirmation_records", 0))


def setup_seconds(shape: RunShape, costs: Costs) -> tuple[float, float]:
    """(compute, link) seconds before the first training step."""
    records = shape.lr_trials * shape.val_records + (shape.val_records if shape.guard_every
                                                     else 0)
    compute = shape.lr_trials * shape.lr_trial_steps * costs.step
    link_s = shape.lr_trials * shape.lr_trial_steps * shape.batch * costs.link
    if shape.blocks:
        trial = -(-shape.block_samples // shape.batch)
        per_block = costs.block_steps or (costs.step,) * shape.blocks
        compute += trial * sum(per_block[:shape.blocks])
        link_s += shape.blocks * trial * shape.batch * costs.link
        records += (shape.blocks + 1) * shape.block_held_out
    return compute + records * costs.forward, link_s + records * costs.link


def seconds_at(step: int, shape: RunShape, costs: Costs) -> tuple[float, float]:
    """(compute, link) seconds from power-on until training step ``step`` is done."""
    compute, link_s = setup_seconds(shape, costs)
    checks = step // shape.guard_every if shape.guard_every else 0
    records = checks * shape.val_records
    if step >= shape.steps:  # the end's confirmation measures best and start once
        records += 2 * shape.confirm_records
    return (compute + step * costs.step + records * costs.forward,
            link_s + step * shape.batch * costs.link + records * costs.link)


def timed_evaluations(rows: list[MetricsRow], shape: RunShape, costs: Costs
                      ) -> tuple[tuple[int, float, float], ...]:
    """(step, accuracy, device hours from power-on) of each row that measured accuracy."""
    return tuple((r.step, r.accuracy, sum(seconds_at(r.step, shape, costs)) / 3600)
                 for r in rows if r.accuracy is not None)


def record_link_seconds(input_bytes: int, baud: int = link.DEFAULT_BAUD,
                        max_sectors: int = link.MAX_SECTORS, turnaround: float = 0.0,
                        trimmed: bool = True) -> float:
    """One record of ``input_bytes`` (plus label and CRC) over the link: its sectors in READs
    of up to ``max_sectors``, each a request and a response frame (COBS-framed: 6 B header,
    4 B CRC, 1 B per 254, the zero), 10 bits a byte (8N1) at ``baud``, plus ``turnaround``
    seconds per READ (the answer's latency). ``trimmed``: the last READ's answer ends with
    the record, without the sector's zero padding (HELLO's trimmed-reads flag, docs/link.md);
    False for firmware before it."""
    record = input_bytes + 8  # input bytes, label and CRC
    sectors = -(-record // 512)
    reads = -(-sectors // max_sectors)
    request = 6 + 6 + 4 + 2
    per_read = 512 * max_sectors
    response = [6 + 4 + min(per_read, (record if trimmed else 512 * sectors) - per_read * k) + 4
                for k in range(reads)]
    wire = sum(request + r + r // 254 + 2 for r in response)
    return wire * 10 / baud + reads * turnaround


def link_seconds_per_record(graph: Graph, baud: int = link.DEFAULT_BAUD,
                            max_sectors: int = link.MAX_SECTORS) -> float:
    """A record of ``graph``'s input over the host link (record_link_seconds)."""
    return record_link_seconds(int(np.prod(graph.tensor(graph.inputs[0]).shape[1:])), baud,
                               max_sectors)


def clock_hz(board: str) -> int:
    return int(target_data(board)["clock_hz"])


def forward_seconds(model: Path, board: str, images: np.ndarray) -> float:
    """One inference of ``model`` on ``board``: the median instructions over ``images``
    (the input the device takes) under QEMU -icount, at the board's clock."""
    graph = device_graph(load_model(model), BuildOptions("qemu", board))
    elf = cached_build(model, "qemu", emulate=board)
    shape = graph.tensor(graph.inputs[0]).shape
    inputs = [{graph.inputs[0]: image.reshape(shape)} for image in images]
    counts = [r.cycles for r in run_samples(graph, "qemu", elf, inputs)]
    return float(np.median(counts)) / clock_hz(board)


def step_instructions(model: Path, board: str, config: TrainConfig, workdir: Path) -> int:
    """One training step's instructions under QEMU -icount with ``board``'s budget: the
    firmware of ``config`` (its steps set to 1) on two random records."""
    config = dataclasses.replace(config, steps=1)
    # the records the firmware reads: the input as the device takes it (a float input
    # quantized on the device is packed as float32, as `pack` packs it)
    graph = device_graph(load_model(model), BuildOptions("qemu", board, config))
    spec = InputSpec.of(graph)
    codes = np.random.default_rng(0).integers(-128, 128, size=(2,) + spec.shape)
    if spec.dtype == "float32":
        scale, zero = ((spec.quant.scalar_scale, spec.quant.scalar_zero_point)
                       if spec.quant is not None else (1 / 128, 0))
        data = ((codes - zero) * scale).astype(np.float32)
    else:
        data = codes.astype(np.int8)
    image = workdir / f"{model.stem}.img"
    classes = graph.tensor(graph.outputs[0]).size
    pack_image(image, data, np.arange(2) % classes, num_classes=classes,
               checkpoint_bytes=1 << 20)
    elf = cached_build(model, "qemu", emulate=board, train=config)
    records: list = []
    run = Path(tempfile.mkdtemp(dir=workdir, prefix="run"))  # new: nothing to resume
    Trainer(LaunchedDevice(Firmware("qemu", elf, icount=True)), image, run,
            checkpoint_every=1, timeout=600, progress=False, on_step=records.append,
            log=lambda s: None).run()
    return records[-1].cycles


def step_seconds(model: Path, board: str, config: TrainConfig) -> float:
    """One training step's compute on ``board`` at ``config.queries``, at the board's clock:
    measured at Q = 1; else at Q = 2 and 3 and extrapolated, a + b Q. (Q = 1 is below that
    line: 21 % on the digits CNN, 1 % on the 64x64 MCUNet-class model; from Q = 2 on the
    instructions grow by the same count per query, tests/test_device_time.py.)"""
    with tempfile.TemporaryDirectory() as tmp:
        if config.queries == 1:
            return step_instructions(model, board, config, Path(tmp)) / clock_hz(board)
        two, three = (step_instructions(model, board, dataclasses.replace(config, queries=q),
                                        Path(tmp)) for q in (2, 3))
    return (two + (three - two) * (config.queries - 2)) / clock_hz(board)


#: The shares of a gain whose first crossing `device-time` reports (issue 63): half, most
#: and nearly all of it.
GAIN_SHARES = (0.5, 0.8, 0.9)


@dataclass(frozen=True)
class Crossing:
    share: float  # of the gain
    accuracy: float  # start + share x gain
    hours: float | None  # device hours when an evaluation first reached it; None: never


def first_reached(evaluations: tuple[tuple[int, float, float], ...], accuracy: float
                  ) -> float | None:
    """The device hours of the first evaluation at or above ``accuracy`` (metrics.csv keeps
    six decimals, so a level a record count meets exactly is met within 1e-9)."""
    return next((h for _, a, h in evaluations if a >= accuracy - 1e-9), None)


@dataclass(frozen=True)
class DeviceTime:
    """A finished run as ``board`` would spend it."""

    board: str
    baud: int
    costs: Costs
    shape: RunShape
    compute_seconds: float
    link_seconds: float
    #: (step, accuracy, device hours until then) at each evaluation of the run: the first
    #: is before training, the last the result (after the guard's restore)
    evaluations: tuple[tuple[int, float, float], ...]
    #: the split those accuracies are on: "test", or "validation" on an image without one
    #: (run.json's; None from a run recorded before it said)
    accuracy_split: str | None = "test"
    ceiling: float | None = None  # the FP32 ceiling or a target accuracy, when given
    shares: tuple[float, ...] = GAIN_SHARES
    #: with accuracy_split "validation": which of its records those are (run.json's; the
    #: guard selects on them all unless pack held some out)
    accuracy_note: str = ""

    def crossings(self, goal: float) -> tuple[Crossing, ...]:
        """When the accuracy first reached each share of the way from the start to ``goal``."""
        before = self.evaluations[0][1]
        return tuple(Crossing(share, before + share * (goal - before),
                              first_reached(self.evaluations, before + share * (goal - before))
                              if goal > before else None)
                     for share in self.shares)


def _measurable(config: TrainConfig) -> TrainConfig:
    """The run's training options for measuring one step: without the lr trials and the
    guard (their steps and checks are costed from run.json) and, for --block auto, block 0
    (each block's step is measured for the trials)."""
    block = (config.block or 0) if config.mode == "sparse" else None
    return dataclasses.replace(config, lr_auto=False, guard=False, block=block)


def recorded_config(record: dict) -> TrainConfig:
    """The run's options as run.json records them (fields of an older zocodegen dropped)."""
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    return TrainConfig(**{k: tuple(v) if isinstance(v, list) else v
                          for k, v in record["config"].items() if k in fields})


def recorded_target(run: Path) -> str:
    """The board `simulate --target` trained ``run`` for (its run.json), for a
    `device-time` without --target."""
    try:
        target = json.loads(read_text(run / "run.json", "run record")).get("target")
    except (MissingInput, ValueError, AttributeError):
        target = None
    if target not in TARGET_NAMES:
        raise UserError(f"device-time {run}: give --target BOARD ({', '.join(TARGET_NAMES)}): "
                        "the run names no board (simulate it with --target to record one)")
    return target


def estimate(run: Path, board: str, baud: int = link.DEFAULT_BAUD,
             say: Callable[[str], None] = lambda text: None, ceiling: float | None = None,
             shares: tuple[float, ...] = GAIN_SHARES) -> DeviceTime:
    """Measures ``run``'s costs on ``board`` (several QEMU runs) and adds up what the run
    recorded it did; ``say`` hears when the measuring starts. ``ceiling``: an accuracy
    (0..1) whose gain the crossings are also reported for (the FP32 ceiling, a target)."""
    if board not in TARGET_NAMES:
        raise UserError(f"--target {board}: device time is measured for the boards "
                        f"{', '.join(TARGET_NAMES)}")
    check_baud(board, baud)  # a link's time is bits / baud, at a rate the board can make
    facts = run / "run.json"
    if not facts.is_file():
        raise UserError(f"{facts} not found: give the folder `zocodegen simulate -o RUN` "
                        "wrote")
    require_qemu()  # make names the missing compiler at the first build
    try:
        record = json.loads(read_text(facts, "run record"))
        model = Path(record["model"])
        config = recorded_config(record)
        shape = recorded_shape(record)
        counts = dataclasses.astuple(shape)
        if not all(isinstance(n, int) and n >= 0 for n in counts):
            raise ValueError(f"counts that are not whole numbers: {counts}")
        chosen = record["block"] if shape.blocks else 0
        if not (isinstance(chosen, int) and 0 <= chosen < max(shape.blocks, 1)):
            raise ValueError(f"block {chosen!r} of {shape.blocks}")
    except (ValueError, KeyError, TypeError, AttributeError, UserError) as exc:
        raise UserError(f"{facts} is not a run's record ({exc}): give the folder "
                        "`zocodegen simulate -o RUN` wrote") from None
    if not model.is_file():
        raise UserError(f"{model} (the model {facts} names) not found")
    if "validation_records" not in record:
        raise UserError(f"{facts} is from an older zocodegen: simulate the run again")
    graph = load_model(model)
    measured = _measurable(config)
    training_plans(graph, measured)  # the recorded options against the model, before QEMU
    say(f"measuring a training step and an inference on the {board} under QEMU -icount ...")
    blocks: tuple[float, ...] = ()
    if shape.blocks:  # --block auto: every block's trial, then the chosen block's steps
        blocks = tuple(step_seconds(model, board, dataclasses.replace(measured, block=b))
                       for b in range(shape.blocks))
        step = blocks[chosen]
    else:
        step = step_seconds(model, board, measured)
    x = graph.tensor(graph.inputs[0])
    images = np.random.default_rng(1).integers(-128, 128, size=(3,) + tuple(x.shape[1:]))
    costs = Costs(step, forward_seconds(model, board, images.astype(np.int8)),
                  link_seconds_per_record(graph, baud), blocks)
    compute, link_s = seconds_at(shape.steps, shape, costs)
    evaluations = timed_evaluations(read_metrics(run / "metrics.csv"), shape, costs)
    return DeviceTime(board, baud, costs, shape, compute, link_s, evaluations,
                      record.get("accuracy_split"), ceiling, shares,
                      record.get("accuracy_note", ""))


def describe(run: Path, t: DeviceTime) -> list[str]:
    """The lines `zocodegen device-time` prints."""
    s = t.shape
    work = [f"{s.steps} training steps of {s.batch} record(s)"]
    if s.lr_trials:
        work.append(f"{s.lr_trials} lr trials of {s.lr_trial_steps} steps")
    if s.blocks:
        work.append(f"{s.blocks} block trials of {s.block_samples} records")
    if s.guard_every:
        work.append(f"a guard check of {s.val_records} records every {s.guard_every} steps")
    lines = [f"{run} on the {t.board} at {clock_hz(t.board) / 1e6:g} MHz, the link at "
             f"{t.baud} baud: {', '.join(work)}",
             f"  a training step {duration(t.costs.step)}, an inference "
             f"{1000 * t.costs.forward:.1f} ms, a record over the link "
             f"{1000 * t.costs.link:.1f} ms (instructions under QEMU -icount at the clock)",
             f"  in all: {duration(t.compute_seconds + t.link_seconds)} of device time "
             f"({duration(t.compute_seconds)} computing, {duration(t.link_seconds)} on the "
             "link)"]
    return lines + time_to_accuracy(t)


def _accuracy_name(t: DeviceTime) -> str:
    return (f"{t.accuracy_split} accuracy" if t.accuracy_split else
            "accuracy (on the test split, or validation without one)")


def time_to_accuracy(t: DeviceTime) -> list[str]:
    """The run's accuracy against device hours: start and result, and the hours at which it
    first reached each share of its own gain (and of the way to the ceiling, when given)."""
    if len(t.evaluations) < 2:
        return [f"  no {_accuracy_name(t)} measured during the run (the data has neither a "
                "test nor a validation split)"] if not t.evaluations else []
    before, after = t.evaluations[0][1], t.evaluations[-1][1]
    guard = (", the split the guard selects on" if t.accuracy_split == "validation"
             and not t.accuracy_note else "")
    lines = [f"  {_accuracy_name(t)} {100 * before:.1f}% -> {100 * after:.1f}% "
             f"({100 * (after - before):+.1f} points){guard} in "
             f"{duration(3600 * t.evaluations[-1][2])}"]
    if t.accuracy_split == "validation" and t.accuracy_note:
        lines.append(f"  {t.accuracy_note}")
    goals = [("the run's gain", after)]
    if t.ceiling is not None:
        goals.append((f"the gain to {100 * t.ceiling:.1f}% (--ceiling)", t.ceiling))
    for what, goal in goals:
        if goal <= before:
            lines.append(f"  {what}: none (the {t.accuracy_split or 'accuracy'} split did not rise "
                         "above the start)")
            continue
        crossings = t.crossings(goal)
        shares = " / ".join(f"{100 * c.share:g}" for c in crossings)
        levels = " / ".join(f"{100 * c.accuracy:.1f}" for c in crossings)
        hours = " / ".join("never" if c.hours is None else duration(3600 * c.hours)
                           for c in crossings)
        lines.append(f"  device time to {shares} % of {what} ({levels} % "
                     f"{t.accuracy_split or 'accuracy'}): {hours}")
    return lines


def draw_hours(run: Path, t: DeviceTime) -> None:
    """The run's curves.png again, with the accuracy against device hours below the steps
    (its marks: each share of the run's gain, or of the ceiling's when given)."""
    record = json.loads((run / "run.json").read_text())
    rows = read_metrics(run / "metrics.csv")
    goal = t.ceiling if t.ceiling is not None else t.evaluations[-1][1]
    whose = "the ceiling's" if t.ceiling is not None else "the run's"
    marks = tuple((f"{100 * c.share:g} % of {whose} gain", c.accuracy, c.hours)
                  for c in t.crossings(goal)) if goal > t.evaluations[0][1] else ()
    title = f"{curves_title(record['model'], recorded_config(record), record['lr'])}, {t.board}"
    plot_curves(rows, run / "curves.png", title, t.accuracy_split or "test",
                DeviceHours({step: h for step, _, h in t.evaluations}, marks))
