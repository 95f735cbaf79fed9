"""Memory planner: arena plans on every model and on hand-built graphs, placement in the
targets' memories with the budget refusal, and the report."""
from __future__ import annotations

import dataclasses
import json
from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import FIXTURE_ONNX, all_tflite_models, resolve
from zocodegen.errors import UserError
from zocodegen.frontends import load_model
from zocodegen.ir import Graph, Op, Tensor
from zocodegen.planner import (BudgetError, Buffer, PlanError, RamItem, greedy_by_size,
                               live_peak, place, plan_arena, plan_problems, planner_regions,
                               report_dict, report_text, target_memories, verify)
from zocodegen.planner.arena import exhaustive_optimum

F746_BUDGET = 256 * 1024
H7B3_BUDGET = 1024 * 1024


# ---------------------------------------------------------------- hand-built graphs

def _t(name: str, shape: tuple[int, ...], dtype=np.int8, const: bool = False) -> Tensor:
    data = np.zeros(shape, dtype) if const else None
    return Tensor(name, tuple(shape), np.dtype(dtype), data=data)


def _graph(tensors: list[Tensor], ops: list[tuple], inputs: list[str],
           outputs: list[str]) -> Graph:
    """ops: (type, name, inputs, outputs); options do not matter to the planner."""
    return Graph(name="hand", source_format="tflite", tensors={t.name: t for t in tensors},
                 ops=[Op(t, n, tuple(i), tuple(o)) for t, n, i, o in ops],
                 inputs=inputs, outputs=outputs)


def _chain(sizes: list[int], op_type: str = "FULLY_CONNECTED") -> Graph:
    """t0 -> op0 -> t1 -> op1 -> ... with 1-D int8 tensors of the given sizes."""
    tensors = [_t(f"t{i}", (s,)) for i, s in enumerate(sizes)]
    ops = [(op_type, f"op{i}", [f"t{i}"], [f"t{i + 1}"]) for i in range(len(sizes) - 1)]
    return _graph(tensors, ops, ["t0"], [f"t{len(sizes) - 1}"])


def _check(graph: Graph, plan) -> None:
    verify(graph, plan)
    assert plan.lower_bound <= plan.arena_bytes <= plan.greedy_by_size_bytes
    assert plan.arena_bytes <= plan.sum_of_activations


def test_reshape_output_is_a_view_of_its_input():
    g = _graph([_t("x", (1, 8)), _t("a", (1, 2, 2, 4)), _t("b", (1, 16)), _t("c", (16,)),
                _t("y", (1, 4))],
               [("CONV_2D", "conv", ["x"], ["a"]), ("RESHAPE", "flatten", ["a"], ["b"]),
                ("RESHAPE", "squeeze", ["b"], ["c"]), ("FULLY_CONNECTED", "fc", ["c"], ["y"])],
               ["x"], ["y"])
    plan = plan_arena(g)
    _check(g, plan)
    assert plan.offsets["a"] == plan.offsets["b"] == plan.offsets["c"]
    assert plan.buffer_of("c").tensors == ("a", "b", "c")
    assert plan.buffer_of("a").first == 0 and plan.buffer_of("a").last == 3
    assert set(plan.in_place_ops) == {"flatten", "squeeze"}
    # the view costs nothing: the arena is the heaviest op (conv: 8 + 16, fc: 16 + 4)
    assert plan.arena_bytes == plan.lower_bound == 24


def test_in_place_add_when_an_input_dies_there():
    g = _graph([_t("x", (1, 4, 4, 2)), _t("a", (1, 4, 4, 2)), _t("b", (1, 4, 4, 2)),
                _t("s", (1, 4, 4, 2)), _t("y", (1, 2))],
               [("CONV_2D", "c1", ["x"], ["a"]), ("CONV_2D", "c2", ["x"], ["b"]),
                ("ADD", "add", ["a", "b"], ["s"]), ("FULLY_CONNECTED", "fc", ["s"], ["y"])],
               ["x"], ["y"])
    plan = plan_arena(g)
    _check(g, plan)
    assert "add" in plan.in_place_ops
    assert plan.offsets["s"] in (plan.offsets["a"], plan.offsets["b"])
    assert plan.arena_bytes == 3 * 32  # x, a, b at c2; the sum needs no fourth buffer


def test_no_in_place_add_when_inputs_live_on():
    g = _graph([_t("x", (1, 32)), _t("a", (1, 32)), _t("b", (1, 32)), _t("s", (1, 32)),
                _t("y", (1, 32))],
               [("FULLY_CONNECTED", "fa", ["x"], ["a"]), ("FULLY_CONNECTED", "fb", ["x"], ["b"]),
                ("ADD", "add", ["a", "b"], ["s"]), ("CONCATENATION", "cat", ["s", "a", "b"], ["y"])],
               ["x"], ["y"])
    plan = plan_arena(g)
    _check(g, plan)
    assert "add" not in plan.in_place_ops
    assert len({plan.offsets[n] for n in ("a", "b", "s")}) == 3


