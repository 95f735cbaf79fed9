"""The Python API (issue 36, docs/api.md): it runs the example end to end, takes exactly the
command line's options with its defaults and checks, and docs/api.md lists them as
`zocodegen COMMAND --help` does."""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

import zocodegen
from zocodegen import api
from zocodegen.cli_options import build_parser
from zocodegen.errors import UserError

REPO = Path(__file__).resolve().parents[1]
FUNCTIONS = ("inspect", "build", "pack", "simulate", "train", "export")


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_the_example_runs_end_to_end_through_the_api(tmp_path):
    """scripts/example_api.py: pack, build, train on the native firmware, simulate, export;
    the device's checkpoint equals the simulator's byte for byte."""
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "example_api.py"),
                             "--engine", "native", "--steps", "8", "--queries", "4",
                             "-o", str(tmp_path / "out")], capture_output=True, text=True,
                            cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "device checkpoint == simulator checkpoint: True" in result.stdout
    assert (tmp_path / "out" / "tuned.tflite").is_file()


PLAIN_SCRIPT = """\
import zocodegen
from zocodegen.datasets import digits_npz
from zocodegen.frontends import load_model

with open("ran.txt", "a") as ran:  # a child that re-ran this script would add a line
    ran.write("ran\\n")
MODEL = {model!r}
graph = load_model(MODEL)
digits_npz("digits.npz", graph.tensor(graph.inputs[0]).quant)
zocodegen.pack("digits.npz", "digits.img", model=MODEL)
built = zocodegen.build(MODEL, target="native", train="full", steps=6, queries=2,
                        output="firmware")
run = zocodegen.train("digits.img", "run", native=built.project, checkpoint_every=2)
print("trained", run.steps)
"""


def test_a_plain_script_without_a_main_guard_trains(tmp_path):
    """docs/api.md's example as a top-level script (issue 64 item 5): train() draws its
    curves during the run (after steps 2 and 4) in a child that never imports the script,
    so no BrokenProcessPool, the script runs once, and curves.png is drawn."""
    script = tmp_path / "plain.py"
    script.write_text(PLAIN_SCRIPT.format(model=str(REPO / "tests/fixtures/digits_cnn.tflite")))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "trained 6" in result.stdout
    assert (tmp_path / "ran.txt").read_text() == "ran\n"
    assert (tmp_path / "run" / "curves.png").stat().st_size > 0


def test_the_curve_drawer_draws_and_hands_back_its_failure(tmp_path):
    """host/curve_drawer.py: a drawing lands in the run directory; one that cannot be
    written (its folder is a file) raises the writer's one-line error in the caller at the
    next wait, and the child goes on."""
    from zocodegen.host.curve_drawer import CurveDrawer
    from zocodegen.training.metrics import MetricsRow
    rows = [MetricsRow(step, 2.0 - 0.1 * step, 0.01) for step in range(1, 6)]
    (tmp_path / "a file").write_text("")
    drawer = CurveDrawer()
    try:
        drawer.submit(rows, tmp_path / "a file", "t")
        with pytest.raises(UserError, match="cannot write"):
            drawer.wait()
        drawer.submit(rows, tmp_path, "t")
    finally:
        drawer.close()
    drawer.wait()
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_every_function_takes_exactly_its_commands_options():
    commands = _subcommands()
    for name in FUNCTIONS:
        assert callable(getattr(zocodegen, name)), name
        dests = {a.dest for a in commands[name]._actions if a.dest != "help"}
        with pytest.raises(TypeError) as unknown:
            api.options(name, {}, {"no_such_option": 1})
        listed = set(re.search(r"its options: (.*)", str(unknown.value)).group(1).split(", "))
        assert listed == dests, name


def test_defaults_and_checks_are_the_command_lines(tmp_path):
    args = api.options("simulate", {"model": "m", "data": "d", "output": tmp_path}, {})
    cli = build_parser().parse_args(["simulate", "m", "--data", "d", "-o", str(tmp_path)])
    assert {k: v for k, v in vars(args).items() if k != "output"} == \
        {k: v for k, v in vars(cli).items() if k not in ("output", "command")}
    with pytest.raises(UserError, match="queries: must be in 1..65536, got 0"):
        zocodegen.simulate("m", "d", tmp_path, queries=0)
    with pytest.raises(UserError, match="train: choose one of full, sparse, auto"):
        zocodegen.simulate("m", "d", tmp_path, train="half")
    with pytest.raises(TypeError, match="missing required option"):
        zocodegen.build("m")
    with pytest.raises(TypeError, match="exactly one of port, native, qemu, emulated"):
        zocodegen.train("image", tmp_path)


def test_results_are_objects(tmp_path):
    model = REPO / "tests" / "fixtures" / "digits_cnn.tflite"
    found = zocodegen.inspect(model, target="stm32f746")
    assert found.target.name == "stm32f746" and found.summary.as_dict()["layers"]
    built = zocodegen.build(model, target="native", output=tmp_path / "fw", train="full",
                            steps=4, queries=2)
    assert built.project == tmp_path / "fw" and built.plan.options.train.steps == 4
    assert (built.project / "manifest.json").is_file()


