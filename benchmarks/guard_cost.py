"""What the training guard and --lr auto cost, as a share of a run's forward passes, at the
defaults (issue 13: at most 10 %).

A training step evaluates ``plan.forwards_per_step`` perturbed forwards (partial, from the
perturbed layer on) plus N clean forwards; a guard check and a trial score run V full
forwards to the logits; a trial is ``trial_steps`` ordinary steps. The counts follow from the
schedule the firmware is built with (``guard_schedule``), so they are exact, not sampled.
Partial forwards are counted as whole ones, as the paper counts them; that makes the guard's
full forwards look cheaper than they are, so the table also gives the share in MACs.

    .venv/bin/python benchmarks/guard_cost.py [--write]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from doc_sections import replace_section  # noqa: E402
from zocodegen.frontends import load_model  # noqa: E402
from zocodegen.ops.table import macs as op_macs  # noqa: E402
from zocodegen.training.config import TrainConfig  # noqa: E402
from zocodegen.training.guard import guard_schedule  # noqa: E402
from zocodegen.training.plan import training_plan  # noqa: E402

SHARED = REPO.parent / "shared" / "models"
#: (label, model, steps T, Q, validation records available)
FIXTURES = REPO / "tests" / "fixtures"
CASES = [
    ("digits CNN, simulate defaults, 1 epoch of 486 records", FIXTURES / "digits_cnn.tflite",
     486, 100, 53),
    ("digits CNN, device defaults (Q = 50)", FIXTURES / "digits_cnn.tflite", 486, 50, 53),
    ("digits ResNet, simulate defaults", FIXTURES / "digits_resnet.tflite", 486, 100, 53),
    ("kws (DS-CNN), device, 1000 steps", SHARED / "kws_ref_model.tflite", 1000, 50, 500),
    ("MCUNet-in1 class fixture, device, 1000 steps", FIXTURES / "mcunet_in1.tflite",
     1000, 50, 500),
]


def cost(model: Path, steps: int, queries: int, val: int) -> dict:
    graph = load_model(model)
    config = TrainConfig(steps=steps, queries=queries, lr_auto=True, guard=True)
    plan = training_plan(graph, config)
    g = guard_schedule(plan)
    v = min(val, g.samples)
    n = config.batch
    step_fw = plan.forwards_per_step + n
    run = steps * step_fw
    checks = 1 + len([t for t in range(1, steps + 1) if t % g.every == 0 or t == steps])
    trials = len(g.candidates) * (g.trial_steps * step_fw + v)
    guard = checks * v
    macs = np.array([op_macs(graph, op) for op in graph.ops], dtype=np.int64)
    full = int(macs[:plan.logits_op + 1].sum())
    # a query forward from op k costs the MACs from k on; the clean forward all of them
    query = sum(int(macs[layer.op_index + (layer.mode == "NP"):plan.logits_op + 1].sum())
                * queries * n for layer in plan.layers)
    run_macs = steps * (query + n * full)
    extra_macs = (trials + guard - len(g.candidates) * g.trial_steps * step_fw) * full \
        + len(g.candidates) * g.trial_steps * (query + n * full)
    return dict(every=g.every, checks=checks, v=v, trial_steps=g.trial_steps, run=run,
                trials=trials, guard=guard, share=(trials + guard) / run,
                mac_share=extra_macs / run_macs)


def table() -> str:
    rows = ["| run | V | K | checks | trial steps | run forwards | trials | checks' forwards "
            "| share (forwards) | share (MACs) |", "|---|" + "---:|" * 9]
    for label, model, steps, queries, val in CASES:
        if not model.is_file():
            rows.append(f"| {label} | (model not here: {model.name}) | | | | | | | | |")
            continue
        c = cost(model, steps, queries, val)
        rows.append(f"| {label} | {c['v']} | {c['every']} | {c['checks']} | {c['trial_steps']} "
                    f"| {c['run']:,} | {c['trials']:,} | {c['guard']:,} | "
                    f"{100 * c['share']:.1f} % | {100 * c['mac_share']:.1f} % |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()
    text = table()
    print(text)
    if args.write:
        replace_section(REPO / "docs" / "benchmarks.md", "<!-- guard:start -->",
                        "<!-- guard:end -->", text,
                        "## What the training guard and `--lr auto` cost\n\n"
                        "`benchmarks/guard_cost.py`: forward passes of the lr trials (3 "
                        "candidates) and the guard's checks as a share of the run's own, at "
                        "the defaults.")


if __name__ == "__main__":
    main()