def test_in_place_add_overwrites_only_the_input_that_dies():
    g = _graph([_t("x", (1, 32)), _t("a", (1, 32)), _t("b", (1, 32)), _t("s", (1, 32)),
                _t("y", (1, 64))],
               [("FULLY_CONNECTED", "fa", ["x"], ["a"]), ("FULLY_CONNECTED", "fb", ["x"], ["b"]),
                ("ADD", "add", ["a", "b"], ["s"]), ("CONCATENATION", "cat", ["s", "b"], ["y"])],
               ["x"], ["y"])
    plan = plan_arena(g)
    _check(g, plan)
    assert "add" in plan.in_place_ops and plan.offsets["s"] == plan.offsets["a"]


def test_broadcast_add_and_float_quantize_are_not_in_place():
    g = _graph([_t("x", (1, 8), np.float32), _t("q", (1, 8)), _t("k", (1, 1), const=True),
                _t("s", (1, 8)), _t("r", (1, 8)), _t("y", (1, 8))],
               [("QUANTIZE", "quant", ["x"], ["q"]), ("ADD", "bias", ["q", "k"], ["s"]),
                ("QUANTIZE", "requant", ["s"], ["r"]), ("SOFTMAX", "softmax", ["r"], ["y"])],
               ["x"], ["y"])
    plan = plan_arena(g)
    _check(g, plan)
    assert plan.in_place_ops == ("requant", "softmax")
    assert plan.offsets["s"] == plan.offsets["r"] == plan.offsets["y"] != plan.offsets["q"]


def test_graph_inputs_are_never_overwritten():
    g = _graph([_t("x1", (64,)), _t("x2", (64,)), _t("s", (64,)), _t("y", (64,))],
               [("ADD", "add", ["x1", "x2"], ["s"]), ("SOFTMAX", "softmax", ["s"], ["y"])],
               ["x1", "x2"], ["y"])
    plan = plan_arena(g)
    _check(g, plan)
    assert plan.in_place_ops == ("softmax",)
    assert plan.offsets["s"] not in (plan.offsets["x1"], plan.offsets["x2"])
    g2 = _graph([_t("x", (16,)), _t("y", (16,))], [("SOFTMAX", "sm", ["x"], ["y"])], ["x"], ["y"])
    plan2 = plan_arena(g2)
    _check(g2, plan2)
    assert plan2.in_place_ops == () and plan2.arena_bytes == 32


def test_keep_alive_blocks_in_place_and_extends_lifetime():
    g = _chain([16, 16, 16, 16], "SOFTMAX")
    assert plan_arena(g).arena_bytes == 32  # t1 -> t2 -> t3 in place over one buffer
    plan = plan_arena(g, keep_alive=frozenset({"t1"}))
    _check(g, plan)
    assert plan.keep_alive == {"t1"} and plan.lifetimes["t1"] == (0, 2)
    # t2 may not overwrite t1 any more, but t3 still overwrites t2; t0 + t1 stays the peak
    assert plan.offsets["t2"] != plan.offsets["t1"] and plan.in_place_ops == ("op2",)
    assert plan.arena_bytes == plan.lower_bound == 32
    with pytest.raises(ValueError):
        plan_arena(g, keep_alive=frozenset({"nope"}))


def test_planner_reaches_the_exact_optimum_where_greedy_by_size_does_not():
    # A chain 24 -> 20 -> 8 -> 32 bytes. Greedy-by-size puts 32 and then 24 at offset 0,
    # pushing 20 to 24 and 8 to 44: 52 bytes. The optimum is the lower bound, 24 + 20 = 44:
    # t0 @0, t1 @24, t2 @0, t3 @8.
    g = _chain([24, 20, 8, 32])
    plan = plan_arena(g)
    _check(g, plan)
    assert plan.greedy_by_size_bytes == 52
    assert plan.arena_bytes == plan.lower_bound == 44
    assert exhaustive_optimum(plan.buffers) == 44


def test_reported_arena_is_what_the_linker_reserves():
    """An arena that is not a multiple of 8 B (44 here) is reported as the 48 B that
    .zo_arena reserves (MODEL_ARENA_STORAGE_BYTES: the next object is placed 8-aligned), so
    the report and arm-none-eabi-size agree (tests/test_build.py links the real models)."""
    from zocodegen.codegen.project import _inference_items
    from zocodegen.target import load_target
    plan = plan_arena(_chain([24, 20, 8, 32]))
    assert plan.arena_bytes == 44
    assert _inference_items(plan, load_target("stm32f746"))[0].bytes == 48


