"""Training benchmark (not a test): the forward kernels of one training step per layer, from
the profiling build with both hooks (-DZO_PROFILE_TRAIN -DZO_PROFILE_LAYERS) under
`qemu-system-arm -M mps2-an500 -icount shift=0`: each layer's instructions in the step (every
forward through it: the clean forward, the queries' partial forwards, the advances of the
saved activations, and its own kernel as the estimators run it: WP queries, NP's shifted
outputs), how many times it ran, and its instructions per MAC.

    .venv/bin/python benchmarks/training_layers.py              # the scale model, Q = 1 and 2
    .venv/bin/python benchmarks/training_layers.py --per-layer  # also every layer's row
    .venv/bin/python benchmarks/training_layers.py --write      # update docs/benchmarks.md

Full training with the command line's defaults otherwise, N = 1, the second step, on the
H7B3's budget (templates/train/zo_train.h: after the step's category records the firmware
sends one record per layer with its cycles and one with its runs). A step's kernel work is
linear in Q (each query re-runs the layers after the perturbed one), so every layer is
measured at Q = 1 and Q = 2 and extrapolated to Q = 20 and the device's Q = 50 (a + b Q for
instructions and runs alike). MACs count CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED with
the whole filter (padding taps too), as benchmarks/inference.py does; the ADD, pooling and
other rows count instructions only, and the "forward kernels" line divides every layer's
instructions by the MACs. Runtime: about 3 minutes with the firmware cached.
"""
from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
from contextlib import redirect_stdout
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

from doc_sections import replace_section  # noqa: E402
from inference import family, shape  # noqa: E402
from training_overheads import TARGET, commit, second_step  # noqa: E402

MODEL = REPO / "tests" / "fixtures" / "scale_model.tflite"
PROFILE = "-DZO_PROFILE_TRAIN -DZO_PROFILE_LAYERS"
OP, OP_RUNS = 2000, 3000  # zo_train.h: ZO_PROFILE_OP, ZO_PROFILE_OP_RUNS
QUERIES = (1, 2)
EXTRAPOLATED = (20, 50)
DOC = REPO / "docs" / "benchmarks.md"
HEADING = "## Training step: the forward kernels per layer"
BEGIN, END = "<!-- training-layers:begin -->", "<!-- training-layers:end -->"


def profile_layers(model: Path, tmp: Path, queries: int) -> tuple[list[int], list[int], int]:
    """Per model layer: instructions and runs in the second step at Q = ``queries``; and the
    step's own count."""
    from zocodegen.frontends import load_model
    from zocodegen.training.config import TrainConfig
    config = TrainConfig(steps=2, queries=queries, batch=1, mode="full")
    step, telemetry = second_step(model, tmp, config, PROFILE)
    records = {t.layer: t.cycles for t in telemetry if t.layer >= OP}
    count = len(load_model(model).ops)
    if sorted(records) != [OP + i for i in range(count)] + [OP_RUNS + i for i in range(count)]:
        raise RuntimeError(f"{model.name}: no per-layer records (built with {PROFILE}?)")
    return ([records[OP + i] for i in range(count)],
            [records[OP_RUNS + i] for i in range(count)], step.cycles)


def extrapolate(at: dict[int, list[int]], q: int) -> list[float]:
    """a + b q per layer from the values at Q = 1 and 2."""
    one, two = at[1], at[2]
    return [a + (b - a) * (q - 1) for a, b in zip(one, two)]


def measure(model: Path) -> dict:
    from zocodegen.frontends import load_model
    from zocodegen.ops.table import macs
    graph = load_model(model)
    instructions, runs, steps = {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp, redirect_stdout(sys.stderr):
        for q in QUERIES:
            print(f"  {model.name}, Q = {q} ...", file=sys.stderr, flush=True)
            instructions[q], runs[q], steps[q] = profile_layers(model, Path(tmp), q)
    layers = [dict(index=i, op=op.type, family=family(graph, op), shape=shape(graph, op),
                   macs=macs(graph, op)) for i, op in enumerate(graph.ops)]
    return dict(model=model.name, layers=layers, instructions=instructions, runs=runs,
                steps=steps)


def per_mac(instructions: float, macs: float) -> str:
    return f"{instructions / macs:.2f}" if macs else "-"


def summary_table(result: dict) -> list[str]:
    """Per op family and for all layers: instructions and instructions per MAC at each Q."""
    qs = list(QUERIES) + list(EXTRAPOLATED)
    columns = {q: (result["instructions"][q], result["runs"][q]) if q in QUERIES
               else (extrapolate(result["instructions"], q), extrapolate(result["runs"], q))
               for q in qs}
    head = " | ".join(f"Q = {q}{' (extrapolated)' if q in EXTRAPOLATED else ''}: "
                      f"instructions, share, instr / MAC" for q in qs)
    lines = [f"| op family | layers | {head} |", "|---|---:|" + "---:|" * len(qs)]
    groups: dict[str, list[int]] = {}
    for layer in result["layers"]:
        groups.setdefault(layer["family"], []).append(layer["index"])
    every = [layer["index"] for layer in result["layers"]]
    for name, members in list(groups.items()) + [("**forward kernels**", every)]:
        cells = []
        for q in qs:
            ins, runs = columns[q]
            total = sum(ins)
            got = sum(ins[i] for i in members)
            macs = sum(runs[i] * result["layers"][i]["macs"] for i in members)
            cells.append(f"{got / 1e6:,.1f} M, {100 * got / total:.1f} %, {per_mac(got, macs)}")
        lines.append(f"| {name} | {len(members)} | {' | '.join(cells)} |")
    return lines


def layer_table(result: dict) -> list[str]:
    q = EXTRAPOLATED[-1]
    ins, runs = extrapolate(result["instructions"], q), extrapolate(result["runs"], q)
    lines = [f"| layer | op | shape | MACs per run | runs (Q = {q}) | instructions (Q = {q}) "
             f"| share | instr / MAC |", "|---:|---|---|---:|---:|---:|---:|---:|"]
    total = sum(ins)
    for layer in result["layers"]:
        i = layer["index"]
        lines.append(f"| {i} | {layer['op']} | {layer['shape']} | {layer['macs']:,} | "
                     f"{runs[i]:,.0f} | {ins[i] / 1e6:,.2f} M | {100 * ins[i] / total:.1f} % | "
                     f"{per_mac(ins[i], runs[i] * layer['macs'])} |")
    return lines


def report(result: dict, per_layer: bool) -> str:
    steps = ", ".join(f"Q = {q}: {result['steps'][q]:,}" for q in QUERIES)
    lines = [f"Measured {datetime.date.today()} at commit {commit()} with "
             f"`benchmarks/training_layers.py` ({result['model']}, full training, N = 1, the "
             f"second step, {TARGET} budget, profiling build `{PROFILE}`; instructions per "
             f"step {steps}). The forward kernels of the step per op family:", ""]
    lines += summary_table(result)
    if per_layer:
        lines += ["", "Per layer:", ""] + layer_table(result)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--per-layer", action="store_true", help="also every layer's row")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()
    text = report(measure(args.model), args.per_layer)
    print(text)
    if args.write:
        replace_section(DOC, BEGIN, END, text, HEADING)


if __name__ == "__main__":
    main()
