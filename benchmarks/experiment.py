"""The grid experiment "in the paper's shape" (issue 13): docs/experiment.md, section "grid".

Two pre-trained INT8 digits models of different architectures (tests/fixtures/digits_cnn.tflite
and digits_resnet.tflite) meet four corruption families at two severities each
(``zocodegen.datasets.corrupt_family``: noise, blur, fog, JPEG-like), as CIFAR-10-C does. In
every cell each model is adapted on the corrupted adapt split by the bit-exact simulator
(``zocodegen simulate``, the integers the firmware computes) with our method at its defaults
and with MeZO at the same number of forward passes, over three training seeds, beside no
adaptation and the FP32 back-propagation ceiling (tests/fixtures/ceilings.json). On one
family the ablations of the paper's Fig. 7 / Table 5 are run as well. ElasticZO's hybrid
(``--bp-layers C``: the last C trainable layers by exact integer back-propagation, the rest by
our ZO) runs in every cell too, for C = 1 and 2 at the same budget, beside a memory table per
model and method taken from the generated firmware's memory report (``zocodegen build
--target stm32f746 --bp-layers C``, the paper's Eq. 2-4 and Fig. 4/5 in table form).

Every run is one CLI call, ``zocodegen simulate MODEL --data CELL.npz -o RUN --epochs E
--queries Q --seed S [method options]``, run as a subprocess (``--workers``, default two at a
time: one per core of the machine the timings were taken on) so that the experiment measures
exactly what a user gets. Finished runs are cached under build/experiment/ (a run whose
run.json has ``accuracy_after`` or whose result.json exists is not run again; delete the
folder to start over after changing the engine or the data).

    .venv/bin/python benchmarks/experiment.py            # run the grid, print the tables
    .venv/bin/python benchmarks/experiment.py --write    # also update docs/experiment.md + PNGs
    .venv/bin/python benchmarks/experiment.py --quick    # a tiny smoke grid (about a minute)
    .venv/bin/python benchmarks/experiment.py --write --workers 1   # on a shared machine
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import re
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
from zocodegen.training.config import TrainConfig  # noqa: E402
from zocodegen.training.plan import training_plan  # noqa: E402

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
#: More seeds for ZO only and hybrid C = 1 in every cell: ZO only's seeds 4-6 against its own
#: seeds 1-3 show how far two seed means of the same method differ (an A/A comparison), and
#: six seeds halve the noise of the hybrid's comparison (docs/experiment.md, "seed noise").
NOISE_SEEDS = (4, 5, 6)
NOISE_METHODS = ("ours", "hybrid-1")
#: The family the ablations run on (both severities, both models): its FP32 ceiling is far
#: above no adaptation, so there is a lot to recover and the methods separate.
ABLATION_FAMILY = "blur"
TUNED_LRS = ("0.003", "0.01", "0.03")
#: ElasticZO's hybrid: the model's last C trainable layers by back-propagation (--bp-layers C).
HYBRID_LAYERS = (1, 2)
#: The board whose generated build's memory report gives the memory table.
MEMORY_TARGET = "stm32f746"


@dataclass(frozen=True)
class Method:
    """A row of the tables: its CLI options on top of the shared budget."""
    key: str
    label: str
    options: tuple[str, ...]


OURS = Method("ours", "ours (defaults: --lr auto, guard)", ())
MEZO = Method("mezo", "MeZO (model-wise, same forward passes)", ("--estimator", "mezo"))
HYBRIDS = tuple(Method(f"hybrid-{c}", f"hybrid C={c}", ("--bp-layers", str(c)))
                for c in HYBRID_LAYERS)
#: At an equal forward budget (the issue's comparison): the hybrid spends the queries its BP
#: layer no longer needs on the ZO layers, Q L / (L - 1) each; ElasticZO-INT8's two-sided
#: queries are two forwards each, so it runs Q / 2 (placeholders resolved per model by
#: ``method_options``).
EQUAL_BUDGET = (Method("hybrid-1-eq", "hybrid C=1, equal forwards",
                       ("--bp-layers", "1", "--queries", "{q_equal:1}")),
                Method("int8", "ElasticZO-INT8 (Q/2 two-sided)",
                       ("--estimator", "int8", "--queries", "{q_half}")))
#: PeZO's perturbation sources and distribution, P-RGE's two-sided queries (issue 17), each
#: on top of our defaults at the same forward budget (two-sided: Q / 2 queries of two
#: forwards). Pool and generator counts are the paper's guideline (Sec. 4.3: 2^12 values,
#: 2^5 generators, both minus one).
PERTURBATIONS = (Method("pool", "pool:4095", ("--perturbation", "pool:4095")),
                 Method("rotating", "rotating:31", ("--perturbation", "rotating:31")),
                 Method("uniform", "uniform", ("--distribution", "uniform")),
                 Method("pool-uniform", "pool:4095 uniform",
                        ("--perturbation", "pool:4095", "--distribution", "uniform")),
                 Method("two-sided", "two-sided (Q/2)", ("--two-sided", "--queries", "{q_half}")))
GRID_METHODS = (OURS, MEZO) + HYBRIDS + EQUAL_BUDGET + PERTURBATIONS
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
PLOTTED = ("ours", "mezo", "wp", "np", "sparse", "hybrid-1", "hybrid-2")


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
    noise_seeds: tuple[int, ...] = ()
    noise_methods: tuple[str, ...] = ()

    @property
    def tag(self) -> str:
        """The cache folder of this budget: runs with other budgets never mix."""
        return "-".join(o.lstrip("-") for o in self.budget) + f"-q{self.queries}"

    @property
    def ablation_cells(self) -> tuple[tuple[str, int], ...]:
        return tuple(c for c in self.cells if c[0] == self.ablation_family)


FULL = Grid(MODELS, tuple((f, s) for f in FAMILIES for s in SEVERITIES), SEEDS,
            ABLATION_FAMILY, ("--epochs", str(EPOCHS)), QUERIES, NOISE_SEEDS, NOISE_METHODS)
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
    """Test accuracy before and after training, the run's wall time and its query forwards
    (what the CLI reports; None if unknown)."""
    before: float
    after: float
    seconds: float | None = None
    forwards: int | None = None


def grid_runs(grid: Grid) -> list[Run]:
    """Every run of ``grid``: the grid methods (ours, MeZO, the hybrids) in every cell, the
    ablations on the ablation family's cells; MeZO first (the longest runs first pack the
    two workers best)."""
    runs = [Run(m, f, s, method.key, seed) for m in grid.models for f, s in grid.cells
            for seed in grid.seeds for method in GRID_METHODS]
    runs += [Run(m, f, s, method.key, seed) for m in grid.models for f, s in grid.ablation_cells
             for seed in grid.seeds for method in ABLATION_METHODS]
    runs += [Run(m, f, s, method, seed) for m in grid.models for f, s in grid.cells
             for seed in grid.noise_seeds for method in grid.noise_methods]
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


def trainable_layers(model: str) -> int:
    """L: the trainable layers of a model (every one is trained in the grid's runs)."""
    graph = load_model(FIXTURES / f"{model}.tflite")
    return len(training_plan(graph, TrainConfig()).layers)


def method_options(method: Method, model: str, queries: int) -> list[str]:
    """A method's options with the budget placeholders resolved for ``model``:
    ``{q_equal:C}`` = Q L // (L - C), the queries per ZO layer that spend the forwards C BP
    layers save; ``{q_half}`` = Q // 2."""
    out = []
    for option in method.options:
        if option.startswith("{q_equal:"):
            layers, c = trainable_layers(model), int(option[len("{q_equal:"):-1])
            option = str(queries * layers // (layers - c))
        elif option == "{q_half}":
            option = str(queries // 2)
        out.append(option)
    return out


def command(cli: Sequence[str], run: Run, grid: Grid, root: Path) -> list[str]:
    return [*cli, "simulate", str(FIXTURES / f"{run.model}.tflite"),
            "--data", str(data_path(root, run.model, run.family, run.severity)),
            "-o", str(run.directory(root)), "--force",  # an unfinished run starts anew
            *grid.budget, "--queries", str(grid.queries),
            "--seed", str(run.seed),
            *method_options(METHODS[run.method], run.model, grid.queries)]


def last_accuracy(metrics: Path) -> float | None:
    """The last test accuracy in a metrics.csv (for engines whose run.json lacks
    ``accuracy_after``)."""
    if not metrics.is_file():
        return None
    with metrics.open(newline="") as fh:
        values = [row["accuracy"] for row in csv.DictReader(fh) if row.get("accuracy")]
    return float(values[-1]) if values else None


def query_forwards(log: Path) -> int | None:
    """The query forwards the CLI reports at the end of a run ("..., 38,880 query forwards"):
    run.json does not carry them, and they are what "equal forward budgets" compares."""
    if not log.is_file():
        return None
    found = re.findall(r"([\d,]+) query forwards", log.read_text())
    return int(found[-1].replace(",", "")) if found else None


def read_result(directory: Path) -> Result | None:
    """The result of a finished run, or None. Finished: run.json has ``accuracy_after``, or
    this script recorded the run's completion in result.json (the engine then had no
    ``accuracy_after`` and the last test accuracy of metrics.csv stands for it). The query
    forwards come from result.json, else from the CLI's output in log.txt."""
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
    forwards = extra.get("forwards")
    if forwards is None:
        forwards = query_forwards(directory / "log.txt")
    return Result(float(info["accuracy_before"]), float(after), extra.get("seconds"), forwards)


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
        "accuracy_after": last_accuracy(directory / "metrics.csv"),
        "forwards": query_forwards(directory / "log.txt")}, indent=2) + "\n")
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


