"""Perturbation benchmark (not a test, issue 17): what PeZO's perturbation sources and
distributions and P-RGE's two-sided queries cost on the emulated Cortex-M7, per training
step, under `qemu-system-arm -M mps2-an500 -icount shift=0`.

For each option: the step's instructions and the share of the PRNG in it, from the
profiling build (-DZO_PROFILE_TRAIN, benchmarks/training_overheads.py: *PRNG + perturb* is
the draws applied to the weights / nodes, *gradient + update* holds the replayed draws of
the gradient), and the linked firmware's SRAM and flash (`arm-none-eabi-size`).

    .venv/bin/python benchmarks/perturbation.py            # prints the markdown table
    .venv/bin/python benchmarks/perturbation.py --write    # also updates docs/benchmarks.md

Full training, adaptive WP/NP, N = 1, the second of two steps, on the H7B3's budget; the
one-sided options at Q = 2, two-sided at Q = 1 (the same forwards per step), and
--query-batch B = 1, 2, 4 at Q = 4. SRAM includes the query batch's B-wide arena.

Runtime: about 15 minutes with nothing cached.
"""
from __future__ import annotations

import datetime
import sys
import tempfile
from contextlib import redirect_stdout
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from training import firmware_sizes  # noqa: E402
from training_overheads import (CATEGORIES, MODELS, PROFILE, QUERIES, TARGET,  # noqa: E402
                                commit, parse_arguments, profile_step, publish)

HEADING = "## Perturbation sources and two-sided queries (PeZO, P-RGE)"
BEGIN, END = "<!-- perturbation:begin -->", "<!-- perturbation:end -->"
#: (label, TrainConfig fields, queries, the row it is compared with): every row of a group at
#: the same forwards per step; P-RGE's query batches at Q = 4 so that B = 1, 2, 4 all divide
OPTIONS = (
    ("xorshift, rademacher (default)", {}, QUERIES),
    ("pool:4095", {"perturbation": "pool:4095"}, QUERIES),
    ("rotating:31", {"perturbation": "rotating:31"}, QUERIES),
    ("uniform", {"distribution": "uniform"}, QUERIES),
    ("pool:4095 uniform", {"perturbation": "pool:4095", "distribution": "uniform"}, QUERIES),
    ("rotating:31 uniform", {"perturbation": "rotating:31", "distribution": "uniform"},
     QUERIES),
    ("two-sided, Q/2", {"two_sided": True}, QUERIES // 2),
    ("two-sided, Q/2, B = 2 (+z and -z in one pass)", {"two_sided": True, "query_batch": 2},
     QUERIES // 2),
    ("Q = 4, B = 1", {}, 4),
    ("Q = 4, B = 2", {"query_batch": 2}, 4),
    ("Q = 4, B = 4", {"query_batch": 4}, 4),
)
PRNG = CATEGORIES.index("PRNG + perturb")
REPLAY = CATEGORIES.index("gradient + update")


def sizes(model: Path, options: dict, queries: int) -> tuple[int, int]:
    """SRAM (.data + .bss + arena + stack) and flash (vectors + text + rodata + data) of the
    profiling firmware the step ran on."""
    from zocodegen.projects import cached_build
    from zocodegen.frontends import load_model
    from zocodegen.training.config import TrainConfig
    config = TrainConfig(steps=2, queries=queries, batch=1, mode="full", **options)
    elf = cached_build(model, "qemu", emulate=TARGET, graph=load_model(model), train=config,
                       extra_cflags=PROFILE)
    return firmware_sizes(elf)


def measure(models: list[Path], count: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp, redirect_stdout(sys.stderr):
        for model in models:
            for label, options, queries in OPTIONS[:count]:
                print(f"  {model.name} {label} ...", file=sys.stderr, flush=True)
                r = profile_step(model, Path(tmp), options, queries)
                ram, flash = sizes(model, options, queries)
                rows.append(dict(model=model.name, option=label, queries=queries,
                                 step=sum(r["counts"]), prng=r["counts"][PRNG],
                                 replay=r["counts"][REPLAY], ram=ram, flash=flash))
    return rows


def table(rows: list[dict]) -> list[str]:
    lines = ["| model | option | Q | instructions / step | vs first row at these forwards | "
             "PRNG + perturb | "
             "gradient + update (replayed draws) | SRAM | flash |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    base: dict[tuple[str, int], dict] = {}
    for r in rows:
        b = base.setdefault((r["model"], r["queries"] * (2 if "two-sided" in r["option"] else 1)),
                            r)
        share = f"{100 * r['prng'] / r['step']:.1f} % ({r['prng'] / 1e6:,.2f} M)"
        replay = f"{100 * r['replay'] / r['step']:.1f} % ({r['replay'] / 1e6:,.2f} M)"
        lines.append(f"| {r['model']} | {r['option']} | {r['queries']} | {r['step']:,} | "
                     f"{r['step'] / b['step']:.3f} | {share} | {replay} | {r['ram']:,} | "
                     f"{r['flash']:,} |")
    return lines


def main() -> None:
    args, models = parse_arguments(__doc__.splitlines()[0],
                                   [m for m in MODELS if "Resnet" not in m.name], len(OPTIONS))
    rows = measure(models, args.options)
    lines = [f"Measured {datetime.date.today()} at commit {commit()} with "
             f"`benchmarks/perturbation.py` (profiling build `-DZO_PROFILE_TRAIN`, full "
             f"training, N = 1, the second step, {TARGET} budget). Shares of the step's "
             f"instructions (millions):", ""]
    lines += table(rows)
    publish("\n".join(lines), args.write, HEADING, BEGIN, END)


if __name__ == "__main__":
    main()
