"""ElasticZO-INT8 (--estimator int8, issue 16): simulator == native C == QEMU C checkpoints,
byte for byte, alone and with back-propagated last layers; the QEMU firmware built for a core
without an FPU links with no floating-point instruction or soft-float helper and runs with
the FPU switched off; the rounding and the perturbations have the distributions the paper
asks for; bad options are refused in one line."""
from __future__ import annotations

import hashlib
import shutil
import subprocess

import numpy as np
import pytest

from conftest import FIXTURES
from test_training import (NEEDS_ARM, _check_against_simulator, _data, _firmware_checkpoint,
                           _image, _simulated, _simulated_with_guard)
from zocodegen.projects import cached_build
from zocodegen.cli import main
from zocodegen.host.engines import FirmwareSession
from zocodegen.frontends import load_model
from zocodegen.formats.image import pack_image
from zocodegen.training import int8
from zocodegen.training.config import TrainConfig
from zocodegen.training.plan import training_plan

pytestmark = pytest.mark.usefixtures("module_build_cache")

#: soft-float helpers (libgcc) that any float operation in a -mfloat-abi=soft build calls
FLOAT_HELPER = ("__aeabi_f", "__aeabi_d", "__aeabi_i2f", "__aeabi_ui2f", "__aeabi_l2f",
                "__aeabi_i2d", "__aeabi_ui2d", "__aeabi_l2d")


def _config(**options) -> TrainConfig:
    return TrainConfig(**{"steps": 10, "queries": 3, "estimator": "int8", **options})


def _check(spec: str, engine: str, steps: int, tmp_path, **options) -> None:
    _check_against_simulator(spec, engine, steps, tmp_path, _config(**options))


@pytest.mark.parametrize("spec, options", [
    pytest.param("fixture:digits_cnn.tflite", {}, id="digits"),
    pytest.param("fixture:digits_cnn.tflite", dict(bp_layers=2, batch=2), id="digits-bp2-batch2"),
    pytest.param("fixture:digits_cnn.tflite", dict(p_zero=0.5, r_max=31, b_zo=2),
                 id="digits-options"),
    pytest.param("shared:kws_ref_model.tflite", dict(bp_layers=1), id="kws-bp1"),
    pytest.param("fixture:onnx_qdq_int8.onnx", dict(bp_layers=2), id="onnx-bp2"),
    pytest.param("fixture:onnx_qdq_int8.onnx", {}, id="onnx"),
])
def test_int8_bit_exact_native(spec, options, tmp_path):
    _check(spec, "native", 3, tmp_path, **options)


@NEEDS_ARM
@pytest.mark.parametrize("spec, options", [
    pytest.param("fixture:digits_cnn.tflite", dict(bp_layers=1), id="digits-bp1"),
    pytest.param("shared:kws_ref_model.tflite", {}, id="kws"),
])
def test_int8_bit_exact_qemu(spec, options, tmp_path):
    _check(spec, "qemu", 2, tmp_path, **options)


def test_int8_guard_bit_exact_native(tmp_path):
    """The guard's rollback is one more bit of shift: the device's checkpoint (guard state
    included) equals the simulator's."""
    model = FIXTURES / "digits_cnn.tflite"
    graph = load_model(model)
    config = _config(steps=4, bp_layers=1, guard=True, guard_every=1, guard_samples=16)
    x, y = _data(graph, 10, count=8 + 16)
    path = tmp_path / "train.img"
    pack_image(path, x[:8], y[:8], x_val=x[8:], y_val=y[8:], num_classes=10,
               checkpoint_bytes=1 << 20)
    got = _firmware_checkpoint(model, graph, config, "native", path, 3)
    assert got == _simulated_with_guard(model, graph, config, path, 3)


def _symbols(elf) -> list[str]:
    nm = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True,
                        check=True).stdout
    return [line.split()[-1] for line in nm.splitlines() if line.strip()]


def _fp_instructions(elf) -> list[str]:
    """VFP data-processing / transfer instructions in the disassembly."""
    dump = subprocess.run(["arm-none-eabi-objdump", "-d", str(elf)], capture_output=True,
                          text=True, check=True).stdout
    ops = ("vadd", "vsub", "vmul", "vdiv", "vmov", "vldr", "vstr", "vcvt", "vcmp", "vpush",
           "vpop", "vldm", "vstm", "vfma", "vneg", "vabs", "vsqrt", "vmrs", "vmsr")
    return [line for line in dump.splitlines()
            if len(line.split("\t")) > 2 and line.split("\t")[2].strip().startswith(ops)]


