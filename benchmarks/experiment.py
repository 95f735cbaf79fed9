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
    .venv/bin/python benchmarks/experiment.py --quick    # a tiny grid, 38 runs of 30 steps
    .venv/bin/python benchmarks/experiment.py --quick --methods ours   # its 2 runs of ours
    .venv/bin/python benchmarks/experiment.py --write --workers 1   # on a shared machine

This file runs the grid; what it runs is experiment_grid.py, its tables experiment_report.py
and its curves experiment_plots.py.
"""
from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(HERE), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from doc_sections import replace_section  # noqa: E402
from experiment_grid import (CEILINGS, DOC, FIXTURES, FULL, HYBRID_LAYERS, HYBRIDS,  # noqa: E402
                             MARK_END, MARK_START, MEMORY_ITEMS, MEMORY_TARGET, METHODS,
                             QUICK, RUNS, WORKERS, Grid, Method, MemoryRow, Result, Run,
                             grid_runs)
from experiment_plots import plot_curves  # noqa: E402
from experiment_report import report  # noqa: E402
from zocodegen.datasets import family_npz  # noqa: E402
from zocodegen.frontends import load_model  # noqa: E402
from zocodegen.training.config import TrainConfig  # noqa: E402
from zocodegen.training.plan import training_plan  # noqa: E402

#: The section the grid's tables go under when docs/experiment.md has no markers yet.
HEADING = "## The grid: two models, four corruption families"


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


def run_grid(grid: Grid, root: Path, cli: Sequence[str], workers: int,
             methods: Sequence[str] = ()) -> tuple[dict[Run, Result], list[str], float]:
    """Every run of ``grid`` (of ``methods`` only, if given) that is not cached, ``workers``
    at a time; returns all results, the failures and this invocation's wall time."""
    start = time.perf_counter()
    write_data(grid, root)
    results: dict[Run, Result] = {}
    todo = []
    for run in grid_runs(grid):
        if methods and run.method not in methods:
            continue
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



# ----------------------------------------------------------------------------- memory
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




def write_doc(doc: Path, text: str) -> None:
    """The grid's tables between its markers of ``doc``, the rest untouched."""
    replace_section(doc, MARK_START, MARK_END, text, HEADING)


def default_cli() -> list[str]:
    """The venv's ``zocodegen`` script (what a user runs), else this interpreter's module."""
    script = Path(sys.executable).parent / "zocodegen"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "zocodegen"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="tiny grid (one cell, one seed, 30 steps, Q = 4) to smoke-test "
                             "the pipeline")
    parser.add_argument("--write", action="store_true",
                        help="update docs/experiment.md and its PNGs")
    parser.add_argument("--runs", type=Path, default=RUNS,
                        help=f"cache of run folders (default {RUNS.relative_to(ROOT)})")
    parser.add_argument("--workers", type=int, default=WORKERS,
                        help=f"runs at a time (default {WORKERS}, one per core; 1 on a "
                             "machine shared with other work)")
    parser.add_argument("--methods", metavar="KEYS",
                        help="run only these comma-separated methods (of: "
                             f"{', '.join(METHODS)}); a partial grid, never written")
    args = parser.parse_args()
    if args.quick and args.write:
        parser.error("--quick results are a smoke test: they never go into docs/experiment.md")
    methods = tuple(args.methods.split(",")) if args.methods else ()
    if methods and args.write:
        parser.error("--methods runs part of the grid: it never goes into docs/experiment.md")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        parser.error(f"unknown method {unknown[0]}")
    grid = QUICK if args.quick else FULL
    root = args.runs / grid.tag
    results, failures, wall = run_grid(grid, root, default_cli(), args.workers, methods)
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
