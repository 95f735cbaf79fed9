"""Training benchmark (not a test): where the instructions of one training step go, from the
opt-in profiling build (-DZO_PROFILE_TRAIN, templates/train/zo_train.c) under
`qemu-system-arm -M mps2-an500 -icount shift=0`: the model's forward kernels against the
engine's own overheads (PRNG draws and perturbation, restore, loss, gradient and update).

    .venv/bin/python benchmarks/training_overheads.py            # prints the markdown table
    .venv/bin/python benchmarks/training_overheads.py --write    # also updates docs/benchmarks.md

Full training, adaptive WP/NP, Q = 2, N = 1, one step measured after one warm-up step, on the
H7B3's budget (full MCUNet-class training does not fit the F746). The firmware sends one
TELEMETRY per category after the end-of-step record (layer 1000 + category, zo_train.h);
the categories add up to the step's own count (sample reads and telemetry left out) within
a timer tick or two (tests/test_training_overheads.py). The timer reads cost a few
instructions per switch, so a profiled step is slightly longer than a normal one.

Runtime: about 2 minutes with the firmware cached.
"""
from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
from contextlib import redirect_stdout
from pathlib import Path

from doc_sections import replace_section

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "models"
MODELS = [SHARED / "kws_ref_model.tflite", SHARED / "pretrainedResnet_quant.tflite",
          REPO / "tests" / "fixtures" / "mcunet_in1.tflite"]
PROFILE = "-DZO_PROFILE_TRAIN"
LAYER = 1000  # zo_train.h: ZO_PROFILE_LAYER
CATEGORIES = ["forward kernels", "PRNG + perturb", "restore", "loss", "gradient + update",
              "other"]
QUERIES = 2
TARGET = "stm32h7b3"
DOC = REPO / "docs" / "benchmarks.md"
HEADING = "## Training step: where the instructions go"
BEGIN, END = "<!-- training-overheads:begin -->", "<!-- training-overheads:end -->"


def second_step(model: Path, tmp: Path, config, cflags: str):
    """The QEMU firmware of ``model`` built with ``cflags`` trains two steps of ``config``
    on two random records: the second step's end-of-step record and every TELEMETRY."""
    import numpy as np
    from zocodegen.projects import cached_build
    from zocodegen.host.engines import FirmwareSession
    from zocodegen.frontends import load_model
    from zocodegen.formats.image import pack_image
    from zocodegen.training.plan import training_plan
    graph = load_model(model)
    plan = training_plan(graph, config)
    x = graph.tensor(graph.inputs[0])
    rng = np.random.default_rng(0)
    data = rng.integers(-128, 128, size=(2,) + tuple(x.shape[1:])).astype(x.dtype)
    image = tmp / f"{model.stem}_{len(list(tmp.iterdir()))}.img"
    pack_image(image, data, np.arange(2) % plan.num_classes, num_classes=plan.num_classes,
               checkpoint_bytes=1 << 20)
    elf = cached_build(model, "qemu", emulate=TARGET, graph=graph, train=config,
                       extra_cflags=cflags)
    with FirmwareSession(graph, "qemu", elf) as session:
        session.attach_image(image)
        session.train(1)  # warm-up
        step = session.train(1)[-1]
        return step, list(session.telemetry)


def profile_step(model: Path, tmp: Path, options: dict | None = None,
                 queries: int = QUERIES) -> dict:
    """The step's instructions, per category, and how many WP / NP layers it trained;
    ``options``: more TrainConfig fields (e.g. perturbation="pool:4095")."""
    from zocodegen.frontends import load_model
    from zocodegen.training.config import TrainConfig
    from zocodegen.training.plan import training_plan
    config = TrainConfig(steps=2, queries=queries, batch=1, mode="full", **(options or {}))
    step, telemetry = second_step(model, tmp, config, PROFILE)
    counts = {t.layer - LAYER: t.cycles for t in telemetry if t.layer >= LAYER}
    if sorted(counts) != list(range(len(CATEGORIES))):
        raise RuntimeError(f"{model.name}: no profile records (is -DZO_PROFILE_TRAIN built?)")
    modes = [layer.mode for layer in training_plan(load_model(model), config).layers]
    return dict(model=model.name, step=step.cycles,
                counts=[counts[k] for k in range(len(CATEGORIES))],
                wp=modes.count("WP"), np=modes.count("NP"))


def commit() -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()


def publish(text: str, write: bool, heading: str, begin: str, end: str) -> None:
    """Print the section; with ``write``, replace what lies between its markers in
    docs/benchmarks.md (appending it under ``heading`` when they are absent)."""
    print(text)
    if not write:
        return
    replace_section(DOC, begin, end, text, heading)


def table(results: list[dict]) -> list[str]:
    head = " | ".join(CATEGORIES)
    lines = [f"| model | trained layers (WP / NP) | instructions / step | {head} |",
             "|---|---:|---:|" + "---:|" * len(CATEGORIES)]
    for r in results:
        total = sum(r["counts"])
        cells = " | ".join(f"{100 * c / total:.1f} % ({c / 1e6:,.2f} M)" for c in r["counts"])
        lines.append(f"| {r['model']} | {r['wp']} / {r['np']} | {r['step']:,} | {cells} |")
    return lines


def parse_arguments(description: str, models: list[Path],
                    options: int = 0) -> tuple[argparse.Namespace, list[Path]]:
    """--write and --only NAME (repeatable): the options and the models to measure; with
    ``options`` (a script measuring that many variants per model) also --options K, the first
    K of them only."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--only", metavar="NAME", action="append",
                        help="only the models whose file name contains NAME (repeatable)")
    if options:
        parser.add_argument("--options", type=int, default=options, metavar="K",
                            help=f"only the first K of the {options} options (a smoke test)")
    args = parser.parse_args()
    if args.write and getattr(args, "options", options) < options:
        parser.error("--options measures part of the table: it never goes into the doc")
    return args, [m for m in models if not args.only or any(n in m.name for n in args.only)]


def main() -> None:
    args, models = parse_arguments(__doc__.splitlines()[0], MODELS)
    results = []
    with tempfile.TemporaryDirectory() as tmp, redirect_stdout(sys.stderr):
        for model in models:
            print(f"  {model.name} ...", file=sys.stderr, flush=True)
            results.append(profile_step(model, Path(tmp)))
    lines = [f"Measured {datetime.date.today()} at commit {commit()} with "
             f"`benchmarks/training_overheads.py` (profiling build `-DZO_PROFILE_TRAIN`, "
             f"full training, Q = {QUERIES}, N = 1, the second step, {TARGET} budget). "
             f"Share of the step's instructions (and instructions, millions):", ""]
    lines += table(results)
    lines += ["", "*forward kernels*: clean forward, each query's partial forward, the "
              "advance of the saved activations past a trained layer, NP's two shifted "
              "outputs h(z - 1), h(z + 1). *PRNG + perturb*: the Rademacher draws applied "
              "to the weights (WP) or the nodes (NP). *restore*: saved activations restored "
              "and saved, the WP weight backup and its copy back, refolding CONV biases. "
              "*gradient + update*: the replayed PRNG draws of the gradient, NP's outer "
              "products, clipping and the update. *other*: loop control, seeds, loss "
              "differences."]
    publish("\n".join(lines), args.write, HEADING, BEGIN, END)


if __name__ == "__main__":
    main()
