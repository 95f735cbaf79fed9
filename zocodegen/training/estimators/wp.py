"""--estimator wp: weight perturbation in every layer (paper Sec. 3.1)."""
from .base import FLOAT_SOURCES, Estimator

ESTIMATOR = Estimator(
    name="wp", wire_code=1, summary="weight perturbation in every layer (paper Sec. 3.1)",
    sources=FLOAT_SOURCES, layer_mode=lambda parameters, pre_activations: "WP")
