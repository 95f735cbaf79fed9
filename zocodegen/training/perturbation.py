"""Where perturbations come from (PeZO, paper Sec. 3.1-3.2): the source of the random numbers
(``--perturbation xorshift|pool:N|rotating:n``) and their distribution (``--distribution
rademacher|uniform``). Rules and their reasons: docs/training.md "Perturbation sources";
C twin: templates/train/zo_perturb.h.

A layer's stream of step t is still named by its seed S = S(t, i); what a draw is depends on
the source:
  * ``xorshift`` (default): the k-th XORShift32 state after S (training/prng.py);
  * ``pool:N``: N = 2^k - 1 values generated once at build time from the run's seed and
    stored in flash; the stream of S reads the pool circularly from position S mod N, so
    consecutive perturbations of a layer follow on where the last one stopped (the paper's
    "leftover" shift: the pool size never divides the layer's length evenly);
  * ``rotating:n``: n 8-bit maximal-length Galois LFSRs (x^8 + x^6 + x^5 + x^4 + 1, period
    255) stepping in lockstep, generator k started k * (255 // n) states after generator 0,
    whose state comes from S. Each cycle steps all of them and emits their n outputs starting
    at a pointer that moves one generator on per cycle (the first rotated to the end).

The distribution maps a raw value to the integer added to an int8 weight (WP) or to a
pre-activation (NP):
  * ``rademacher``: +-1 from the value's bit 0 (1 -> -1);
  * ``uniform``: u uniform on the odd integers -127..127 (XORShift: bits 25..31; pool: the
    same from its build-time draws; LFSR: state - 128), scaled by a power of two so that the
    perturbation's norm matches the expected norm of a standard Gaussian of the same
    dimension (Eq. 3-5, log-Gamma on the host, rounded to a power of two as the paper does):
    z = rdbpot(u, s). The shift s is per layer for XORShift (dimension d = the layer's
    perturbed count), folded into the stored values for the pool (d = N), and a 256-entry
    table indexed by generator 0's state for the LFSRs (d = n: each cycle's n values, the
    paper's LUT). Shifts are at least ``MIN_UNIFORM_SHIFT`` so that |z| <= 2: node
    perturbation precomputes h(z + delta) for every delta the distribution can draw.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..errors import UserError
from ..numerics import rounding_divide_by_pot
from .prng import MASK32, ZERO_SEED_REPLACEMENT, draws, fmix32, rademacher

SOURCES = ("xorshift", "pool", "rotating")
DISTRIBUTIONS = ("rademacher", "uniform")
LFSR_TAPS = 0xB8  # Galois form of x^8 + x^6 + x^5 + x^4 + 1: period 255
LFSR_PERIOD = 255
MAX_POOL_BITS = 16
MAX_GENERATORS = 63
MIN_UNIFORM_SHIFT = 6  # |u| <= 127: |rdbpot(u, 6)| <= 2
UNIFORM_MEAN_SQUARE = 5461  # E u^2 over the odd integers -127..127: (4 * 64^2 - 1) / 3


@dataclass(frozen=True)
class Source:
    kind: str = "xorshift"  # one of SOURCES
    size: int = 0  # pool: N values; rotating: n generators; xorshift: 0

    def __str__(self) -> str:
        return self.kind if self.kind == "xorshift" else f"{self.kind}:{self.size}"


def parse_source(text: str) -> Source:
    """'xorshift' | 'pool:N' | 'rotating:n' -> Source, refusing sizes the paper warns about."""
    kind, _, size_text = text.partition(":")
    if kind not in SOURCES or (kind == "xorshift") != (not size_text):
        raise UserError(f"--perturbation expects xorshift, pool:N or rotating:n, got '{text}'")
    if kind == "xorshift":
        return Source()
    try:
        size = int(size_text)
    except ValueError:
        raise UserError(f"--perturbation {kind}: '{size_text}' is not a number") from None
    power = size + 1 > 0 and (size + 1) & size == 0  # size = 2^k - 1
    if kind == "pool":
        if not (power and 3 <= size < 1 << MAX_POOL_BITS):
            raise UserError(f"--perturbation pool:{size}: the pool size must be 2^k - 1 with "
                            f"k in 2..{MAX_POOL_BITS} (e.g. pool:4095): a power of two lines "
                            "the pool up with layer sizes, which are powers of two too "
                            "(PeZO Sec. 3.1)")
    elif not (power and 1 <= size <= MAX_GENERATORS):
        raise UserError(f"--perturbation rotating:{size}: the number of generators must be "
                        f"2^k - 1 in 1..{MAX_GENERATORS} (e.g. rotating:31; PeZO Sec. 3.1)")
    return Source(kind, size)


def gaussian_norm(d: int) -> float:
    """E ||g||_2 of a standard Gaussian of dimension d, Eq. 5: exp(log 2 / 2 + log Gamma
    ((d + 1) / 2) - log Gamma(d / 2)), which does not overflow for large d (Eq. 4 would)."""
    return math.exp(0.5 * math.log(2.0) + math.lgamma((d + 1) / 2) - math.lgamma(d / 2))


def uniform_shift(norm: float, d: int) -> int:
    """s with 2^-s closest (in log2) to E||g_d|| / ``norm``, at least MIN_UNIFORM_SHIFT."""
    return max(MIN_UNIFORM_SHIFT, round(math.log2(norm / gaussian_norm(d))))


def xorshift_uniform_shift(d: int) -> int:
    """The per-layer shift of XORShift uniform draws: the expected norm of d of them."""
    return uniform_shift(math.sqrt(d * UNIFORM_MEAN_SQUARE), d)


def uniform_from_draws(x: np.ndarray) -> np.ndarray:
    """u on the odd integers -127..127 from bits 25..31 of uint32 draws (int32)."""
    return ((x >> np.uint32(24)) & np.uint32(0xFE)).astype(np.int32) - 127


def pool_seed(seed: int) -> int:
    """The build-time stream the pool is drawn from: fmix32(seed ^ 0x1B873593), 0 replaced."""
    return fmix32((seed ^ 0x1B873593) & MASK32) or ZERO_SEED_REPLACEMENT


@lru_cache(maxsize=16)
def _pool(seed: int, size: int, distribution: str) -> np.ndarray:
    if distribution == "rademacher":
        return rademacher(pool_seed(seed), size)
    u = uniform_from_draws(draws(pool_seed(seed), size))
    shift = uniform_shift(float(np.sqrt(np.square(u, dtype=np.int64).sum())), size)
    return rounding_divide_by_pot(u, shift).astype(np.int8)


def pool_values(seed: int, size: int, distribution: str) -> np.ndarray:
    """The N values stored in flash (int8; uniform ones already scaled, Sec. 3.2: the pool's
    own norm against a Gaussian of dimension N)."""
    return _pool(seed, size, distribution).copy()


def lfsr_step(state: int) -> int:
    return (state >> 1) ^ (LFSR_TAPS if state & 1 else 0)


@lru_cache(maxsize=1)
def lfsr_cycle() -> np.ndarray:
    """State after k steps from state 1, k = 0..254 (every nonzero byte once)."""
    states = [1]
    for _ in range(LFSR_PERIOD - 1):
        states.append(lfsr_step(states[-1]))
    return np.array(states, dtype=np.int32)


def lfsr_index() -> np.ndarray:
    """Position of each state (1..255) on the cycle; entry 0 unused."""
    index = np.zeros(256, dtype=np.int32)
    index[lfsr_cycle()] = np.arange(LFSR_PERIOD)
    return index


def lfsr_start(seed: int) -> int:
    """Generator 0's first state: S mod 255 + 1 (never 0)."""
    return seed % LFSR_PERIOD + 1


