"""The zeroth-order estimators, one module each, registered here (docs/training.md
"Adding an estimator"). Everything that differs by estimator reads its row: the command
line's choices, TrainConfig's refusals, the plan's layer modes and forwards, HELLO's wire
code, and which C files of templates/train a build renders."""
from __future__ import annotations

from . import adaptive, channel, int8, mezo, node, np_channel, split, wp
from .base import BP_SOURCES, CORE_SOURCES, Estimator

#: By wire code, which is also the order of --estimator's choices.
REGISTRY: dict[str, Estimator] = {e.name: e for e in sorted(
    (adaptive.ESTIMATOR, wp.ESTIMATOR, node.ESTIMATOR, mezo.ESTIMATOR, int8.ESTIMATOR,
     split.ESTIMATOR, channel.ESTIMATOR, np_channel.ESTIMATOR), key=lambda e: e.wire_code)}
NAMES = tuple(REGISTRY)
BY_WIRE_CODE = {e.wire_code: e for e in REGISTRY.values()}

#: Every engine file some estimator (or --bp-layers) needs; a build renders the ones it uses.
ENGINE_SOURCES = frozenset(s for e in REGISTRY.values() for s in e.sources) | set(BP_SOURCES)


def engine_sources(name: str, backprop: bool) -> frozenset[str]:
    """The engine files of templates/train a build with this estimator compiles."""
    return frozenset((*CORE_SOURCES, *REGISTRY[name].sources,
                      *(BP_SOURCES if backprop else ())))


__all__ = ["BY_WIRE_CODE", "ENGINE_SOURCES", "Estimator", "NAMES", "REGISTRY",
           "engine_sources"]
