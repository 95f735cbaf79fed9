"""Inference benchmark (not a test): instructions per inference under
`qemu-system-arm -M mps2-an500 -icount shift=0`, instructions per MAC per op family, MACs,
the memory planner's arena against its lower bound, and the issue-15 CMSIS-NN figures.

    .venv/bin/python benchmarks/inference.py                      # the working tree's tables
    .venv/bin/python benchmarks/inference.py --baseline 3694617   # before/after side by side
    .venv/bin/python benchmarks/inference.py --at HEAD --write    # a commit; update the doc
    .venv/bin/python benchmarks/inference.py --model /work/vww/vww_96_int8.tflite  # + a model
    .venv/bin/python benchmarks/inference.py --per-layer          # also every layer's count

Instruction counts are repeatable: with -icount shift=0 QEMU advances virtual time by exactly
1 ns per instruction, and the firmware reads it from a 25 MHz timer (resolution 40).

Per op family: a profiling build (EXTRA_CFLAGS=-DZO_PROFILE_LAYERS, templates/project/
model.c.j2) reads the timer after every layer and sends each layer's count as TELEMETRY after
the inference; the layers' counts add up exactly to the profiled model_run(), which the
reading itself lengthens by a few instructions per layer (the "profiling adds" figure).

--at REV / --baseline REV measure a commit with its own code: a `git worktree` of it in a
temporary directory, run by a worker subprocess of this script (benchmarks/revisions.py);
a commit without the profiling hook gets the working tree's hook patched in, or, when that
patch does not apply, is reported without per-family figures.

Runtime (2 shared cores): about 5 minutes per tree measured, mostly QEMU (mcunet_det.tflite,
233 M instructions per inference before issue 15's kernels, takes 2 of them): about 10 minutes
with --baseline and the VWW model. Builds are cached (~/.cache/zocodegen or $ZOCODEGEN_CACHE,
keyed by the generated files), so a re-run only runs QEMU.
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

import revisions  # noqa: E402
from doc_sections import replace_section  # noqa: E402

SHARED = REPO.parent / "shared" / "models"
MODELS = [SHARED / "kws_ref_model.tflite",
          SHARED / "pretrainedResnet_quant.tflite",
          SHARED / "mcunet_det.tflite",
          REPO / "tests" / "fixtures" / "mcunet_in1.tflite",
          REPO / "tests" / "fixtures" / "mcunet_tiny.tflite",
          REPO / "tests" / "fixtures" / "multi_op.tflite",
          REPO / "tests" / "fixtures" / "digits_cnn.tflite",
          REPO / "tests" / "fixtures" / "onnx_qdq_int8.onnx"]
#: Instructions per inference of Arm's CMSIS-NN kernels in the same generated project under
#: the same QEMU (issue 15), by model file name.
CMSIS_NN = {"kws_ref_model.tflite": 7_660_000,
            "pretrainedResnet_quant.tflite": 31_820_000,
            "vww_96_int8.tflite": 24_030_000}
FAMILIES = ("CONV_2D 1x1", "CONV_2D kxk", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD/MUL",
            "pooling", "other")
#: QEMU builds hold the F746's budget; a model whose arena does not fit holds the H7B3's.
BOARDS = ("stm32f746", "stm32h7b3")
SAMPLES = 3
PROFILE = "-DZO_PROFILE_LAYERS"
PORTABLE = "-DZO_PORTABLE_KERNELS"
DOC = REPO / "docs" / "benchmarks.md"
BEGIN, END = "<!-- inference:begin -->", "<!-- inference:end -->"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---- measuring (runs with the code of the tree being measured) --------------------------

def family(graph, op) -> str:
    if op.type == "CONV_2D":
        kernel = graph.tensor(op.inputs[1]).shape  # OHWI
        return "CONV_2D 1x1" if tuple(kernel[1:3]) == (1, 1) else "CONV_2D kxk"
    if op.type in ("DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
        return op.type
    if op.type in ("ADD", "MUL"):
        return "ADD/MUL"
    if op.type in ("AVERAGE_POOL_2D", "MAX_POOL_2D", "MEAN"):
        return "pooling"
    return "other"


def shape(graph, op) -> str:
    """What a kernel specialises on, for the per-layer table: kernel, channels, output."""
    out = graph.tensor(op.outputs[0]).shape
    if op.type in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        k = graph.tensor(op.inputs[1]).shape
        cin = graph.tensor(op.inputs[0]).shape[-1]
        return f"{k[1]}x{k[2]}, {cin} -> {out[-1]} ch, out {out[1]}x{out[2]}"
    if op.type == "FULLY_CONNECTED":
        return f"{graph.tensor(op.inputs[1]).shape[1]} -> {out[-1]}"
    return "x".join(str(d) for d in out)


def layer_cycles(session, sample, count: int) -> tuple[int, list[int]] | None:
    """The profiling firmware's whole-inference count and per-layer counts of one inference
    (None: it sent no per-layer counts, a build without the profiling hook)."""
    session.telemetry.clear()
    whole = session.infer(sample).cycles
    records = [t for t in session.telemetry if t.layer >= 0]
    if len(records) != count:
        return None
    return whole, [t.cycles for t in sorted(records, key=lambda t: t.layer)]


def build(path: Path, cflags: str = "") -> tuple[Path, str]:
    """The QEMU ELF and the board whose budget it holds."""
    from zocodegen.projects import cached_build
    for board in BOARDS:
        try:
            return cached_build(path, "qemu", emulate=board, extra_cflags=cflags), board
        except Exception as exc:  # BudgetError: try the larger board
            if type(exc).__name__ != "BudgetError" or board == BOARDS[-1]:
                raise
    raise AssertionError


def measure(path: Path, samples: int, portable: bool, profile: bool) -> dict:
    import numpy as np
    from conftest import random_inputs
    from zocodegen.host.engines import FirmwareSession, run_samples

    from zocodegen.frontends import load_model
    from zocodegen.planner import plan_arena
    try:
        from zocodegen.ops.table import macs as op_macs
    except ImportError:  # a baseline from before the op table (issue 33) has it in ir.py,
        try:             # one from before c2d77a5 (issue 15's 3694617) in summary.py
            from zocodegen.ir import macs as op_macs
        except ImportError:
            from zocodegen.summary import macs as op_macs

    elf, board = build(path)
    graph = load_model(path)
    try:  # the graph the device runs (a float input may be quantized by the host)
        from zocodegen.codegen.fit import device_graph
        from zocodegen.codegen.project import BuildOptions
        graph = device_graph(graph, BuildOptions("qemu", board))
    except ImportError:  # a baseline from before --input-quantize
        pass
    layers = [dict(op=op.type, family=family(graph, op), macs=op_macs(graph, op),
                   elements=int(np.prod(graph.tensor(op.outputs[0]).shape)),
                   shape=shape(graph, op))
              for op in graph.ops]
    arena = plan_arena(graph)
    x = graph.tensor(graph.inputs[0])
    inputs = [{graph.inputs[0]: v} for v in random_inputs(x.shape, x.dtype, samples + 3)[3:]]
    counts = [r.cycles for r in run_samples(graph, "qemu", elf, inputs)]
    row = dict(model=path.name, board=board, macs=sum(l["macs"] for l in layers),
               instructions=int(statistics.median(counts)), spread=max(counts) - min(counts),
               arena=arena.arena_bytes, lower_bound=arena.lower_bound,
               greedy=arena.greedy_by_size_bytes, total=arena.sum_of_activations,
               text=text_bytes(elf), portable=None, layers=None, profiled=None)
    if portable:
        portable_elf, _ = build(path, PORTABLE)
        row["portable"] = int(statistics.median(
            r.cycles for r in run_samples(graph, "qemu", portable_elf, inputs)))
    if profile:
        profile_elf, _ = build(path, PROFILE)
        with FirmwareSession(graph, "qemu", profile_elf) as session:
            runs = [layer_cycles(session, s, len(layers)) for s in inputs]
        if all(r is not None for r in runs):
            for i, layer in enumerate(layers):
                layer["instructions"] = int(statistics.median(r[1][i] for r in runs))
            row["layers"] = layers
            row["profiled"] = int(statistics.median(r[0] for r in runs))
    return row


def text_bytes(elf: Path) -> int:
    size = subprocess.run(["arm-none-eabi-size", str(elf)], capture_output=True, text=True,
                          check=True).stdout.splitlines()[1].split()
    return int(size[0])


def measure_all(job: dict) -> list[dict]:
    rows = []
    for path in map(Path, job["models"]):
        log(f"  {path.name} ...")
        try:
            rows.append(measure(path, job["samples"], job["portable"], job["profile"]))
        except Exception as exc:  # one model that does not build must not stop the others
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            rows.append(dict(model=path.name, error=reason[:300]))
            log(f"  {path.name}: {rows[-1]['error']}")
    return rows


def worker(job_file: str, answer: str) -> None:
    revisions.check_worker_code()
    Path(answer).write_text(json.dumps(measure_all(json.loads(Path(job_file).read_text()))))


def measure_tree(tree: revisions.Tree, job: dict) -> list[dict]:
    log(f"measuring {tree.label}" + (f" ({tree.profile_note})" if tree.profile_note else ""))
    if tree.is_working_tree:
        return measure_all(job)
    return revisions.run_worker(Path(__file__), tree, job)


# ---- tables -------------------------------------------------------------------------------

def per_mac(instructions: float | None, macs: int) -> str:
    return f"{instructions / macs:.2f}" if instructions is not None and macs else "-"


def ratio(a: float | None, b: float | None, digits: int = 2, blank: str = "-") -> str:
    return f"{a / b:.{digits}f}" if a is not None and b else blank


def thousands(n: int | None) -> str:
    return f"{n:,}" if n else ""


def main_table(rows: list[dict]) -> str:
    lines = ["| model | MACs | instructions / inference | instr / MAC | portable C: instr / MAC "
             "| CMSIS-NN instructions (issue 15) | ours / CMSIS-NN "
             "| arena B | lower bound B | greedy-by-size B | sum of activations B "
             "| arena / lower bound | QEMU .text B |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | not measured: {r['error']} |" + " |" * 11)
            continue
        cmsis = CMSIS_NN.get(r["model"])
        name = r["model"] + (f" ({r['board']} budget)" if r["board"] != BOARDS[0] else "")
        lines.append(
            f"| {name} | {r['macs']:,} | {r['instructions']:,} | "
            f"{per_mac(r['instructions'], r['macs'])} | {per_mac(r['portable'], r['macs'])} | "
            f"{thousands(cmsis)} | {ratio(r['instructions'], cmsis, blank='')} | "
            f"{r['arena']:,} | {r['lower_bound']:,} | {r['greedy']:,} | {r['total']:,} | "
            f"{r['arena'] / r['lower_bound']:.3f} | {r['text']:,} |")
    return "\n".join(lines) + "\n"


def before_after_table(rows: list[dict], before: dict[str, dict], label: str) -> str:
    lines = [f"| model | before ({label}): instructions / inference | after | after / before "
             "| before: instr / MAC | after: instr / MAC | CMSIS-NN (issue 15) "
             "| before / CMSIS-NN | after / CMSIS-NN | before: .text B | after: .text B |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        b = before.get(r["model"], {})
        if "error" in r or "error" in b or not b:
            reason = r.get("error") or b.get("error") or "not measured"
            lines.append(f"| {r['model']} | {reason} |" + " |" * 9)
            continue
        cmsis = CMSIS_NN.get(r["model"])
        lines.append(
            f"| {r['model']} | {b['instructions']:,} | {r['instructions']:,} | "
            f"{ratio(r['instructions'], b['instructions'], 3)} | "
            f"{per_mac(b['instructions'], b['macs'])} | {per_mac(r['instructions'], r['macs'])} | "
            f"{thousands(cmsis)} | {ratio(b['instructions'], cmsis, blank='')} | "
            f"{ratio(r['instructions'], cmsis, blank='')} | {b['text']:,} | {r['text']:,} |")
    return "\n".join(lines) + "\n"


def families(row: dict) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for layer in row.get("layers") or []:
        f = out.setdefault(layer["family"], dict(layers=0, macs=0, elements=0, instructions=0))
        f["layers"] += 1
        f["macs"] += layer["macs"]
        f["elements"] += layer["elements"]
        f["instructions"] += layer["instructions"]
    return out


def family_table(rows: list[dict], before: dict[str, dict] | None, label: str) -> str:
    head = ("| model | op family | layers | MACs | instructions | share | instr / MAC "
            "| instr / output element |")
    rule = "|---|---|---:|---:|---:|---:|---:|---:|"
    if before is not None:
        head += f" before ({label}): instructions | before: instr / MAC | after / before |"
        rule += "---:|---:|---:|"
    lines = [head, rule]
    for r in rows:
        fams = families(r)
        if not fams:
            continue
        old = families(before.get(r["model"], {})) if before is not None else {}
        whole = sum(f["instructions"] for f in fams.values())
        for name in FAMILIES + ("all layers",):
            f = (fams.get(name) if name != "all layers" else
                 {k: sum(v[k] for v in fams.values()) for k in ("layers", "macs", "elements",
                                                               "instructions")})
            if not f:
                continue
            o = (old.get(name) if name != "all layers" else
                 ({k: sum(v[k] for v in old.values()) for k in ("macs", "instructions")}
                  if old else None))
            cells = [r["model"], name if name != "all layers" else "**all layers**",
                     str(f["layers"]), f"{f['macs']:,}", f"{f['instructions']:,}",
                     f"{100 * f['instructions'] / whole:.1f} %",
                     per_mac(f["instructions"], f["macs"]),
                     f"{f['instructions'] / f['elements']:,.1f}" if name != "all layers"
                     else ""]
            if before is not None:
                cells += ([f"{o['instructions']:,}", per_mac(o["instructions"], o["macs"]),
                           ratio(f["instructions"], o["instructions"], 3)] if o
                          else ["-", "-", "-"])
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def layer_table(row: dict) -> str:
    lines = [f"{row['model']}",
             "| layer | op | shape | MACs | instructions | instr / MAC | instr / output element |",
             "|---:|---|---|---:|---:|---:|---:|"]
    for i, l in enumerate(row.get("layers") or []):
        lines.append(f"| {i} | {l['op']} | {l.get('shape', '')} | {l['macs']:,} | "
                     f"{l['instructions']:,} | {per_mac(l['instructions'], l['macs'])} | "
                     f"{l['instructions'] / l['elements']:,.1f} |")
    return "\n".join(lines) + "\n"


def profile_overhead(rows: list[dict]) -> str:
    extra = [(r["profiled"] - r["instructions"], len(r["layers"])) for r in rows
             if r.get("layers")]
    if not extra:
        return "no per-layer counts"
    per_layer = [e / n for e, n in extra]
    return (f"profiling adds {min(per_layer):.0f} to {max(per_layer):.0f} instructions per "
            f"layer to the whole inference")


def report(rows: list[dict], tree_label: str, before: list[dict] | None,
           baseline: revisions.Tree | None, samples: int) -> str:
    measured = [r for r in rows if "error" not in r]
    spread = max((r["spread"] for r in measured), default=0)
    text = [f"Measured {datetime.date.today()} at commit {tree_label}: generated C at -O2 "
            f"(the portable-C column: built with -DZO_PORTABLE_KERNELS), {samples} random "
            f"inputs per model (largest spread between inputs: {spread} instructions); "
            f"QEMU builds hold the {BOARDS[0]}'s SRAM budget unless the row names another. "
            f"CMSIS-NN: Arm's kernels swapped into the same project, as measured for issue 15.",
            "", main_table(rows).rstrip()]
    by_model = None
    if before is not None and baseline is not None:
        by_model = {r["model"]: r for r in before}
        text += ["", f"Before/after: before = commit {baseline.label}"
                 + (f" ({baseline.profile_note})" if baseline.profile_note else "")
                 + f", after = {tree_label}.", "",
                 before_after_table(rows, by_model, baseline.label).rstrip()]
    text += ["", "Per op family, from the profiling build (-DZO_PROFILE_LAYERS: the timer read "
             "after every layer, median of the inputs; " + profile_overhead(measured) + "). "
             "MACs count CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED only; instructions per "
             "output element are the comparable figure for the other families.", "",
             family_table(measured, by_model, baseline.label if baseline else "").rstrip()]
    return "\n".join(text)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--at", metavar="REV",
                        help="measure commit REV (a git worktree) instead of the working tree")
    parser.add_argument("--baseline", metavar="REV",
                        help="also measure commit REV and report before/after (issue 15: 3694617)")
    parser.add_argument("--model", metavar="PATH", action="append", type=Path, default=[],
                        help="an extra model to measure (repeatable), e.g. MLPerf Tiny's "
                             "vww_96_int8.tflite")
    parser.add_argument("--only", metavar="PATH", action="append", type=Path, default=[],
                        help="measure only these models (repeatable) instead of the defaults")
    parser.add_argument("--samples", type=int, default=SAMPLES)
    parser.add_argument("--no-portable", action="store_true",
                        help="skip the -DZO_PORTABLE_KERNELS builds")
    parser.add_argument("--per-layer", action="store_true",
                        help="also print every layer's instructions (not written to the doc)")
    args = parser.parse_args()
    models = [p.resolve() for p in (args.only or [m for m in MODELS if m.is_file()])]
    models += [p.resolve() for p in args.model]
    missing = [str(p) for p in models if not p.is_file()]
    if missing:
        parser.error(f"no such model: {', '.join(missing)}")
    job = dict(models=[str(p) for p in models], samples=args.samples,
               portable=not args.no_portable, profile=True)
    with revisions.checkout(args.at) if args.at else nullcontext(revisions.working_tree()) \
            as tree:
        rows = measure_tree(tree, job)
        label = tree.label + (f" ({tree.profile_note})" if tree.profile_note else "")
    before, baseline = None, None
    if args.baseline:
        with revisions.checkout(args.baseline) as baseline:
            before = measure_tree(baseline, dict(job, portable=False))
    text = report(rows, label, before, baseline, args.samples)
    if args.per_layer:
        for r in rows + (before or []):
            if r.get("layers"):
                print(layer_table(r))
    print(f"{BEGIN}\n{text}\n{END}")
    if args.write:
        replace_section(DOC, BEGIN, END, text, "# Benchmarks")


if __name__ == "__main__":
    main()
