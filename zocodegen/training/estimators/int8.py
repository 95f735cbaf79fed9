"""--estimator int8: ElasticZO-INT8 (Alg. 2), integer only from perturbation to update, for
cores without an FPU (training/int8.py, templates/train/zo_estimate_int8.c)."""
from __future__ import annotations

from typing import Any

from .base import Estimator


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
    options=("r_max", "p_zero", "b_zo", "b_bp"), check=_check)
