"""`inspect`'s device-time estimates against QEMU -icount, on every model we have (issue 64):
measure, refit the costs, report the worst.

    .venv/bin/python benchmarks/inspect_costs.py measure     # QEMU: every model, both boards
    .venv/bin/python benchmarks/inspect_costs.py fit         # costs that fit the measurements
    .venv/bin/python benchmarks/inspect_costs.py report [--write]   # estimate vs measured
    .venv/bin/python benchmarks/inspect_costs.py check MODEL   # a model the fit has not seen

`measure` writes benchmarks/data/inspect_costs.json: for every model in tests/fixtures and
../shared/models (and the classifiers the tests generate, tests/generated_models.py) an inference, whole and
per layer (the -DZO_PROFILE_LAYERS build, benchmarks/inference.py), and on each board the
training step of the build `inspect --target` names (the default run; for a sparse run whose
device picks its block, the blocks estimated slowest and fastest), plus the builds the step
costs were historically fitted on (batch 2, the adaptive estimator, every layer), each at Q =
2 and 3 (host/device_time.py step_instructions; a step grows by the same count per query from
Q = 2 on). `fit` prints board_fit.FAMILY_COST and STEP_COSTS fitted together (two linear
programs: the least largest relative error any non-negative costs reach over every recorded
inference and step, then within SLACK of it the costs nearest the per-layer fit) and each
model's error under costs fitted without it. `report` prints, with the costs in
board_fit.py, every cell's estimate, measurement and difference and the worst, which is the
bound `inspect` states (board_fit.ESTIMATE_BOUND, INFERENCE_BOUND); tests/test_board_fit.py
holds the costs to the bounds on this file's cells.

Runtime: about 10 minutes for `measure` on 2 shared cores (QEMU and two firmware builds per
step cell, ccache warm); `--only NAME` measures the models whose file name contains NAME and
keeps the other rows. `fit` about 30 seconds (with a fit per model left out), `report` 10
seconds.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

from doc_sections import replace_section  # noqa: E402

SHARED = REPO.parent / "shared" / "models"
DATA = REPO / "benchmarks" / "data" / "inspect_costs.json"
DOC = REPO / "docs" / "training.md"
BEGIN, END = "<!-- inspect-costs:begin -->", "<!-- inspect-costs:end -->"
BOARDS = ("stm32f746", "stm32h7b3")
QUERIES = (20, 50)  # the command line's default, the paper's
#: The fit takes the costs nearest the per-layer fit whose largest error is at most this
#: far above the least largest error any costs reach, a step cost's distance from
#: STEP_PRIOR weighing STEP_PRIOR_WEIGHT times a family cost's (chosen among slack 1-3
#: points and weights 1-100 by the two MLPerf Tiny models the record does not hold, VWW and
#: the large ResNet: docs/training.md "Device time before a run").
SLACK = 0.01
STEP_PRIOR_WEIGHT = 10
#: What the step costs are drawn towards: per perturbed value, outer-product MAC and
#: parameter as first fitted (2026-11-28, on a1c096c); the scales' cost has no prior.
STEP_PRIOR = (73.7, 14.4, 102.7, None)
#: Least costs the data cannot pin: our models' fully connected layers are all small heads
#: (5-12 outputs), where a MAC and an output value cannot be told apart; a MAC of an FC
#: costs at least what one of a 1x1 convolution does (the same dot product, 0.98).
FLOOR = {("FULLY_CONNECTED", 0): 0.98}
#: Which of board_fit.COUNTS each family's kernel is priced in (MACs, kernel taps, output
#: values, input values, the op); the others stay 0.
PRICED = {"CONV_2D 1x1": (0, 2, 4), "CONV_2D kxk": (0, 1, 2, 4), "DEPTHWISE_CONV_2D": (0, 2, 4),
          "DEPTHWISE_CONV_2D multiplier": (0, 2, 4), "FULLY_CONNECTED": (0, 2, 4),
          "ADD/MUL": (2, 4), "pooling": (2, 3, 4), "softmax": (2, 4), "view": (4,),
          "quantize": (2, 4), "other": (2, 4)}
#: Builds measured beside each board's default run: what the step costs were first fitted on
#: (batch 2, the adaptive estimator, every layer, sparse blocks of every layer) and
#: builds without --scales.
EXTRA = [("digits_cnn.tflite", "stm32f746", {"batch": 2}),
         ("digits_cnn.tflite", "stm32f746", {"estimator": "adaptive"}),
         ("digits_cnn.tflite", "stm32f746", {"estimator": "adaptive", "batch": 2}),
         ("digits_cnn.tflite", "stm32f746", {"no_scales": None}),
         ("pretrainedResnet_quant.tflite", "stm32f746", {"no_scales": None}),
         ("scale_model.tflite", "stm32h7b3", {"layers": "all"}),
         ("scale_model.tflite", "stm32h7b3", {"layers": "all", "estimator": "adaptive"}),
         ("scale_model.tflite", "stm32f746", {"layers": "all", "train": "sparse", "block": 0}),
         ("scale_model.tflite", "stm32f746", {"layers": "all", "train": "sparse", "block": 2})]


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def models(build: Path) -> list[Path]:
    """Every model file of tests/fixtures and ../shared/models, and the tests' generated
    classifiers (tests/generated_models.py, written into ``build``)."""
    found = sorted((REPO / "tests" / "fixtures").glob("*.tflite"))
    found += sorted((REPO / "tests" / "fixtures").glob("*.onnx"))
    found += sorted(SHARED.glob("*.tflite"))
    from generated_models import generate_all
    return found + list(generate_all(build).values())


# ---- the builds a cell measures --------------------------------------------------------

def command_line_run(model: Path, board: str, words: list[str]):
    """The run `build MODEL --target BOARD WORDS` resolves (its fit search included)."""
    from zocodegen.cli_options import build_parser, train_config
    from zocodegen.codegen.fit import fit
    from zocodegen.codegen.project import BuildOptions
    from zocodegen.frontends import load_model
    args = build_parser().parse_args(["build", str(model), "--target", board, *words])
    _, options = fit(load_model(model), BuildOptions("native", board, train_config(args),
                                                     estimator_fit=args.estimator is None))
    return options.train


def stored(config) -> dict:
    """The fields of a TrainConfig that differ from its defaults, as JSON."""
    from zocodegen.training.config import TrainConfig
    default = TrainConfig()
    return {f.name: list(v) if isinstance(v, tuple) else v
            for f in dataclasses.fields(config)
            if (v := getattr(config, f.name)) != getattr(default, f.name)}


def restored(fields: dict, queries: int):
    """The measured build at ``queries`` (no lr trials, checks or steps beyond one: what a
    step costs, not what a run adds to its steps)."""
    from zocodegen.training.config import TrainConfig
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
    return dataclasses.replace(TrainConfig(**values), queries=queries, steps=1, lr_auto=False,
                               guard=False, budget=0.0)


def estimate(model: Path, board: str, fields: dict, queries: int, family_cost=None):
    """board_fit.step_work of the cell's build at ``queries`` (``family_cost``: other op
    costs than board_fit's)."""
    from zocodegen.board_fit import FAMILY_COST, step_work
    from zocodegen.codegen.fit import fit
    from zocodegen.codegen.project import BuildOptions, plan_project
    from zocodegen.frontends import load_model
    device, options = fit(load_model(model), BuildOptions("native", board,
                                                          restored(fields, queries)))
    training = plan_project(device, options).training
    block = options.train.block if len(training.models) > 1 else 0
    return step_work(device, training, block or 0, family_cost or FAMILY_COST)


