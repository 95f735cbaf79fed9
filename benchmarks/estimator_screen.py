"""Is a candidate estimator a better default than ours on the small models? (issue 48)

The scale grid (scale_experiment.py) judges an estimator where the paper's claim lives, on the
MCUNet-size model; a default also has to hold on the models and shifts it was not designed
for. This runs the digits grid's cells (both models, four corruption families, two
severities; experiment_grid.FULL's budget: one epoch at Q = 20, defaults otherwise) for the
methods named, with the same cached runs as benchmarks/experiment.py (build/experiment), and
prints per method: the mean test accuracy, the share of the FP32 ceiling's gain it captures
(mean over cells of the seed means), and the runs that end more than 0.5 points below no
adaptation.

    .venv/bin/python benchmarks/estimator_screen.py --methods ours,adaptive --seeds 1
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for _p in (str(HERE), str(HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from experiment import execute, read_result, write_data  # noqa: E402
from experiment_grid import CEILINGS, FULL, METHODS, QUICK, RUNS, Grid, Result, Run  # noqa: E402

#: A run "ends below the start" when it loses more than this (issue 48, deliverable 3).
BELOW_START = 0.005


def screen(grid: Grid, methods: list[str], root: Path, cli: list[str]) -> dict[Run, Result]:
    """Every (model, cell, seed, method) run, cached ones read back, one at a time."""
    write_data(grid, root)
    results = {}
    for model in grid.models:
        for family, severity in grid.cells:
            for seed in grid.seeds:
                for method in methods:
                    run = Run(model, family, severity, method, seed)
                    result = read_result(run.directory(root))
                    if result is None:
                        result, error = execute(cli, run, grid, root)
                    if result is None:
                        raise SystemExit(f"{run}: {error}")
                    results[run] = result
                    print(f"{model} {run.cell} {method} seed {seed}: "
                          f"{100 * result.before:.1f} -> {100 * result.after:.1f}", flush=True)
    return results


def summary(grid: Grid, methods: list[str], results: dict[Run, Result]) -> list[str]:
    """One line per method: mean after, capture of the ceiling's gain, runs below start."""
    ceilings = json.loads(CEILINGS.read_text())
    lines = ["| method | mean after | share of the FP32 gain | runs > 0.5 below start |",
             "|---|---:|---:|---:|"]
    for method in methods:
        after, gain, ceiling_gain, below = [], 0.0, 0.0, 0
        for model in grid.models:
            for family, severity in grid.cells:
                runs = [results[Run(model, family, severity, method, s)] for s in grid.seeds]
                start = runs[0].before
                mean = statistics.mean(r.after for r in runs)
                after.append(mean)
                top = ceilings[model][f"{family}/{severity}"]
                gain += mean - start
                ceiling_gain += max(0.0, top - start)
                below += sum(r.after < r.before - BELOW_START for r in runs)
        lines.append(f"| {method} | {100 * statistics.mean(after):.1f} | "
                     f"{100 * gain / ceiling_gain:.0f} % | {below} of {len(after) * len(grid.seeds)} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", default="ours,adaptive",
                        help=f"comma-separated, of: {', '.join(METHODS)}")
    parser.add_argument("--seeds", default="1", help="comma-separated training seeds")
    parser.add_argument("--quick", action="store_true",
                        help="the grid's --quick budget (one cell, 30 steps, Q = 4): a smoke test")
    parser.add_argument("--runs", type=Path, default=RUNS,
                        help=f"cache of run folders (default {RUNS})")
    args = parser.parse_args()
    methods = args.methods.split(",")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        parser.error(f"unknown method {unknown[0]}")
    base = QUICK if args.quick else FULL
    grid = Grid(base.models, base.cells, tuple(int(s) for s in args.seeds.split(",")),
                base.ablation_family, base.budget, base.queries)
    cli = [sys.executable, "-m", "zocodegen"]
    root = args.runs / grid.tag
    results = screen(grid, methods, root, cli)
    print("\n".join(summary(grid, methods, results)))


if __name__ == "__main__":
    main()
