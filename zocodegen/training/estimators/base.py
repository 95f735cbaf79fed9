"""What every estimator declares (one module per estimator in this package)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from ...errors import UserError

#: Engine files every firmware compiles (templates/train; zo_train_engine.h lists them all).
CORE_SOURCES = ("zo_train.c", "zo_checkpoint.c", "zo_step_parts.c")
#: The float engine every WP / NP estimator runs on.
FLOAT_SOURCES = ("zo_update.c", "zo_node_gradient.c", "zo_estimate_wp.c", "zo_node_queries.c",
                 "zo_estimate_np.c")
#: ... and channel-wise node perturbation (CH layers) besides.
CHANNEL_SOURCES = FLOAT_SOURCES + ("zo_estimate_ch.c", "zo_scales.c")
#: --bp-layers, with any estimator: the last layers by back-propagation (ElasticZO).
BP_SOURCES = ("zo_node_gradient.c", "zo_estimate_bp.c")


def wp_or_np(parameters: int, pre_activations: int) -> str:
    """DESIGN.md section 4's rule: perturb whichever of the two spaces is smaller."""
    return "WP" if parameters < pre_activations else "NP"


@dataclass(frozen=True)
class Estimator:
    """One zeroth-order estimator: its names, how it perturbs, what it costs, and which C
    files of templates/train implement it (empty: a simulator baseline with no firmware)."""

    name: str  # --estimator NAME
    wire_code: int  # HELLO's estimator field (docs/link.md): never reuse a retired code
    summary: str  # one line for --help and docs
    sources: tuple[str, ...]  # engine files beyond CORE_SOURCES; () = no firmware
    # (weights + biases, pre-activations) of a trained layer -> "WP", "NP", "CH" or "INT8"
    layer_mode: Callable[[int, int], str]
    two_point: bool = False  # every query is two forwards, theta + z and theta - z
    halves_difference: bool = False  # the estimate is (l+ - l-) / 2 (SPSA), not l+ - l
    whole_model: bool = False  # one perturbation of every trained layer per query (MeZO)
    query_batching: bool = True  # --query-batch B evaluates B query forwards together
    has_learning_rate: bool = True  # False: the step is a number of bits (--lr auto is off)
    integer_only: bool = False  # no floating point from perturbation to update
    # Its own options: a small frozen dataclass whose fields are the TrainConfig fields only
    # this estimator reads (same names and defaults; it checks their ranges). Another
    # estimator's run refuses them set away from their defaults instead of ignoring them.
    options: type | None = None
    check: Callable[[Any], None] = lambda config: None  # refusals of its own options
    # Its simulated step, by name in training/steps (STEPS): the layer-wise step of WP / NP /
    # INT8 layers unless it estimates otherwise (MeZO, split)
    step: str = "layerwise"

    @property
    def firmware(self) -> bool:
        return bool(self.sources)

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self.options)) if self.options else ()

    def options_of(self, config: Any) -> Any:
        """Its options as they are set in ``config`` (checked on construction), or None."""
        if self.options is None:
            return None
        return self.options(**{name: getattr(config, name) for name in self.option_names})

    def refuse(self, message: str) -> UserError:
        return UserError(f"--estimator {self.name} {message}")