def default_cells(model: Path, board: str) -> list[dict]:
    """The step cells of ``board``'s default run: inspect's named build, every block of a
    sparse run picked on the device reduced to the slowest and the fastest estimated."""
    from zocodegen import api
    found = api.inspect(model, target=board).board_fit
    named = found.fitting
    if named is None:
        return []
    fields = stored(command_line_run(model, board, named.option.split()))
    seconds = named.step_seconds
    if len(seconds) == 1 or fields.get("block") is not None:
        return [dict(option=named.option, config=fields)]
    blocks = sorted({seconds.index(max(seconds)), seconds.index(min(seconds))})
    return [dict(option=f"{named.option} --block {k}", config={**fields, "block": k})
            for k in blocks]


def extra_cells(model: Path, board: str) -> list[dict]:
    cells = []
    for name, on, given in EXTRA:
        if name == model.name and on == board:
            words = [w for k, v in {"train": "auto", **given}.items()
                     for w in (f"--{k.replace('_', '-')}", *([] if v is None else [str(v)]))]
            fields = stored(command_line_run(model, board, words))
            cells.append(dict(option=" ".join(words), config=fields))
    return cells


# ---- measure ---------------------------------------------------------------------------

def measure_inference(model: Path) -> dict:
    from inference import measure
    row = measure(model, samples=1, portable=False, profile=True)
    return {k: row[k] for k in ("model", "board", "instructions", "profiled", "layers")}


