"""The grid experiment "in the paper's shape" (issue 13): docs/experiment.md, section "grid".

Two pre-trained INT8 digits models of different architectures (tests/fixtures/digits_cnn.tflite
and digits_resnet.tflite) meet four corruption families at two severities each
(``zocodegen.datasets.corrupt_family``: noise, blur, fog, JPEG-like), as CIFAR-10-C does. In
every cell each model is adapted on the corrupted adapt split by the bit-exact simulator
(``zocodegen simulate``, the integers the firmware computes) with our method at its defaults
and with MeZO at the same number of forward passes, over three training seeds, beside no
adaptation and the FP32 back-propagation ceiling (tests/fixtures/ceilings.json). On one
family the ablations of the paper's Fig. 7 / Table 5 are run as well.

Every run is one CLI call, ``zocodegen simulate MODEL --data CELL.npz -o RUN --epochs E
--queries Q --seed S [method options]``, run as a subprocess (two at a time: one per core of
the machine the timings were taken on) so that the experiment measures exactly what a user
gets. Finished runs are cached under build/experiment/ (a run whose run.json has
``accuracy_after`` or whose result.json exists is not run again; delete the folder to start
over after changing the engine or the data).

    .venv/bin/python benchmarks/experiment.py            # run the grid, print the tables
    .venv/bin/python benchmarks/experiment.py --write    # also update docs/experiment.md + PNGs
    .venv/bin/python benchmarks/experiment.py --quick    # a tiny smoke grid (about a minute)
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zocodegen.datasets import FAMILIES, SEVERITIES, family_npz  # noqa: E402
from zocodegen.frontends import load_model  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
MODELS = ("digits_cnn", "digits_resnet")
CEILINGS = FIXTURES / "ceilings.json"
DOC = ROOT / "docs" / "experiment.md"
RUNS = ROOT / "build" / "experiment"
MARK_START, MARK_END = "<!-- grid:start -->", "<!-- grid:end -->"
#: One run per core of the 2-core machine the budget below was sized on.
WORKERS = 2
#: The full grid's budget: one epoch over the adapt split, Q perturbations per layer and step
#: (the paper simulates with Q = 100 and runs Q = 50 on the device; Q = 20 keeps the whole grid
#: at about an hour on 2 cores, see docs/experiment.md).
EPOCHS = 1
QUERIES = 20
SEEDS = (1, 2, 3)
#: The family the ablations run on (both severities, both models): its FP32 ceiling is far
#: above no adaptation, so there is a lot to recover and the methods separate.
ABLATION_FAMILY = "blur"
TUNED_LRS = ("0.003", "0.01", "0.03")


@dataclass(frozen=True)
class Method:
    """A row of the tables: its CLI options on top of the shared budget."""
    key: str
    label: str
    options: tuple[str, ...]


OURS = Method("ours", "ours (defaults: --lr auto, guard)", ())
MEZO = Method("mezo", "MeZO (model-wise, same forward passes)", ("--estimator", "mezo"))
GRID_METHODS = (OURS, MEZO)
TUNED = tuple(Method(f"tuned-{lr}", f"ours, lr {lr}, no guard", ("--lr", lr, "--no-guard"))
              for lr in TUNED_LRS)
ABLATION_METHODS = TUNED + (
    Method("wp", "WP only", ("--estimator", "wp")),
    Method("np", "NP only", ("--estimator", "np")),
    Method("no-gnorm", "no gradient-norm scaling", ("--no-gnorm-scaling",)),
    Method("no-quant", "no quantization-aware scaling", ("--no-quant-scaling",)),
    Method("sparse", "sparse (one of 4 blocks, --block auto)", ("--mode", "sparse")),
)
METHODS = {m.key: m for m in GRID_METHODS + ABLATION_METHODS}
#: The runs whose curves docs/experiment_grid_<model>.png shows.
PLOTTED = ("ours", "mezo", "wp", "np", "sparse")


@dataclass(frozen=True)
class Grid:
    """What to run: the cells (family, severity) of every model, the seeds, the ablation
    family, and the per-run budget as CLI options (``--epochs E`` or, for --quick, --steps)."""
    models: tuple[str, ...]
    cells: tuple[tuple[str, int], ...]
    seeds: tuple[int, ...]
    ablation_family: str
    budget: tuple[str, ...]
    queries: int

    @property
    def tag(self) -> str:
        """The cache folder of this budget: runs with other budgets never mix."""
        return "-".join(o.lstrip("-") for o in self.budget) + f"-q{self.queries}"

    @property
    def ablation_cells(self) -> tuple[tuple[str, int], ...]:
        return tuple(c for c in self.cells if c[0] == self.ablation_family)


FULL = Grid(MODELS, tuple((f, s) for f in FAMILIES for s in SEVERITIES), SEEDS,
            ABLATION_FAMILY, ("--epochs", str(EPOCHS)), QUERIES)
QUICK = Grid(MODELS, ((ABLATION_FAMILY, 1),), (1,), ABLATION_FAMILY, ("--steps", "30"), 4)


@dataclass(frozen=True)
class Run:
    model: str
    family: str
    severity: int
    method: str
    seed: int

    @property
    def cell(self) -> str:
        return f"{self.family}/{self.severity}"

    def directory(self, root: Path) -> Path:
        """RUN folder: root/model/family-severity/method/seedS."""
        cell = f"{self.family}-{self.severity}"
        return root / self.model / cell / self.method / f"seed{self.seed}"


@dataclass(frozen=True)
class Result:
    """Test accuracy before and after training, and the run's wall time (None if unknown)."""
    before: float
    after: float
    seconds: float | None = None


