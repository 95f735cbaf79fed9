"""The integer building blocks of zeroth-order training agree bit for bit between numpy (the
simulator) and C (the device): XORShift32 draws, step seeds, and the Q5.26 cross-entropy."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from conftest import softmax_driver
from zocodegen.reference.softmax import cross_entropy_q26, log_softmax_params
from zocodegen.training.prng import draws, rademacher, sample_seed, step_seed, xorshift32
from zocodegen.training.update import clipped_coefficient, raw_deltas, update_deltas

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs the host gcc")

DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "zo_kernels.h"
#include "zo_prng.h"

/* stdin: "P seed count" -> draws; "S base step layer" -> seed; "N seed n" -> sample seed;
 *        "L multiplier left_shift diff_min depth label v0 .. v{depth-1}" -> loss */
int main(void)
{
    char kind;
    while (scanf(" %c", &kind) == 1) {
        if (kind == 'P') {
            unsigned long seed, count;
            if (scanf("%lu %lu", &seed, &count) != 2) return 2;
            uint32_t state = (uint32_t)seed;
            for (unsigned long k = 0; k < count; ++k) printf("%lu ", (unsigned long)zo_xorshift32(&state));
            printf("\n");
        } else if (kind == 'S') {
            unsigned long base, step, layer;
            if (scanf("%lu %lu %lu", &base, &step, &layer) != 3) return 2;
            printf("%lu\n", (unsigned long)zo_step_seed((uint32_t)base, (uint32_t)step, (uint32_t)layer));
        } else if (kind == 'N') {
            unsigned long seed, sample;
            if (scanf("%lu %lu", &seed, &sample) != 2) return 2;
            printf("%lu\n", (unsigned long)zo_sample_seed((uint32_t)seed, (uint32_t)sample));
        } else if (kind == 'L') {
            long m, shift, diff_min, depth, label;
            if (scanf("%ld %ld %ld %ld %ld", &m, &shift, &diff_min, &depth, &label) != 5) return 2;
            int8_t *logits = malloc((size_t)depth);
            for (long i = 0; i < depth; ++i) { int v; if (scanf("%d", &v) != 1) return 2; logits[i] = (int8_t)v; }
            zo_softmax_params p = {1, (int32_t)depth, (int32_t)m, (int32_t)shift, (int32_t)diff_min, 0, 0};
            printf("%ld\n", (long)zo_cross_entropy_q26(&p, logits, (int32_t)label));
            free(logits);
        } else {
            return 2;
        }
    }
    return 0;
}
"""


@pytest.fixture(scope="module", params=["plain", "sanitize"])
def driver(request, tmp_path_factory):
    return softmax_driver(DRIVER, request.param, tmp_path_factory)


def _run(exe, text: str) -> list[str]:
    out = subprocess.run([str(exe)], input=text, capture_output=True, text=True, check=True)
    return out.stdout.split("\n")


def test_xorshift32_known_answers():
    # Marsaglia's xorshift32 (13, 17, 5) from state 1
    assert [int(v) for v in draws(1, 3)] == [270369, 67634689, 2647435461]
    state, expected = 0xDEADBEEF, []
    for _ in range(3000):
        state = xorshift32(state)
        expected.append(state)
    assert np.array_equal(draws(0xDEADBEEF, 3000), np.array(expected, dtype=np.uint32))
    r = rademacher(7, 100_000)
    assert set(np.unique(r)) == {-1, 1} and abs(r.mean()) < 0.02


def test_step_seeds_distinct_and_nonzero():
    seeds = {step_seed(42, t, i) for t in range(200) for i in range(20)}
    assert len(seeds) == 4000 and 0 not in seeds


@needs_gcc
def test_c_prng_matches_numpy(driver):
    rng = np.random.default_rng(0)
    cases = [(1, 50), (0xFFFFFFFF, 50)] + [(int(s), 200) for s in rng.integers(1, 2**32, 10)]
    lines = _run(driver, "".join(f"P {s} {n}\n" for s, n in cases))
    for (seed, count), line in zip(cases, lines):
        assert [int(v) for v in line.split()] == [int(v) for v in draws(seed, count)]
    triples = [(int(b), int(t), int(i)) for b, t, i in zip(rng.integers(0, 2**32, 300),
                                                           rng.integers(0, 10**6, 300),
                                                           rng.integers(0, 64, 300))]
    lines = _run(driver, "".join(f"S {b} {t} {i}\n" for b, t, i in triples))
    assert [int(v) for v in lines[:len(triples)]] == [step_seed(*x) for x in triples]
    pairs = [(int(s), int(n)) for s, n in zip(rng.integers(1, 2**32, 100),
                                             rng.integers(0, 1000, 100))]
    lines = _run(driver, "".join(f"N {s} {n}\n" for s, n in pairs))
    assert [int(v) for v in lines[:len(pairs)]] == [sample_seed(*x) for x in pairs]
    assert sample_seed(12345, 0) == 12345 and len({sample_seed(7, n) for n in range(1000)}) == 1000


