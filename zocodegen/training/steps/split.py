"""The split perturbation's simulated step (--estimator split, its row and options in
estimators/split.py; FedSPZO, docs/training.md "Split perturbation")."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ir import Graph
from ..prng import step_seed
from ..step_parts import (Params, StepBatch, forward, losses_q16, perturbed_params, tile,
                          update_layer, wp_gradient, wp_perturbations)

if TYPE_CHECKING:
    from ..plan_types import TrainingPlan


def step(graph: Graph, plan: TrainingPlan, params: Params, batch: StepBatch) -> None:
    """FedSPZO's split perturbation (Alg. 2, Eqs. 2-4) in integers: for each of the P_1
    block-1 directions z1 and each side, block 1 runs once with theta_1 +- z1, then block 2
    runs 2 P_s times on that output with theta_2 +- z2_j (fresh z2 per side). Block 2's sums
    D2_j = sum_n clamp(l+ - l-); block 1's D1_p = sum_n clamp(sum of the 2 P_s losses on
    the + side - those on the - side). Each layer then updates as WP with its block's
    perturbations (z1_p: chunk p of S(t, i); z2_f: chunk f = (2p + side) P_s + j) and sums."""
    env, labels, t, eta_t, record = batch.env, batch.labels, batch.t, batch.eta_t, batch.record
    cfg = plan.config
    n, ps = len(labels), cfg.inner_queries
    block1, block2 = plan.layers[:plan.split], plan.layers[plan.split:]
    xi = {layer.index: wp_perturbations(plan, layer, step_seed(plan.seed, t, layer.index))
          for layer in plan.layers}
    cut = block2[0]
    start = {name: env[name] for name in block1[0].crossing}
    start.update(params)
    d1 = np.zeros(cfg.queries, dtype=np.int64)
    d2 = np.zeros(plan.inner_perturbations, dtype=np.int64)
    for p in range(cfg.queries):
        side_losses = []
        for side, sign in enumerate((1, -1)):
            first = dict(start)
            for layer in block1:
                first.update(perturbed_params(layer, params, sign * xi[layer.index][p:p + 1]))
            out = forward(graph, first, block1[0].op_index, cut.op_index - 1, cut.crossing)
            f = (2 * p + side) * ps
            second = {name: tile(out[name], 2 * ps) for name in cut.crossing}
            second.update(params)
            for layer in block2:
                z = xi[layer.index][f:f + ps]
                second.update(perturbed_params(layer, params, np.concatenate([z, -z])))
            logits = forward(graph, second, cut.op_index, plan.logits_op,
                             (plan.logits,))[plan.logits]
            losses = losses_q16(plan, logits, tile(labels, 2 * ps)).reshape(2 * ps, n)
            d2[f:f + ps] = np.clip(losses[:ps] - losses[ps:], -plan.diff_limit,
                                   plan.diff_limit).sum(axis=1)
            side_losses.append(losses.sum(axis=0))
        d1[p] = np.clip(side_losses[0] - side_losses[1], -plan.block1_diff_limit,
                        plan.block1_diff_limit).sum()
    if record is not None:
        record[block1[0].index], record[cut.index] = d1.astype(np.int32), d2.astype(np.int32)
    for position, layer in enumerate(plan.layers):
        sums = d1 if position < plan.split else d2
        update_layer(plan, layer, params, wp_gradient(xi[layer.index], sums), eta_t)
