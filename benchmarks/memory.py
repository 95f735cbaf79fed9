"""Memory benchmark (issue 14, not a test): peak inference SRAM of the activation arena per
model, schedule by schedule, beside the lower bound of the schedule used and TinyEngine's
published peak SRAM for the same family of models.

Columns, each a plan of the memory planner (planner/arena.py, planner/patches.py):
  greedy        TFLite-Micro-style: greedy-by-size, no tensor shares bytes with another
  element-wise  every op whole, element-wise ops and views in place (before issue 14)
  in place      + convolutions whose output is no larger than their input in place
  patches       + the first stage in patches (--patches on: the smallest arena)
  lower bound   the heaviest set of buffers live at one op, for the patched schedule

    .venv/bin/python benchmarks/memory.py                  # prints the table
    .venv/bin/python benchmarks/memory.py --write          # also updates docs/benchmarks.md
    .venv/bin/python benchmarks/memory.py --vww PATH       # adds a model that is not shared

Runtime: under a minute.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from zocodegen.codegen.host_inputs import host_quantizable, quantize_inputs_on_host  # noqa: E402,E501
from doc_sections import replace_section  # noqa: E402
from zocodegen.frontends import load_model  # noqa: E402
from zocodegen.ops.table import macs  # noqa: E402
from zocodegen.planner import plan_arena  # noqa: E402
from zocodegen.planner.patches import best_patched_arena  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"
SHARED = REPO.parent / "shared" / "models"
DOC = REPO / "docs" / "benchmarks.md"
MARKS = ("<!-- memory:begin -->", "<!-- memory:end -->")
#: TinyEngine's README (mit-han-lab/tinyengine, "Measured Results", STM32H743): peak SRAM of
#: the MCUNet models closest to ours; and the "Poor Man's Training" paper's MCUNet-in1.
PUBLISHED = {
    "mcunet_det.tflite": "92 kB (TinyEngine, mcunet-vww1 80x80)",
    "mcunet_in1_128.tflite": "190 KB (MCUNet-in1 128x128, the paper); 96 kB (TinyEngine, "
                             "mcunet-in1)",
    "mcunet_in1.tflite": "96 kB (TinyEngine, mcunet-in1)",
    "vww_96_int8.tflite": "92 kB (TinyEngine, mcunet-vww1 80x80)",
}


def models(vww: Path | None) -> list[Path]:
    out = [SHARED / "kws_ref_model.tflite", SHARED / "pretrainedResnet_quant.tflite",
           SHARED / "mcunet_det.tflite", FIXTURES / "mcunet_tiny.tflite",
           FIXTURES / "mcunet_in1.tflite", FIXTURES / "mcunet_in1_128.tflite"]
    if vww is not None:
        out.append(vww)
    return [p for p in out if p.is_file()]


def row(path: Path) -> dict:
    graph = load_model(path)
    note = ""
    if host_quantizable(graph) and path.name == "mcunet_det.tflite":
        graph = quantize_inputs_on_host(graph)  # its float input alone is 240 KB
        note = " (int8 input, --input-quantize host)"
    elementwise = plan_arena(graph)
    in_place = plan_arena(graph, in_place_convolutions=True)
    patched = best_patched_arena(graph)
    used = patched or in_place
    total_macs = sum(macs(graph, op) for op in graph.ops)
    stage = "-"
    if patched is not None:
        p = patched.patches
        stage = (f"ops {p.first}..{p.last}, {p.grid[0]}x{p.grid[1]}, "
                 f"+{100 * p.recomputed_macs / total_macs:.1f} % MACs")
    return dict(model=path.name + note, greedy=in_place.greedy_by_size_bytes,
                elementwise=elementwise.arena_bytes, in_place=in_place.arena_bytes,
                patched=used.arena_bytes, stage=stage, bound=used.lower_bound,
                published=PUBLISHED.get(path.name, ""))


def table(rows: list[dict]) -> str:
    def kb(n: int) -> str:
        return f"{n / 1024:.1f}"

    lines = ["| model | greedy, no sharing (KB) | element-wise in place | + convolutions in "
             "place | + patches | patch stage | lower bound | published peak SRAM |",
             "|---|---:|---:|---:|---:|---|---:|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {kb(r['greedy'])} | {kb(r['elementwise'])} | "
                     f"{kb(r['in_place'])} | **{kb(r['patched'])}** | {r['stage']} | "
                     f"{kb(r['bound'])} | {r['published']} |")
    return "\n".join(lines)


def write(text: str) -> None:
    replace_section(DOC, *MARKS, text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--vww", type=Path, help="an extra model (e.g. MLPerf Tiny VWW)")
    parser.add_argument("--only", metavar="NAME", action="append",
                        help="only the models whose file name contains NAME (repeatable)")
    args = parser.parse_args()
    if args.write and args.only:
        parser.error("--only measures part of the table: it never goes into the doc")
    chosen = [p for p in models(args.vww) if not args.only or any(n in p.name for n in args.only)]
    text = table([row(p) for p in chosen])
    print(text)
    if args.write:
        write(text)


if __name__ == "__main__":
    main()
