"""The paper's Table 7 and Table 9 at its scale (issue 32, docs/experiment.md): the
pre-trained MCUNet-class fixture ``tests/fixtures/scale_model.tflite`` (64x64x3) adapted to
CIFAR-10-C corruptions at severity 5 (benchmarks/scale.py), every method with the defaults,
beside the ElasticZO hybrid, back-propagation of only the layers that fit 256 KB, and the FP32
back-propagation ceiling; then device hours to accuracy on each board.

    .venv/bin/python benchmarks/scale_experiment.py --write      # the grid; docs/experiment.md
    .venv/bin/python benchmarks/scale_experiment.py --quick      # two cells, one seed, short
    .venv/bin/python benchmarks/scale_experiment.py --methods ours,sparse --workers 1
    .venv/bin/python benchmarks/scale_experiment.py --methods ours --cells contrast --epochs 3

Every run is `zocodegen simulate` (the bit-exact simulator: simulator == native == QEMU
checkpoints are tested), cached in build/scale/ and resumable: a finished run (RUN/result.json)
is never run again, an unfinished one starts anew, and several invocations may share the
cache (each takes the runs of its --methods). Device time: host/device_time.py.
MeZO (``--methods mezo``) is not in the default grid: at equal forwards (900 full forwards a
step) a run is about an hour of one core (2-4.5 s a step), and it ends on its start
(docs/decisions/mezo-at-scale.md).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(HERE), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import scale  # noqa: E402
from doc_sections import replace_section  # noqa: E402
from zocodegen.formats.link import DEFAULT_BAUD  # noqa: E402
from zocodegen.frontends import load_model  # noqa: E402
from zocodegen.host import device_time as dt  # noqa: E402
from zocodegen.training.config import (DEFAULT_ESTIMATOR, SCALES_BY_DEFAULT,  # noqa: E402
                                       TrainConfig)

MODEL = ROOT / "tests" / "fixtures" / "scale_model.tflite"
MODEL_128 = ROOT / "tests" / "fixtures" / "scale_model_128.tflite"
CEILINGS = ROOT / "tests" / "fixtures" / "scale_ceilings.json"
RUNS = ROOT / "build" / "scale"
DOC = ROOT / "docs" / "experiment.md"
BEGIN, END = "<!-- scale:begin -->", "<!-- scale:end -->"
PLOTS = ROOT / "docs" / "scale"

#: The paper's Table 7 corruptions that benchmarks/corruptions.py defines, severity 5.
TABLE7 = ("gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise", "gaussian_blur",
          "defocus_blur", "motion_blur", "zoom_blur", "fog", "brightness", "contrast",
          "elastic_transform")
#: The cells the grid runs by default: the three Table 7 corruptions on which the FP32 ceiling
#: gains 10 points or more (contrast +42, fog +21, impulse noise +13; the other nine gain at
#: most 4.5 points and lose up to 6: tests/fixtures/scale_ceilings.md) and one without
#: headroom as a control (Gaussian noise, +1.5), which is what 2 cores afford in two hours.
CELLS = ("contrast", "fog", "impulse_noise", "gaussian_noise")
SEVERITY = 5
DATA_SEED = 0
SEEDS = (1, 2)
EPOCHS = 1
QUERIES = 20
WORKERS = 2
BLOCKS = 4  # sparse: the build's default block count


@dataclass(frozen=True)
class Method:
    key: str
    label: str
    options: tuple[str, ...]
    board: str | None  # where it runs, for device hours (None: not a device method)
    mode: str = "full"
    batch: int = 1  # records a step (its options say --batch too)
    #: what makes its runs differ from another build's (bp-256: how many layers fitted), in
    #: their directory names, so a changed method never reuses the old one's runs
    variant: str = ""

    @property
    def run_name(self) -> str:
        return f"{self.key}-{self.variant}" if self.variant else self.key


# The methods that take the default estimator name it (and the scales, on by default:
# docs/decisions/channel-scales.md) in their run directories, so a run made under an older
# default is never read back as today's (np-channel-default.md; adaptive before).
DEFAULTS = DEFAULT_ESTIMATOR + ("-scales" if SCALES_BY_DEFAULT else "")
OURS = Method("ours", "ours, full training (defaults)", (), "stm32h7b3", variant=DEFAULTS)
SPARSE = Method("sparse", "ours, sparse, block chosen on the device (defaults)",
                ("--train", "sparse"), "stm32f746", "sparse", variant=DEFAULTS)
MEZO = Method("mezo", "MeZO, same forward passes", ("--estimator", "mezo"), None)
HYBRID = Method("hybrid-1", "ElasticZO hybrid C = 1 (last layer by BP)", ("--bp-layers", "1"),
                "stm32h7b3", variant=DEFAULTS)
#: the default before section 15: WP or NP per layer (paper Sec. 3.3), full and sparse
ADAPTIVE = Method("adaptive", "adaptive WP / NP, full training (the default before)",
                  ("--estimator", "adaptive"), "stm32h7b3")
SPARSE_ADAPTIVE = Method("sparse-adaptive", "adaptive WP / NP, sparse (the default before)",
                         ("--train", "sparse", "--estimator", "adaptive"), "stm32f746",
                         "sparse")
#: the same forwards per record in a quarter of the steps: does averaging four records' loss
#: differences keep what a step learns off the records it saw?
#: (docs/decisions/one-record-a-step.md)
BATCH_4 = Method("ours-b4", "ours, 4 records a step", ("--batch", "4"), "stm32h7b3", batch=4,
                 variant=DEFAULTS)
#: + "bp-256", whose layers depend on the model; MEZO, ADAPTIVE, SPARSE_ADAPTIVE and BATCH_4
#: only when --methods names them.
METHODS = (OURS, SPARSE, HYBRID)


def corruptions_available() -> tuple[str, ...]:
    import corruptions
    return tuple(c for c in TABLE7 if c in corruptions.NAMES)


def bp_fits_method(model: Path) -> Method:
    """Back-propagation of only the last C layers, the rest frozen, C the largest whose F746
    build fits 256 KB (the MCUTrain / tiny-training baseline), found by bisection on the
    build's own memory plan (more BP layers never need less memory)."""
    from zocodegen.codegen.project import BuildOptions
    from zocodegen.codegen.project import plan_project
    from zocodegen.errors import UserError
    from zocodegen.frontends import load_model
    from zocodegen.training.plan import training_plans
    graph = load_model(model)
    count = len(training_plans(graph, TrainConfig())[0].layers)

    def fits(c: int) -> bool:
        config = TrainConfig(bp_layers=c, layers=tuple(range(count - c, count)))
        try:
            plan_project(graph, BuildOptions("stm32f746", "stm32f746", config))
        except UserError:
            return False
        return True
    low, high = 0, count  # fits(low) or low == 0; not fits(high + 1)
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    if low == 0:
        raise SystemExit(f"{model}: not even its last layer's back-propagation fits 256 KB")
    return Method("bp-256", f"BP of the last {low} layers (what fits 256 KB)",
                  ("--bp-layers", str(low), "--layers", f"{count - low}-{count - 1}"),
                  "stm32f746", variant=f"c{low}")


