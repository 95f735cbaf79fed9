"""MeZO's simulated step (--estimator mezo, its row in estimators/mezo.py): two-point SPSA of
the whole model (MeZO, Alg. 1), Q L / 2 queries of two full forwards."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ir import Graph
from ..prng import step_seed
from ..step_parts import (Params, StepBatch, forward, loss_differences, losses_q16,
                          perturbed_params, tile, update_layer)

if TYPE_CHECKING:
    from ..plan_types import TrainingPlan


def step(graph: Graph, plan: TrainingPlan, params: Params, batch: StepBatch) -> None:
    """MeZO as MeZO is (two-point SPSA, model-wise): one stream S(t, 0) over all trainable
    weights; per query the loss at theta + xi and at theta - xi (int8 saturation), two full
    forwards; g = sum_q (l+ - l-) xi, divided by 2 N Q through plan.inv_nq."""
    xs, labels, t, eta_t = batch.xs, batch.labels, batch.t, batch.eta_t
    q, n = plan.queries_per_step, len(labels)
    total = sum(layer.weight_count for layer in plan.zo_layers)
    xi = plan.perturbation.values(step_seed(plan.seed, t, 0), q * total,
                                  plan.perturbation.layer_shift(total)).reshape(q, total)
    losses = []
    for sign in (1, -1):
        env = {graph.inputs[0]: tile(xs, q)}
        env.update(params)
        pos = 0
        for layer in plan.zo_layers:
            env.update(perturbed_params(layer, params,
                                         sign * xi[:, pos:pos + layer.weight_count]))
            pos += layer.weight_count
        out = forward(graph, env, 0, plan.logits_op, (plan.logits,))
        losses.append(losses_q16(plan, out[plan.logits], tile(labels, q)).reshape(q, n))
    d = loss_differences(plan, losses[0], losses[1]).sum(axis=1)
    grad = d @ xi.astype(np.int64)
    pos = 0
    for layer in plan.zo_layers:
        update_layer(plan, layer, params, (grad[pos:pos + layer.weight_count], None), eta_t)
        pos += layer.weight_count
