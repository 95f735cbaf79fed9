"""Runs an IR graph with the numpy reference kernels: the golden model every other engine
(TFLite interpreter, generated C on host and on Cortex-M7) is compared against."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..ir import Graph
from ..ops.table import OPS


def run(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the whole graph on one sample (batch dimension included, usually 1)."""
    values = run_all(graph, inputs)
    return {name: values[name] for name in graph.outputs}


def run_all(graph: Graph, inputs: Mapping[str, np.ndarray], start: int = 0,
            values: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Run ops ``start..end`` and return every tensor value computed.

    ``values`` seeds the environment (e.g. the activations of a previous run), which is how
    training re-runs the network from layer *i* onward without recomputing the prefix.
    """
    env: dict[str, np.ndarray] = dict(values or {})
    for name, value in inputs.items():
        tensor = graph.tensor(name)
        env[name] = np.asarray(value, dtype=tensor.dtype).reshape(tensor.shape)
    for op in graph.ops[start:]:
        args = [None if not n else env[n] if n in env else graph.tensor(n).data
                for n in op.inputs]
        results = OPS[op.type].reference(op, graph, args)
        for name, result in zip(op.outputs, results):
            tensor = graph.tensor(name)
            env[name] = result.astype(tensor.dtype, copy=False).reshape(tensor.shape)
    return env
