"""``inspect`` figures for the KWS model against values computed independently, from the
TFLite interpreter's own view of the model (not from zocodegen's frontend)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from conftest import reference_interpreter, shared_model


def _independent_figures(path):
    it = reference_interpreter(path)
    tensors = {d["index"]: d for d in it.get_tensor_details()}
    param_bytes = macs = 0
    for op in it._get_ops_details():
        ins = [tensors[i] for i in op["inputs"] if i >= 0]
        out = tensors[op["outputs"][0]]
        if op["op_name"] in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
            w, b = ins[1], ins[2]
            param_bytes += int(np.prod(w["shape"])) * 1 + int(np.prod(b["shape"])) * 4
            kernel = int(np.prod(w["shape"][1:]))  # kh*kw*cin (conv), kh*kw*cout (dw), cin (fc)
            if op["op_name"] == "DEPTHWISE_CONV_2D":
                kernel = int(w["shape"][1] * w["shape"][2])
            macs += int(np.prod(out["shape"])) * kernel
    return param_bytes, macs


def test_kws_parameter_bytes_and_macs():
    path = shared_model("kws_ref_model.tflite")
    expected_bytes, expected_macs = _independent_figures(path)
    proc = subprocess.run([sys.executable, "-m", "zocodegen", "inspect", str(path), "--json"],
                          capture_output=True, text=True, check=True)
    totals = json.loads(proc.stdout)["totals"]
    assert totals["param_bytes"] == expected_bytes
    assert totals["macs"] == expected_macs
    # DS-CNN as published: ~2.66 M MACs, ~24 KB of int8 weights + int32 biases
    assert 2_600_000 < totals["macs"] < 2_700_000