def measure_steps(model: Path, board: str) -> list[dict]:
    from zocodegen.host.device_time import step_instructions
    rows = []
    for cell in default_cells(model, board) + extra_cells(model, board):
        log(f"  {model.name} {board}: {cell['option']}")
        with tempfile.TemporaryDirectory() as tmp:
            q2, q3 = (step_instructions(model, board, restored(cell["config"], q), Path(tmp))
                      for q in (2, 3))
        rows.append(dict(model=model.name, board=board, **cell, q2=q2, q3=q3))
    return rows


def measure(only: list[str] | None, build: Path) -> None:
    from zocodegen.errors import UserError
    old = json.loads(DATA.read_text()) if DATA.is_file() else {"inference": [], "steps": []}
    chosen = [m for m in models(build) if only is None or any(n in m.name for n in only)]
    keep = lambda row: not any(row["model"] == m.name for m in chosen)  # noqa: E731
    data = {"inference": [r for r in old["inference"] if keep(r)],
            "steps": [r for r in old["steps"] if keep(r)], "refused": [
                r for r in old.get("refused", []) if keep(r)]}
    for model in chosen:
        log(f"{model.name} ...")
        try:
            data["inference"].append(measure_inference(model))
            for board in BOARDS:
                data["steps"] += measure_steps(model, board)
        except (UserError, RuntimeError, ValueError) as exc:  # a model zocodegen refuses
            why = str(exc).splitlines()[0].replace(f"{model}: ", "")
            data["refused"].append(dict(model=model.name, why=why[:200]))
            log(f"  refused: {data['refused'][-1]['why']}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=REPO).stdout.strip()
    data.update(measured=f"{datetime.date.today()} on {commit}")
    for key in ("inference", "steps", "refused"):
        data[key].sort(key=lambda r: (r["model"], r.get("board", ""), r.get("option", "")))
    DATA.write_text(json.dumps(data, indent=1) + "\n")
    log(f"wrote {DATA.relative_to(REPO)}")


# ---- fit and report ----------------------------------------------------------------------

def present(data: dict, build: Path) -> dict:
    """``data`` with only the rows whose model is here (../shared may be absent), and each
    model's path under "paths"."""
    paths = {m.name: m for m in models(build)}
    absent = sorted({r["model"] for r in data["inference"] if r["model"] not in paths})
    if absent:
        log(f"left out (not here): {', '.join(absent)}")
    return {**data, "paths": paths,
            **{key: [r for r in data[key] if r["model"] in paths]
               for key in ("inference", "steps")}}


def measured_at(row: dict, queries: int) -> float:
    return row["q2"] + (row["q3"] - row["q2"]) * (queries - 2)


@functools.cache
def layer_counts(path: Path, board: str) -> list[tuple[str, tuple]]:
    """Each op's family and board_fit.op_counts in the graph the recorded inference ran (the
    profiling build's layers, in order); once per model (the leave-one-out fits ask again)."""
    from zocodegen.board_fit import family, op_counts
    from zocodegen.codegen.fit import device_graph
    from zocodegen.codegen.project import BuildOptions
    from zocodegen.frontends import load_model
    graph = device_graph(load_model(path), BuildOptions("qemu", board))
    return [(family(graph, op), op_counts(graph, op)) for op in graph.ops]


def per_layer_costs(data: dict, units: list) -> list[float]:
    """Each free FAMILY_COST parameter by least squares over the profiled layers of its
    family (the profiling build's few instructions per layer taken off; each model's
    layers weighted by 1 / its inference, so a small model counts as much as a large one),
    non-negative. A model whose patch-based stage runs several layers as one (a layer of
    a few instructions) is left out: its layers' counts are not theirs."""
    import numpy as np
    samples: dict[str, list] = {}
    for row in data["inference"]:
        counts = layer_counts(data["paths"][row["model"]], row["board"])
        if len(counts) != len(row["layers"]) or any(
                layer["instructions"] < 100 and layer["macs"] for layer in row["layers"]):
            continue
        overhead = (row["profiled"] - row["instructions"]) / len(row["layers"])
        for (family, n), layer in zip(counts, row["layers"]):
            samples.setdefault(family, []).append(
                (*n, layer["instructions"] - overhead, 1 / row["instructions"]))
    fitted: dict[tuple[str, int], float] = {}
    for family, ks in PRICED.items():
        points = np.array(samples.get(family, []), float).reshape(-1, 7)
        if not len(points):
            continue
        w = points[:, 6:7]
        solution = np.linalg.lstsq(points[:, list(ks)] * w, points[:, 5] * w[:, 0],
                                   rcond=None)[0]
        fitted.update({(family, k): max(float(v), 0.0) for k, v in zip(ks, solution)})
    return [fitted.get((f, k), 0.0) for f, k, _ in units]


def _unit_costs() -> list[tuple[str, int, dict]]:
    """FAMILY_COST's free parameters (PRICED), each as the cost table with that parameter
    1 and every other 0."""
    zero = {f: (0.0,) * 5 for f in PRICED}
    units = []
    for family, ks in PRICED.items():
        for k in ks:
            cost = [0.0] * 5
            cost[k] = 1.0
            units.append((family, k, {**zero, family: tuple(cost)}))
    return units


def cost_rows(data: dict) -> tuple[list, list[str], "np.ndarray"]:
    """The fit's rows: each recorded inference and each recorded step at QUERIES as its
    coefficients on every free cost (FAMILY_COST's, then STEP_COSTS'), divided by what QEMU
    measured (both are linear in the costs: a step's forwards are op costs times how often
    the step runs each op); with the model of each row."""
    import numpy as np
    from zocodegen.board_fit import FAMILY_COST, STEP_COSTS, step_work
    from zocodegen.codegen.fit import fit
    from zocodegen.codegen.project import BuildOptions, plan_project
    from zocodegen.frontends import load_model
    units = _unit_costs()
    rows, names = [], []
    for row in data["inference"]:
        per = {(f, k): 0.0 for f, k, _ in units}
        for family, counts in layer_counts(data["paths"][row["model"]], row["board"]):
            for k, n in enumerate(counts):
                if (family, k) in per:
                    per[family, k] += n
        rows.append([per[f, k] / row["instructions"] for f, k, _ in units]
                    + [0.0] * len(STEP_COSTS))
        names.append(row["model"])
    for row in data["steps"]:
        for q in QUERIES:
            model = data["paths"][row["model"]]
            device, options = fit(load_model(model), BuildOptions(
                "native", row["board"], restored(row["config"], q)))
            training = plan_project(device, options).training
            block = (options.train.block or 0) if len(training.models) > 1 else 0
            measured = measured_at(row, q)
            forwards = [step_work(device, training, block, cost).forwards
                        for _, _, cost in units]
            counts = step_work(device, training, block, FAMILY_COST).counts()
            rows.append([n / measured for n in forwards + list(counts)])
            names.append(row["model"])
    return units, names, np.array(rows)


def fit_costs(units: list, a, prior: list) -> tuple["np.ndarray", float]:
    """Every cost non-negative (at least FLOOR): first the least largest relative error t*
    any costs reach over the rows ``a``, then, within SLACK of it, the costs nearest ``prior`` (the per-layer
    fit: what each kernel costs alone, so that a model unlike ours is priced by its kernels
    rather than by our models' mix). Linear programs (scipy's linprog)."""
    import numpy as np
    from scipy.optimize import linprog
    width = a.shape[1]
    ones, none = np.ones(len(a)), np.zeros((len(a), width))
    # minimise t with -t <= a x - 1 <= t, x >= 0
    least = [FLOOR.get((f, k), 0.0) for f, k, _ in units] + [0.0] * (width - len(units))
    best = linprog([0] * width + [1], A_ub=np.block([[a, -ones[:, None]],
                                                    [-a, -ones[:, None]]]),
                   b_ub=np.concatenate([ones, -ones]),
                   bounds=[(v, None) for v in least] + [(0, None)]).x[-1]
    # minimise sum w |x - prior| with |a x - 1| <= t* + SLACK: over x and d >= |x - prior|
    weight = [0.0 if v is None else 1 / max(v, 1.0) for v in prior]  # None: free
    weight[len(units):] = [STEP_PRIOR_WEIGHT * w for w in weight[len(units):]]
    centre = np.array([v or 0.0 for v in prior])
    eye, bound = np.eye(width), best + SLACK
    x = linprog([0] * width + weight,
                A_ub=np.block([[a, none], [-a, none], [eye, -eye], [-eye, -eye]]),
                b_ub=np.concatenate([ones + bound, bound - ones, centre, -centre]),
                bounds=[(v, None) for v in least] + [(0, None)] * width).x[:width]
    return x, float(np.abs(a @ x - 1).max())


def fitted_tables(units: list, x) -> tuple[dict, tuple]:
    """The costs ``x`` as board_fit.FAMILY_COST and STEP_COSTS."""
    from zocodegen.board_fit import FAMILY_COST
    family_cost = {f: [0.0] * 5 for f in FAMILY_COST}
    for (family, k, _), value in zip(units, x):
        family_cost[family][k] = round(float(value), [3, 2, 2, 2, 0][k])
    return ({f: tuple(c) for f, c in family_cost.items()},
            tuple(round(float(v), 1) for v in x[len(units):]))


def print_fit(data: dict) -> None:
    """Print the costs fitted to every row, and each model's error under costs fitted
    without it (how far off a model the fit has not seen may be)."""
    import numpy as np
    units, names, a = cost_rows(data)
    prior = per_layer_costs(data, units) + list(STEP_PRIOR)
    x, worst = fit_costs(units, a, prior)
    family_cost, step_costs = fitted_tables(units, x)
    print("FAMILY_COST = " + json.dumps(family_cost).replace("[", "(").replace("]", ")"))
    print(f"STEP_COSTS = {step_costs}")
    print(f"largest relative error over every row: {100 * worst:.1f} %")
    names = np.array(names)
    for model in sorted(set(names)):
        mine = names == model
        others = {**data, "inference": [r for r in data["inference"] if r["model"] != model]}
        held, _ = fit_costs(units, a[~mine], per_layer_costs(others, units)
                            + list(STEP_PRIOR))
        errors = a[mine] @ held - 1
        print(f"  {model}: fitted without it, off by {100 * errors.min():+.1f} % to "
              f"{100 * errors.max():+.1f} % (with it: "
              f"{100 * np.abs(a[mine] @ x - 1).max():.1f} % at most)")


def inference_errors(data: dict) -> list[tuple[str, float, float]]:
    """Each recorded inference: the estimate of the graph the device ran, and QEMU's count."""
    from zocodegen.board_fit import inference_instructions
    from zocodegen.codegen.fit import device_graph
    from zocodegen.codegen.project import BuildOptions
    from zocodegen.frontends import load_model
    return [(row["model"], inference_instructions(device_graph(
        load_model(data["paths"][row["model"]]), BuildOptions("qemu", row["board"]))),
        row["instructions"]) for row in data["inference"]]


def step_errors(data: dict) -> list[tuple[dict, int, float, float]]:
    from zocodegen.board_fit import clock_hz
    out = []
    for row in data["steps"]:
        for q in QUERIES:
            work = estimate(data["paths"][row["model"]], row["board"], row["config"], q)
            out.append((row, q, work.instructions() / clock_hz(row["board"]),
                        measured_at(row, q) / clock_hz(row["board"])))
    return out


def seconds(value: float) -> str:
    return f"{1000 * value:.1f} ms" if value < 1 else f"{value:.2f} s"


def report(data: dict) -> str:
    from zocodegen.board_fit import clock_hz
    f746 = clock_hz("stm32f746")
    lines = [f"Measured {data['measured']} (`benchmarks/inspect_costs.py measure`), the costs "
             "of board_fit.py (`report`).", "",
             "| model | an inference: estimate | QEMU | difference |", "|---|---:|---:|---:|"]
    inference = inference_errors(data)
    for name, est, got in inference:
        lines.append(f"| {name} | {seconds(est / f746)} | {seconds(got / f746)} | "
                     f"{100 * (est / got - 1):+.1f} % |")
    lines += ["", "(at the F746's 216 MHz)", "",
              "| model | board | the build | a step at Q = 20: estimate | QEMU | difference "
              "| Q = 50: estimate | QEMU | difference |",
              "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    steps = step_errors(data)
    for at20, at50 in zip(steps[::2], steps[1::2]):
        row = at20[0]
        lines.append(f"| {row['model']} | {row['board']} | `{row['option']}` | " + " | ".join(
            f"{seconds(est)} | {seconds(got)} | {100 * (est / got - 1):+.1f} %"
            for _, _, est, got in (at20, at50)) + " |")
    worst_inference = max(inference, key=lambda r: abs(r[1] / r[2] - 1))
    worst_step = max(steps, key=lambda r: abs(r[2] / r[3] - 1))
    lines += ["", f"Worst inference: {worst_inference[0]}, "
              f"{100 * (worst_inference[1] / worst_inference[2] - 1):+.1f} %. Worst step: "
              f"{worst_step[0]['model']} on the {worst_step[0]['board']} "
              f"(`{worst_step[0]['option']}`, Q = {worst_step[1]}), "
              f"{100 * (worst_step[2] / worst_step[3] - 1):+.1f} %."]
    if data.get("refused"):
        lines += ["", "Not measured (zocodegen refuses the model): " + "; ".join(
            f"{r['model']} ({r['why']})" for r in data["refused"])]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("measure", help="QEMU: every model's inference and steps")
    run.add_argument("--only", metavar="NAME", action="append",
                     help="the models whose file name contains NAME (repeatable)")
    commands.add_parser("fit", help="print FAMILY_COST and STEP_COSTS fitted to the data")
    other = commands.add_parser("check", help="QEMU: a model of one's own, not recorded")
    other.add_argument("model", type=Path)
    shown = commands.add_parser("report", help="every cell: estimate, measured, difference")
    shown.add_argument("--write", action="store_true", help="update docs/training.md")
    args = parser.parse_args()
    build = Path(tempfile.gettempdir()) / "zocodegen-inspect-costs"
    if args.command == "measure":
        measure(args.only, build)
        return
    if args.command == "check":
        model = args.model.resolve()
        data = {"measured": f"{datetime.date.today()}, not recorded", "refused": [],
                "inference": [measure_inference(model)],
                "steps": [r for board in BOARDS for r in measure_steps(model, board)],
                "paths": {model.name: model}}
        print(report(data))
        return
    data = present(json.loads(DATA.read_text()), build)
    if args.command == "fit":
        print_fit(data)
        return
    text = report(data)
    print(text)
    if args.write:
        replace_section(DOC, BEGIN, END, text, "## Device time before a run")


if __name__ == "__main__":
    main()
