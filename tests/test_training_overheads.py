"""The opt-in training-step profiling build (-DZO_PROFILE_TRAIN,
benchmarks/training_overheads.py): its per-category instruction counts under QEMU add up to
the step's own count, it trains exactly as the normal build does, and a normal build
compiles none of it."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES
from zocodegen.projects import cached_build, generate
from zocodegen.codegen.project import BuildOptions
from zocodegen.host.engines import FirmwareSession
from zocodegen.frontends import load_model
from zocodegen.formats.image import pack_image
from zocodegen.training.config import TrainConfig
from zocodegen.training.plan import training_plan

PROFILE = "-DZO_PROFILE_TRAIN"
TICK = 40  # instructions per tick of the 25 MHz timer under -icount shift=0
LAYER = 1000  # zo_train.h: ZO_PROFILE_LAYER
CATEGORIES = 6  # forward, perturb, restore, loss, update, other
MODEL = FIXTURES / "digits_cnn.tflite"
HAVE_ARM = shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")
PROFILING_NAMES = ("zo_train_profile", "ZO_PROFILE")


def _image(tmp: Path, graph, classes: int) -> Path:
    x = graph.tensor(graph.inputs[0])
    rng = np.random.default_rng(0)
    data = rng.integers(-128, 128, size=(3,) + tuple(x.shape[1:])).astype(x.dtype)
    path = tmp / "train.img"
    pack_image(path, data, np.arange(3) % classes, num_classes=classes,
               checkpoint_bytes=1 << 20)
    return path


@pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and qemu-system-arm "
                    "(apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm)")
def test_category_counts_add_up_to_the_step(tmp_path):
    graph = load_model(MODEL)
    config = TrainConfig(steps=4, queries=2, lr=0.01,
                         estimator="adaptive")  # both WP and NP layers
    plan = training_plan(graph, config)
    assert {layer.mode for layer in plan.layers} == {"WP", "NP"}
    image = _image(tmp_path, graph, plan.num_classes)
    blobs = []
    for flags in ("", PROFILE):
        elf = cached_build(MODEL, "qemu", graph=graph, train=config, extra_cflags=flags)
        with FirmwareSession(graph, "qemu", elf) as session:
            session.attach_image(image)
            for _ in range(2):
                steps = session.train(1)
                profile = [t for t in session.telemetry if t.layer >= LAYER]
                if not flags:
                    assert profile == []
                    continue
                assert [t.layer - LAYER for t in profile] == list(range(CATEGORIES))
                assert all(t.step == steps[0].step for t in profile)
                counts = [t.cycles for t in profile]
                assert all(c % TICK == 0 for c in counts)
                assert min(counts[:5]) > 0, counts  # every category ran
                # the categories telescope; the reads and the telemetry the step leaves out
                # they leave out too: only the final timer reads differ
                assert abs(steps[0].cycles - sum(counts)) <= 2 * TICK, (steps, counts)
            blobs.append(session.save_checkpoint())
    assert blobs[0] == blobs[1], "the profiling build trained differently"


def _preprocessed(project: Path, source: str, cflags: list[str]) -> str:
    return subprocess.run(["cc", "-E", "-P", "-Iinclude", *cflags, source], cwd=project,
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
def test_normal_build_compiles_no_profiling(tmp_path):
    generate(MODEL, BuildOptions(target="qemu", train=TrainConfig(queries=2)), tmp_path)
    sources = sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "src").rglob("*.c")
                     if "platform" not in p.parts)
    assert "src/zo_train.c" in sources or any(s.endswith("zo_train.c") for s in sources)
    for source in sources:
        normal = _preprocessed(tmp_path, source, [])
        assert not any(name in normal for name in PROFILING_NAMES), source
    train_c = next(s for s in sources if s.endswith("zo_train.c"))
    assert "zo_train_profile_cycles" in _preprocessed(tmp_path, train_c, [PROFILE])
