"""The generated C equals the numpy reference (and, for TFLite models, the TFLite interpreter)
bit for bit: built natively with the host compiler, natively under ASan/UBSan, and for the
emulated Cortex-M7 (qemu-system-arm -M mps2-an500)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from conftest import (FIXTURE_ONNX, FIXTURE_TFLITE, SHARED_TFLITE, random_inputs,
                      reference_interpreter, resolve)
from zocodegen.projects import cached_build
from zocodegen.host.engines import run_samples
from zocodegen.frontends import load_model
from zocodegen.reference.executor import run

SAMPLES = 20
MODELS = ([pytest.param(("shared", n), id=n) for n in SHARED_TFLITE]
          + [pytest.param(("fixture", n), id=n) for n in FIXTURE_TFLITE + FIXTURE_ONNX])
HAVE_ARM = shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")


@pytest.fixture(scope="session", autouse=True)
def build_cache(tmp_path_factory, monkeypatch_session):
    monkeypatch_session.setenv("ZOCODEGEN_CACHE", str(tmp_path_factory.mktemp("zocache")))


@pytest.fixture(scope="session")
def monkeypatch_session():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _samples(graph, count=SAMPLES):
    x = graph.tensor(graph.inputs[0])
    return [{graph.inputs[0]: v} for v in random_inputs(x.shape, x.dtype, count, seed=11)]


def _check(graph, engine, artefact, samples, interpreter=None):
    mismatches = []
    results = list(run_samples(graph, engine, artefact, samples))
    assert len(results) == len(samples)
    for k, (sample, result) in enumerate(zip(samples, results)):
        expected = run(graph, sample)
        if interpreter is not None:
            interpreter.set_tensor(interpreter.get_input_details()[0]["index"],
                                   sample[graph.inputs[0]])
            interpreter.invoke()
            for detail, name in zip(interpreter.get_output_details(), graph.outputs):
                assert np.array_equal(interpreter.get_tensor(detail["index"]).reshape(-1),
                                      expected[name].reshape(-1))
        for name in graph.outputs:
            if not np.array_equal(result.outputs[name], expected[name]):
                diff = np.abs(result.outputs[name].astype(np.float64) - expected[name])
                mismatches.append(f"sample {k} output {name}: {int((diff > 0).sum())} "
                                  f"values differ, max {diff.max()}")
    assert not mismatches, "\n".join(mismatches)
    return results


def _interpreter(spec):
    path = resolve(spec)
    return reference_interpreter(path) if path.suffix == ".tflite" else None


@pytest.mark.parametrize("spec", MODELS)
def test_native_equals_reference(spec):
    path = resolve(spec)
    graph = load_model(path)
    interpreter = _interpreter(spec)
    if interpreter is not None and len(graph.outputs) > 1:
        interpreter = None  # multi-output order is checked by test_tflite_bitexact
    _check(graph, "native", cached_build(path, "native"), _samples(graph), interpreter)


@pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and qemu-system-arm "
                    "(apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm)")
@pytest.mark.parametrize("spec", MODELS)
def test_qemu_equals_reference(spec):
    path = resolve(spec)
    graph = load_model(path)
    results = _check(graph, "qemu", cached_build(path, "qemu"), _samples(graph))
    counts = {r.cycles for r in results}
    assert min(counts) > 0, "QEMU reported no instruction count"


@pytest.mark.parametrize("spec", MODELS)
def test_native_sanitizers_clean(spec):
    """ASan + UBSan with -fno-sanitize-recover: any finding aborts and fails the run."""
    path = resolve(spec)
    graph = load_model(path)
    _check(graph, "native", cached_build(path, "native", sanitize=True), _samples(graph, 6))
