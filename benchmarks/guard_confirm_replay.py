"""The guard's end-of-run confirmation (guard.confirmed), replayed on existing guarded runs
(issue 48, deliverable 3; docs/scale.md section 14). Not a test.

At the end of a guarded run the best parameters replace the start only if, on the last M
training records (M = guard_samples, at most the training split: guard.confirmation_records),
the best has no fewer correct predictions AND a lower Q16 loss sum than the start; otherwise
the run ends on the start. The rule acts only at the end, so each run's checks and trajectory are unchanged and
the replay is exact: rebuild graph, plan and data as `zocodegen simulate` does, score the
start (the model's parameters) and best.bin on those records, and read the end's test
accuracy off run.json (accuracy_after if confirmed, else accuracy_before). For comparison,
the alternative rule ``best.better_than(start)`` on the same records.

``--fit`` adds why records must be outside the training too: for a one-epoch run, best minus
start on the training records the best had trained on (the first best_step x batch), on
those it had not, on the validation split (where it was chosen) and on the test split, with
one standard deviation of the paired test difference (how far a best with no real effect
lands from its start by the test set's own noise).

    nice -n 5 .venv/bin/python benchmarks/guard_confirm_replay.py [--fit] [--runs GLOB ...]

The runs are those of benchmarks/scale_experiment.py and experiment_grid.py (build/scale/runs,
build/experiment). Writes the tables to build/guard_confirm_replay.md as well as stdout.
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from zocodegen.files import file_sha256  # noqa: E402
from zocodegen.frontends import load_model  # noqa: E402
from zocodegen.training import checkpoint, simulator  # noqa: E402
from zocodegen.training.config import TrainConfig  # noqa: E402
from zocodegen.training.data import load_dataset  # noqa: E402
from zocodegen.training.guard import (Score, confirmation_records, confirmed,  # noqa: E402
                                      guard_schedule)
from zocodegen.training.plan import loss_head, training_plans  # noqa: E402
from zocodegen.training.runner import _plan_of, _validation  # noqa: E402

RUNS = (str(ROOT / "build" / "scale" / "runs" / "*" / "*"),
        str(ROOT / "build" / "experiment" / "**" / "seed*"))
OUT = ROOT / "build" / "guard_confirm_replay.md"
RULES = ("none", "confirmed", "better_than")  # the run's end: always best / new / alternative
DROP = -0.005  # "ends below start": more than half a point lower


@dataclasses.dataclass(frozen=True)
class Replay:
    grid: str
    cell: str
    method: str
    seed: int
    before: float  # test accuracy of the start
    after: float  # test accuracy of the best (the run's end without the rule)
    best_step: int
    m: int
    best: Score
    start: Score
    note: str

    def end(self, rule: str) -> float:
        keep = {"none": True, "confirmed": confirmed(self.best, self.start),
                "better_than": self.best.better_than(self.start)}[rule]
        return self.after if keep else self.before


def config_of(record: dict) -> TrainConfig:
    """run.json's config (the resolved one `simulate` ran) as a TrainConfig."""
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    return TrainConfig(**{k: tuple(v) if isinstance(v, list) else v
                          for k, v in record["config"].items() if k in names})


def naming(run: Path, config: TrainConfig) -> tuple[str, str, str]:
    """(grid, cell, method) from the run's path (scale: CELL/METHOD-seedS) and its estimator."""
    method = "ours" if config.estimator == "adaptive" else config.estimator
    if "scale" in run.parts:
        return "scale", run.parent.name, run.name.rsplit("-seed", 1)[0]
    return "digits", f"{run.parents[2].name}/{run.parents[1].name}", method


@dataclasses.dataclass(frozen=True)
class Rebuilt:
    """A run as `simulate` made it: graph, plan, data, the start and best.bin's parameters."""

    record: dict
    config: TrainConfig
    graph: object
    plan: object
    data: object
    start: dict
    best: dict
    best_step: int


