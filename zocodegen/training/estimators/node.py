"""--estimator np: node perturbation of the pre-activation in every layer (paper Sec. 3.2).
(The module is not called np.py, which would shadow numpy's usual name.)"""
from .base import FLOAT_SOURCES, Estimator

ESTIMATOR = Estimator(
    name="np", wire_code=2, summary="node perturbation in every layer (paper Sec. 3.2)",
    sources=FLOAT_SOURCES, layer_mode=lambda parameters, pre_activations: "NP")
