"""--scales (zocodegen/training/scales.py, zo_scales.c): the options it refuses, its integer
rounding, the checkpoint and fleet encodings that carry the scales, and the multipliers it
rebuilds. The chains simulator == native == QEMU with scales are in tests/test_sparse.py
(block selection), tests/test_training.py (export) and the estimator equality below."""
from __future__ import annotations

import dataclasses
import shutil
import struct

import numpy as np
import pytest

from conftest import FIXTURES
from test_training import _check_against_simulator
from zocodegen.errors import DataError, UserError
from zocodegen.frontends import load_model
from zocodegen.host.fleet.updates import apply_delta, fedavg, parameter_delta
from zocodegen.reference.conv import requant_params
from zocodegen.training import checkpoint, scales, simulator
from zocodegen.training.config import TrainConfig
from zocodegen.training.plan import training_plan

MODEL = FIXTURES / "digits_cnn.tflite"
pytestmark = pytest.mark.usefixtures("module_build_cache")


@pytest.mark.parametrize("options, words", [
    (dict(estimator="adaptive"), "--estimator adaptive has none"),
    (dict(distribution="uniform"), "--distribution rademacher"),
    (dict(query_batch=2), "--query-batch"),
])
def test_what_scales_cannot_go_with_is_refused(options, words):
    with pytest.raises(UserError, match=words):
        TrainConfig(scales=True, **options)


def test_only_the_channel_wise_convolutions_train_scales():
    graph = load_model(MODEL)
    plan = training_plan(graph, TrainConfig(scales=True))
    assert {(layer.mode, layer.scaled) for layer in plan.layers} == {("CH", True),
                                                                      ("NP", False)}
    assert all(layer.scale_count == (layer.channels if layer.scaled else 0)
               for layer in plan.layers)


def test_the_node_term_rounds_half_away_from_zero():
    x = np.arange(-100, 101)
    expect = np.sign(x) * np.floor(np.abs(x) / 32 + 0.5)
    assert np.array_equal(scales.node_term(x, np.ones_like(x)), expect)
    assert np.array_equal(scales.node_term(x, -np.ones_like(x)), -expect)


def test_the_model_scales_give_the_models_multipliers():
    """Rebuilding from unchanged scales is the compiler's own derivation (TFLite's)."""
    graph = load_model(MODEL)
    for layer in training_plan(graph, TrainConfig(scales=True)).layers:
        if layer.scaled:
            a = requant_params(graph, layer.op)
            b = requant_params(graph, layer.op, scales.model_scales(graph, layer))
            assert np.array_equal(a.multiplier, b.multiplier)
            assert np.array_equal(a.shift, b.shift)


def test_an_update_stays_within_a_quarter_and_four_times_the_model():
    graph = load_model(MODEL)
    layer = next(l for l in training_plan(graph, TrainConfig(scales=True)).layers if l.scaled)
    s0 = scales.model_scales(graph, layer)
    huge = np.full(layer.channels, 1 << 30, dtype=np.int64)
    squares = np.zeros(layer.channels, dtype=np.int64)
    for sign, bound in ((1, scales.LOWEST), (-1, scales.HIGHEST)):
        moved = scales.updated(graph, layer, s0, np.float32(1e30), sign * huge, squares, 1)
        assert moved.dtype == np.float32
        assert np.array_equal(moved, (bound * s0.astype(np.float64)).astype(np.float32))


def _checkpoint_with_scales() -> tuple[checkpoint.Checkpoint, object]:
    graph = load_model(MODEL)
    plan = training_plan(graph, TrainConfig(scales=True))
    params = simulator.initial_params(graph, plan)
    for layer in plan.layers:
        if layer.scaled:
            key = scales.key(layer.weights)
            params[key] = (params[key] * np.float32(1.25)).astype(np.float32)
    return simulator.to_checkpoint(plan, params, 3, b"\x01" * 32), plan


def test_the_checkpoint_carries_the_scales_and_refuses_version_2():
    ckpt, plan = _checkpoint_with_scales()
    blob = checkpoint.encode(ckpt)
    assert len(blob) == checkpoint.encoded_size(
        (l.weight_count, l.bias_count, l.scale_count) for l in plan.layers)
    back = checkpoint.decode(blob)
    for a, b in zip(ckpt.layers, back.layers):
        assert np.array_equal(a.scales, b.scales) and b.scales.dtype == np.float32
    old = bytearray(blob)
    old[8:12] = struct.pack("<I", 2)
    with pytest.raises(DataError, match="version 2 is not supported"):
        checkpoint.decode(bytes(old))


