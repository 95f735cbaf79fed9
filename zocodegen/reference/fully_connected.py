"""FULLY_CONNECTED, TFLite ``reference_integer_ops::FullyConnected`` (per-tensor or
per-channel): rows of the input (flattened to ``[-1, C_in]``) times ``W[C_out, C_in]^T``,
plus bias, requantized like a convolution but with single rounding (see ``numerics``)."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Op
from .common import clamp_to_int8, output_range
from .conv import pre_activation, requant_params, with_bias


def fc_accumulators(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
                    input_offset: int) -> np.ndarray:
    """int64 accumulators, rows x C_out. A 3-D ``w`` (and 2-D ``bias``) holds one weight set
    per batch row of ``x`` (the training simulator's perturbed copies); the result is then
    batch x rows-per-sample x C_out."""
    if w.ndim == 3:
        rows = x.reshape(w.shape[0], -1, w.shape[2]).astype(np.float64) + input_offset
        acc = np.einsum("brc,boc->bro", rows, w.astype(np.float64))
        return with_bias(acc.astype(np.int64), bias)
    rows = x.reshape(-1, w.shape[1]).astype(np.float64) + input_offset
    return with_bias((rows @ w.astype(np.float64).T).astype(np.int64), bias)


def fully_connected_pre_activation(op: Op, graph: Graph, args: list) -> np.ndarray:
    """FULLY_CONNECTED up to z (before the activation clamp), int64."""
    x, w = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    p = requant_params(graph, op)
    return pre_activation(fc_accumulators(x, w, bias, p.input_offset), p, single_rounding=True)


def fully_connected(op: Op, graph: Graph, args: list) -> list[np.ndarray]:
    lo, hi = output_range(graph, op)
    return [clamp_to_int8(fully_connected_pre_activation(op, graph, args), lo, hi)]