def test_greedy_by_size_baseline():
    buffers = [Buffer(("a",), 32, 0, 0), Buffer(("b",), 24, 0, 1), Buffer(("c",), 24, 1, 2),
               Buffer(("d",), 8, 2, 2)]
    offsets = greedy_by_size(buffers)
    # size order a, b (tie with c: earlier start), c, d; lowest non-overlapping offsets
    assert offsets == {"a": 0, "b": 32, "c": 0, "d": 24}
    assert live_peak(buffers) == 56


def test_verify_rejects_overlapping_live_tensors():
    g = _chain([16, 16, 16])
    plan = plan_arena(g)
    bad = dataclasses.replace(plan, offsets=MappingProxyType({n: 0 for n in plan.offsets}))
    problems = plan_problems(g, bad)
    assert any("writes t1 over its input t0" in p for p in problems)
    with pytest.raises(PlanError):
        verify(g, bad)
    short = dataclasses.replace(plan, arena_bytes=plan.arena_bytes - 4)
    assert any("exceed the arena" in p for p in plan_problems(g, short))


@st.composite
def _random_graphs(draw):
    """Small DAGs: every op reads one or two earlier tensors, some ops may run in place."""
    count = draw(st.integers(2, 6))
    sizes = draw(st.lists(st.sampled_from([4, 8, 12, 16, 24, 32]), min_size=count,
                          max_size=count))
    tensors, ops = [_t("t0", (sizes[0],))], []
    for i in range(1, count):
        srcs = sorted(set(draw(st.lists(st.integers(0, i - 1), min_size=1, max_size=2))))
        kind = draw(st.sampled_from(["CONCATENATION", "ADD", "RESHAPE", "SOFTMAX"]))
        shape = (sizes[i],)
        if kind == "ADD":
            shape = (sizes[srcs[0]],)
            srcs = [srcs[0], srcs[-1]] if sizes[srcs[-1]] == sizes[srcs[0]] else [srcs[0]]
        elif kind in ("RESHAPE", "SOFTMAX"):
            srcs, shape = srcs[:1], (sizes[srcs[0]],)
        tensors.append(_t(f"t{i}", shape))
        ops.append((kind, f"op{i - 1}", [f"t{j}" for j in srcs], [f"t{i}"]))
    outs = [f"t{count - 1}"] + draw(st.lists(st.sampled_from([t.name for t in tensors]),
                                             max_size=1))
    keep = frozenset(draw(st.lists(st.sampled_from([t.name for t in tensors]), max_size=2)))
    return _graph(tensors, ops, ["t0"], list(dict.fromkeys(outs))), keep


@settings(max_examples=150, deadline=None)
@given(case=_random_graphs())
def test_random_graphs_give_sound_plans(case):
    g, keep = case
    plan = plan_arena(g, keep_alive=keep)
    _check(g, plan)
    assert plan.arena_bytes >= exhaustive_optimum(plan.buffers)


# ---------------------------------------------------------------- every model

def _models() -> list:
    return all_tflite_models() + [pytest.param(("fixture", n), id=n) for n in FIXTURE_ONNX]


@pytest.fixture(scope="module")
def loaded():
    cache = {}

    def get(spec):
        if spec not in cache:
            cache[spec] = load_model(resolve(spec))
        return cache[spec]
    return get


@pytest.mark.parametrize("spec", _models())
def test_plan_on_every_model(spec, loaded):
    g = loaded(spec)
    plan = plan_arena(g)
    _check(g, plan)
    acts = [n for n, t in g.tensors.items() if t.data is None]
    assert set(plan.offsets) == set(acts)
    for name in acts:
        assert plan.offsets[name] + g.tensors[name].nbytes <= plan.arena_bytes
        assert plan.offsets[name] % plan.alignment == 0
    for buf in plan.buffers:
        assert buf.offset + buf.size <= plan.arena_bytes
    assert plan.sum_of_activations >= sum(g.tensors[n].nbytes for n in acts)
    with pytest.raises(TypeError):
        plan.offsets["x"] = 0  # read-only

    pinned = plan_arena(g, keep_alive=frozenset(g.tensors))
    verify(g, pinned)
    assert all(g.ops[[o.name for o in g.ops].index(n)].type == "RESHAPE"
               for n in pinned.in_place_ops)  # views only: nothing is overwritten
    assert pinned.arena_bytes >= plan.arena_bytes


