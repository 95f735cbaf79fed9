"""--input-quantize host: the host quantizes a float model input, the device takes int8.

Many int8 models start with QUANTIZE float32 -> int8. On the device the float input is four
times the bytes of the int8 tensor the first real layer reads (245 KB against 61 KB for a
128x160x3 image), and both exist while QUANTIZE runs. Doing that QUANTIZE on the host, with
the reference kernel (the one the C kernel is tested bit-exact against), gives the device the
int8 tensor directly and changes no result: the device's graph is the model without its
leading QUANTIZE ops.
"""
from __future__ import annotations

import numpy as np

from ..errors import UserError
from ..ir import Graph
from ..reference.executor import run


def _leading_quantizes(graph: Graph) -> dict[str, int]:
    """Float graph input -> index of the QUANTIZE op that is its only reader."""
    found = {}
    for name in graph.inputs:
        readers = [i for i, op in enumerate(graph.ops) if name in op.inputs]
        if (len(readers) == 1 and graph.ops[readers[0]].type == "QUANTIZE"
                and np.dtype(graph.tensors[name].dtype) == np.float32
                and name not in graph.outputs):
            found[name] = readers[0]
    return found


def host_quantizable(graph: Graph) -> bool:
    return bool(_leading_quantizes(graph))


def quantize_inputs_on_host(graph: Graph) -> Graph:
    """The graph the device runs: every float input read only by a QUANTIZE is replaced by
    that QUANTIZE's int8 output, and the QUANTIZE dropped."""
    leading = _leading_quantizes(graph)
    if not leading:
        raise UserError("--input-quantize host: no model input is float32 read only by a "
                        "QUANTIZE op; nothing to move to the host")
    replaced = {name: graph.ops[i].outputs[0] for name, i in leading.items()}
    drop = set(leading.values())
    return Graph(graph.name, graph.source_format,
                 {n: t for n, t in graph.tensors.items() if n not in replaced},
                 [op for i, op in enumerate(graph.ops) if i not in drop],
                 [replaced.get(n, n) for n in graph.inputs], list(graph.outputs))


def host_side_inputs(model: Graph, device: Graph,
                     sample: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One sample of ``model``'s inputs as the ``device`` graph takes them (QUANTIZE run on
    the host where the device graph starts after it)."""
    out = {}
    for name, device_name in zip(model.inputs, device.inputs):
        if device_name == name:
            out[name] = sample[name]
            continue
        op = next(op for op in model.ops if op.outputs[0] == device_name)
        single = Graph("host quantize", model.source_format,
                       {n: model.tensors[n] for n in (name, device_name)}, [op], [name],
                       [device_name])
        out[device_name] = run(single, {name: sample[name]})[device_name]
    return out