def test_the_api_documentation_lists_every_option():
    """docs/api.md's option table is api.option_table() (regenerate it with
    `python -m zocodegen.api`), so it names what `zocodegen COMMAND --help` names."""
    doc = (REPO / "docs" / "api.md").read_text()
    assert api.option_table() in doc
    commands = _subcommands()
    for name in FUNCTIONS:
        for action in commands[name]._actions:
            if action.dest != "help" and action.help != argparse.SUPPRESS:  # (old spellings)
                assert f"`{action.dest}`" in api.option_table(), (name, action.dest)


def _hook(path: Path):
    """A --preprocess hook given as a function: every file is a blank 8x8x1 input."""
    import numpy as np
    return np.zeros((8, 8, 1), np.float32)


#: Issue 47 #19: arguments of the wrong Python type raise one clear exception naming the
#: argument (TypeError), never an AttributeError deep inside, a file name made of an array's
#: text, or a "no" read as True.
WRONG_TYPES = [
    ("build layers as a list", lambda t: zocodegen.build(
        "m.tflite", target="native", output=t / "fw", layers=[0, 1]), "option layers"),
    ("inspect bytes", lambda t: zocodegen.inspect(b"\x1cTFL3 not a path"), "option model"),
    ("simulate data as an array", lambda t: zocodegen.simulate(
        "m.tflite", __import__("numpy").zeros((2, 8, 8, 1)), t / "run"), "option data"),
    ("no_guard as text", lambda t: zocodegen.simulate(
        "m.tflite", "d.npz", t / "run", no_guard="no"), "option no_guard takes True or False"),
    ("steps as a bool", lambda t: zocodegen.simulate(
        "m.tflite", "d.npz", t / "run", steps=True), "option steps"),
    ("preprocess as a list", lambda t: zocodegen.pack(
        "pics", t / "p.img", model="m.tflite", preprocess=["f"]), "or a function"),
]


@pytest.mark.parametrize("name, call, words", WRONG_TYPES, ids=[w[0] for w in WRONG_TYPES])
def test_arguments_of_the_wrong_type_name_the_argument(tmp_path, name, call, words):
    with pytest.raises(TypeError, match=words):
        call(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_pack_takes_a_function_as_its_hook(tmp_path):
    """Issue 47 #19: `pack(preprocess=function)`, the API's form of --preprocess."""
    from PIL import Image
    for c in ("a", "b"):
        (tmp_path / "pics" / c).mkdir(parents=True)
        Image.new("L", (8, 8)).save(tmp_path / "pics" / c / "0.png")
    packed = zocodegen.pack(tmp_path / "pics", tmp_path / "p.img", preprocess=_hook,
                            model=REPO / "tests" / "fixtures" / "digits_cnn.tflite",
                            val_fraction=0)
    assert packed.layout.preprocess == "hook test_api:_hook"
    assert packed.layout.class_names == ("a", "b")


def test_export_of_a_run_without_a_guard_has_no_best_step(tmp_path):
    """Issue 64 item 6: a run without the guard has no best; ExportResult.best_step is None,
    not the checkpoint's 0xFFFFFFFF marker (4294967295)."""
    from zocodegen.datasets import digits_npz
    from zocodegen.frontends import load_model
    model = REPO / "tests" / "fixtures" / "digits_cnn.tflite"
    graph = load_model(model)
    digits_npz(tmp_path / "d.npz", graph.tensor(graph.inputs[0]).quant)
    zocodegen.simulate(model, tmp_path / "d.npz", tmp_path / "run", steps=2, queries=2,
                       no_guard=True, lr=0.01)
    result = zocodegen.export(model, tmp_path / "run" / "checkpoint.bin", tmp_path / "t.tflite")
    assert result.best_step is None and result.step == 2


def test_a_drawing_under_way_does_not_hold_the_host(tmp_path):
    """The host asked the drawer to wait for the last drawing before the next (0.1-1 s):
    the device, silent for more than 100 ms, retransmitted at every checkpoint of a fast
    model (micro_speech natively: 11 retransmissions in 32 steps). ``idle`` never blocks."""
    import time

    from zocodegen.host.curve_drawer import CurveDrawer
    from zocodegen.training.metrics import MetricsRow
    rows = [MetricsRow(step, 2.0 - 0.1 * step, 0.01) for step in range(1, 6)]
    drawer = CurveDrawer()
    try:
        drawer.submit(rows, tmp_path, "t")  # the child first imports matplotlib: busy
        start = time.monotonic()
        assert not drawer.idle()
        assert time.monotonic() - start < 0.05
        drawer.wait()
        assert drawer.idle()
    finally:
        drawer.close()
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_ctrl_c_leaves_the_curve_drawer_to_its_parent(tmp_path):
    """Ctrl-C during `train` reached the drawing child too (the terminal signals its
    foreground process group): it died printing a KeyboardInterrupt traceback under the
    parent's "zocodegen: interrupted". The child has a process group of its own and ends
    when the parent closes its stdin."""
    import os

    from zocodegen.host.curve_drawer import CurveDrawer
    from zocodegen.training.metrics import MetricsRow
    drawer = CurveDrawer()
    try:
        assert os.getpgid(drawer._child.pid) != os.getpgid(0)
        drawer.submit([MetricsRow(1, 1.0, 0.01), MetricsRow(2, 0.9, 0.01)], tmp_path, "t")
        drawer.wait()
    finally:
        drawer.close()
    assert drawer._child.returncode == 0
    assert (tmp_path / "curves.png").stat().st_size > 0
