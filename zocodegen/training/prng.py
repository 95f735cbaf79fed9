"""XORShift32 perturbations (DESIGN.md section 4.3), vectorised.

* ``xorshift32``: ``s ^= s << 13; s ^= s >> 17; s ^= s << 5`` on uint32; the k-th draw of a
  stream seeded with ``S`` is the state after k steps (the seed itself is never a draw).
* Rademacher from the least significant bit of each draw: 1 -> -1, 0 -> +1.
* ``step_seed(base, t, i)``: the seed of step t, trainable layer i (murmur3's 32-bit
  finaliser over a mix of the three; never 0, which would make XORShift32 stick at 0);
  ``sample_seed(S, n)``: sample n's own stream for node perturbation.

XORShift32 is linear over GF(2), so the n-th state is a 32x32 bit matrix power applied to the
seed: streams of millions of draws are produced by doubling blocks with numpy instead of a
Python loop. A long stream is cut into lanes of B draws: the lanes' first states come from
that doubling with the jump A^B, then all lanes step B times together. A matrix is applied as
four lookups, one per byte of the state, in tables of the 256 combinations of its columns;
the powers A^(2^k) do not depend on the seed, so their tables are built once. C twin:
``templates/kernels/zo_prng.h``.
"""
from __future__ import annotations

from functools import lru_cache

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


def _byte_tables(columns: np.ndarray) -> np.ndarray:
    """(4, 256) uint32: entry [b, v] is the XOR of the columns 8b + i for the bits i set in v,
    i.e. the matrix applied to a state whose only nonzero byte b is v."""
    bits = (np.arange(256, dtype=np.uint32)[:, None] >> np.arange(8, dtype=np.uint32)) & 1
    return np.stack([np.bitwise_xor.reduce(np.where(bits == 1, columns[8 * b:8 * b + 8],
                                                    np.uint32(0)), axis=1)
                     for b in range(4)])


def _apply(tables: np.ndarray, states: np.ndarray) -> np.ndarray:
    """The matrix of ``tables`` applied to every state: XOR of the four bytes' entries."""
    out = tables[0][states & np.uint32(0xFF)]
    for b in range(1, 4):
        out ^= tables[b][(states >> np.uint32(8 * b)) & np.uint32(0xFF)]
    return out


@lru_cache(maxsize=None)
def _power_tables(k: int) -> np.ndarray:
    """The byte tables of A^(2^k); their columns are those of A^(2^(k-1)) applied twice."""
    if k == 0:
        columns = np.array([xorshift32(1 << i) for i in range(32)], dtype=np.uint32)
    else:
        half = _power_tables(k - 1)
        columns = _apply(half, _apply(half, np.uint32(1) << np.arange(32, dtype=np.uint32)))
    return _byte_tables(columns)


def _doubling(states: list[int], count: int, jump_log2: int) -> np.ndarray:
    """``count`` states x, J x, J^2 x, ... with J = A^(2^jump_log2), from the first 2^k0 of
    them (``states``)."""
    out = np.array(states, dtype=np.uint32)
    k = jump_log2 + len(states).bit_length() - 1  # A^(2^k) maps the states so far to the next
    while len(out) < count:
        out = np.concatenate([out, _apply(_power_tables(k), out)])
        k += 1
    return out[:count]


def _lane_log2(count: int) -> int:
    """log2 of the lane length B: B about sqrt(count / 256) balances the B vector steps
    against the count / B lanes; 0 (no lanes) for short streams."""
    return max(0, (count // 256).bit_length() // 2)


def draws(seed: int, count: int) -> np.ndarray:
    """The first ``count`` states after ``seed`` (uint32)."""
    if count <= 0:
        return np.zeros(0, dtype=np.uint32)
    log2 = _lane_log2(count)
    if log2 < 3:
        first = [xorshift32(seed & MASK32)]
        while len(first) < min(count, 32):  # a Python loop beats numpy on a few states
            first.append(xorshift32(first[-1]))
        return _doubling(first, count, 0)
    block = 1 << log2
    state = _doubling([seed & MASK32], -(-count // block), log2)  # lane j: A^(jB) seed
    out = np.empty((block, len(state)), dtype=np.uint32)
    tmp = np.empty_like(state)
    for row in out:  # one XORShift32 step of every lane
        state ^= np.left_shift(state, np.uint32(13), out=tmp)
        state ^= np.right_shift(state, np.uint32(17), out=tmp)
        state ^= np.left_shift(state, np.uint32(5), out=tmp)
        row[:] = state
    return out.T.reshape(-1)[:count]


def rademacher(seed: int, count: int) -> np.ndarray:
    """``count`` draws of {-1, +1} as int8: -1 where the draw's bit 0 is set."""
    return (1 - 2 * (draws(seed, count) & np.uint32(1)).astype(np.int8)).astype(np.int8)
