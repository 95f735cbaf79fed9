"""The grid experiment's driver (``benchmarks/experiment.py``) without running the grid.

The one-hour grid is only worth running if its bookkeeping is right: which runs it makes,
how it spells the CLI, when a cached run counts as finished, how results are read from the
engine's run.json / metrics.csv, and what ends up in docs/experiment.md. Fake run folders
check all of that; one real two-step CLI run checks the command line against the engine.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO

pytest.importorskip("sklearn", reason="the digits data comes from scikit-learn's bundled copy "
                                      "(pip install scikit-learn)")


@pytest.fixture(scope="module")
def ex():
    """benchmarks/experiment.py, the runner; importing it puts benchmarks/ on sys.path for
    its siblings (the ``eg``, ``rep`` and ``plots`` fixtures)."""
    spec = importlib.util.spec_from_file_location("experiment", REPO / "benchmarks" /
                                                  "experiment.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["experiment"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["experiment"]


@pytest.fixture(scope="module")
def eg(ex):
    """benchmarks/experiment_grid.py: what the grid runs."""
    return sys.modules["experiment_grid"]


@pytest.fixture(scope="module")
def rep(ex):
    """benchmarks/experiment_report.py: its tables."""
    return sys.modules["experiment_report"]


@pytest.fixture(scope="module")
def plots(ex):
    """benchmarks/experiment_plots.py: its curves."""
    return sys.modules["experiment_plots"]


METRICS = ("step,loss,lr,accuracy,val_accuracy,event\n"
           "0,nan,0,0.500000,,\n"
           "10,1.0,0.01,0.600000,0.550000,best\n"
           "20,1.2,0.01,,0.400000,rollback\n"
           "30,0.9,0.005,0.700000,,\n"
           "31,0.8,0.005,,,restore\n")


def fake_run(directory: Path, before: float, after: float | None, engine_after: bool = True,
             seconds: float | None = None) -> None:
    """A run folder as the engine leaves it (``engine_after``: run.json has accuracy_after;
    else only this script's result.json has it), with ``METRICS`` as its metrics.csv."""
    directory.mkdir(parents=True, exist_ok=True)
    info = {"accuracy_before": before}
    if engine_after:
        info["accuracy_after"] = after
    (directory / "run.json").write_text(json.dumps(info))
    (directory / "metrics.csv").write_text(METRICS)
    if seconds is not None:
        (directory / "result.json").write_text(json.dumps(
            {"seconds": seconds, "accuracy_after": None if engine_after else after}))


def test_full_grid_runs_and_commands(ex, eg, tmp_path):
    runs = eg.grid_runs(eg.FULL)
    # 2 models x 8 cells x 3 seeds x {ours, MeZO, hybrid C=1, C=2, C=1 equal forwards, INT8,
    # pool, rotating, uniform, pool + uniform, two-sided} + 2 models x 2 severities x 3 seeds
    # x 8 ablations + 2 models x 8 cells x seeds 4-6 x {ours, hybrid C=1} (seed noise).
    assert len(runs) == len(set(runs)) == 2 * 8 * 3 * 11 + 2 * 2 * 3 * 8 + 2 * 8 * 3 * 2
    assert {(r.method, r.seed) for r in runs if r.seed > 3} == {
        (m, s) for m in ("ours", "hybrid-1") for s in (4, 5, 6)}
    assert {r.method for r in runs[:48]} == {"mezo"}  # the longest runs first
    assert {(r.family, r.method) for r in runs if r.method == "sparse"} == {("blur", "sparse")}
    tuned = eg.Run("digits_resnet", "blur", 2, "tuned-0.03", 3)
    cmd = ex.command(["zocodegen"], tuned, eg.FULL, tmp_path)
    assert cmd[:3] == ["zocodegen", "simulate", str(REPO / "tests/fixtures/digits_resnet.tflite")]
    assert cmd[3:] == ["--data", str(tmp_path / "data" / "digits_resnet-blur-2.npz"),
                       "-o", str(tuned.directory(tmp_path)), "--force", "--epochs", "1",
                       "--queries",
                       str(eg.QUERIES), "--seed", "3", "--lr", "0.03", "--no-guard"]
    options = {m.key: m.options for m in eg.METHODS.values()}
    assert options["ours"] == ()  # the defaults: --lr auto and the guard
    assert options["mezo"] == ("--estimator", "mezo")
    assert options["no-quant"] == ("--no-quant-scaling",)
    assert options["sparse"] == ("--train", "sparse")
    assert options["hybrid-1"] == ("--bp-layers", "1")
    assert options["hybrid-2"] == ("--bp-layers", "2")
    assert options["pool"] == ("--perturbation", "pool:4095")
    two_sided = eg.Run("digits_cnn", "fog", 1, "two-sided", 1)
    assert ex.command(["zocodegen"], two_sided, eg.FULL, tmp_path)[-3:] == [
        "--two-sided", "--queries", str(eg.QUERIES // 2)]
    assert {(r.family, r.severity) for r in runs if r.method == "hybrid-2"} == set(eg.FULL.cells)
    hybrid = eg.Run("digits_cnn", "fog", 1, "hybrid-1", 2)
    assert ex.command(["zocodegen"], hybrid, eg.FULL, tmp_path)[-4:] == [
        "--seed", "2", "--bp-layers", "1"]  # the same budget as ours, plus the option
    # equal forwards: digits_cnn has L = 4 trainable layers, so the ZO layers of C = 1 get
    # Q 4 / 3 queries; INT8's two-sided queries are two forwards each: Q / 2
    equal = eg.Run("digits_cnn", "fog", 1, "hybrid-1-eq", 1)
    assert ex.command(["zocodegen"], equal, eg.FULL, tmp_path)[-4:] == [
        "--bp-layers", "1", "--queries", str(eg.QUERIES * 4 // 3)]
    int8 = eg.Run("digits_resnet", "fog", 1, "int8", 1)
    assert ex.command(["zocodegen"], int8, eg.FULL, tmp_path)[-4:] == [
        "--estimator", "int8", "--queries", str(eg.QUERIES // 2)]
    # the cache folder names the budget and the default estimator every method builds on
    assert eg.FULL.tag == f"epochs-1-q{eg.QUERIES}-np-channel" and eg.QUICK.tag != eg.FULL.tag


def test_results_and_cache(ex, eg, tmp_path):
    assert ex.read_result(tmp_path / "missing") is None
    fake_run(tmp_path / "a", 0.5, 0.75, seconds=12.0)
    assert ex.read_result(tmp_path / "a") == eg.Result(0.5, 0.75, 12.0)
    # An engine without accuracy_after: unfinished until this script records completion...
    fake_run(tmp_path / "b", 0.5, None, engine_after=False)
    assert ex.read_result(tmp_path / "b") is None
    # ...from the last test accuracy of metrics.csv.
    assert ex.last_accuracy(tmp_path / "b" / "metrics.csv") == pytest.approx(0.7)
    fake_run(tmp_path / "c", 0.5, 0.7, engine_after=False, seconds=3.0)
    assert ex.read_result(tmp_path / "c") == eg.Result(0.5, 0.7, 3.0)


def test_query_forwards(ex, eg, tmp_path):
    """The forwards come from the CLI's last line (runs cached before result.json had them)
    or from result.json."""
    assert ex.query_forwards(tmp_path / "missing.txt") is None
    fake_run(tmp_path / "a", 0.5, 0.75, seconds=1.0)
    (tmp_path / "a" / "log.txt").write_text(
        "lr trial 0.03: 10 steps\n486 steps at eta 0.01, 0 rollback(s), test accuracy "
        "80.6% -> 94.2%; 38,880 query forwards\n")
    assert ex.query_forwards(tmp_path / "a" / "log.txt") == 38880
    assert ex.read_result(tmp_path / "a") == eg.Result(0.5, 0.75, 1.0, 38880)
    fake_run(tmp_path / "b", 0.5, 0.75)
    (tmp_path / "b" / "result.json").write_text(json.dumps({"seconds": 2.0, "forwards": 960}))
    assert ex.read_result(tmp_path / "b").forwards == 960


def test_curve_and_rollbacks(plots, tmp_path):
    fake_run(tmp_path, 0.5, 0.7)
    c = plots.read_curve(tmp_path / "metrics.csv")
    np.testing.assert_array_equal(c["test_steps"], [0, 10, 30])
    np.testing.assert_allclose(c["test"], [0.5, 0.6, 0.7])
    np.testing.assert_array_equal(c["val_steps"], [10, 20])
    np.testing.assert_array_equal(c["rollback_steps"], [20])
    np.testing.assert_allclose(c["rollback"], [0.4])  # drawn at the check that fell


def test_tables_and_doc(ex, eg, rep, plots, tmp_path):
    grid = eg.Grid(("digits_cnn",), (("blur", 1), ("blur", 2)), (1, 2), "blur",
                   ("--epochs", "1"), 20)
    root = tmp_path / "runs"
    scores = {("ours", 1): 0.80, ("ours", 2): 0.90, ("mezo", 1): 0.70, ("mezo", 2): 0.70,
              ("tuned-0.003", 1): 0.85, ("tuned-0.01", 1): 0.95}
    for severity in (1, 2):
        for (method, seed), acc in scores.items():
            fake_run(eg.Run("digits_cnn", "blur", severity, method, seed).directory(root),
                     0.6, acc - 0.1 * (severity - 1), seconds=10.0)
    results = {run: ex.read_result(run.directory(root)) for run in eg.grid_runs(grid)
               if ex.read_result(run.directory(root))}
    ceilings = {"digits_cnn": {"blur/1": 0.95, "blur/2": 0.93}}
    table = rep.grid_table(grid, results, ceilings)
    std = 100 * np.std([0.8, 0.9], ddof=1)
    assert table[2] == f"| digits_cnn | blur | 1 | 60.0 | 85.0 ± {std:.1f} | 70.0 ± 0.0 | 95.0 |"
    assert table[3].startswith("| digits_cnn | blur | 2 | 60.0 | 75.0 ± ")
    assert table[4] == ("| **digits_cnn** | **mean of 2 cells** | | **60.0** | **80.0** | "
                        "**65.0** | **94.0** |")
    ablation = rep.ablation_table(grid, results, ceilings)
    assert ablation[0] == "| method | digits_cnn sev. 1 | digits_cnn sev. 2 |"
    tuned = next(line for line in ablation if line.startswith("| ours tuned"))
    assert "95.0 (lr 0.01)" in tuned and "85.0 (lr 0.01)" in tuned
    assert "| WP only | — | — |" in ablation  # not run: shown, not invented
    text = rep.report(grid, results, ceilings, 60.0, 2, [str(tmp_path / "curves.png")])
    assert "![curves](curves.png)" in text and "1.0 minutes" in text
    assert ("| ZO only (ours) | hybrid C=1 | hybrid C=2 | hybrid C=1, equal forwards | "
            "ElasticZO-INT8 (Q/2 two-sided) |") in text

    doc = tmp_path / "experiment.md"
    doc.write_text("# Intro\n\n<!-- experiment:start -->\nold digits\n<!-- experiment:end -->\n")
    ex.write_doc(doc, "first")
    ex.write_doc(doc, "second")
    content = doc.read_text()
    assert content.count(eg.MARK_START) == 1 and "first" not in content
    assert "<!-- grid:start -->\nsecond\n<!-- grid:end -->" in content
    assert content.startswith("# Intro\n\n<!-- experiment:start -->\nold digits\n")

    images = plots.plot_curves(grid, root, tmp_path)
    assert [p.name for p in images] == ["experiment_grid_digits_cnn.png"]
    assert images[0].stat().st_size > 1000


def test_one_real_run(ex, eg, tmp_path):
    """The CLI accepts the command the grid spells (two steps, one query: a few seconds)."""
    grid = eg.Grid(("digits_cnn",), (("fog", 1),), (1,), "fog", ("--steps", "2"), 1)
    ex.write_data(grid, tmp_path)
    run = eg.Run("digits_cnn", "fog", 1, "tuned-0.01", 1)
    result, error = ex.execute(ex.default_cli(), run, grid, tmp_path)
    assert error == "" and result is not None, (run.directory(tmp_path) / "log.txt").read_text()
    assert result.before == pytest.approx(0.8806, abs=1e-4)  # tests/fixtures/README.md
    assert 0.0 <= result.after <= 1.0 and result.seconds > 0
    assert ex.read_result(run.directory(tmp_path)) == result  # cached from now on


def test_hybrid_table_and_summary(eg, rep, tmp_path):
    """ZO only against the hybrids per cell, their forwards, and a summary that names every
    cell where a hybrid falls below ZO only."""
    grid = eg.Grid(("digits_cnn",), (("fog", 1), ("fog", 2)), (1, 2), "fog",
                   ("--epochs", "1"), 20)
    scores = {"ours": (0.80, 0.90), "hybrid-1": (0.85, 0.95), "hybrid-2": (0.70, 0.80)}
    results = {}
    for severity, shift in ((1, 0.0), (2, -0.1)):
        for method, accs in scores.items():
            for seed, acc in zip(grid.seeds, accs):
                results[eg.Run("digits_cnn", "fog", severity, method, seed)] = eg.Result(
                    0.6, acc + shift, 10.0, {"ours": 800, "hybrid-1": 600,
                                             "hybrid-2": 400}[method])
    # hybrid-2 ties ours on fog 2 (one seed better, one worse: equal means)
    results[eg.Run("digits_cnn", "fog", 2, "hybrid-2", 1)] = eg.Result(0.6, 0.75, 10.0, 400)
    results[eg.Run("digits_cnn", "fog", 2, "hybrid-2", 2)] = eg.Result(0.6, 0.75, 10.0, 400)
    ceilings = {"digits_cnn": {"fog/1": 0.97, "fog/2": 0.96}}
    table = rep.comparison_table(grid, results, ceilings, eg.HYBRIDS + eg.EQUAL_BUDGET)
    assert table[0] == ("| model | corruption | severity | no adaptation | ZO only (ours) | "
                        "hybrid C=1 | hybrid C=2 | hybrid C=1, equal forwards | "
                        "ElasticZO-INT8 (Q/2 two-sided) | FP32 BP ceiling |")
    std = 100 * np.std([0.8, 0.9], ddof=1)
    assert table[2] == (f"| digits_cnn | fog | 1 | 60.0 | 85.0 ± {std:.1f} | 90.0 ± {std:.1f} "
                        f"| 75.0 ± {std:.1f} | — | — | 97.0 |")  # not run: shown, not invented
    assert table[4] == ("| **digits_cnn** | **mean of 2 cells** | | **60.0** | **80.0** | "
                        "**85.0** | **75.0** | — | — | **96.5** |")
    assert table[5] == ("| digits_cnn | query forwards per run | | 0 | 800 | 600 | 400 | "
                        "— | — | — |")
    diffs = rep.differences(grid, results, "hybrid-2")
    assert [(f, s) for _, f, s, _ in diffs] == [("fog", 1), ("fog", 2)]
    assert diffs[0][3] == pytest.approx(-0.10) and diffs[1][3] == pytest.approx(0.0, abs=1e-12)
    summary = rep.comparison_summary(grid, results, eg.HYBRIDS + eg.EQUAL_BUDGET)
    assert summary[0].startswith("* **hybrid C=1 ≥ ZO only** (mean over the seeds) in **2 of "
                                 "2** cells; difference to ZO only: mean +5.0 points")
    assert "Below" not in summary[0]
    assert "in **1 of 2** cells" in summary[1]
    assert "worst −10.0 (digits_cnn fog 1)" in summary[1]
    assert summary[1].endswith("Below ZO only: digits_cnn fog 1 (−10.0).")
    # A cell with a seed missing is not compared (its mean would be over other seeds).
    del results[eg.Run("digits_cnn", "fog", 1, "hybrid-1", 2)]
    assert [(f, s) for _, f, s, _ in rep.differences(grid, results, "hybrid-1")] == [("fog", 2)]


def test_points(rep):
    assert [rep.points(d) for d in (0.0123, -0.0123, -0.0001, 0.0)] == [
        "+1.2", "−1.2", "+0.0", "+0.0"]


def test_seed_noise(eg, rep):
    """ZO only against itself over two seed sets, then hybrid C = 1 against ZO only over all
    seeds with the standard error of the difference; a cell missing a seed shows no number."""
    grid = eg.Grid(("digits_cnn",), (("fog", 1), ("fog", 2)), (1, 2), "fog",
                   ("--epochs", "1"), 20, (3, 4), ("ours", "hybrid-1"))
    accs = {("ours", 1): (0.80, 0.82, 0.90, 0.84), ("hybrid-1", 1): (0.90, 0.90, 0.92, 0.92),
            ("ours", 2): (0.70, 0.70, 0.60, 0.60), ("hybrid-1", 2): (0.70, 0.72, 0.60, 0.62)}
    results = {eg.Run("digits_cnn", "fog", severity, method, seed): eg.Result(0.5, acc)
               for (method, severity), values in accs.items()
               for seed, acc in zip((1, 2, 3, 4), values)}
    lines = rep.seed_noise(grid, results)[2:]  # after the introduction
    z, h = np.array(accs[("ours", 1)]), np.array(accs[("hybrid-1", 1)])
    se = 100 * np.sqrt((h.var(ddof=1) + z.var(ddof=1)) / 4)
    assert lines[2] == (f"| digits_cnn | fog | 1 | 81.0 ± 1.4 | 87.0 ± 4.2 | +6.0 | "
                        f"{rep.pct(list(z))} | {rep.pct(list(h))} | +7.0 ± {se:.1f} |")
    assert lines[3].startswith("| digits_cnn | fog | 2 | 70.0 ± 0.0 | 60.0 ± 0.0 | −10.0 |")
    assert lines[5] == ("* **ZO only, seeds 3-4 ≥ ZO only, seeds 1-2** (the same method) in "
                        "**1 of 2** cells; differences from −10.0 to +6.0 points, mean "
                        "absolute 8.0.")
    assert lines[6].startswith("* **hybrid C=1 ≥ ZO only over 4 seeds** in **2 of 2** cells; "
                               "mean difference +4.0 points; more than two standard errors "
                               "from zero: digits_cnn fog 1 (+7.0 ± ")
    del results[eg.Run("digits_cnn", "fog", 2, "hybrid-1", 4)]
    assert rep.seed_noise(grid, results)[5].endswith(" | — |")
    assert rep.seed_noise(eg.QUICK, results) == []


def test_memory_table(ex, eg, rep, tmp_path):
    """The memory items of a real build (the CLI spelling) and the table made of them."""
    items = ex.build_memory(ex.default_cli(), "digits_cnn", 1, 20, tmp_path)
    assert items is not None, (tmp_path / "builds" / "digits_cnn-bp1.txt").read_text()
    assert set(items) == set(eg.MEMORY_ITEMS) | {"sram"}
    assert items["trainable parameters"] > 0 and items["gradient buffer"] > 0
    assert items["sram"] > sum(items[name] for name in eg.MEMORY_ITEMS)
    report = json.loads((tmp_path / "builds" / "digits_cnn-bp1" / "memory_report.json"
                         ).read_text())
    assert ex.memory_items(report) == items
    assert items["arena tail"] == (report["sram"]["items"][0]["bytes"]
                                   - report["arena"]["bytes"])
    fixed = {"trainable parameters": 3000, "gradient buffer": 640, "saved activations": 512,
             "training state": 96, "arena tail": 1152, "sram": 18000}
    rows = [eg.MemoryRow("digits_cnn", "ZO only (ours)", 0, fixed, 0, 80),
            eg.MemoryRow("digits_cnn", "hybrid C=2", 2, None, 8000, 40)]
    table = rep.memory_table(rows)
    assert table[2] == ("| digits_cnn | ZO only (ours) | 3,000 | 640 | 0 | 512 | 96 | 1,152 | "
                        "5,400 | 18,000 | 80 |")
    assert table[3] == ("| digits_cnn | hybrid C=2 | build failed | — | — | — | — | — | — "
                        "| — | 40 |")