def rebuild(run: Path) -> Rebuilt:
    """The run's graph, plan and data, checked: best.bin must score on the guard's validation
    records exactly what the run recorded."""
    record = json.loads((run / "run.json").read_text())
    model, data_path = Path(record["model"]), Path(record["data"])
    sha = file_sha256(model)
    if sha.hex() != record["model_sha256"] or file_sha256(data_path).hex() != record["data_sha256"]:
        raise SystemExit(f"{run}: model or data differs from the run's (sha256)")
    graph = load_model(model)
    data = load_dataset(data_path, graph, graph.tensor(loss_head(graph)[0]).shape[-1])
    config = config_of(record)
    ckpt = checkpoint.load(run / "best.bin")
    plan = _plan_of(training_plans(graph, config), ckpt)
    best = simulator.from_checkpoint(graph, plan, ckpt, sha)
    x_val, y_val, _ = _validation(data, plan)
    on_val = simulator.validation_score(graph, plan, best, x_val, y_val)
    if on_val != Score(ckpt.best_correct, ckpt.best_loss):
        raise SystemExit(f"{run}: best.bin scores {on_val} on validation, the run recorded "
                         f"{(ckpt.best_correct, ckpt.best_loss)}: the rebuild is not exact")
    return Rebuilt(record, config, graph, plan, data, simulator.initial_params(graph, plan),
                   best, ckpt.best_step)


def replay(run: Path, r: Rebuilt) -> Replay:
    """The confirmation of one run."""
    held = confirmation_records(len(r.data.x), guard_schedule(r.plan))
    x, y = r.data.x[held], r.data.y[held]
    scores = [simulator.validation_score(r.graph, r.plan, p, x, y) for p in (r.best, r.start)]
    before, after = r.record["accuracy_before"], r.record["accuracy_after"]
    note = ""
    if (run / "result.json").is_file():
        result = json.loads((run / "result.json").read_text())
        for key, value in (("before", before), ("after", after), ("accuracy_after", after)):
            if key in result and abs(result[key] - value) > 1e-5:
                raise SystemExit(f"{run}: result.json {key} {result[key]} != run.json {value}")
    else:
        note = "no result.json"
    return Replay(*naming(run, r.config), r.config.seed, before, after, r.best_step, len(y),
                  *scores, note)


def fit_row(run: Path, r: Rebuilt) -> str:
    """Best minus start (records correct in points, mean loss) on the training records the
    best trained on, those it did not, validation and test: where the gain was measured."""
    seen = min(len(r.data.x), r.best_step * r.config.batch)
    x_val, y_val, _ = _validation(r.data, r.plan)
    parts = {"trained": (r.data.x[:seen], r.data.y[:seen]),
             "not trained": (r.data.x[seen:], r.data.y[seen:]), "validation": (x_val, y_val),
             "test": (r.data.x_test, r.data.y_test)}
    cells = []
    for x, y in parts.values():
        if not len(y):
            cells.append("–")
            continue
        b, s = (simulator.validation_score(r.graph, r.plan, p, x, y) for p in (r.best, r.start))
        cells.append(f"{100 * (b.correct - s.correct) / len(y):+.1f} ({len(y)}), "
                     f"{(b.loss - s.loss) / 65536 / len(y):+.3f}")
    # one standard deviation of the paired test difference: sqrt(records the two disagree on)
    right = [simulator.predict(r.graph, p, r.data.x_test) == r.data.y_test
             for p in (r.best, r.start)]
    spread = 100 * float(np.sqrt((right[0] != right[1]).sum())) / len(r.data.y_test)
    grid, cell, method = naming(run, r.config)
    return f"| {grid} | {cell} | {method} | {r.config.seed} | {r.best_step} | " + \
        " | ".join(cells) + f" | {spread:.1f} |"


