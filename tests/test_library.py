"""`build --as-library` (issue 49, docs/firmware.md "Use it as a library"): the model and the
training engine as sources behind include/zo_library.h, written like a project (signed
manifest), refused with the fix where the run needs the data image, and its example
firmware builds for both boards with zero warnings and infers bit-exactly on the emulated
F746."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import zocodegen
from conftest import FIXTURES, REPO, random_inputs, reference_interpreter
from test_build import _make, needs_arm
from zocodegen.errors import UserError
from zocodegen.target import TARGET_NAMES

MODEL = FIXTURES / "digits_cnn.tflite"
#: A run the library can train: no data image, so neither guard nor --lr auto.
LIBRARY_RUN = dict(steps=3, no_guard=True, lr="0.01")


def _library(tmp_path, board: str, train: str = "none", model=MODEL, **given):
    run = LIBRARY_RUN if train != "none" else {}
    return zocodegen.build(model, target=board, as_library=True, train=train,
                           output=tmp_path / f"lib-{board}-{train}", **run, **given).project


def test_the_library_states_its_sram_and_has_no_firmware_of_its_own(tmp_path):
    lib = _library(tmp_path, "stm32f746", "full")
    header = (lib / "include" / "zo_library.h").read_text()
    plan = json.loads((lib / "memory_report.json").read_text())
    arena = next(i for i in plan["sram"]["items"] if i["name"] == "arena")
    assert f"#define ZO_LIBRARY_ARENA_BYTES {arena['bytes']}u" in header
    for call in ("zo_library_init(void)", "zo_library_run(", "zo_library_train_step(",
                 "zo_library_checkpoint_save(", "zo_library_checkpoint_restore("):
        assert call in header
    library = [p for p in (lib / "src").rglob("*.c")]
    assert not any("main(" in p.read_text() or "platform" in p.parts for p in library)
    assert not (lib / "Makefile").exists() and (lib / "example" / "Makefile").is_file()
    manifest = json.loads((lib / "manifest.json").read_text())
    assert manifest["library"] is True and "include/zo_library.h" in manifest["files"]
    _library(tmp_path, "stm32f746", "full")  # a rebuild goes through the project writer


@pytest.mark.parametrize("given, fix", [(dict(train="full", steps=3), "--no-guard, --lr ETA"),
                                        (dict(train="sparse", steps=3, no_guard=True, lr="0.01"),
                                         "--block K")])
def test_a_run_that_needs_the_data_image_is_refused_with_the_fix(tmp_path, given, fix):
    with pytest.raises(UserError, match=fix):
        zocodegen.build(MODEL, target="stm32f746", as_library=True, output=tmp_path / "x",
                        **given)
    with pytest.raises(UserError, match="--as-library is for a board"):
        zocodegen.build(MODEL, target="native", as_library=True, output=tmp_path / "y")


@needs_arm
@pytest.mark.parametrize("board", TARGET_NAMES)
@pytest.mark.parametrize("train", ["none", "full"])
def test_the_example_builds_with_zero_warnings(tmp_path, board, train):
    _make(_library(tmp_path, board, train) / "example", "all")


@needs_arm
@pytest.mark.parametrize("model", [MODEL, FIXTURES / "mcunet_tiny.tflite"])
def test_the_documented_command_runs_the_example_on_the_emulated_f746(tmp_path, model):
    """docs/firmware.md's commands, as written there (issue 64 item 7): the example built, 'I'
    commands made of X.npy, the emulator run on them: it exits 0 once they run out, and each
    output equals the TFLite reference interpreter's. mcunet_tiny's 12,289-byte commands
    (float input) reach the emulator in 4,096-byte reads, so the firmware waits for the host in the middle
    of one: the last output must still come out before the line closes."""
    lib = _library(tmp_path, "stm32f746", model=model)
    interpreter = reference_interpreter(model)
    detail = interpreter.get_input_details()[0]
    inputs = random_inputs(tuple(detail["shape"]), detail["dtype"], 4, seed=11)
    np.save(tmp_path / "X.npy", np.concatenate(inputs))
    doc = (REPO / "docs" / "firmware.md").read_text()
    block = doc.split("<!-- library-example-emulated -->\n```\n")[1].split("```")[0]
    script = block.replace("DIR", str(lib)).replace("python ", f"{sys.executable} ")
    done = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    out = interpreter.get_output_details()[0]
    outputs = int(np.prod(out["shape"])) * np.dtype(out["dtype"]).itemsize  # bytes
    assert done.returncode == 0, done.stderr
    assert ("the host closed the line while the firmware waited to read: the session ends "
            f"({4 * (1 + inputs[0].nbytes)} bytes received, {4 * outputs} sent)") in done.stderr
    expected = []
    for x in inputs:
        interpreter.set_tensor(detail["index"], x)
        interpreter.invoke()
        expected.append(interpreter.get_tensor(out["index"]).tobytes())
    assert (tmp_path / "Y.bin").read_bytes() == b"".join(expected)
    assert len(b"".join(expected)) == 4 * outputs


def test_the_header_states_the_inputs_quantization(tmp_path):
    """Issue 64 item 7: zo_library.h gives input 0's scale and zero point (the model's), so a
    caller quantizes its samples as the model expects."""
    from zocodegen.frontends import load_model
    quant = load_model(MODEL).tensor(load_model(MODEL).inputs[0]).quant
    header = (_library(tmp_path, "stm32f746") / "include" / "zo_library.h").read_text()
    scale = next(line.split()[2] for line in header.splitlines()
                 if line.startswith("#define ZO_LIBRARY_INPUT_SCALE "))
    assert float(scale.rstrip("f")) == pytest.approx(quant.scalar_scale, rel=1e-7)
    assert f"#define ZO_LIBRARY_INPUT_ZERO_POINT ({quant.scalar_zero_point})" in header
