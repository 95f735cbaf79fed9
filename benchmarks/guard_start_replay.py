"""Which keep-the-start rule? Replayed on unguarded runs (issue 48, deliverable 3; not a test).

A run with the guard measuring but never rolling back (benchmarks/guard_margin.py --never)
follows a trajectory no end-of-run rule changes: only the check the run ends on depends on
the rule. Each such run traces every guard check (step, correct, loss sum on the validation
split) and, with ``--eval-every`` equal to the guard's interval, measures test accuracy at
every check, so every candidate rule's end can be read off the same run:

  margin  the start is replaced only by more than fall_margin more correct records
          (2 standard deviations of a difference of two counts; the rule of 2026-11-28)
  none    the best check by (correct, then lower loss), the start included (before it)
  loss    the start is replaced only by a check with more correct AND a lower loss sum
  half    ... by more than half the fall margin more correct AND a lower loss sum
  last    the start or the run's last check, whichever is better by ``loss`` (no maximum)

    .venv/bin/python benchmarks/guard_start_replay.py run --cells shot_noise --seeds 1
    .venv/bin/python benchmarks/guard_start_replay.py report

Runs go to build/scale/trace/CELL-s5/METHOD-seedS (the scale grid's data, budget and model).
"""
from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for _p in (str(HERE), str(HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import experiment  # noqa: E402
import experiment_grid as digits  # noqa: E402
import scale_experiment as grid  # noqa: E402
from guard_start import RULES as START_RULES, start_rule  # noqa: E402
from zocodegen.training import guard  # noqa: E402

ROOT = grid.RUNS / "trace"
DIGITS_ROOT = digits.RUNS / "trace"
DIGITS_DATA = digits.RUNS / "trace-data"
GUARD_EVERY = 8  # the scale grid's check interval (from its forward budget)
RULES = (*START_RULES, "last")


def run(cell: str, seed: int, estimator: str | None) -> Path:
    """An unguarded traced run of a scale cell (the grid's data and budget), test accuracy at
    every check."""
    method = estimator or "ours"
    out = ROOT / f"{cell}-s{grid.SEVERITY}" / f"{method}-seed{seed}"
    data = grid.data_path(grid.RUNS, cell)
    return traced(out, [str(grid.MODEL), "--data", str(data), "--epochs", str(grid.EPOCHS),
                        "--queries", str(grid.QUERIES), "--seed", str(seed),
                        "--guard-every", str(GUARD_EVERY), "--eval-every", str(GUARD_EVERY),
                        *(["--estimator", estimator] if estimator else [])])


def run_digits(model: str, family: str, severity: int, seed: int) -> Path:
    """The same on a digits grid cell (experiment_grid.FULL's budget), test accuracy every 27
    steps: the guard checks every 54 (digits_resnet) or 81 (digits_cnn) steps there."""
    out = DIGITS_ROOT / model / f"{family}-{severity}" / f"ours-seed{seed}"
    return traced(out, [str(digits.FIXTURES / f"{model}.tflite"), "--data",
                        str(experiment.data_path(DIGITS_DATA, model, family, severity)),
                        *digits.FULL.budget, "--queries", str(digits.FULL.queries),
                        "--seed", str(seed), "--eval-every", "27"])


def traced(out: Path, simulate: list[str]) -> Path:
    if (out / "run.json").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(HERE / "guard_margin.py"), "--never", "--", *simulate,
           "-o", str(out), "--force"]
    with (out / "log.txt").open("w") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True)
    return out


def pick(rule: str, checks: list[dict]) -> dict:
    """The check a run ends on under ``rule`` (checks in step order, the first the start)."""
    start, records = checks[0], checks[0]["records"]
    score = {id(c): guard.Score(c["correct"], c["loss"]) for c in checks}
    if rule == "last":
        last = checks[-1]
        wins = last["correct"] > start["correct"] and last["loss"] < start["loss"]
        return last if wins else start
    new_best = start_rule(rule)
    best = start
    for c in checks[1:]:
        state = guard.GuardState(lr=0.0, best_step=best["step"], best=score[id(best)])
        best = c if new_best(score[id(c)], state, records) else best
    return best


def checks_of(out: Path) -> list[dict]:
    """A run's traced checks, the start's first. Traces written before guard_margin.py traced
    the start lack it: it is read from the log's "before training C/V correct, loss L" (L is
    the mean in nats to 4 decimals, so the start's Q16 loss sum is exact to ~0.01 %)."""
    checks = [json.loads(x) for x in (out / "guard_trace.jsonl").read_text().splitlines()]
    if checks[0]["step"] != 0:
        found = re.search(r"before training (\d+)/(\d+) correct, loss ([\d.]+)",
                          (out / "log.txt").read_text())
        correct, records, loss = int(found[1]), int(found[2]), float(found[3])
        checks.insert(0, dict(step=0, correct=correct, records=records,
                              loss=round(loss * 65536 * records), event=""))
    return checks


def report(runs: list[Path], root: Path) -> list[str]:
    lines = ["| run | start (test %) | " + " | ".join(RULES) + " |",
             "|---|---:|" + "---:|" * len(RULES)]
    sums = {r: 0.0 for r in RULES}
    for out in runs:
        checks = checks_of(out)
        with (out / "metrics.csv").open(newline="") as fh:
            test = {int(r["step"]): float(r["accuracy"]) for r in csv.DictReader(fh)
                    if r.get("accuracy")}
        start = test[checks[0]["step"]]
        ends = {r: test[pick(r, checks)["step"]] for r in RULES}
        for r in RULES:
            sums[r] += ends[r] - start
        cells = " | ".join(f"{100 * ends[r]:.1f} ({100 * (ends[r] - start):+.1f}, "
                           f"step {pick(r, checks)['step']})" for r in RULES)
        name = str(out.relative_to(root))
        lines.append(f"| {name} | {100 * start:.1f} | {cells} |")
    if runs:
        lines.append("| mean change | | " + " | ".join(f"{100 * sums[r] / len(runs):+.2f}"
                                                      for r in RULES) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("run", "report"))
    parser.add_argument("--grid", choices=("scale", "digits"), default="scale")
    parser.add_argument("--cells", default="shot_noise,motion_blur,elastic_transform",
                        help="scale: corruptions (digits: every cell of the grid)")
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--estimator", help="scale: an estimator other than the default")
    args = parser.parse_args()
    seeds = list(map(int, args.seeds.split(",")))
    if args.what == "run" and args.grid == "scale":
        for cell in args.cells.split(","):
            for seed in seeds:
                print(f"{cell} seed {seed}: {run(cell, seed, args.estimator)}", flush=True)
    if args.what == "run" and args.grid == "digits":
        experiment.write_data(digits.FULL, DIGITS_DATA)
        for model in digits.FULL.models:
            for family, severity in digits.FULL.cells:
                for seed in seeds:
                    print(f"{model} {family}/{severity} seed {seed}: "
                          f"{run_digits(model, family, severity, seed)}", flush=True)
    root = ROOT if args.grid == "scale" else DIGITS_ROOT
    runs = sorted(p.parent for p in root.glob("**/run.json")
                  if (p.parent / "guard_trace.jsonl").is_file())
    print("\n".join(report(runs, root)))


if __name__ == "__main__":
    main()
