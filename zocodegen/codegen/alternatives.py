"""What else fits when a training build does not: the tips of a refused build
(``training_tips``), and the fewest-blocks search that both those tips and ``--blocks auto``
(fit.resolve_blocks) use. Every function takes ``total``: the SRAM a run's build needs on the
board, or None when it does not fit; project.plan_project and fit.py build it from ``layout``,
so this module plans nothing itself."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..ir import Graph
from ..planner import kb
from ..target import roomier_targets
from ..training.config import DEFAULT_BLOCKS, ESTIMATOR_FALLBACK, TrainConfig
from ..training.plan import sparse_blocks
from .training_code import TrainingCode

#: The SRAM of a run's build on the board, or None when it does not fit.
Total = Callable[[TrainConfig], "int | None"]

MAX_SUGGESTED_BLOCKS = 16  # a refusal tries sparse training in up to this many blocks
TRAINING_SUGGESTIONS = ["train fewer layers (--layers)",
                        "lower --batch (saved activations grow with N)"]


def roomier_board(board: str) -> list[str]:
    """The board with the most SRAM, when it has more than ``board``: never the board the
    build already targets (the H7B3's refusal named the H7B3)."""
    return [f"a board with more SRAM (--target {name})" for name in roomier_targets(board)[-1:]]


def fewest_blocks(sparse: TrainConfig, total: Total, first: int = 1,
                  last: int = MAX_SUGGESTED_BLOCKS) -> tuple[int, int] | None:
    """(blocks, SRAM) of the fewest blocks from ``first`` to ``last`` whose sparse build
    fits: the most layers trained at once."""
    return next(((n, t) for n in range(first, last + 1)
                 if (t := total(replace(sparse, blocks=n))) is not None), None)


def single_blocks(graph: Graph, sparse: TrainConfig, total: Total, skip: int | None = None
                  ) -> tuple[int, list[tuple[int, int]]] | None:
    """When no sparse build with the device choosing its block fits: the fewest blocks, from
    ``sparse``'s own partition up to MAX_SUGGESTED_BLOCKS, in which a build of one block
    (--block K) fits, and each such block with its SRAM (``skip``: a block already refused).
    `inspect --target` names these options and build's refusal suggests them."""
    first = len(sparse_blocks(graph, replace(sparse, block=None)))
    for blocks in range(first, MAX_SUGGESTED_BLOCKS + 1):
        run = replace(sparse, blocks=blocks, block=None)
        count = len(sparse_blocks(graph, run))
        if count < blocks and blocks > first:  # no more layers to split: no new partition
            return None
        fitting = [(k, t) for k in range(count) if k != skip
                   and (t := total(replace(run, block=k))) is not None]
        if fitting:
            return blocks, fitting
    return None


def training_tips(graph: Graph, train: TrainConfig, training: TrainingCode, recompute: str,
                  total: Total, board: str) -> list[str]:
    """Everything a refused training build on ``board`` suggests, the options that fit
    first."""
    tips = _fitting_alternatives(graph, train, total)
    if train.estimator != ESTIMATOR_FALLBACK:
        tips += _fallback_estimator(train, total)
    return (tips + _recompute_suggestions(training, recompute) + TRAINING_SUGGESTIONS
            + roomier_board(board))


def _fitting_alternatives(graph: Graph, train: TrainConfig, total: Total) -> list[str]:
    """Smaller query batches and sparse configurations of the same run that fit."""
    tips = []
    forwards = train.queries * (2 if train.two_sided else 1)
    smaller = next(((b, t) for b in range(train.query_batch - 1, 0, -1) if forwards % b == 0
                    and (t := total(replace(train, query_batch=b))) is not None), None)
    if smaller:  # the query batch's arena is the easiest thing to give back
        tips.append(f"a smaller query batch fits: --query-batch {smaller[0]} "
                    f"({kb(smaller[1])})")
    auto = replace(train, mode="sparse", block=None)
    auto_total = total(auto) if train.mode == "full" else None
    if auto_total is not None:
        return tips + [f"sparse training fits: --train sparse (the device picks one of "
                       f"{train.blocks} blocks; {kb(auto_total)})"]
    count = len(sparse_blocks(graph, auto))
    if one := single_blocks(graph, auto, total, skip=train.block):
        blocks, fitting = one
        given = "" if blocks == DEFAULT_BLOCKS else f" --blocks {blocks}"
        tips.append("these sparse blocks fit: " + ", ".join(
            f"--train sparse{given} --block {k} ({kb(t)})" for k, t in fitting))
    if more := fewest_blocks(auto, total, first=count + 1):
        tips.append(f"smaller blocks fit: --train sparse --blocks {more[0]} ({kb(more[1])}; "
                    "--blocks auto picks the fewest that fit)")
    return tips


def _fallback_estimator(train: TrainConfig, total: Total) -> list[str]:
    """The tip of the estimator the build falls back to when --estimator is not given
    (fit.resolve_estimator): the same run with it, else its sparse blocks that fit."""
    other = replace(train, estimator=ESTIMATOR_FALLBACK, scales=False)  # it has no CH layers
    option = f"--estimator {ESTIMATOR_FALLBACK}" + (" --no-scales" if train.scales else "")
    why = "(it keeps a copy of the weights where CH keeps two of the outputs)"
    if (t := total(other)) is not None:
        return [f"{option} fits {why}: {kb(t)}"]
    fewest = fewest_blocks(replace(other, mode="sparse", block=None), total)
    if fewest is None:
        return []
    return [f"{option} {why} fits as --train sparse --blocks {fewest[0]} ({kb(fewest[1])})"]


def _recompute_suggestions(training: TrainingCode, recompute: str) -> list[str]:
    """What restart groups did for a training build that still does not fit."""
    if training.split:
        return []
    if recompute == "off":
        return ["restart groups that recompute early layers instead of saving their "
                "activations (--recompute auto)"]
    if training.recomputed_macs:
        return [f"restart groups already recompute {training.recomputed_macs / 1e6:.2f} M MACs "
                "per step instead of saving activations (more would not save memory)"]
    return []
