"""benchmarks/: every script is listed in benchmarks/README.md with the figure it writes, and
every script that has a command line runs with the index's smoke arguments, so a benchmark
cannot stop running against today's code unnoticed. The smoke runs write nothing into docs/
(their arguments measure part of a table or keep their runs in a temporary folder)."""
from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import HAVE_QEMU, REPO, SHARED_MODELS

BENCHMARKS = REPO / "benchmarks"
INDEX = BENCHMARKS / "README.md"
#: smoke runs of more than about 20 s on a shared 2-core machine (firmware builds and QEMU
#: steps of the larger models, or simulated runs)
SLOW = {"training.py", "training_overheads.py", "training_layers.py", "perturbation.py",
        "elasticzo.py", "simulator_speed.py", "link_throughput.py", "fleet.py",
        "experiment.py", "estimator_screen.py", "scale_experiment.py", "frontier.py"}
#: what a script's smoke run needs beyond the project's venv
NEEDS_QEMU = {"inference.py", "training.py", "training_overheads.py", "training_layers.py",
              "perturbation.py", "elasticzo.py", "kernel_profile.py", "link_throughput.py",
              "scale_experiment.py", "frontier.py"}
NEEDS_SHARED = {"training.py", "training_overheads.py", "perturbation.py"}
NEEDS_SKLEARN = {"experiment.py", "estimator_screen.py", "fleet.py", "scale.py",
                 "scale_experiment.py", "simulator_speed.py", "frontier.py"}


def index_table() -> dict[str, list[str]]:
    """script -> its cells (what it measures, the figure it writes, a full run, smoke), from
    the index's table."""
    rows = {}
    for line in INDEX.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([\w.]+\.py)`", cells[0]) if len(cells) == 5 else None
        if match:
            rows[match.group(1)] = cells[1:]
    return rows


def index_rows() -> dict[str, str]:
    """script -> its smoke cell."""
    return {script: cells[3] for script, cells in index_table().items()}


def smoke_arguments() -> list:
    params = []
    for script, cell in index_rows().items():
        if cell.startswith("helper"):
            continue
        marks = [pytest.mark.slow] if script in SLOW else []
        params.append(pytest.param(script, cell, marks=marks, id=script))
    return params


def test_every_script_is_in_the_index():
    listed = set(index_rows())
    present = {p.name for p in BENCHMARKS.glob("*.py")}
    assert sorted(present - listed) == [], "scripts missing from benchmarks/README.md"
    assert sorted(listed - present) == [], "benchmarks/README.md lists scripts that are gone"


def test_every_script_names_the_doc_it_writes():
    for script, (_, figure, _, smoke) in index_table().items():
        if smoke.startswith("helper"):
            continue
        docs = re.findall(r"docs/[\w/-]+\.md", figure)
        assert docs, f"{script}: the index names no doc for its figure"
        assert [d for d in docs if not (REPO / d).is_file()] == [], script


def test_every_helper_names_what_runs_it():
    for script, cell in index_rows().items():
        if cell.startswith("helper"):
            named = re.findall(r"tests/\w+\.py|`(\w+\.py)`", cell)
            assert named, f"{script}: a helper names the test or script that runs it"
            for path in re.findall(r"tests/\w+\.py", cell):
                assert (REPO / path).is_file(), f"{script}: {path} does not exist"


@pytest.mark.parametrize("script,cell", smoke_arguments())
def test_the_script_runs_on_a_tiny_setting(script, cell, tmp_path):
    if script in NEEDS_QEMU and not HAVE_QEMU:
        pytest.skip("needs arm-none-eabi-gcc and qemu-system-arm (scripts/setup.sh)")
    if script in NEEDS_SHARED and not (SHARED_MODELS / "kws_ref_model.tflite").is_file():
        pytest.skip(f"needs {SHARED_MODELS}/kws_ref_model.tflite")
    if script in NEEDS_SKLEARN and importlib.util.find_spec("sklearn") is None:
        pytest.skip("needs scikit-learn (its bundled digits)")
    arguments = ([] if cell == "(none)" else
                 shlex.split(cell.strip("`").replace("TMP", str(tmp_path))))
    docs = {p: p.read_bytes() for p in (REPO / "docs").rglob("*") if p.is_file()}
    env = dict(os.environ, PYTHONPATH=str(REPO), OPENBLAS_NUM_THREADS="1")
    result = subprocess.run([sys.executable, str(BENCHMARKS / script), *arguments], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip(), f"{script} printed nothing"
    changed = [str(p) for p, data in docs.items() if not p.is_file() or p.read_bytes() != data]
    assert changed == [], f"a smoke run wrote into docs/: {changed}"
