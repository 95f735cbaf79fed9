#!/usr/bin/env bash
# The main job on the bundled example model (an MCUNet-style INT8 net with float I/O):
# inspect it against the STM32F746 budget, generate the firmware project, build it for the
# emulated Cortex-M7 (QEMU mps2-an500 holding the F746's 256 KB SRAM budget), run inference
# on it and check every output against the TFLite reference interpreter, bit for bit.
# Then training on the device, on the digits CNN with a corrupted-digits data set: pack the
# data into an SD-card-style image, build the training firmware for the same emulated board,
# train one epoch on it while the host serves the image over the framed serial link and shows
# live loss / accuracy, pull the checkpoint, export tuned.tflite and compare accuracy before
# and after with the TFLite interpreter (which must agree with what the device measured).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
model=tests/fixtures/mcunet_tiny.tflite
out=out/example
mkdir -p "$out"
# the example's own projects are made anew each time: build refuses to write over a folder
# it cannot tell is its own (one from an older zocodegen has no signed manifest)
rm -rf "$out/firmware" "$out/digits_train"
.venv/bin/zocodegen inspect "$model" --target stm32f746
.venv/bin/zocodegen build "$model" --target qemu --emulate stm32f746 -o "$out/firmware"
make -s -C "$out/firmware" qemu
.venv/bin/python - "$out/x.npy" <<'PY'
import sys, numpy as np
np.save(sys.argv[1], np.random.default_rng(0).standard_normal((8, 32, 32, 3)).astype(np.float32))
PY
.venv/bin/zocodegen infer "$model" --input "$out/x.npy" --output "$out/y.npy" --engine qemu
.venv/bin/python - "$model" "$out/x.npy" "$out/y.npy" <<'PY'
import sys, numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType
model, x, y = sys.argv[1], np.load(sys.argv[2]), np.load(sys.argv[3])
it = Interpreter(model_path=model, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
it.allocate_tensors()
i, o = it.get_input_details()[0], it.get_output_details()[0]
ref = []
for sample in x:
    it.set_tensor(i["index"], sample[None]); it.invoke(); ref.append(it.get_tensor(o["index"])[0])
ref = np.stack(ref)
same = bool(np.array_equal(ref, y))
print("class per sample (Cortex-M7 under QEMU):", y.argmax(axis=1).tolist())
print("bit-exact with the TFLite reference interpreter:", same)
if not same:
    sys.exit(1)
PY

# ---- zeroth-order training ----------------------------------------------------------------
digits=tests/fixtures/digits_cnn.tflite
.venv/bin/python - "$digits" "$out/digits.npz" <<'PY'
import sys
from zocodegen.datasets import digits_npz
from zocodegen.frontends import load_model
g = load_model(sys.argv[1])
d = digits_npz(sys.argv[2], g.tensor(g.inputs[0]).quant)
print(f"digits: {len(d['x'])} corrupted training images, {len(d['x_test'])} test images")
PY
.venv/bin/zocodegen pack "$out/digits.npz" -o "$out/digits.img" --model "$digits"
.venv/bin/zocodegen build "$digits" --target qemu --emulate stm32f746 --train full \
    --steps 486 --queries 50 -o "$out/digits_train"
rm -rf "$out/run"  # a fresh run (an existing RUN would be resumed)
.venv/bin/zocodegen train --qemu "$out/digits_train" --image "$out/digits.img" -o "$out/run" \
    --checkpoint-every 77
.venv/bin/zocodegen export "$digits" "$out/run/checkpoint.bin" -o "$out/tuned.tflite"
.venv/bin/python - "$digits" "$out" <<'PY'
import csv, sys
from pathlib import Path
import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType
model, out = Path(sys.argv[1]), Path(sys.argv[2])
data = np.load(out / "digits.npz")

def accuracy(path):
    it = Interpreter(model_path=str(path),
                     experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    i, o = it.get_input_details()[0], it.get_output_details()[0]
    hits = 0
    for x, y in zip(data["x_test"], data["y_test"]):
        it.set_tensor(i["index"], x[None]); it.invoke()
        hits += int(it.get_tensor(o["index"])[0].argmax() == y)
    return hits / len(data["y_test"])

before, after = accuracy(model), accuracy(out / "tuned.tflite")
rows = [r for r in csv.DictReader(open(out / "run/metrics.csv")) if r["accuracy"]]
device = float(rows[-1]["accuracy"])
print(f"test accuracy (TFLite interpreter): {100 * before:.1f}% before, "
      f"{100 * after:.1f}% after training on the device ({out / 'tuned.tflite'})")
print(f"the device measured {100 * device:.1f}%: same as the exported model: "
      f"{abs(device - after) < 1e-6}")
print(f"curves: {out / 'run/curves.png'}, metrics: {out / 'run/metrics.csv'}")
sys.exit(0 if abs(device - after) < 1e-6 and after > before else 1)
PY