def grid_runs(grid: Grid) -> list[Run]:
    """Every run of ``grid``: both grid methods in every cell, the ablations on the ablation
    family's cells; MeZO first (the longest runs first pack the two workers best)."""
    runs = [Run(m, f, s, method.key, seed) for m in grid.models for f, s in grid.cells
            for seed in grid.seeds for method in GRID_METHODS]
    runs += [Run(m, f, s, method.key, seed) for m in grid.models for f, s in grid.ablation_cells
             for seed in grid.seeds for method in ABLATION_METHODS]
    return sorted(runs, key=lambda r: r.method != MEZO.key)


def data_path(root: Path, model: str, family: str, severity: int) -> Path:
    return root / "data" / f"{model}-{family}-{severity}.npz"


def write_data(grid: Grid, root: Path) -> None:
    """DATA.npz of every (model, cell), in that model's input quantization (data seed 0, the
    seed the fixtures' accuracies and ceilings were measured with)."""
    for model in grid.models:
        graph = load_model(FIXTURES / f"{model}.tflite")
        quant = graph.tensor(graph.inputs[0]).quant
        for family, severity in grid.cells:
            path = data_path(root, model, family, severity)
            path.parent.mkdir(parents=True, exist_ok=True)
            family_npz(path, quant, family, severity)


def command(cli: Sequence[str], run: Run, grid: Grid, root: Path) -> list[str]:
    return [*cli, "simulate", str(FIXTURES / f"{run.model}.tflite"),
            "--data", str(data_path(root, run.model, run.family, run.severity)),
            "-o", str(run.directory(root)), *grid.budget, "--queries", str(grid.queries),
            "--seed", str(run.seed), *METHODS[run.method].options]


def last_accuracy(metrics: Path) -> float | None:
    """The last test accuracy in a metrics.csv (for engines whose run.json lacks
    ``accuracy_after``)."""
    if not metrics.is_file():
        return None
    with metrics.open(newline="") as fh:
        values = [row["accuracy"] for row in csv.DictReader(fh) if row.get("accuracy")]
    return float(values[-1]) if values else None


