"""Mutated model bytes either load (and then run) or fail with the clean ModelError: no
other outcome (no traceback, no crash inside a kernel)."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import FIXTURES, SHARED_MODELS
from zocodegen.errors import ModelError
from zocodegen.frontends import load_model
from zocodegen.reference import run

SOURCES = [FIXTURES / "multi_op.tflite", FIXTURES / "mcunet_tiny.tflite",
           FIXTURES / "onnx_qdq_int8.onnx"]
SOURCES += [p for p in (SHARED_MODELS / "kws_ref_model.tflite",) if p.is_file()]
MODELS = [(p.suffix, p.read_bytes()) for p in SOURCES]


@st.composite
def mutated_model(draw):
    suffix, original = MODELS[draw(st.integers(0, len(MODELS) - 1))]
    data = bytearray(original)
    kind = draw(st.sampled_from(["flip", "overwrite", "truncate", "splice"]))
    if kind == "truncate":
        return suffix, bytes(data[: draw(st.integers(0, len(data) - 1))])
    for _ in range(draw(st.integers(1, 8))):
        pos = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "overwrite":
            data[pos] = draw(st.integers(0, 255))
        else:
            chunk = draw(st.binary(min_size=1, max_size=16))
            data[pos:pos + len(chunk)] = chunk
    return suffix, bytes(data)


@settings(max_examples=1000, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(model=mutated_model())
def test_mutated_models_fail_cleanly_or_run(tmp_path, model):
    suffix, blob = model
    path = tmp_path / f"mutant{suffix}"
    path.write_bytes(blob)
    try:
        graph = load_model(path)
    except ModelError as exc:
        assert "\n" not in str(exc)
        return
    inputs = {}
    for name in graph.inputs:
        t = graph.tensor(name)
        inputs[name] = np.zeros(t.shape, t.dtype)
    with np.errstate(all="ignore"):
        run(graph, inputs)
