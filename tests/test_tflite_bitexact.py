"""The numpy reference equals the TFLite reference interpreter bit for bit, on every op's
output, for the MLPerf Tiny models and every TFLite fixture."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import all_tflite_models, random_inputs, reference_interpreter, resolve
from zocodegen.frontends import load_model
from zocodegen.reference.executor import run, run_all

SAMPLES = 24


@pytest.mark.parametrize("spec", all_tflite_models())
def test_outputs_bit_exact(spec):
    path = resolve(spec)
    graph = load_model(path)
    it = reference_interpreter(path)
    (inp,) = it.get_input_details()
    outs = {d["name"]: d for d in it.get_output_details()}
    assert set(outs) == set(graph.outputs)
    for x in random_inputs(inp["shape"], inp["dtype"], SAMPLES):
        it.set_tensor(inp["index"], x)
        it.invoke()
        got = run(graph, {graph.inputs[0]: x})
        for name, detail in outs.items():
            expected = it.get_tensor(detail["index"])
            assert got[name].dtype == expected.dtype
            np.testing.assert_array_equal(got[name], expected, err_msg=name)


@pytest.mark.parametrize("spec", all_tflite_models())
def test_every_layer_bit_exact(spec):
    """Intermediate tensors too, so a kernel error cannot hide behind a saturating head."""
    path = resolve(spec)
    graph = load_model(path)
    it = reference_interpreter(path, preserve=True)
    (inp,) = it.get_input_details()
    index = {d["name"]: d["index"] for d in it.get_tensor_details()}
    for x in random_inputs(inp["shape"], inp["dtype"], 6, seed=1):
        it.set_tensor(inp["index"], x)
        it.invoke()
        env = run_all(graph, {graph.inputs[0]: x})
        for op in graph.ops:
            name = op.outputs[0]
            expected = it.get_tensor(index[name]).reshape(env[name].shape)
            np.testing.assert_array_equal(env[name], expected, err_msg=f"{op.name} ({op.type})")


def test_partial_run_from_layer_matches_full_run(tmp_path):
    """Training re-runs the network from layer i with the prefix's activations as given."""
    from conftest import FIXTURES
    graph = load_model(FIXTURES / "mcunet_tiny.tflite")
    x = random_inputs((1, 32, 32, 3), np.float32, 4, seed=3)[3]
    full = run_all(graph, {graph.inputs[0]: x})
    start = len(graph.ops) // 2
    prefix = {n: v for n, v in full.items()
              if any(n in op.inputs for op in graph.ops[start:])}
    resumed = run_all(graph, {}, start=start, values=prefix)
    for name in graph.outputs:
        np.testing.assert_array_equal(resumed[name], full[name])