@dataclass(frozen=True)
class Run:
    corruption: str
    method: str
    seed: int

    def directory(self, root: Path) -> Path:
        return root / "runs" / f"{self.corruption}-s{SEVERITY}" / f"{self.method}-seed{self.seed}"


def data_path(root: Path, corruption: str) -> Path:
    path = root / "data" / f"{corruption}-s{SEVERITY}-d{DATA_SEED}.npz"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        scale.write_data(tmp, corruption, SEVERITY, DATA_SEED, 64, MODEL, False)
        tmp.replace(path)
    return path


def command(run: Run, method: Method, root: Path, budget: tuple[str, ...]) -> list[str]:
    return [sys.executable, "-m", "zocodegen", "simulate", str(MODEL),
            "--data", str(data_path(root, run.corruption)), "-o", str(run.directory(root)),
            "--force", *budget, "--seed", str(run.seed), *method.options]


def execute(run: Run, method: Method, root: Path, budget: tuple[str, ...]) -> dict | None:
    """One simulation, its output in RUN/log.txt; RUN/result.json marks it finished."""
    directory = run.directory(root)
    done = directory / "result.json"
    if done.is_file():
        return _with_log(json.loads(done.read_text()), directory)
    directory.mkdir(parents=True, exist_ok=True)
    cmd = command(run, method, root, budget)
    start = time.perf_counter()
    with (directory / "log.txt").open("w") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    if code != 0:
        tail = (directory / "log.txt").read_text().strip().splitlines()[-2:]
        print(f"{directory}: exit {code}: {' | '.join(tail)}", file=sys.stderr)
        return None
    info = json.loads((directory / "run.json").read_text())
    log_text = (directory / "log.txt").read_text()
    forwards = re.findall(r"([\d,]+) query forwards", log_text)
    result = {"before": info.get("accuracy_before"), "after": info.get("accuracy_after"),
              "steps": info.get("config", {}).get("steps"), "block": info.get("block"),
              "forwards": int(forwards[-1].replace(",", "")) if forwards else None,
              "seconds": time.perf_counter() - start,
              "curve": curve(directory / "metrics.csv")}
    done.write_text(json.dumps(result, indent=1) + "\n")
    return _with_log(result, directory)


