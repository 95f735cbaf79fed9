"""--estimator np-channel: adaptive's NP layers as they are; its WP layers train their
per-channel biases by channel-wise node perturbation instead of their weights."""
from .base import CHANNEL_SOURCES, Estimator, wp_or_np

ESTIMATOR = Estimator(
    name="np-channel", wire_code=7,
    summary="NP where adaptive uses NP, channel-wise bias perturbation where it uses WP",
    sources=CHANNEL_SOURCES, layer_mode=lambda parameters, pre_activations:
        "CH" if wp_or_np(parameters, pre_activations) == "WP" else "NP")
