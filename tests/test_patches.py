"""Patch-based inference (planner/patches.py, docs/memory.md): the patch geometry against the
reference on whole tensors, the planner's choice, the generated per-patch loop bit-exact
natively and under QEMU, and the real MCUNet detector on the F746's budget."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from conftest import (FIXTURE_ONNX, FIXTURE_TFLITE, FIXTURES, REPO, SHARED_TFLITE,
                      needs_qemu, random_inputs, reference_interpreter, resolve, shared_model)
from zocodegen.projects import cached_build
from zocodegen.cli import main
from zocodegen.codegen.fit import device_graph, resolve_input_quantize
from zocodegen.codegen.project import BuildOptions, plan_project
from zocodegen.codegen.host_inputs import host_side_inputs, quantize_inputs_on_host
from zocodegen.host.engines import run_samples
from zocodegen.errors import UserError
from zocodegen.frontends import load_model
from zocodegen.planner import BudgetError, plan_arena, verify
from zocodegen.planner.patches import (best_patched_arena, chains, patch_plan,
                                       plan_patched_arena, stitch_reference)
from zocodegen.reference.executor import run, run_all
from zocodegen.training.config import TrainConfig

MODELS = ([pytest.param(("shared", n), id=n) for n in SHARED_TFLITE]
          + [pytest.param(("fixture", n), id=n) for n in FIXTURE_TFLITE + FIXTURE_ONNX])
DETECTOR = "mcunet_det.tflite"
GRIDS = ((2, 2), (3, 3), (2, 5))


@pytest.fixture(scope="module", autouse=True)
def build_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("ZOCODEGEN_CACHE", str(tmp_path_factory.mktemp("zocache")))
    yield
    mp.undo()


def _input(graph, seed=3):
    x = graph.tensor(graph.inputs[0])
    return {graph.inputs[0]: random_inputs(x.shape, x.dtype, 4, seed=seed)[3]}


def _check_stitching(graph, first, last, grid):
    plan = patch_plan(graph, first, last, grid)
    if plan is None:
        return False
    values = run_all(graph, _input(graph))
    stitched = stitch_reference(graph, plan, values[plan.input], run)
    np.testing.assert_array_equal(stitched, values[plan.output])
    assert plan.patched_macs >= plan.stage_macs
    return True


@pytest.mark.parametrize("spec", MODELS)
def test_patches_compute_the_whole_stage(spec):
    """Every chain of every model, cut after each of its first ops into several grids: the
    reference run patch by patch (border padding re-derived per patch) equals the reference
    on whole tensors."""
    graph = load_model(resolve(spec))
    checked = 0
    for first, end in chains(graph):
        for last in range(first + 1, min(end, first + 3) + 1):
            checked += sum(_check_stitching(graph, first, last, g) for g in GRIDS)
    if not chains(graph):
        pytest.skip(f"{spec[1]} has no chain of patchable ops")
    assert checked


def test_patches_of_the_detector_compute_its_first_stage():
    graph = quantize_inputs_on_host(load_model(shared_model(DETECTOR)))
    assert chains(graph)[0] == (0, 11)  # PAD .. the stride-2 depthwise at 16x20
    for last, grid in ((11, (4, 4)), (6, (3, 2)), (2, (5, 5))):
        assert _check_stitching(graph, 0, last, grid)


def test_chains_stop_where_a_tensor_has_other_readers():
    graph = load_model(FIXTURES / "digits_resnet.tflite")
    consumers = {}
    for index, op in enumerate(graph.ops):
        for name in op.inputs:
            consumers.setdefault(name, []).append(index)
    for first, last in chains(graph):
        for index in range(first, last):
            assert consumers[graph.ops[index].outputs[0]] == [index + 1]


@pytest.mark.parametrize("spec", MODELS)
def test_patched_plans_are_sound(spec):
    """The independent plan checker on the planning view and on every class of patches; the
    lower bound is the patched schedule's."""
    graph = load_model(resolve(spec))
    for first, end in chains(graph)[:2]:
        for grid in GRIDS[:2]:
            patches = patch_plan(graph, first, end, grid)
            if patches is None:
                continue
            plan = plan_patched_arena(graph, patches)
            verify(graph, plan)
            assert plan.lower_bound <= plan.arena_bytes
            assert plan.patches.workspace_bytes == max(c.plan.arena_bytes
                                                       for c in patches.classes)
            assert sum(c.count for c in patches.classes) == grid[0] * grid[1]


