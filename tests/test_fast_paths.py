"""The simulator's fast paths (issue 32) against the readable references they stand in for:

* reference/fast.py's exact float requantization against numerics' int64 MBQM, exhaustively
  around rounding boundaries and by hypothesis up to the bounds it claims (and refusing
  past them);
* its CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED, ADD, MUL and MEAN twins against the
  reference kernels on random geometries, weights (saturated ones included, which push the
  accumulators past float32 and the requantization past its float64 bound) and variants,
  with the compiled products (reference/linear_kernels.c) and with numpy's;
* the lane-parallel XORShift32 streams against the scalar generator;
* whole simulator steps, every estimator, with the fast kernels and with the reference
  kernels (fast.ENABLED off), one wavefront per layer and all layers in one; and
  `zocodegen simulate` on mcunet_in1: the same checkpoint bytes both ways, and the bytes
  the simulator wrote before the fast paths existed.
"""
from __future__ import annotations

import hashlib
import shutil

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import FIXTURES
from zocodegen.cli import main
from zocodegen.frontends import load_model
from zocodegen.ir import Graph, Op, Quantization, Tensor
from zocodegen.numerics import activation_range, quantize_multiplier
from zocodegen.ops.table import OPS
from zocodegen.reference import fast, native
from zocodegen.reference.conv import RequantParams, pre_activation
from zocodegen.training import checkpoint, simulator, wavefront
from zocodegen.training.config import TrainConfig
from zocodegen.training.plan import training_plan
from zocodegen.training.prng import draws, xorshift32


def _reference_requant(acc: np.ndarray, p: RequantParams, single: bool, clamp: bool
                       ) -> np.ndarray:
    """Centered output of the int64 reference: MBQM (+ zp, clamped), minus the zp."""
    z = pre_activation(acc.astype(np.int64), p, single) - p.output_offset
    return np.clip(z, p.act_min - p.output_offset, p.act_max - p.output_offset) if clamp else z


def _fast_requant(acc: np.ndarray, bias: np.ndarray, requant: fast.FloatRequant) -> np.ndarray:
    """``requant`` on channels-last accumulators that include ``bias`` (it adds it itself).
    A clamped one runs three ways, which must agree: the compiled pass (reference/native.py)
    on float64 and, where exact, float32 accumulators, and numpy."""
    centered = (acc - bias).T
    out = np.empty(centered.shape, dtype=np.float64)
    requant(np.ascontiguousarray(centered, dtype=np.float64), out)
    if np.isfinite(requant.lo):
        types = ([np.float64] + ([np.float32] if np.abs(centered).max() < 2 ** 24 else [])
                 + ([np.int32] if np.abs(centered).max() < 2 ** 31 else []))
        for acc_type in types:
            for compiled in (True, False):
                narrow = np.empty((len(centered), centered.shape[1] + 3), dtype=np.float32)
                with pytest.MonkeyPatch.context() as patch:
                    patch.setattr(native, "ENABLED", compiled)
                    requant(np.ascontiguousarray(centered, dtype=acc_type), narrow[:, 1:-2])
                assert np.array_equal(narrow[:, 1:-2], out), (acc_type, compiled)
    return out.T


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="no C compiler: the simulator requantizes with numpy")
def test_the_compiled_requantization_is_used_where_a_compiler_is():
    """Where a C compiler is, the simulator's requantization is the compiled pass (so the
    comparisons above test it) and declines only what it does not take."""
    assert native.available()
    acc, out = np.zeros((2, 4), np.float32), np.empty((2, 4), np.float32)
    column = np.zeros((2, 1))
    assert native.requantize_rows(acc, column, column, None, None, -128.0, 127.0, out)
    assert not native.requantize_rows(acc, column, column, None, None, -np.inf, np.inf, out)
    assert not native.requantize_rows(acc, column, column, None, None, -128.0, 127.0,
                                      out.astype(np.float64))


def _cpu_has(flag: str) -> bool:
    try:
        with open("/proc/cpuinfo") as info:
            return any(line.startswith("flags") and flag in line.split() for line in info)
    except OSError:
        return False


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None
                    or not _cpu_has("avx512_vnni"),
                    reason="no C compiler or no AVX-512 VNNI: numpy's products run")