def seed_mean(results: dict[Run, Result], model: str, family: str, severity: int,
              method: str, seeds: Sequence[int]) -> float | None:
    """Mean test accuracy over the seeds, only when every seed finished (a comparison of
    means over different seed sets would not be one)."""
    values = after(results, model, family, severity, method, seeds)
    return float(np.mean(values)) if len(values) == len(seeds) else None


def mean_forwards(results: dict[Run, Result], model: str, method: str) -> float | None:
    """Mean query forwards per run of one model and method over its finished runs."""
    values = [r.forwards for run, r in results.items()
              if (run.model, run.method) == (model, method) and r.forwards is not None]
    return float(np.mean(values)) if values else None


def comparison_table(grid: Grid, results: dict[Run, Result], ceilings: dict,
                     methods: Sequence[Method]) -> list[str]:
    """Per model x family x severity: no adaptation, ZO only (ours), each of ``methods``, the
    FP32 ceiling (mean ± std over the seeds); per model the mean over its cells of the seed
    means and the query forwards per run (the budget each column spent)."""
    methods = (OURS,) + tuple(methods)
    heads = ["ZO only (ours)"] + [m.label for m in methods[1:]]
    lines = ["| model | corruption | severity | no adaptation | " + " | ".join(heads)
             + " | FP32 BP ceiling |", "|---|---|---|" + "---|" * (len(heads) + 2)]
    for model in grid.models:
        starts, tops = [], []
        means: dict[str, list[float]] = {m.key: [] for m in methods}
        for family, severity in grid.cells:
            start = before(results, model, family, severity)
            top = ceiling(ceilings, model, family, severity)
            starts += [start] if start is not None else []
            tops += [top] if top is not None else []
            cols = []
            for method in methods:
                values = after(results, model, family, severity, method.key, grid.seeds)
                cols.append(pct(values))
                mean = seed_mean(results, model, family, severity, method.key, grid.seeds)
                means[method.key] += [mean] if mean is not None else []
            lines.append(f"| {model} | {family} | {severity} | {fmt(start)} | "
                         + " | ".join(cols) + f" | {fmt(top)} |")
        cells = len(grid.cells)

        def mean_of(values: list[float]) -> str:
            return f"**{fmt(float(np.mean(values)))}**" if len(values) == cells else "—"

        lines.append(f"| **{model}** | **mean of {cells} cells** | | {mean_of(starts)} | "
                     + " | ".join([mean_of(means[m.key]) for m in methods])
                     + f" | {mean_of(tops)} |")
        forwards = [mean_forwards(results, model, m.key) for m in methods]
        lines.append(f"| {model} | query forwards per run | | 0 | "
                     + " | ".join(["—" if f is None else f"{f:,.0f}" for f in forwards])
                     + " | — |")
    return lines


