"""`zocodegen build`: the project it writes, zero-warning builds for every goal, the memory
report against arm-none-eabi-size, and the clear refusal when a model does not fit."""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper, save

from conftest import FIXTURES, shared_model
from test_onnx_frontend import _QDQ
from zocodegen.cli import main
from zocodegen.frontends import load_model

HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None
needs_arm = pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc (apt-get install "
                               "gcc-arm-none-eabi libnewlib-arm-none-eabi)")


def _make(project, goal):
    result = subprocess.run(["make", "-C", str(project), goal], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    warnings = [line for line in (result.stdout + result.stderr).splitlines()
                if "warning" in line.lower()]
    assert not warnings, "\n".join(warnings)
    return result.stdout


def big_model(path, channels=8, size=160):
    """int8 I/O, one 3x3 conv: (channels + 2 channels) x size^2 bytes live at once."""
    b = _QDQ(seed=5)
    x = b.dq("xq", 0.05, 0)
    c = b.qdq(b.node("Conv", [x, b.weights((2 * channels, channels, 3, 3)), ""],
                     pads=[1, 1, 1, 1]), 0.1, 0)
    b.q(c, 0.1, 0, name="yq")
    model = b.build(
        [helper.make_tensor_value_info("xq", TensorProto.INT8, [1, channels, size, size])],
        [helper.make_tensor_value_info("yq", TensorProto.INT8, [1, 2 * channels, size, size])])
    save(model, str(path))
    return path


def test_project_layout_and_native_build(tmp_path, capsys):
    out = tmp_path / "proj"
    assert main(["build", str(FIXTURES / "mcunet_tiny.tflite"), "--target", "native",
                 "-o", str(out)]) == 0
    graph = load_model(FIXTURES / "mcunet_tiny.tflite")
    for rel in ("Makefile", "memory_report.txt", "memory_report.json", "manifest.json",
                "include/model.h", "include/zo_kernels.h", "include/platform.h",
                "include/zo_link.h", "src/link/zo_link.c", "src/link/zo_link_hello.c",
                "src/link/zo_crc32.c",
                "src/model.c", "src/weights.c", "src/main.c",
                "src/platform/native/platform_native.c", "src/platform/qemu/mps2_an500.ld"):
        assert (out / rel).is_file(), rel
    # inference only: no block device (it serves the training image)
    assert not (out / "src/link/blockdev_link.c").exists()
    model_c = (out / "src/model.c").read_text()
    functions = re.findall(r"^static void (layer_\d+_\w+)\(uint8_t \*arena\)$", model_c, re.M)
    assert len(functions) == len(graph.ops)  # one named function per layer
    assert "void model_run_from(int first_layer)" in model_c
    assert "malloc" not in model_c
    _make(out, "native")
    # the memory report's "host link buffers" are zo_link.c's two: the payload of answers
    # that are not READ / FETCH data, and the COBS group a request goes out through
    probe = tmp_path / "probe.c"
    probe.write_text('#include <stdio.h>\n#include "zo_link.h"\n'
                     'int main(void) { printf("%u %u", (unsigned)ZO_LINK_RESPONSE_BUFFER, '
                     '254u); return 0; }\n')
    subprocess.run(["cc", "-std=c99", "-I", str(out / "include"), str(probe), "-o",
                    str(tmp_path / "probe")], check=True)
    rx, tx = map(int, subprocess.run([str(tmp_path / "probe")], capture_output=True,
                                     text=True, check=True).stdout.split())
    report = json.loads((out / "memory_report.json").read_text())
    items = {i["name"]: i["bytes"] for i in report["sram"]["items"]}
    assert items["host link buffers"] == rx + tx == 16 + 254


def test_over_budget_refusal(tmp_path, capsys):
    model = big_model(tmp_path / "big.onnx")
    code = main(["build", str(model), "--target", "stm32f746", "-o", str(tmp_path / "f7")])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert "256.0 KB" in err and "arena" in err and "stm32h7b3" in err, err
    assert not (tmp_path / "f7").exists(), "nothing is written for a refused plan"
    # the native build only reports the overrun
    assert main(["build", str(model), "--target", "native", "-o", str(tmp_path / "n")]) == 0
    assert "DOES NOT FIT" in capsys.readouterr().out


@needs_arm
def test_qemu_link_enforces_budget(tmp_path):
    """The QEMU linker script holds the emulated board's SRAM: what the planner refuses for
    the board would not link for QEMU either."""
    model = big_model(tmp_path / "big.onnx")
    out = tmp_path / "n"
    assert main(["build", str(model), "--target", "native", "-o", str(out)]) == 0
    result = subprocess.run(["make", "-C", str(out), "qemu"], capture_output=True, text=True)
    assert result.returncode != 0
    assert "RAM" in result.stdout + result.stderr


def _sections(elf):
    out = subprocess.run(["arm-none-eabi-size", "-A", str(elf)], capture_output=True, text=True,
                         check=True).stdout
    return {m.group(1): (int(m.group(2)), int(m.group(3)))
            for m in re.finditer(r"^(\.\S+)\s+(\d+)\s+(\d+)$", out, re.M)}


def _reported(report, name):
    for region in report["sram"]["regions"]:
        for item in region["items"]:
            if item["name"] == name:
                return item["bytes"], int(item["address"], 16)
    raise AssertionError(f"{name} missing from the memory report")


#: Training items the memory report lists; on the STM32 targets they share .zo_arena.
TRAINING_ITEMS = ("trainable parameters", "gradient buffer", "saved activations",
                  "training state")


@needs_arm
@pytest.mark.parametrize("target", ["stm32f746", "stm32h7b3"])
@pytest.mark.parametrize("model", ["kws_ref_model.tflite", "pretrainedResnet_quant.tflite"])
@pytest.mark.parametrize("train", ["none", "full", "sparse", "np-channel"])
def test_firmware_links_clean_and_matches_memory_report(tmp_path, target, model, train):
    """`make firmware` links with zero warnings (-Wall -Wextra) for inference, full training
    (adaptive, and np-channel: channel-wise bias perturbation, zo_estimate_ch.c) and sparse
    training with on-device block selection, and arm-none-eabi-size finds the arena, the
    training buffers and the stack exactly where and as large as memory_report.json says."""
    out = tmp_path / "fw"
    options = (["--train", "full", "--estimator", train] if train == "np-channel"
               else ["--train", train])
    assert main(["build", str(shared_model(model)), "--target", target, *options,
                 "-o", str(out)]) == 0
    _make(out, "firmware")
    report = json.loads((out / "memory_report.json").read_text())
    sections = _sections(out / "build" / target / "firmware.elf")
    static = sections[".data"][0] + sections[".bss"][0]
    link, _ = _reported(report, "host link buffers")  # static buffers of zo_link.c
    # besides the link's buffers: the command loop's image reader and training state
    slack = 256 if train == "none" else 1024
    assert link <= static <= link + slack, \
        f".data + .bss = {static} B: the firmware should hold no state but the link's"
    training = sum(_reported(report, name)[0] for name in TRAINING_ITEMS) if train != "none" \
        else 0
    arena, arena_address = _reported(report, "arena")
    assert sections[".zo_arena"][0] == arena + training
    stack, stack_address = _reported(report, "stack")
    assert sections[".stack"][0] == stack
    # on the F746 the linker puts .data/.bss (32-byte aligned) between stack and arena
    assert stack_address <= sections[".stack"][1] <= stack_address + ((static + 31) & ~31)
    total = sum(sections[s][0] for s in (".stack", ".data", ".bss", ".zo_arena"))
    assert total <= report["sram"]["budget_bytes"]
    flash_data = report["flash"]["weights_and_parameters_bytes"]
    flash_used = sum(sections[s][0] for s in (".isr_vector", ".text", ".rodata", ".data"))
    # besides the weights: the code, about 50-65 KB with training (the kernels' specialised
    # variants, docs/firmware.md "Kernels", are about 20 KB of it; --scales' double
    # arithmetic brings libgcc's soft-float helpers; sparse adds the block selection: 64.2
    # KB for the KWS model's sparse build on the H7B3) and a few constants
    assert flash_data <= flash_used <= flash_data + 72 * 1024
    assert flash_used <= report["flash"]["flash_bytes"]


@pytest.mark.parametrize("target,board", [("stm32f746", "disco_f746ng"),
                                          ("stm32h7b3", "stm32h7b3i_dk")])
def test_generated_platformio_project(tmp_path, target, board):
    """The platformio.ini `zocodegen build` writes parses with PlatformIO's own parser and
    points at files that exist in the project (the board JSON where PlatformIO lacks one)."""
    from platformio.project.config import ProjectConfig
    out = tmp_path / "fw"
    assert main(["build", str(FIXTURES / "mcunet_tiny.tflite"), "--target", target,
                 "-o", str(out)]) == 0
    config = ProjectConfig(str(out / "platformio.ini"), parse_extra=False)
    env = f"env:{target}"
    assert config.get(env, "board") == board
    assert (out / config.get(env, "board_build.ldscript")).is_file()
    assert "-mcpu=cortex-m7" in config.get(env, "build_flags")
    script = config.get(env, "extra_scripts")[0].removeprefix("post:")
    assert (out / script).is_file()
    if target == "stm32h7b3":
        spec = json.loads((out / "boards" / f"{board}.json").read_text())
        assert spec["build"]["mcu"].startswith("stm32h7b3")


@pytest.mark.parametrize("engine", ["native", pytest.param("qemu", marks=needs_arm)])
def test_cli_infer_engines_agree_with_reference(tmp_path, engine, capsys, monkeypatch):
    """`infer --engine native|qemu` through the CLI (two outputs -> .npz) equals the reference."""
    monkeypatch.setenv("ZOCODEGEN_CACHE", str(tmp_path / "cache"))
    model = FIXTURES / "multi_op.tflite"
    graph = load_model(model)
    x = np.random.default_rng(3).integers(-128, 128, (5, *graph.tensor(graph.inputs[0]).shape[1:]),
                                          dtype=np.int8)
    np.save(tmp_path / "x.npy", x)
    outputs = {}
    for name in ("reference", engine):
        assert main(["infer", str(model), "--input", str(tmp_path / "x.npy"), "--output",
                     str(tmp_path / f"{name}.npz"), "--engine", name]) == 0
        outputs[name] = dict(np.load(tmp_path / f"{name}.npz"))
    assert outputs["reference"].keys() == outputs[engine].keys()
    for key in outputs["reference"]:
        assert np.array_equal(outputs["reference"][key], outputs[engine][key]), key
    if engine == "qemu":
        assert "instructions per inference" in capsys.readouterr().err


def test_output_path_problems_are_clear_errors(tmp_path, capsys):
    """-o naming a file, or a folder with the user's own files: one-line error; with
    --force the user's files kept (tests/test_contract_build.py has the rest)."""
    model = str(FIXTURES / "multi_op.tflite")
    blocker = tmp_path / "afile"
    blocker.write_text("mine")
    assert main(["build", model, "--target", "native", "-o", str(blocker)]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert blocker.read_text() == "mine"
    out = tmp_path / "proj"
    out.mkdir()
    (out / "NOTES.txt").write_text("keep me")
    assert main(["build", model, "--target", "native", "-o", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["build", model, "--target", "native", "-o", str(out), "--force"]) == 0
    assert (out / "NOTES.txt").read_text() == "keep me"


def test_rebuild_removes_files_it_no_longer_generates(tmp_path):
    """The Makefile compiles src/train/*.c by wildcard: a training build regenerated as
    inference-only must not leave the engine behind (nor anything an older zocodegen wrote
    and listed in its manifest); files the user added stay."""
    out = tmp_path / "proj"
    model = str(FIXTURES / "digits_cnn.tflite")
    assert main(["build", model, "--target", "native", "--train", "full", "-o", str(out)]) == 0
    assert (out / "src/train/zo_train.c").is_file()
    (out / "notes.txt").write_text("mine")
    assert main(["build", model, "--target", "native", "-o", str(out)]) == 0
    assert not (out / "src/train/zo_train.c").exists()
    assert not (out / "src/training.c").exists()
    assert (out / "notes.txt").read_text() == "mine"
    files = json.loads((out / "manifest.json").read_text())["files"]
    assert all((out / rel).is_file() for rel in files)
    _make(out, "native")