@needs_gcc
def test_c_cross_entropy_matches_numpy(driver):
    rng = np.random.default_rng(1)
    cases, expected = [], []
    for scale in (0.01, 0.05, 0.1, 0.17, 0.3, 0.5, 1.0, 2.0):
        params = log_softmax_params(scale)
        for depth in (2, 10, 12, 100):
            rows = [rng.integers(-128, 128, depth), np.full(depth, 5), np.full(depth, -128),
                    np.where(np.arange(depth) == 0, 127, -128)]
            for row in rows:
                for label in {0, depth - 1, int(rng.integers(depth))}:
                    cases.append(f"L {params.input_multiplier} {params.input_left_shift} "
                                 f"{params.diff_min} {depth} {label} "
                                 + " ".join(str(int(v)) for v in row) + "\n")
                    expected.append(int(cross_entropy_q26(np.asarray(row, np.int8)[None],
                                                          [label], params)[0]))
    got = [int(v) for v in _run(driver, "".join(cases))[:len(cases)]]
    assert got == expected
    assert max(expected) == 2**31 - 1  # the saturating case is covered
    assert min(expected) >= 0


def random_logits(seed: int, scale: float = 0.1):
    """50 rows of 10 int8 logits of the given scale, their labels, the loss parameters and
    the real logits: what the fixed-point loss and its gradient are checked against."""
    rng = np.random.default_rng(seed)
    logits = rng.integers(-100, 100, (50, 10)).astype(np.int8)
    labels = rng.integers(0, 10, 50)
    return logits, labels, log_softmax_params(scale), logits.astype(np.float64) * scale


def test_cross_entropy_is_the_float_loss():
    """Q5.26 cross-entropy equals the float definition to ~1e-5 nats."""
    logits, labels, params, z = random_logits(2)
    q = cross_entropy_q26(logits, labels, params) / 2.0**26
    ref = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1) - z[np.arange(50), labels]
    assert np.max(np.abs(q - ref)) < 1e-4


def test_update_clipping_bounds_every_weight_step_and_keeps_direction():
    rng = np.random.default_rng(1)
    grad = rng.integers(-2**31, 2**31 - 1, 500)
    channel_of = np.arange(500) % 5
    inv_s2 = rng.uniform(1, 1000, 5).astype(np.float32)
    coef = np.float32(1e-3)
    largest = np.abs(raw_deltas(coef, inv_s2, grad, channel_of)).max()
    assert largest > 2
    clipped = clipped_coefficient(coef, largest, 2.0)
    deltas = update_deltas(clipped, inv_s2, grad, channel_of)
    assert np.abs(deltas).max() <= 2 and np.abs(deltas).max() >= 1
    unclipped = update_deltas(coef, inv_s2, grad, channel_of)
    assert np.all(np.sign(deltas[deltas != 0]) == np.sign(unclipped[deltas != 0]))
    assert clipped_coefficient(coef, np.float32(1.5), 2.0) == coef  # small steps untouched
    assert clipped_coefficient(coef, largest, 0.0) == coef  # 0: off


def test_pre_activation_clamped_is_the_layer_output():
    """NP's z: clamping it with the layer's activation range gives the kernel's output."""
    from conftest import FIXTURES
    from zocodegen.frontends import load_model
    from zocodegen.reference.common import output_range
    from zocodegen.reference.executor import run_all
    from zocodegen.ops.table import OPS
    graph = load_model(FIXTURES / "digits_resnet.tflite")
    x = np.random.default_rng(0).integers(-128, 128, (1, 8, 8, 1)).astype(np.int8)
    values = run_all(graph, {graph.inputs[0]: x})
    checked = 0
    for op in graph.ops:
        if OPS[op.type].pre_activation is not None:
            args = [None if not n else values[n] if n in values else graph.tensor(n).data
                    for n in op.inputs]
            z = OPS[op.type].pre_activation(op, graph, args)
            lo, hi = output_range(graph, op)
            assert np.array_equal(np.clip(z, lo, hi).reshape(values[op.outputs[0]].shape),
                                  values[op.outputs[0]])
            assert z.min() < lo or z.max() > hi or op.options.get("activation") == "NONE"
            checked += 1
    assert checked >= 5
