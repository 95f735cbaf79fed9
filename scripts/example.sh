#!/usr/bin/env bash
# The main job on the bundled example model (an MCUNet-style INT8 net with float I/O):
# inspect it against the STM32F746 budget, generate the firmware project, build it for the
# emulated Cortex-M7 (QEMU mps2-an500 holding the F746's 256 KB SRAM budget), run inference
# on it and check every output against the TFLite reference interpreter, bit for bit.
# (Training on the device arrives with the training and host-link issues.)
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
sys.exit(0 if same else 1)
PY
