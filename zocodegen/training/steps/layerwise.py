"""The layer-wise step the WP, NP, adaptive and INT8 estimators share (Algorithm 1): each
trained layer's Q queries, perturbing its weights (WP, INT8) or its pre-activations (NP),
then its update; its row's ``layer_mode`` decides which, layer by layer."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...ir import Graph
from ...reference.common import output_range
from .. import int8, scales, wavefront
from ..prng import sample_seed, step_seed
from ..step_parts import (Params, StepBatch, accumulate_int32, int8_update, loss_differences,
                          losses_q16, node_to_parameter_gradient, perturbed_weights,
                          pre_activation, tile, update_biases, update_layer, wp_gradient,
                          wp_perturbations)
from ..update import step_coefficient

if TYPE_CHECKING:
    from ..plan_types import TrainableLayer, TrainingPlan


@dataclass(frozen=True)
class _LayerQueries:
    """One layer's estimate between its query forwards and its update: the perturbed copies
    (a wavefront group) and what the gradient needs besides their losses."""

    layer: TrainableLayer
    seed: int
    group: wavefront.QueryGroup
    perturbations: np.ndarray  # WP: xi (Q, d_w); INT8: z (Q, d_w); NP: xi (Q, N, d_a);
    # CH: xi (Q, N, channels)
    z: np.ndarray | None = None  # NP: the clean pre-activations (N, d_a)
    scale_xi: np.ndarray | None = None  # CH --scales: xi' (Q, N, channels)
    squares: np.ndarray | None = None  # CH --scales: sum of (h(z) - zp)^2 per channel


def _layer_queries(graph: Graph, plan: TrainingPlan, layer: TrainableLayer, params: Params,
                   env: dict, n: int, t: int) -> _LayerQueries:
    """WP: the weights plus each xi_q (and minus, --two-sided); INT8: plus and minus each
    z_q (ElasticZO-INT8's two-point estimate, training/int8.py); NP as the paper writes it
    (Eq. 9/10): the next layer sees h(z + xi) with z the pre-activation and h the fused
    activation's clamp, each sample with its own xi (Alg. 1's xi_{q,n})."""
    cfg = plan.config
    seed = step_seed(plan.seed, t, layer.index)
    if layer.mode in ("WP", "INT8"):
        if layer.mode == "INT8":
            xi = int8.perturbations(seed, cfg.queries, layer.weight_count, cfg.r_max,
                                    int8.p_zero_q16(cfg.p_zero, t, cfg.steps))
        else:
            xi = wp_perturbations(plan, layer, seed)
        both = np.concatenate([xi, -xi]) if cfg.two_sided or layer.mode == "INT8" else xi
        group = wavefront.QueryGroup(layer.op_index,
                                     weights=perturbed_weights(layer, params, both))
        return _LayerQueries(layer, seed, group, xi)
    lo, hi = output_range(graph, layer.op)
    z = pre_activation(graph, layer, env).reshape(n, -1)
    width = layer.channels if layer.mode == "CH" else layer.output_count
    draws = (2 if layer.scaled else 1) * cfg.queries  # --scales: xi' after the Q xi
    xi = np.stack([plan.perturbation.values(sample_seed(seed, k), draws * width,
                                            layer.perturb_shift)
                   .reshape(draws, width) for k in range(n)], axis=1)
    xi, scale_xi = xi[:cfg.queries], xi[cfg.queries:]
    # CH: every position of channel c moves by the same xi_c (channels are innermost)
    tiles = layer.output_count // width
    shift = np.tile(xi, tiles).astype(np.int64)
    signs = (1, -1) if cfg.two_sided else (1,)
    squares = None
    if layer.scaled:  # plus round(xi'_c (h(z) - zp) / 2^SHIFT), from h(z) as C has it
        centered = np.clip(z, lo, hi) - graph.tensor(layer.output).quant.scalar_zero_point
        term = scales.node_term(centered[None], np.tile(scale_xi, tiles))
        squares = (centered.reshape(-1, width) ** 2).sum(axis=0)
        nodes = np.concatenate([np.clip(np.clip(z[None] + sign * shift, lo, hi) + sign * term,
                                        lo, hi).astype(np.int8) for sign in signs])
    else:
        nodes = np.concatenate([np.clip(z[None] + sign * shift, lo, hi).astype(np.int8)
                                for sign in signs])
    group = wavefront.QueryGroup(layer.op_index, nodes=nodes.reshape(
        (-1,) + env[layer.output].shape[1:]))
    return _LayerQueries(layer, seed, group, xi, z, scale_xi if layer.scaled else None,
                         squares)


def _finish_layer(graph: Graph, plan: TrainingPlan, queries: _LayerQueries, params: Params,
                  env: dict, losses: np.ndarray, clean: np.ndarray, eta_t: np.float32,
                  halvings: int, record: dict | None) -> None:
    """The layer's gradient from its copies' Q16 losses (V, N), and its update. WP: D_q, the
    batch's summed loss differences l(theta + xi_q) - l (or - l(theta - xi_q)), all a WP
    update depends on with the seed (replay.py); INT8: G_j = sum_q sgn(D_q) z_qj; NP: the
    node gradient, kept only where h passes both z - 1 and z + 1 (h'(z) = 1)."""
    layer, cfg = queries.layer, plan.config
    count = len(queries.perturbations)
    if layer.mode == "INT8":
        sums = loss_differences(plan, losses[:count], losses[count:]).sum(axis=1)
        int8_update(layer, params, int8.sign_gradient(queries.perturbations, sums),
                     cfg.b_zo, halvings, queries.seed)
        return
    diffs = loss_differences(plan, losses[:count], losses[count:] if cfg.two_sided else clean)
    if layer.mode == "CH":  # the per-channel bias gradient: sum_q D_qn xi_qnc per sample
        gb = np.einsum("qn,qnc->nc", diffs, queries.perturbations.astype(np.int64))
        update_biases(plan, layer, params, accumulate_int32(gb), eta_t)
        if layer.scaled:  # and the scales from the same queries: sum_q D_qn xi'_qnc
            gs = np.einsum("qn,qnc->nc", diffs, queries.scale_xi.astype(np.int64))
            name = scales.key(layer.weights)
            params[name] = scales.updated(
                graph, layer, params[name], step_coefficient(eta_t, layer.gscale, plan.inv_nq),
                accumulate_int32(gs), queries.squares, layer.output_count // layer.channels
                * len(diffs[0]))
        return
    if layer.mode == "WP":
        sums = diffs.sum(axis=1)
        if record is not None:
            record[layer.index] = sums.astype(np.int32)
        grad = wp_gradient(queries.perturbations, sums)
    else:
        lo, hi = output_range(graph, layer.op)
        z = queries.z
        gz = (np.einsum("qn,qnd->nd", diffs, queries.perturbations.astype(np.int64))
              * ((z > lo) & (z < hi)))
        gw, gb = node_to_parameter_gradient(graph, layer, env[layer.input], gz)
        grad = accumulate_int32(gw), (accumulate_int32(gb) if layer.bias else None)
    update_layer(plan, layer, params, grad, eta_t)


def step(graph: Graph, plan: TrainingPlan, params: Params, batch: StepBatch) -> None:
    """Every ZO layer's estimate and update (Algorithm 1), the query forwards of as many
    layers at once as a wavefront holds."""
    env, labels, t = batch.env, batch.labels, batch.t
    n, layers = len(labels), plan.zo_layers
    rows = plan.sides * plan.config.queries * n
    first = 0
    for size in wavefront.waves(graph, plan, [(layer.op_index, rows) for layer in layers]):
        wave = [_layer_queries(graph, plan, layer, params, env, n, t)
                for layer in layers[first:first + size]]
        logits, where = wavefront.query_logits(graph, plan, env, n, [q.group for q in wave])
        losses = losses_q16(plan, logits, tile(labels, len(logits) // n))
        for queries, part in zip(wave, where):
            _finish_layer(graph, plan, queries, params, env, losses[part].reshape(-1, n),
                          batch.clean, batch.eta_t, batch.halvings, batch.record)
        first += size