@NEEDS_ARM
def test_int8_firmware_needs_no_fpu(tmp_path):
    """Built with -mfloat-abi=soft (a Cortex-M without an FPU), the --estimator int8 firmware
    links no soft-float helper and holds no FP instruction; the FPU stays off at reset, so
    its run under QEMU (checkpoint == simulator) proves no FP instruction executes. The same
    build of the float estimator does pull the helpers in: the check can fail."""
    model = FIXTURES / "digits_cnn.tflite"
    graph = load_model(model)
    config = _config(bp_layers=1)
    elf = cached_build(model, "qemu", graph=graph, train=config, soft_float=True)
    assert not [s for s in _symbols(elf) if s.startswith(FLOAT_HELPER)]
    assert not _fp_instructions(elf)
    float_elf = cached_build(model, "qemu", graph=graph, soft_float=True,
                             train=TrainConfig(steps=10, queries=3, bp_layers=1))
    assert [s for s in _symbols(float_elf) if s.startswith(FLOAT_HELPER)]

    plan = training_plan(graph, config)
    x, y = _data(graph, 10, count=6)
    image = _image(tmp_path, x, y, 10)
    with FirmwareSession(graph, "qemu", elf, icount=False) as session:
        session.attach_image(image)
        session.train(2)
        got = session.save_checkpoint()
    sha = hashlib.sha256(model.read_bytes()).digest()
    assert got == _simulated(graph, plan, x, y, 2, sha)


def test_rounding_to_bits_is_bounded_and_unbiased():
    """Magnitudes end below 2^bits (the largest at 2^(bits-1) .. 2^bits); the stochastic
    rounding's mean equals G / 2^s; each guard halving halves the expected step."""
    rng = np.random.default_rng(3)
    g = rng.integers(-300, 301, size=20000)
    g[0] = 300
    for bits in (1, 2, 3):
        update = int8.round_to_bits(g, bits, 0, seed=12345)
        assert np.abs(update).max() <= (1 << bits)
        s = int(300).bit_length() - bits
        assert abs(update.mean() - (g / 2 ** s).mean()) < 0.02
        assert abs(np.abs(update).mean() - np.abs(g / 2 ** s).mean()) < 0.02
    once = int8.round_to_bits(g, 2, 1, seed=7)
    assert abs(np.abs(once).mean() * 2 - np.abs(int8.round_to_bits(g, 2, 0, seed=7)).mean()) \
        < 0.05
    small = np.array([1, -1, 0, 1])
    assert (int8.round_to_bits(small, 1, 0, seed=1) == small).all()  # B <= bits: G itself


def test_perturbations_are_sparse_uniform():
    """u uniform on [-r, r] (every value, near-equal counts), zeros at the rate p_zero."""
    r, p = 7, 0.5
    z = int8.perturbations(99, 2, 100000, r, int8.q16(p))
    assert z.min() == -r and z.max() == r
    zeros = (z == 0).mean()
    assert abs(zeros - (p + (1 - p) / (2 * r + 1))) < 0.01
    counts = np.bincount(z[z != 0] + r, minlength=2 * r + 1)
    nonzero = np.delete(counts, r)
    assert nonzero.min() / nonzero.max() > 0.95
    assert [int8.p_zero_q16(None, t, 100) for t in (0, 19, 20, 49, 50, 99)] == \
        [int8.q16(0.33)] * 2 + [int8.q16(0.5)] * 2 + [int8.q16(0.9)] * 2


@pytest.mark.parametrize("argv, message", [
    (["--r-max", "0"], "--r-max: must be in 1..127"),
    (["--p-zero", "1.5"], "--p-zero must be in [0, 1)"),
    (["--p-zero", "half"], "--p-zero expects a number or schedule"),
    (["--b-zo", "0"], "--b-zo: must be in 1..8"),
])
def test_int8_bad_options(argv, message, tmp_path, capsys):
    code = main(["build", str(FIXTURES / "digits_cnn.tflite"), "--target", "native",
                 "--train", "full", "--estimator", "int8", "-o", str(tmp_path / "fw"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_int8_build_runs_with_default_lr_option(tmp_path, capsys):
    """The CLI's default --lr auto does not apply to int8 (no eta): the build goes through
    and records the estimator."""
    out = tmp_path / "fw"
    assert main(["build", str(FIXTURES / "digits_cnn.tflite"), "--target", "native",
                 "--train", "full", "--estimator", "int8", "--steps", "5", "-o", str(out)]) == 0
    assert "#define ZO_TRAIN_INTEGER_ONLY 1" in (out / "include" / "zo_train_config.h").read_text()


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a host C compiler")
def test_float_build_keeps_float_engine(tmp_path):
    out = tmp_path / "fw"
    assert main(["build", str(FIXTURES / "digits_cnn.tflite"), "--target", "native",
                 "--train", "full", "--steps", "5", "-o", str(out)]) == 0
    assert "#define ZO_TRAIN_INTEGER_ONLY 0" in (out / "include" / "zo_train_config.h").read_text()
