"""The digits grid's learning curves (docs/experiment_grid_<model>.png): test accuracy,
the guard's validation accuracy and its rollbacks per step, one panel per severity of the
ablation family."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from experiment_grid import METHODS, PLOTTED, Grid, Run


def read_curve(metrics: Path) -> dict[str, np.ndarray]:
    """metrics.csv as arrays: evaluation steps and test accuracy, guard check steps and
    validation accuracy, rollback steps (with their validation accuracy where logged)."""
    with metrics.open(newline="") as fh:
        rows = list(csv.DictReader(fh))

    def pick(column: str, event: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        chosen = [(int(r["step"]), float(r[column])) for r in rows if r.get(column)
                  and (event is None or r.get("event") == event)]
        steps = np.array([s for s, _ in chosen], dtype=np.int64)
        return steps, np.array([v for _, v in chosen], dtype=np.float64)

    test_steps, test = pick("accuracy")
    val_steps, val = pick("val_accuracy")
    rollback_steps = np.array([int(r["step"]) for r in rows if r.get("event") == "rollback"],
                              dtype=np.int64)
    at = dict(zip(val_steps.tolist(), val.tolist()))
    rollback_acc = np.array([at.get(s, math.nan) for s in rollback_steps.tolist()])
    if len(test_steps):
        fallback = np.interp(rollback_steps, test_steps, test)
        rollback_acc = np.where(np.isnan(rollback_acc), fallback, rollback_acc)
    return {"test_steps": test_steps, "test": test, "val_steps": val_steps, "val": val,
            "rollback_steps": rollback_steps, "rollback": rollback_acc}


def plot_curves(grid: Grid, root: Path, out_dir: Path) -> list[Path]:
    """One PNG per model: a panel per severity of the ablation family, the curves of the
    PLOTTED methods (first seed). Returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for model in grid.models:
        cells = grid.ablation_cells
        fig, axes = plt.subplots(1, len(cells), figsize=(5.5 * len(cells), 4), squeeze=False)
        for ax, (family, severity) in zip(axes[0], cells):
            for k, method in enumerate(PLOTTED):
                metrics = Run(model, family, severity, method, grid.seeds[0]).directory(
                    root) / "metrics.csv"
                if not metrics.is_file():
                    continue
                c = read_curve(metrics)
                color = f"C{k}"
                ax.plot(c["test_steps"], 100 * c["test"], "-o", color=color, markersize=3,
                        label=METHODS[method].label.split(" (")[0])
                if len(c["val_steps"]):
                    ax.plot(c["val_steps"], 100 * c["val"], ":", color=color, linewidth=1)
                if len(c["rollback_steps"]):
                    ax.plot(c["rollback_steps"], 100 * c["rollback"], "x", color=color,
                            markersize=9, markeredgewidth=2)
            ax.plot([], [], "k-o", markersize=3, label="test")
            ax.plot([], [], "k:", linewidth=1, label="validation (guard)")
            ax.plot([], [], "kx", markersize=9, markeredgewidth=2, label="rollback")
            ax.set_title(f"{model}, {family} severity {severity}")
            ax.set_xlabel("step")
            ax.set_ylabel("accuracy (%)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, loc="lower right", ncol=2)
        fig.tight_layout()
        path = out_dir / f"experiment_grid_{model}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