def _with_log(result: dict, directory: Path) -> dict:
    """The result with its run's log (device time is counted from it) and rollbacks."""
    log_text = (directory / "log.txt").read_text()
    return dict(result, log=log_text, rollbacks=len(re.findall(r"rolled back", log_text)))


def curve(metrics: Path) -> list[tuple[int, float]]:
    """(step, test accuracy) of every row that measured it."""
    from zocodegen.training.metrics import read_metrics
    return [(r.step, r.accuracy) for r in read_metrics(metrics) if r.accuracy is not None]


# ------------------------------------------------------------------------- device time
def method_costs(method: Method, images: np.ndarray, cache: dict) -> dt.Costs | None:
    """A method's costs on its board (host/device_time.py), measured once and cached."""
    if method.board is None:
        return None
    key = f"{method.run_name}:{MODEL.name}:{QUERIES}:{method.board}"
    if key not in cache:
        options: dict = {}
        if method.key == "hybrid-1":
            options["bp_layers"] = 1
        if method.batch > 1:
            options["batch"] = method.batch
        if method.key == "bp-256":
            c = int(method.options[1])
            first = int(method.options[3].split("-")[0])
            options.update(bp_layers=c, layers=tuple(range(first, first + c)))
        blocks: list[float] = []
        if method.mode == "sparse":
            blocks = [dt.step_seconds(MODEL, method.board, TrainConfig(
                queries=QUERIES, mode="sparse", block=b)) for b in range(BLOCKS)]
            step = blocks[0]
        else:
            step = dt.step_seconds(MODEL, method.board, TrainConfig(
                queries=QUERIES, mode=method.mode, **options))
        cache[key] = dict(step=step, forward=dt.forward_seconds(MODEL, method.board, images),
                          block_steps=blocks)
    # the link is not measured, only modelled: always today's link (docs/link.md)
    return dt.Costs(link=dt.link_seconds_per_record(load_model(MODEL)),
                    **{k: tuple(v) if isinstance(v, list) else v
                       for k, v in cache[key].items() if k != "link"})


def costs_128(images: np.ndarray, cache: dict) -> dt.Costs:
    """Full training of the 128x128 model on the H7B3 (the paper's resolution): what the
    "ours" runs would cost there. The inference is timed on the 64x64 images upsampled."""
    key = f"ours:{MODEL_128.name}:{QUERIES}:stm32h7b3"
    if key not in cache:
        big = images.repeat(2, axis=1).repeat(2, axis=2)
        cache[key] = dict(step=dt.step_seconds(MODEL_128, "stm32h7b3",
                                               TrainConfig(queries=QUERIES)),
                          forward=dt.forward_seconds(MODEL_128, "stm32h7b3", big))
    return dt.Costs(link=dt.link_seconds_per_record(load_model(MODEL_128)),
                    **{k: v for k, v in cache[key].items() if k != "link"})


def run_seconds(result: dict, costs: dt.Costs, batch: int = 1
                ) -> tuple[float, float, float | None]:
    """(compute, link, hours to 90 % of the final gain or None) of one run on its board."""
    shape = dt.run_shape(result["log"], result["steps"], batch)
    if result.get("block") is not None and costs.block_steps:
        costs = dt.Costs(costs.block_steps[result["block"]], costs.forward, costs.link,
                         costs.block_steps)
    compute, link = dt.seconds_at(shape.steps, shape, costs)  # to the guard's stop, if any
    gain = result["after"] - result["before"]
    to90 = None
    if gain > 0:
        for step, accuracy in result["curve"]:
            if accuracy - result["before"] >= 0.9 * gain:
                to90 = sum(dt.seconds_at(step, shape, costs)) / 3600
                break
    return compute, link, to90


