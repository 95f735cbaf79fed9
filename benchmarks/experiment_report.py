"""The tables of the digits grid (docs/experiment.md, between the grid markers): accuracy per
cell and method, the ablations, the hybrid and perturbation comparisons against ZO only, the
seed-noise A/A test and the memory table."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from experiment_grid import (EQUAL_BUDGET, GRID_METHODS, HYBRIDS, MEMORY_ITEMS, MEMORY_TARGET,
                             MEZO, METHODS, OURS, PERTURBATIONS, TUNED, TUNED_LRS, WORKERS,
                             Grid, MemoryRow, Method, Result, Run, grid_runs)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    v = np.asarray(values, dtype=np.float64)
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0


def pct(values: Sequence[float]) -> str:
    """'81.2 ± 1.3' (percent) over seeds; '—' when nothing finished."""
    if not values:
        return "—"
    mean, std = mean_std(values)
    return f"{100 * mean:.1f} ± {100 * std:.1f}" if len(values) > 1 else f"{100 * mean:.1f}"


def after(results: dict[Run, Result], model: str, family: str, severity: int, method: str,
          seeds: Iterable[int]) -> list[float]:
    """Test accuracies after training of the finished seeds of one (model, cell, method)."""
    found = (results.get(Run(model, family, severity, method, s)) for s in seeds)
    return [r.after for r in found if r is not None]


def before(results: dict[Run, Result], model: str, family: str, severity: int) -> float | None:
    """No adaptation: the test accuracy every run of the cell starts from."""
    return next((r.before for run, r in results.items()
                 if (run.model, run.family, run.severity) == (model, family, severity)), None)


def ceiling(ceilings: dict, model: str, family: str, severity: int) -> float | None:
    return ceilings.get(model, {}).get(f"{family}/{severity}")


def fmt(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def grid_table(grid: Grid, results: dict[Run, Result], ceilings: dict) -> list[str]:
    """Per model x family x severity: no adaptation, ours, MeZO (mean ± std over the seeds),
    the FP32 ceiling; per model a summary row, the mean over its cells of the seed means."""
    lines = ["| model | corruption | severity | no adaptation | ours (defaults) | MeZO | "
             "FP32 ceiling |", "|---|---|---|---|---|---|---|"]
    for model in grid.models:
        columns: dict[str, list[float]] = {"before": [], "ours": [], "mezo": [], "ceiling": []}
        for family, severity in grid.cells:
            ours = after(results, model, family, severity, OURS.key, grid.seeds)
            mezo = after(results, model, family, severity, MEZO.key, grid.seeds)
            start = before(results, model, family, severity)
            top = ceiling(ceilings, model, family, severity)
            for key, value in (("before", start), ("ceiling", top),
                               ("ours", np.mean(ours) if ours else None),
                               ("mezo", np.mean(mezo) if mezo else None)):
                if value is not None:
                    columns[key].append(float(value))
            lines.append(f"| {model} | {family} | {severity} | {fmt(start)} | {pct(ours)} | "
                         f"{pct(mezo)} | {fmt(top)} |")
        cells = len(grid.cells)

        def mean_of(key: str) -> str:
            values = columns[key]
            return fmt(float(np.mean(values))) if len(values) == cells else "—"

        lines.append(f"| **{model}** | **mean of {cells} cells** | | **{mean_of('before')}** | "
                     f"**{mean_of('ours')}** | **{mean_of('mezo')}** | "
                     f"**{mean_of('ceiling')}** |")
    return lines


def best_tuned(results: dict[Run, Result], model: str, family: str, severity: int,
               seeds: Sequence[int]) -> tuple[list[float], str | None]:
    """The fixed learning rate of TUNED_LRS with the best mean test accuracy (an oracle choice
    on the test split: an upper reference for what --lr auto picks from validation)."""
    best: tuple[list[float], str | None] = ([], None)
    for method in TUNED:
        values = after(results, model, family, severity, method.key, seeds)
        if values and (not best[0] or np.mean(values) > np.mean(best[0])):
            best = (values, method.options[1])
    return best


def ablation_table(grid: Grid, results: dict[Run, Result], ceilings: dict) -> list[str]:
    """Methods x (model, severity) on the ablation family, mean ± std over the seeds."""
    cols = [(m, s) for m in grid.models for _, s in grid.ablation_cells]
    family = grid.ablation_family
    lines = ["| method | " + " | ".join(f"{m} sev. {s}" for m, s in cols) + " |",
             "|---|" + "---|" * len(cols),
             "| no adaptation | " + " | ".join(fmt(before(results, m, family, s))
                                              for m, s in cols) + " |"]

    def row(method: Method) -> str:
        return f"| {method.label} | " + " | ".join(
            pct(after(results, m, family, s, method.key, grid.seeds)) for m, s in cols) + " |"

    tuned = [best_tuned(results, m, family, s, grid.seeds) for m, s in cols]
    lines.append(row(OURS))
    lines.append(f"| ours tuned (best fixed lr of {', '.join(TUNED_LRS)}, no guard) | "
                 + " | ".join(f"{pct(v)} (lr {lr})" if lr else "—" for v, lr in tuned) + " |")
    lines += [row(METHODS[key]) for key in ("wp", "np", "no-gnorm", "no-quant", "mezo",
                                            "sparse")]
    lines.append("| FP32 back-propagation ceiling (re-quantized) | " + " | ".join(
        fmt(ceiling(ceilings, m, family, s)) for m, s in cols) + " |")
    return lines


def seed_mean(results: dict[Run, Result], model: str, family: str, severity: int,
              method: str, seeds: Sequence[int]) -> float | None:
    """Mean test accuracy over the seeds, only when every seed finished (a comparison of
    means over different seed sets would not be one)."""
    values = after(results, model, family, severity, method, seeds)
    return float(np.mean(values)) if len(values) == len(seeds) else None


def mean_forwards(results: dict[Run, Result], model: str, method: str) -> float | None:
    """Mean query forwards per run of one model and method over its finished runs."""
    values = [r.forwards for run, r in results.items()
              if (run.model, run.method) == (model, method) and r.forwards is not None]
    return float(np.mean(values)) if values else None


def comparison_table(grid: Grid, results: dict[Run, Result], ceilings: dict,
                     methods: Sequence[Method]) -> list[str]:
    """Per model x family x severity: no adaptation, ZO only (ours), each of ``methods``, the
    FP32 ceiling (mean ± std over the seeds); per model the mean over its cells of the seed
    means and the query forwards per run (the budget each column spent)."""
    methods = (OURS,) + tuple(methods)
    heads = ["ZO only (ours)"] + [m.label for m in methods[1:]]
    lines = ["| model | corruption | severity | no adaptation | " + " | ".join(heads)
             + " | FP32 BP ceiling |", "|---|---|---|" + "---|" * (len(heads) + 2)]
    for model in grid.models:
        starts, tops = [], []
        means: dict[str, list[float]] = {m.key: [] for m in methods}
        for family, severity in grid.cells:
            start = before(results, model, family, severity)
            top = ceiling(ceilings, model, family, severity)
            starts += [start] if start is not None else []
            tops += [top] if top is not None else []
            cols = []
            for method in methods:
                values = after(results, model, family, severity, method.key, grid.seeds)
                cols.append(pct(values))
                mean = seed_mean(results, model, family, severity, method.key, grid.seeds)
                means[method.key] += [mean] if mean is not None else []
            lines.append(f"| {model} | {family} | {severity} | {fmt(start)} | "
                         + " | ".join(cols) + f" | {fmt(top)} |")
        cells = len(grid.cells)

        def mean_of(values: list[float]) -> str:
            return f"**{fmt(float(np.mean(values)))}**" if len(values) == cells else "—"

        lines.append(f"| **{model}** | **mean of {cells} cells** | | {mean_of(starts)} | "
                     + " | ".join([mean_of(means[m.key]) for m in methods])
                     + f" | {mean_of(tops)} |")
        forwards = [mean_forwards(results, model, m.key) for m in methods]
        lines.append(f"| {model} | query forwards per run | | 0 | "
                     + " | ".join(["—" if f is None else f"{f:,.0f}" for f in forwards])
                     + " | — |")
    return lines


def differences(grid: Grid, results: dict[Run, Result], method: str
                ) -> list[tuple[str, str, int, float]]:
    """(model, family, severity, mean of ``method`` - mean of ours) over the seeds, for every
    cell where both finished all seeds."""
    found = []
    for model in grid.models:
        for family, severity in grid.cells:
            other = seed_mean(results, model, family, severity, method, grid.seeds)
            ours = seed_mean(results, model, family, severity, OURS.key, grid.seeds)
            if other is not None and ours is not None:
                found.append((model, family, severity, other - ours))
    return found


def points(delta: float) -> str:
    """A difference of accuracies in percentage points, signed ('+1.2', '−0.3')."""
    value = round(100 * delta, 1) + 0.0  # -0.0 (a tiny loss) prints as +0.0
    return f"+{value:.1f}" if value >= 0 else f"−{-value:.1f}"


def comparison_summary(grid: Grid, results: dict[Run, Result], methods: Sequence[Method]
                       ) -> list[str]:
    """Per method: in how many cells its seed mean is at least ZO only's, the mean, worst and
    best difference, and every cell where it falls below (so a loss is never hidden)."""
    lines = []
    for method in methods:
        diffs = differences(grid, results, method.key)
        if not diffs:
            lines.append(f"* **{method.label}**: no cell finished yet.")
            continue
        wins = sum(1 for *_, d in diffs if d >= -1e-12)
        worst = min(diffs, key=lambda x: x[3])
        best = max(diffs, key=lambda x: x[3])
        losses = sorted((d for d in diffs if d[3] < -1e-12), key=lambda x: x[3])
        where = "; ".join(f"{m} {f} {s} ({points(d)})" for m, f, s, d in losses)
        lines.append(
            f"* **{method.label} ≥ ZO only** (mean over the seeds) in **{wins} of "
            f"{len(diffs)}** cells; difference to ZO only: mean "
            f"{points(float(np.mean([d for *_, d in diffs])))} points, worst "
            f"{points(worst[3])} ({worst[0]} {worst[1]} {worst[2]}), best {points(best[3])} "
            f"({best[0]} {best[1]} {best[2]})."
            + (f" Below ZO only: {where}." if losses else ""))
    return lines


def seed_noise(grid: Grid, results: dict[Run, Result]) -> list[str]:
    """ZO only's seeds 4-6 against its seeds 1-3 per cell (the same method twice: how far
    seed means differ by chance), then hybrid C = 1 against ZO only over all six seeds with
    the standard error of the difference of the means, sqrt(s_h^2 / n + s_z^2 / n)."""
    if not grid.noise_seeds:
        return []
    hybrid = METHODS["hybrid-1"]
    every = grid.seeds + grid.noise_seeds
    first, second = (f"{s[0]}-{s[-1]}" for s in (grid.seeds, grid.noise_seeds))
    lines = [f"Seed noise: ZO only and {hybrid.label} also ran seeds "
             f"{', '.join(map(str, grid.noise_seeds))} in every cell (same budget and "
             f"defaults). The first columns compare ZO only with itself over two sets of "
             f"three seeds; the last compare the hybrid with ZO only over all six.", "",
             f"| model | corruption | severity | ZO only, seeds {first} | ZO only, seeds {second} "
             f"| difference | ZO only, {len(every)} seeds | {hybrid.label}, {len(every)} seeds "
             f"| difference ± standard error |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    aa, ab = [], []
    for model in grid.models:
        for family, severity in grid.cells:
            cell = (model, family, severity)
            z1, z2, z, h = (after(results, *cell, method, seeds) for method, seeds in (
                (OURS.key, grid.seeds), (OURS.key, grid.noise_seeds), (OURS.key, every),
                (hybrid.key, every)))
            row = [pct(z1), pct(z2), "—", pct(z), pct(h), "—"]
            if len(z1) == len(grid.seeds) and len(z2) == len(grid.noise_seeds):
                aa.append((*cell, float(np.mean(z2) - np.mean(z1))))
                row[2] = points(aa[-1][3])
            if len(z) == len(h) == len(every):
                se = math.sqrt((np.var(h, ddof=1) + np.var(z, ddof=1)) / len(every))
                ab.append((*cell, float(np.mean(h) - np.mean(z)), se))
                row[5] = f"{points(ab[-1][3])} ± {100 * se:.1f}"
            lines.append(f"| {model} | {family} | {severity} | " + " | ".join(row) + " |")
    lines.append("")
    if aa:
        wins = sum(1 for *_, d in aa if d >= -1e-12)
        lines.append(
            f"* **ZO only, seeds {second} ≥ ZO only, seeds {first}** (the same method) in "
            f"**{wins} of {len(aa)}** cells; differences from {points(min(d for *_, d in aa))} "
            f"to {points(max(d for *_, d in aa))} points, mean absolute "
            f"{100 * float(np.mean([abs(d) for *_, d in aa])):.1f}.")
    if ab:
        wins = sum(1 for *_, d, _ in ab if d >= -1e-12)
        far = [f"{m} {f} {s} ({points(d)} ± {100 * se:.1f})" for m, f, s, d, se in ab
               if abs(d) > 2 * se]
        lines.append(
            f"* **{hybrid.label} ≥ ZO only over {len(every)} seeds** in **{wins} of {len(ab)}** "
            f"cells; mean difference {points(float(np.mean([d for *_, d, _ in ab])))} points; "
            f"more than two standard errors from zero: "
            + ("; ".join(far) if far else "no cell") + ".")
    return lines + [""]



def memory_table(rows: Sequence[MemoryRow]) -> list[str]:
    """The memory rows in bytes: the training items, their sum, the whole SRAM and the
    query forwards per step."""
    lines = ["| model | method | trainable parameters | gradient buffer | of which BP head | "
             "saved activations (static) | training state | arena tail (ZO gradient regions, "
             "saved activations) | training total | SRAM total | query forwards per step |",
             "|---|---|" + "---:|" * 9]
    for row in rows:
        if row.items is None:
            cells = ["build failed"] + ["—"] * 7
        else:
            it = row.items
            total = sum(it[name] for name in MEMORY_ITEMS)
            cells = [f"{it['trainable parameters']:,}", f"{it['gradient buffer']:,}",
                     f"{row.head_bytes:,}", f"{it['saved activations']:,}",
                     f"{it['training state']:,}", f"{it['arena tail']:,}", f"{total:,}",
                     f"{it['sram']:,}"]
        lines.append(f"| {row.model} | {row.label} | " + " | ".join(cells)
                     + f" | {row.forwards_per_step} |")
    return lines



def timing(results: dict[Run, Result]) -> tuple[float, dict[str, float]]:
    """Sum of the runs' wall times (seconds) and the mean per method."""
    per: dict[str, list[float]] = {}
    for run, r in results.items():
        if r.seconds is not None:
            per.setdefault(run.method, []).append(r.seconds)
    total = sum(sum(v) for v in per.values())
    return total, {k: float(np.mean(v)) for k, v in per.items()}


