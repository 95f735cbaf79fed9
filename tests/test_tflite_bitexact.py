"""The numpy reference equals the TFLite reference interpreter bit for bit, on every op's
output, for the MLPerf Tiny models and every TFLite fixture."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import FIXTURES, all_tflite_models, random_inputs, reference_interpreter, resolve
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


def test_a_bias_carrying_the_filters_quantized_dimension_loads(tmp_path):
    """TFLite Micro's person_detect.tflite stores quantized_dimension 3 (the filter's) on its
    1-D per-channel biases; TFLite Micro runs it, so the frontend takes such a bias along its
    only axis and computes exactly what the model with the dimension written as 0 computes."""
    from ai_edge_litert import schema_py_generated as schema

    source = FIXTURES / "digits_cnn.tflite"
    model = schema.ModelT.InitFromPackedBuf(source.read_bytes(), 0)
    patched = 0
    for tensor in model.subgraphs[0].tensors:
        q = tensor.quantization
        if q is not None and q.scale is not None and len(q.scale) > 1 and len(tensor.shape) == 1:
            q.quantizedDimension = 3
            patched += 1
    assert patched
    import flatbuffers

    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    path = tmp_path / "bias_dimension_3.tflite"
    path.write_bytes(bytes(builder.Output()))
    graph, original = load_model(path), load_model(source)
    (name,) = graph.inputs
    for x in random_inputs(graph.tensor(name).shape, graph.tensor(name).dtype, 6):
        got, expected = run(graph, {name: x}), run(original, {original.inputs[0]: x})
        for out in original.outputs:
            np.testing.assert_array_equal(got[out], expected[out])