def differences(grid: Grid, results: dict[Run, Result], method: str
                ) -> list[tuple[str, str, int, float]]:
    """(model, family, severity, mean of ``method`` - mean of ours) over the seeds, for every
    cell where both finished all seeds."""
    found = []
    for model in grid.models:
        for family, severity in grid.cells:
            other = seed_mean(results, model, family, severity, method, grid.seeds)
            ours = seed_mean(results, model, family, severity, OURS.key, grid.seeds)
            if other is not None and ours is not None:
                found.append((model, family, severity, other - ours))
    return found


def points(delta: float) -> str:
    """A difference of accuracies in percentage points, signed ('+1.2', '−0.3')."""
    value = round(100 * delta, 1) + 0.0  # -0.0 (a tiny loss) prints as +0.0
    return f"+{value:.1f}" if value >= 0 else f"−{-value:.1f}"


def comparison_summary(grid: Grid, results: dict[Run, Result], methods: Sequence[Method]
                       ) -> list[str]:
    """Per method: in how many cells its seed mean is at least ZO only's, the mean, worst and
    best difference, and every cell where it falls below (so a loss is never hidden)."""
    lines = []
    for method in methods:
        diffs = differences(grid, results, method.key)
        if not diffs:
            lines.append(f"* **{method.label}**: no cell finished yet.")
            continue
        wins = sum(1 for *_, d in diffs if d >= -1e-12)
        worst = min(diffs, key=lambda x: x[3])
        best = max(diffs, key=lambda x: x[3])
        losses = sorted((d for d in diffs if d[3] < -1e-12), key=lambda x: x[3])
        where = "; ".join(f"{m} {f} {s} ({points(d)})" for m, f, s, d in losses)
        lines.append(
            f"* **{method.label} ≥ ZO only** (mean over the seeds) in **{wins} of "
            f"{len(diffs)}** cells; difference to ZO only: mean "
            f"{points(float(np.mean([d for *_, d in diffs])))} points, worst "
            f"{points(worst[3])} ({worst[0]} {worst[1]} {worst[2]}), best {points(best[3])} "
            f"({best[0]} {best[1]} {best[2]})."
            + (f" Below ZO only: {where}." if losses else ""))
    return lines


