"""What the sparse block trials see at the paper's scale (docs/scale.md section 16).

For one cell of the scale grid (a corruption at severity 5, a seed), runs the F746 sparse
build's block trials (``--block auto``: each block trains ⌈S/N⌉ steps on the first S training
records from the flash parameters) and prints per block what each scoring would see: the
correct count and mean loss on the last 64 training records (the rule until stop 57), on the
last 256 (today's held-out set, whose loss decides), and the test accuracy on the 1000
corrupted test images, which no rule can see on a device but which says which block the
trial really helped.

    .venv/bin/python benchmarks/block_trials.py --cell fog --seed 1
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
for _p in (str(HERE), str(HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from scale_experiment import MODEL, RUNS, data_path  # noqa: E402
from zocodegen.frontends import load_model  # noqa: E402
from zocodegen.training import simulator  # noqa: E402
from zocodegen.training.config import TrainConfig  # noqa: E402
from zocodegen.training.data import load_dataset  # noqa: E402
from zocodegen.training.plan import loss_head, training_plans  # noqa: E402
from zocodegen.training.runner import board_run, steps_for  # noqa: E402

#: The held-out sets compared: the last 64 training records, and the last 256.
HELD_OUT = (64, 256)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", required=True, help="a corruption of the scale grid")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--estimator", default=None, help="default: the default estimator")
    args = parser.parse_args(argv)
    graph = load_model(MODEL)
    logits, _ = loss_head(graph)
    data = load_dataset(data_path(RUNS, args.cell), graph, graph.tensor(logits).shape[-1])
    config = TrainConfig(mode="sparse", queries=20, seed=args.seed, lr_auto=True)
    if args.estimator:
        config = replace(config, estimator=args.estimator)
    config = board_run(graph, steps_for(config, 1, len(data.x)), "stm32f746")
    plans = training_plans(graph, config)
    x, y = data.x, data.y
    size = simulator.trial_size(len(x), config.trial_samples)
    steps = -(-size // config.batch)

    def scores(params) -> list[tuple[int, float]]:
        out = []
        for held in HELD_OUT:
            s = simulator.validation_score(graph, plans[0], params, x[-held:], y[-held:])
            out.append((s.correct, s.loss / 65536 / held))
        return out

    def test(params) -> float:
        return float((simulator.predict(graph, params, data.x_test) == data.y_test).mean())

    base = scores({})
    print(f"{args.cell} seed {args.seed}, {config.estimator}, {len(plans)} blocks, {steps} "
          f"trial steps at lr {config.lr:g}; before: "
          + ", ".join(f"last {h}: {c} right, loss {l:.4f}" for h, (c, l) in zip(HELD_OUT, base))
          + f"; test {100 * test({}):.1f} %")
    for k, plan in enumerate(plans):
        start = time.perf_counter()
        trial = replace(plan, config=replace(plan.config, steps=steps))
        params = simulator.initial_params(graph, plan)
        for t in range(steps):
            idx = simulator.batch_indices(t, config.batch, size)
            params, _ = simulator.train_step(graph, trial, params, t, x[idx], y[idx])
        seen = scores(params)
        print(f"block {k}: " + ", ".join(
            f"last {h}: {c - c0:+d} right, loss {l - l0:+.4f}"
            for h, (c, l), (c0, l0) in zip(HELD_OUT, seen, base))
            + f"; test {100 * test(params):.1f} % ({time.perf_counter() - start:.0f} s)",
            flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
