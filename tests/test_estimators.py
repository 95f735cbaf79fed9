"""The estimator registry (zocodegen/training/estimators/): every row is consistent with the
engine's C files, and every estimator with firmware passes the chain simulator == native by
being registered (docs/training.md "Adding an estimator")."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from test_training import _check_against_simulator
from zocodegen.projects import generate
from zocodegen.codegen.project import BuildOptions
from zocodegen.errors import UserError
from zocodegen.training.config import TrainConfig
from zocodegen.training.estimators import (BY_WIRE_CODE, ENGINE_SOURCES, NAMES, REGISTRY,
                                           engine_sources)
from zocodegen.training.estimators.base import CORE_SOURCES

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "templates" / "train"
FIRMWARE = [pytest.param(e.name, id=e.name) for e in REGISTRY.values() if e.firmware]
pytestmark = pytest.mark.usefixtures("module_build_cache")


def test_rows_are_consistent_with_the_engine_files():
    assert len(BY_WIRE_CODE) == len(NAMES), "wire codes repeat"
    assert list(NAMES) == sorted(NAMES, key=lambda n: REGISTRY[n].wire_code)
    on_disk = {p.name for p in TRAIN.glob("zo_*.c")}
    assert ENGINE_SOURCES | set(CORE_SOURCES) <= on_disk
    # every per-estimator file of the engine belongs to some row (or --bp-layers)
    assert {n for n in on_disk if n.startswith("zo_estimate_")} <= ENGINE_SOURCES
    listed = set(re.findall(r"\*\s+(zo_\w+\.c)\s", (TRAIN / "zo_train_engine.h").read_text()))
    assert ENGINE_SOURCES | set(CORE_SOURCES) <= listed, "zo_train_engine.h's file list"


def _c_functions(path: Path) -> tuple[set[str], set[str]]:
    """(the functions a C file defines with external linkage, the names it calls), its
    comments left out."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", path.read_text(), flags=re.S)
    defined = set(re.findall(r"^(?!static\b)[A-Za-z_][\w \t*]*?\b(\w+)\s*\([^;{}]*\)\s*\{",
                             text, flags=re.M))
    return defined, set(re.findall(r"\b(\w+)\s*\(", text)) - defined


def test_the_engines_calls_point_downward():
    """No estimator file calls a function another one defines (their shared parts are below
    them, zo_step_parts.c), and zo_train.c is called back only through zo_train.h."""
    estimators = {p.name: _c_functions(p) for p in sorted(TRAIN.glob("zo_estimate_*.c"))}
    assert len(estimators) >= 6 and all(defined for defined, _ in estimators.values())
    for name, (_, calls) in estimators.items():
        for other, (defined, _) in estimators.items():
            assert other == name or not calls & defined, f"{name} calls {other}"
    step, _ = _c_functions(TRAIN / "zo_train.c")
    public = set(re.findall(r"\b(zo_\w+)\s*\(", (TRAIN / "zo_train.h").read_text()))
    for path in sorted(TRAIN.glob("zo_*.c")):
        if path.name != "zo_train.c":
            assert _c_functions(path)[1] & step <= public, f"{path.name} calls zo_train.c"


@pytest.mark.parametrize("owner", [n for n in NAMES if REGISTRY[n].options])
def test_another_estimators_option_is_refused_not_ignored(owner):
    """Each option a row declares is read only by its estimator: set for another one, the
    run is refused with the owner named; left at its default, nothing is said."""
    other = next(n for n in NAMES if n != owner and not REGISTRY[n].options)
    defaults = TrainConfig()
    for option in REGISTRY[owner].option_names:
        changed = 3 if option != "p_zero" else 0.5
        assert getattr(defaults, option) != changed
        with pytest.raises(UserError, match=f"--{option.replace('_', '-')} is an option of "
                                            f"--estimator {owner}"):
            TrainConfig(estimator=other, **{option: changed})
    TrainConfig(estimator=other)  # the defaults pass


def test_an_estimators_options_are_its_own_dataclass_with_trainconfigs_defaults():
    """The row's options dataclass and TrainConfig agree on names and defaults, and the
    dataclass checks the ranges (a bad value is refused by the owner's options)."""
    defaults = TrainConfig()
    for name in NAMES:
        row = REGISTRY[name]
        if row.options is None:
            continue
        own = row.options()
        assert {n: getattr(own, n) for n in row.option_names} == {
            n: getattr(defaults, n) for n in row.option_names}
        assert row.options_of(TrainConfig(estimator=name)) == own
    with pytest.raises(UserError, match="--r-max must be in 1..127"):
        TrainConfig(estimator="int8", r_max=200)
    with pytest.raises(UserError, match="--inner-queries must be in 1..64"):
        TrainConfig(estimator="split", inner_queries=65)


def test_the_simulated_step_is_the_rows():
    """The simulator calls the step its row names: MeZO and split their own, the rest the
    layer-wise one; every named step exists."""
    from zocodegen.training.steps import STEPS
    assert {REGISTRY[n].step for n in NAMES} == set(STEPS)
    own = {n for n in NAMES if REGISTRY[n].step != "layerwise"}
    assert own == {"mezo", "split"}


@pytest.mark.parametrize("name", NAMES)
def test_a_build_renders_exactly_its_estimators_files(name, tmp_path):
    config = TrainConfig(steps=4, queries=2, estimator=name)
    model = REPO / "tests" / "fixtures" / "digits_cnn.tflite"
    if not REGISTRY[name].firmware:
        with pytest.raises(UserError, match="no firmware"):
            generate(model, BuildOptions(target="native", train=config), tmp_path)
        return
    generate(model, BuildOptions(target="native", train=config), tmp_path)
    rendered = {p.name for p in (tmp_path / "src" / "train").glob("*.c")} & (
        ENGINE_SOURCES | set(CORE_SOURCES))
    assert rendered == engine_sources(name, backprop=False)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
@pytest.mark.parametrize("name", FIRMWARE)
def test_every_registered_estimator_equals_the_simulator_natively(name, tmp_path):
    """Three steps on the digits CNN: the native firmware's checkpoint is the simulator's."""
    config = TrainConfig(steps=10, queries=4, lr=0.1, estimator=name)
    _check_against_simulator("fixture:digits_cnn.tflite", "native", 3, tmp_path, config)


def test_channel_estimators_refuse_a_layer_without_biases():
    """CH trains per-channel biases: a trainable layer with none is named, not crashed on."""
    from dataclasses import replace as dc_replace
    from zocodegen.frontends import load_model
    from zocodegen.training.plan import training_plans, trainable_ops
    graph = load_model(REPO / "tests" / "fixtures" / "digits_cnn.tflite")
    first = trainable_ops(graph)[0]
    op = graph.ops[first]
    graph.ops[first] = dc_replace(op, inputs=(op.inputs[0], op.inputs[1], ""))
    for name in ("channel", "np-channel"):
        with pytest.raises(UserError, match="trainable layer 0's per-channel biases"):
            training_plans(graph, TrainConfig(estimator=name))
