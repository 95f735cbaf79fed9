"""PeZO perturbation sources and distributions, P-RGE's two-sided queries (issue 17):
simulator == native C == QEMU C checkpoints byte for byte for every new option; the
streams have the structure the paper describes (pool reuse with the leftover shift, rotating
generators, uniform values scaled to a Gaussian's norm); bad options refused in one line."""
from __future__ import annotations

import math

import numpy as np
import pytest

from test_training import NEEDS_ARM, _check_against_simulator, _resolve
from zocodegen.cli import main
from zocodegen.frontends import load_model
from zocodegen.training import simulator
from zocodegen.training.config import TrainConfig
from zocodegen.training.perturbation import (LFSR_PERIOD, Perturbation, Source, gaussian_norm,
                                             lfsr_cycle, parse_source, pool_values,
                                             rotating_shifts)
from zocodegen.training.plan import training_plan
from zocodegen.training.prng import draws

pytestmark = pytest.mark.usefixtures("module_build_cache")


def _check(spec: str, engine: str, steps: int, tmp_path, **options) -> None:
    config = TrainConfig(**{"steps": 10, "queries": 3, **options})
    _check_against_simulator(spec, engine, steps, tmp_path, config)


@pytest.mark.parametrize("spec, options", [
    pytest.param("fixture:digits_cnn.tflite", dict(perturbation="pool:255"), id="digits-pool"),
    pytest.param("fixture:digits_cnn.tflite", dict(perturbation="pool:4095",
                                                   distribution="uniform", batch=2),
                 id="digits-pool-uniform-batch2"),
    pytest.param("fixture:digits_cnn.tflite", dict(perturbation="rotating:7"),
                 id="digits-rotating"),
    pytest.param("fixture:digits_cnn.tflite", dict(perturbation="rotating:31",
                                                   distribution="uniform", estimator="np"),
                 id="digits-rotating-uniform-np"),
    pytest.param("fixture:digits_cnn.tflite", dict(distribution="uniform"),
                 id="digits-uniform"),
    pytest.param("fixture:digits_cnn.tflite", dict(two_sided=True), id="digits-two-sided"),
    pytest.param("fixture:digits_cnn.tflite", dict(two_sided=True, distribution="uniform",
                                                   estimator="np", batch=2),
                 id="digits-two-sided-uniform-np-batch2"),
    pytest.param("fixture:digits_cnn.tflite", dict(two_sided=True, perturbation="pool:1023",
                                                   bp_layers=1), id="digits-two-sided-pool-bp1"),
    pytest.param("shared:kws_ref_model.tflite", dict(perturbation="pool:4095",
                                                     distribution="uniform"),
                 id="kws-pool-uniform"),
    pytest.param("shared:kws_ref_model.tflite", dict(perturbation="rotating:31",
                                                     two_sided=True), id="kws-rotating-two-sided"),
    pytest.param("fixture:onnx_qdq_int8.onnx", dict(distribution="uniform", two_sided=True),
                 id="onnx-uniform-two-sided"),
    pytest.param("fixture:onnx_qdq_int8.onnx", dict(perturbation="rotating:7",
                                                    distribution="uniform"),
                 id="onnx-rotating-uniform"),
])
def test_perturbation_options_bit_exact_native(spec, options, tmp_path):
    _check(spec, "native", 3, tmp_path, **options)


@NEEDS_ARM
@pytest.mark.parametrize("spec, options", [
    pytest.param("fixture:digits_cnn.tflite", dict(perturbation="rotating:15",
                                                   distribution="uniform", two_sided=True),
                 id="digits-rotating-uniform-two-sided"),
    pytest.param("shared:kws_ref_model.tflite", dict(perturbation="pool:4095"), id="kws-pool"),
    pytest.param("fixture:onnx_qdq_int8.onnx", dict(distribution="uniform", estimator="np"),
                 id="onnx-uniform-np"),
    pytest.param("shared:kws_ref_model.tflite", dict(query_batch=3), id="kws-b3"),
    pytest.param("fixture:digits_cnn.tflite", dict(query_batch=2, queries=2, two_sided=True,
                                                   estimator="np", perturbation="pool:255"),
                 id="digits-np-b2-two-sided-pool"),
])
def test_perturbation_options_bit_exact_qemu(spec, options, tmp_path):
    _check(spec, "qemu", 2, tmp_path, **options)


