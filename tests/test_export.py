"""``zocodegen.model_export.export_model``: trained weights and biases written back into a copy of the
.tflite / .onnx file they came from.

Round trips: every CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED weight and bias is perturbed
by a seeded random +-1..3, exported, and the file is read again: the frontend sees exactly the
new values and nothing else changed, and the file's own runtime (the TFLite reference
interpreter, the ONNX specification's semantics) computes what the numpy reference computes on
the modified IR graph (TFLite bit for bit; ONNX within the end-to-end tolerance
test_onnx_frontend.py documents: the specification requantizes in float, the IR with TFLite's
integer arithmetic).
"""
from __future__ import annotations

import dataclasses
import logging
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, random_inputs, reference_interpreter, resolve
from zocodegen.errors import UserError
from zocodegen.model_export import export_model
from zocodegen.frontends import load_model
from zocodegen.ir import Graph
from zocodegen.ops.table import TRAINABLE_OP_TYPES
from zocodegen.reference.executor import run


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------

def trainable(graph: Graph) -> dict[str, str]:
    """IR name -> "weights" / "bias" for every trainable op's constants."""
    out = {}
    for op in graph.ops:
        if op.type in TRAINABLE_OP_TYPES:
            out[op.inputs[1]] = "weights"
            if len(op.inputs) > 2 and op.inputs[2]:
                out[op.inputs[2]] = "bias"
    return out


def perturb(graph: Graph, names, seed: int) -> dict[str, np.ndarray]:
    """Each value moved by a random +-1..3; weights stay in [-127, 127] (for uint8 ONNX
    weights that is stored 1..255, inside uint8 too)."""
    rng = np.random.default_rng(seed)
    roles = trainable(graph)
    out = {}
    for name in names:
        t = graph.tensor(name)
        step = rng.integers(1, 4, size=t.shape) * rng.choice([-1, 1], size=t.shape)
        value = t.data.astype(np.int64) + step
        if roles[name] == "weights":
            value = np.clip(value, -127, 127)
        out[name] = value.astype(t.dtype)
    return out


def with_constants(graph: Graph, updated: dict[str, np.ndarray]) -> Graph:
    tensors = {n: dataclasses.replace(t, data=updated[n]) if n in updated else t
               for n, t in graph.tensors.items()}
    return dataclasses.replace(graph, tensors=tensors)


def assert_only_updated_changed(reloaded: Graph, graph: Graph, updated: dict) -> None:
    assert set(reloaded.tensors) == set(graph.tensors)
    assert [op.inputs for op in reloaded.ops] == [op.inputs for op in graph.ops]
    for name, before in graph.tensors.items():
        after = reloaded.tensor(name)
        assert (after.shape, after.dtype) == (before.shape, before.dtype), name
        assert (after.quant is None) == (before.quant is None), name
        if before.quant is not None:
            np.testing.assert_array_equal(after.quant.scale, before.quant.scale, err_msg=name)
            np.testing.assert_array_equal(after.quant.zero_point, before.quant.zero_point)
            assert after.quant.axis == before.quant.axis, name
        assert after.is_constant == before.is_constant, name
        if before.is_constant:
            expected = updated.get(name, before.data)
            np.testing.assert_array_equal(after.data, expected, err_msg=name)


def assert_outputs_move(graph: Graph, trained: Graph, feeds: list[dict]) -> None:
    """The perturbation is visible at the outputs (so the runtime checks check something)."""
    assert any(not np.array_equal(run(graph, f)[o], run(trained, f)[o])
               for f in feeds for o in graph.outputs)


# --------------------------------------------------------------------------------------------
# TFLite
# --------------------------------------------------------------------------------------------

TFLITE_MODELS = [pytest.param(("fixture", "digits_cnn.tflite"), id="digits_cnn"),
                 pytest.param(("fixture", "mcunet_tiny.tflite"), id="mcunet_tiny"),
                 pytest.param(("shared", "kws_ref_model.tflite"), id="kws_ref_model")]


