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
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from zocodegen.build import cached_build  # noqa: E402
from zocodegen.cli import main as zocodegen  # noqa: E402
from zocodegen.frontends import load_model  # noqa: E402
from zocodegen.host.devices import Firmware  # noqa: E402
from zocodegen.host.image import pack_image  # noqa: E402
from zocodegen.host.trainer import LaunchedDevice, Trainer  # noqa: E402
from zocodegen.training.config import TrainConfig  # noqa: E402

SHARED = REPO.parent / "shared" / "models"
MCUNET = REPO / "tests" / "fixtures" / "mcunet_in1.tflite"
#: target -> (model, mode) rows; the paper's figure where it has one.
ROWS = {
    "stm32h7b3": [(MCUNET, "full"), (SHARED / "pretrainedResnet_quant.tflite", "full"),
                  (SHARED / "kws_ref_model.tflite", "full")],
    "stm32f746": [(MCUNET, "sparse"), (MCUNET, "full"),
                  (SHARED / "pretrainedResnet_quant.tflite", "full"),
                  (SHARED / "kws_ref_model.tflite", "full")],
}
PAPER = {("stm32h7b3", "mcunet_in1.tflite", "full"): "668 KB (MCUNet-in1, full)",
         ("stm32f746", "mcunet_in1.tflite", "sparse"): "209 KB (MCUNet-in1, sparse)"}
DEVICE_Q = 50
DOC = REPO / "docs" / "benchmarks.md"
BEGIN, END = "<!-- training:begin -->", "<!-- training:end -->"


def kb(n: float) -> str:
    return f"{n / 1024:,.1f}"


def memory(model: Path, target: str, mode: str, tmp: Path) -> dict | str:
    """The plan's items and the linked firmware's sizes; the refusal's first words when the
    configuration does not fit."""
    out = tmp / f"{target}_{model.stem}_{mode}"
    try:
        code = zocodegen(["build", str(model), "--target", target, "--train", mode,
                          "-o", str(out)])
    except SystemExit as exc:
        code = exc.code
    if code != 0:
        return "does not fit"
    subprocess.run(["make", "-C", str(out), "firmware"], check=True, capture_output=True)
    sizes = subprocess.run(["arm-none-eabi-size", "-A", str(out / "build" / target /
                                                           "firmware.elf")],
                           capture_output=True, text=True, check=True).stdout
    sections = {m.group(1): int(m.group(2))
                for m in re.finditer(r"^(\.\S+)\s+(\d+)\s+\d+$", sizes, re.M)}
    report = json.loads((out / "memory_report.json").read_text())
    items = {i["name"]: i["bytes"] for r in report["sram"]["regions"] for i in r["items"]}
    ram = sum(sections.get(s, 0) for s in (".stack", ".data", ".bss", ".zo_arena"))
    flash = sum(sections.get(s, 0) for s in (".isr_vector", ".text", ".rodata", ".data"))
    return dict(params=items["trainable parameters"], arena=items["arena"],
                gradient=items["gradient buffer"], plan=report["sram"]["total_bytes"],
                budget=report["sram"]["budget_bytes"], ram=ram, flash=flash)


def step_instructions(model: Path, target: str, mode: str, queries: int, tmp: Path) -> int:
    """One training step's instructions under QEMU -icount with the target's budget."""
    graph = load_model(model)
    x = graph.tensor(graph.inputs[0])
    rng = np.random.default_rng(0)
    data = rng.integers(-128, 128, size=(2,) + tuple(x.shape[1:])).astype(np.int8)
    image = tmp / f"{model.stem}.img"
    classes = graph.tensor(graph.outputs[0]).size
    pack_image(image, data, np.arange(2) % classes, num_classes=classes,
               checkpoint_bytes=1 << 20)
    config = TrainConfig(steps=1, queries=queries, mode=mode,
                         block=0 if mode == "sparse" else None)
    elf = cached_build(model, "qemu", emulate=target, train=config)
    records = []
    run = tmp / f"run_{target}_{model.stem}_{mode}_{queries}"  # a new run: nothing to resume
    Trainer(LaunchedDevice(Firmware("qemu", elf, icount=True)), image, run,
            checkpoint_every=1, timeout=600, progress=False, on_step=records.append,
            log=lambda s: None).run()
    return records[-1].cycles


def table(target: str, tmp: Path) -> list[str]:
    lines = [f"**{target}**", "",
             "| model | mode | trainable parameters KB | arena KB | gradient buffer KB | "
             "SRAM KB (plan / linked) of budget | flash KB | instructions / step, Q=1 | "
             "Q=2 | Q=50 (extrapolated) | paper |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for model, mode in ROWS[target]:
        paper = PAPER.get((target, model.name, mode), "")
        m = memory(model, target, mode, tmp)
        if isinstance(m, str):
            lines.append(f"| {model.name} | {mode} | | | | {m} | | | | | {paper} |")
            print(lines[-1], flush=True)
            continue
        one, two = (step_instructions(model, target, mode, q, tmp) for q in (1, 2))
        fifty = one + (DEVICE_Q - 1) * (two - one)
        label = mode + (" (block 0 of 4)" if mode == "sparse" else "")
        lines.append(
            f"| {model.name} | {label} | {kb(m['params'])} | {kb(m['arena'])} | "
            f"{kb(m['gradient'])} | {kb(m['plan'])} / {kb(m['ram'])} of {kb(m['budget'])} | "
            f"{kb(m['flash'])} | {one:,} | {two:,} | {fifty:,} | {paper} |")
        print(lines[-1], flush=True)
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--target", choices=sorted(ROWS), action="append")
    args = parser.parse_args()
    lines = [f"Measured {datetime.date.today()} with `benchmarks/training.py`.", ""]
    with tempfile.TemporaryDirectory() as tmp:
        for target in args.target or sorted(ROWS):
            lines += table(target, Path(tmp))
    text = "\n".join(lines)
    print(text)
    if args.write:
        doc = DOC.read_text()
        block = f"{BEGIN}\n{text}\n{END}"
        doc = (re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), block, doc, flags=re.S)
               if BEGIN in doc else doc.rstrip() + "\n\n" + block + "\n")
        DOC.write_text(doc)


if __name__ == "__main__":
    main()
