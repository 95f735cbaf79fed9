"""Simulator speed (not a test): CPU seconds per training step of `zocodegen simulate`, full
and sparse mode, and the speed-up over a baseline. Two settings (--setting):

* ``mcunet`` (default): the 64x64 MCUNet-class model (tests/fixtures/mcunet_in1.tflite) at
  Q = 20 with the estimator `simulate` picks without --target (adaptive WP/NP);
* ``scale``: the scale model (tests/fixtures/scale_model.tflite, 64x64) at Q = 50 with
  ``--target stm32h7b3``, i.e. the product's defaults for that board (np-channel with
  --scales, full training), issue 63's figure.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/simulator_speed.py
    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/simulator_speed.py --baseline d0d172d
    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/simulator_speed.py --baseline DIR
    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/simulator_speed.py --setting scale \
        --baseline cd586af

Per step = (CPU seconds of an 8-step run - those of a 2-step run) / 6, CPU = user + sys of
the `simulate` process, so start-up, model loading, the last evaluation and the plot cancel.
CPU time, not wall time: the machines are shared; each run is repeated (--repeat) and the
fastest kept. BLAS runs single-threaded in the child processes. Data: 64 random int8 images
with labels 0..9 (seeded) and 16 test images; --no-guard --lr 0.01. Sparse mode trains block
0 (--block 0, the block whose partial forwards are longest): --block auto would add
one-epoch trials of every block, which cancel out but take many minutes at the old speed.

--baseline measures other code the same way: a commit (a `git worktree` of it,
benchmarks/revisions.py) or a directory holding a source tree (e.g. `git archive` of one).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import revisions  # noqa: E402

SHORT, LONG = 2, 8


@dataclass(frozen=True)
class Setting:
    """What is measured: the model, Q and the options every run gets."""

    model: Path
    queries: int
    options: tuple[str, ...]
    title: str


SETTINGS = {
    "mcunet": Setting(REPO / "tests" / "fixtures" / "mcunet_in1.tflite", 20, (),
                      "mcunet_in1 (64x64), default estimator"),
    "scale": Setting(REPO / "tests" / "fixtures" / "scale_model.tflite", 50,
                     ("--target", "stm32h7b3"),
                     "scale_model (64x64), --target stm32h7b3 defaults (np-channel, --scales)"),
}
MODES = {"full": [], "sparse": ["--train", "sparse", "--block", "0"]}
SINGLE_THREAD = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                        "MKL_NUM_THREADS")}


def write_data(path: Path) -> None:
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.integers(-128, 128, (64, 64, 64, 3)).astype(np.int8),
             y=rng.integers(0, 10, 64),
             x_test=rng.integers(-128, 128, (16, 64, 64, 3)).astype(np.int8),
             y_test=rng.integers(0, 10, 16))


def cpu_seconds(pythonpath: Path | None, argv: list[str], cwd: Path) -> float:
    """user + sys seconds of one `python -m zocodegen ARGV` (its own code: ``pythonpath``;
    ``cwd`` is not the repository, whose zocodegen `-m` would find first)."""
    env = dict(os.environ, **SINGLE_THREAD)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "zocodegen", *argv], env=env, cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def per_step(pythonpath: Path | None, setting: Setting, mode: str, queries: int,
             repeat: int) -> float:
    """CPU seconds per step: the difference of the fastest 8-step and 2-step runs, / 6."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data.npz"
        write_data(data)
        best = {}
        for steps in (SHORT, LONG):
            argv = ["simulate", str(setting.model), "--data", str(data), "--steps", str(steps),
                    "--queries", str(queries), "--no-guard", "--lr", "0.01",
                    "-o", str(Path(tmp) / "run"), "--force", *setting.options, *MODES[mode]]
            best[steps] = min(cpu_seconds(pythonpath, argv, Path(tmp)) for _ in range(repeat))
    return (best[LONG] - best[SHORT]) / (LONG - SHORT)


@contextlib.contextmanager
def baseline_code(where: str) -> Iterator[tuple[str, Path]]:
    """(label, PYTHONPATH) of a commit's or a source directory's code."""
    if Path(where).is_dir():
        with revisions.source_tree(Path(where)) as tree:
            yield where, tree.pythonpath
    else:
        with revisions.checkout(where) as tree:
            yield tree.label, tree.pythonpath


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", metavar="REV|DIR", help="also measure this code")
    parser.add_argument("--setting", choices=SETTINGS, default="mcunet")
    parser.add_argument("--queries", type=int, metavar="Q", help="default: the setting's")
    parser.add_argument("--repeat", type=int, default=3, metavar="N",
                        help="runs per step count, the fastest kept (default 3)")
    args = parser.parse_args()
    setting = SETTINGS[args.setting]
    queries = args.queries or setting.queries
    now = {mode: per_step(None, setting, mode, queries, args.repeat) for mode in MODES}
    header = f"| mode (Q = {queries}) | {revisions.describe_working_tree()} |"
    rule = "|---|---:|"
    rows = {mode: f"| {mode} | {now[mode]:.3f} s |" for mode in MODES}
    if args.baseline:
        with baseline_code(args.baseline) as (label, pythonpath):
            before = {mode: per_step(pythonpath, setting, mode, queries, args.repeat)
                      for mode in MODES}
        header += f" {label} | speed-up |"
        rule += "---:|---:|"
        rows = {mode: f"{rows[mode]} {before[mode]:.3f} s | {before[mode] / now[mode]:.1f}x |"
                for mode in MODES}
    print(f"CPU seconds per training step, {setting.title}, N = 1\n")
    print("\n".join([header, rule, *rows.values()]))


if __name__ == "__main__":
    main()