def assert_tflite_runs_like_reference(path: Path, trained: Graph, count: int = 6) -> list:
    it = reference_interpreter(path)
    (inp,) = it.get_input_details()
    outs = {d["name"]: d["index"] for d in it.get_output_details()}
    assert set(outs) == set(trained.outputs)
    feeds = [{trained.inputs[0]: x}
             for x in random_inputs(inp["shape"], inp["dtype"], count, seed=2)]
    for feed in feeds:
        it.set_tensor(inp["index"], feed[trained.inputs[0]])
        it.invoke()
        got = run(trained, feed)
        for name, index in outs.items():
            np.testing.assert_array_equal(got[name], it.get_tensor(index), err_msg=name)
    return feeds


@pytest.mark.parametrize("spec", TFLITE_MODELS)
def test_tflite_round_trip(spec, tmp_path):
    path = resolve(spec)
    graph = load_model(path)
    updated = perturb(graph, trainable(graph), seed=1)
    out = tmp_path / "trained.tflite"
    export_model(path, graph, updated, out)

    # patched in place: same size, only bytes of the updated buffers differ
    before, after = path.read_bytes(), out.read_bytes()
    assert len(after) == len(before)
    changed = np.count_nonzero(np.frombuffer(before, np.uint8) != np.frombuffer(after, np.uint8))
    assert 0 < changed <= sum(v.nbytes for v in updated.values())

    assert_only_updated_changed(load_model(out), graph, updated)
    trained = with_constants(graph, updated)
    feeds = assert_tflite_runs_like_reference(out, trained)
    assert_outputs_move(graph, trained, feeds)