def test_a_fleet_delta_carries_the_new_scales_exactly():
    end, _ = _checkpoint_with_scales()
    start = dataclasses.replace(end, layers=tuple(
        dataclasses.replace(lp, scales=np.ones_like(lp.scales)) for lp in end.layers))
    moved = apply_delta(start, parameter_delta(start, end), 0)
    assert checkpoint.encode(moved) == checkpoint.encode(dataclasses.replace(end, step=3))
    bad = bytearray(parameter_delta(start, end))
    lp = next(lp for lp in end.layers if lp.scales.size)  # the first layer's, in its place
    at = 2 * lp.weights.size + 8 * lp.bias.size
    assert lp is end.layers[0]
    bad[at:at + 4] = struct.pack("<f", -1.0)
    with pytest.raises(DataError, match="not positive"):
        apply_delta(start, bytes(bad), 0)


def test_fedavg_averages_scales_in_float():
    a = {"s": np.array([1.0, 2.0], np.float32), "w": np.array([1, 2], np.int8)}
    b = {"s": np.array([2.0, 2.5], np.float32), "w": np.array([2, 2], np.int8)}
    out = fedavg([(a, 1), (b, 3)])
    assert out["s"].dtype == np.float32
    assert np.array_equal(out["s"], np.array([1.75, 2.375], np.float32))
    assert np.array_equal(out["w"], np.array([2, 2], np.int8))


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
@pytest.mark.parametrize("estimator", ["np-channel", "channel"])
def test_scales_on_the_device_are_the_simulators(estimator, tmp_path):
    """Three steps on the digits CNN, --two-sided too: the native firmware's checkpoint
    (scales and all) is the simulator's, and the scales moved."""
    for two_sided in (False, True):
        config = TrainConfig(steps=10, queries=4, lr=0.1, estimator=estimator, scales=True,
                             two_sided=two_sided)
        _check_against_simulator("fixture:digits_cnn.tflite", "native", 3,
                                 tmp_path / str(two_sided), config)


def test_exporting_scales_into_onnx_is_refused(tmp_path):
    from zocodegen.model_export import export_model
    path = FIXTURES / "onnx_qdq_int8.onnx"
    graph = load_model(path)
    op = next(op for op in graph.ops if op.type in scales.SCALED_OP_TYPES)
    channels = graph.tensor(op.inputs[1]).shape[0]
    with pytest.raises(UserError, match="ONNX"):
        export_model(path, graph, {}, tmp_path / "out.onnx",
                     {op.inputs[1]: np.ones(channels, np.float32)})


def test_every_c_reader_of_checkpoints_takes_the_generated_header():
    """The engine and the field trainer's slot reader take the magic, the version and the
    offsets from include/zo_checkpoint_format.h, generated from checkpoint.py (a copy of the
    version in zo_field_card.c once made killed field runs restart from step 0), and every
    offset there is where checkpoint.encode puts its field."""
    import re
    root = FIXTURES.parents[1] / "templates"
    for path in (root / "train" / "zo_checkpoint.c", root / "field" / "zo_field_card.c"):
        text = path.read_text()
        assert '#include "zo_checkpoint_format.h"' in text, path
        assert not re.search(r"#define \w*CKPT_\w+", text), path
        assert not re.search(r"\bh \+ \d+\b|sector \+ \d+\b", text), path
    macros = dict(re.findall(r"#define (ZO_CKPT_\w+) (\S+)", checkpoint.c_header()))
    assert macros["ZO_CKPT_VERSION"] == f"{checkpoint.VERSION}u"
    assert macros["ZO_CKPT_HEADER_BYTES"] == f"{checkpoint.HEADER.size}u"
    ckpt = checkpoint.Checkpoint(bytes(range(32)), step=0x01020304, seed=0x0A0B0C0D, layers=(),
                                 lr=1.5, halvings=7, best_step=99, best_correct=55,
                                 best_loss=-(1 << 40) - 3, rollbacks=4, falling=1)
    blob = checkpoint.encode(ckpt)
    offset = {name[len("ZO_CKPT_OFF_"):].lower(): int(value.rstrip("u"))
              for name, value in macros.items() if name.startswith("ZO_CKPT_OFF_")}
    u32 = {name: struct.unpack_from("<I", blob, at)[0] for name, at in offset.items()}
    assert blob[offset["magic"]:offset["magic"] + 8] == checkpoint.MAGIC
    assert blob[offset["sha256"]:offset["sha256"] + 32] == ckpt.model_sha256
    assert (u32["version"], u32["header_bytes"], u32["step"], u32["layers"], u32["bytes"],
            u32["seed"], u32["halvings"], u32["best_step"], u32["best_correct"],
            u32["rollbacks"], u32["falling"]) == (checkpoint.VERSION, 96, 0x01020304, 0,
                                                  len(blob), 0x0A0B0C0D, 7, 99, 55, 4, 1)
    assert struct.unpack_from("<f", blob, offset["lr"])[0] == 1.5
    assert struct.unpack_from("<q", blob, offset["best_loss"])[0] == ckpt.best_loss
    assert int(macros["ZO_CKPT_IDENTITY_BYTES"].rstrip("u")) == offset["seed"]