def test_the_compiled_products_are_used_where_they_build():
    """On an AVX-512 VNNI CPU with a compiler, CONV_2D / FULLY_CONNECTED run as the compiled
    u8 x s8 product and depthwise convolutions tap by tap in C (so the comparisons with the
    references below test them), and they decline what they do not take."""
    assert native.gemm_available()
    x = np.zeros((4, 3), np.float32)
    packed, correction = np.zeros((8, 4), np.int8), np.zeros(1, np.int32)
    assert native.gemm_u8s8(packed, 1, 4, correction, x, 128).shape == (1, 3)
    assert native.gemm_u8s8(packed, 1, 4, correction, x.astype(np.float64), 128) is None
    geometry = native.depthwise_geometry(native.DepthwiseGeometry(
        (3, 3), (1, 1), (1, 1), (1, 1), (4, 4), (4, 4), 1))
    assert geometry is not None and len(geometry.moves)
    taps = np.zeros((2, 3, 3), np.float32)
    assert native.depthwise(np.zeros((2, 5, 4, 4), np.float32), taps, geometry).shape == (2, 80)
    assert native.depthwise(np.zeros((2, 5, 4, 4), np.float64), taps, geometry) is None


def _params(real: np.ndarray, zero_point: int, activation: str) -> RequantParams:
    pairs = [quantize_multiplier(float(r)) for r in real]
    lo, hi = activation_range(activation, 0.05, zero_point)
    return RequantParams(np.array([m for m, _ in pairs], np.int64),
                         np.array([e for _, e in pairs], np.int64), 0, zero_point, lo, hi)


@pytest.mark.parametrize("single", [False, True])
@pytest.mark.parametrize("activation", ["NONE", "RELU", "RELU6"])
def test_float_requant_exhaustive_near_boundaries(single, activation):
    """Every accumulator in [-2^14, 2^14) for multipliers that put many of them exactly on
    a rounding boundary (M = 2^30, 2^31 - 1, mantissas with few bits; shifts -14 .. +3)."""
    real = np.array([0.5 * 2.0 ** e for e in range(-14, 4)] + [(1 - 2 ** -31) * 2.0 ** e
                     for e in range(-14, 4)] + [0.75 * 2.0 ** -5, 0.625 * 2.0 ** -9, 1.5])
    p = _params(real, -7, activation)
    acc = np.arange(-(1 << 14), 1 << 14, dtype=np.int64)[:, None] * np.ones(len(real), np.int64)
    for clamp in (True, False):
        bias = np.zeros(len(real))
        requant = fast.float_requant(p, None, np.full(len(real), float(1 << 14)), single, clamp)
        assert requant is not None
        assert np.array_equal(_fast_requant(acc, bias, requant),
                              _reference_requant(acc, p, single, clamp))


@settings(max_examples=400, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), log_bound=st.floats(0, 31),
       log_real=st.floats(-36, 6), zero_point=st.integers(-128, 127),
       activation=st.sampled_from(["NONE", "RELU", "RELU6"]), single=st.booleans(),
       clamp=st.booleans())