def test_shared_models_reach_the_lower_bound(loaded):
    spec = ("shared", "kws_ref_model.tflite")
    plan = plan_arena(loaded(spec))
    assert plan.arena_bytes == plan.lower_bound
    assert "softmax_0" in plan.in_place_ops and "reshape_0" in plan.in_place_ops


def test_alignment_is_honoured(loaded):
    g = loaded(("fixture", "multi_op.tflite"))
    plan = plan_arena(g, alignment=16)
    _check(g, plan)
    assert all(o % 16 == 0 for o in plan.offsets.values()) and plan.arena_bytes % 16 == 0


# ---------------------------------------------------------------- placement

def _items(arena: int) -> list[RamItem]:
    return [RamItem("arena", arena, "inference activations"), RamItem("stack", 8192, "call stack")]


def test_target_regions():
    regions = planner_regions(target_memories("stm32f746"))
    assert [(r.name, r.origin, r.capacity) for r in regions] == [
        ("DTCM+SRAM1", 0x20000000, (64 + 240) * 1024)]
    regions = planner_regions(target_memories("stm32h7b3"))
    assert [(r.name, r.capacity) for r in regions] == [("AXI_SRAM", 1024 * 1024)]
    with pytest.raises(UserError):
        target_memories("esp32")


def test_kws_fits_stm32f746(loaded):
    plan = plan_arena(loaded(("shared", "kws_ref_model.tflite")))
    placement = place(_items(plan.arena_bytes), "stm32f746", F746_BUDGET)
    assert placement.fits and placement.total <= F746_BUDGET
    (region,) = placement.regions
    assert [p.item.name for p in region.items] == ["arena", "stack"]
    assert region.items[0].address == 0x20000000 and region.items[1].offset % 8 == 0
    assert region.peak == region.items[1].offset + 8192
    assert region.usage_by_memory()[0][0] == "DTCM"


def test_300kb_arena_is_refused_on_stm32f746_and_fits_stm32h7b3():
    items = _items(300 * 1024)
    with pytest.raises(BudgetError) as info:
        place(items, "stm32f746", F746_BUDGET)
    message = str(info.value)
    assert isinstance(info.value, UserError) and "\n" not in message
    assert "arena 300.0 KB" in message and "256.0 KB" in message
    assert "stm32h7b3" in message and "smaller input resolution" in message
    assert "over" in message
    placement = place(items, "stm32h7b3", H7B3_BUDGET)
    assert placement.fits and placement.regions[0].items[0].address == 0x24000000
    assert not place(items, "stm32f746", F746_BUDGET, strict=False).fits


def test_refusal_says_what_fits_and_passes_suggestions_through():
    items = _items(200 * 1024) + [RamItem("trainable parameters", 60 * 1024, "int8 copies")]
    tips = ["sparse mode (--train sparse)", "fewer trainable layers (--layers)"]
    with pytest.raises(BudgetError) as info:
        place(items, "stm32f746", F746_BUDGET, suggestions=tips)
    message = str(info.value)
    assert "Arena + stack fit (208.0 KB)" in message
    assert "trainable parameters 60.0 KB" in message and "--train sparse" in message
    with pytest.raises(BudgetError, match="arena alone fits"):
        place([RamItem("arena", 250 * 1024), RamItem("gradient buffer", 10 * 1024)],
              "stm32f746", F746_BUDGET)


def test_item_larger_than_any_region_is_refused():
    with pytest.raises(BudgetError, match="fits in no memory region"):
        place([RamItem("arena", 400 * 1024)], "stm32f746", 2 * 1024 * 1024)


def test_native_has_no_regions_but_a_budget():
    placement = place(_items(1000), None, F746_BUDGET)
    assert placement.regions == () and placement.fits and placement.total == 1000 + 8192
    with pytest.raises(BudgetError, match="256.0 KB"):
        place(_items(300 * 1024), None, F746_BUDGET)


# ---------------------------------------------------------------- report

def test_report(loaded):
    g = loaded(("fixture", "mcunet_tiny.tflite"))
    plan = plan_arena(g)
    placement = place(_items(plan.arena_bytes), "stm32f746", F746_BUDGET)
    data = report_dict(g, plan, placement, flash={"weights": 1234})
    json.dumps(data)
    assert data["arena"]["bytes"] == plan.arena_bytes
    assert data["arena"]["ratio_to_lower_bound"] == 1.0
    assert data["sram"]["regions"][0]["name"] == "DTCM+SRAM1"
    assert len(data["arena"]["buffers"]) == len(plan.buffers)
    text = report_text(g, plan, placement, flash={"weights": 1234})
    for needle in ("x lower bound", "greedy-by-size", "sum of activations", "DTCM+SRAM1",
                   "largest buffers", "flash", "strategy"):
        assert needle in text
    assert "conv_2d" in text  # lifetimes are shown as op names
