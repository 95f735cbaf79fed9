"""--estimator adaptive (the default, DESIGN.md section 4): each layer by weight or node
perturbation, whichever perturbs fewer numbers (paper Sec. 3.3)."""
from .base import FLOAT_SOURCES, Estimator, wp_or_np

ESTIMATOR = Estimator(
    name="adaptive", wire_code=0,
    summary="WP or NP per layer, whichever perturbs fewer numbers (paper Sec. 3.3)",
    sources=FLOAT_SOURCES, layer_mode=wp_or_np)
