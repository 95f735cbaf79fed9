"""Does zeroth-order training learn? The digits experiment of docs/experiment.md.

A small INT8 CNN (tests/fixtures/digits_cnn.tflite) pre-trained on clean scikit-learn digits
is adapted on a corrupted split (rotation + Gaussian noise) with the bit-exact simulator:
ours (layer-wise, adaptive WP/NP, learning-rate scaling) against the paper's baselines at an
equal number of forward evaluations per step (Q x trainable layers), and against FP32
back-propagation fine-tuning (tests/fixtures/digits_ceiling.json, from generate.py).

    .venv/bin/python benchmarks/digits_experiment.py            # print the table
    .venv/bin/python benchmarks/digits_experiment.py --write    # also update docs/experiment.md
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zocodegen.datasets import digits_npz  # noqa: E402
from zocodegen.frontends import load_model  # noqa: E402
from zocodegen.training.config import TrainConfig  # noqa: E402
from zocodegen.training.runner import simulate  # noqa: E402

MODEL = ROOT / "tests/fixtures/digits_cnn.tflite"
CEILING = ROOT / "tests/fixtures/digits_ceiling.json"
DOC = ROOT / "docs/experiment.md"
METHODS = (  # label, estimator, scaling
    ("ZO, layer-wise adaptive WP/NP (ours)", "adaptive", True),
    ("ZO, WP only", "wp", True),
    ("ZO, NP only", "np", True),
    ("ZO, ours without learning-rate scaling", "adaptive", False),
    ("MeZO-style model-wise WP", "mezo", True),
)
LEARNING_RATES = (0.001, 0.003, 0.01)
MARK_START, MARK_END = "<!-- experiment:start -->", "<!-- experiment:end -->"


def run(epochs: int, queries: int, seed: int) -> tuple[list[dict], dict]:
    graph = load_model(MODEL)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "digits.npz"
        arrays = digits_npz(data, graph.tensor(graph.inputs[0]).quant)
        for label, estimator, scaling in METHODS:
            for lr in LEARNING_RATES:
                config = TrainConfig(queries=queries, lr=lr, seed=seed, estimator=estimator,
                                     scaling=scaling)
                start = time.perf_counter()
                result = simulate(MODEL, data, Path(tmp) / "run", config, epochs=epochs,
                                  eval_every=10**9, progress=False)
                rows.append(dict(method=label, estimator=estimator, scaling=scaling, lr=lr,
                                 before=result.accuracy_before, after=result.accuracy_after,
                                 forwards=result.forward_evaluations, steps=result.steps,
                                 seconds=time.perf_counter() - start))
                print(f"{label:42s} lr={lr:<6} {100 * result.accuracy_after:5.1f}%  "
                      f"({rows[-1]['seconds']:.0f} s)", flush=True)
    return rows, dict(samples=len(arrays["x"]), test=len(arrays["x_test"]))


def table(rows: list[dict], sizes: dict, epochs: int, queries: int) -> str:
    ceiling = json.loads(CEILING.read_text())
    best: dict[str, dict] = {}
    for r in rows:
        if r["method"] not in best or r["after"] > best[r["method"]]["after"]:
            best[r["method"]] = r
    before = rows[0]["before"]
    lost = ceiling["int8_clean_test"] - before
    lines = [
        f"Corrupted digits, {sizes['samples']} adapt samples, {sizes['test']} held-out test "
        f"samples; {epochs} epochs ({rows[0]['steps']} steps, batch 1), Q = {queries}; every "
        f"ZO method gets {rows[0]['forwards']:,} forward evaluations. Learning rate: the best "
        f"of {', '.join(map(str, LEARNING_RATES))} for each method (cosine schedule).",
        "",
        "| method | test accuracy | recovered of the corruption's cost | learning rate |",
        "|---|---|---|---|",
        f"| int8 model on clean test images (reference) | {100 * ceiling['int8_clean_test']:.1f} % | | |",
        f"| int8 model on corrupted test images, no adaptation | {100 * before:.1f} % | 0 % | |",
    ]
    for label, _, _ in METHODS:
        r = best[label]
        lines.append(f"| {label} | {100 * r['after']:.1f} % | "
                     f"{100 * (r['after'] - before) / lost:.0f} % | {r['lr']} |")
    fp32 = ceiling["int8_requantized_finetuned_corrupted_test"]
    lines.append(f"| FP32 back-propagation fine-tuning, re-quantized to int8 (ceiling) | "
                 f"{100 * fp32:.1f} % | {100 * (fp32 - before) / lost:.0f} % | "
                 f"Adam {ceiling['lr']}, {ceiling['epochs']} epochs |")
    lines += ["", "All runs (test accuracy after training):", "",
              "| method | " + " | ".join(f"lr {lr}" for lr in LEARNING_RATES) + " |",
              "|---|" + "---|" * len(LEARNING_RATES)]
    for label, _, _ in METHODS:
        cells = [f"{100 * r['after']:.1f} %" for r in rows if r["method"] == label]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--write", action="store_true", help="update docs/experiment.md")
    args = parser.parse_args()
    rows, sizes = run(args.epochs, args.queries, args.seed)
    text = table(rows, sizes, args.epochs, args.queries)
    print(text)
    if args.write:
        doc = DOC.read_text()
        head, rest = doc.split(MARK_START)
        _, tail = rest.split(MARK_END)
        DOC.write_text(f"{head}{MARK_START}\n{text}\n{MARK_END}{tail}")


if __name__ == "__main__":
    main()
