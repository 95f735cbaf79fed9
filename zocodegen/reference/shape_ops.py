"""Data-movement ops: PAD, RESHAPE, TRANSPOSE, CONCATENATION, RESIZE_NEAREST_NEIGHBOR.

They never change quantization, except CONCATENATION of inputs whose scale differs from the
output's (possible in ONNX graphs; TFLite's int8 kernel requires equal parameters), where each
such input is requantized exactly like an int8->int8 QUANTIZE.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Op
from .common import clamp_to_int8, in_quant, out_quant, output_range
from .quantize import requantize_int8


def pad(op: Op, graph: Graph, args: list) -> list[np.ndarray]:
    """Pads with the output zero point: a real zero (TFLite PAD)."""
    return [np.pad(args[0], op.options["paddings"],
                   constant_values=out_quant(graph, op).scalar_zero_point)]


def reshape(op: Op, graph: Graph, args: list) -> list[np.ndarray]:
    """Keeps a leading batch axis larger than the graph's (batched training simulation)."""
    shape = graph.tensor(op.outputs[0]).shape
    x = args[0]
    if shape and x.ndim and shape[0] == 1 and x.shape[0] > 1:
        shape = (x.shape[0],) + tuple(shape[1:])
    return [x.reshape(shape)]


def transpose(op: Op, graph: Graph, args: list) -> list[np.ndarray]:
    return [np.transpose(args[0], op.options["perm"])]


def concatenation(op: Op, graph: Graph, args: list) -> list[np.ndarray]:
    qo = out_quant(graph, op)
    parts = []
    for k, x in enumerate(args):
        qi = in_quant(graph, op, k)
        same = (qi.scalar_scale == qo.scalar_scale
                and qi.scalar_zero_point == qo.scalar_zero_point)
        parts.append(x if same else requantize_int8(x, qi, qo))
    lo, hi = output_range(graph, op)
    return [clamp_to_int8(np.concatenate(parts, axis=op.options["axis"]), lo, hi)]


def nearest_indices(in_size: int, out_size: int, align_corners: bool,
                    half_pixel_centers: bool) -> np.ndarray:
    """Source index per output index, TFLite ``GetNearestNeighbor`` in float32."""
    if align_corners and out_size > 1:
        scale = np.float32(in_size - 1) / np.float32(out_size - 1)
    else:
        scale = np.float32(in_size) / np.float32(out_size)
    offset = np.float32(0.5 if half_pixel_centers else 0.0)
    pos = (np.arange(out_size, dtype=np.float32) + offset) * scale
    pos64 = pos.astype(np.float64)
    if align_corners:
        idx = np.sign(pos64) * np.floor(np.abs(pos64) + 0.5)
    else:
        idx = np.floor(pos64)
    idx = np.minimum(idx.astype(np.int64), in_size - 1)
    return np.maximum(idx, 0) if half_pixel_centers else idx


def resize_nearest_neighbor(op: Op, graph: Graph, args: list) -> list[np.ndarray]:
    x = args[0]
    _, out_h, out_w, _ = graph.tensor(op.outputs[0]).shape
    ac, hp = op.options["align_corners"], op.options["half_pixel_centers"]
    rows = nearest_indices(x.shape[1], out_h, ac, hp)
    cols = nearest_indices(x.shape[2], out_w, ac, hp)
    return [x[:, rows][:, :, cols]]
