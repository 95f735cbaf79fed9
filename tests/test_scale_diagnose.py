"""benchmarks/scale_diagnose.py's reference gradient (docs/scale.md section 10): the
product's integer back-propagation with the fixed point removed agrees with the product's
own on the logits layer, and the product's functions are back in place afterwards."""
from __future__ import annotations

import importlib.util
import sys

import numpy as np

from conftest import REPO
from zocodegen.training import backprop as bp


def test_exact_reference_matches_the_integer_backprop_and_restores_it():
    spec = importlib.util.spec_from_file_location("scale_diagnose", REPO / "benchmarks" /
                                                  "scale_diagnose.py")
    sd = importlib.util.module_from_spec(spec)
    sys.modules["scale_diagnose"] = sd
    try:
        spec.loader.exec_module(sd)
        graph = sd.load_model(sd.MODEL)
        plan = sd.training_plans(graph, sd.TrainConfig(queries=2, bp_layers=1))[0]
        params = sd.simulator.initial_params(graph, plan)
        x = np.random.default_rng(0).integers(-128, 128, (1, *graph.tensor(
            graph.inputs[0]).shape[1:]), dtype=np.int8)
        labels = np.array([3])
        saved = bp._mbqm, bp._sat32, bp.softmax_gradient_q24
        ref = sd.Reference(graph, plan)
        env = ref.env(params, x)
        exact = ref.gradients(params, x, labels, env)
        assert (bp._mbqm, bp._sat32, bp.softmax_gradient_q24) == saved
        head = plan.bp_layers[0]
        nodes = bp.node_gradients(graph, plan.head, env, params, labels, plan.logits,
                                  plan.loss_params, (head.op_index,))
        gw, _ = sd.step_parts.node_to_parameter_gradient(graph, head, env[head.input],
                                                         nodes[head.op_index])
        per_lsb = gw.sum(axis=0) * sd.chain(graph, head)[sd.channel_of(head)]
        assert sd.cosine(exact[head.index][0], per_lsb) > 0.995
    finally:
        del sys.modules["scale_diagnose"]
