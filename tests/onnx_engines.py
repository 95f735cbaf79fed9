"""The two ONNX engines the ONNX frontend is compared with (docs/onnx.md): the ONNX
specification's semantics, the reference, and onnxruntime, checked within documented bounds.

A quantized operator means: dequantize its inputs, run the float operator, quantize the result
(round half to even, saturate). QDQ graphs spell this out node by node; QOperator graphs pack it
into QLinear* nodes, some of them onnxruntime's ``com.microsoft`` contrib operators. This module
rewrites every QLinear* node into that DequantizeLinear -> float op -> QuantizeLinear expansion
and runs the result with ``onnx.reference.ReferenceEvaluator``, the ONNX project's own numpy
implementation of the operator specifications. Unlike onnxruntime, whose integer kernels and
QDQ fusions depend on its release and on the CPU's instruction set (AVX2 without VNNI saturates
int16 pair sums), this gives the same numbers on every machine.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper, version_converter
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

_MS = "com.microsoft"
_EVALUATOR_OPSET = 21


class _Expander:
    """Rewrites one graph's QLinear* nodes; new tensors get names no model uses."""

    def __init__(self, graph: onnx.GraphProto):
        self.graph = graph
        self.inits = {t.name: t for t in graph.initializer}
        self.nodes: list[onnx.NodeProto] = []
        self.count = 0

    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"__spec_{hint}_{self.count}"

    def const(self, value: np.ndarray, hint: str) -> str:
        name = self.fresh(hint)
        self.graph.initializer.append(numpy_helper.from_array(value, name))
        self.inits[name] = self.graph.initializer[-1]
        return name

    def value(self, name: str) -> np.ndarray:
        if name not in self.inits:
            raise NotImplementedError(f"quantization parameter '{name}' is not a constant")
        return numpy_helper.to_array(self.inits[name])

    def dq(self, x: str, scale: str, zero: str, axis: int = 1) -> str:
        out = self.fresh("dq")
        ins = [x, scale] + ([zero] if zero else [])
        self.nodes.append(helper.make_node("DequantizeLinear", ins, [out], axis=axis))
        return out

    def q(self, x: str, scale: str, zero: str, out: str) -> None:
        self.nodes.append(helper.make_node("QuantizeLinear", [x, scale, zero], [out]))

    def float_node(self, op: str, ins: list[str], node: onnx.NodeProto, drop=()) -> str:
        out = self.fresh(op.lower())
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute
                 if a.name not in drop}
        self.nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def bias(self, b: str, x_scale: str, w_scale: str) -> str:
        """An int32 bias dequantized with scale x_scale * w_scale (per output channel)."""
        scale = (self.value(x_scale).astype(np.float32)
                 * self.value(w_scale).astype(np.float32)).astype(np.float32)
        return self.dq(b, self.const(scale, "bias_scale"), "", axis=0)

    def expand(self, node: onnx.NodeProto) -> None:
        i, (out,) = list(node.input), node.output
        kind = (node.domain if node.domain not in ("", "ai.onnx") else "", node.op_type)
        if kind == ("", "QLinearConv"):
            w_axis = 0
            x = self.dq(i[0], i[1], i[2])
            w = self.dq(i[3], i[4], i[5], axis=w_axis)
            ins = [x, w] + ([self.bias(i[8], i[1], i[4])] if len(i) > 8 and i[8] else [])
            self.q(self.float_node("Conv", ins, node), i[6], i[7], out)
        elif kind == ("", "QLinearMatMul"):
            a = self.dq(i[0], i[1], i[2])
            b = self.dq(i[3], i[4], i[5], axis=1)
            self.q(self.float_node("MatMul", [a, b], node), i[6], i[7], out)
        elif kind in ((_MS, "QLinearAdd"), (_MS, "QLinearMul")):
            a = self.dq(i[0], i[1], i[2])
            b = self.dq(i[3], i[4], i[5])
            self.q(self.float_node(node.op_type[len("QLinear"):], [a, b], node), i[6], i[7], out)
        elif kind == (_MS, "QLinearConcat"):
            parts = [self.dq(*i[k:k + 3]) for k in range(2, len(i), 3)]
            self.q(self.float_node("Concat", parts, node), i[0], i[1], out)
        elif kind in ((_MS, "QLinearGlobalAveragePool"), (_MS, "QLinearAveragePool"),
                      (_MS, "QLinearSoftmax")):
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            if attrs.get("channels_last", 0):
                raise NotImplementedError(f"{node.op_type} with channels_last")
            float_op = node.op_type[len("QLinear"):]
            x = self.dq(i[0], i[1], i[2])
            y = self.float_node(float_op, [x], node, drop=("channels_last", "opset"))
            self.q(y, i[3], i[4], out)
        elif kind == (_MS, "QGemm"):
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            a = self.dq(i[0], i[1], i[2])
            b = self.dq(i[3], i[4], i[5], axis=0 if attrs.get("transB", 0) else 1)
            ins = [a, b] + ([self.bias(i[6], i[1], i[4])] if len(i) > 6 and i[6] else [])
            y = self.float_node("Gemm", ins, node)
            if len(i) > 7 and i[7]:
                self.q(y, i[7], i[8] if len(i) > 8 else "", out)
            else:
                self.nodes.append(helper.make_node("Identity", [y], [out]))
        elif node.domain not in ("", "ai.onnx"):
            raise NotImplementedError(f"no specification semantics for {node.domain}:"
                                      f"{node.op_type}")
        else:
            self.nodes.append(node)


