"""The grid experiment's second model (issue 13): ``tests/fixtures/digits_resnet.tflite``.

A digits classifier of another architecture than digits_cnn (residual ADDs, average pooling)
pre-trained the same way by ``tests/fixtures/generate.py digits_resnet``. These tests pin
down what the experiment relies on: it is the architecture the README describes, small enough
to train as fast as digits_cnn, bit-exact in the numpy reference, and as accurate on clean
digits as the README records.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import FIXTURES, reference_interpreter
from zocodegen.frontends import load_model
from zocodegen.ops.table import OP_TYPES, TRAINABLE_OP_TYPES
from zocodegen.reference.executor import run

pytest.importorskip("sklearn", reason="the digits data comes from scikit-learn's bundled copy "
                                      "(pip install scikit-learn)")

from zocodegen import datasets  # noqa: E402

MODEL = FIXTURES / "digits_resnet.tflite"


@pytest.fixture(scope="module")
def graph():
    return load_model(MODEL)


@pytest.fixture(scope="module")
def split():
    return datasets.load_digits_split(0)


def quantized(graph, images: np.ndarray) -> np.ndarray:
    q = graph.tensor(graph.inputs[0]).quant
    return datasets.quantize_images(images, q.scalar_scale, q.scalar_zero_point)


def readme_accuracy(split_label: str) -> float:
    """The int8 accuracy generate.py recorded for digits_resnet in tests/fixtures/README.md."""
    text = (FIXTURES / "README.md").read_text()
    block = text.split("digits_resnet.tflite: ", 1)[1].split("```", 1)[0]
    found = re.search(rf"accuracy on {split_label} \(\d+\): float [\d.]+, int8 TFLite ([\d.]+)",
                      block)
    assert found, f"no '{split_label}' accuracy for digits_resnet in tests/fixtures/README.md"
    return float(found.group(1))


def test_architecture(graph):
    inp, out = graph.tensor(graph.inputs[0]), graph.tensor(graph.outputs[0])
    assert inp.dtype == np.int8 and inp.shape == (1, 8, 8, 1)
    assert out.dtype == np.int8 and out.shape == (1, 10)
    assert MODEL.stat().st_size < 20_000
    types = [op.type for op in graph.ops]
    assert set(types) <= set(OP_TYPES) - {"QUANTIZE", "DEQUANTIZE"}
    assert types.count("ADD") >= 2
    # Both ADDs are residual: one input is the output of an earlier op that is not the
    # ADD's immediate predecessor (the skip connection).
    producers = {name: k for k, op in enumerate(graph.ops) for name in op.outputs}
    for k, op in enumerate(graph.ops):
        if op.type == "ADD":
            sources = sorted(producers[name] for name in op.inputs[:2])
            assert sources[0] < k - 2 and sources[1] == k - 1, (k, sources)
    assert types[-1] == "SOFTMAX" and types[-2] == "FULLY_CONNECTED"
    assert "AVERAGE_POOL_2D" in types[:-2]
    params = sum(graph.tensor(n).size for op in graph.ops if op.type in TRAINABLE_OP_TYPES
                 for n in op.inputs[1:] if n)
    assert 2000 <= params <= 5000, params


def test_reference_matches_litert(graph, split):
    pytest.importorskip("ai_edge_litert")
    it = reference_interpreter(MODEL)
    ind, outd = it.get_input_details()[0], it.get_output_details()[0]
    images = np.concatenate([split["x_clean_test"][:8], split["x_test"][:8],
                             datasets.corrupt_family(split["x_clean_test"][:8], "fog", 2, 0)])
    for x in quantized(graph, images):
        it.set_tensor(ind["index"], x[None])
        it.invoke()
        got = run(graph, {graph.inputs[0]: x[None]})[graph.outputs[0]]
        np.testing.assert_array_equal(got, it.get_tensor(outd["index"]))


def test_clean_accuracy_is_the_recorded_one(graph, split, record_property):
    x = quantized(graph, split["x_clean_test"])
    predictions = np.array([int(run(graph, {graph.inputs[0]: xi[None]})[graph.outputs[0]]
                                .argmax()) for xi in x])
    clean = float((predictions == split["y_clean_test"]).mean())
    record_property("clean_test_accuracy", clean)
    # Bit-exact with the TFLite interpreter generate.py measured it with: exactly equal.
    assert clean == pytest.approx(readme_accuracy("clean test"), abs=5e-5)
    assert clean >= 0.95