def test_pool_is_read_circularly_with_the_leftover_shift():
    """A layer's perturbations continue through the pool where the last one stopped (the
    stream of S starts at S mod N), so a length that N does not divide shifts each one."""
    rule = Perturbation(parse_source("pool:7"), "rademacher", seed=3)
    pool = pool_values(3, 7, "rademacher")
    values = rule.values(12, 3 * 5)  # three perturbations of a 5-weight layer
    assert np.array_equal(values, pool[(12 % 7 + np.arange(15)) % 7])
    rows = values.reshape(3, 5)
    assert not np.array_equal(rows[0], rows[1])
    assert np.array_equal(rows[1][:2], pool[[3, 4]])  # 5 + 5 = 10 -> starts at 5 + 5 = 10 mod 7


def test_rotating_generators_rotate_and_cover_the_lfsr_cycle():
    cycle = lfsr_cycle()
    assert sorted(cycle.tolist()) == list(range(1, 256))  # maximal length: period 255
    rule = Perturbation(parse_source("rotating:3"), "uniform", seed=1)
    raw = np.asarray(rule.values(100, 3 * LFSR_PERIOD))
    assert set(np.unique(raw).tolist()) <= {-2, -1, 0, 1, 2}
    # the cycle's order starts one generator later each cycle: the first value of cycle r
    # comes from generator r mod n, so two consecutive cycles are not the same triple shifted
    chunks = raw.reshape(-1, 3)
    assert not all(np.array_equal(chunks[k], chunks[k + 1]) for k in range(10))


def test_uniform_values_match_a_gaussian_norm():
    """Eq. 3-5: the scaled uniform perturbation's norm is within the power-of-two rounding
    (a factor of sqrt(2) either way) of a same-dimension Gaussian's expected norm, for every
    source; Eq. 5 agrees with Eq. 4 where Gamma does not overflow."""
    d = 4096
    assert math.isclose(gaussian_norm(10), math.sqrt(2) * math.gamma(5.5) / math.gamma(5),
                        rel_tol=1e-12)
    for source in ("xorshift", "pool:4095", "rotating:31", "rotating:7"):
        rule = Perturbation(parse_source(source), "uniform", seed=5)
        values = rule.values(77, d, rule.layer_shift(d)).astype(np.float64)
        ratio = np.linalg.norm(values) / gaussian_norm(d)
        assert 2 ** -0.75 < ratio < 2 ** 0.75, (source, ratio)
        assert abs(values.mean()) < 0.1, source
    shifts = rotating_shifts(7)[1:]
    assert shifts.min() >= 6 and len(set(shifts.tolist())) > 1  # the LUT adapts per cycle


def test_rademacher_xorshift_is_unchanged():
    rule = Perturbation(Source(), "rademacher", seed=1)
    assert np.array_equal(rule.values(99, 50), 1 - 2 * (draws(99, 50) & 1).astype(np.int8))


def test_mezo_is_two_sided_already():
    from zocodegen.errors import UserError
    with pytest.raises(UserError, match="two-sided already"):
        TrainConfig(estimator="mezo", two_sided=True)


def test_two_sided_costs_two_forwards_and_halves_the_coefficient():
    graph = load_model(_resolve("fixture:digits_cnn.tflite"))
    one = training_plan(graph, TrainConfig(queries=4))
    two = training_plan(graph, TrainConfig(queries=2, two_sided=True))
    assert one.forwards_per_step == two.forwards_per_step
    assert two.inv_nq == np.float32(1 / (2 * 2))


