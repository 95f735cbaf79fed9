"""Inference benchmark (not a test): instructions per inference under
`qemu-system-arm -M mps2-an500 -icount shift=0`, MACs, instructions per MAC, and the memory
planner's arena against its lower bound, plain greedy-by-size and the sum of all activations.

    .venv/bin/python benchmarks/inference.py            # prints the markdown table
    .venv/bin/python benchmarks/inference.py --write    # also updates docs/benchmarks.md

Instruction counts are repeatable: with -icount shift=0 QEMU advances virtual time by exactly
1 ns per instruction, and the firmware reads it from a 25 MHz timer (resolution 40).
"""
from __future__ import annotations

import argparse
import datetime
import re
import statistics
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from conftest import random_inputs  # noqa: E402

from zocodegen.build import cached_build  # noqa: E402
from zocodegen.engines import run_samples  # noqa: E402
from zocodegen.frontends import load_model  # noqa: E402
from zocodegen.planner import plan_arena  # noqa: E402
from zocodegen.summary import summarize  # noqa: E402

MODELS = [REPO.parent / "shared" / "models" / "kws_ref_model.tflite",
          REPO.parent / "shared" / "models" / "pretrainedResnet_quant.tflite",
          REPO / "tests" / "fixtures" / "mcunet_tiny.tflite",
          REPO / "tests" / "fixtures" / "multi_op.tflite",
          REPO / "tests" / "fixtures" / "digits_cnn.tflite",
          REPO / "tests" / "fixtures" / "onnx_qdq_int8.onnx"]
SAMPLES = 3
DOC = REPO / "docs" / "benchmarks.md"
BEGIN, END = "<!-- inference:begin -->", "<!-- inference:end -->"


def measure(path: Path) -> dict:
    graph = load_model(path)
    macs = summarize(graph).totals["macs"]
    arena = plan_arena(graph)
    elf = cached_build(path, "qemu")
    x = graph.tensor(graph.inputs[0])
    samples = [{graph.inputs[0]: v} for v in random_inputs(x.shape, x.dtype, SAMPLES + 3)[3:]]
    counts = [r.cycles for r in run_samples(graph, "qemu", elf, samples)]
    portable_elf = cached_build(path, "qemu", extra_cflags="-DZO_PORTABLE_KERNELS")
    portable = [r.cycles for r in run_samples(graph, "qemu", portable_elf, samples)]
    size = subprocess.run(["arm-none-eabi-size", str(elf)], capture_output=True, text=True,
                          check=True).stdout.splitlines()[1].split()
    return dict(model=path.name, macs=macs, instructions=int(statistics.median(counts)),
                portable=int(statistics.median(portable)),
                spread=max(counts) - min(counts), arena=arena.arena_bytes,
                lower_bound=arena.lower_bound, greedy=arena.greedy_by_size_bytes,
                total=arena.sum_of_activations, text=int(size[0]), bss=int(size[2]))


def table(rows: list[dict]) -> str:
    head = ("| model | MACs | instructions / inference | instr / MAC | portable C: instr / MAC "
            "| arena B | lower bound B | greedy-by-size B | sum of activations B "
            "| arena / lower bound | QEMU .text B |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    return head + "".join(
        f"| {r['model']} | {r['macs']:,} | {r['instructions']:,} | "
        f"{r['instructions'] / max(r['macs'], 1):.2f} | {r['portable'] / max(r['macs'], 1):.2f} | "
        f"{r['arena']:,} | {r['lower_bound']:,} | "
        f"{r['greedy']:,} | {r['total']:,} | {r['arena'] / r['lower_bound']:.3f} | "
        f"{r['text']:,} |\n" for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()
    rows = [measure(p) for p in MODELS if p.is_file()]
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    spread = max(r["spread"] for r in rows)
    text = (f"{BEGIN}\nMeasured {datetime.date.today()} at commit {commit}: generated C at -O2 "
            f"with the Cortex-M7 SMLAD dot product in CONV_2D/FULLY_CONNECTED (the portable-C "
            f"column: built with -DZO_PORTABLE_KERNELS), {SAMPLES} random inputs per model (largest spread between inputs: "
            f"{spread} instructions).\n\n{table(rows)}{END}")
    print(text)
    if args.write:
        doc = DOC.read_text() if DOC.is_file() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
        DOC.write_text(re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: text, doc,
                              flags=re.S))


if __name__ == "__main__":
    main()