@pytest.mark.parametrize("spec", MODELS)
def test_native_leanest_arena_equals_reference(spec):
    """--patches on, the smallest arena: convolutions in place (kws, ResNet-8, ...) and the
    first stage in patches wherever that lowers it; bit-exact with the reference on whole
    tensors."""
    path = resolve(spec)
    graph = load_model(path)
    samples = [{graph.inputs[0]: x} for x in random_inputs(
        graph.tensor(graph.inputs[0]).shape, graph.tensor(graph.inputs[0]).dtype, 6, seed=5)]
    artefact = cached_build(path, "native", patches="on")
    for sample, result in zip(samples, run_samples(graph, "native", artefact, samples)):
        expected = run(graph, sample)
        for name in graph.outputs:
            np.testing.assert_array_equal(result.outputs[name], expected[name])


@needs_qemu
@pytest.mark.parametrize("name", ["mcunet_in1.tflite", "mcunet_tiny.tflite",
                                  "digits_resnet.tflite"])
def test_qemu_leanest_arena_equals_reference(name):
    """Patches (the MCUNet fixtures) and convolutions in place (all three) with the
    Cortex-M7 kernels."""
    path = FIXTURES / name
    graph = load_model(path)
    assert best_patched_arena(graph) is not None or name == "digits_resnet.tflite"
    assert set(plan_arena(graph, in_place_convolutions=True).in_place_ops) & {
        op.name for op in graph.ops if op.type in ("CONV_2D", "DEPTHWISE_CONV_2D")}
    samples = [{graph.inputs[0]: x} for x in random_inputs(
        graph.tensor(graph.inputs[0]).shape, graph.tensor(graph.inputs[0]).dtype, 3, seed=6)]
    for sample, result in zip(samples, run_samples(graph, "qemu",
                                                   cached_build(path, "qemu", patches="on"),
                                                   samples)):
        expected = run(graph, sample)
        for out in graph.outputs:
            np.testing.assert_array_equal(result.outputs[out], expected[out])


def test_patches_clean_under_sanitizers():
    """ASan + UBSan over the per-patch loop (window copies, class functions, border
    padding) and the in-place convolutions inside the patches."""
    path = FIXTURES / "mcunet_in1.tflite"
    graph = load_model(path)
    samples = [{graph.inputs[0]: x} for x in random_inputs(
        graph.tensor(graph.inputs[0]).shape, graph.tensor(graph.inputs[0]).dtype, 3, seed=9)]
    artefact = cached_build(path, "native", sanitize=True, patches="on")
    for sample, result in zip(samples, run_samples(graph, "native", artefact, samples)):
        np.testing.assert_array_equal(result.outputs[graph.outputs[0]],
                                      run(graph, sample)[graph.outputs[0]])


def _detector_samples(graph, count):
    rng = np.random.default_rng(8)
    x = graph.tensor(graph.inputs[0])
    return [{graph.inputs[0]: rng.uniform(-1.2, 1.2, x.shape).astype(np.float32)}
            for _ in range(count)]


def test_detector_reference_equals_tflite():
    """The detector's chain starts at the interpreter: every output, a few samples."""
    path = shared_model(DETECTOR)
    graph = load_model(path)
    it = reference_interpreter(path)
    (inp,) = it.get_input_details()
    outs = {d["name"]: d["index"] for d in it.get_output_details()}
    for sample in _detector_samples(graph, 2):
        it.set_tensor(inp["index"], sample[graph.inputs[0]])
        it.invoke()
        got = run(graph, sample)
        for name, index in outs.items():
            np.testing.assert_array_equal(got[name], it.get_tensor(index))


def test_detector_needs_both_techniques_on_the_f746():
    """Refused as is (the float input alone is 240 KB), naming the patches it already uses
    and --input-quantize host; with it, patches make the build fit, and only then."""
    graph = load_model(shared_model(DETECTOR))
    with pytest.raises(BudgetError) as refused:
        plan_project(graph, BuildOptions(target="stm32f746", input_quantize="device"))
    message = str(refused.value)
    assert "patch-based: ops" in message and "--input-quantize host" in message
    options = BuildOptions(target="stm32f746", input_quantize="host")
    device = device_graph(graph, options)
    plan = plan_project(device, options)
    assert plan.arena.patches is not None and plan.placement.fits
    assert plan.placement.total <= 256 * 1024
    with pytest.raises(BudgetError) as whole:
        plan_project(device, BuildOptions(target="stm32f746", input_quantize="host",
                                          patches="off"))
    assert "--patches auto" in str(whole.value)


