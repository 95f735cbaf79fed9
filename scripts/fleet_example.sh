#!/usr/bin/env bash
# A fleet on one machine (docs/fleet.md): three emulated devices, each with its own share of
# the corrupted digits under a different corruption, train the digits CNN together on Flower
# (a SuperLink, one SuperNode per device, `flwr run`). Each round the server sends the model
# with a seed per device, every device trains 20 steps and uploads its query sums (or its
# int8 delta, whichever is smaller), and the server replays them into each device's exact
# model, checks it against the device's checkpoint CRC, and averages.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
model=tests/fixtures/digits_cnn.tflite
out=out/fleet-example
rm -rf "$out" && mkdir -p "$out"
.venv/bin/zocodegen build "$model" --target native --train full --estimator wp --queries 20 \
    --record-scalars --no-guard --lr 0.01 --schedule constant -o "$out/device"
.venv/bin/python - "$model" "$out" <<'PY'
import sys, numpy as np
from zocodegen.datasets import fleet_shares
from zocodegen.frontends import load_model
graph = load_model(sys.argv[1])
shares = fleet_shares(3, graph.tensor(graph.inputs[0]).quant)
for k, share in enumerate(shares):
    np.savez(f"{sys.argv[2]}/share{k}.npz", x=share["x"], y=share["y"])
np.savez(f"{sys.argv[2]}/test.npz", x=shares[0]["x"][:1], y=shares[0]["y"][:1],
         x_test=np.concatenate([s["x_test"] for s in shares]),
         y_test=np.concatenate([s["y_test"] for s in shares]))
print("devices:", ", ".join(s["name"] for s in shares))
PY
for k in 0 1 2; do
  .venv/bin/zocodegen pack "$out/share$k.npz" -o "$out/device$k.img" --model "$model" --val-fraction 0
done
.venv/bin/zocodegen fleet local "$model" --build "$out/device" --native "$out/device" \
    --images "$out"/device{0,1,2}.img -o "$out/fleet" --rounds 5 --steps-per-round 20 \
    --min-devices 3 --test "$out/test.npz"
