"""The simulated steps, by the name an estimator's row gives (``Estimator.step``): the
layer-wise step WP, NP, adaptive, channel and INT8 share, and the whole-model and split
steps of MeZO and FedSPZO. They live apart from the rows (estimators/), which TrainConfig
reads to check a run's options: a step works on a plan, and a plan holds a TrainConfig."""
from __future__ import annotations

from collections.abc import Callable

from . import layerwise, mezo, split

#: Estimator.step -> step(graph, plan, params, step_parts.StepBatch)
STEPS: dict[str, Callable[..., None]] = {"layerwise": layerwise.step, "mezo": mezo.step,
                                          "split": split.step}
