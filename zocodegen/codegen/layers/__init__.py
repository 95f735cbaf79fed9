"""The one table mapping IR op types to their C layer generators (one module per op family).

Every generator has the same signature, ``generator(op, ctx) -> LayerCode``: it decides which
portable kernel to call and with which parameters, all derived by the same pure functions the
numpy reference uses, so the C and the reference cannot drift apart.
"""
from __future__ import annotations

from collections.abc import Callable

from ...ir import Op
from . import conv, elementwise, pooling, quantize, shape, softmax
from .common import Call, ConstArray, LayerCode, LayerContext, c_identifier

LayerGenerator = Callable[[Op, LayerContext], LayerCode]

LAYERS: dict[str, LayerGenerator] = {
    "CONV_2D": conv.conv_2d,
    "DEPTHWISE_CONV_2D": conv.conv_2d,
    "FULLY_CONNECTED": conv.fully_connected,
    "ADD": elementwise.add,
    "MUL": elementwise.mul,
    "AVERAGE_POOL_2D": pooling.pool_2d,
    "MAX_POOL_2D": pooling.pool_2d,
    "MEAN": pooling.mean,
    "PAD": shape.pad,
    "RESHAPE": shape.reshape,
    "TRANSPOSE": shape.transpose,
    "CONCATENATION": shape.concatenation,
    "SOFTMAX": softmax.softmax,
    "LOG_SOFTMAX": softmax.softmax,
    "RESIZE_NEAREST_NEIGHBOR": shape.resize_nearest_neighbor,
    "QUANTIZE": quantize.quantize,
    "DEQUANTIZE": quantize.dequantize,
}

__all__ = ["LAYERS", "Call", "ConstArray", "LayerCode", "LayerContext", "c_identifier"]