def offset_layout_fc_model() -> bytes:
    """A one-FULLY_CONNECTED int8 model whose weights and bias live after the flatbuffer
    (Buffer.offset/size: the layout TFLite uses for models over 2 GB)."""
    import flatbuffers
    import tflite

    rng = np.random.default_rng(5)
    blobs = [rng.integers(-127, 128, (4, 6), dtype=np.int8).tobytes(),
             rng.integers(-500, 500, 4).astype("<i4").tobytes()]

    def build(offsets: list[int]) -> bytes:
        fb = flatbuffers.Builder(1024)

        def tables(start, items):
            start(fb, len(items))
            for item in reversed(items):
                fb.PrependUOffsetTRelative(item)
            return fb.EndVector()

        def ints(values, dtype=np.int32):
            return fb.CreateNumpyVector(np.array(values, dtype))

        buffers = []
        for offset, blob in [(0, b"")] + list(zip(offsets, blobs)):
            tflite.BufferStart(fb)
            if blob:
                tflite.BufferAddOffset(fb, offset)
                tflite.BufferAddSize(fb, len(blob))
            buffers.append(tflite.BufferEnd(fb))
        tensors = []
        for name, shape, ttype, buf, scale, zp in (
                ("input", [1, 6], tflite.TensorType.INT8, 0, 0.05, -3),
                ("weights", [4, 6], tflite.TensorType.INT8, 1, 0.01, 0),
                ("bias", [4], tflite.TensorType.INT32, 2, 0.0005, 0),
                ("output", [1, 4], tflite.TensorType.INT8, 0, 0.1, 2)):
            scales, zps = ints([scale], np.float32), ints([zp], np.int64)
            tflite.QuantizationParametersStart(fb)
            tflite.QuantizationParametersAddScale(fb, scales)
            tflite.QuantizationParametersAddZeroPoint(fb, zps)
            quant = tflite.QuantizationParametersEnd(fb)
            name_s, shape_v = fb.CreateString(name), ints(shape)
            tflite.TensorStart(fb)
            tflite.TensorAddShape(fb, shape_v)
            tflite.TensorAddType(fb, ttype)
            tflite.TensorAddBuffer(fb, buf)
            tflite.TensorAddName(fb, name_s)
            tflite.TensorAddQuantization(fb, quant)
            tensors.append(tflite.TensorEnd(fb))
        op_in, op_out = ints([0, 1, 2]), ints([3])
        tflite.OperatorStart(fb)
        tflite.OperatorAddOpcodeIndex(fb, 0)
        tflite.OperatorAddInputs(fb, op_in)
        tflite.OperatorAddOutputs(fb, op_out)
        op = tflite.OperatorEnd(fb)
        tensor_v = tables(tflite.SubGraphStartTensorsVector, tensors)
        op_v = tables(tflite.SubGraphStartOperatorsVector, [op])
        sub_in, sub_out, sub_name = ints([0]), ints([3]), fb.CreateString("main")
        tflite.SubGraphStart(fb)
        tflite.SubGraphAddTensors(fb, tensor_v)
        tflite.SubGraphAddInputs(fb, sub_in)
        tflite.SubGraphAddOutputs(fb, sub_out)
        tflite.SubGraphAddOperators(fb, op_v)
        tflite.SubGraphAddName(fb, sub_name)
        sub = tflite.SubGraphEnd(fb)
        fc = tflite.BuiltinOperator.FULLY_CONNECTED
        tflite.OperatorCodeStart(fb)
        tflite.OperatorCodeAddDeprecatedBuiltinCode(fb, fc)
        tflite.OperatorCodeAddBuiltinCode(fb, fc)
        tflite.OperatorCodeAddVersion(fb, 1)
        code = tflite.OperatorCodeEnd(fb)
        code_v = tables(tflite.ModelStartOperatorCodesVector, [code])
        sub_v = tables(tflite.ModelStartSubgraphsVector, [sub])
        buf_v = tables(tflite.ModelStartBuffersVector, buffers)
        tflite.ModelStart(fb)
        tflite.ModelAddVersion(fb, 3)
        tflite.ModelAddOperatorCodes(fb, code_v)
        tflite.ModelAddSubgraphs(fb, sub_v)
        tflite.ModelAddBuffers(fb, buf_v)
        fb.Finish(tflite.ModelEnd(fb), file_identifier=b"TFL3")
        return bytes(fb.Output())

    # offsets are fixed-size fields: build once to learn the size, then with the real offsets
    size = len(build([2] * len(blobs)))
    offsets, end = [], size
    for blob in blobs:
        end = -(-end // 16) * 16
        offsets.append(end)
        end += len(blob)
    data = bytearray(build(offsets))
    assert len(data) == size
    for offset, blob in zip(offsets, blobs):
        data += bytes(offset - len(data)) + blob
    return bytes(data)


def test_tflite_buffers_after_the_flatbuffer(tmp_path):
    path = tmp_path / "offset_layout.tflite"
    path.write_bytes(offset_layout_fc_model())
    graph = load_model(path)
    updated = perturb(graph, trainable(graph), seed=4)
    assert set(updated) == {"weights", "bias"}
    out = tmp_path / "trained.tflite"
    export_model(path, graph, updated, out)
    import tflite

    before, after = path.read_bytes(), out.read_bytes()
    flatbuffer_end = tflite.Model.GetRootAs(before, 0).Buffers(1).Offset()
    assert len(after) == len(before)
    assert after[:flatbuffer_end] == before[:flatbuffer_end]
    assert after[flatbuffer_end:] != before[flatbuffer_end:]
    assert_only_updated_changed(load_model(out), graph, updated)
    assert_tflite_runs_like_reference(out, with_constants(graph, updated))


def share_buffer(data: bytes, graph: Graph, victim: str, owner: str) -> bytes:
    """``data`` with tensor ``victim`` pointed at ``owner``'s buffer (Tensor.buffer patched)."""
    import tflite

    sub = tflite.Model.GetRootAs(data, 0).Subgraphs(0)
    index = {sub.Tensors(i).Name().decode(): i for i in range(sub.TensorsLength())}
    assert set(index) == set(graph.tensors)  # the IR uses the file's (unique) names here
    owner_buffer = sub.Tensors(index[owner]).Buffer()
    tab = sub.Tensors(index[victim])._tab
    field = tab.Offset(8)  # Tensor.buffer
    assert field
    patched = bytearray(data)
    struct.pack_into("<I", patched, tab.Pos + field, owner_buffer)
    return bytes(patched)


def test_tflite_shared_buffer(tmp_path):
    """Two biases in one buffer: both must get the same new value, or export refuses."""
    graph = load_model(FIXTURES / "mcunet_tiny.tflite")
    biases = [n for n, role in trainable(graph).items() if role == "bias"]
    a, b = next((a, b) for i, a in enumerate(biases) for b in biases[i + 1:]
                if graph.tensor(a).shape == graph.tensor(b).shape)
    path = tmp_path / "shared.tflite"
    path.write_bytes(share_buffer((FIXTURES / "mcunet_tiny.tflite").read_bytes(), graph, b, a))
    graph = load_model(path)
    np.testing.assert_array_equal(graph.tensor(a).data, graph.tensor(b).data)
    new = perturb(graph, [a], seed=3)[a]
    out = tmp_path / "trained.tflite"
    with pytest.raises(UserError, match="holds the values of tensors"):
        export_model(path, graph, {a: new}, out)
    with pytest.raises(UserError, match="holds the values of tensors"):
        export_model(path, graph, {a: new, b: new + 1}, out)
    assert not out.exists()
    export_model(path, graph, {a: new, b: new}, out)
    assert_only_updated_changed(load_model(out), graph, {a: new, b: new})


# --------------------------------------------------------------------------------------------
# ONNX
# --------------------------------------------------------------------------------------------

ONNX_FIXTURES = ("onnx_qdq_int8.onnx", "onnx_qdq_uint8.onnx", "onnx_qop_uint8.onnx")
# Constants the frontend computed rather than read from an initializer: the FC layers of the
# fixtures have no bias of their own (their bias is a separate Add), so the IR's is zeros.
COMPUTED = {"onnx_qdq_int8.onnx": {"fc_matmul_bias"}, "onnx_qdq_uint8.onnx": {"fc_matmul_bias"},
            "onnx_qop_uint8.onnx": {"fc_matmul_quant_bias"}}


def small_float_model():
    """Conv, depthwise Conv, Gemm with transB=1 and Gemm with transB=0, all with biases."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)

    def w(shape, fan_in):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    def b(n):
        return (rng.standard_normal(n) * 0.1).astype(np.float32)

    inits = [numpy_helper.from_array(a, n) for n, a in (
        ("c1.w", w((6, 3, 3, 3), 27)), ("c1.b", b(6)), ("dw.w", w((6, 1, 3, 3), 9)),
        ("dw.b", b(6)), ("fc1.w", w((8, 6), 6)), ("fc1.b", b(8)), ("fc2.w", w((8, 5), 8)),
        ("fc2.b", b(5)))]
    node = helper.make_node
    nodes = [node("Conv", ["x", "c1.w", "c1.b"], ["c1"], name="c1", kernel_shape=[3, 3],
                  pads=[1, 1, 1, 1]),
             node("Relu", ["c1"], ["c1r"], name="c1_relu"),
             node("Conv", ["c1r", "dw.w", "dw.b"], ["dw"], name="dw", kernel_shape=[3, 3],
                  group=6, strides=[2, 2]),
             node("Relu", ["dw"], ["dwr"], name="dw_relu"),
             node("GlobalAveragePool", ["dwr"], ["gap"], name="gap"),
             node("Flatten", ["gap"], ["flat"], name="flat", axis=1),
             node("Gemm", ["flat", "fc1.w", "fc1.b"], ["fc1"], name="fc1", transB=1),
             node("Relu", ["fc1"], ["fc1r"], name="fc1_relu"),
             node("Gemm", ["fc1r", "fc2.w", "fc2.b"], ["y"], name="fc2")]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def quantize(path: Path, fmt: str, per_channel: bool) -> Path:
    """uint8 activations and symmetric uint8 weights (zero point 128)."""
    import onnx
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    src = path.with_suffix(".float.onnx")
    onnx.save(small_float_model(), str(src))

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(3)
            self.it = iter([{"x": rng.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)}
                            for _ in range(16)])

        def get_next(self):
            return next(self.it, None)

    logging.disable(logging.WARNING)
    try:
        quantize_static(str(src), str(path), Reader(), quant_format=getattr(QuantFormat, fmt),
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QUInt8,
                        per_channel=per_channel, extra_options={"WeightSymmetric": True})
    finally:
        logging.disable(logging.NOTSET)
    return path


def to_constant_nodes(src: Path, dst: Path, names: tuple[str, ...]) -> Path:
    """``src`` with the initializers ``names`` moved into Constant nodes."""
    import onnx
    from onnx import helper

    model = onnx.load(str(src))
    for name in names:
        (init,) = [i for i in model.graph.initializer if i.name == name]
        model.graph.node.insert(0, helper.make_node("Constant", [], [name], value=init))
        model.graph.initializer.remove(init)
    onnx.save(model, str(dst))
    return dst


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory):
    pytest.importorskip("onnxruntime")
    root = tmp_path_factory.mktemp("export_onnx")
    made: dict[str, Path] = {}
    builders = {
        "small_qdq_uint8_weights": lambda p: quantize(p, "QDQ", True),
        "small_qop_uint8_weights": lambda p: quantize(p, "QOperator", False),
        "small_qdq_constant_nodes": lambda p: to_constant_nodes(
            onnx_model_path("small_qdq_uint8_weights"), p, ("c1.w_quantized", "fc2.b_quantized")),
    }

    def onnx_model_path(name: str) -> Path:
        if name in ONNX_FIXTURES:
            return FIXTURES / name
        if name not in made:
            made[name] = builders[name](root / f"{name}.onnx")
        return made[name]

    return onnx_model_path


ONNX_MODELS = list(ONNX_FIXTURES) + ["small_qdq_uint8_weights", "small_qop_uint8_weights",
                                     "small_qdq_constant_nodes"]


def assert_onnx_runs_like_reference(path: Path, trained: Graph, count: int = 12) -> list:
    """test_onnx_frontend's end-to-end criterion against the ONNX specification: all outputs
    within 3 LSB, >= 90% within 1, and the argmax agrees unless the winner leads by at most
    2 LSB."""
    from onnx_engines import SpecSession, argmax_disagreements, compare_outputs

    per_input = {n: random_inputs(trained.tensor(n).shape, trained.tensor(n).dtype, count,
                                  seed=6 + k) for k, n in enumerate(trained.inputs)}
    feeds = [{n: v[i] for n, v in per_input.items()} for i in range(count)]
    outputs = compare_outputs(SpecSession(path), trained, lambda f: run(trained, f), feeds)
    for name, (d, spec, ours) in outputs.items():
        assert d.max() <= 3, f"{name}: max difference {d.max()} LSB"
        assert np.mean(d <= 1) >= 0.9, f"{name}: only {np.mean(d <= 1):.1%} within 1 LSB"
        assert argmax_disagreements(spec, ours, lead=2) == 0, name
    return feeds


def stored_names(model) -> set[str]:
    return ({i.name for i in model.graph.initializer}
            | {n.output[0] for n in model.graph.node if n.op_type == "Constant"})


@pytest.mark.parametrize("name", ONNX_MODELS)
def test_onnx_round_trip(onnx_model, name, tmp_path):
    import onnx

    path = onnx_model(name)
    graph = load_model(path)
    model = onnx.load(str(path))
    computed = {n for n in trainable(graph) if n not in stored_names(model)}
    assert computed == COMPUTED.get(name, set())
    updated = perturb(graph, [n for n in trainable(graph) if n not in computed], seed=1)
    out = tmp_path / "trained.onnx"
    export_model(path, graph, updated, out)

    assert_only_updated_changed(load_model(out), graph, updated)
    # in the file, only the updated initializers / Constant nodes changed
    new = onnx.load(str(out))
    old_inits = {i.name: i.SerializeToString() for i in model.graph.initializer}
    new_inits = {i.name: i.SerializeToString() for i in new.graph.initializer}
    assert set(new_inits) == set(old_inits)
    assert {n for n in old_inits if new_inits[n] != old_inits[n]} == set(updated) & set(old_inits)
    changed_nodes = {n.output[0] for n, m in zip(model.graph.node, new.graph.node)
                     if n.SerializeToString() != m.SerializeToString()}
    assert len(new.graph.node) == len(model.graph.node)
    assert changed_nodes == set(updated) - set(old_inits)

    trained = with_constants(graph, updated)
    feeds = assert_onnx_runs_like_reference(out, trained)
    assert_outputs_move(graph, trained, feeds)

    for n in computed:  # nothing in the file to write them into
        with pytest.raises(UserError, match=f"'{n}'.*not stored in the ONNX model"):
            export_model(path, graph, {n: graph.tensor(n).data + 1}, tmp_path / "no.onnx")
    assert not (tmp_path / "no.onnx").exists()


def test_onnx_layouts_and_uint8_shift(onnx_model, tmp_path):
    """The file holds the inverse of the frontend's transforms: Conv OHWI -> OIHW, depthwise
    1HWC -> C1HW, Gemm transB=1 as is, Gemm transB=0 transposed, uint8 weights +128."""
    import onnx
    from onnx import numpy_helper

    for name in ("small_qdq_uint8_weights", "small_qop_uint8_weights"):
        path = onnx_model(name)
        graph = load_model(path)
        updated = perturb(graph, trainable(graph), seed=2)
        out = tmp_path / f"{name}.onnx"
        export_model(path, graph, updated, out)
        inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(out)).graph.initializer}
        w = {k: updated[f"{k}.w_quantized"].astype(np.int64) for k in ("c1", "dw", "fc1", "fc2")}
        assert {inits[f"{k}.w_quantized"].dtype for k in w} == {np.dtype(np.uint8)}
        np.testing.assert_array_equal(inits["c1.w_quantized"], w["c1"].transpose(0, 3, 1, 2) + 128)
        np.testing.assert_array_equal(inits["dw.w_quantized"], w["dw"].transpose(3, 0, 1, 2) + 128)
        np.testing.assert_array_equal(inits["fc1.w_quantized"], w["fc1"] + 128)
        np.testing.assert_array_equal(inits["fc2.w_quantized"], w["fc2"].T + 128)
        for k in w:
            np.testing.assert_array_equal(inits[f"{k}.b_quantized"], updated[f"{k}.b_quantized"])


def test_onnx_shared_initializer(tmp_path):
    """Two convs reading one weight initializer (IR names 'w' and 'w#1'): both must get the
    same new value, or export refuses."""
    import onnx

    model = onnx.load(str(FIXTURES / "onnx_qdq_int8.onnx"))
    (dq,) = [n for n in model.graph.node if n.output[0] == "gate.weight_DequantizeLinear_Output"]
    dq.input[0] = "pwconv.weight_quantized"
    path = tmp_path / "shared.onnx"
    onnx.save(model, str(path))
    graph = load_model(path)
    a, b = "pwconv.weight_quantized", "pwconv.weight_quantized#1"
    assert trainable(graph).get(b) == "weights"
    new = perturb(graph, [a], seed=3)[a]
    out = tmp_path / "trained.onnx"
    with pytest.raises(UserError, match="initializer 'pwconv.weight_quantized' holds"):
        export_model(path, graph, {a: new}, out)
    with pytest.raises(UserError, match="holds the values of tensors"):
        export_model(path, graph, {a: new, b: np.flip(new, 0).copy()}, out)
    assert not out.exists()
    export_model(path, graph, {a: new, b: new}, out)
    assert_only_updated_changed(load_model(out), graph, {a: new, b: new})


def test_onnx_external_data_is_written_inline(tmp_path):
    """A model saved with its tensors in a side file exports as one self-contained file."""
    import onnx

    path = tmp_path / "src" / "external.onnx"
    path.parent.mkdir()
    onnx.save(onnx.load(str(FIXTURES / "onnx_qdq_int8.onnx")), str(path),
              save_as_external_data=True, all_tensors_to_one_file=True,
              location="external.data", size_threshold=0)
    graph = load_model(path)
    updated = perturb(graph, ["conv1.weight_quantized", "conv1.bias_quantized"], seed=5)
    out = tmp_path / "out" / "trained.onnx"
    export_model(path, graph, updated, out)
    assert [p.name for p in out.parent.iterdir()] == ["trained.onnx"]
    assert_only_updated_changed(load_model(out), graph, updated)


def test_onnx_bias_the_frontend_rounds_is_refused(tmp_path):
    """A bias whose scale is not input_scale * weight_scale is requantized (rounded) by the
    frontend; writing the new integers would not read back as them, so export refuses and
    writes nothing."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(FIXTURES / "onnx_qdq_int8.onnx"))
    (scale,) = [i for i in model.graph.initializer if i.name == "conv1.bias_quantized_scale"]
    scale.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(scale) * np.float32(1.5),
                                           scale.name))
    path = tmp_path / "rescaled.onnx"
    onnx.save(model, str(path))
    graph = load_model(path)
    bias = graph.tensor("conv1.bias_quantized")
    new = (bias.data + np.arange(1, bias.size + 1, dtype=np.int32) * 7).astype(np.int32)
    out = tmp_path / "trained.onnx"
    with pytest.raises(UserError, match="'conv1.bias_quantized' cannot be exported exactly"):
        export_model(path, graph, {"conv1.bias_quantized": new}, out)
    assert list(tmp_path.iterdir()) == [path]  # no output, no temporary left behind


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------