def read_result(directory: Path) -> Result | None:
    """The result of a finished run, or None. Finished: run.json has ``accuracy_after``, or
    this script recorded the run's completion in result.json (the engine then had no
    ``accuracy_after`` and the last test accuracy of metrics.csv stands for it)."""
    run_json, result_json = directory / "run.json", directory / "result.json"
    if not run_json.is_file():
        return None
    info = json.loads(run_json.read_text())
    extra = json.loads(result_json.read_text()) if result_json.is_file() else {}
    after = info.get("accuracy_after")
    if after is None and extra:
        after = extra.get("accuracy_after")
    if after is None or info.get("accuracy_before") is None:
        return None
    return Result(float(info["accuracy_before"]), float(after), extra.get("seconds"))


def execute(cli: Sequence[str], run: Run, grid: Grid, root: Path) -> tuple[Result | None, str]:
    """Run one simulation (output to RUN/log.txt, which also keeps the progress bar off) and
    record its completion and wall time in RUN/result.json."""
    directory = run.directory(root)
    directory.mkdir(parents=True, exist_ok=True)
    cmd = command(cli, run, grid, root)
    start = time.perf_counter()
    with (directory / "log.txt").open("w") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - start
    if code != 0:
        tail = (directory / "log.txt").read_text().strip().splitlines()[-3:]
        return None, f"exit {code}: {' | '.join(tail)}"
    (directory / "result.json").write_text(json.dumps({
        "command": cmd, "seconds": seconds,
        "accuracy_after": last_accuracy(directory / "metrics.csv")}, indent=2) + "\n")
    result = read_result(directory)
    return result, "" if result else "no test accuracy in run.json or metrics.csv"


def run_grid(grid: Grid, root: Path, cli: Sequence[str], workers: int
             ) -> tuple[dict[Run, Result], list[str], float]:
    """Every run of ``grid`` that is not cached, ``workers`` at a time; returns all results,
    the failures and this invocation's wall time."""
    start = time.perf_counter()
    write_data(grid, root)
    results: dict[Run, Result] = {}
    todo = []
    for run in grid_runs(grid):
        cached = read_result(run.directory(root))
        if cached is None:
            todo.append(run)
        else:
            results[run] = cached
    print(f"{len(results)} runs cached, {len(todo)} to run with {workers} workers "
          f"({root})", flush=True)
    failures = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(execute, cli, run, grid, root): run for run in todo}
        for done, future in enumerate(as_completed(futures), 1):
            run = futures[future]
            result, error = future.result()
            elapsed = time.perf_counter() - start
            left = elapsed / done * (len(todo) - done)
            label = f"[{done}/{len(todo)}] {run.model} {run.cell} {run.method} seed {run.seed}"
            if result is None:
                failures.append(f"{label}: {error} ({run.directory(root)}/log.txt)")
                print(f"{label}: FAILED {error}", flush=True)
                continue
            results[run] = result
            print(f"{label}: {100 * result.before:.1f}% -> {100 * result.after:.1f}% "
                  f"({result.seconds:.0f} s; {elapsed / 60:.1f} min elapsed, about "
                  f"{left / 60:.0f} min left)", flush=True)
    return results, failures, time.perf_counter() - start


# ----------------------------------------------------------------------------- tables
def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    v = np.asarray(values, dtype=np.float64)
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0


def pct(values: Sequence[float]) -> str:
    """'81.2 ± 1.3' (percent) over seeds; '—' when nothing finished."""
    if not values:
        return "—"
    mean, std = mean_std(values)
    return f"{100 * mean:.1f} ± {100 * std:.1f}" if len(values) > 1 else f"{100 * mean:.1f}"


def after(results: dict[Run, Result], model: str, family: str, severity: int, method: str,
          seeds: Iterable[int]) -> list[float]:
    """Test accuracies after training of the finished seeds of one (model, cell, method)."""
    found = (results.get(Run(model, family, severity, method, s)) for s in seeds)
    return [r.after for r in found if r is not None]


def before(results: dict[Run, Result], model: str, family: str, severity: int) -> float | None:
    """No adaptation: the test accuracy every run of the cell starts from."""
    return next((r.before for run, r in results.items()
                 if (run.model, run.family, run.severity) == (model, family, severity)), None)