def test_float_requant_exact_up_to_its_bound(seed, log_bound, log_real, zero_point,
                                             activation, single, clamp):
    """Whenever float_requant claims a bound, it is exact on accumulators up to it, the
    extremes included; and it does claim the bounds the simulator's layers have."""
    rng = np.random.default_rng(seed)
    channels = 5
    real = 2.0 ** (log_real + rng.uniform(-1, 1, channels))
    p = _params(real, zero_point, activation)
    bound = np.full(channels, float(int(2.0 ** log_bound)))
    bias = rng.integers(-bound.astype(np.int64) // 2 - 1, bound.astype(np.int64) // 2 + 1)
    requant = fast.float_requant(p, bias, bound, single, clamp)
    if requant is None:  # refused: only past the bounds the docstring of float_requant gives
        assert log_bound > 20 or (p.shift > 0).any() or (-p.shift > 20).any()
        return
    total = np.concatenate([rng.integers(-bound.astype(np.int64), bound.astype(np.int64) + 1,
                                         (300, channels)),
                            -bound[None].astype(np.int64), bound[None].astype(np.int64),
                            np.zeros((1, channels), np.int64), -np.ones((1, channels), np.int64)])
    assert np.array_equal(_fast_requant(total, bias, requant),
                          _reference_requant(total, p, single, clamp))


def _tensor(name: str, shape: tuple, scale, zero_point: int = 0, data=None,
            dtype=np.int8) -> Tensor:
    quant = Quantization(np.asarray(scale, np.float32).reshape(-1),
                         np.full(np.size(scale), zero_point, np.int64), axis=0)
    return Tensor(name, tuple(shape), np.dtype(dtype), quant, data)


@st.composite
def linear_ops(draw) -> tuple[Graph, np.random.Generator]:
    """A one-op graph: a CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED of random geometry,
    quantization and weights (some all at +-127, some with a huge bias)."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    kind = draw(st.sampled_from(["CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"]))
    weights = draw(st.sampled_from(["random", "saturated", "huge bias"]))
    activation = draw(st.sampled_from(["NONE", "RELU", "RELU6"]))
    x_zp, y_zp = draw(st.integers(-128, 127)), draw(st.integers(-128, 127))
    s_x, s_y = 2.0 ** rng.uniform(-8, 0), 2.0 ** rng.uniform(-8, 0)
    if kind == "FULLY_CONNECTED":
        c_in, c_out = draw(st.integers(1, 700)), draw(st.integers(1, 12))
        x_shape, w_shape, y_shape, options = (1, c_in), (c_out, c_in), (1, c_out), {}
    else:
        kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
        sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
        h, w = draw(st.integers((kh - 1) * dh + 1, 12)), draw(st.integers((kw - 1) * dw + 1, 12))
        pads = tuple(draw(st.integers(0, k - 1)) for k in (kh, kh, kw, kw))
        out_h = (h + pads[0] + pads[1] - (kh - 1) * dh - 1) // sh + 1
        out_w = (w + pads[2] + pads[3] - (kw - 1) * dw - 1) // sw + 1
        c_in = draw(st.integers(1, 80 if kind == "CONV_2D" else 24))
        mult = 1 if kind == "CONV_2D" else draw(st.sampled_from([1, 1, 2, 3]))
        c_out = draw(st.integers(1, 10)) if kind == "CONV_2D" else c_in * mult
        w_shape = (c_out, kh, kw, c_in) if kind == "CONV_2D" else (1, kh, kw, c_out)
        x_shape, y_shape = (1, h, w, c_in), (1, out_h, out_w, c_out)
        options = {"stride": (sh, sw), "dilation": (dh, dw), "padding": pads}
        if kind == "DEPTHWISE_CONV_2D":
            options["depth_multiplier"] = mult
    options["activation"] = activation
    data = rng.integers(-128, 128, w_shape).astype(np.int8)
    if weights == "saturated":
        data = np.where(rng.random(w_shape) < 0.5, -127, 127).astype(np.int8)
    bias = rng.integers(-(1 << 12), 1 << 12, c_out).astype(np.int32)
    if weights == "huge bias":
        bias = rng.integers(-(1 << 30), 1 << 30, c_out).astype(np.int32)
    tensors = [_tensor("x", x_shape, s_x, x_zp),
               _tensor("w", w_shape, 2.0 ** rng.uniform(-10, -2, c_out), data=data),
               _tensor("b", (c_out,), 1.0, data=bias, dtype=np.int32),
               _tensor("y", y_shape, s_y, y_zp)]
    op = Op(kind, "op", ("x", "w", "b"), ("y",), options)
    return Graph("g", "tflite", {t.name: t for t in tensors}, [op], ["x"], ["y"]), rng


@settings(max_examples=250, deadline=None)
@given(case=linear_ops())
def test_linear_kernels_equal_reference(case):
    """Plain rows, rows then a group of variants sharing its input, a group alone, given
    rows appended, variants owning shares of the rows, and z without the clamp."""
    graph, rng = case
    net, op, w = fast.Network(graph), graph.ops[0], graph.tensor("w").data
    shape = graph.tensor("x").shape[1:]
    x = rng.integers(-128, 128, (3,) + shape).astype(np.int8)
    variants = np.clip(w[None].astype(np.int16) + rng.integers(-2, 3, (4,) + w.shape),
                       -128, 127).astype(np.int8)
    x_group = rng.integers(-128, 128, (2,) + shape).astype(np.int8)
    nodes = rng.integers(-128, 128, (5,) + graph.tensor("y").shape[1:]).astype(np.int8)
    b = graph.tensor("b").data

    def ref(xs, ws) -> np.ndarray:
        out = OPS[op.type].reference(op, graph, [xs, ws, b])[0]
        return out.reshape((len(xs),) + graph.tensor("y").shape[1:])

    def run(*args, **kw) -> np.ndarray:
        return net.to_int8("y", net.run(0, *args, **kw)[0])

    args = [net.to_engine("x", x), w, b]
    group = [net.to_engine("x", x_group), variants, b]
    tiled = np.tile(x_group, (4,) + (1,) * len(shape))
    assert np.array_equal(run(args), ref(x, w))
    assert np.array_equal(run(args, (group, None)),
                          np.concatenate([ref(x, w), ref(tiled, np.repeat(variants, 2, 0))]))
    assert np.array_equal(run(None, (group, None)), ref(tiled, np.repeat(variants, 2, 0)))
    assert np.array_equal(run(args, (None, net.to_engine("y", nodes))),
                          np.concatenate([ref(x, w), nodes]))
    x_rows = rng.integers(-128, 128, (8,) + shape).astype(np.int8)
    assert np.array_equal(run([net.to_engine("x", x_rows), variants, b]),
                          ref(x_rows, np.repeat(variants, 2, 0)))
    z = OPS[op.type].pre_activation(op, graph, [x, w, b])
    assert np.array_equal(net.pre_activation(0, args), z.reshape((3,) + z.shape[1:]))
    many = rng.integers(-128, 128, (37,) + shape).astype(np.int8)  # several compiled blocks
    expected = ref(many, w)
    assert np.array_equal(run([net.to_engine("x", many), w, b]), expected)
    with pytest.MonkeyPatch.context() as patch:  # numpy's products, where nothing compiles
        patch.setattr(native, "ENABLED", False)
        assert np.array_equal(run([fast.Network(graph).to_engine("x", many), w, b]), expected)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), kind=st.sampled_from(["ADD", "MUL", "MEAN"]),
       activation=st.sampled_from(["NONE", "RELU", "RELU6"]), broadcast=st.booleans(),
       keep_dims=st.booleans())
def test_elementwise_and_mean_equal_reference(seed, kind, activation, broadcast, keep_dims):
    """ADD and MUL (a constant operand broadcast over the rows too), MEAN over H and W."""
    rng = np.random.default_rng(seed)
    shape = (1, 3, 4, 5)
    zps = rng.integers(-128, 128, 3)
    scales = 2.0 ** rng.uniform(-6, 0, 3)
    if kind == "MEAN":
        out_shape = (1, 1, 1, 5) if keep_dims else (1, 5)
        tensors = [_tensor("a", shape, scales[0], int(zps[0])),
                   _tensor("y", out_shape, scales[2], int(zps[2]))]
        op = Op("MEAN", "op", ("a",), ("y",), {"axes": (1, 2), "keep_dims": keep_dims})
    else:
        constant = rng.integers(-128, 128, (1, 1, 1, 5)).astype(np.int8) if broadcast else None
        tensors = [_tensor("a", shape, scales[0], int(zps[0])),
                   _tensor("c", (1, 1, 1, 5) if broadcast else shape, scales[1], int(zps[1]),
                           data=constant),
                   _tensor("y", shape, scales[2], int(zps[2]))]
        op = Op(kind, "op", ("a", "c"), ("y",), {"activation": activation})
    graph = Graph("g", "tflite", {t.name: t for t in tensors}, [op], ["a"], ["y"])
    net = fast.Network(graph)
    assert net.kernel(0) is not None
    a = rng.integers(-128, 128, (6,) + shape[1:]).astype(np.int8)
    inputs = [a] if kind == "MEAN" else [
        a, graph.tensor("c").data if broadcast else
        rng.integers(-128, 128, (6,) + shape[1:]).astype(np.int8)]
    expected = OPS[kind].reference(op, graph, inputs)[0]
    out = net.run(0, [net.to_engine(name, v) for name, v in zip(op.inputs, inputs)])[0]
    assert np.array_equal(net.to_int8("y", out), expected.reshape((6,) + expected.shape[1:]))


@pytest.mark.parametrize("seed", [0, 1, 0x9E3779B9, 0xFFFFFFFF])
def test_lane_parallel_draws_equal_the_scalar_generator(seed):
    state, expected = seed, []
    for _ in range(70001):
        state = xorshift32(state)
        expected.append(state)
    for count in (1, 31, 32, 33, 2047, 2048, 2049, 9999, 70001):
        assert draws(seed, count).tolist() == expected[:count]


DIGITS = FIXTURES / "digits_cnn.tflite"


@pytest.mark.parametrize("options", [
    dict(), dict(estimator="np", two_sided=True, batch=3), dict(estimator="wp", batch=2),
    dict(estimator="mezo"), dict(estimator="split", batch=2), dict(estimator="int8"),
    dict(bp_layers=1, distribution="uniform"), dict(perturbation="rotating:7", mode="sparse",
                                                    block=1),
], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_steps_equal_with_reference_kernels_and_any_wave_size(options, monkeypatch):
    """Parameters after three steps: fast kernels, reference kernels, one layer per wave."""
    graph = load_model(DIGITS)
    config = TrainConfig(**{"steps": 3, "queries": 3, "lr": 0.05, **options})
    plan = training_plan(graph, config)
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (9,) + tuple(graph.tensor(graph.inputs[0]).shape[1:]))
    x, y = x.astype(np.int8), rng.integers(0, 10, 9)

    def params_after() -> list[bytes]:
        params = simulator.initial_params(graph, plan)
        for t in range(config.steps):
            idx = simulator.batch_indices(t, config.batch, len(x))
            params, _ = simulator.train_step(graph, plan, params, t, x[idx], y[idx])
        return [params[k].tobytes() for k in sorted(params)]

    expected = params_after()
    initial = simulator.initial_params(graph, plan)
    assert expected != [initial[k].tobytes() for k in sorted(initial)]  # training moved it
    monkeypatch.setattr(wavefront, "WAVE_ELEMENTS", 1)
    assert params_after() == expected
    monkeypatch.setattr(fast, "ENABLED", False)
    assert params_after() == expected


def _mcunet_data(path) -> None:
    """The random int8 images (and labels 0..9) the recorded digest below was made with."""
    r = np.random.default_rng(0)
    np.savez(path, x=r.integers(-128, 128, (64, 64, 64, 3)).astype(np.int8),
             y=r.integers(0, 10, 64), x_test=r.integers(-128, 128, (16, 64, 64, 3)).astype(np.int8),
             y_test=r.integers(0, 10, 16))


#: sha256 of checkpoint.bin of `simulate mcunet_in1 --steps 2 --batch 2 --queries 4 --no-guard
#: --lr 0.01` on _mcunet_data, as the simulator wrote it before its fast paths (commit d0d172d),
#: in checkpoint format version 2 (_as_version_2).
MCUNET_DIGEST = "ad13512db4cc67bff15a610554031d40cfddd918246714db6200afc922d6664b"


def _as_version_2(blob: bytes) -> bytes:
    """A checkpoint without scales in format version 2, the one the digest was taken of
    (12-byte table entries: no scale count)."""
    import struct
    import zlib
    ckpt = checkpoint.decode(blob)
    assert all(lp.scales.size == 0 for lp in ckpt.layers)
    table = b"".join(struct.pack("<III", lp.op_index, lp.weights.size, lp.bias.size)
                     for lp in ckpt.layers)
    data = b"".join(lp.weights.tobytes() + bytes(-lp.weights.size % 4)
                    + lp.bias.astype("<i4").tobytes() for lp in ckpt.layers)
    head = bytearray(blob[:checkpoint.HEADER.size])
    struct.pack_into("<I", head, 8, 2)
    struct.pack_into("<I", head, 56, len(head) + len(table) + len(data) + 4)
    body = bytes(head) + table + data
    return body + struct.pack("<I", zlib.crc32(body))


def test_simulate_mcunet_checkpoint_equals_reference_kernels(tmp_path, monkeypatch):
    """The bytes of a run's checkpoint with the fast kernels, with the reference kernels, and
    before either existed (the digest is of adaptive's run, the default then)."""
    data = tmp_path / "data.npz"
    _mcunet_data(data)
    argv = ["simulate", str(FIXTURES / "mcunet_in1.tflite"), "--data", str(data), "--steps",
            "2", "--batch", "2", "--queries", "4", "--no-guard", "--lr", "0.01",
            "--eval-every", "2", "--estimator", "adaptive", "--layers", "all"]
    assert main(argv + ["-o", str(tmp_path / "fast")]) == 0
    blob = (tmp_path / "fast" / "checkpoint.bin").read_bytes()
    assert hashlib.sha256(_as_version_2(blob)).hexdigest() == MCUNET_DIGEST
    monkeypatch.setattr(fast, "ENABLED", False)
    assert main(argv + ["-o", str(tmp_path / "reference"), "--queries", "1"]) == 0
    monkeypatch.setattr(fast, "ENABLED", True)
    assert main(argv + ["-o", str(tmp_path / "fast1"), "--queries", "1"]) == 0
    assert ((tmp_path / "reference" / "checkpoint.bin").read_bytes()
            == (tmp_path / "fast1" / "checkpoint.bin").read_bytes())