ERROR_MODELS = [pytest.param("digits_cnn.tflite", id="tflite"),
                pytest.param("onnx_qdq_int8.onnx", id="onnx")]


def _one_line_user_error(excinfo) -> str:
    assert type(excinfo.value) is UserError
    text = str(excinfo.value)
    assert "\n" not in text and text
    return text


@pytest.mark.parametrize("model", ERROR_MODELS)
def test_bad_updates_are_refused(model, tmp_path):
    path = FIXTURES / model
    graph = load_model(path)
    suffix = path.suffix
    weights = next(n for n, role in trainable(graph).items() if role == "weights")
    bias = next(n for n, role in trainable(graph).items() if role == "bias")
    w = graph.tensor(weights).data
    out = tmp_path / f"out{suffix}"
    cases = {
        "no_such_tensor": ({"no_such_tensor": w}, "unknown tensor 'no_such_tensor'"),
        "activation": ({graph.inputs[0]: np.zeros(graph.tensor(graph.inputs[0]).shape,
                                                  graph.tensor(graph.inputs[0]).dtype)},
                       "is not the weights or bias of a"),
        "shape": ({weights: w.reshape(-1)}, f"'{weights}' has shape .* the new value"),
        "dtype": ({weights: w.astype(np.int32)}, f"'{weights}' is int8, the new value int32"),
        "bias_dtype": ({bias: graph.tensor(bias).data.astype(np.int64)},
                       f"'{bias}' is int32, the new value int64"),
    }
    for what, (updated, message) in cases.items():
        with pytest.raises(UserError, match=message) as excinfo:
            export_model(path, graph, updated, out)
        _one_line_user_error(excinfo)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("model", ERROR_MODELS)