def specification_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every QLinear* node written as DequantizeLinear -> op -> QuantizeLinear;
    only standard-domain operators remain."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    expander = _Expander(model.graph)
    for node in model.graph.node:
        expander.expand(node)
    del model.graph.node[:]
    model.graph.node.extend(expander.nodes)
    kept = [o for o in model.opset_import if o.domain in ("", "ai.onnx")]
    del model.opset_import[:]
    model.opset_import.extend(kept)
    # the evaluator implements the quantization operators from opset 19 on (their semantics
    # for int8/uint8 are those of opset 10); the converter keeps every other op's meaning
    return version_converter.convert_version(model, max(_EVALUATOR_OPSET, kept[0].version))


def _load(model: Path | str | bytes | onnx.ModelProto) -> onnx.ModelProto:
    if isinstance(model, (str, Path)):
        return onnx.load(str(model))
    if isinstance(model, bytes):
        return onnx.ModelProto.FromString(model)
    return model


class MaxPool(OpRun):
    """MaxPool written out here: the evaluator's stride-1 path swaps the axes of asymmetric
    pads (onnx 1.23: a 7x6 map with pads [0, 0, 1, 1] comes out 6x7). Padding never wins."""

    def _run(self, x, auto_pad=None, ceil_mode=None, dilations=None, kernel_shape=None,
             pads=None, storage_order=None, strides=None):
        if (auto_pad not in (None, "NOTSET", b"NOTSET") or ceil_mode
                or any(d != 1 for d in dilations or ())):
            raise NotImplementedError("MaxPool with auto_pad, ceil_mode or dilations")
        rank = len(kernel_shape)
        pads = list(pads or [0] * 2 * rank)
        strides = list(strides or [1] * rank)
        low = np.finfo(x.dtype).min if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        padded = np.pad(x, [(0, 0), (0, 0)] + [(pads[k], pads[k + rank]) for k in range(rank)],
                        constant_values=low)
        windows = np.lib.stride_tricks.sliding_window_view(padded, kernel_shape,
                                                           axis=tuple(range(2, 2 + rank)))
        windows = windows[(slice(None), slice(None)) + tuple(slice(None, None, s)
                                                              for s in strides)]
        return (windows.max(axis=tuple(range(-rank, 0))).astype(x.dtype),)


