"""--estimator mezo: MeZO's two-point SPSA of the whole model (MeZO, Alg. 1), a simulator
baseline: Q L / 2 queries of two full forwards, the forwards a layer-wise step spends (its
step: training/steps/mezo.py)."""
from __future__ import annotations

from typing import Any

from .base import Estimator


def _check(config: Any) -> None:
    if config.two_sided:
        raise ESTIMATOR.refuse("is two-sided already (theta + z, theta - z): drop "
                               "--two-sided")


ESTIMATOR = Estimator(
    name="mezo", wire_code=3, summary="MeZO's two-point SPSA of the whole model (simulator only)",
    sources=(), layer_mode=lambda parameters, pre_activations: "WP", two_point=True,
    halves_difference=True, whole_model=True, query_batching=False, check=_check,
    step="mezo")
