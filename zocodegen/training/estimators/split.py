"""--estimator split: FedSPZO's split perturbation (docs/training.md "Split perturbation"):
two blocks of layers, P_s perturbations of block 2 per block-1 direction and side (its step:
training/steps/split.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import UserError
from ...limits import MAX_SAMPLES_TIMES_QUERIES
from .base import FLOAT_SOURCES, Estimator


@dataclass(frozen=True)
class SplitOptions:
    """Where block 2 starts (a trainable-layer index; None: the last trained layer) and P_s,
    block 2's perturbations per block-1 direction and side."""

    cutoff: int | None = None
    inner_queries: int = 2

    def __post_init__(self) -> None:
        if not 1 <= self.inner_queries <= 64:
            raise UserError(f"--inner-queries must be in 1..64 (got {self.inner_queries})")


def _check(config: Any) -> None:
    if config.two_sided or config.query_batch > 1:
        raise ESTIMATOR.refuse("is two-sided already and evaluates one forward at a time: "
                               "drop --two-sided and --query-batch")
    if config.bp_layers or config.mode == "sparse":
        raise ESTIMATOR.refuse("trains its two blocks by zeroth-order over the whole run: use "
                               "--train full and --bp-layers 0 (--layers picks the layers)")
    forwards = 2 * config.queries * config.inner_queries * config.batch
    if forwards > MAX_SAMPLES_TIMES_QUERIES:
        raise UserError(f"--estimator split: 2 x --queries x --inner-queries x --batch = "
                        f"{forwards} exceeds {MAX_SAMPLES_TIMES_QUERIES}; lower one of them")


ESTIMATOR = Estimator(
    name="split", wire_code=5, summary="FedSPZO's split perturbation of two blocks of layers",
    sources=(*FLOAT_SOURCES, "zo_estimate_split.c"),
    layer_mode=lambda parameters, pre_activations: "WP", two_point=True,
    halves_difference=True, query_batching=False, options=SplitOptions,
    check=_check, step="split")
