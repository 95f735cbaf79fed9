"""The digits grid's "ours" runs alone (not a test): every model, cell and seed of
benchmarks/experiment.py's grid with our method at its defaults, in their own cache, to
compare a change of the defaults (here the training guard's fall rule) with the grid's
table in docs/experiment.md without running the other methods.

    .venv/bin/python benchmarks/guard_digits.py [--workers 1] [--runs build/guard-digits]
"""
from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import experiment as ex  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--runs", type=Path, default=ex.ROOT / "build" / "guard-digits")
    args = parser.parse_args()
    grid = ex.FULL
    root = args.runs / grid.tag
    ex.write_data(grid, root)
    # seeds 1-3, as the grid's table (its seed-noise runs 4-6 are another question)
    runs = [r for r in ex.grid_runs(grid) if r.method == "ours" and r.seed in grid.seeds]
    cli = ex.default_cli()

    def one(run: ex.Run) -> ex.Result | None:
        return ex.read_result(run.directory(root)) or ex.execute(cli, run, grid, root)[0]

    with ThreadPoolExecutor(args.workers) as pool:
        results = dict(zip(runs, pool.map(one, runs)))
    for model in grid.models:
        cells = sorted({(r.family, r.severity) for r in runs if r.model == model})
        print(f"{model}: cell, before -> after (mean over seeds)")
        gains = []
        for family, severity in cells:
            done = [results[r] for r in runs if r.model == model and r.family == family
                    and r.severity == severity and results[r] is not None]
            before = sum(r.before for r in done) / len(done)
            after = sum(r.after for r in done) / len(done)
            gains.append(after - before)
            print(f"  {family}/{severity}: {100 * before:.1f} -> {100 * after:.1f}")
        print(f"  mean gain {100 * sum(gains) / len(gains):+.1f} points over {len(cells)} cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
