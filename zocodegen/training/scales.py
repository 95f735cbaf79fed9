"""Per-channel filter scales trained beside a CH layer's biases (``--scales``; rules and
measurements: docs/training.md "Channel scales", docs/decisions/channel-scales.md; C twin: the
scale parts of templates/train/zo_estimate_ch.c and zo_node_queries.c).

A folded batch norm leaves each output channel two affine terms, the bias and the scale:
the requantization multiplier M_c = s_in s_c / s_out of the filter's scale s_c. A shift of
the input distribution is largely undone by those two (TENT, TinyTL's bias update), and a CH
layer already trains the bias by moving every position of channel c by xi_c. With --scales
each query also draws xi'_c (from the sample's stream, after the bias's Q C values) and
moves the node by the rounded xi'_c (h(z) - zp) / 2^SHIFT: a relative change of its scale
by 2^-SHIFT, in the same forwards. The scale s_c itself is the parameter (float32, the
model file's own field), so that the multipliers are rebuilt exactly as TFLite derives
them and an exported model runs bit-exact with the device.

The update: u_c = A_c (s_c / s0_c - 1) moves the channel's output by about u_c LSB, and
its estimate is sum D xi' 2^SHIFT / A_c with A_c^2 = max(mean of (h(z) - zp)^2, 2^(2 SHIFT))
over the step's positions. u_c takes the bias rule's step in output LSB per unit of gradient
(eta_t g_i / (N Q) inv_s2[c] 2^-16 M0_c), times STEP, so

    s_c -= s0_c (coef inv_s2[c] 2^-16 M0_c 2^SHIFT STEP) g'_c / A_c^2,  within [s0 / 4, 4 s0]

in double, operation by operation as the C engine does it, then rounded to float32.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import DataError
from ..ir import Graph

if TYPE_CHECKING:
    from .plan_types import TrainableLayer

#: Ops whose filter scales the requantization reads per output channel.
SCALED_OP_TYPES = ("CONV_2D", "DEPTHWISE_CONV_2D")
#: A query moves a node by round(xi' (h(z) - zp) / 2^SHIFT).
SHIFT = 5
#: The scale's step as a multiple of the bias rule's, in output LSB (the one screened:
#: docs/decisions/channel-scales.md).
STEP = 0.25
#: A scale stays within these multiples of the model's.
LOWEST, HIGHEST = 0.25, 4.0
#: The floor of A_c^2: a channel near its zero point moves by at most 1 LSB a query.
A2_FLOOR = float(1 << (2 * SHIFT))


def key(weights: str) -> str:
    """The parameters' entry of a layer's scales (beside its weights' and bias's)."""
    return weights + ":scale"


def model_scales(graph: Graph, layer: TrainableLayer) -> np.ndarray:
    """s0: the filter's per-channel scales as the model has them (float32, one a channel)."""
    scale = graph.tensor(layer.weights).quant.scale
    return np.broadcast_to(np.asarray(scale, dtype=np.float32), (layer.channels,)).copy()


def node_term(centered: np.ndarray, xi: np.ndarray) -> np.ndarray:
    """round(xi' (h(z) - zp) / 2^SHIFT), half away from zero, on integers (int64)."""
    x = np.asarray(centered, dtype=np.int64) * np.asarray(xi, dtype=np.int64)
    half = 1 << (SHIFT - 1)
    return np.sign(x) * ((np.abs(x) + half) >> SHIFT)


def multiplier_rates(graph: Graph, layer: TrainableLayer, coef: np.float32, s0: np.ndarray
                     ) -> np.ndarray:
    """coef inv_s2[c] 2^-16 M0_c 2^SHIFT STEP per channel (double, in the C order), M0_c the
    model's real multiplier s_in s0_c / s_out (``s0`` the model's scales, float64)."""
    op = layer.op
    s_in = np.float64(graph.tensor(op.inputs[0]).quant.scalar_scale)
    s_out = np.float64(graph.tensor(op.outputs[0]).quant.scalar_scale)
    m0 = s_in * s0 / s_out
    rate = np.float64(coef) * layer.bias_inv_s2.astype(np.float64)
    return rate * 2.0 ** -16 * m0 * float((1 << SHIFT) * STEP)


def updated(graph: Graph, layer: TrainableLayer, scales: np.ndarray, coef: np.float32,
            grad: np.ndarray, squares: np.ndarray, count: int) -> np.ndarray:
    """The scales after a step: ``grad`` the int32 sums of D xi' per channel, ``squares``
    the sums of (h(z) - zp)^2 over ``count`` positions and samples (int64)."""
    s0 = model_scales(graph, layer).astype(np.float64)
    a2 = np.maximum(squares.astype(np.float64) / np.float64(count), A2_FLOOR)
    moved = (scales.astype(np.float64)
             - s0 * (multiplier_rates(graph, layer, coef, s0) * grad.astype(np.float64) / a2))
    return np.clip(moved, LOWEST * s0, HIGHEST * s0).astype(np.float32)


def checked(graph: Graph, layer: TrainableLayer, values: np.ndarray) -> np.ndarray:
    """A checkpoint's scales of ``layer``, refused unless an update could have reached them
    (within [s0 / 4, 4 s0]; the device refuses such a checkpoint too)."""
    s0 = model_scales(graph, layer)
    values = np.asarray(values, dtype=np.float32)
    if not np.all((values >= np.float32(LOWEST) * s0) & (values <= np.float32(HIGHEST) * s0)):
        raise DataError(f"the checkpoint's filter scales of layer {layer.op_index} "
                        f"('{layer.op.name}') are not within a quarter and four times the "
                        "model's: not a checkpoint of a run")
    return values.copy()
