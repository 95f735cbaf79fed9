"""Classifiers the tests and benchmarks/inspect_costs.py generate rather than commit: built
with onnx.helper from fixed seeds and quantized (QDQ, int8, per-channel) by onnxruntime, as
a newcomer's own ONNX model would be.

* ``one_block.onnx`` / ``late_block.onnx``: tests/one_block_model.py (only a late block fits).
* ``lenet.onnx``: LeNet-5's shape (28x28x1; 5x5 convolutions, the first over one input
  channel; max pools; 256 -> 120 -> 84 -> 10 fully connected layers), the ONNX
  walkthrough's public model, whose one-channel convolution and wide FC layers the
  recorded costs had no example of (inspect 28 % low).
* ``small_cnn.onnx``: a 32x32x3 stride-2 convolution, depthwise, 1x1, max pool, global
  average pool and Gemm (the walkthrough's own CNN, inspect 12 % high).
* ``wide_depthwise.onnx``: a 7x7 depthwise convolution with channel multiplier 4 (the
  kernel's slow path, whose cost per output the record could not tell from its cost per
  MAC with 3x3 kernels alone: TFLite Micro's micro_speech, a 10x8 one, was 27 % high)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

import numpy as np


class _Graph:
    """Nodes and float initializers of an ONNX graph under construction."""

    def __init__(self, seed: int) -> None:
        from onnx import helper, numpy_helper
        self.helper, self.numpy_helper = helper, numpy_helper
        self.rng = np.random.default_rng(seed)
        self.inits: list = []
        self.nodes: list = []

    def init(self, name: str, value: np.ndarray) -> str:
        self.inits.append(self.numpy_helper.from_array(value.astype(np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], name: str, **attributes) -> str:
        self.nodes.append(self.helper.make_node(op, inputs, [name], name=name, **attributes))
        return name

    def conv(self, x: str, name: str, cin: int, cout: int, k: int, stride: int = 1,
             pad: int = 0, groups: int = 1, relu: str = "") -> str:
        """A convolution with He-initialised weights, then a ReLU (named ``relu``)."""
        w = self.init(f"{name}.w", self.rng.standard_normal((cout, cin // groups, k, k))
                      * np.sqrt(2 / (cin // groups * k * k)))
        b = self.init(f"{name}.b", self.rng.standard_normal(cout) * 0.05)
        grouped = {"group": groups} if groups > 1 else {}
        y = self.node("Conv", [x, w, b], name, kernel_shape=[k, k], strides=[stride, stride],
                      pads=[pad] * 4, **grouped)
        return self.node("Relu", [y], relu or f"{name}.relu")

    def gemm(self, x: str, name: str, cin: int, cout: int, relu: bool,
             bias: bool = True) -> str:
        w = self.init(f"{name}.w", self.rng.standard_normal((cout, cin)) * np.sqrt(2 / cin))
        b = self.init(f"{name}.b", self.rng.standard_normal(cout) * 0.05 if bias
                      else np.zeros(cout))
        y = self.node("Gemm", [x, w, b], name, transB=1)
        return self.node("Relu", [y], f"{name}.relu") if relu else y

    def save_quantized(self, path: Path, output: str, shape: list[int], classes: int,
                       name: str = "") -> Path:
        """The float model beside ``path`` (.float.onnx), quantized into ``path``."""
        import onnx
        from onnx import TensorProto
        from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                              quantize_static)
        probs = self.node("Softmax", [output], "probs", axis=-1)
        graph = self.helper.make_graph(
            self.nodes, name or Path(path).stem,
            [self.helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
            [self.helper.make_tensor_value_info(probs, TensorProto.FLOAT, [1, classes])],
            initializer=self.inits)
        model = self.helper.make_model(graph, opset_imports=[self.helper.make_opsetid("", 13)])
        model.ir_version = 8
        source = Path(path).with_suffix(".float.onnx")
        onnx.save(model, str(source))

        class Calibration(CalibrationDataReader):
            def __init__(self):
                draws = np.random.default_rng(3)
                self.batches = iter([{"x": draws.uniform(-1, 1, shape).astype(np.float32)}
                                     for _ in range(8)])

            def get_next(self):
                return next(self.batches, None)

        logging.disable(logging.WARNING)  # the quantizer's "consider pre-processing" chatter
        try:
            quantize_static(str(source), str(path), Calibration(),
                            quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                            weight_type=QuantType.QInt8, per_channel=True)
        finally:
            logging.disable(logging.NOTSET)
        return Path(path)


def one_block_graph(channels: tuple[int, ...], strides: tuple[int, ...], side: int,
                    classes: int) -> tuple[_Graph, str]:
    """3x3 convolutions (pads 1) of ``channels`` at ``strides``, global average pool, Gemm."""
    g, x, cin = _Graph(0), "x", 3
    for i, (cout, stride) in enumerate(zip(channels, strides)):
        x, cin = g.conv(x, f"c{i}", cin, cout, 3, stride, pad=1, relu=f"r{i}"), cout
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x], "gap")], "flat", axis=1)
    return g, g.gemm(x, "fc", cin, classes, relu=False, bias=False)


def lenet_model(path: Path) -> Path:
    g = _Graph(1)
    x = g.node("MaxPool", [g.conv("x", "c0", 1, 6, 5)], "p0", kernel_shape=[2, 2],
               strides=[2, 2])
    x = g.node("MaxPool", [g.conv(x, "c1", 6, 16, 5)], "p1", kernel_shape=[2, 2],
               strides=[2, 2])
    x = g.node("Flatten", [x], "flat", axis=1)
    x = g.gemm(g.gemm(x, "fc0", 256, 120, relu=True), "fc1", 120, 84, relu=True)
    return g.save_quantized(path, g.gemm(x, "fc2", 84, 10, relu=False), [1, 1, 28, 28], 10)


def small_cnn_model(path: Path) -> Path:
    g = _Graph(2)
    x = g.conv("x", "c0", 3, 16, 3, stride=2, pad=1)
    x = g.conv(x, "dw", 16, 16, 3, pad=1, groups=16)
    x = g.node("MaxPool", [g.conv(x, "pw", 16, 32, 1)], "pool", kernel_shape=[2, 2],
               strides=[2, 2])
    x = g.conv(x, "c1", 32, 32, 3, pad=1)
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x], "gap")], "flat", axis=1)
    return g.save_quantized(path, g.gemm(x, "fc", 32, 5, relu=False), [1, 3, 32, 32], 5)


def wide_depthwise_model(path: Path) -> Path:
    g = _Graph(3)
    x = g.conv("x", "dw", 3, 12, 7, pad=3, groups=3)
    x = g.node("Flatten", [g.node("GlobalAveragePool", [g.conv(x, "pw", 12, 16, 1)], "gap")],
               "flat", axis=1)
    return g.save_quantized(path, g.gemm(x, "fc", 16, 4, relu=False), [1, 3, 32, 32], 4)


def _one_block(path: Path) -> Path:
    from one_block_model import one_block_model
    return one_block_model(path)


def _late_block(path: Path) -> Path:
    from one_block_model import LATE_CHANNELS, LATE_STRIDES, one_block_model
    return one_block_model(path, LATE_CHANNELS, LATE_STRIDES)


#: Every generated model by file name.
GENERATED: dict[str, Callable[[Path], Path]] = {
    "one_block.onnx": _one_block, "late_block.onnx": _late_block,
    "lenet.onnx": lenet_model, "small_cnn.onnx": small_cnn_model,
    "wide_depthwise.onnx": wide_depthwise_model}


def generate_all(folder: Path) -> dict[str, Path]:
    """Every generated model, written into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    return {name: make(folder / name) for name, make in GENERATED.items()}