# ------------------------------------------------------------------------------ report
def mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def pct(value: float) -> str:
    return "n/a" if value != value else f"{100 * value:.1f}"


def _summary(rs: list[dict], costs: dt.Costs | None, batch: int) -> dict:
    """Means over runs: before, after, gain; device hours (compute, link) and to 90 %."""
    out = dict(before=mean([r["before"] for r in rs]), after=mean([r["after"] for r in rs]),
               rollbacks=mean([r["rollbacks"] for r in rs]))
    out["gain"] = out["after"] - out["before"]
    if costs is not None:
        times = [run_seconds(r, costs, batch) for r in rs]
        out["compute"] = mean([t[0] for t in times]) / 3600
        out["link"] = mean([t[1] for t in times]) / 3600
        reached = [t[2] for t in times if t[2] is not None]
        out["to90"] = mean(reached) if reached else None
        out["reached"] = len(reached)
    return out


def capture(pairs: list[tuple[str, dict]], ceilings: dict) -> float | None:
    """The share of the FP32 ceiling's gain a method's runs capture: their mean gain over the
    mean of (ceiling - start) of the same runs' cells (the issue's measure; the paper's
    Table 7 INT8 BP-free method: 67 %)."""
    room = [ceilings[c] - r["before"] for c, r in pairs if c in ceilings]
    if len(room) != len(pairs) or mean(room) <= 0:
        return None
    return mean([r["after"] - r["before"] for _, r in pairs]) / mean(room)