def ceiling(ceilings: dict, model: str, family: str, severity: int) -> float | None:
    return ceilings.get(model, {}).get(f"{family}/{severity}")


def fmt(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def grid_table(grid: Grid, results: dict[Run, Result], ceilings: dict) -> list[str]:
    """Per model x family x severity: no adaptation, ours, MeZO (mean ± std over the seeds),
    the FP32 ceiling; per model a summary row, the mean over its cells of the seed means."""
    lines = ["| model | corruption | severity | no adaptation | ours (defaults) | MeZO | "
             "FP32 ceiling |", "|---|---|---|---|---|---|---|"]
    for model in grid.models:
        columns: dict[str, list[float]] = {"before": [], "ours": [], "mezo": [], "ceiling": []}
        for family, severity in grid.cells:
            ours = after(results, model, family, severity, OURS.key, grid.seeds)
            mezo = after(results, model, family, severity, MEZO.key, grid.seeds)
            start = before(results, model, family, severity)
            top = ceiling(ceilings, model, family, severity)
            for key, value in (("before", start), ("ceiling", top),
                               ("ours", np.mean(ours) if ours else None),
                               ("mezo", np.mean(mezo) if mezo else None)):
                if value is not None:
                    columns[key].append(float(value))
            lines.append(f"| {model} | {family} | {severity} | {fmt(start)} | {pct(ours)} | "
                         f"{pct(mezo)} | {fmt(top)} |")
        cells = len(grid.cells)

        def mean_of(key: str) -> str:
            values = columns[key]
            return fmt(float(np.mean(values))) if len(values) == cells else "—"

        lines.append(f"| **{model}** | **mean of {cells} cells** | | **{mean_of('before')}** | "
                     f"**{mean_of('ours')}** | **{mean_of('mezo')}** | "
                     f"**{mean_of('ceiling')}** |")
    return lines


def best_tuned(results: dict[Run, Result], model: str, family: str, severity: int,
               seeds: Sequence[int]) -> tuple[list[float], str | None]:
    """The fixed learning rate of TUNED_LRS with the best mean test accuracy (an oracle choice
    on the test split: an upper reference for what --lr auto picks from validation)."""
    best: tuple[list[float], str | None] = ([], None)
    for method in TUNED:
        values = after(results, model, family, severity, method.key, seeds)
        if values and (not best[0] or np.mean(values) > np.mean(best[0])):
            best = (values, method.options[1])
    return best


def ablation_table(grid: Grid, results: dict[Run, Result], ceilings: dict) -> list[str]:
    """Methods x (model, severity) on the ablation family, mean ± std over the seeds."""
    cols = [(m, s) for m in grid.models for _, s in grid.ablation_cells]
    family = grid.ablation_family
    lines = ["| method | " + " | ".join(f"{m} sev. {s}" for m, s in cols) + " |",
             "|---|" + "---|" * len(cols),
             "| no adaptation | " + " | ".join(fmt(before(results, m, family, s))
                                              for m, s in cols) + " |"]

    def row(method: Method) -> str:
        return f"| {method.label} | " + " | ".join(
            pct(after(results, m, family, s, method.key, grid.seeds)) for m, s in cols) + " |"

    tuned = [best_tuned(results, m, family, s, grid.seeds) for m, s in cols]
    lines.append(row(OURS))
    lines.append(f"| ours tuned (best fixed lr of {', '.join(TUNED_LRS)}, no guard) | "
                 + " | ".join(f"{pct(v)} (lr {lr})" if lr else "—" for v, lr in tuned) + " |")
    lines += [row(METHODS[key]) for key in ("wp", "np", "no-gnorm", "no-quant", "mezo",
                                            "sparse")]
    lines.append("| FP32 back-propagation ceiling (re-quantized) | " + " | ".join(
        fmt(ceiling(ceilings, m, family, s)) for m, s in cols) + " |")
    return lines


def timing(results: dict[Run, Result]) -> tuple[float, dict[str, float]]:
    """Sum of the runs' wall times (seconds) and the mean per method."""
    per: dict[str, list[float]] = {}
    for run, r in results.items():
        if r.seconds is not None:
            per.setdefault(run.method, []).append(r.seconds)
    total = sum(sum(v) for v in per.values())
    return total, {k: float(np.mean(v)) for k, v in per.items()}


def report(grid: Grid, results: dict[Run, Result], ceilings: dict, wall: float, workers: int,
           images: Sequence[str]) -> str:
    """The markdown that goes between the grid markers of docs/experiment.md."""
    total, per_method = timing(results)
    expected = len(grid_runs(grid))
    budget = " ".join(grid.budget)
    lines = [
        f"Grid: {len(grid.models)} models x {len(grid.cells)} cells (corruption family x "
        f"severity) x {len(grid.seeds)} seeds (`--seed {', '.join(map(str, grid.seeds))}`) x "
        f"{{ours, MeZO}}, plus the ablations on `{grid.ablation_family}`; {len(results)} of "
        f"{expected} runs finished. Every run: `zocodegen simulate MODEL --data CELL.npz "
        f"{budget} --queries {grid.queries} --seed S [method options]` on the cell's adapt "
        f"split (the simulator keeps a validation share of it for --lr auto and the guard); "
        f"test accuracy in % on the cell's held-out test split (360 images, 1 image = 0.28 %), "
        f"mean ± sample std over the seeds. MeZO gets the same number of forward passes as "
        f"the layer-wise methods (the engine sizes it). The ceiling is FP32 "
        f"back-propagation of all layers on the same adapt split, re-quantized to int8 "
        f"(`tests/fixtures/ceilings.json`).",
        "",
        *grid_table(grid, results, ceilings),
        "",
        f"Ablations on `{grid.ablation_family}` (same budget and seeds):",
        "",
        *ablation_table(grid, results, ceilings),
        "",
        f"Time: the runs took {total / 60:.0f} core-minutes of simulation, i.e. about "
        f"{total / 60 / workers:.0f} minutes on {workers} workers; this invocation's wall time "
        f"was {wall / 60:.1f} minutes (cached runs are not rerun). Mean seconds per run: "
        + ", ".join(f"{k} {v:.0f}" for k, v in sorted(per_method.items())) + ".",
    ]
    if images:
        lines += ["", "Test accuracy (solid, at the evaluation points) and the guard's "
                  "validation accuracy (dotted) per step, seed "
                  f"{grid.seeds[0]}, on `{grid.ablation_family}`; x marks a rollback:", ""]
        lines += [f"![{Path(p).stem}]({Path(p).name})" for p in images]
    return "\n".join(lines)


def write_doc(doc: Path, text: str) -> None:
    """Replace what lies between the grid markers of ``doc`` (appending a section with the
    markers when it has none yet), leaving the rest of the document untouched."""
    content = doc.read_text() if doc.is_file() else ""
    if MARK_START in content and MARK_END in content:
        head, rest = content.split(MARK_START, 1)
        _, tail = rest.split(MARK_END, 1)
    else:
        head = content.rstrip("\n") + "\n\n## The grid: two models, four corruption families\n\n"
        tail = "\n"
    doc.write_text(f"{head}{MARK_START}\n{text}\n{MARK_END}{tail}")


# ----------------------------------------------------------------------------- plots
def read_curve(metrics: Path) -> dict[str, np.ndarray]:
    """metrics.csv as arrays: evaluation steps and test accuracy, guard check steps and
    validation accuracy, rollback steps (with their validation accuracy where logged)."""
    with metrics.open(newline="") as fh:
        rows = list(csv.DictReader(fh))

    def pick(column: str, event: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        chosen = [(int(r["step"]), float(r[column])) for r in rows if r.get(column)
                  and (event is None or r.get("event") == event)]
        steps = np.array([s for s, _ in chosen], dtype=np.int64)
        return steps, np.array([v for _, v in chosen], dtype=np.float64)

    test_steps, test = pick("accuracy")
    val_steps, val = pick("val_accuracy")
    rollback_steps = np.array([int(r["step"]) for r in rows if r.get("event") == "rollback"],
                              dtype=np.int64)
    at = dict(zip(val_steps.tolist(), val.tolist()))
    rollback_acc = np.array([at.get(s, math.nan) for s in rollback_steps.tolist()])
    if len(test_steps):
        fallback = np.interp(rollback_steps, test_steps, test)
        rollback_acc = np.where(np.isnan(rollback_acc), fallback, rollback_acc)
    return {"test_steps": test_steps, "test": test, "val_steps": val_steps, "val": val,
            "rollback_steps": rollback_steps, "rollback": rollback_acc}


def plot_curves(grid: Grid, root: Path, out_dir: Path) -> list[Path]:
    """One PNG per model: a panel per severity of the ablation family, the curves of the
    PLOTTED methods (first seed). Returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for model in grid.models:
        cells = grid.ablation_cells
        fig, axes = plt.subplots(1, len(cells), figsize=(5.5 * len(cells), 4), squeeze=False)
        for ax, (family, severity) in zip(axes[0], cells):
            for k, method in enumerate(PLOTTED):
                metrics = Run(model, family, severity, method, grid.seeds[0]).directory(
                    root) / "metrics.csv"
                if not metrics.is_file():
                    continue
                c = read_curve(metrics)
                color = f"C{k}"
                ax.plot(c["test_steps"], 100 * c["test"], "-o", color=color, markersize=3,
                        label=METHODS[method].label.split(" (")[0])
                if len(c["val_steps"]):
                    ax.plot(c["val_steps"], 100 * c["val"], ":", color=color, linewidth=1)
                if len(c["rollback_steps"]):
                    ax.plot(c["rollback_steps"], 100 * c["rollback"], "x", color=color,
                            markersize=9, markeredgewidth=2)
            ax.plot([], [], "k-o", markersize=3, label="test")
            ax.plot([], [], "k:", linewidth=1, label="validation (guard)")
            ax.plot([], [], "kx", markersize=9, markeredgewidth=2, label="rollback")
            ax.set_title(f"{model}, {family} severity {severity}")
            ax.set_xlabel("step")
            ax.set_ylabel("accuracy (%)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, loc="lower right", ncol=2)
        fig.tight_layout()
        path = out_dir / f"experiment_grid_{model}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def default_cli() -> list[str]:
    """The venv's ``zocodegen`` script (what a user runs), else this interpreter's module."""
    script = Path(sys.executable).parent / "zocodegen"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "zocodegen"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="tiny grid (one cell, one seed, 30 steps, Q = 4) to smoke-test "
                             "the pipeline in about a minute")
    parser.add_argument("--write", action="store_true",
                        help="update docs/experiment.md and its PNGs")
    parser.add_argument("--runs", type=Path, default=RUNS,
                        help=f"cache of run folders (default {RUNS.relative_to(ROOT)})")
    parser.add_argument("--workers", type=int, default=WORKERS)
    args = parser.parse_args()
    if args.quick and args.write:
        parser.error("--quick results are a smoke test: they never go into docs/experiment.md")
    grid = QUICK if args.quick else FULL
    root = args.runs / grid.tag
    results, failures, wall = run_grid(grid, root, default_cli(), args.workers)
    ceilings = json.loads(CEILINGS.read_text())
    images = plot_curves(grid, root, DOC.parent if args.write else root) if results else []
    text = report(grid, results, ceilings, wall, args.workers,
                  [str(p) for p in images] if args.write else [])
    print(text)
    print(f"wall time {wall / 60:.1f} min")
    if args.write:
        write_doc(DOC, text)
        print(f"wrote {DOC.relative_to(ROOT)} and {', '.join(p.name for p in images)}")
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