def test_detector_builds_for_the_f746_with_defaults(tmp_path, capsys):
    """Issue 36: the default --input-quantize auto takes the host quantization, the one
    placement that fits, and says so; the device graph then takes int8."""
    out = tmp_path / "fw"
    assert main(["build", str(shared_model(DETECTOR)), "--target", "stm32f746", "-o",
                 str(out)]) == 0
    printed = capsys.readouterr().out
    assert "--input-quantize auto: host" in printed and "(DOES NOT FIT)" not in printed
    graph = load_model(shared_model(DETECTOR))
    chosen = resolve_input_quantize(graph, BuildOptions(target="stm32f746"))
    assert chosen.input_quantize == "host"
    assert resolve_input_quantize(graph, BuildOptions(target="stm32h7b3")).input_quantize \
        == "device"  # fits there as the model is


def test_detector_refusal_is_one_line(tmp_path, capsys):
    """`build` of the detector for the F746 with the float input on the device: exit 2, one
    line naming every buffer, the patches applied and what else to try; no traceback."""
    assert main(["build", str(shared_model(DETECTOR)), "--target", "stm32f746", "-o",
                 str(tmp_path / "fw"), "--input-quantize", "device"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    for words in ("arena", "stack", "host link buffers", "patch-based: ops",
                  "--input-quantize host", "stm32h7b3"):
        assert words in err[0], words


@needs_qemu
def test_detector_on_qemu_within_the_f746_budget_equals_reference():
    """The real MCUNet detector, int8 input from the host, first stage in patches, linked
    with the F746's 256 KB as the RAM length: all three outputs bit-exact."""
    path = shared_model(DETECTOR)
    graph = load_model(path)
    device = quantize_inputs_on_host(graph)
    artefact = cached_build(path, "qemu", input_quantize="host")
    samples = _detector_samples(graph, 2)
    results = run_samples(device, "qemu", artefact,
                          [host_side_inputs(graph, device, s) for s in samples])
    for sample, result in zip(samples, results):
        expected = run(graph, sample)
        for name in graph.outputs:
            np.testing.assert_array_equal(result.outputs[name], expected[name])
        assert result.cycles > 0


def test_infer_with_host_quantized_input(tmp_path):
    """`infer --engine native --input-quantize host` takes the float input as the model
    does and writes what the reference does."""
    path = shared_model(DETECTOR)
    graph = load_model(path)
    x = np.stack([s[graph.inputs[0]][0] for s in _detector_samples(graph, 2)])
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "y.npz"
    result = subprocess.run([sys.executable, "-m", "zocodegen", "infer", str(path), "--input",
                             str(tmp_path / "x.npy"), "--output", str(out), "--engine",
                             "native", "--input-quantize", "host"],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    got = np.load(out)
    for k in range(2):
        expected = run(graph, {graph.inputs[0]: x[k:k + 1]})
        for name in graph.outputs:
            np.testing.assert_array_equal(got[name][k], expected[name][0])


def test_training_builds_refuse_patches_on():
    graph = load_model(FIXTURES / "digits_cnn.tflite")
    with pytest.raises(UserError, match="inference builds"):
        plan_project(graph, BuildOptions(target="native", patches="on",
                                         train=TrainConfig(mode="full")))


def test_auto_leaves_a_fitting_model_whole():
    """A model that fits runs every op whole and no convolution in place: no recomputation
    or row-by-row overhead it does not need."""
    for graph in (load_model(FIXTURES / "mcunet_in1.tflite"),
                  load_model(shared_model("kws_ref_model.tflite"))):
        plan = plan_project(graph, BuildOptions(target="stm32f746"))
        assert plan.arena.patches is None
        assert not set(plan.arena.in_place_ops) & {
            op.name for op in graph.ops if op.type in ("CONV_2D", "DEPTHWISE_CONV_2D")}
