"""The pieces every estimator's simulated step is made of (estimators/ puts them together):
forwards and Q16 losses, perturbed copies of a layer's weights, gradients, and the update
exactly as the C engine rounds it (docs/training.md)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..ir import Graph
from ..numerics import rounding_divide_by_pot
from ..reference.conv import tap_windows
from ..reference.softmax import cross_entropy_q26
from . import int8, wavefront
from .update import (apply_biases, apply_weights, clipped_coefficient, raw_deltas,
                     round_half_away, step_coefficient, update_deltas)

if TYPE_CHECKING:  # (annotations only: the plan reads the estimator rows built on these)
    from .plan_types import TrainableLayer, TrainingPlan

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
Params = dict[str, np.ndarray]  # weight / bias tensor name -> int8 / int32 array (IR shape)
Gradient = tuple[np.ndarray, np.ndarray | None]  # int weight gradient (flat), bias gradient


@dataclass(frozen=True)
class StepBatch:
    """What one step's estimate works from: the batch, its clean forward and the step."""

    xs: np.ndarray  # the N samples
    labels: np.ndarray
    env: dict  # the clean forward's activations and the step's parameters
    clean: np.ndarray  # the clean Q16 losses (N,)
    t: int
    eta_t: np.float32  # this step's learning rate (schedule and guard halvings)
    halvings: int
    record: dict | None  # filled with query sums (--record-scalars), by scalar key