def generator_stride(generators: int) -> int:
    return LFSR_PERIOD // generators


@lru_cache(maxsize=8)
def _rotating_shifts(generators: int) -> np.ndarray:
    cycle, index = lfsr_cycle(), lfsr_index()
    stride = generator_stride(generators)
    shifts = np.zeros(256, dtype=np.int8)
    for state in range(1, 256):
        u = cycle[(index[state] + stride * np.arange(generators)) % LFSR_PERIOD] - 128
        shifts[state] = uniform_shift(float(np.sqrt(np.square(u).sum())) or 1.0, generators)
    return shifts


def rotating_shifts(generators: int) -> np.ndarray:
    """The LUT of the uniform LFSR cycles (Sec. 3.2, Fig. 2): entry s is the shift of a cycle
    whose generator 0 is in state s (the n states, hence the cycle's norm, follow from it)."""
    return _rotating_shifts(generators).copy()


def _rotating_raw(seed: int, generators: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``count`` LFSR outputs of the stream and generator 0's state in each one's
    cycle."""
    cycle, index = lfsr_cycle(), lfsr_index()
    k = np.arange(count)
    r, m = k // generators, k % generators
    start = index[lfsr_start(seed)]
    gen = (r + m) % generators  # pointer r mod n, then the m-th generator after it
    values = cycle[(start + gen * generator_stride(generators) + r + 1) % LFSR_PERIOD]
    return values, cycle[(start + r + 1) % LFSR_PERIOD]


@dataclass(frozen=True)
class Perturbation:
    """A run's perturbation rule: source x distribution (+ the seed a pool is drawn from)."""

    source: Source = Source()
    distribution: str = "rademacher"
    seed: int = 1

    @property
    def max_magnitude(self) -> int:
        """The largest |z| a draw can be (NP precomputes h(z + delta) for each delta)."""
        return 1 if self.distribution == "rademacher" else 2

    def layer_shift(self, dimension: int) -> int:
        """The per-layer shift (XORShift uniform draws only; 0 otherwise)."""
        if self.distribution == "uniform" and self.source.kind == "xorshift":
            return xorshift_uniform_shift(dimension)
        return 0

    def values(self, seed: int, count: int, shift: int = 0) -> np.ndarray:
        """The first ``count`` perturbation values of the stream named ``seed`` (int8);
        ``shift`` is the layer's (layer_shift)."""
        kind, size = self.source.kind, self.source.size
        if kind == "pool":
            pool = _pool(self.seed, size, self.distribution)
            return pool[(seed % size + np.arange(count)) % size]
        if kind == "rotating":
            raw, first = _rotating_raw(seed, size, count)
            if self.distribution == "rademacher":
                return (1 - 2 * (raw & 1)).astype(np.int8)
            shifts = _rotating_shifts(size)[first]
            return rounding_divide_by_pot(raw - 128, shifts.astype(np.int32)).astype(np.int8)
        if self.distribution == "rademacher":
            return rademacher(seed, count)
        return rounding_divide_by_pot(uniform_from_draws(draws(seed, count)), shift
                                      ).astype(np.int8)

    def manifest(self) -> dict:
        """What a build records: the rule, and the tables it stores in flash."""
        out: dict = {"source": str(self.source), "distribution": self.distribution}
        if self.source.kind == "pool":
            pool = _pool(self.seed, self.source.size, self.distribution)
            out["pool"] = {"size": self.source.size, "seed": pool_seed(self.seed),
                           "sha256": hashlib.sha256(pool.tobytes()).hexdigest(),
                           "flash_bytes": self.source.size}
        if self.source.kind == "rotating" and self.distribution == "uniform":
            out["cycle_shifts"] = _rotating_shifts(self.source.size)[1:].tolist()
        return out