def report(cells: tuple[str, ...], methods: tuple[Method, ...], results: dict,
           costs: dict, ceilings: dict, budget: tuple[str, ...]) -> list[str]:
    ran = [m for m in methods if any(results.get((c, m.key, s)) for c in cells for s in SEEDS)]
    common = tuple(c for c in cells  # the summary compares methods on the same cells
                   if all(any(results.get((c, m.key, s)) for s in SEEDS) for m in ran))
    pairs = {m.key: [(c, results[(c, m.key, s)]) for c in common for s in SEEDS
                     if results.get((c, m.key, s))] for m in methods}
    runs = {key: [r for _, r in p] for key, p in pairs.items()}
    link = next((c.link for c in costs.values() if c is not None), None) \
        or dt.link_seconds_per_record(load_model(MODEL))
    lines = ["", "## At the paper's scale: accuracy gained and device hours spent", "",
             f"`{MODEL.relative_to(ROOT)}` (MCUNet-class, 64x64x3, docs/scale.md) adapted to "
             f"{', '.join(cells)} at severity {SEVERITY} (CIFAR-10-C definitions), "
             f"seeds {', '.join(map(str, SEEDS))}, `{' '.join(budget)}` and otherwise the "
             "defaults (`--lr auto`, the training guard; sparse: `--block auto`). Accuracy: "
             f"the 1000 corrupted test images, mean over seeds and the cells every method ran "
             f"({', '.join(common)}). Device hours: every "
             "training step, lr trial step, block trial step, guard check and held-out record "
             "the run's log shows, at the instructions measured under QEMU `-icount` and the "
             f"board's clock, plus {link:.2f} s per record over the link at {DEFAULT_BAUD} baud "
             "(host/device_time.py, as `zocodegen device-time` adds them up), to the step the "
             "run ended at: its last, or the guard's stop (`--patience`, docs/training.md); "
             "the hours to 90 % of the gain are those of the first test evaluation at or above "
             "it (`zocodegen device-time RUN` prints them with 50 and 80 % and draws test "
             "accuracy against device hours into RUN/curves.png).", "",
             "| board | method | before | after | gain (points) | share of the FP32 gain | "
             "device hours: compute + link | hours to 90 % of the gain | guard rollbacks |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    plainly = []
    for m in methods:
        if not runs[m.key]:
            continue
        x = _summary(runs[m.key], costs.get(m.key), m.batch)
        if "compute" in x and x.get("to90") is not None:
            plainly.append(f"{m.label} on the {m.board}: {100 * x['gain']:+.1f} points in "
                           f"{x['compute'] + x['link']:.1f} device hours, 90 % of the gain "
                           f"after {x['to90']:.1f} h")
        hours = (f"{x['compute']:.2f} + {x['link']:.2f}" if "compute" in x
                 else "simulator only")
        to90 = (f"{x['to90']:.2f} ({x['reached']} of {len(runs[m.key])} runs)"
                if x.get("to90") is not None else "-")
        share = capture(pairs[m.key], ceilings)
        lines.append(f"| {m.board or '-'} | {m.label} | {pct(x['before'])} | {pct(x['after'])} "
                     f"| {100 * x['gain']:+.1f} | {'-' if share is None else f'{100 * share:.0f} %'} "
                     f"| {hours} | {to90} | {x['rollbacks']:.1f} |")
    if ceilings:
        ceiling = mean([ceilings[c] for c in common if c in ceilings])
        lines.append(f"| - | FP32 back-propagation of all layers, re-quantized (ceiling) | | "
                     f"{pct(ceiling)} | | 100 % | | | |")
    if plainly:
        lines += ["", "Plainly, for one corruption: " + "; ".join(plainly) + "."]
    big = costs.get("ours-128")
    if big is not None and runs.get(OURS.key):
        times = [run_seconds(r, big) for r in runs[OURS.key]]
        lines += ["", f"At the paper's 128x128 (`{MODEL_128.relative_to(ROOT)}`), full training "
                  f"on the H7B3 costs {big.step:.1f} s a step (Q = {QUERIES}) and "
                  f"{big.link:.2f} s a record on the link: the same runs as \"ours\" above "
                  f"would take {mean([t[0] for t in times]) / 3600:.1f} + "
                  f"{mean([t[1] for t in times]) / 3600:.1f} device hours (compute + link)."]
    lines += ["", "Per corruption: test accuracy %, seed 1 / seed 2 (the gain over no "
              "adaptation in brackets):", "",
              "| method | " + " | ".join(cells) + " |", "|---|" + "---|" * len(cells)]
    for m in methods:
        row = []
        for c in cells:
            rs = [results.get((c, m.key, s)) for s in SEEDS]
            rs = [r for r in rs if r]
            gain = mean([r["after"] - r["before"] for r in rs])
            row.append(" / ".join(pct(r["after"]) for r in rs)
                       + (f" ({100 * gain:+.1f})" if rs else ""))
        lines.append(f"| {m.label} | " + " | ".join(row) + " |")
    first = [next((results[(c, k, s)] for k in runs for s in SEEDS
                   if results.get((c, k, s))), None) for c in cells]
    lines.append("| no adaptation | " + " | ".join(pct(r["before"]) if r else "" for r in first)
                 + " |")
    if ceilings:
        lines.append("| FP32 ceiling | " + " | ".join(pct(ceilings.get(c, float("nan")))
                                                      for c in cells) + " |")
    return lines + ["", f"Accuracy against device hours, per corruption: "
                    f"{', '.join(f'[{c}](scale/{c}.png)' for c in cells)}.", ""]


def plot(cells: tuple[str, ...], methods: tuple[Method, ...], results: dict,
         costs: dict, ceilings: dict) -> None:
    """docs/scale/CELL.png: test accuracy against device hours, one line per method and
    seed (device methods only; seed 2 dashed), the FP32 ceiling dotted."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    PLOTS.mkdir(parents=True, exist_ok=True)
    for c in cells:
        fig, ax = plt.subplots(figsize=(6, 4))
        for k, m in enumerate(methods):
            if costs.get(m.key) is None:
                continue
            for s in SEEDS:
                r = results.get((c, m.key, s))
                if not r:
                    continue
                cost = costs[m.key]
                if r.get("block") is not None and cost.block_steps:
                    cost = dt.Costs(cost.block_steps[r["block"]], cost.forward, cost.link,
                                    cost.block_steps)
                shape = dt.run_shape(r["log"], r["steps"], 1)
                hours = [sum(dt.seconds_at(step, shape, cost)) / 3600 for step, _ in r["curve"]]
                ax.plot(hours, [100 * a for _, a in r["curve"]], color=f"C{k}",
                        linestyle="-" if s == SEEDS[0] else "--",
                        label=f"{m.key} ({m.board})" if s == SEEDS[0] else None)
        if c in ceilings:
            ax.axhline(100 * ceilings[c], color="grey", linestyle=":", label="FP32 ceiling")
        if not ax.get_legend_handles_labels()[0]:
            plt.close(fig)
            continue
        ax.set_xlabel("device hours (compute + link)")
        ax.set_ylabel("test accuracy %")
        ax.set_title(f"{c}, severity {SEVERITY}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(PLOTS / f"{c}.png", dpi=80)
        plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update docs/experiment.md")
    parser.add_argument("--quick", action="store_true",
                        help="two cells (or --cells), one seed, 100 steps (or --steps): a smoke "
                        "test, writes nothing")
    parser.add_argument("--steps", type=int, default=100,
                        help="with --quick: the steps of each run (default 100)")
    parser.add_argument("--workers", type=int, default=WORKERS)
    parser.add_argument("--cells", help="comma-separated corruptions (default: "
                        f"{','.join(CELLS)}; 'table7': all twelve)")
    parser.add_argument("--methods", help="comma-separated method keys (default: all)")
    parser.add_argument("--report", action="store_true",
                        help="run nothing: report (and with --write, write) the finished runs")
    parser.add_argument("--seeds", help="comma-separated seeds to run (default: "
                        f"{','.join(map(str, SEEDS))}; the report reads whatever ran)")
    parser.add_argument("--runs", type=Path, default=RUNS,
                        help=f"cache of run folders (default {RUNS.relative_to(ROOT)})")
    parser.add_argument("--epochs", type=int, default=EPOCHS,
                        help=f"the budget in epochs (default {EPOCHS}); other budgets keep "
                        "their runs in build/scale/epochs-E and write no docs")
    args = parser.parse_args(argv)
    cells = (corruptions_available() if args.cells == "table7"
             else tuple(args.cells.split(",")) if args.cells else CELLS)
    # every layer, as the paper trains them (the command line now defaults to --layers first)
    budget = ("--epochs", str(args.epochs), "--queries", str(QUERIES), "--layers", "all")
    seeds = SEEDS
    root = args.runs if args.epochs == EPOCHS else args.runs / f"epochs-{args.epochs}"
    if args.quick:
        cells = cells if args.cells else cells[:2]
        seeds, budget, root = SEEDS[:1], ("--steps", str(args.steps), "--queries",
                                          str(QUERIES), "--layers", "all"), args.runs / "quick"
    methods = METHODS + (bp_fits_method(MODEL),)
    if args.methods:
        wanted = args.methods.split(",")
        methods = tuple(m for m in methods + (MEZO, ADAPTIVE, SPARSE_ADAPTIVE, BATCH_4) if m.key in wanted)
    for c in cells:
        data_path(root, c)
    if args.seeds:
        seeds = tuple(int(k) for k in args.seeds.split(","))
    jobs = [(Run(c, m.run_name, s), m) for c in cells for m in methods for s in seeds]
    if args.report:
        jobs = [(run, m) for run, m in jobs if (run.directory(root) / "result.json").is_file()]
    started = time.perf_counter()
    with ThreadPoolExecutor(args.workers) as pool:
        done = list(pool.map(lambda job: execute(job[0], job[1], root, budget), jobs))
    results = {(run.corruption, m.key, run.seed): r for (run, m), r in zip(jobs, done)}
    print(f"{len(jobs)} runs in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    times_path = root / "device_time.json"
    cache = json.loads(times_path.read_text()) if times_path.is_file() else {}
    with np.load(data_path(root, cells[0])) as data:
        images = data["x_test"][:3]
    costs = {m.key: method_costs(m, images, cache) for m in methods}
    if any(m.key == OURS.key for m in methods):
        costs["ours-128"] = costs_128(images, cache)
    times_path.write_text(json.dumps(cache, indent=1) + "\n")
    ceilings = json.loads(CEILINGS.read_text()) if CEILINGS.is_file() else {}
    lines = report(cells, methods, results, costs, ceilings, budget)
    print("\n".join(lines))
    if args.write and not args.quick and args.epochs == EPOCHS:
        replace_section(DOC, BEGIN, END, "\n".join(lines))
        plot(cells, methods, results, costs, ceilings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
