"""Requantization primitives against a plain-integer transcription of their definitions."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings, strategies as st

from zocodegen.numerics import (activation_range, multiply_by_quantized_multiplier,
                                multiply_by_quantized_multiplier_single_round,
                                quantize_multiplier)


def _srdhm(a: int, b: int) -> int:
    if a == b == -(1 << 31):
        return (1 << 31) - 1
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    q = abs(ab + nudge) // (1 << 31)  # C division truncates toward zero
    return q if ab + nudge >= 0 else -q


def _rdbp(x: int, e: int) -> int:
    mask = (1 << e) - 1
    rem, thr = x & mask, (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if rem > thr else 0)


def test_quantize_multiplier_known_values():
    assert quantize_multiplier(0.5) == (1 << 30, 0)
    assert quantize_multiplier(1.0) == (1 << 30, 1)
    assert quantize_multiplier(0.0) == (0, 0)
    m, e = quantize_multiplier(0.0037)
    assert abs(m * 2.0 ** (e - 31) - 0.0037) < 1e-12
    # mantissa rounding up to 2**31 renormalises
    assert quantize_multiplier(1 - 2 ** -40) == (1 << 30, 1)


@settings(max_examples=300, deadline=None)
@given(x=st.integers(-(1 << 31), (1 << 31) - 1),
       real=st.floats(1e-6, 0.999, allow_nan=False))
def test_mbqm_matches_integer_definition(x, real):
    m, e = quantize_multiplier(real)
    assert e <= 0
    expected = _rdbp(_srdhm(x, m), -e)
    assert int(multiply_by_quantized_multiplier(np.array([x]), m, e)[0]) == expected


@settings(max_examples=300, deadline=None)
@given(x=st.integers(-(1 << 24), 1 << 24), real=st.floats(1e-6, 0.999, allow_nan=False))
def test_single_rounding_is_nearest_half_up(x, real):
    m, e = quantize_multiplier(real)
    exact = x * m / 2.0 ** (31 - e)
    got = int(multiply_by_quantized_multiplier_single_round(np.array([x]), m, e)[0])
    assert got == math.floor(exact + 0.5)


def test_activation_ranges():
    assert activation_range("NONE", 0.1, 3) == (-128, 127)
    assert activation_range("RELU", 0.1, -5) == (-5, 127)
    assert activation_range("RELU6", 0.05, -128) == (-128, -8)