def report(grid: Grid, results: dict[Run, Result], ceilings: dict, wall: float, workers: int,
           images: Sequence[str], memory: Sequence[MemoryRow] = ()) -> str:
    """The markdown that goes between the grid markers of docs/experiment.md."""
    total, per_method = timing(results)
    expected = len(grid_runs(grid))
    budget = " ".join(grid.budget)
    lines = [
        f"Grid: {len(grid.models)} models x {len(grid.cells)} cells (corruption family x "
        f"severity) x {len(grid.seeds)} seeds (`--seed {', '.join(map(str, grid.seeds))}`) x "
        f"{{{', '.join(m.key for m in GRID_METHODS)}}}, plus the ablations on "
        f"`{grid.ablation_family}`; {len(results)} of "
        f"{expected} runs finished. Every run: `zocodegen simulate MODEL --data CELL.npz "
        f"{budget} --queries {grid.queries} --seed S [method options]` on the cell's adapt "
        f"split (the simulator keeps a validation share of it for --lr auto and the guard); "
        f"test accuracy in % on the cell's held-out test split (360 images, 1 image = 0.28 %), "
        f"mean ± sample std over the seeds. MeZO gets the same number of forward passes as "
        f"the layer-wise methods (the engine sizes it). The ceiling is FP32 "
        f"back-propagation of all layers on the same adapt split, re-quantized to int8 "
        f"(`tests/fixtures/ceilings.json`).",
        "",
        *grid_table(grid, results, ceilings),
        "",
        f"Ablations on `{grid.ablation_family}` (same budget and seeds):",
        "",
        *ablation_table(grid, results, ceilings),
        "",
        "ElasticZO's hybrid (`--bp-layers C`: the model's last C trainable layers by exact "
        "integer back-propagation, the others by our layer-wise ZO) against ZO only, same "
        "cells, budget (`--epochs`, `--queries`, defaults) and seeds. The BP layers spend no "
        "query forwards, so the hybrids run on fewer forward passes than ZO only (row "
        "\"query forwards per run\": the CLI's count), plus one backward pass through the "
        "head per sample. The --lr auto trials and the guard's checks come on top; the "
        "engine sizes both as a share of the run's forwards, so the hybrids also check "
        "less often.",
        "",
        *comparison_table(grid, results, ceilings, HYBRIDS + EQUAL_BUDGET),
        "",
        *comparison_summary(grid, results, HYBRIDS + EQUAL_BUDGET),
        "",
        *seed_noise(grid, results),
        "Perturbation sources and estimates (PeZO, P-RGE; issue 17) against ZO only with "
        "XORShift Rademacher draws, same cells, seeds and defaults (--lr auto, guard), each "
        "at the same query forwards (two-sided: Q/2 queries of two forwards): "
        "`--perturbation pool:4095` (PeZO's pre-generation, 2^12 - 1 values), "
        "`--perturbation rotating:31` (on-the-fly, 2^5 - 1 LFSRs), `--distribution uniform` "
        "(Eq. 3-5 adaptive scaling), both together, and `--two-sided` (P-RGE's inner loop).",
        "",
        *comparison_table(grid, results, ceilings, PERTURBATIONS),
        "",
        *comparison_summary(grid, results, PERTURBATIONS),
        "",
        f"Time: the finished runs' wall times add up to {total / 60:.0f} minutes (about "
        f"{total / 60 / WORKERS:.0f} minutes for the whole grid at {WORKERS} at a time); this "
        f"invocation ran {workers} at a time and took {wall / 60:.1f} minutes (cached runs "
        f"are not rerun). Mean seconds per run: "
        + ", ".join(f"{k} {v:.0f}" for k, v in sorted(per_method.items())) + ".",
    ]
    if memory:
        lines += ["", f"Memory per model and method (bytes, from the generated build's "
                  f"memory report: `zocodegen build MODEL --target {MEMORY_TARGET} --train "
                  f"full --queries {grid.queries} --bp-layers C`; the paper's Eq. 2-4 / "
                  f"Fig. 4-5 in table form). Each zeroth-order layer's gradient region (+ "
                  f"weight backup) and the saved activations live in arena bytes dead while "
                  f"they are live, or past the arena's end: the arena tail (docs/memory.md). "
                  f"The gradient buffer keeps the BP head's saved int8 activations, int32 "
                  f"errors (and with N > 1 gradient accumulators), shown as \"of which BP "
                  f"head\" (`TrainingPlan.backprop_bytes()`). The training total is the five "
                  f"training items; the SRAM total adds the arena, the stack and the "
                  f"host-link buffers.", "", *memory_table(memory)]
    if images:
        lines += ["", "Test accuracy (solid, at the evaluation points) and the guard's "
                  "validation accuracy (dotted) per step, seed "
                  f"{grid.seeds[0]}, on `{grid.ablation_family}`; x marks a rollback:", ""]
        lines += [f"![{Path(p).stem}]({Path(p).name})" for p in images]
    return "\n".join(lines)


