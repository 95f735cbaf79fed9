"""Where a convolution's filter taps meet its input, for the fast kernels (reference/fast.py):
the output range each tap reaches, and the matrices that turn a depthwise convolution into
products (one per channel over all position pairs, or one per filter row with a banded
matrix along the width)."""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..ir import Op

#: A tap-by-tap multiply-add costs about this many multiply-adds of a product.
DEPTHWISE_TAP_COST = 24


def tap_range(tap: int, size: int, out_size: int, op: Op, axis: int
               ) -> tuple[int, int, slice] | None:
    """Outputs [o0, o1) along spatial ``axis`` whose input under ``tap`` is inside the
    tensor, and that input's slice; None when there are none."""
    stride, dilation = op.options["stride"][axis], op.options["dilation"][axis]
    offset = tap * dilation - op.options["padding"][2 * axis]  # input index of output 0
    o0 = max(0, -(offset // stride))
    o1 = min(out_size, (size - 1 - offset) // stride + 1)
    if o1 <= o0:
        return None
    start = o0 * stride + offset
    return o0, o1, slice(start, start + (o1 - o0 - 1) * stride + 1, stride)


def tap_windows(op: Op, kh: int, kw: int, in_hw: tuple[int, int], out_hw: tuple[int, int]
                ) -> Iterator[tuple[int, int, slice, slice, slice, slice]]:
    """(i, j, output rows, output columns, input rows, input columns) of every filter tap
    (i, j) that reaches the input: the window of outputs it contributes to and the input
    under it."""
    for i in range(kh):
        rows = tap_range(i, in_hw[0], out_hw[0], op, 0)
        if rows is None:
            continue
        for j in range(kw):
            cols = tap_range(j, in_hw[1], out_hw[1], op, 1)
            if cols is not None:
                (h0, h1, src_h), (w0, w1, src_w) = rows, cols
                yield i, j, slice(h0, h1), slice(w0, w1), src_h, src_w


def depthwise_form(op: Op, in_shape: tuple, out_shape: tuple, w_shape: tuple
                    ) -> tuple[str, np.ndarray | None]:
    """How a depthwise convolution is computed: as one product per channel over all position
    pairs ("dense", index: the tap per (input, output) position pair), as products per
    filter row with a banded matrix along the width ("banded", index: the filter column per
    (input, output) column), or tap by tap ("taps"), whichever costs least. Costs in
    multiply-adds of the products, the banded ones (KH small products) counted twice, the
    element-wise passes of the taps DEPTHWISE_TAP_COST times."""
    _, kh, kw, _ = w_shape
    dense = _tap_matrix(op, in_shape, out_shape, w_shape)
    banded = _band_matrix(op, in_shape[2], out_shape[2], kw)
    costs = {"dense": dense.size, "banded": 2 * kh * out_shape[1] * banded.size,
             "taps": DEPTHWISE_TAP_COST * int((dense < kh * kw).sum())}
    form = min(costs, key=costs.get)
    return form, {"dense": dense, "banded": banded, "taps": None}[form]


def _band_matrix(op: Op, in_w: int, out_w: int, kw: int) -> np.ndarray:
    """(W_in, W_out): the filter column j joining input and output column, or KW."""
    index = np.full((in_w, out_w), kw, dtype=np.intp)
    for j in range(kw):
        cols = tap_range(j, in_w, out_w, op, 1)
        if cols is not None:
            w0, w1, src_w = cols
            index[np.arange(in_w)[src_w], np.arange(w0, w1)] = j
    return index


def _tap_matrix(op: Op, in_shape: tuple, out_shape: tuple, w_shape: tuple) -> np.ndarray:
    """(H_in W_in, H_out W_out): the tap i KW + j joining input and output position, or
    KH KW (a zero weight) where none does."""
    _, kh, kw, _ = w_shape
    (_, in_h, in_w, _), (_, out_h, out_w, _) = in_shape, out_shape
    index = np.full((in_h, in_w, out_h, out_w), kh * kw, dtype=np.intp)
    for i in range(kh):
        rows = tap_range(i, in_h, out_h, op, 0)
        for j in range(kw):
            cols = tap_range(j, in_w, out_w, op, 1)
            if rows is not None and cols is not None:
                (h0, h1, src_h), (w0, w1, src_w) = rows, cols
                out_rows, out_cols = np.arange(h0, h1), np.arange(w0, w1)
                in_rows = np.arange(in_h)[src_h]
                in_cols = np.arange(in_w)[src_w]
                index[in_rows[:, None], in_cols[None, :], out_rows[:, None],
                      out_cols[None, :]] = i * kw + j
    return index.reshape(in_h * in_w, out_h * out_w)
