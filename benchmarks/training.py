"""Training benchmark (not a test): per STM32 target, the memory of full and sparse training
(memory plan, checked against `arm-none-eabi-size` of the linked firmware) and instructions
per training step under `qemu-system-arm -M mps2-an500 -icount shift=0`, beside the paper's
figures (668 KB for full MCUNet-in1 training on the H7B3, 209 KB for sparse on the F746).

    .venv/bin/python benchmarks/training.py            # prints the markdown tables
    .venv/bin/python benchmarks/training.py --write    # also updates docs/benchmarks.md

Instructions per step: the firmware's end-of-step telemetry counts the step's own work (the
sample reads and the telemetry over the host link are left out), in instructions, since with
-icount shift=0 one instruction is 1 ns of virtual time. A step costs a + b Q; it is measured
at Q = 1 and Q = 2 (one step each, repeatable to the instruction) and extrapolated to the
paper's on-device Q = 50. Sparse steps are measured on block 0, the block whose partial
forwards are longest (the most expensive one to train).

    .venv/bin/python benchmarks/training.py --baseline 3694617 --write   # before/after too
    .venv/bin/python benchmarks/training.py --at HEAD                    # a commit, not the tree

--at REV / --baseline REV measure a commit with its own code (a `git worktree` of it, run by a
worker subprocess of this script; benchmarks/revisions.py). The baseline is measured for
instructions per step only, once per model and mode, on the first target where it fits.

Runtime (2 shared cores): about 9 minutes with --baseline, of which the baseline's steps take
about 3 (its 7 G instructions; fewer once the kernels are faster). QEMU firmware builds are
cached (~/.cache/zocodegen or $ZOCODEGEN_CACHE); the memory rows always build their project.
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import tempfile
from contextlib import nullcontext, redirect_stdout
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import revisions  # noqa: E402
from doc_sections import replace_section  # noqa: E402

SHARED = REPO.parent / "shared" / "models"
MCUNET = REPO / "tests" / "fixtures" / "mcunet_in1.tflite"
MCUNET_128 = REPO / "tests" / "fixtures" / "mcunet_in1_128.tflite"  # the paper's resolution
#: target -> (model, mode) rows; the paper's figure where it has one.
ROWS = {
    "stm32h7b3": [(MCUNET_128, "full"), (MCUNET, "full"),
                  (SHARED / "pretrainedResnet_quant.tflite", "full"),
                  (SHARED / "kws_ref_model.tflite", "full")],
    "stm32f746": [(MCUNET, "sparse"), (MCUNET, "full"),
                  (SHARED / "pretrainedResnet_quant.tflite", "full"),
                  (SHARED / "kws_ref_model.tflite", "full")],
}
PAPER = {("stm32h7b3", "mcunet_in1_128.tflite", "full"): "668 KB (MCUNet-in1 128x128, full)",
         ("stm32f746", "mcunet_in1.tflite", "sparse"): "209 KB (MCUNet-in1, sparse)"}
DEVICE_Q = 50
DOC = REPO / "docs" / "benchmarks.md"
BEGIN, END = "<!-- training:begin -->", "<!-- training:end -->"


def kb(n: float) -> str:
    return f"{n / 1024:,.1f}"


def firmware_sizes(elf: Path) -> tuple[int, int]:
    """SRAM (.data + .bss + arena + stack) and flash (vectors + text + rodata + data) of a
    linked firmware, from `arm-none-eabi-size -A`."""
    out = subprocess.run(["arm-none-eabi-size", "-A", str(elf)], capture_output=True,
                         text=True, check=True).stdout
    sections = {m.group(1): int(m.group(2))
                for m in re.finditer(r"^(\.\S+)\s+(\d+)\s+\d+$", out, re.M)}
    ram = sum(sections.get(s, 0) for s in (".stack", ".data", ".bss", ".zo_arena"))
    flash = sum(sections.get(s, 0) for s in (".isr_vector", ".text", ".rodata", ".data"))
    return ram, flash


def memory(model: Path, target: str, mode: str, tmp: Path, options: tuple[str, ...] = ()
           ) -> dict | str:
    """The plan's items and the linked firmware's sizes; the refusal's first words when the
    configuration does not fit. ``options``: more `build` options (e.g. --bp-layers 1)."""
    from zocodegen.cli import main as zocodegen
    out = tmp / f"{target}_{model.stem}_{mode}_{'_'.join(options).replace('-', '')}"
    try:
        code = zocodegen(["build", str(model), "--target", target, "--train", mode,
                          "-o", str(out), *options])
    except SystemExit as exc:
        code = exc.code
    if code != 0:
        return "does not fit"
    subprocess.run(["make", "-C", str(out), "firmware"], check=True, capture_output=True)
    ram, flash = firmware_sizes(out / "build" / target / "firmware.elf")
    report = json.loads((out / "memory_report.json").read_text())
    items = {i["name"]: i["bytes"] for r in report["sram"]["regions"] for i in r["items"]}
    return dict(params=items["trainable parameters"], arena=items["arena"],
                gradient=items["gradient buffer"], saved=items["saved activations"],
                plan=report["sram"]["total_bytes"],
                budget=report["sram"]["budget_bytes"], ram=ram, flash=flash)


def step_instructions(model: Path, target: str, mode: str, queries: int, tmp: Path,
                      options: dict | None = None) -> int:
    """One training step's instructions under QEMU -icount with the target's budget
    (host/device_time.py), with the command line's defaults; ``options``: more TrainConfig
    fields (e.g. bp_layers=1, estimator="int8")."""
    from zocodegen.host.device_time import step_instructions as measure
    from zocodegen.training.config import SCALES_BY_DEFAULT, TrainConfig, scales_apply
    fields = {"queries": queries, "mode": mode, "block": 0 if mode == "sparse" else None,
              **(options or {})}
    base = TrainConfig(**fields)
    # the scales as the command line's default takes them (TrainConfig() leaves them off)
    scales = SCALES_BY_DEFAULT and scales_apply(base.estimator, base.distribution,
                                                base.query_batch)
    return measure(model, target, TrainConfig(**{"scales": scales, **fields}), tmp)


def measure_rows(job: dict) -> list[dict]:
    """Each of ``job["rows"]`` ({model, target, mode}) measured: memory (unless
    ``job["memory"]`` is false) and instructions per step at Q = 1 and 2 (unless it does not
    fit); ``error`` says why a row has no figures."""
    results = []
    # the build command's and the trainer's lines go to stderr, the tables alone to stdout
    with tempfile.TemporaryDirectory() as tmp, redirect_stdout(sys.stderr):
        for row in job["rows"]:
            model, target, mode = Path(row["model"]), row["target"], row["mode"]
            print(f"  {target} {model.name} {mode} ...", file=sys.stderr, flush=True)
            result = dict(row)
            try:
                if job.get("memory", True):
                    result["memory"] = memory(model, target, mode, Path(tmp))
                if result.get("memory") != "does not fit":
                    result["steps"] = [step_instructions(model, target, mode, q, Path(tmp))
                                       for q in (1, 2)]
            except Exception as exc:  # one row must not stop the others
                text = str(exc).strip()
                result["error"] = (text.splitlines()[0] if text else type(exc).__name__)[:300]
                print(f"  {result['error']}", file=sys.stderr, flush=True)
            results.append(result)
    return results


def worker(job_file: str, answer: str) -> None:
    revisions.check_worker_code()
    Path(answer).write_text(json.dumps(measure_rows(json.loads(Path(job_file).read_text()))))


def measure_tree(tree: revisions.Tree, job: dict) -> list[dict]:
    print(f"measuring {tree.label}", file=sys.stderr, flush=True)
    if tree.is_working_tree:
        return measure_rows(job)
    return revisions.run_worker(Path(__file__), tree, job)


def extrapolated(steps: list[int]) -> int:
    one, two = steps
    return one + (DEVICE_Q - 1) * (two - one)


def label(mode: str) -> str:
    return mode + (" (block 0 of 4)" if mode == "sparse" else "")


def table(target: str, results: list[dict]) -> list[str]:
    lines = [f"**{target}**", "",
             "| model | mode | trainable parameters KB | arena KB (with the gradient tail, "
             "docs/memory.md) | gradient buffer KB | SRAM KB (plan / linked) of budget | "
             "flash KB | instructions / step, Q=1 | Q=2 | Q=50 (extrapolated) | paper |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        if r["target"] != target:
            continue
        name, mode = Path(r["model"]).name, r["mode"]
        paper = PAPER.get((target, name, mode), "")
        m = r.get("memory")
        if "error" in r or isinstance(m, str):
            lines.append(f"| {name} | {mode} | | | | {r.get('error') or m} | | | | | {paper} |")
            continue
        one, two = r["steps"]
        lines.append(
            f"| {name} | {label(mode)} | {kb(m['params'])} | {kb(m['arena'])} | "
            f"{kb(m['gradient'])} | {kb(m['plan'])} / {kb(m['ram'])} of {kb(m['budget'])} | "
            f"{kb(m['flash'])} | {one:,} | {two:,} | {extrapolated(r['steps']):,} | {paper} |")
    return lines + [""]


def baseline_rows(results: list[dict]) -> list[dict]:
    """Each model and mode once, on the first target where the measured tree trained it;
    not the 128x128 stand-in, whose steps on the baseline's engine pass 2^32 instructions,
    the range of the telemetry's 32-bit cycle count."""
    rows, seen = [], set()
    for r in results:
        key = (r["model"], r["mode"])
        if key not in seen and "steps" in r and Path(r["model"]) != MCUNET_128:
            seen.add(key)
            rows.append(dict(model=r["model"], target=r["target"], mode=r["mode"]))
    return rows


