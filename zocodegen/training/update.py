"""The parameter update and the learning-rate schedule in float32, operation by operation
as the C engine does them (``templates/train/zo_update.c``, built with -ffp-contract=off), so
the simulator and every target round identically. Rules: docs/training.md."""
from __future__ import annotations

import numpy as np

F32 = np.float32
PI_F32 = F32(np.pi)
#: Taylor coefficients of sin(y) = y (1 + y^2 (c3 + y^2 (c5 + ...))), float32; |y| <= pi/2.
SIN_COEFFS = tuple(F32(c) for c in (-1 / 6, 1 / 120, -1 / 5040, 1 / 362880, -1 / 39916800))
Q16_ONE = F32(1.0 / 65536.0)
#: |rounded update| is clamped here before the integer conversion (int32-safe).
UPDATE_LIMIT = 1 << 30
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def sin_poly(y: np.float32) -> np.float32:
    """sin on [-pi/2, pi/2] by Horner in y^2, float32 at every step (error < 1e-6)."""
    y = F32(y)
    y2 = F32(y * y)
    acc = SIN_COEFFS[-1]
    for c in reversed(SIN_COEFFS[:-1]):
        acc = F32(c + F32(y2 * acc))
    return F32(y * F32(F32(1.0) + F32(y2 * acc)))


def learning_rate(lr: float, step: int, steps: int, schedule: str) -> np.float32:
    """eta_t: cosine ``eta (1 + cos(pi t / T)) / 2`` as ``eta (1 - sin((t/T - 1/2) pi)) / 2``
    with the polynomial above, or constant."""
    eta = F32(lr)
    if schedule == "constant":
        return eta
    u = F32(F32(step) / F32(steps))
    y = F32(F32(u - F32(0.5)) * PI_F32)
    return F32(eta * F32(F32(0.5) * F32(F32(1.0) - sin_poly(y))))


def round_half_away(x: np.ndarray) -> np.ndarray:
    """float32 -> int64, half away from zero, exactly: truncate, then compare the (exact)
    fractional part with 1/2. Values beyond +-2**30 are clamped first."""
    x = np.clip(np.asarray(x, dtype=F32), F32(-UPDATE_LIMIT), F32(UPDATE_LIMIT))
    r = np.trunc(x).astype(np.int64)
    frac = (x - r.astype(F32)).astype(F32)
    return r + (frac >= F32(0.5)) - (frac <= F32(-0.5))


def step_coefficient(eta_t: np.float32, gscale: np.float32, inv_nq: np.float32) -> np.float32:
    """coef = (eta_t * g_i) * 1/(N Q)."""
    return F32(F32(eta_t * gscale) * inv_nq)


def raw_deltas(coef: np.float32, inv_s2: np.ndarray, grad: np.ndarray,
               channel_of: np.ndarray) -> np.ndarray:
    """coef * inv_s2[c] * (float)g * 2^-16 per parameter, float32 before rounding. ``grad``
    is the integer gradient, saturated to int32 first; ``channel_of`` maps parameter ->
    channel."""
    g = np.clip(np.asarray(grad, dtype=np.int64), INT32_MIN, INT32_MAX).astype(F32)
    coef_c = (coef * inv_s2.astype(F32)).astype(F32)[channel_of]
    return ((coef_c * g).astype(F32) * Q16_ONE).astype(F32)


def update_deltas(coef: np.float32, inv_s2: np.ndarray, grad: np.ndarray,
                  channel_of: np.ndarray) -> np.ndarray:
    """round(coef * inv_s2[c] * (float)g * 2^-16) per parameter (int64)."""
    return round_half_away(raw_deltas(coef, inv_s2, grad, channel_of))


def clipped_coefficient(coef: np.float32, largest: np.float32, max_step: float) -> np.float32:
    """Update clipping (docs/training.md): when the layer's largest weight step would exceed
    ``max_step`` LSB, the whole update (weights and biases) is scaled down to it, keeping
    its direction: coef * (max_step / largest) in float32. 0 turns it off."""
    limit = F32(max_step)
    if limit > 0 and F32(largest) > limit:
        return F32(coef * F32(limit / F32(largest)))
    return coef


def apply_weights(weights: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    return np.clip(weights.astype(np.int64) - deltas, -128, 127).astype(np.int8)


def apply_biases(bias: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    return np.clip(bias.astype(np.int64) - deltas, INT32_MIN, INT32_MAX).astype(np.int32)
