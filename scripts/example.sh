#!/usr/bin/env bash
# The main job on the bundled example model (an MCUNet-style INT8 net with float I/O):
# inspect it against the STM32F746 budget, generate the firmware project, build it for the
# emulated Cortex-M7 (QEMU mps2-an500 holding the F746's 256 KB SRAM budget), run inference
# on it and check every output against the TFLite reference interpreter, bit for bit.
# Then training, on the digits CNN with a corrupted-digits data set: one epoch in the bit-exact
# simulator with a live progress bar, export of the tuned .tflite, and the generated training
# firmware on the emulated Cortex-M7 reading the packed data image, whose checkpoint after 3
# steps is byte-identical to the simulator's. (The streaming host link is issue 5.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
model=tests/fixtures/mcunet_tiny.tflite
out=out/example
mkdir -p "$out"
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
.venv/bin/zocodegen simulate "$digits" --data "$out/digits.npz" -o "$out/run" --epochs 1 \
    --queries 50 --lr 0.003 --eval-every 100
.venv/bin/zocodegen export "$digits" "$out/run/checkpoint.bin" -o "$out/tuned.tflite"
.venv/bin/zocodegen build "$digits" --target qemu --emulate stm32f746 --train full \
    --steps 539 --queries 50 --lr 0.003 -o "$out/digits_train"
make -s -C "$out/digits_train" qemu
.venv/bin/python - "$digits" "$out" <<'PY'
import hashlib, sys
from pathlib import Path
import numpy as np
from zocodegen.engines import FirmwareSession
from zocodegen.frontends import load_model
from zocodegen.host.image import pack_image, read_header
from zocodegen.training import checkpoint, simulator
from zocodegen.training.config import TrainConfig
from zocodegen.training.plan import training_plan
model, out = Path(sys.argv[1]), Path(sys.argv[2])
graph, data = load_model(model), np.load(out / "digits.npz")
image = out / "digits.img"
pack_image(image, data["x"], data["y"], x_test=data["x_test"], y_test=data["y_test"],
           num_classes=10, checkpoint_bytes=1 << 16)
with FirmwareSession(graph, "qemu", out / "digits_train/build/qemu/firmware.elf") as fw:
    print("Cortex-M7 (QEMU) training on", fw.attach_image(image), "images from", image)
    for t in fw.train(3):
        print(f"  step {t.step}: loss {t.loss:.3f} nats, lr {t.lr:.6f}, "
              f"{t.cycles:,} instructions")
    size = fw.save_checkpoint()
start = read_header(image).checkpoint_lba * 512
device = image.read_bytes()[start:start + size]
plan = training_plan(graph, TrainConfig(steps=539, queries=50, lr=0.003))
params = simulator.initial_params(graph, plan)
for record, params in simulator.run(graph, plan, params, data["x"], data["y"]):
    if record.step == 3:
        break
sim = checkpoint.encode(simulator.to_checkpoint(plan, params, 3,
                                                hashlib.sha256(model.read_bytes()).digest()))
print("device checkpoint after 3 steps byte-identical to the simulator's:", device == sim)
sys.exit(0 if device == sim else 1)
PY
