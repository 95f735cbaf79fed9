"""SOFTMAX / LOG_SOFTMAX numpy kernels must equal TFLite's reference kernels to the bit.

The oracle is ai_edge_litert with ``OpResolverType.BUILTIN_REF``: on the shared MLPerf Tiny
models and the multi-op fixture we read each softmax op's input and output tensors
(intermediates preserved) and recompute the output from that input; on single-op models
written here with the ``tflite`` flatbuffer builder we sweep input scales, beta, ranks and
crafted rows (big spreads below ``diff_min``, ties, constant rows).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from zocodegen.ir import Graph, Op, Quantization, Tensor
from zocodegen.reference import fixedpoint as fp
from zocodegen.reference.softmax import (LogSoftmaxParams, SoftmaxParams, log_softmax,
                                         log_softmax_int8, log_softmax_params, softmax,
                                         softmax_int8, softmax_params)

litert = pytest.importorskip("ai_edge_litert.interpreter")
Interpreter = litert.Interpreter
OpResolverType = litert.OpResolverType

REPO = Path(__file__).resolve().parents[1]
SHARED_MODELS = REPO.parent / "shared" / "models"
FIXTURES = REPO / "tests" / "fixtures"
SHARED_MODEL_NAMES = ("kws_ref_model.tflite", "pretrainedResnet_quant.tflite")
N_RANDOM_INPUTS = 24


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------

def _interpreter(path_or_bytes) -> "Interpreter":
    kwargs = dict(experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                  experimental_preserve_all_tensors=True)
    if isinstance(path_or_bytes, (bytes, bytearray)):
        interp = Interpreter(model_content=bytes(path_or_bytes), **kwargs)
    else:
        interp = Interpreter(model_path=str(path_or_bytes), **kwargs)
    interp.allocate_tensors()
    return interp


def _ir_for(interp, op_details) -> tuple[Op, Graph]:
    """A one-op IR graph mirroring an interpreter op (its input/output quantization)."""
    details = {d["index"]: d for d in interp.get_tensor_details()}
    tensors = {}
    names = []
    for index in (int(op_details["inputs"][0]), int(op_details["outputs"][0])):
        d = details[index]
        scale, zero_point = d["quantization"]
        name = f"t{index}"
        tensors[name] = Tensor(name, tuple(int(s) for s in d["shape"]), np.dtype(np.int8),
                               Quantization(np.array([scale], np.float32),
                                            np.array([zero_point], np.int64)))
        names.append(name)
    op = Op(op_details["op_name"], f"op{op_details['index']}", (names[0],), (names[1],),
            {"beta": 1.0} if op_details["op_name"] == "SOFTMAX" else {})
    return op, Graph("g", "tflite", tensors, [op], [names[0]], [names[1]])


def _model_inputs(shape, dtype, rng, count):
    """Saturating inputs first (all min, all max, random extremes), then uniform random."""
    info = np.iinfo(dtype)
    yield np.full(shape, info.min, dtype)
    yield np.full(shape, info.max, dtype)
    for _ in range(4):
        yield rng.choice(np.array([info.min, info.max], dtype), size=shape)
    for _ in range(count - 6):
        yield rng.integers(info.min, info.max + 1, size=shape, dtype=dtype)


def _check_softmax_ops(path: Path, count: int, seed: int) -> dict[str, int]:
    """Run the model on ``count`` inputs; every (LOG_)SOFTMAX op must be reproduced exactly
    from its input by the IR-signature kernel. Returns how many op executions were checked."""
    interp = _interpreter(path)
    ops = [o for o in interp._get_ops_details() if o["op_name"] in ("SOFTMAX", "LOG_SOFTMAX")]
    assert ops, f"{path.name} has no softmax op"
    (inp,) = interp.get_input_details()
    rng = np.random.default_rng(seed)
    checked: dict[str, int] = {}
    for x in _model_inputs(tuple(inp["shape"]), inp["dtype"], rng, count):
        interp.set_tensor(inp["index"], x)
        interp.invoke()
        for o in ops:
            op, graph = _ir_for(interp, o)
            logits = interp.get_tensor(int(o["inputs"][0]))
            expected = interp.get_tensor(int(o["outputs"][0]))
            kernel = softmax if op.type == "SOFTMAX" else log_softmax
            (got,) = kernel(op, graph, [logits])
            assert got.dtype == np.int8 and got.shape == expected.shape
            np.testing.assert_array_equal(got, expected,
                                          err_msg=f"{path.name} {op.type} on logits {logits}")
            checked[op.type] = checked.get(op.type, 0) + 1
    return checked


def _single_op_model(op_type: str, shape, input_scale: float, input_zero_point: int,
                     beta: float = 1.0) -> bytes:
    """A minimal .tflite with one int8 SOFTMAX (or LOG_SOFTMAX) op, written with the
    flatbuffer builder of the ``tflite`` package (no TensorFlow needed)."""
    import flatbuffers
    import tflite

    if op_type == "SOFTMAX":
        code, out_scale, out_zp = tflite.BuiltinOperator.SOFTMAX, 1.0 / 256, -128
    else:
        code, out_scale, out_zp = tflite.BuiltinOperator.LOG_SOFTMAX, 16.0 / 256, 127
    b = flatbuffers.Builder(1024)

    def int_vector(start, values):
        start(b, len(values))
        for v in reversed(values):
            b.PrependInt32(int(v))
        return b.EndVector()

    def quant(scale, zp):
        tflite.QuantizationParametersStartScaleVector(b, 1)
        b.PrependFloat32(scale)
        scales = b.EndVector()
        tflite.QuantizationParametersStartZeroPointVector(b, 1)
        b.PrependInt64(zp)
        zps = b.EndVector()
        tflite.QuantizationParametersStart(b)
        tflite.QuantizationParametersAddScale(b, scales)
        tflite.QuantizationParametersAddZeroPoint(b, zps)
        return tflite.QuantizationParametersEnd(b)

    def tensor(name, scale, zp):
        name_off = b.CreateString(name)
        shape_off = int_vector(tflite.TensorStartShapeVector, shape)
        q = quant(scale, zp)
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, shape_off)
        tflite.TensorAddType(b, tflite.TensorType.INT8)
        tflite.TensorAddBuffer(b, 0)
        tflite.TensorAddName(b, name_off)
        tflite.TensorAddQuantization(b, q)
        return tflite.TensorEnd(b)

    tensors = [tensor("logits", input_scale, input_zero_point), tensor("probs", out_scale, out_zp)]
    tflite.SubGraphStartTensorsVector(b, len(tensors))
    for t in reversed(tensors):
        b.PrependUOffsetTRelative(t)
    tensors_vec = b.EndVector()

    if op_type == "SOFTMAX":
        tflite.SoftmaxOptionsStart(b)
        tflite.SoftmaxOptionsAddBeta(b, beta)
        options, options_type = tflite.SoftmaxOptionsEnd(b), tflite.BuiltinOptions.SoftmaxOptions
    else:
        tflite.LogSoftmaxOptionsStart(b)
        options = tflite.LogSoftmaxOptionsEnd(b)
        options_type = tflite.BuiltinOptions.LogSoftmaxOptions
    op_in = int_vector(tflite.OperatorStartInputsVector, [0])
    op_out = int_vector(tflite.OperatorStartOutputsVector, [1])
    tflite.OperatorStart(b)
    tflite.OperatorAddOpcodeIndex(b, 0)
    tflite.OperatorAddInputs(b, op_in)
    tflite.OperatorAddOutputs(b, op_out)
    tflite.OperatorAddBuiltinOptionsType(b, options_type)
    tflite.OperatorAddBuiltinOptions(b, options)
    operator = tflite.OperatorEnd(b)
    tflite.SubGraphStartOperatorsVector(b, 1)
    b.PrependUOffsetTRelative(operator)
    operators_vec = b.EndVector()

    sg_in = int_vector(tflite.SubGraphStartInputsVector, [0])
    sg_out = int_vector(tflite.SubGraphStartOutputsVector, [1])
    sg_name = b.CreateString("main")
    tflite.SubGraphStart(b)
    tflite.SubGraphAddTensors(b, tensors_vec)
    tflite.SubGraphAddInputs(b, sg_in)
    tflite.SubGraphAddOutputs(b, sg_out)
    tflite.SubGraphAddOperators(b, operators_vec)
    tflite.SubGraphAddName(b, sg_name)
    subgraph = tflite.SubGraphEnd(b)
    tflite.ModelStartSubgraphsVector(b, 1)
    b.PrependUOffsetTRelative(subgraph)
    subgraphs_vec = b.EndVector()

    tflite.OperatorCodeStart(b)
    tflite.OperatorCodeAddDeprecatedBuiltinCode(b, code)
    tflite.OperatorCodeAddBuiltinCode(b, code)
    tflite.OperatorCodeAddVersion(b, 2)
    opcode = tflite.OperatorCodeEnd(b)
    tflite.ModelStartOperatorCodesVector(b, 1)
    b.PrependUOffsetTRelative(opcode)
    opcodes_vec = b.EndVector()

    tflite.BufferStart(b)
    empty_buffer = tflite.BufferEnd(b)
    tflite.ModelStartBuffersVector(b, 1)
    b.PrependUOffsetTRelative(empty_buffer)
    buffers_vec = b.EndVector()

    description = b.CreateString("zocodegen softmax test")
    tflite.ModelStart(b)
    tflite.ModelAddVersion(b, 3)
    tflite.ModelAddOperatorCodes(b, opcodes_vec)
    tflite.ModelAddSubgraphs(b, subgraphs_vec)
    tflite.ModelAddDescription(b, description)
    tflite.ModelAddBuffers(b, buffers_vec)
    model = tflite.ModelEnd(b)
    b.Finish(model, file_identifier=b"TFL3")
    return bytes(b.Output())


def _run_single_op(model: bytes, x: np.ndarray) -> np.ndarray:
    interp = _interpreter(model)
    (inp,) = interp.get_input_details()
    (out,) = interp.get_output_details()
    interp.set_tensor(inp["index"], x)
    interp.invoke()
    return interp.get_tensor(out["index"])


def _crafted_rows(depth: int, rng: np.random.Generator, diff_min: int) -> np.ndarray:
    """Rows covering the corners: constant rows (all ties), several tied maxima, one max with
    everything else at the far end (diff -255, below any diff_min), spreads sweeping through
    every possible diff, rows straddling ``diff_min`` exactly, plus random rows."""
    rows = [np.full(depth, v) for v in (-128, -1, 0, 127)]
    tie = np.full(depth, -128)
    tie[: max(2, depth // 3)] = 127
    rows.append(tie)
    spike = np.full(depth, -128)
    spike[depth // 2] = 127
    rows.append(spike)
    rows.append(np.linspace(127, -128, depth).round())
    rows.append(np.linspace(-128, 127, depth).round())
    for d in (1, 2, 3, 5, 8, 12, 15, 16, 17, 25, 31, 40, 64, 100, 128, 200):
        row = np.full(depth, 50)
        row[1::2] = 50 - d
        rows.append(np.clip(row, -128, 127))
    for d in (diff_min - 2, diff_min - 1, diff_min, diff_min + 1):
        if -255 <= d <= 0:
            row = np.full(depth, 127 + d)
            row[::3] = 127
            rows.append(row)
    for _ in range(40):
        lo, hi = sorted(rng.integers(-128, 128, size=2))
        rows.append(rng.integers(lo, hi + 1, size=depth))
    for _ in range(8):
        rows.append(rng.choice([-128, 127], size=depth))
    return np.stack(rows).astype(np.int8)


def _assert_rows_reach_diff_min(x: np.ndarray, diff_min: int) -> None:
    """Where diff_min is reachable by 8-bit differences, the crafted rows must hit both
    sides of it (and the LOG_SOFTMAX special case diff == diff_min - 1)."""
    diff = x.astype(np.int64) - x.max(axis=-1, keepdims=True)
    if diff_min > -255:
        assert (diff < diff_min).any() and (diff == diff_min - 1).any()
        assert ((diff >= diff_min) & (diff < 0)).any() or diff_min == 0


# --------------------------------------------------------------------------------------------
# real models
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", SHARED_MODEL_NAMES)
def test_softmax_bit_exact_on_shared_models(name):
    path = SHARED_MODELS / name
    if not path.exists():
        pytest.skip(f"shared model {path} not present (MLPerf Tiny models live in "
                    "../shared/models next to the repository)")
    checked = _check_softmax_ops(path, N_RANDOM_INPUTS, seed=sum(map(ord, name)))
    assert checked == {"SOFTMAX": N_RANDOM_INPUTS}


def test_softmax_and_log_softmax_bit_exact_on_multi_op_fixture():
    path = FIXTURES / "multi_op.tflite"
    if not path.exists():
        pytest.skip(f"fixture {path} not generated yet (tests/fixtures/generate.py)")
    checked = _check_softmax_ops(path, N_RANDOM_INPUTS, seed=7)
    assert checked == {"SOFTMAX": N_RANDOM_INPUTS, "LOG_SOFTMAX": N_RANDOM_INPUTS}


# --------------------------------------------------------------------------------------------
# synthetic single-op models
# --------------------------------------------------------------------------------------------

# Input scales from tiny (no diff is ever clipped) through ~1 (diff_min around -15) to huge
# (multiplier capped at 2**31 - 1, left shift 31, only the maxima survive).
INPUT_SCALES = (0.00390625, 0.0045740120112895966, 0.02, 0.0625, 0.14469251036643982,
                0.17185351252555847, 0.5, 1.0, 3.7, 40.0, 1000.0)


@pytest.mark.parametrize("input_scale", INPUT_SCALES)
@pytest.mark.parametrize("beta", (1.0, 0.25, 2.5))
def test_softmax_synthetic_rows(input_scale, beta):
    rng = np.random.default_rng(int(input_scale * 1000) + int(beta * 10))
    params = softmax_params(np.float32(input_scale).item(), np.float32(beta).item())
    x = _crafted_rows(17, rng, params.diff_min)
    model = _single_op_model("SOFTMAX", x.shape, input_scale, 3, beta)
    expected = _run_single_op(model, x)
    np.testing.assert_array_equal(softmax_int8(x, params), expected)
    _assert_rows_reach_diff_min(x, params.diff_min)


@pytest.mark.parametrize("input_scale", INPUT_SCALES)
def test_log_softmax_synthetic_rows(input_scale):
    rng = np.random.default_rng(int(input_scale * 1000) + 1)
    params = log_softmax_params(np.float32(input_scale).item())
    x = _crafted_rows(19, rng, params.diff_min)
    model = _single_op_model("LOG_SOFTMAX", x.shape, input_scale, -5)
    expected = _run_single_op(model, x)
    np.testing.assert_array_equal(log_softmax_int8(x, params), expected)
    _assert_rows_reach_diff_min(x, params.diff_min)


@pytest.mark.parametrize("op_type", ("SOFTMAX", "LOG_SOFTMAX"))
@pytest.mark.parametrize("shape", ((1, 1), (5,), (2, 3, 7), (1, 2, 2, 1000)))
def test_any_rank_and_depth(op_type, shape):
    """Softmax runs over the last axis of any rank; long rows exercise the Q12 sum."""
    rng = np.random.default_rng(len(shape) * 100 + shape[-1])
    x = rng.integers(-128, 128, size=shape, dtype=np.int8)
    model = _single_op_model(op_type, shape, 0.1, 0)
    expected = _run_single_op(model, x)
    op = Op(op_type, "sm", ("in",), ("out",), {"beta": 1.0} if op_type == "SOFTMAX" else {})
    out_q = (Quantization(np.array([1 / 256], np.float32), np.array([-128]))
             if op_type == "SOFTMAX" else
             Quantization(np.array([1 / 16], np.float32), np.array([127])))
    graph = Graph("g", "tflite", {
        "in": Tensor("in", shape, np.dtype(np.int8),
                     Quantization(np.array([0.1], np.float32), np.array([0]))),
        "out": Tensor("out", shape, np.dtype(np.int8), out_q),
    }, [op], ["in"], ["out"])
    kernel = softmax if op_type == "SOFTMAX" else log_softmax
    (got,) = kernel(op, graph, [x])
    np.testing.assert_array_equal(got, expected)


# --------------------------------------------------------------------------------------------
# parameters and primitives
# --------------------------------------------------------------------------------------------

def test_params_are_what_the_clipping_implies():
    # scale 1.0: 2**26 -> multiplier 2**30, left shift 27, diff_min = -floor(31 / 2) = -15.
    assert softmax_params(1.0) == SoftmaxParams(1 << 30, 27, -15)
    # tiny scale: no 8-bit difference can reach the Q5.26 limit.
    assert softmax_params(0.00390625).diff_min < -255
    # huge scale: multiplier capped at 2**31 - 1 with left shift 31 -> only the max survives.
    assert softmax_params(1000.0) == SoftmaxParams((1 << 31) - 1, 31, 0)
    p = log_softmax_params(1.0)
    assert isinstance(p, LogSoftmaxParams)
    assert (p.input_multiplier, p.input_left_shift, p.diff_min) == (1 << 30, 27, -15)
    # 2**(31 - 27) / 2**30 = 2**-26 -> Q31 2**30 with shift -25, stored as right shift 25.
    assert (p.reverse_scaling_divisor, p.reverse_scaling_right_shift) == (1 << 30, 25)


def test_fixedpoint_primitives_approximate_their_functions():
    a = np.arange(-(31 << 26), 1, 1 << 20, dtype=np.int64)  # Q5.26 in [-31, 0]
    got = fp.exp_on_negative_values(a, 5) / 2.0**31
    assert np.max(np.abs(got - np.exp(a / 2.0**26))) < 1e-6  # 4th-order Taylor
    x = np.arange(0, 1 << 31, 1 << 20, dtype=np.int64)  # Q0 in [0, 1)
    got = fp.one_over_one_plus_x_for_x_in_0_1(x) / 2.0**31
    assert np.max(np.abs(got - 1 / (1 + x / 2.0**31))) < 1e-8
    s = np.arange(1 << 19, (1 << 31) - 1, 7_654_321, dtype=np.int64)  # Q12 in [1, 4096)
    got = fp.log_x_for_x_greater_than_or_equal_to_1(s, 12, 5) / 2.0**26
    assert np.max(np.abs(got - np.log(s / 2.0**19))) < 1e-7
    recip, bits = fp.get_reciprocal(s, 12)
    assert np.max(np.abs(recip / 2.0**31 * 2.0**-bits - 1 / (s / 2.0**19))) < 1e-8
    assert fp.count_leading_zeros_u32(np.array([0, 1, 2**31 - 1, -1])).tolist() == [32, 31, 1, 0]
    assert fp.rounding_half_sum(3, 4) == 4 and fp.rounding_half_sum(-3, -4) == -4