def seed_noise(grid: Grid, results: dict[Run, Result]) -> list[str]:
    """ZO only's seeds 4-6 against its seeds 1-3 per cell (the same method twice: how far
    seed means differ by chance), then hybrid C = 1 against ZO only over all six seeds with
    the standard error of the difference of the means, sqrt(s_h^2 / n + s_z^2 / n)."""
    if not grid.noise_seeds:
        return []
    hybrid = METHODS["hybrid-1"]
    every = grid.seeds + grid.noise_seeds
    first, second = (f"{s[0]}-{s[-1]}" for s in (grid.seeds, grid.noise_seeds))
    lines = [f"Seed noise: ZO only and {hybrid.label} also ran seeds "
             f"{', '.join(map(str, grid.noise_seeds))} in every cell (same budget and "
             f"defaults). The first columns compare ZO only with itself over two sets of "
             f"three seeds; the last compare the hybrid with ZO only over all six.", "",
             f"| model | corruption | severity | ZO only, seeds {first} | ZO only, seeds {second} "
             f"| difference | ZO only, {len(every)} seeds | {hybrid.label}, {len(every)} seeds "
             f"| difference ± standard error |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    aa, ab = [], []
    for model in grid.models:
        for family, severity in grid.cells:
            cell = (model, family, severity)
            z1, z2, z, h = (after(results, *cell, method, seeds) for method, seeds in (
                (OURS.key, grid.seeds), (OURS.key, grid.noise_seeds), (OURS.key, every),
                (hybrid.key, every)))
            row = [pct(z1), pct(z2), "—", pct(z), pct(h), "—"]
            if len(z1) == len(grid.seeds) and len(z2) == len(grid.noise_seeds):
                aa.append((*cell, float(np.mean(z2) - np.mean(z1))))
                row[2] = points(aa[-1][3])
            if len(z) == len(h) == len(every):
                se = math.sqrt((np.var(h, ddof=1) + np.var(z, ddof=1)) / len(every))
                ab.append((*cell, float(np.mean(h) - np.mean(z)), se))
                row[5] = f"{points(ab[-1][3])} ± {100 * se:.1f}"
            lines.append(f"| {model} | {family} | {severity} | " + " | ".join(row) + " |")
    lines.append("")
    if aa:
        wins = sum(1 for *_, d in aa if d >= -1e-12)
        lines.append(
            f"* **ZO only, seeds {second} ≥ ZO only, seeds {first}** (the same method) in "
            f"**{wins} of {len(aa)}** cells; differences from {points(min(d for *_, d in aa))} "
            f"to {points(max(d for *_, d in aa))} points, mean absolute "
            f"{100 * float(np.mean([abs(d) for *_, d in aa])):.1f}.")
    if ab:
        wins = sum(1 for *_, d, _ in ab if d >= -1e-12)
        far = [f"{m} {f} {s} ({points(d)} ± {100 * se:.1f})" for m, f, s, d, se in ab
               if abs(d) > 2 * se]
        lines.append(
            f"* **{hybrid.label} ≥ ZO only over {len(every)} seeds** in **{wins} of {len(ab)}** "
            f"cells; mean difference {points(float(np.mean([d for *_, d, _ in ab])))} points; "
            f"more than two standard errors from zero: "
            + ("; ".join(far) if far else "no cell") + ".")
    return lines + [""]


# ----------------------------------------------------------------------------- memory
#: The training items of a build's memory report, in the order of the paper's Eq. 2-4:
#: parameters theta, the gradient region (ZO's gradient / BP's g and e), saved activations a,
#: and the arena's tail, where the zeroth-order gradient regions and the saved activations
#: live where the arena has no dead bytes for them (docs/memory.md).
MEMORY_ITEMS = ("trainable parameters", "gradient buffer", "saved activations",
                "training state", "arena tail")


@dataclass(frozen=True)
class MemoryRow:
    """One row of the memory table: a model trained with C back-propagated layers, the
    build's memory items (bytes, None if the build failed), the plan's BP head share of the
    gradient region and its query forwards per step."""
    model: str
    label: str
    bp_layers: int
    items: dict[str, int] | None
    head_bytes: int
    forwards_per_step: int


def memory_items(report: dict) -> dict[str, int]:
    """Bytes per training item of a memory_report.json, plus ``sram``: the whole SRAM total
    (arena, stack and host-link buffers included)."""
    items = {item["name"]: int(item["bytes"]) for item in report["sram"]["items"]}
    items["arena tail"] = items["arena"] - int(report["arena"]["bytes"])
    found = {name: items.get(name, 0) for name in MEMORY_ITEMS}
    found["sram"] = int(report["sram"]["total_bytes"])
    return found


def build_memory(cli: Sequence[str], model: str, bp_layers: int, queries: int, root: Path
                 ) -> dict[str, int] | None:
    """`zocodegen build MODEL --target MEMORY_TARGET --train full --queries Q --bp-layers C`
    (the runs' Q: the training state holds Q loss sums) into root/builds/ (half a second:
    rebuilt every time, so it always reflects the engine) and its memory items; None if the
    build fails (its output is in root/builds/MODEL-bpC.txt)."""
    out = root / "builds" / f"{model}-bp{bp_layers}"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [*cli, "build", str(FIXTURES / f"{model}.tflite"), "--target", MEMORY_TARGET,
           "--train", "full", "--queries", str(queries), "--bp-layers", str(bp_layers),
           "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    (out.parent / f"{model}-bp{bp_layers}.txt").write_text(done.stdout + done.stderr)
    report_path = out / "memory_report.json"
    if done.returncode != 0 or not report_path.is_file():
        return None
    return memory_items(json.loads(report_path.read_text()))


def memory_rows(cli: Sequence[str], grid: Grid, root: Path) -> list[MemoryRow]:
    """Per model: ZO only, the hybrids, and (memory only, never run) every layer by integer
    back-propagation, the paper's "Full BP" of Eq. 2."""
    rows = []
    for model in grid.models:
        graph = load_model(FIXTURES / f"{model}.tflite")
        every = len(training_plan(graph, TrainConfig(queries=grid.queries)).layers)
        variants = [("ZO only (ours)", 0)] + [(m.label, c) for m, c in zip(HYBRIDS,
                                                                          HYBRID_LAYERS)]
        variants.append((f"all layers by BP (C = {every}; memory only, not run)", every))
        for label, c in variants:
            plan = training_plan(graph, TrainConfig(queries=grid.queries, bp_layers=c))
            rows.append(MemoryRow(model, label, c, build_memory(cli, model, c, grid.queries, root),
                                  plan.backprop_bytes(), plan.forwards_per_step))
    return rows


def memory_table(rows: Sequence[MemoryRow]) -> list[str]:
    """The memory rows in bytes: the training items, their sum, the whole SRAM and the
    query forwards per step."""
    lines = ["| model | method | trainable parameters | gradient buffer | of which BP head | "
             "saved activations (static) | training state | arena tail (ZO gradient regions, "
             "saved activations) | training total | SRAM total | query forwards per step |",
             "|---|---|" + "---:|" * 9]
    for row in rows:
        if row.items is None:
            cells = ["build failed"] + ["—"] * 7
        else:
            it = row.items
            total = sum(it[name] for name in MEMORY_ITEMS)
            cells = [f"{it['trainable parameters']:,}", f"{it['gradient buffer']:,}",
                     f"{row.head_bytes:,}", f"{it['saved activations']:,}",
                     f"{it['training state']:,}", f"{it['arena tail']:,}", f"{total:,}",
                     f"{it['sram']:,}"]
        lines.append(f"| {row.model} | {row.label} | " + " | ".join(cells)
                     + f" | {row.forwards_per_step} |")
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
           images: Sequence[str], memory: Sequence[MemoryRow] = ()) -> str:
    """The markdown that goes between the grid markers of docs/experiment.md."""
    total, per_method = timing(results)
    expected = len(grid_runs(grid))
    budget = " ".join(grid.budget)
    lines = [
        f"Grid: {len(grid.models)} models x {len(grid.cells)} cells (corruption family x "
        f"severity) x {len(grid.seeds)} seeds (`--seed {', '.join(map(str, grid.seeds))}`) x "
        f"{{{', '.join(m.key for m in GRID_METHODS)}}}, plus the ablations on "
        f"`{grid.ablation_family}`; {len(results)} of "
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
        "ElasticZO's hybrid (`--bp-layers C`: the model's last C trainable layers by exact "
        "integer back-propagation, the others by our layer-wise ZO) against ZO only, same "
        "cells, budget (`--epochs`, `--queries`, defaults) and seeds. The BP layers spend no "
        "query forwards, so the hybrids run on fewer forward passes than ZO only (row "
        "\"query forwards per run\": the CLI's count), plus one backward pass through the "
        "head per sample. The --lr auto trials and the guard's checks come on top; the "
        "engine sizes both as a share of the run's forwards, so the hybrids also check "
        "less often.",
        "",
        *comparison_table(grid, results, ceilings, HYBRIDS + EQUAL_BUDGET),
        "",
        *comparison_summary(grid, results, HYBRIDS + EQUAL_BUDGET),
        "",
        *seed_noise(grid, results),
        "Perturbation sources and estimates (PeZO, P-RGE; issue 17) against ZO only with "
        "XORShift Rademacher draws, same cells, seeds and defaults (--lr auto, guard), each "
        "at the same query forwards (two-sided: Q/2 queries of two forwards): "
        "`--perturbation pool:4095` (PeZO's pre-generation, 2^12 - 1 values), "
        "`--perturbation rotating:31` (on-the-fly, 2^5 - 1 LFSRs), `--distribution uniform` "
        "(Eq. 3-5 adaptive scaling), both together, and `--two-sided` (P-RGE's inner loop).",
        "",
        *comparison_table(grid, results, ceilings, PERTURBATIONS),
        "",
        *comparison_summary(grid, results, PERTURBATIONS),
        "",
        f"Time: the finished runs' wall times add up to {total / 60:.0f} minutes (about "
        f"{total / 60 / WORKERS:.0f} minutes for the whole grid at {WORKERS} at a time); this "
        f"invocation ran {workers} at a time and took {wall / 60:.1f} minutes (cached runs "
        f"are not rerun). Mean seconds per run: "
        + ", ".join(f"{k} {v:.0f}" for k, v in sorted(per_method.items())) + ".",
    ]
    if memory:
        lines += ["", f"Memory per model and method (bytes, from the generated build's "
                  f"memory report: `zocodegen build MODEL --target {MEMORY_TARGET} --train "
                  f"full --queries {grid.queries} --bp-layers C`; the paper's Eq. 2-4 / "
                  f"Fig. 4-5 in table form). Each zeroth-order layer's gradient region (+ "
                  f"weight backup) and the saved activations live in arena bytes dead while "
                  f"they are live, or past the arena's end: the arena tail (docs/memory.md). "
                  f"The gradient buffer keeps the BP head's saved int8 activations, int32 "
                  f"errors (and with N > 1 gradient accumulators), shown as \"of which BP "
                  f"head\" (`TrainingPlan.backprop_bytes()`). The training total is the five "
                  f"training items; the SRAM total adds the arena, the stack and the "
                  f"host-link buffers.", "", *memory_table(memory)]
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
    parser.add_argument("--workers", type=int, default=WORKERS,
                        help=f"runs at a time (default {WORKERS}, one per core; 1 on a "
                             "machine shared with other work)")
    args = parser.parse_args()
    if args.quick and args.write:
        parser.error("--quick results are a smoke test: they never go into docs/experiment.md")
    grid = QUICK if args.quick else FULL
    root = args.runs / grid.tag
    results, failures, wall = run_grid(grid, root, default_cli(), args.workers)
    memory = memory_rows(default_cli(), grid, root)
    failures += [f"build {row.model} --bp-layers {row.bp_layers} failed "
                 f"({root}/builds/{row.model}-bp{row.bp_layers}.txt)"
                 for row in memory if row.items is None]
    ceilings = json.loads(CEILINGS.read_text())
    images = plot_curves(grid, root, DOC.parent if args.write else root) if results else []
    text = report(grid, results, ceilings, wall, args.workers,
                  [str(p) for p in images] if args.write else [], memory)
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
