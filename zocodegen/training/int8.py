"""ElasticZO-INT8 (paper Alg. 2, Sec. 4.2-4.3): the integer-only estimator for cores without
an FPU (``--estimator int8``). Rules and their reasons: docs/training.md "Integer-only
training"; C twin: templates/train/zo_estimate_int8.c.

Per trainable layer i, step t, query q (layer-wise, like WP: perturbed copies restored
exactly from a backup):
  * z = m * u, drawn from query q's own XORShift32 stream (``query_seed(S(t, i), q)``): one
    32-bit draw x per weight, u = ((x >> 16) (2 r + 1) >> 16) - r, uniform on [-r, r];
    m = [(x & 0xFFFF) >= p_zero Q16], Bernoulli(1 - p_zero). One stream per query lets the
    device rebuild G_j weight by weight from Q generator states, so it never stores G;
  * the losses at theta + z and theta - z (int8 saturation), from layer i, in Q16; per query
    D_q = sum over the batch of the clamped differences, g_q = sgn(D_q) (Alg. 2 line 8);
  * G_j = sum_q g_q z_qj, int32;
  * the update is G rounded to b bits (``round_to_bits``) and subtracted with int8
    saturation: weights only (the int32 biases keep their values).
BP layers (--bp-layers) take their exact Q16 gradient through the same rounding to b_BP bits.
No floating point anywhere: p_zero is a Q16 threshold fixed at build time, the guard's
"halve eta" is one more bit of right shift.
"""
from __future__ import annotations

import numpy as np

from .prng import MASK32, ZERO_SEED_REPLACEMENT, draws, fmix32

P_ZERO_SCHEDULE = (0.33, 0.5, 0.9)  # the paper's p_zero (Sec. 5.1.1), raised at 20 % and 50 %
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def q16(probability: float) -> int:
    """A probability as the Q16 threshold the mask compares against (0..65536)."""
    return int(round(probability * 65536))


def p_zero_q16(p_zero: float | None, step: int, steps: int) -> int:
    """p_zero of step t: the fixed --p-zero, or the paper's schedule over the run (its
    epochs 20 and 50 of 100 as 1/5 and 1/2 of T): 0.33, 0.5, then 0.9."""
    if p_zero is not None:
        return q16(p_zero)
    phase = 0 if 5 * step < steps else (1 if 2 * step < steps else 2)
    return q16(P_ZERO_SCHEDULE[phase])


def query_seed(seed: int, query: int) -> int:
    """Query q's stream inside a layer's stream S: fmix32(S ^ (q + 1) * 0x2545F491), 0
    replaced."""
    return fmix32((seed ^ ((query + 1) * 0x2545F491)) & MASK32) or ZERO_SEED_REPLACEMENT


def perturbations(seed: int, queries: int, count: int, r_max: int, p_q16: int) -> np.ndarray:
    """The layer's perturbations, (Q, d_w) int32: row q from query q's stream."""
    x = np.stack([draws(query_seed(seed, q), count) for q in range(queries)]).astype(np.int64)
    u = (((x >> 16) * (2 * r_max + 1)) >> 16) - r_max
    return np.where((x & 0xFFFF) >= p_q16, u, 0).astype(np.int32)


def rounding_seed(seed: int) -> int:
    """The stream of the stochastic rounding inside a layer's stream S: fmix32(S ^
    0x5BD1E995), 0 replaced."""
    return fmix32((seed ^ 0x5BD1E995) & MASK32) or ZERO_SEED_REPLACEMENT


def bit_length(value: int) -> int:
    """floor(log2(value)) + 1 for value > 0, 0 for 0."""
    return int(value).bit_length()


def round_to_bits(grad: np.ndarray, bits: int, extra_shift: int, seed: int) -> np.ndarray:
    """The update of a layer whose integer gradient is ``grad`` (int32 values): with B the
    bit length of max |G|, the magnitudes are shifted right by s = B - bits + extra_shift
    with stochastic rounding (up with probability remainder / 2^s: up when the remainder
    exceeds the low s bits of a draw of the rounding stream, one draw per parameter);
    s <= 0 keeps G. NITI's pseudo-stochastic rounding to b bits (paper Alg. 2 line 23),
    with the random bits from our replayable stream instead of the value's own low bits."""
    g = np.asarray(grad, dtype=np.int64)
    s = bit_length(int(np.abs(g).max(initial=0))) - bits + extra_shift
    if s <= 0:
        return g
    s = min(s, 31)
    mag = np.abs(g)
    remainder = mag & ((1 << s) - 1)
    threshold = draws(rounding_seed(seed), g.size).astype(np.int64) & ((1 << s) - 1)
    return np.sign(g) * ((mag >> s) + (remainder > threshold))


def sign_gradient(z: np.ndarray, differences: np.ndarray) -> np.ndarray:
    """G_j = sum_q sgn(D_q) z_qj (int64), z of shape (Q, d_w), D of shape (Q,)."""
    return np.sign(differences).astype(np.int64) @ z.astype(np.int64)


def apply_update(weights: np.ndarray, update: np.ndarray) -> np.ndarray:
    return np.clip(weights.astype(np.int64) - update, -128, 127).astype(np.int8)
