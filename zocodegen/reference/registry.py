"""The one table mapping IR op types to their reference kernels.

Every kernel has the same signature (CMSIS-NN style uniformity):
``kernel(op, graph, args) -> list of output arrays`` where ``args`` are the input values in
``op.inputs`` order (``None`` for an absent optional input) and quantization parameters are
read from ``graph.tensor(name).quant``.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..ir import Graph, Op
from . import conv, elementwise, fully_connected, pooling, quantize, shape_ops, softmax

Kernel = Callable[[Op, Graph, list], list[np.ndarray]]

KERNELS: dict[str, Kernel] = {
    "CONV_2D": conv.conv_2d,
    "DEPTHWISE_CONV_2D": conv.conv_2d,
    "FULLY_CONNECTED": fully_connected.fully_connected,
    "ADD": elementwise.add,
    "MUL": elementwise.mul,
    "AVERAGE_POOL_2D": pooling.average_pool_2d,
    "MAX_POOL_2D": pooling.max_pool_2d,
    "MEAN": pooling.mean,
    "PAD": shape_ops.pad,
    "RESHAPE": shape_ops.reshape,
    "TRANSPOSE": shape_ops.transpose,
    "CONCATENATION": shape_ops.concatenation,
    "SOFTMAX": softmax.softmax,
    "LOG_SOFTMAX": softmax.log_softmax,
    "RESIZE_NEAREST_NEIGHBOR": shape_ops.resize_nearest_neighbor,
    "QUANTIZE": quantize.quantize,
    "DEQUANTIZE": quantize.dequantize,
}

#: The trainable ops up to their pre-activation z (int64, before the fused activation's
#: clamp): what node perturbation perturbs (docs/training.md).
PRE_ACTIVATION: dict[str, Callable[[Op, Graph, list], np.ndarray]] = {
    "CONV_2D": conv.conv_2d_pre_activation,
    "DEPTHWISE_CONV_2D": conv.conv_2d_pre_activation,
    "FULLY_CONNECTED": fully_connected.fully_connected_pre_activation,
}
