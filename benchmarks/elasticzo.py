"""ElasticZO benchmark (issue 16, not a test): per model, what each training method costs on
the device at an equal forward budget: instructions per training step under
`qemu-system-arm -M mps2-an500 -icount shift=0` and SRAM from the memory plan (checked
against `arm-none-eabi-size` by benchmarks/training.py's `memory`), for ZO only, the hybrid
with C = 1 and 2 back-propagated layers, and ElasticZO-INT8 (alone and with C = 1).

Equal forward budget: the one-sided estimators run Q = 2 queries per ZO layer, INT8 runs
Q = 1 (its + and - sides are two forwards each); BP layers spend no query. One step each on
random data (the count does not depend on the values beyond a few instructions).

    .venv/bin/python benchmarks/elasticzo.py            # prints the markdown table
    .venv/bin/python benchmarks/elasticzo.py --write    # also updates docs/benchmarks.md

Runtime (2 shared cores): about 6 minutes, most of it building the QEMU firmwares (cached
in ~/.cache/zocodegen afterwards).
"""
from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from doc_sections import replace_section  # noqa: E402
from training import kb, memory, step_instructions  # noqa: E402

SHARED = REPO.parent / "shared" / "models"
FIXTURES = REPO / "tests" / "fixtures"
#: (model, target, training mode): kws and the digits CNN on the F746, the MCUNet-class
#: fixture fully trained on the H7B3 (its paper setting)
MODELS = [(FIXTURES / "digits_cnn.tflite", "stm32f746", "full"),
          (SHARED / "kws_ref_model.tflite", "stm32f746", "full"),
          (FIXTURES / "mcunet_in1.tflite", "stm32h7b3", "full")]
#: (label, TrainConfig fields, build options, queries)
METHODS = [
    ("ZO only", {}, (), 2),
    ("hybrid C = 1", {"bp_layers": 1}, ("--bp-layers", "1"), 2),
    ("hybrid C = 2", {"bp_layers": 2}, ("--bp-layers", "2"), 2),
    ("ElasticZO-INT8", {"estimator": "int8"}, ("--estimator", "int8"), 1),
    ("ElasticZO-INT8, C = 1", {"estimator": "int8", "bp_layers": 1},
     ("--estimator", "int8", "--bp-layers", "1"), 1),
]
DOC = REPO / "docs" / "benchmarks.md"
MARK_START, MARK_END = "<!-- elasticzo:start -->", "<!-- elasticzo:end -->"


def measure(tmp: Path, only: list[str]) -> list[dict]:
    rows = []
    for model, target, mode in MODELS:
        if only and not any(n in model.name for n in only):
            continue
        if not model.is_file():
            print(f"skipping {model.name}: not found (../shared is absent)", file=sys.stderr)
            continue
        zo_step = None
        for label, fields, options, queries in METHODS:
            mem = memory(model, target, mode, tmp, options)
            steps = step_instructions(model, target, mode, queries, tmp, fields)
            zo_step = zo_step or steps
            rows.append(dict(model=model.name, target=target, method=label, queries=queries,
                             memory=mem, step=steps, relative=steps / zo_step))
            print(f"{model.name} {label}: {steps:,} instructions", file=sys.stderr)
    return rows


def table(rows: list[dict]) -> list[str]:
    lines = ["| model (target) | method | Q | instructions / step | vs ZO only | trainable "
             "parameters KB | gradient region KB | saved activations KB | SRAM plan KB |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        m = r["memory"]
        mem = (["does not fit"] * 4 if isinstance(m, str) else
               [kb(m["params"]), kb(m["gradient"]), kb(m["saved"]), kb(m["plan"])])
        lines.append(f"| {r['model']} ({r['target']}) | {r['method']} | {r['queries']} | "
                     f"{r['step']:,} | {r['relative']:.2f} | " + " | ".join(mem) + " |")
    return lines


def write_doc(text: str) -> None:
    replace_section(DOC, MARK_START, MARK_END, text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--only", metavar="NAME", action="append", default=[],
                        help="only the models whose file name contains NAME (repeatable)")
    args = parser.parse_args()
    if args.write and args.only:
        parser.error("--only measures part of the table: it never goes into the doc")
    with tempfile.TemporaryDirectory() as tmp:
        rows = measure(Path(tmp), args.only)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    text = "\n".join([
        "## ElasticZO: back-propagated last layers and the integer-only estimator",
        "",
        f"Measured {datetime.date.today()} at commit {commit} by `benchmarks/elasticzo.py`: "
        "one training step under QEMU `-icount` (the firmware's own count), equal forward "
        "budget (Q = 2 one-sided queries per ZO layer, Q = 1 two-sided for INT8; BP layers "
        "spend none), SRAM from the memory plan of the generated build (which "
        "`tests/test_budgets.py` checks against `arm-none-eabi-size`). Accuracy of the same "
        "methods: docs/experiment.md.",
        "", *table(rows)])
    print(text)
    if args.write:
        write_doc(text)


if __name__ == "__main__":
    main()
