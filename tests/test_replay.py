"""Replayable training (issue 18, part 1): the device sends each WP layer's query sums
(--record-scalars), and `replay` rebuilds, from the starting model, the options and those
scalars alone, a checkpoint byte-identical to the device's after K >= 20 steps (native and
QEMU; every perturbation option); bad scalar files and non-replayable runs are refused in
one line."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from test_training import NEEDS_ARM, _data, _image, _resolve
from zocodegen.projects import cached_build
from zocodegen.cli import main
from zocodegen.host.engines import FirmwareSession
from zocodegen.errors import DataError, UserError
from zocodegen.frontends import load_model
from zocodegen.training import checkpoint, replay, simulator
from zocodegen.training.config import TrainConfig
from zocodegen.training.plan import training_plan

pytestmark = pytest.mark.usefixtures("module_build_cache")
STEPS = 20


def _config(**options) -> TrainConfig:
    return TrainConfig(**{"steps": 40, "queries": 3, "lr": 0.01, "estimator": "wp",
                          "record_scalars": True, **options})


def _device_run(spec: str, engine: str, config: TrainConfig, tmp_path, steps: int = STEPS):
    """Train on the device; its checkpoint, the scalars it sent, the plan and the model."""
    model = _resolve(spec)
    graph = load_model(model)
    plan = training_plan(graph, config)
    x, y = _data(graph, plan.num_classes, count=8)
    image = _image(tmp_path, x, y, plan.num_classes)
    elf = cached_build(model, engine, graph=graph, train=config)
    with FirmwareSession(graph, engine, elf, icount=False) as session:
        session.attach_image(image)
        session.train(steps)
        blob = session.save_checkpoint()
        pieces = list(session.scalars)
    return model, graph, plan, blob, replay.assemble(pieces)


def _replayed(model, graph, plan, scalars, steps: int = STEPS) -> bytes:
    params = replay.replay(plan, simulator.initial_params(graph, plan), scalars, steps)
    sha = hashlib.sha256(model.read_bytes()).digest()
    return checkpoint.encode(simulator.to_checkpoint(plan, params, steps, sha))


@pytest.mark.parametrize("spec, options", [
    pytest.param("fixture:digits_cnn.tflite", {}, id="digits"),
    pytest.param("fixture:digits_cnn.tflite", dict(batch=2, perturbation="pool:1023",
                                                   distribution="uniform"),
                 id="digits-batch2-pool-uniform"),
    pytest.param("fixture:digits_cnn.tflite", dict(two_sided=True, perturbation="rotating:7",
                                                   query_batch=2), id="digits-two-sided-b2"),
    pytest.param("shared:kws_ref_model.tflite", dict(layers=(0, 8, 9)), id="kws-3-layers"),
    pytest.param("fixture:onnx_qdq_int8.onnx", dict(lr=0.3), id="onnx"),
])
def test_replay_equals_the_device_native(spec, options, tmp_path):
    model, graph, plan, device, scalars = _device_run(spec, "native", _config(**options),
                                                      tmp_path)
    assert sorted(scalars) == [(t, layer.index) for t in range(STEPS) for layer in plan.layers]
    assert _replayed(model, graph, plan, scalars) == device
    start = checkpoint.decode(_replayed(model, graph, plan, scalars, 0)).layers
    end = checkpoint.decode(device).layers
    assert any(a.weights.tobytes() != b.weights.tobytes() for a, b in zip(start, end)), \
        "training moved nothing: the comparison would be vacuous"


@NEEDS_ARM
def test_replay_equals_the_device_qemu(tmp_path):
    model, graph, plan, device, scalars = _device_run(
        "fixture:digits_cnn.tflite", "qemu", _config(distribution="uniform"), tmp_path)
    assert _replayed(model, graph, plan, scalars) == device


def test_simulator_records_what_replay_needs():
    """The simulator's query sums replay its own run exactly (no device needed)."""
    graph = load_model(_resolve("fixture:digits_cnn.tflite"))
    plan = training_plan(graph, _config(two_sided=True))
    x, y = _data(graph, plan.num_classes, count=8)
    params = start = simulator.initial_params(graph, plan)
    scalars = {}
    for t in range(5):
        record: dict = {}
        params, _ = simulator.train_step(graph, plan, params, t, x[[t % 8]], y[[t % 8]],
                                         record=record)
        scalars.update({(t, i): v for i, v in record.items()})
    again = replay.replay(plan, start, scalars, 5)
    assert all(np.array_equal(again[k], params[k]) for k in params)


