"""The opt-in per-layer profiling build (-DZO_PROFILE_LAYERS, benchmarks/inference.py): its
per-layer instruction counts under QEMU add up to the whole inference, it computes what the
normal build computes, and a normal build compiles none of it."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, random_inputs
from zocodegen.projects import cached_build, generate
from zocodegen.codegen.project import BuildOptions
from zocodegen.host.engines import FirmwareSession
from zocodegen.frontends import load_model

PROFILE = "-DZO_PROFILE_LAYERS"
TICK = 40  # instructions per tick of the 25 MHz timer under -icount shift=0
MODEL = FIXTURES / "multi_op.tflite"
HAVE_ARM = shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")
PROFILING_NAMES = ("model_layer_cycles", "send_layer_cycles")


@pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and qemu-system-arm "
                    "(apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm)")
def test_layer_counts_add_up_to_the_inference(module_build_cache):
    graph = load_model(MODEL)
    x = graph.tensor(graph.inputs[0])
    samples = [{graph.inputs[0]: v} for v in random_inputs(x.shape, x.dtype, 5)[3:]]
    normal = cached_build(MODEL, "qemu")
    profiled = cached_build(MODEL, "qemu", extra_cflags=PROFILE)
    with FirmwareSession(graph, "qemu", normal) as session:
        expected = [session.infer(s) for s in samples]
    with FirmwareSession(graph, "qemu", profiled) as session:
        for sample, want in zip(samples, expected):
            session.telemetry.clear()
            got = session.infer(sample)
            layers = sorted((t for t in session.telemetry if t.layer >= 0),
                            key=lambda t: t.layer)
            assert [t.layer for t in layers] == list(range(len(graph.ops)))
            counts = [t.cycles for t in layers]
            # whole ticks; a layer shorter than a tick (a RESHAPE view) may read 0
            assert all(c % TICK == 0 for c in counts) and max(counts) > 0
            # the layer counts telescope: only the calls into model_run_range and the timer
            # reads at both ends lie outside them
            assert 0 <= got.cycles - sum(counts) <= 3 * TICK, (got.cycles, sum(counts))
            # the reading costs a few instructions per layer, nothing more
            assert 0 <= got.cycles - want.cycles <= 60 * len(graph.ops)
            for name in graph.outputs:
                np.testing.assert_array_equal(got.outputs[name], want.outputs[name])


def _preprocessed(project: Path, source: str, cflags: list[str]) -> str:
    return subprocess.run(["cc", "-E", "-P", "-Iinclude", *cflags, source], cwd=project,
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
def test_normal_build_compiles_no_profiling(tmp_path):
    generate(MODEL, BuildOptions(target="qemu"), tmp_path)
    for source in ("src/model.c", "src/main.c"):
        normal = _preprocessed(tmp_path, source, [])
        profiled = _preprocessed(tmp_path, source, [PROFILE])
        assert not any(name in normal for name in PROFILING_NAMES), source
        assert "model_layer_cycles" in profiled, source
    model_c = _preprocessed(tmp_path, "src/model.c", [])
    assert "platform_cycles" not in model_c