def before_after(results: list[dict], before: list[dict], base: str, after: str) -> list[str]:
    lines = [f"**Before/after**: instructions per training step (N = 1), before = commit "
             f"{base}, after = {after}.", "",
             "| model | mode | target budget | Q=1 before | Q=1 after | after / before "
             "| Q=2 before | Q=2 after | after / before | Q=50 (extrapolated) before | after "
             "| after / before |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    now = {(r["model"], r["target"], r["mode"]): r for r in results}
    for b in before:
        r = now[(b["model"], b["target"], b["mode"])]
        name = Path(b["model"]).name
        if "steps" not in b:
            lines.append(f"| {name} | {label(b['mode'])} | {b['target']} | "
                         f"{b.get('error', 'not measured')} |" + " |" * 8)
            continue
        pairs = list(zip(b["steps"], r["steps"])) + [(extrapolated(b["steps"]),
                                                      extrapolated(r["steps"]))]
        cells = [f"{x:,} | {y:,} | {y / x:.3f}" for x, y in pairs]
        lines.append(f"| {name} | {label(b['mode'])} | {b['target']} | " + " | ".join(cells)
                     + " |")
    return lines + [""]


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--target", choices=sorted(ROWS), action="append")
    parser.add_argument("--at", metavar="REV",
                        help="measure commit REV (a git worktree) instead of the working tree")
    parser.add_argument("--baseline", metavar="REV",
                        help="also measure commit REV's instructions per step (issue 15: 3694617)")
    parser.add_argument("--only", metavar="NAME", action="append",
                        help="only the rows whose model file name contains NAME (repeatable)")
    args = parser.parse_args()
    targets = args.target or sorted(ROWS)
    job = dict(rows=[dict(model=str(model), target=target, mode=mode)
                     for target in targets for model, mode in ROWS[target]
                     if not args.only or any(n in model.name for n in args.only)])
    with revisions.checkout(args.at) if args.at else nullcontext(revisions.working_tree()) \
            as tree:
        results = measure_tree(tree, job)
        commit = tree.label
    lines = [f"Measured {datetime.date.today()} at commit {commit} with "
             f"`benchmarks/training.py`.", ""]
    for target in targets:
        lines += table(target, results)
    if args.baseline:
        with revisions.checkout(args.baseline) as base:
            before = measure_tree(base, dict(rows=baseline_rows(results), memory=False))
            lines += before_after(results, before, base.label, commit)
    text = "\n".join(lines)
    print(text)
    if args.write:
        replace_section(DOC, BEGIN, END, text)


if __name__ == "__main__":
    main()
