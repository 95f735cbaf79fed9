"""--estimator channel: every layer's per-channel biases by channel-wise node perturbation
(one xi per output channel, the same at every position; d = channels), weights frozen."""
from .base import CHANNEL_SOURCES, Estimator

ESTIMATOR = Estimator(
    name="channel", wire_code=6,
    summary="per-channel biases only, by channel-wise node perturbation",
    sources=CHANNEL_SOURCES, layer_mode=lambda parameters, pre_activations: "CH")