class SpecSession:
    """Runs a model with the specification's semantics: ``run`` gives the graph's outputs in
    order, ``run_all`` every tensor by name."""

    def __init__(self, model: Path | str | bytes | onnx.ModelProto):
        model = _load(model)
        self.model = specification_model(model)
        self.output_names = [o.name for o in model.graph.output]
        self.evaluator = ReferenceEvaluator(self.model, new_ops=[MaxPool])

    def run(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.evaluator.run(self.output_names, feed)

    def run_all(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.evaluator.run(None, feed, intermediate=True)


class OrtSession:
    """onnxruntime's CPU provider behind SpecSession's interface: with its default graph
    optimizations (``fused``: QDQ node groups become its int8 kernels), as a user runs it, or
    with none (each DequantizeLinear, float op and QuantizeLinear runs as written)."""

    def __init__(self, model: Path | str | bytes | onnx.ModelProto, fused: bool = True):
        import onnxruntime as ort
        model = _load(model)
        self.output_names = [o.name for o in model.graph.output]
        self.options = ort.SessionOptions()
        if not fused:
            self.options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        self.session = ort.InferenceSession(model.SerializeToString(), self.options,
                                            providers=["CPUExecutionProvider"])
        # every node output as a graph output too, for run_all
        present = set(self.output_names)
        every = onnx.ModelProto.FromString(model.SerializeToString())
        for node in every.graph.node:
            for out in node.output:
                if out and out not in present:
                    every.graph.output.append(onnx.ValueInfoProto(name=out))  # untyped
                    present.add(out)
        self._every = every.SerializeToString()
        self._all = None

    def run(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.session.run(self.output_names, feed)

    def run_all(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import onnxruntime as ort
        if self._all is None:
            self._all = ort.InferenceSession(self._every, self.options,
                                             providers=["CPUExecutionProvider"])
        names = [o.name for o in self._all.get_outputs()]
        return dict(zip(names, self._all.run(None, feed)))


ENGINES = {"specification": SpecSession, "onnxruntime": OrtSession,
           "onnxruntime-unfused": lambda model: OrtSession(model, fused=False)}


def ort_int8_kernels_saturate() -> str:
    """Why onnxruntime's int8 kernels can saturate on this CPU, or "" where they do not.

    On x86-64 its u8s8 matrix kernels multiply with VPMADDUBSW, whose int16 sums of two
    products saturate, unless the CPU has VNNI (VPDPBUSD sums into int32); ARM's dot-product
    instructions sum into int32 too. Measured under qemu-x86_64 -cpu Haswell: up to 255 LSB
    from the specification, identically with onnxruntime 1.31.1 and 1.32.0 (docs/onnx.md).
    The CPU's features come from numpy's CPUID probe (an emulated CPU reports its own, unlike
    /proc/cpuinfo); AVX-VNNI without AVX512 is not in numpy's list, so such CPUs count as
    saturating and the check is skipped there, never wrongly run."""
    import platform
    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686"):
        return ""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # numpy 1.x
        from numpy.core._multiarray_umath import __cpu_features__ as features
    if features.get("AVX512VNNI"):
        return ""
    return ("this x86-64 CPU reports no AVX512-VNNI: onnxruntime's u8s8 int8 kernels saturate "
            "int16 pair sums here (docs/onnx.md)")


def output_quant(graph, name: str):
    """Quantization of an IR output: its own (int8) or that of the DEQUANTIZE's input."""
    t = graph.tensor(name)
    if t.dtype == np.int8:
        return t.quant
    (op,) = [op for op in graph.ops if name in op.outputs]
    assert op.type == "DEQUANTIZE"
    return graph.tensor(op.inputs[0]).quant


def to_lsb(value: np.ndarray, quant) -> np.ndarray:
    """Values in the quantized domain (int64), without clamping."""
    if value.dtype in (np.int8, np.uint8):
        return value.astype(np.int64)
    return np.round(value.astype(np.float64) / quant.scalar_scale).astype(np.int64) \
        + quant.scalar_zero_point


def compare_outputs(engine, graph, run_ir, feeds) -> dict[str, tuple]:
    """Per output of ``graph``: (|engine - IR| in LSB, engine in LSB, IR in LSB), each stacked
    over ``feeds``; ``run_ir(feed)`` gives the IR's outputs by name."""
    result: dict[str, tuple[list, list, list]] = {n: ([], [], []) for n in graph.outputs}
    for feed in feeds:
        expected = dict(zip(engine.output_names, engine.run(feed)))
        got = run_ir(feed)
        for name in graph.outputs:
            q = output_quant(graph, name)
            assert got[name].shape == expected[name].shape, name
            assert got[name].dtype == expected[name].dtype, name
            a, b = to_lsb(expected[name], q), to_lsb(got[name], q)
            result[name][0].append(np.abs(a - b))
            result[name][1].append(a)
            result[name][2].append(b)
    return {n: tuple(np.stack(v) for v in lists) for n, lists in result.items()}


def argmax_disagreements(engine_lsb: np.ndarray, ir_lsb: np.ndarray, lead: int) -> int:
    """Samples whose argmax differs although the engine's winner leads by more than ``lead``
    LSB (a smaller lead can be flipped by rounding differences of the size allowed)."""
    count = 0
    for a, b in zip(engine_lsb, ir_lsb):
        a, b = a.reshape(-1), b.reshape(-1)
        if a.size >= 2 and np.diff(np.sort(a)[-2:])[0] > lead and np.argmax(a) != np.argmax(b):
            count += 1
    return count
