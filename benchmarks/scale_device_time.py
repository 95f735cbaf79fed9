"""Device time of a benchmarks/scale_experiment.py run: what the board would spend on the same
run, step by step, from instructions measured under ``qemu-system-arm -icount`` at the board's
clock plus the host link's transfer time of every record the device reads.

A run on the device is more than its training steps. It spends, in order:

* ``--lr auto``: each candidate's trial steps, then a validation check (R records) each;
* sparse ``--block auto``: a held-out baseline of S records, then per block S trial steps
  (one epoch of the trial subset at N = 1) and S held-out records;
* the guard's baseline check, then T training steps with a check of R records every K steps.

A training step costs its instructions (measured at Q = 1 and 2 and extrapolated: a + b Q)
and the link time of its N samples; a checked or scored record costs one inference and its
link time. Every count comes from the run's own log, so nothing is assumed about defaults.
"""
from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zocodegen.formats import link

CLOCKS = {"stm32f746": 216e6, "stm32h7b3": 280e6}
BAUD = link.DEFAULT_BAUD


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
    block_samples: int = 0


def run_shape(log_text: str, steps: int, batch: int) -> RunShape:
    trials = [(int(n), int(r)) for n, r in
              re.findall(r"lr trial [^:]+: (\d+) steps, validation \d+/(\d+)", log_text)]
    guard = re.search(r"a check every (\d+) steps on (\d+) validation records", log_text)
    blocks = re.findall(r"block \d+: held-out \d+ -> \d+ of (\d+) correct", log_text)
    val = int(guard.group(2)) if guard else (trials[0][1] if trials else 0)
    return RunShape(steps, batch, len(trials), trials[0][0] if trials else 0,
                    int(guard.group(1)) if guard else 0, val, len(blocks),
                    int(blocks[0]) if blocks else 0)


def setup_seconds(shape: RunShape, costs: Costs) -> tuple[float, float]:
    """(compute, link) seconds before the first training step."""
    records = shape.lr_trials * shape.val_records + (shape.val_records if shape.guard_every
                                                     else 0)
    compute = shape.lr_trials * shape.lr_trial_steps * costs.step
    link = shape.lr_trials * shape.lr_trial_steps * shape.batch * costs.link
    if shape.blocks:
        trial = -(-shape.block_samples // shape.batch)
        per_block = costs.block_steps or (costs.step,) * shape.blocks
        compute += trial * sum(per_block[:shape.blocks])
        link += shape.blocks * trial * shape.batch * costs.link
        records += (shape.blocks + 1) * shape.block_samples
    return compute + records * costs.forward, link + records * costs.link


def seconds_at(step: int, shape: RunShape, costs: Costs) -> tuple[float, float]:
    """(compute, link) seconds from power-on until training step ``step`` is done."""
    compute, link = setup_seconds(shape, costs)
    checks = step // shape.guard_every if shape.guard_every else 0
    records = checks * shape.val_records
    return (compute + step * costs.step + records * costs.forward,
            link + step * shape.batch * costs.link + records * costs.link)


def link_seconds_per_record(model: Path, baud: int = BAUD,
                            max_sectors: int = link.MAX_SECTORS) -> float:
    """A record over the host link: its sectors in READs of up to ``max_sectors``, each a
    request and a response frame (COBS-framed: 6 B header, 4 B CRC, 1 B per 254, the zero),
    10 bits a byte (8N1) at ``baud``."""
    from zocodegen.frontends import load_model
    graph = load_model(model)
    t = graph.tensor(graph.inputs[0])
    return record_link_seconds(int(np.prod(t.shape[1:])), baud, max_sectors)


def record_link_seconds(input_bytes: int, baud: int = BAUD,
                        max_sectors: int = link.MAX_SECTORS, turnaround: float = 0.0) -> float:
    """One record of ``input_bytes`` (plus label and CRC) over the link: the frames of its
    READs, 10 bits a byte, plus ``turnaround`` seconds per READ (the answer's latency)."""
    record = input_bytes + 8  # input bytes, label and CRC
    sectors = -(-record // 512)
    reads = -(-sectors // max_sectors)
    request = 6 + 6 + 4 + 2
    response = [6 + 4 + 512 * min(max_sectors, sectors - max_sectors * k) + 4
                for k in range(reads)]
    wire = sum(request + r + r // 254 + 2 for r in response)
    return wire * 10 / baud + reads * turnaround


def forward_seconds(model: Path, board: str, images: np.ndarray) -> float:
    """One inference of ``model`` on ``board``: the median instructions over ``images``
    (int8, the model's input) under QEMU -icount, at the board's clock."""
    from zocodegen.projects import cached_build
    from zocodegen.host.engines import run_samples
    from zocodegen.frontends import load_model
    graph = load_model(model)
    elf = cached_build(model, "qemu", emulate=board)
    shape = graph.tensor(graph.inputs[0]).shape
    inputs = [{graph.inputs[0]: image.reshape(shape)} for image in images]
    counts = [r.cycles for r in run_samples(graph, "qemu", elf, inputs)]
    return float(np.median(counts)) / CLOCKS[board]


def step_seconds(model: Path, board: str, mode: str, queries: int,
                 options: dict | None = None) -> float:
    """One training step's compute on ``board``: instructions at Q = 1 and 2 under QEMU
    -icount (benchmarks/training.py), a + b Q at ``queries``, at the board's clock."""
    import training as bench  # benchmarks/training.py
    with tempfile.TemporaryDirectory() as tmp:
        counts = [bench.step_instructions(model, board, mode, q, Path(tmp), options)
                  for q in (1, 2)]
    a, b = 2 * counts[0] - counts[1], counts[1] - counts[0]
    return (a + b * queries) / CLOCKS[board]