@pytest.mark.parametrize("argv, message", [
    (["--perturbation", "pool:4096"], "must be 2^k - 1"),
    (["--perturbation", "pool:abc"], "is not a number"),
    (["--perturbation", "rotating:8"], "2^k - 1 in 1..63"),
    (["--perturbation", "lfsr"], "expects xorshift, pool:N or rotating:n"),
    (["--two-sided", "--estimator", "int8"], "draws its own"),
    (["--estimator", "int8", "--distribution", "uniform"], "draws its own"),
    (["--queries", "3", "--query-batch", "2"], "must divide the query forwards per layer and "
                                               "sample (Q = 3): try --query-batch 1 or 3"),
    (["--queries", "16", "--query-batch", "16", "--target", "stm32f746"],
     "a smaller query batch fits: --query-batch 8"),
])
def test_bad_perturbation_options_are_refused(argv, message, tmp_path, capsys):
    model = _resolve("fixture:digits_cnn.tflite")
    target = [] if "--target" in argv else ["--target", "native"]
    model = _resolve("shared:kws_ref_model.tflite") if "16" in argv else model
    code = main(["build", str(model), *target, "--train", "full", "-o", str(tmp_path / "p"),
                 *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("spec, options", [
    pytest.param("fixture:digits_cnn.tflite", dict(query_batch=3), id="digits-b3"),
    pytest.param("fixture:digits_cnn.tflite", dict(query_batch=2, queries=4, estimator="np",
                                                   batch=2),
                 id="digits-np-b2-batch2"),
    pytest.param("fixture:digits_cnn.tflite", dict(query_batch=2, queries=4, estimator="channel",
                                                   batch=2),
                 id="digits-channel-b2-batch2"),
    pytest.param("fixture:digits_cnn.tflite", dict(query_batch=3, two_sided=True,
                                                   distribution="uniform",
                                                   estimator="np-channel"),
                 id="digits-np-channel-b3-two-sided-uniform"),
    pytest.param("fixture:digits_cnn.tflite", dict(query_batch=3, two_sided=True,
                                                   distribution="uniform"),
                 id="digits-b3-two-sided-uniform"),
    pytest.param("fixture:digits_cnn.tflite", dict(query_batch=2, queries=2, mode="sparse",
                                                   block=1, bp_layers=1), id="digits-sparse-b2-bp1"),
    pytest.param("shared:kws_ref_model.tflite", dict(query_batch=3), id="kws-b3"),
    pytest.param("fixture:onnx_qdq_int8.onnx", dict(query_batch=6, two_sided=True,
                                                    estimator="np"), id="onnx-np-b6-two-sided"),
])
def test_query_batch_bit_exact_native(spec, options, tmp_path):
    _check(spec, "native", 3, tmp_path, **options)


def test_a_uniform_plan_without_a_layer_scale_is_refused(tmp_path):
    """The scale table comes from training_plan(); a plan edited through the API that lost a
    layer's entry is refused by the build, naming the layer."""
    from dataclasses import replace

    from zocodegen.codegen.training_code import perturb_code
    from zocodegen.errors import UserError
    graph = load_model(_resolve("fixture:digits_cnn.tflite"))
    plan = training_plan(graph, TrainConfig(distribution="uniform"))
    assert all(layer.perturb_shift >= 6 for layer in plan.layers)
    perturb_code(plan)  # complete: accepted
    broken = replace(plan, layers=(replace(plan.layers[0], perturb_shift=0),) + plan.layers[1:])
    with pytest.raises(UserError, match=r"trainable layer 0 \('.*'\) has no scale"):
        perturb_code(broken)


@pytest.mark.parametrize("options", [dict(distribution="uniform"),
                                     dict(perturbation="pool:1023", distribution="uniform"),
                                     dict(perturbation="rotating:7")])
def test_mezo_baseline_draws_from_the_chosen_source(options):
    """The simulator-only MeZO baseline takes its model-wise perturbation from the same rule
    (uniform: scaled for the dimension of all trainable weights), and moves the model."""
    from zocodegen.training.prng import step_seed
    graph = load_model(_resolve("fixture:digits_cnn.tflite"))
    plan = training_plan(graph, TrainConfig(estimator="mezo", queries=2, lr=0.1, **options))
    total = sum(layer.weight_count for layer in plan.zo_layers)
    rule = plan.perturbation
    xi = rule.values(step_seed(1, 0, 0), total, rule.layer_shift(total))
    assert xi.dtype == np.int8 and np.abs(xi).max() <= rule.max_magnitude
    assert len(np.unique(xi)) == (5 if rule.distribution == "uniform" else 2)
    x = np.random.default_rng(0).integers(-128, 128, size=(1,) + tuple(
        graph.tensor(graph.inputs[0]).shape[1:])).astype(np.int8)
    params = simulator.initial_params(graph, plan)
    after, _ = simulator.train_step(graph, plan, params, 0, x, np.array([3]))
    again, _ = simulator.train_step(graph, plan, params, 0, x, np.array([3]))
    assert any(not np.array_equal(after[k], params[k]) for k in params)
    assert all(np.array_equal(after[k], again[k]) for k in params)
