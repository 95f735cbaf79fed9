"""Zeroth-order training (issue 4): simulator == native C == QEMU C checkpoints, byte for
byte, on the shared models and fixtures; resume; memory decomposition; export; learning;
bad data."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, shared_model
from zocodegen.projects import cached_build, generate, make
from zocodegen.cli import main
from zocodegen.codegen.project import BuildOptions
from zocodegen.formats import status
from zocodegen.codegen.project import (ARENA_ALIGNMENT_GAP, LINK_RX_BYTES, LINK_TX_BYTES,
                                       RUNTIME_BSS_BYTES)
from zocodegen.host.engines import FirmwareError, FirmwareSession
from zocodegen.frontends import load_model
from zocodegen.formats.image import pack_image
from zocodegen.training import checkpoint, simulator, step_parts
from zocodegen.training.config import TrainConfig
from zocodegen.training.data import load_dataset
from zocodegen.training.plan import training_plan
from zocodegen.training.runner import begin
from zocodegen.training.update import learning_rate, round_half_away

HAVE_ARM = bool(shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm"))
NEEDS_ARM = pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and "
                                                    "qemu-system-arm (scripts/setup.sh)")
K_STEPS = 3


#: firmware builds cached per module, away from the user's cache (conftest.py)
pytestmark = pytest.mark.usefixtures("module_build_cache")



def _resolve(spec: str) -> Path:
    kind, name = spec.split(":")
    return shared_model(name) if kind == "shared" else FIXTURES / name


def _data(graph, classes: int, count: int = 5, seed: int = 0):
    rng = np.random.default_rng(seed)
    t = graph.tensor(graph.inputs[0])
    x = rng.integers(-128, 128, size=(count,) + tuple(t.shape[1:])).astype(t.dtype)
    return x, rng.integers(0, classes, size=count)


def _image(tmp: Path, x, y, classes: int) -> Path:
    path = tmp / "train.img"
    pack_image(path, x, y, num_classes=classes, checkpoint_bytes=1 << 20)
    return path


def _simulated(graph, plan, x, y, steps: int, sha: bytes) -> bytes:
    params = simulator.initial_params(graph, plan)
    for record, params in simulator.run(graph, plan, params, x, y):
        if record.step == steps:
            break
    return checkpoint.encode(simulator.to_checkpoint(plan, params, steps, sha))


def _simulated_with_guard(model: Path, graph, config, image: Path, steps: int) -> bytes:
    """The simulator's checkpoint after ``steps`` steps of a run started as the device starts
    it (lr trials, the guard's baseline: runner.begin)."""
    plan = training_plan(graph, config)
    data = load_dataset(image, graph, plan.num_classes)
    params = simulator.initial_params(graph, plan)
    plan, state, guard = begin(graph, plan, params, data)
    for record, params in simulator.run(graph, plan, params, data.x, data.y, guard=guard):
        if record.step == steps:
            break
    sha = hashlib.sha256(model.read_bytes()).digest()
    return checkpoint.encode(simulator.to_checkpoint(plan, params, steps, sha,
                                                     guard.state if guard else state))


def _check_against_simulator(spec: str, engine: str, steps: int, tmp: Path,
                             config: TrainConfig) -> None:
    """The device's checkpoint after ``steps`` steps equals the simulator's, and training
    changed the parameters (so the comparison is not vacuous)."""
    model = _resolve(spec)
    graph = load_model(model)
    plan = training_plan(graph, config)
    x, y = _data(graph, plan.num_classes, count=6)
    image = _image(tmp, x, y, plan.num_classes)
    sha = hashlib.sha256(model.read_bytes()).digest()
    expected = _simulated(graph, plan, x, y, steps, sha)
    assert _firmware_checkpoint(model, graph, config, engine, image, steps) == expected
    initial = checkpoint.encode(simulator.to_checkpoint(
        plan, simulator.initial_params(graph, plan), steps, sha))
    assert expected != initial, "training changed nothing: the comparison would be vacuous"


def _firmware_checkpoint(model: Path, graph, config, engine, image: Path, steps: int,
                         sanitize: bool = False, **build) -> bytes:
    artefact = cached_build(model, engine, graph=graph, train=config, sanitize=sanitize,
                            **build)
    with FirmwareSession(graph, engine, artefact, icount=False) as session:
        session.attach_image(image)
        records = session.train(steps)
        blob = session.save_checkpoint()
    assert [r.step for r in records] == list(range(1, steps + 1))
    return blob


MODELS = [pytest.param("shared:kws_ref_model.tflite", id="kws"),
          pytest.param("shared:pretrainedResnet_quant.tflite", id="resnet"),
          pytest.param("fixture:onnx_qdq_int8.onnx", id="onnx_qdq_int8"),
          pytest.param("fixture:digits_cnn.tflite", id="digits")]
ENGINES = [pytest.param("native", id="native"),
           pytest.param("qemu", id="qemu", marks=NEEDS_ARM)]


#: the default (np-channel: CH where a layer has fewer weights than outputs, else NP) and the
#: paper's adaptive WP / NP, the default before docs/decisions/np-channel-default.md
ESTIMATOR_MODES = [pytest.param("np-channel", {"CH", "NP"}, id="np-channel"),
                   pytest.param("adaptive", {"WP", "NP"}, id="adaptive")]


@pytest.mark.parametrize("estimator, modes", ESTIMATOR_MODES)
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("spec", MODELS)
def test_firmware_checkpoint_equals_simulator(spec, engine, estimator, modes, tmp_path):
    """All layers trainable, both of the estimator's modes in use, K = 3 steps: identical
    bytes."""
    model = _resolve(spec)
    graph = load_model(model)
    config = TrainConfig(steps=10, queries=3, lr=0.003, estimator=estimator)
    plan = training_plan(graph, config)
    assert {layer.mode for layer in plan.layers} == modes
    assert len(plan.layers) == len(plan.all_trainable)
    x, y = _data(graph, plan.num_classes)
    image = _image(tmp_path, x, y, plan.num_classes)
    sha = hashlib.sha256(model.read_bytes()).digest()
    expected = _simulated(graph, plan, x, y, K_STEPS, sha)
    got = _firmware_checkpoint(model, graph, config, engine, image, K_STEPS)
    assert got == expected
    initial = checkpoint.encode(simulator.to_checkpoint(
        plan, simulator.initial_params(graph, plan), K_STEPS, sha))
    assert got != initial, "training changed nothing: the comparison would be vacuous"


@pytest.mark.parametrize("options", [
    pytest.param(dict(estimator="np", batch=2), id="np-batch2"),
    pytest.param(dict(estimator="wp", batch=2, schedule="constant"), id="wp-batch2-constant"),
    pytest.param(dict(no_scaling=True), id="no-scaling"),
    pytest.param(dict(layers=(1, 3)), id="layers-1-3"),
    pytest.param(dict(sparse_block=1), id="sparse-block1"),
    pytest.param(dict(estimator="channel", sparse_block=1), id="channel-sparse-block1"),
    pytest.param(dict(estimator="np-channel", two_sided=True, distribution="uniform"),
                 id="np-channel-two-sided-uniform")])
def test_training_options_bit_exact_native(options, tmp_path):
    model = FIXTURES / "digits_cnn.tflite"
    graph = load_model(model)
    kw = dict(steps=8, queries=4, lr=0.01)
    kw.update({k: v for k, v in options.items() if k not in ("no_scaling", "sparse_block")})
    if options.get("no_scaling"):
        kw.update(gnorm_scaling=False, quant_scaling=False, lr=1e-6)
    if "sparse_block" in options:
        kw.update(mode="sparse", blocks=2, block=options["sparse_block"])
    config = TrainConfig(**kw)
    plan = training_plan(graph, config)
    x, y = _data(graph, plan.num_classes, count=7)
    image = _image(tmp_path, x, y, plan.num_classes)
    sha = hashlib.sha256(model.read_bytes()).digest()
    assert _firmware_checkpoint(model, graph, config, "native", image, 4) == \
        _simulated(graph, plan, x, y, 4, sha)


NEW_OPTIONS = [  # issue 13's options on the models of the chains, K steps each
    pytest.param(dict(estimator="np", batch=3, queries=3), 2, id="np-per-sample-batch3"),
    # N Q = 1200 > 1024: the loss-difference clamp L = (2^31 - 1) / (N Q) is below 2^21
    pytest.param(dict(batch=4, queries=300), 1, id="large-NQ"),
    pytest.param(dict(queries=2, lr_auto=True, guard=True, guard_every=1, guard_samples=16),
                 2, id="guard-lr-auto"),
    # eta far too large: every layer's update is clipped to 1.5 LSB
    pytest.param(dict(queries=3, lr=5.0, max_step=1.5), 2, id="update-clipping"),
    # NP updates near the clipping threshold, some clipped and some not: the C engine skips
    # the clipping pass only when its bound (step_bound) proves no step can exceed it
    pytest.param(dict(estimator="np", queries=3, lr=0.2, max_step=1.0), 3, id="clipping-margin"),
]


@pytest.mark.parametrize("options, steps", NEW_OPTIONS)
@pytest.mark.parametrize("spec", [pytest.param("shared:kws_ref_model.tflite", id="kws"),
                                  pytest.param("fixture:onnx_qdq_int8.onnx", id="onnx_qdq_int8"),
                                  pytest.param("fixture:digits_cnn.tflite", id="digits")])
def test_new_training_options_bit_exact_native(spec, options, steps, tmp_path):
    """Per-sample NP, a large N Q and the guard with --lr auto: the firmware's checkpoint
    (guard state included) equals the simulator's, byte for byte."""
    model = _resolve(spec)
    graph = load_model(model)
    config = TrainConfig(**{"steps": 4, "lr": 0.01, **options})
    plan = training_plan(graph, config)
    x, y = _data(graph, plan.num_classes, count=8 + 16)
    path = tmp_path / "train.img"
    pack_image(path, x[:8], y[:8], x_val=x[8:], y_val=y[8:], num_classes=plan.num_classes,
               checkpoint_bytes=1 << 20)
    got = _firmware_checkpoint(model, graph, config, "native", path, steps)
    assert got == _simulated_with_guard(model, graph, config, path, steps)


@pytest.mark.parametrize("estimator, batch, engine", [
    pytest.param("np", 2, "qemu", marks=NEEDS_ARM, id="np-batch2-qemu"),
    # channel-wise node perturbation (zo_estimate_ch.c): CH in every layer, and CH where
    # adaptive would use WP with NP in the last layer
    pytest.param("channel", 1, "native", id="channel-batch1"),
    pytest.param("channel", 2, "native", id="channel-batch2"),
    pytest.param("np-channel", 1, "native", id="np-channel-batch1"),
    pytest.param("np-channel", 2, "native", id="np-channel-batch2"),
    pytest.param("np-channel", 2, "qemu", marks=NEEDS_ARM, id="np-channel-batch2-qemu")])
def test_per_sample_node_perturbation_and_guard_bit_exact(estimator, batch, engine, tmp_path):
    """Per-sample node perturbation (NP, CH) with N samples under the guard and lr trials
    on the digits CNN, natively and on the emulated Cortex-M7."""
    model = FIXTURES / "digits_cnn.tflite"
    graph = load_model(model)
    config = TrainConfig(steps=3, queries=2, batch=batch, estimator=estimator, lr_auto=True,
                         guard=True, guard_every=1, guard_samples=16)
    x, y = _data(graph, 10, count=6 + 16)
    path = tmp_path / "train.img"
    pack_image(path, x[:6], y[:6], x_val=x[6:], y_val=y[6:], num_classes=10,
               checkpoint_bytes=1 << 20)
    assert _firmware_checkpoint(model, graph, config, engine, path, 3) == \
        _simulated_with_guard(model, graph, config, path, 3)


@pytest.mark.parametrize("engine", ENGINES)
def test_paper_setting_runs_on_the_f746_budget(engine, tmp_path):
    """The paper's device setting, Q = 50 with gradient accumulation N = 100 (N Q = 5000,
    five times the old cap), in firmware built for the STM32F746's 256 KB: one step equals
    the simulator's, byte for byte."""
    model = FIXTURES / "digits_cnn.tflite"
    graph = load_model(model)
    config = TrainConfig(steps=2, queries=50, batch=100, lr=0.01)
    plan = training_plan(graph, config)
    x, y = _data(graph, 10, count=100, seed=5)
    image = _image(tmp_path, x, y, 10)
    sha = hashlib.sha256(model.read_bytes()).digest()
    artefact = cached_build(model, engine, graph=graph, train=config, emulate="stm32f746")
    with FirmwareSession(graph, engine, artefact, icount=False) as session:
        session.attach_image(image)
        session.train(1)
        got = session.save_checkpoint()
    assert got == _simulated(graph, plan, x, y, 1, sha)


def test_sanitizers_clean_and_resume(tmp_path):
    """ASan+UBSan build; a fresh firmware that loads the 2-step checkpoint and trains 1 step
    ends where an uninterrupted 3-step run ends; a corrupted checkpoint is refused and the
    parameters stay usable."""
    model = FIXTURES / "digits_cnn.tflite"
    graph = load_model(model)
    config = TrainConfig(steps=10, queries=3, lr=0.01, batch=2)
    plan = training_plan(graph, config)
    x, y = _data(graph, plan.num_classes, count=6)
    image = _image(tmp_path, x, y, plan.num_classes)
    straight = _firmware_checkpoint(model, graph, config, "native", image, 3, sanitize=True)
    artefact = cached_build(model, "native", graph=graph, train=config, sanitize=True)
    with FirmwareSession(graph, "native", artefact) as session:
        session.attach_image(image)
        session.train(2)
        two = session.save_checkpoint()
    with FirmwareSession(graph, "native", artefact) as session:
        session.attach_image(image)
        assert session.load_checkpoint(two) == 2
        session.train(1)
        assert session.save_checkpoint() == straight
    corrupted = bytearray(two)
    corrupted[300] ^= 0x40  # a weight byte
    with FirmwareSession(graph, "native", artefact) as session:
        session.attach_image(image)
        with pytest.raises(FirmwareError) as err:
            session.load_checkpoint(bytes(corrupted))
        assert err.value.code == status.code("ZO_TRAIN_ERR_CRC")  # nothing applied
        session.train(1)


def test_memory_report_decomposes(tmp_path):
    """Full training SRAM = trainable parameters (with CONV_2D's folded biases) + arena (with
    the tail the layers' gradient regions need past its end) + saved activations + training
    state + stack + host link buffers; the ELF agrees."""
    model = shared_model("kws_ref_model.tflite")
    graph = load_model(model)
    config = TrainConfig(steps=10, queries=50)
    plan = training_plan(graph, config)
    project = generate(model, BuildOptions("qemu", train=config), tmp_path / "p", graph)
    report = json.loads((tmp_path / "p" / "memory_report.json").read_text())
    items = {i.name: i.bytes for i in project.training.ram_items()}
    folded = {l.op_index: l.channels for l in plan.layers if l.op.type == "CONV_2D"}
    params = sum(-(-l.weight_count // 8) * 8 + -(-4 * l.bias_count // 8) * 8
                 + -(-4 * folded.get(l.op_index, 0) // 8) * 8 for l in plan.layers)
    assert folded  # CONV_2D layers also keep their folded biases (zo_conv.c) in SRAM
    assert items["trainable parameters"] == params
    # every layer's gradient region (the largest: an NP node gradient) lives in arena bytes
    # dead during its estimate, past the arena's end where needed (docs/memory.md)
    assert all(L.gradient_offset is not None for L in project.training.layers)
    assert items["gradient buffer"] == 8
    np_need = max(4 * l.output_count for l in plan.layers if l.mode == "NP")
    arena = project.arena.arena_bytes + project.training.arena_tail
    assert arena >= np_need and plan.gradient_bytes() >= np_need
    stride = project.training.saved_stride
    largest_input = max(graph.tensor(l.input).nbytes for l in plan.layers)
    assert largest_input <= stride <= largest_input + 8
    link = LINK_RX_BYTES + LINK_TX_BYTES  # static .bss of zo_link.c, counted 8-aligned
    statics = RUNTIME_BSS_BYTES["training"] + ARENA_ALIGNMENT_GAP  # the rest of .bss
    total = (sum(items.values()) + -(-arena // 8) * 8 + 8192 + -(-link // 8) * 8
             + -(-statics // 8) * 8)  # 8-aligned
    assert project.placement.total == total
    assert report["sram"]["total_bytes"] == total
    assert {i["name"]: i["bytes"] for i in report["sram"]["items"]} == {
        **items, "arena": arena, "stack": 8192, "host link buffers": link,
        "firmware statics": statics}
    if not HAVE_ARM:
        pytest.skip("arm-none-eabi-size check needs gcc-arm-none-eabi")
    elf = make(tmp_path / "p", "qemu")
    sizes = subprocess.run(["arm-none-eabi-size", "-A", str(elf)], capture_output=True,
                           text=True, check=True).stdout
    section = {line.split()[0]: int(line.split()[1]) for line in sizes.splitlines()
               if line.startswith(".")}
    assert section[".zo_arena"] == arena + sum(items.values())
    # .bss: the link buffers, plus the few bytes of state the report leaves out (the link's
    # counters, main.c's zo_image with its sector scratch, the training state)
    assert link <= section[".bss"] <= link + 1024


@NEEDS_ARM
@pytest.mark.parametrize("target", ["stm32f746", "stm32h7b3"])
def test_training_firmware_links_for_boards(target, tmp_path):
    model = shared_model("kws_ref_model.tflite")
    config = TrainConfig(steps=100, queries=50)
    generate(model, BuildOptions(target, train=config), tmp_path / "fw")
    result = subprocess.run(["make", "-C", str(tmp_path / "fw"), "firmware"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "warning" not in result.stderr


@pytest.mark.parametrize("scales", [pytest.param(False, id="biases"),
                                    pytest.param(True, id="scales")])
def test_export_runs_like_the_firmware_with_the_checkpoint(scales, tmp_path):
    """simulate -> checkpoint -> export .tflite; ai_edge_litert on the export == the
    native firmware after loading the same checkpoint. With --scales the export carries the
    trained filter scales, from which TFLite derives the multipliers the device rebuilt."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    model = FIXTURES / "digits_cnn.tflite"
    graph = load_model(model)
    x, y = _data(graph, 10, count=6, seed=3)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    run = tmp_path / "run"
    assert main(["simulate", str(model), "--data", str(tmp_path / "d.npz"), "-o", str(run),
                 "--steps", "6", "--queries", "8", "--lr", "0.01", "--no-guard"]
                + (["--scales"] if scales else ["--no-scales"])) == 0
    out = tmp_path / "tuned.tflite"
    assert main(["export", str(model), str(run / "checkpoint.bin"), "-o", str(out)]) == 0
    assert out.read_bytes() != model.read_bytes()
    moved = [lp.scales for lp in checkpoint.load(run / "checkpoint.bin").layers
             if lp.scales.size]
    assert bool(moved) == scales
    for trained in moved:  # and the export carries them
        assert any(np.array_equal(t.quant.scale, trained)
                   for t in load_model(out).tensors.values() if t.quant is not None)
    config = TrainConfig(steps=6, queries=8, lr=0.01, scales=scales)
    image = _image(tmp_path, x, y, 10)
    blob = (run / "checkpoint.bin").read_bytes()
    interp = Interpreter(model_path=str(out),  # the reference kernels: bit-exact
                         experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    interp.allocate_tensors()
    inp, outp = interp.get_input_details()[0], interp.get_output_details()[0]
    artefact = cached_build(model, "native", graph=graph, train=config)
    with FirmwareSession(graph, "native", artefact) as session:
        session.attach_image(image)
        assert session.load_checkpoint(blob) == 6
        for sample in x:
            interp.set_tensor(inp["index"], sample[None])
            interp.invoke()
            fw = session.infer({graph.inputs[0]: sample[None]}).outputs[graph.outputs[0]]
            np.testing.assert_array_equal(fw, interp.get_tensor(outp["index"]))


def test_simulate_learns_digits(tmp_path):
    """A short run on the corrupted digits: the mean loss over the adapt data falls."""
    pytest.importorskip("sklearn")
    from zocodegen.datasets import digits_npz
    model = FIXTURES / "digits_cnn.tflite"
    graph = load_model(model)
    arrays = digits_npz(tmp_path / "digits.npz", graph.tensor(graph.inputs[0]).quant)
    run = tmp_path / "run"
    assert main(["simulate", str(model), "--data", str(tmp_path / "digits.npz"), "-o",
                 str(run), "--steps", "150", "--queries", "30", "--lr", "0.003", "--no-guard"]) == 0
    plan = training_plan(graph, TrainConfig(steps=150, scales=True))  # the CLI's run
    ckpt = checkpoint.load(run / "checkpoint.bin")
    after = simulator.from_checkpoint(graph, plan, ckpt)

    def mean_loss(params):
        env = step_parts.forward(graph, {graph.inputs[0]: arrays["x"], **params}, 0,
                                plan.logits_op)
        return step_parts.losses_q16(plan, env[plan.logits], arrays["y"]).mean() / 65536

    before_loss = mean_loss(simulator.initial_params(graph, plan))
    assert mean_loss(after) < before_loss - 0.05
    for name in ("metrics.csv", "curves.png", "run.json"):
        assert (run / name).stat().st_size > 0


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(x=d["x"].astype(np.float32)), "float32"),
    (lambda d: d.update(x=d["x"][:, :4]), "shape"),
    (lambda d: d.update(y=d["y"] + 10), "outside 0..9"),
    (lambda d: d.update(x=d["x"][:0], y=d["y"][:0]), "empty"),
    (lambda d: d.pop("y"), "'x' and 'y'"),
    (lambda d: d.update(y=d["y"][:3]), "samples"),
    (lambda d: d.update(x_test=d["x"]), "come together"),
])
def test_simulate_refuses_bad_data(change, message, tmp_path, capsys):
    graph = load_model(FIXTURES / "digits_cnn.tflite")
    x, y = _data(graph, 10)
    arrays = {"x": x, "y": y}
    change(arrays)
    np.savez(tmp_path / "bad.npz", **arrays)
    code = main(["simulate", str(FIXTURES / "digits_cnn.tflite"), "--data",
                 str(tmp_path / "bad.npz"), "-o", str(tmp_path / "run"), "--steps", "2"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "run" / "checkpoint.bin").exists()


@pytest.mark.parametrize("argv, message", [
    (["--queries", "1000", "--batch", "100"], "exceeds"),
    (["--train", "sparse", "--block", "first"], "--block expects a block index or auto"),
    (["--train", "sparse", "--block", "4"], "--block must be in 0..3 or auto"),
    (["--train", "sparse", "--trial-samples", "0"], "--trial-samples: must be in 1.."),
    (["--layers", "9"], "out of range"),
    (["--steps", "0"], "--steps"),
])
def test_simulate_refuses_bad_options(argv, message, tmp_path, capsys):
    np.savez(tmp_path / "d.npz", x=np.zeros((2, 8, 8, 1), np.int8), y=np.zeros(2, np.int64))
    code = main(["simulate", str(FIXTURES / "digits_cnn.tflite"), "--data",
                 str(tmp_path / "d.npz"), "-o", str(tmp_path / "run")] + argv)
    assert code == 2 and message in capsys.readouterr().err


def test_export_refuses_other_models_checkpoint(tmp_path, capsys):
    model = FIXTURES / "digits_cnn.tflite"
    graph = load_model(model)
    plan = training_plan(graph, TrainConfig())
    ckpt = simulator.to_checkpoint(plan, simulator.initial_params(graph, plan), 0, bytes(32))
    checkpoint.save(tmp_path / "c.bin", ckpt)
    assert main(["export", str(model), str(tmp_path / "c.bin"), "-o",
                 str(tmp_path / "o.tflite")]) == 2
    assert "different model" in capsys.readouterr().err
    (tmp_path / "t.bin").write_bytes(checkpoint.encode(ckpt)[:-7])
    assert main(["export", str(model), str(tmp_path / "t.bin"), "-o",
                 str(tmp_path / "o.tflite")]) == 2


def test_update_rounding_and_schedule():
    x = np.array([0.5, -0.5, 0.49999997, -0.49999997, 1.5, -2.5, 2.0**31, -2.0**40],
                 dtype=np.float32)
    assert round_half_away(x).tolist() == [1, -1, 0, 0, 2, -3, 1 << 30, -(1 << 30)]
    steps = 1000
    for t in range(0, steps, 37):
        exact = 0.01 * 0.5 * (1 + np.cos(np.pi * t / steps))
        assert abs(float(learning_rate(0.01, t, steps, "cosine")) - exact) < 1e-8
    assert learning_rate(0.01, 5, 10, "constant") == np.float32(0.01)


def test_a_batch_that_does_not_fit_is_refused(tmp_path, capsys):
    """N = 1000 needs 250 KB of saved activations for the FC layer (256 B per sample), even
    with restart groups recomputing the layers before it, on a 256 KB board: one line that
    says what needs how much and to lower --batch, exit 2 (adaptive's WP layers form the
    restart groups; the default np-channel has none)."""
    code = main(["build", str(FIXTURES / "digits_cnn.tflite"), "--target", "stm32f746",
                 "--train", "full", "--batch", "1000", "--estimator", "adaptive",
                 "-o", str(tmp_path / "fw")])
    err = capsys.readouterr().err
    assert code == 2 and "lower --batch" in err
    assert "saved activations of 1000 samples (up to 250.0 KB)" in err
    assert "restart groups already recompute" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
