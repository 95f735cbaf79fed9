"""--estimator int8: ElasticZO-INT8 (Alg. 2), integer only from perturbation to update, for
cores without an FPU (training/int8.py, templates/train/zo_estimate_int8.c)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import UserError
from .base import Estimator


@dataclass(frozen=True)
class Int8Options:
    """ElasticZO-INT8's knobs: the perturbation range and sparsity (None: the paper's
    schedule), and the bits of the ZO and of the BP update (training/int8.py)."""

    r_max: int = 7
    p_zero: float | None = None
    b_zo: int = 1
    b_bp: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.r_max <= 127:
            raise UserError(f"--r-max must be in 1..127 (got {self.r_max})")
        if self.p_zero is not None and not 0 <= self.p_zero < 1:
            raise UserError(f"--p-zero must be in [0, 1) or schedule (got {self.p_zero})")
        if not (1 <= self.b_zo <= 8 and 1 <= self.b_bp <= 8):
            raise UserError("--b-zo and --b-bp must be in 1..8 bits")


def _check(config: Any) -> None:
    if config.lr_auto:
        raise ESTIMATOR.refuse("has no learning rate to pick: its step is --b-zo / --b-bp "
                               "bits; drop --lr auto")
    if (config.perturbation != "xorshift" or config.distribution != "rademacher"
            or config.two_sided):
        raise ESTIMATOR.refuse("draws its own sparse uniform perturbations, two-sided "
                               "(ElasticZO Alg. 2): drop --perturbation, --distribution and "
                               "--two-sided")


ESTIMATOR = Estimator(
    name="int8", wire_code=4, summary="ElasticZO-INT8: integer only, for cores without an FPU",
    sources=("zo_estimate_int8.c",), layer_mode=lambda parameters, pre_activations: "INT8",
    two_point=True, query_batching=False, has_learning_rate=False, integer_only=True,
    options=Int8Options, check=_check)
