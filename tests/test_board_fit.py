"""`inspect MODEL --target BOARD` answers "can I train this on my board?" (issue 49): its
fit lines are the build's own plans, and its estimates (zocodegen/board_fit.py, no QEMU)
are within the bounds it states (board_fit.ESTIMATE_BOUND for a step, INFERENCE_BOUND for an
inference) of what QEMU -icount measures, on every model benchmarks/inspect_costs.py
measured (tests/fixtures, ../shared/models, the models tests/generated_models.py generates;
both boards)."""
from __future__ import annotations

import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import FIXTURES, SHARED_MODELS, needs_arm, shared_model
from generated_models import GENERATED
from zocodegen import api
from zocodegen.board_fit import (ESTIMATE_BOUND, INFERENCE_BOUND, OUTSIDE_RECORD_BOUND,
                                 clock_hz, describe)
from zocodegen.cli import main
from zocodegen.codegen.fit import fit
from zocodegen.codegen.project import BuildOptions, plan_project
from zocodegen.frontends import load_model
from zocodegen.planner import BudgetError
from zocodegen.errors import UserError
from zocodegen.training.config import COMMAND_LINE_QUERIES, LAYERS_FIRST, BLOCKS_FIT, TrainConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import inspect_costs  # noqa: E402

DIGITS = FIXTURES / "digits_cnn.tflite"
SCALE = FIXTURES / "scale_model.tflite"
HAVE_QEMU = bool(shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm"))
#: benchmarks/inspect_costs.py measure's record: every model's inference and the steps of
#: each board's default run (and the builds the step costs were fitted on), under QEMU.
RECORDED = json.loads(inspect_costs.DATA.read_text())


def _model(name: str, tmp_path_factory) -> Path:
    """A recorded model: a fixture, a shared model (skipped when ../shared is absent), or a
    model tests/generated_models.py generates."""
    if (FIXTURES / name).is_file():
        return FIXTURES / name
    if name.endswith(".tflite"):
        return shared_model(name)
    pytest.importorskip("onnxruntime.quantization")
    return _generated(tmp_path_factory)[name]


_GENERATED: dict[str, Path] = {}


def _generated(tmp_path_factory) -> dict[str, Path]:
    """The generated models (tests/generated_models.py), once per session (onnxruntime,
    fixed seeds)."""
    if not _GENERATED:
        from generated_models import generate_all
        _GENERATED.update(generate_all(tmp_path_factory.mktemp("generated")))
    return _GENERATED


def _cell_id(row: dict) -> str:
    return f"{row['model'].split('.')[0]}-{row['board']}-{row['option'].replace(' ', '')}"


@pytest.mark.parametrize("row", RECORDED["steps"], ids=map(_cell_id, RECORDED["steps"]))
def test_step_estimate_is_within_the_bound_inspect_states(row, tmp_path_factory):
    """Every recorded step, at Q = 20 and 50: the estimate of the same build within
    ESTIMATE_BOUND of QEMU's count (a step is linear in Q from Q = 2 on)."""
    model = _model(row["model"], tmp_path_factory)
    for queries in inspect_costs.QUERIES:
        measured = inspect_costs.measured_at(row, queries)
        estimate = inspect_costs.estimate(model, row["board"], row["config"], queries)
        assert abs(estimate.instructions() / measured - 1) < ESTIMATE_BOUND, (
            queries, estimate.instructions(), measured)


@pytest.mark.parametrize("row", RECORDED["inference"],
                         ids=[r["model"] for r in RECORDED["inference"]])
def test_inference_estimate_is_within_the_bound_inspect_states(row, tmp_path_factory):
    from zocodegen.board_fit import inference_instructions
    from zocodegen.codegen.fit import device_graph
    graph = device_graph(load_model(_model(row["model"], tmp_path_factory)),
                         BuildOptions("qemu", row["board"]))
    estimate = inference_instructions(graph)
    assert abs(estimate / row["instructions"] - 1) < INFERENCE_BOUND, (estimate,
                                                                      row["instructions"])


def test_the_record_covers_every_model():
    """Each model of tests/fixtures and ../shared/models has its inference recorded, or the
    reason zocodegen refuses it; each trainable one a step on both boards."""
    names = {p.name for p in FIXTURES.glob("*.tflite")} | {p.name for p in
                                                          FIXTURES.glob("*.onnx")}
    if SHARED_MODELS.is_dir():
        names |= {p.name for p in SHARED_MODELS.glob("*.tflite")}
    names |= set(GENERATED)
    recorded = {r["model"] for r in RECORDED["inference"] + RECORDED["refused"]}
    assert names <= recorded, names - recorded
    for board in inspect_costs.BOARDS:
        stepped = {r["model"] for r in RECORDED["steps"] if r["board"] == board}
        assert {"digits_cnn.tflite", "scale_model.tflite", "one_block.onnx"} <= stepped


@pytest.mark.parametrize("model,modes", [(DIGITS, ("full", "full", "sparse")),
                                         (SCALE, ("full", "full", "sparse"))],
                         ids=["digits", "scale"])
def test_fit_lines_are_the_builds_plans(model, modes):
    """Each line's SRAM is the plan `build --target stm32f746 --train MODE` makes (or the
    build refuses what the line says does not fit); the mode it answers is `--train
    auto`'s, the one `simulate --target` trains."""
    found = api.inspect(model, target="stm32f746").board_fit
    auto, fitting_full, fitting_sparse = modes
    assert found.chosen.mode == auto
    # the command line's run: the guard, --lr auto, the scales, its Q and --layers first
    run = TrainConfig(mode="auto", blocks=BLOCKS_FIT, guard=True, lr_auto=True, scales=True,
                      layers=LAYERS_FIRST, queries=COMMAND_LINE_QUERIES)
    graph = load_model(model)
    for line in found.modes:
        train = None if line.mode == "inference" else replace(run, mode=line.mode)
        options = BuildOptions("stm32f746", "stm32f746", train)
        if line.fits:
            device, options = fit(graph, options)
            plan = plan_project(device, options)
            assert line.sram_bytes == plan.placement.total
            assert line.flash_data_bytes == plan.code.flash_bytes
        else:
            with pytest.raises(BudgetError):
                plan_project(*fit(graph, options))
    assert [m.fits for m in found.modes[1:]] == [fitting_full is not None,
                                                 fitting_sparse is not None]
    _, chosen = fit(graph, BuildOptions("stm32f746", "stm32f746", run))
    assert chosen.train.mode == auto


def test_inspect_target_answers_first(capsys):
    """The default run (--layers first: the scale model's first 6 layers) trains fully on
    the F746; with --layers all only sparse training fits, and inspect says so first."""
    assert main(["inspect", str(SCALE), "--target", "stm32f746"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("trains on the stm32f746: full training fits"), lines[0]
    assert lines[1].startswith("  trains   the first 6 of 45 trainable layers (0-5: ")
    assert any("a step at Q = 20" in line for line in lines[:9])
    assert main(["inspect", str(SCALE), "--target", "stm32f746", "--layers", "all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("trains on the stm32f746: sparse training fits"), lines[0]
    assert lines[1] == "  trains   all 45 trainable layers"
    assert lines[3].startswith("            an inference about ")  # under the inference line
    assert lines[4].startswith("  full") and "DOES NOT FIT" in lines[4]
    assert main(["inspect", str(SCALE), "--target", "stm32f746", "--json", "--layers",
                 "all"]) == 0
    data = json.loads(capsys.readouterr().out)["board_fit"]
    assert data["train_auto"] == "sparse"
    assert [m["mode"] for m in data["modes"]] == ["inference", "full", "sparse"]
    assert main(["inspect", str(SCALE), "--layers", "all"]) == 2
    assert "add --target" in capsys.readouterr().err


@pytest.mark.skipif(not HAVE_QEMU, reason="needs arm-none-eabi-gcc and qemu-system-arm")
def test_the_recorded_steps_are_current(tmp_path):
    """Kernels that change what a step costs must be measured again (`benchmarks/
    inspect_costs.py measure`, then `fit`): the digits CNN's default step on the F746,
    measured afresh (two QEMU runs of a few seconds), is its record within 2 %, and the
    estimate of it within the bound."""
    from zocodegen.host.device_time import step_instructions as measure
    row = next(r for r in RECORDED["steps"] if r["model"] == DIGITS.name
               and r["board"] == "stm32f746" and r["option"] == "--train full")
    for queries in (2, 3):
        fresh = measure(DIGITS, "stm32f746", inspect_costs.restored(row["config"], queries),
                        tmp_path)
        assert abs(fresh / row[f"q{queries}"] - 1) < 0.02, (queries, fresh, row)
    test_step_estimate_is_within_the_bound_inspect_states(row, None)


@pytest.fixture(scope="module")
def one_block(tmp_path_factory):
    """tests/one_block_model.py's classifier: only a build of one late block fits the F746."""
    pytest.importorskip("onnxruntime.quantization")
    return _generated(tmp_path_factory)["one_block.onnx"]


def _build_args(model, board: str, option: str):
    """The build options a fit line names, parsed as `build` parses them."""
    from zocodegen.cli_options import build_parser
    return build_parser().parse_args(["build", str(model), "--target", board,
                                      *option.split()])


def test_inspect_names_the_one_block_build_that_fits(one_block, capsys):
    """Issue 64: where only sparse training of one late block fits, `inspect` names the
    options and their SRAM first; the same options, given to build's fit search, plan
    exactly that build, and `--train auto`'s refusal suggests the same options."""
    from zocodegen.cli_options import train_config
    found = api.inspect(one_block, target="stm32f746").board_fit
    full, sparse = found.modes[1:]
    assert found.chosen is None and not full.fits
    assert found.fitting is sparse and sparse.one_block and sparse.fits
    assert sparse.option == "--train sparse --block 3", sparse.option  # the last block
    graph = load_model(one_block)
    args = _build_args(one_block, "stm32f746", sparse.option)
    device, options = fit(graph, BuildOptions("stm32f746", "stm32f746", train_config(args),
                                              estimator_fit=args.estimator is None))
    plan = plan_project(device, options)
    assert (options.train.mode, options.train.blocks, options.train.block) == ("sparse", 4, 3)
    assert plan.placement.total == sparse.sram_bytes <= plan.board.sram_budget_bytes
    with pytest.raises(BudgetError, match=f"these sparse blocks fit: {sparse.option} "):
        plan_project(*fit(graph, BuildOptions("stm32f746", "stm32f746", TrainConfig(
            mode="auto", blocks=BLOCKS_FIT), estimator_fit=True)))
    assert main(["inspect", str(one_block), "--target", "stm32f746"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("trains on the stm32f746 as sparse training of one block: "
                            f"`build --target stm32f746 {sparse.option}` "
                            f"({sparse.sram_bytes / 1024:.1f} KB"), first


def _photos(folder, classes=("cat", "dog"), count=20):
    """A folder of class subfolders of PNGs of mixed sizes, as a newcomer brings."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    for name in classes:
        (folder / name).mkdir(parents=True)
        for i in range(count):
            image = rng.integers(0, 255, (60 + 3 * i, 80, 3), dtype=np.uint8)
            Image.fromarray(image).save(folder / name / f"{i}.png")
    return folder


def test_the_named_options_simulate_on_a_folder(one_block, tmp_path):
    """The walkthrough on the one-block model: inspect, pack a folder, and simulate with
    the options inspect named trains that block in that partition, the board's run."""
    option = api.inspect(one_block, target="stm32f746").board_fit.fitting.option
    api.pack(_photos(tmp_path / "photos"), tmp_path / "data.img", model=one_block)
    words = option.split()  # "--train sparse --block 3" -> train="sparse", block="3"
    given = {name[2:].replace("-", "_"): value for name, value in zip(words[::2], words[1::2])}
    run = api.simulate(one_block, tmp_path / "data.img", tmp_path / "run", target="stm32f746",
                       steps=1, queries=2, **given)
    config = json.loads((tmp_path / "run" / "run.json").read_text())["config"]
    assert (config["mode"], config["blocks"], config["block"]) == ("sparse", 4, 3)
    assert run.steps == 1


def _board_run(model, board: str | None, **given):
    from zocodegen.cli_options import train_config
    from zocodegen.training.runner import board_run
    args = api.options("simulate", {"model": model, "data": model, "output": "run"}, given)
    return board_run(load_model(model), train_config(args), board,
                     estimator_fit=args.estimator is None)


def test_block_is_a_block_of_the_boards_run():
    """Issue 64 item 2: --target resolves mode, blocks and estimator first, and --block is
    checked against that run: on the F746 the 128x128 MCUNet-class model trains sparse in 8
    blocks with the adaptive estimator, so --block 7 (with or without --train sparse) is
    its last block, and --block 8 is refused naming the run (every layer: --layers all)."""
    model = FIXTURES / "scale_model_128.tflite"
    run = _board_run(model, "stm32f746", layers="all")
    assert (run.mode, run.blocks, run.block, run.estimator) == ("sparse", 8, None, "adaptive")
    for given in ({"block": "7"}, {"block": "7", "train": "sparse"}):
        assert _board_run(model, "stm32f746", layers="all", **given) == replace(run, block=7)
    with pytest.raises(UserError, match=r"--block 8: the stm32f746 run has 8 blocks "
                       r"\(--train sparse --blocks 8 --estimator adaptive\), so --block must "
                       r"be in 0\.\.7"):
        _board_run(model, "stm32f746", layers="all", block="8")


def test_sparse_options_against_a_full_run_name_why():
    """--block with --train auto where auto picks full training: refused, saying so."""
    with pytest.raises(UserError, match="--train auto picked full training, which fits the "
                       "stm32f746; add --train sparse or drop --block"):
        _board_run(DIGITS, "stm32f746", block="1")
    with pytest.raises(UserError, match="without --target, --train auto is full training"):
        _board_run(DIGITS, None, blocks="2")


#: Every model of tests/fixtures and ../shared/models, and the generated models.
INSPECTED = [("fixture", p.name) for p in sorted(FIXTURES.glob("*.tflite"))
             + sorted(FIXTURES.glob("*.onnx"))] + [
    ("shared", m) for m in ("kws_ref_model.tflite", "pretrainedResnet_quant.tflite",
                            "mcunet_det.tflite")] + [("generated", m) for m in GENERATED]


@pytest.mark.slow
@needs_arm
@pytest.mark.usefixtures("module_build_cache")
@pytest.mark.parametrize("board", ["stm32f746", "stm32h7b3"])
@pytest.mark.parametrize("kind,name", INSPECTED, ids=[n for _, n in INSPECTED])
def test_inspects_named_options_link_within_the_size_it_printed(kind, name, board,
                                                               tmp_path_factory):
    """Issue 64 acceptance: for every fixture and shared model on both boards, each build
    inspect names as fitting (the training it answers, and every other block it lists)
    links, and the linked image takes no more SRAM than inspect printed (tests/
    test_linked_fit.py's measure: arm-none-eabi-size -A over the budgeted memories); for a
    model no training takes, the inference build."""
    from test_linked_fit import linked_sram
    from zocodegen.cli_options import train_config
    from zocodegen.projects import cached_build
    model = _model(name, tmp_path_factory)
    try:
        found = api.inspect(model, target=board).board_fit
    except UserError as exc:  # refused in one line (tests/test_contract.py): nothing named
        pytest.skip(f"zocodegen refuses {name}: {str(exc)[:100]}")
    inference, named = found.modes[0], found.fitting
    if named is None:  # what inspect names is the inference build (and why nothing trains)
        assert inference.fits, describe(found)
        elf = cached_build(model, "emulated", emulate=board)
        assert linked_sram(elf, board) <= inference.sram_bytes
        return
    for option, printed in ((named.option, named.sram_bytes), *named.also):
        args = _build_args(model, board, option)
        elf = cached_build(model, "emulated", emulate=board, train=train_config(args))
        assert linked_sram(elf, board) <= printed, (option, printed)
        assert printed <= found.board.sram_budget_bytes


def test_a_native_build_says_it_holds_no_boards_budget(one_block, tmp_path, capsys):
    """Issue 64 item 2: a native --train auto build that the board would refuse says so
    beside its DOES NOT FIT, and does not claim its sparse build fits."""
    assert main(["build", str(one_block), "--target", "native", "--train", "auto",
                 "-o", str(tmp_path / "fw")]) == 0
    out = capsys.readouterr().out
    assert "(DOES NOT FIT)" in out
    assert "a native build holds no board's budget: it runs on this host, but the stm32f746 " \
           "would refuse it" in out
    assert "(full does not fit the stm32f746 budget, nor does this sparse build)" in out


def test_the_h7b3_headline_counts_what_lies_outside_its_budget(tmp_path, capsys):
    """Issue 64 item 6: the H7B3's budget is its AXI SRAM; the stack, link buffers and
    statics sit in DTCM beside it. The headline and the report say so, with the sum."""
    assert main(["build", str(DIGITS), "--target", "stm32h7b3", "--train", "full",
                 "-o", str(tmp_path / "fw")]) == 0
    headline = next(line for line in capsys.readouterr().out.splitlines()
                    if line.startswith("SRAM "))
    plan = api.build(DIGITS, target="stm32h7b3", train="full", output=tmp_path / "fw2").plan
    dtcm = sum(-(-i.bytes // 8) * 8 for i in plan.placement.items if i.memory == "DTCM")
    assert plan.placement.outside == (("DTCM", dtcm),) and dtcm > 8192
    assert (f"of the stm32h7b3 budget 1024.0 KB, and {dtcm / 1024:.1f} KB in DTCM outside the "
            f"budget ({(plan.placement.total + dtcm) / 1024:.1f} KB in all)") in headline
    assert "outside the budget" in (tmp_path / "fw" / "memory_report.txt").read_text()
    # inspect's line for the same build says it too (a newcomer compared 777.3 KB there with
    # the build's 786.4 KB in all)
    assert main(["inspect", str(DIGITS), "--target", "stm32h7b3"]) == 0
    full = next(line for line in capsys.readouterr().out.splitlines()
                if line.startswith("  full "))
    assert (f"SRAM {plan.placement.total / 1024:7.1f} of 1024.0 KB (+ {dtcm / 1024:.1f} KB in "
            "DTCM outside the budget), flash data") in full


@pytest.mark.skipif(not HAVE_QEMU, reason="needs arm-none-eabi-gcc and qemu-system-arm")
@pytest.mark.parametrize("model", [DIGITS, SCALE], ids=["digits", "scale"])
def test_inference_estimate_against_qemu(model, capsys):
    """Issue 64 item 7: inspect --target estimates an inference too (the op costs the step
    estimate uses), within the INFERENCE_BOUND it states of device-time's QEMU -icount
    measurement; the fresh measurement is the record's within 2 % (kernels that change an
    inference's count must be measured again: `benchmarks/inspect_costs.py measure`)."""
    import numpy as np
    from zocodegen.host.device_time import forward_seconds
    found = api.inspect(model, target="stm32f746").board_fit
    estimate = found.modes[0].inference_seconds
    x = load_model(model).tensor(load_model(model).inputs[0])
    images = np.random.default_rng(1).integers(-128, 128, (3, *x.shape[1:])).astype(np.int8)
    measured = forward_seconds(model, "stm32f746", images)
    assert abs(estimate / measured - 1) < INFERENCE_BOUND, (estimate, measured)
    recorded = next(r["instructions"] for r in RECORDED["inference"] if r["model"] == model.name)
    assert abs(measured * clock_hz("stm32f746") / recorded - 1) < 0.02, (measured, recorded)
    assert main(["inspect", str(model), "--target", "stm32f746"]) == 0
    assert (f"            an inference about {1000 * estimate:.1f} ms at 216 MHz (estimated "
            f"without QEMU: within {100 * INFERENCE_BOUND:.0f} % of QEMU on the models "
            f"recorded, {100 * OUTSIDE_RECORD_BOUND:.0f} % on others)") in capsys.readouterr().out


def test_a_model_training_refuses_is_not_called_too_large(capsys):
    """Issue 64: a model no training takes (two outputs) is not answered "does not fit the
    board": the answer names the model's reason, the one every mode's line gives."""
    assert main(["inspect", str(FIXTURES / "multi_op.tflite"), "--target", "stm32f746"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == ("training refuses this model: training needs a model with one output "
                     "(a classifier); this one has 2"), first


def test_a_refusal_names_the_few_items_that_matter(one_block):
    """Issue 64 (the walkthrough): a build that does not fit is refused in one line that a
    newcomer can read: items of no size are left out and only the items that weigh (an
    eighth of the budget or more) carry their descriptions; memory_report.txt has all."""
    with pytest.raises(BudgetError) as info:
        plan_project(*fit(load_model(one_block), BuildOptions(
            "stm32f746", "stm32f746", TrainConfig(mode="full", queries=2))))
    message = str(info.value)
    assert "\n" not in message and len(message) < 900, (len(message), message)
    assert "0.0 KB" not in message and "stack 8.0 KB," in message  # no description
    assert "arena " in message and "(inference activations" in message
    assert "Try: these sparse blocks fit: --train sparse --block 3 (" in message


@pytest.mark.parametrize("layers", ["all", "0,2-3"])
def test_the_named_build_trains_the_layers_inspect_answered_for(layers, capsys):
    """`inspect --layers L` answers for L, so each build it names carries --layers L: copied
    without it, build would train the default first layers instead."""
    assert main(["inspect", str(FIXTURES / "digits_cnn.tflite"), "--target", "stm32f746",
                 "--layers", layers]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"--train full --layers {layers}`" in lines[0], lines[0]
    assert all(f"--layers {layers})" in line for line in lines if "(--train " in line)
    assert main(["inspect", str(FIXTURES / "digits_cnn.tflite"), "--target", "stm32f746"]) == 0
    assert "--train full`" in capsys.readouterr().out  # the default run needs no --layers


@pytest.mark.parametrize("shrunk, reason", [
    ({"flash_bytes": 2048}, "its weights and parameters need 3.3 KB of flash of 2 KB"),
    ({"sram_budget_bytes": 4096}, "it needs 8.9 KB of SRAM of 4.0 KB")])
def test_a_model_beyond_the_board_is_answered_first(shrunk, reason, monkeypatch, capsys):
    """MobileNetV2 at 224x224 (3.5 MB of weights) on the H7B3 was answered "training does not
    fit" above an inference line that did not fit either: the answer says nothing fits, and
    why. The board's flash (SRAM) is shrunk here below the digits CNN's inference needs."""
    from zocodegen.codegen import fit as fit_module, project

    real = project.load_target
    small = lambda name: replace(real(name), **shrunk)  # noqa: E731
    for module in (api, fit_module, project):
        monkeypatch.setattr(module, "load_target", small)
    assert main(["inspect", str(FIXTURES / "digits_cnn.tflite"), "--target", "stm32f746"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"does not fit the stm32f746, not even inference: {reason}"), first


def test_a_model_of_batch_two_is_refused_without_a_trains_line(tmp_path, capsys):
    """The ONNX walkthrough: a PyTorch model exported with a batch of 10 (the public LeNet-5)
    was answered "training refuses this model: ... batch-1 ..." and, on the next line,
    "trains all 5 trainable layers". The refusal stands alone and says what to do."""
    from test_onnx_frontend import _model, _quantize_static, mlp_float_model

    model = mlp_float_model()
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = 2
    batched = _model(list(model.graph.node), "mlp2", list(model.graph.input),
                     list(model.graph.output), list(model.graph.initializer))
    path = _quantize_static(batched, tmp_path / "mlp2.onnx", "QDQ", "QInt8")
    assert main(["inspect", str(path), "--target", "stm32f746"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("training refuses this model: training needs batch-1 "), lines[0]
    assert "batch size 1" in lines[0], lines[0]
    assert not lines[1].startswith("  trains"), lines[1]
