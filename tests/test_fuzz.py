"""The fuzz harnesses of tests/fuzz (docs/reliability.md): every committed input (the seeds
from real traffic and what earlier campaigns kept) replays without a sanitizer report or an
unexpected exception, and every harness fuzzes a few seconds from it without a finding.
``scripts/fuzz.sh SECONDS`` is the long run."""
from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent / "fuzz"
_spec = importlib.util.spec_from_file_location("fuzz_run", HERE / "run.py")
fuzz_run = importlib.util.module_from_spec(_spec)
sys.modules["fuzz_run"] = fuzz_run
_spec.loader.exec_module(fuzz_run)

NAMES = [h.name for h in fuzz_run.HARNESSES]
pytestmark = pytest.mark.skipif(
    not any(shutil.which(n) for n in fuzz_run.CLANG_NAMES)
    or importlib.util.find_spec("atheris") is None,
    reason="needs clang with libFuzzer and atheris (scripts/setup.sh installs both)")


@pytest.fixture(scope="module")
def commands(tmp_path_factory) -> dict[str, list[str]]:
    fuzz_run.WORK = tmp_path_factory.mktemp("fuzz")
    return fuzz_run.build_all(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_committed_corpus_replays_clean(commands, name):
    inputs = list((fuzz_run.CORPUS / name).iterdir())
    assert any(p.name.startswith("seed-") for p in inputs), f"{name} has no seed"
    done = fuzz_run.replay(name, commands[name])
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("\nExecuted ") == len(inputs), done.stderr[-3000:]


@pytest.mark.parametrize("name", NAMES)
def test_short_fuzz_run_finds_nothing(commands, name):
    result = fuzz_run.fuzz(name, commands[name], seconds=3, jobs=1)
    log = Path(result["log"]).read_text()
    assert result["exit"] == 0, log[-3000:]
    assert result["executions"] > 0
