"""The training half of scripts/example.sh through the Python API (docs/api.md): pack the
corrupted digits, build the training firmware, train on the device while the host serves the
image, simulate the same run, check the two checkpoints are byte-identical, and export the
trained model.

    .venv/bin/python scripts/example_api.py                    # QEMU, as the example
    .venv/bin/python scripts/example_api.py --engine native --steps 12
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import zocodegen
from zocodegen.datasets import digits_npz
from zocodegen.frontends import load_model

MODEL = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "digits_cnn.tflite"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("qemu", "native"), default="qemu")
    parser.add_argument("--steps", type=int, default=486)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("-o", "--output", type=Path, default=Path("out/example_api"))
    args = parser.parse_args()
    out = args.output
    out.mkdir(parents=True, exist_ok=True)

    graph = load_model(MODEL)
    digits_npz(out / "digits.npz", graph.tensor(graph.inputs[0]).quant)
    packed = zocodegen.pack(out / "digits.npz", out / "digits.img", model=MODEL)
    print(f"packed {packed.layout.count('train')} training records")

    options = dict(steps=args.steps, queries=args.queries)
    built = zocodegen.build(MODEL, target=args.engine, emulate="stm32f746", train="full",
                            output=out / "firmware", **options)
    print(f"built {built.project}: SRAM {built.plan.placement.total:,} B, fits "
          f"{built.plan.board.name}: {built.plan.placement.fits}")

    device = zocodegen.train(out / "digits.img", out / "run", force=True,
                             **{args.engine: built.project})
    simulated = zocodegen.simulate(MODEL, out / "digits.img", out / "sim", force=True,
                                   **options)
    same = ((out / "run" / "checkpoint.bin").read_bytes()
            == (out / "sim" / "checkpoint.bin").read_bytes())
    exported = zocodegen.export(MODEL, out / "run" / "checkpoint.bin", out / "tuned.tflite")
    print(f"device: {device.steps} steps, test accuracy {100 * device.accuracy_before:.1f}% -> "
          f"{100 * device.accuracy_after:.1f}%; simulator: "
          f"{100 * simulated.accuracy_after:.1f}%")
    print(f"device checkpoint == simulator checkpoint: {same}")
    print(f"exported {exported.tensors} trained tensors to {exported.model}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
