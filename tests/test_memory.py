"""Issue 14's memory techniques besides patches (tests/test_patches.py): convolutions in
place, training gradient regions in dead arena bytes, and the paper-size MCUNet-in1
stand-in (128x128) against the paper's budgets (docs/memory.md)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import FIXTURES, needs_qemu, shared_model
from zocodegen.projects import cached_build
from zocodegen.cli import main
from zocodegen.codegen.project import BuildOptions, plan_project
from zocodegen.frontends import load_model
from zocodegen.host.devices import Firmware
from zocodegen.formats.image import pack_image
from zocodegen.host.devices import LaunchedDevice
from zocodegen.host.trainer import Trainer
from zocodegen.ops.table import macs
from zocodegen.planner import plan_arena, verify
from zocodegen.ops.conv import in_place_rows
from zocodegen.training.config import TrainConfig

PAPER = FIXTURES / "mcunet_in1_128.tflite"


def _op(graph, name):
    return next(op for op in graph.ops if op.name == name)


def test_in_place_ring_depths():
    """The ring holds the output rows that cannot be written back yet: 2 for a 3x3
    stride-1 depthwise layer (its output row r lands on input row r, which row r + 1 still
    reads), up to 3 for a 5x5 one, 1 for a 1x1 convolution that keeps the size; none for
    convolutions that change the size (the plan's buffers cannot shrink)."""
    depths = {}
    for model in (FIXTURES / "mcunet_in1.tflite", shared_model("kws_ref_model.tflite")):
        graph = load_model(model)
        for op in graph.ops:
            if op.type not in ("CONV_2D", "DEPTHWISE_CONV_2D"):
                continue
            x, y = graph.tensor(op.inputs[0]), graph.tensor(op.outputs[0])
            k = graph.tensor(op.inputs[1]).shape[1]
            key = (op.type, k, op.options["stride"][0], y.nbytes == x.nbytes)
            depths.setdefault(key, set()).add(in_place_rows(graph, op))
    assert depths[("DEPTHWISE_CONV_2D", 3, 1, True)] == {2}
    assert 3 in depths[("DEPTHWISE_CONV_2D", 5, 1, True)] <= {2, 3}
    assert depths[("CONV_2D", 1, 1, True)] == {1}
    for key, found in depths.items():
        if not key[3]:
            assert found == {None}, key


def test_convolutions_in_place_lower_real_arenas():
    """kws and ResNet-8 run convolutions in place (so the bit-exact chains exercise them);
    the plan checker accepts it; the lower bound stays below the arena."""
    for name, before, after in (("kws_ref_model.tflite", 16520, 8840),
                                ("pretrainedResnet_quant.tflite", 50024, 34664)):
        graph = load_model(shared_model(name))
        plan = plan_arena(graph, in_place_convolutions=True)
        verify(graph, plan)
        convs = {op.name for op in graph.ops if op.type in ("CONV_2D", "DEPTHWISE_CONV_2D")}
        assert convs & set(plan.in_place_ops)
        assert plan.arena_bytes == after and plan.lower_bound <= plan.arena_bytes
        assert plan_arena(graph).arena_bytes == before  # the default: no convolution


@pytest.mark.parametrize("model,target,train", [
    ("mcunet_in1.tflite", "stm32h7b3", TrainConfig(mode="full")),
    ("mcunet_in1.tflite", "stm32f746", TrainConfig(mode="sparse")),
    ("digits_cnn.tflite", "stm32f746", TrainConfig(mode="full", batch=2, queries=4)),
    ("mcunet_in1.tflite", "stm32h7b3", TrainConfig(mode="full", estimator="np-channel")),
])
def test_gradient_regions_sit_in_bytes_no_later_op_uses(model, target, train):
    """Each zeroth-order layer's gradient region overlaps no arena buffer (tensor or kernel
    scratch) that an op from the layer on uses; the shared gradient buffer shrinks to what
    is left; the arena item grows by the tail the regions need past its end."""
    graph = load_model(FIXTURES / model)
    plan = plan_project(graph, BuildOptions(target=target, train=train))
    arena, training = plan.arena, plan.training
    placed = [layer for layer in training.layers if layer.gradient_offset is not None]
    assert placed
    for layer in placed:
        start = layer.gradient_offset
        end = start + layer.gradient_bytes
        assert layer.gradient_bytes > 0
        assert start % 8 == 0 and end <= arena.arena_bytes + training.arena_tail
        for buf in arena.buffers:
            if buf.last >= layer.op:
                assert end <= buf.offset or buf.offset + buf.size <= start, (layer.op_name,
                                                                             buf.name)
    arena_item = next(i for i in plan.placement.items if i.name == "arena")
    assert arena_item.bytes == arena.arena_bytes + training.arena_tail
    assert training.gradient_words == 2  # nothing left for the shared buffer (8 bytes)


def test_paper_size_stand_in():
    """MCUNet-in1 class at 128x128: the paper's 0.46 M parameters and 22.5 M MACs (within
    5 %), and a whole-op arena (training builds) of 128 KB of activations, plus the 72 B of
    a 1x1 convolution's widened rows (zo_conv.c: 4 rows of 8 input channels as int16, and 8
    of slack) that do not fit beside them at the peak."""
    graph = load_model(PAPER)
    assert graph.tensor(graph.inputs[0]).shape == (1, 128, 128, 3)
    params = sum(graph.tensor(n).size for op in graph.ops for n in op.inputs[1:3]
                 if n and graph.tensor(n).data is not None)
    assert params == 452_970
    assert abs(sum(macs(graph, op) for op in graph.ops) / 22.5e6 - 1) < 0.05
    assert plan_arena(graph).arena_bytes == 128 * 1024 + 72


@needs_qemu
@pytest.mark.parametrize("mode, options, target", [
    pytest.param("sparse", dict(blocks=16, block=15), "stm32f746", id="sparse-f746"),
    # the paper's estimator: the default np-channel needs 891 KB there (docs/memory.md)
    pytest.param("full", dict(estimator="adaptive"), "stm32h7b3", id="full-h7b3")])
def test_paper_size_steps_on_qemu_equal_the_simulator(mode, options, target, tmp_path):
    """Two steps of the 128x128 stand-in on QEMU linked with the board's budget (sparse: the
    F746's 256 KB; full: the H7B3's, with layers that recompute, docs/memory.md): the
    checkpoint is byte-identical to the simulator's."""
    rng = np.random.default_rng(12)
    x = rng.integers(-128, 128, size=(3, 128, 128, 3)).astype(np.int8)
    y = rng.integers(0, 10, size=3)
    image = tmp_path / "data.img"
    pack_image(image, x, y, num_classes=10, checkpoint_bytes=1 << 20)
    config = TrainConfig(mode=mode, steps=2, queries=1, lr=0.01, **options)
    plan = plan_project(load_model(PAPER), BuildOptions(target="qemu", emulate=target,
                                                        train=config))
    assert plan.placement.total <= (209 if mode == "sparse" else 668) * 1024
    assert mode == "sparse" or any(L.restart_op != L.op for L in plan.training.layers)
    elf = cached_build(PAPER, "qemu", emulate=target, train=config)
    run = tmp_path / "run"
    trainer = Trainer(LaunchedDevice(Firmware("qemu", elf, icount=False)), image, run,
                      checkpoint_every=2, timeout=600, progress=False)
    assert trainer.run().steps == 2
    sim = tmp_path / "sim"
    flags = [f"--{k}={v}" for k, v in options.items()]
    assert main(["simulate", str(PAPER), "--data", str(image), "-o", str(sim), "--train", mode,
                 *flags, "--steps", "2", "--queries", "1", "--lr", "0.01", "--no-guard",
                 "--layers", "all"]) == 0
    assert (run / "checkpoint.bin").read_bytes() == (sim / "checkpoint.bin").read_bytes()