def forward(graph: Graph, env: dict[str, np.ndarray], start: int, stop: int,
            keep: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """Run ops ``start..stop`` (inclusive) on a batch; ``env`` holds activations and the
    trainable parameters (possibly with a variant axis: variant v owns the v-th share of the
    batch rows). Returns the env extended with every output, or with those in ``keep``."""
    return wavefront.forward(graph, env, start, stop, keep)


def losses_q16(plan: TrainingPlan, logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Cross-entropy per row in Q16 (2^-16 nats), int64."""
    rows = logits.reshape(logits.shape[0], -1)
    return rounding_divide_by_pot(cross_entropy_q26(rows, labels, plan.loss_params), 10)


def loss_differences(plan: TrainingPlan, losses: np.ndarray, clean: np.ndarray) -> np.ndarray:
    """Delta l = l_q - l (Q16) clamped to +-plan.diff_limit: N Q terms of the gradient sums
    then fit int32 exactly, whatever N and Q are (docs/training.md)."""
    return np.clip(losses - clean, -plan.diff_limit, plan.diff_limit)


def tile(value: np.ndarray, copies: int) -> np.ndarray:
    return np.tile(value, (copies,) + (1,) * (value.ndim - 1))


def perturbed_weights(layer: TrainableLayer, params: Params, xi: np.ndarray) -> np.ndarray:
    """The layer's weights plus each row of ``xi`` (int8 saturation): (copies, *shape)."""
    w = params[layer.weights]
    return np.clip(w[None].astype(np.int16) + xi.reshape((-1,) + w.shape), -128, 127
                   ).astype(np.int8)


def perturbed_params(layer: TrainableLayer, params: Params, xi: np.ndarray) -> Params:
    """The perturbed copies as a parameter with a variant axis (forward)."""
    return {layer.weights: perturbed_weights(layer, params, xi)}


def wp_perturbations(plan: TrainingPlan, layer: TrainableLayer, seed: int) -> np.ndarray:
    """The layer's Q perturbations of the stream ``seed`` (Q, d_w), int8 (split: its
    block's P_1 or P_2)."""
    q = plan.scalar_source(layer)[1]
    return plan.perturbation.values(seed, q * layer.weight_count, layer.perturb_shift
                                    ).reshape(q, layer.weight_count)


def wp_gradient(xi: np.ndarray, sums: np.ndarray) -> Gradient:
    """g_j = sum_q D_q xi_qj; WP leaves the biases alone."""
    return np.asarray(sums, dtype=np.int64) @ xi.astype(np.int64), None


def node_to_parameter_gradient(graph: Graph, layer: TrainableLayer, a: np.ndarray,
                               gz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NP: weight gradient = the convolution / FC shaped outer product of the node gradient
    with the (zero-point corrected) layer input; bias gradient = node gradient summed over
    positions. Per sample, int64: (N, weight_count), (N, channels)."""
    op, n = layer.op, a.shape[0]
    offset = -graph.tensor(op.inputs[0]).quant.scalar_zero_point
    w_shape = graph.tensor(layer.weights).shape
    x = a.astype(np.int64) + offset
    if op.type == "FULLY_CONNECTED":
        rows = x.reshape(n, -1, w_shape[1])
        gzr = gz.reshape(n, rows.shape[1], w_shape[0])
        return np.einsum("nro,nrc->noc", gzr, rows).reshape(n, -1), gzr.sum(axis=1)
    out_shape = graph.tensor(op.outputs[0]).shape
    gz = gz.reshape((n,) + tuple(out_shape[1:]))
    gw = np.zeros((n,) + tuple(w_shape), dtype=np.int64)
    mult = op.options.get("depth_multiplier", 1)
    for i, j, patch in tap_windows(x, op, w_shape[1], w_shape[2], out_shape[1], out_shape[2]):
        if op.type == "DEPTHWISE_CONV_2D":
            gw[:, 0, i, j, :] = (gz * np.repeat(patch, mult, axis=3)).sum(axis=(1, 2))
        else:
            gw[:, :, i, j, :] = np.einsum("nhwo,nhwc->noc", gz, patch)
    return gw.reshape(n, -1), gz.sum(axis=(1, 2))


def accumulate_int32(per_sample: np.ndarray) -> np.ndarray:
    """Each sample's int64 gradient saturated to int32, then summed with int32 saturation."""
    acc = np.zeros(per_sample.shape[1:], dtype=np.int64)
    for g in np.clip(per_sample, INT32_MIN, INT32_MAX):
        acc = np.clip(acc + g, INT32_MIN, INT32_MAX)
    return acc


def pre_activation(graph: Graph, layer: TrainableLayer, env: dict) -> np.ndarray:
    """z of the clean forward (``env`` holds its activations and the step's parameters): the
    layer's requantized output before the fused activation's clamp (int64, output shape)."""
    return wavefront.pre_activation(graph, layer.op_index, env).reshape(env[layer.output].shape)


def update_layer(plan: TrainingPlan, layer: TrainableLayer, params: Params,
                  grad: Gradient, eta_t: np.float32) -> None:
    coef = step_coefficient(eta_t, layer.gscale, plan.inv_nq)
    w = params[layer.weights]
    channel_of = (np.arange(layer.weight_count) // layer.channel_inner) % layer.channels
    raw = raw_deltas(coef, layer.weight_inv_s2, grad[0], channel_of)
    clipped = clipped_coefficient(coef, np.abs(raw).max(), plan.config.max_step)
    if clipped != coef:  # only a clipped update is computed again
        coef = clipped
        raw = raw_deltas(coef, layer.weight_inv_s2, grad[0], channel_of)
    deltas = round_half_away(raw)
    params[layer.weights] = apply_weights(w.reshape(-1), deltas).reshape(w.shape)
    if grad[1] is not None:
        deltas = update_deltas(coef, layer.bias_inv_s2, grad[1], np.arange(layer.channels))
        params[layer.bias] = apply_biases(params[layer.bias], deltas)


def update_biases(plan: TrainingPlan, layer: TrainableLayer, params: Params,
                  grad: np.ndarray, eta_t: np.float32) -> None:
    """CH: the per-channel biases from their gradient (int32); the weights stay."""
    coef = step_coefficient(eta_t, layer.gscale, plan.inv_nq)
    deltas = update_deltas(coef, layer.bias_inv_s2, grad, np.arange(layer.channels))
    params[layer.bias] = apply_biases(params[layer.bias], deltas)


def int8_update(layer: TrainableLayer, params: Params, grad: np.ndarray, bits: int,
                 halvings: int, seed: int) -> None:
    """G rounded to ``bits`` bits (one more bit of shift per guard halving), subtracted from
    the weights with int8 saturation; biases unchanged."""
    w = params[layer.weights]
    update = int8.round_to_bits(grad, bits, halvings, seed)
    params[layer.weights] = int8.apply_update(w.reshape(-1), update).reshape(w.shape)
