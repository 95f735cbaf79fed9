"""XORShift32 perturbations (DESIGN.md section 4.3), vectorised.

* ``xorshift32``: ``s ^= s << 13; s ^= s >> 17; s ^= s << 5`` on uint32; the k-th draw of a
  stream seeded with ``S`` is the state after k steps (the seed itself is never a draw).
* Rademacher from the least significant bit of each draw: 1 -> -1, 0 -> +1.
* ``step_seed(base, t, i)``: the seed of step t, trainable layer i (murmur3's 32-bit
  finaliser over a mix of the three; never 0, which would make XORShift32 stick at 0);
  ``sample_seed(S, n)``: sample n's own stream for node perturbation.

XORShift32 is linear over GF(2), so the n-th state is a 32x32 bit matrix power applied to the
seed: streams of millions of draws are produced by doubling blocks with numpy instead of a
Python loop. C twin: ``templates/kernels/zo_prng.h``.
"""
from __future__ import annotations

import numpy as np

MASK32 = 0xFFFFFFFF
ZERO_SEED_REPLACEMENT = 0x6D2B79F5


def xorshift32(state: int) -> int:
    """One step (the scalar reference the vector form is tested against)."""
    state ^= (state << 13) & MASK32
    state ^= state >> 17
    state ^= (state << 5) & MASK32
    return state & MASK32


def fmix32(h: int) -> int:
    """murmur3's finaliser: every input bit affects every output bit."""
    h &= MASK32
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & MASK32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & MASK32
    h ^= h >> 16
    return h


def step_seed(base_seed: int, step: int, layer: int) -> int:
    """S(t, i) = fmix32(base ^ t * 0x9E3779B1 ^ (i + 1) * 0x85EBCA77), 0 replaced."""
    h = fmix32((base_seed ^ (step * 0x9E3779B1) ^ ((layer + 1) * 0x85EBCA77)) & MASK32)
    return h or ZERO_SEED_REPLACEMENT


def sample_seed(seed: int, sample: int) -> int:
    """The stream of sample n inside a step's layer stream S (node perturbation draws
    independent xi_{q,n} per sample, Alg. 1): S itself for n = 0, else
    fmix32(S ^ n * 0x27D4EB2F), 0 replaced."""
    if sample == 0:
        return seed
    return fmix32((seed ^ (sample * 0x27D4EB2F)) & MASK32) or ZERO_SEED_REPLACEMENT


def _apply(columns: np.ndarray, states: np.ndarray) -> np.ndarray:
    """The GF(2) matrix whose column k is ``columns[k]`` applied to every state."""
    out = np.zeros_like(states)
    for k in range(32):
        out ^= np.where((states >> np.uint32(k)) & np.uint32(1), columns[k], np.uint32(0))
    return out


def _step_matrix() -> np.ndarray:
    return np.array([xorshift32(1 << k) for k in range(32)], dtype=np.uint32)


def draws(seed: int, count: int) -> np.ndarray:
    """The first ``count`` states after ``seed`` (uint32)."""
    if count <= 0:
        return np.zeros(0, dtype=np.uint32)
    out = np.array([xorshift32(seed & MASK32)], dtype=np.uint32)
    power = _step_matrix()  # A^len(out)
    while len(out) < count:
        out = np.concatenate([out, _apply(power, out)])
        power = _apply(power, power)  # A^2L: columns of A^L applied by A^L
    return out[:count]


def rademacher(seed: int, count: int) -> np.ndarray:
    """``count`` draws of {-1, +1} as int8: -1 where the draw's bit 0 is set."""
    return (1 - 2 * (draws(seed, count) & np.uint32(1)).astype(np.int8)).astype(np.int8)