def test_output_name_must_match_the_model_kind(model, tmp_path):
    path = FIXTURES / model
    graph = load_model(path)
    kind = "TFLite" if path.suffix == ".tflite" else "ONNX"
    other = ".onnx" if kind == "TFLite" else ".tflite"
    for name in (f"out{other}", "out", "out.bin"):
        with pytest.raises(UserError, match=f"is {kind}, so its name must end in "
                                            f"{path.suffix}") as excinfo:
            export_model(path, graph, {}, tmp_path / name)
        _one_line_user_error(excinfo)
    assert list(tmp_path.iterdir()) == []
    upper = tmp_path / f"OUT{path.suffix.upper()}"  # the suffix's case does not matter
    export_model(path, graph, {}, upper)
    assert upper.is_file()


def test_graph_from_another_model_kind_is_refused(tmp_path):
    graph = load_model(FIXTURES / "digits_cnn.tflite")
    with pytest.raises(UserError, match=r"is not the model the graph was loaded from \(it is "
                                        r"ONNX, the graph came from TFLite\)") as excinfo:
        export_model(FIXTURES / "onnx_qdq_int8.onnx", graph, {}, tmp_path / "out.onnx")
    _one_line_user_error(excinfo)


def test_unwritable_output_is_a_user_error(tmp_path):
    path = FIXTURES / "digits_cnn.tflite"
    graph = load_model(path)
    (tmp_path / "dir.tflite").mkdir()
    with pytest.raises(UserError, match="is a directory"):
        export_model(path, graph, {}, tmp_path / "dir.tflite")
    (tmp_path / "file").write_text("")
    with pytest.raises(UserError, match="cannot write"):
        export_model(path, graph, {}, tmp_path / "file" / "out.tflite")


def test_overwriting_the_input_model(tmp_path):
    """Exporting onto the input file replaces it only with the complete, checked result."""
    path = tmp_path / "model.tflite"
    path.write_bytes((FIXTURES / "digits_cnn.tflite").read_bytes())
    graph = load_model(path)
    updated = perturb(graph, trainable(graph), seed=8)
    export_model(path, graph, updated, path)
    assert_only_updated_changed(load_model(path), graph, updated)
    assert [p.name for p in tmp_path.iterdir()] == ["model.tflite"]
