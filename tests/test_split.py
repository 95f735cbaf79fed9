"""FedSPZO's split perturbation (--estimator split, issue 18): the simulator, the native and
the QEMU engine give byte-identical checkpoints after K = 20 steps; the device's P_1 + P_2
query sums per step replay into the same checkpoint (model-wise scalars: a fleet device
uploads P_1 + P_2 per step whatever the depth); bad options are refused in one line."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from test_replay import STEPS, _config, _device_run, _replayed
from test_training import NEEDS_ARM, _data, _resolve, _simulated
from zocodegen.cli import main
from zocodegen.errors import UserError
from zocodegen.frontends import load_model
from zocodegen.training.plan import training_plan

pytestmark = pytest.mark.usefixtures("module_build_cache")


def _split(**options):
    return _config(estimator="split", queries=2, **options)


def _check(spec: str, engine: str, config, tmp_path) -> None:
    model, graph, plan, device, scalars = _device_run(spec, engine, config, tmp_path)
    x, y = _data(graph, plan.num_classes, count=8)
    sha = hashlib.sha256(model.read_bytes()).digest()
    assert _simulated(graph, plan, x, y, STEPS, sha) == device
    layout = plan.scalar_layout
    assert sorted(scalars) == sorted((t, key) for t in range(STEPS) for key, _ in layout)
    assert [count for _, count in layout] == [config.queries, plan.inner_perturbations]
    assert _replayed(model, graph, plan, scalars) == device
    assert _replayed(model, graph, plan, scalars, 0) != device, "training moved nothing"


@pytest.mark.parametrize("spec, options", [
    pytest.param("fixture:digits_cnn.tflite", {}, id="digits-last-layer"),
    pytest.param("fixture:digits_cnn.tflite", dict(cutoff=1, inner_queries=3, batch=2),
                 id="digits-cutoff1-ps3-batch2"),
    pytest.param("fixture:digits_cnn.tflite", dict(distribution="uniform",
                                                   perturbation="pool:1023"),
                 id="digits-uniform-pool"),
    pytest.param("shared:kws_ref_model.tflite", dict(layers=(0, 8, 9), cutoff=8), id="kws"),
    pytest.param("fixture:onnx_qdq_int8.onnx", dict(lr=0.3), id="onnx"),
    pytest.param("fixture:digits_resnet.tflite", dict(cutoff=3), id="resnet-skip-across"),
])
def test_split_native_equals_the_simulator(spec, options, tmp_path):
    _check(spec, "native", _split(**options), tmp_path)


@NEEDS_ARM
def test_split_qemu_equals_the_simulator(tmp_path):
    _check("fixture:digits_cnn.tflite", "qemu", _split(cutoff=2), tmp_path)


def test_split_plan():
    graph = load_model(_resolve("fixture:digits_cnn.tflite"))
    plan = training_plan(graph, _split(inner_queries=3))
    assert plan.split == 3 and plan.inner_perturbations == 12
    assert plan.inv_nq == np.float32(1 / 24)  # 1 / (2 N P_2) = 1 / (4 P_s N P_1)
    assert plan.forwards_per_step == 2 * 2 * (1 + 2 * 3)
    assert plan.gradient_bytes() == max(sum(layer.weight_count for layer in plan.layers),
                                        4 * max(layer.weight_count for layer in plan.layers))
    with pytest.raises(UserError, match="--cutoff 0 must be a trained layer after the first one"):
        training_plan(graph, _split(cutoff=0))
    with pytest.raises(UserError, match="at least two trained layers"):
        training_plan(graph, _split(layers=(3,)))


@pytest.mark.parametrize("options, message", [
    (["--two-sided"], "split is two-sided already"),
    (["--bp-layers", "1"], "use --train full and --bp-layers 0"),
    (["--inner-queries", "0"], "--inner-queries: must be in 1..64"),
    (["--cutoff", "7"], "--cutoff 7 must be a trained layer after the first one: one of 1, 2, 3"),
])
def test_bad_split_options_are_one_line(options, message, tmp_path, capsys):
    model = str(_resolve("fixture:digits_cnn.tflite"))
    assert main(["build", model, "--target", "native", "--train", "full", "--estimator",
                 "split", "--no-guard", "--lr", "0.01", "-o", str(tmp_path / "p")]
                + options) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