def test_scalar_file_round_trip_and_damage(tmp_path):
    scalars = {(0, 0): np.array([5, -7, 1 << 30], np.int32), (0, 1): np.array([0], np.int32)}
    path = tmp_path / "scalars.bin"
    owner = replay.ScalarOwner(bytes(range(32)), 7, 20, 2, 0.01)
    replay.write(path, scalars, owner)
    back = replay.read(path)
    assert replay.read_owner(path) == replay.ScalarOwner(bytes(range(32)), 7, 20, 2,
                                                          float(np.float32(0.01)))
    assert back.keys() == scalars.keys()
    assert all(np.array_equal(back[k], scalars[k]) for k in scalars)
    data = bytearray(path.read_bytes())
    data[-6] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"record 1 \(step 0, layer 1\) fails its CRC-32"):
        replay.read(path)
    path.write_bytes(bytes(data[:-3]))
    with pytest.raises(DataError, match="cut short"):
        replay.read(path)


def test_incomplete_scalars_and_unreplayable_runs_are_refused():
    graph = load_model(_resolve("fixture:digits_cnn.tflite"))
    plan = training_plan(graph, _config())
    start = simulator.initial_params(graph, plan)
    with pytest.raises(DataError, match="no query sums for step 0, trainable layer 0"):
        replay.replay(plan, start, {}, 1)
    with pytest.raises(UserError, match="only weight-perturbation layers"):
        training_plan(graph, _config(estimator="adaptive"))
    with pytest.raises(UserError, match="add --no-guard and a fixed --lr"):
        _config(guard=True)


def test_replay_command_matches_the_training_run(tmp_path, capsys):
    """build --record-scalars, train (RUN/scalars.bin, RUN/checkpoint.bin), then replay:
    the CLI says the checkpoints match; a checkpoint of another model is refused."""
    model = _resolve("fixture:digits_cnn.tflite")
    graph = load_model(model)
    x, y = _data(graph, 10, count=8)
    data = tmp_path / "data.npz"
    np.savez(data, x=x, y=y)
    image = tmp_path / "train.img"
    assert main(["pack", str(data), "-o", str(image), "--val-fraction", "0"]) == 0
    project = tmp_path / "fw"
    options = ["--train", "full", "--estimator", "wp", "--queries", "2", "--steps", "20",
               "--lr", "0.01", "--no-guard", "--record-scalars"]
    assert main(["build", str(model), "--target", "native", "-o", str(project), *options]) == 0
    assert json.loads((project / "manifest.json").read_text())["training"]["record_scalars"]
    run = tmp_path / "run"
    assert main(["train", "--native", str(project), "--image", str(image), "-o", str(run)]) == 0
    assert (run / "scalars.bin").is_file()
    out = tmp_path / "replayed.bin"
    capsys.readouterr()
    assert main(["replay", str(model), "--build", str(project), "--scalars",
                 str(run / "scalars.bin"), "-o", str(out), "--check",
                 str(run / "checkpoint.bin")]) == 0
    said = capsys.readouterr().out
    assert "identical" in said and out.read_bytes() == (run / "checkpoint.bin").read_bytes()
    assert replay.read_owner(run / "scalars.bin") == replay.ScalarOwner.of_build(
        replay.build_config(project)[0], hashlib.sha256(model.read_bytes()).digest())
    # another build (another seed) of the same model: the scalars name their own run
    reseeded = tmp_path / "fw_seed2"
    assert main(["build", str(model), "--target", "native", "-o", str(reseeded), *options,
                 "--seed", "2"]) == 0
    assert main(["replay", str(model), "--build", str(reseeded), "--scalars",
                 str(run / "scalars.bin"), "-o", str(tmp_path / "other.bin")]) == 2
    err = capsys.readouterr().err
    assert "belongs to another run" in err and "seed 1" in err and "seed 2" in err
    assert not (tmp_path / "other.bin").exists()
    other = _resolve("shared:kws_ref_model.tflite")
    assert main(["replay", str(other), "--build", str(project), "--scalars",
                 str(run / "scalars.bin"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "another model" in err and len(err.strip().splitlines()) == 1


def test_a_malformed_scalars_frame_is_refused():
    """A SCALARS payload whose length does not match its count is a protocol error, not
    numbers: the session stops with a clear LinkError instead of recording garbage."""
    import struct

    from zocodegen.formats import link as protocol
    good = struct.pack("<IHHHH", 3, 1, 0, 2, 2) + struct.pack("<2i", -5, 7)
    assert protocol.parse_scalars(good) == protocol.Scalars(3, 1, 0, 2, (-5, 7))
    with pytest.raises(ValueError, match="4 bytes for 2 values"):
        protocol.parse_scalars(good[:-4])
    with pytest.raises(ValueError, match="of 1"):
        protocol.parse_scalars(struct.pack("<IHHHH", 3, 1, 0, 2, 1) + bytes(8))