def table(rows: list[Replay]) -> list[str]:
    lines = ["| grid | cell | method | seed | start % | best % | best_step | M | best (c, loss) "
             "| start (c, loss) | confirmed | end % | end − start | note |",
             "|---|---|---|---:|---:|---:|---:|---:|---|---|---|---:|---:|---|"]
    for r in rows:
        end = r.end("confirmed")
        lines.append(
            f"| {r.grid} | {r.cell} | {r.method} | {r.seed} | {100 * r.before:.1f} | "
            f"{100 * r.after:.1f} | {r.best_step} | {r.m} | ({r.best.correct}, {r.best.loss}) | "
            f"({r.start.correct}, {r.start.loss}) | "
            f"{'yes' if confirmed(r.best, r.start) else 'no'} | {100 * end:.1f} | "
            f"{100 * (end - r.before):+.1f} | {r.note} |")
    return lines


def summary(rows: list[Replay]) -> list[str]:
    """Per grid and method (and per grid): gains and drops without the rule, with it, and
    with the alternative rule better_than."""
    lines = ["| grid | method | runs | best = start | confirmed | better_than | mean gain "
             "none / confirmed / better_than | worst none / confirmed / better_than "
             "| below −0.5 none / confirmed / better_than |",
             "|---|---|---:|---:|---:|---:|---|---|---|"]
    groups: dict[tuple[str, str], list[Replay]] = {}
    for r in rows:
        groups.setdefault((r.grid, r.method), []).append(r)
        groups.setdefault((r.grid, "all"), []).append(r)
    for (grid, method), group in sorted(groups.items()):
        gains = {rule: [r.end(rule) - r.before for r in group] for rule in RULES}
        mean = " / ".join(f"{100 * sum(g) / len(g):+.2f}" for g in gains.values())
        worst = " / ".join(f"{100 * min(g):+.1f}" for g in gains.values())
        drops = " / ".join(str(sum(x < DROP for x in g)) for g in gains.values())
        lines.append(
            f"| {grid} | {method} | {len(group)} | {sum(r.best_step == 0 for r in group)} | "
            f"{sum(confirmed(r.best, r.start) for r in group)} | "
            f"{sum(r.best.better_than(r.start) for r in group)} | {mean} | {worst} | {drops} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", default=list(RUNS),
                        help="globs of run directories (those with run.json and best.bin)")
    parser.add_argument("--fit", action="store_true",
                        help="also best minus start on trained / untrained records, validation "
                             "and test (one-epoch runs whose best is not the start)")
    args = parser.parse_args()
    runs = sorted({Path(p) for pattern in args.runs for p in glob.glob(pattern, recursive=True)
                   if (Path(p) / "run.json").is_file() and (Path(p) / "best.bin").is_file()})
    began, rows, fits = time.monotonic(), [], []
    for run in runs:
        if "accuracy_after" not in json.loads((run / "run.json").read_text()):
            print(f"{run}: not finished, left out", file=sys.stderr)
            continue
        rebuilt = rebuild(run)
        rows.append(replay(run, rebuilt))
        if args.fit and rebuilt.best_step and rebuilt.config.steps * rebuilt.config.batch \
                <= len(rebuilt.data.x):
            fits.append(fit_row(run, rebuilt))
        print(f"{run}: {time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)
    rows.sort(key=lambda r: (r.grid, r.method, r.cell, r.seed))
    fit_table = ["", "Best minus start: records right in points (records), mean loss", "",
                 "| grid | cell | method | seed | best step | trained | not trained | "
                 "validation | test | test, one paired SD |",
                 "|---|---|---|---:|---:|---|---|---|---|---:|",
                 *sorted(fits)] if fits else []
    text = "\n".join([f"# Guard confirmation replayed on {len(rows)} runs", "",
                      *table(rows), "", *summary(rows), *fit_table, "",
                      f"{time.monotonic() - began:.0f} s"]) + "\n"
    print(text)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)


if __name__ == "__main__":
    main()
