"""Shared test helpers: where the models are, and the TFLite reference interpreter."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
SHARED_MODELS = REPO.parent / "shared" / "models"
SHARED_TFLITE = ("kws_ref_model.tflite", "pretrainedResnet_quant.tflite")
FIXTURE_TFLITE = ("mcunet_tiny.tflite", "mcunet_in1.tflite", "multi_op.tflite", "edge_ops.tflite",
                  "digits_cnn.tflite", "digits_resnet.tflite")
FIXTURE_ONNX = ("onnx_qdq_int8.onnx", "onnx_qdq_uint8.onnx", "onnx_qop_uint8.onnx")


HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None
HAVE_QEMU = HAVE_ARM and shutil.which("qemu-system-arm") is not None
needs_arm = pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc (apt-get install "
                               "gcc-arm-none-eabi libnewlib-arm-none-eabi)")
needs_qemu = pytest.mark.skipif(not HAVE_QEMU, reason="needs arm-none-eabi-gcc and "
                                "qemu-system-arm (scripts/setup.sh)")


def softmax_driver(source: str, variant: str, tmp_path_factory) -> Path:
    """A host C program (``source``) compiled with the kernels' zo_softmax.c, as the
    generated projects build it (-Werror), ``variant`` "plain" or "sanitize" (ASan + UBSan;
    skipped where gcc cannot link them). For tests comparing a C twin with numpy."""
    import subprocess
    if shutil.which("gcc") is None:
        pytest.skip("needs the host gcc")
    folder = tmp_path_factory.mktemp("softmax_driver")
    (folder / "driver.c").write_text(source)
    exe = folder / "driver"
    kernels = REPO / "templates" / "kernels"
    flags = ["-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off"]
    if variant == "sanitize":
        flags += ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    result = subprocess.run(["gcc", *flags, f"-I{kernels}", str(folder / "driver.c"),
                             str(kernels / "zo_softmax.c"), "-o", str(exe)],
                            capture_output=True, text=True)
    if result.returncode != 0 and variant == "sanitize" and "asan" in result.stderr:
        pytest.skip("gcc cannot link the sanitizers here")
    assert result.returncode == 0, result.stderr
    return exe


def shared_model(name: str) -> Path:
    """A model from ../shared/models, or skip: a user's fresh clone does not have it."""
    path = SHARED_MODELS / name
    if not path.is_file():
        pytest.skip(f"{path} is absent (the MLPerf Tiny models live in ../shared, which only "
                    "CI and developer checkouts have)")
    return path


def all_tflite_models() -> list:
    """pytest params: every shared TFLite model and every TFLite fixture."""
    return ([pytest.param(("shared", n), id=n) for n in SHARED_TFLITE]
            + [pytest.param(("fixture", n), id=n) for n in FIXTURE_TFLITE])


def resolve(spec: tuple[str, str]) -> Path:
    kind, name = spec
    return shared_model(name) if kind == "shared" else FIXTURES / name


def reference_interpreter(path: Path, preserve: bool = False):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    it = Interpreter(model_path=str(path),
                     experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                     experimental_preserve_all_tensors=preserve)
    it.allocate_tensors()
    return it


def random_inputs(shape, dtype, count: int, seed: int = 0) -> list[np.ndarray]:
    """``count`` inputs including saturating ones (all min, all max, random extremes)."""
    rng = np.random.default_rng(seed)
    out = []
    if np.dtype(dtype) == np.int8:
        out += [np.full(shape, -128, np.int8), np.full(shape, 127, np.int8),
                rng.choice(np.array([-128, 127], np.int8), size=shape)]
        while len(out) < count:
            out.append(rng.integers(-128, 128, size=shape, dtype=np.int8))
    else:
        out += [np.full(shape, -1e4, np.float32), np.full(shape, 1e4, np.float32),
                (rng.choice([-1.0, 1.0], size=shape) * 1e3).astype(np.float32)]
        while len(out) < count:
            scale = 0.5 * (1 + len(out) % 6)
            out.append((rng.standard_normal(shape) * scale).astype(np.float32))
    return out


@pytest.fixture(scope="module")
def module_build_cache(tmp_path_factory):
    """A firmware build cache of the test module's own (ZOCODEGEN_CACHE), so builds are
    shared by the module's tests and never touch the user's cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ZOCODEGEN_CACHE", str(tmp_path_factory.mktemp("zocache")))
    yield
    mp.undo()


def ended_pid() -> int:
    """The id of a process that has ended: what a writer killed mid-file leaves in the names
    of its temporaries (zocodegen/files.py)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def assert_refused(code: int, err: str, words: tuple[str, ...] | list[str]) -> None:
    """The contract's refusal (docs/contract.md): exit 2, one `zocodegen: error:` line on
    stderr carrying ``words``, no traceback."""
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert "Traceback" not in err
    assert len(lines) == 1 and lines[0].startswith("zocodegen: error: "), err
    for word in words:
        assert word in lines[0], (word, lines[0])


def digits_workspace(root: Path) -> np.ndarray:
    """The contract tests' small project in ``root``: the digits CNN as m.tflite, 30 random
    records with 9 test records as d.npz, packed into d.img. Returns the records."""
    from zocodegen.cli import main
    shutil.copy(FIXTURES / "digits_cnn.tflite", root / "m.tflite")
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, size=(30, 8, 8, 1)).astype(np.int8)
    np.savez(root / "d.npz", x=x, y=rng.integers(0, 10, 30), x_test=x[:9],
             y_test=rng.integers(0, 10, 9))
    assert main(["pack", str(root / "d.npz"), "-o", str(root / "d.img")]) == 0
    return x
