"""A classifier whose only training that fits the STM32F746 is sparse training of one late
block (issue 64): a 96x96 input whose first convolutions keep wide activations, so full
training and every sparse build that holds all its blocks exceed the 256 KB budget, while
a build of the last block alone fits. Built with onnx.helper, quantized (QDQ, int8,
per-channel) by onnxruntime from fixed seeds; only the tests use it.

``LATE_CHANNELS`` / ``LATE_STRIDES`` make its deeper sibling: two more 128-channel
convolutions at 6x6, so that the last of the default 4 blocks is too large as well and
only a finer partition's last block fits (`--blocks 5 --block 4`)."""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

SIDE = 96
CHANNELS = (16, 16, 32, 32, 64, 64, 128, 128)
STRIDES = (1, 2, 1, 2, 1, 2, 1, 2)
LATE_CHANNELS = CHANNELS + (128, 128)
LATE_STRIDES = STRIDES + (1, 1)
CLASSES = 10


def one_block_model(path: Path, channels: tuple[int, ...] = CHANNELS,
                    strides: tuple[int, ...] = STRIDES) -> Path:
    """Write the model to ``path`` (.onnx) and return it."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def init(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    x, cin = "x", 3
    for i, (cout, stride) in enumerate(zip(channels, strides)):
        w = init(f"c{i}.w", rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2 / (cin * 9)))
        b = init(f"c{i}.b", rng.standard_normal(cout) * 0.05)
        nodes += [helper.make_node("Conv", [x, w, b], [f"c{i}"], name=f"c{i}",
                                   kernel_shape=[3, 3], strides=[stride, stride],
                                   pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"r{i}")]
        x, cin = f"r{i}", cout
    fc_w = init("fc.w", rng.standard_normal((CLASSES, cin)) * np.sqrt(2 / cin))
    fc_b = init("fc.b", np.zeros(CLASSES))
    nodes += [helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"),
              helper.make_node("Flatten", ["gap"], ["flat"], name="flat", axis=1),
              helper.make_node("Gemm", ["flat", fc_w, fc_b], ["fc"], name="fc", transB=1),
              helper.make_node("Softmax", ["fc"], ["probs"], name="probs", axis=-1)]
    shape = [1, 3, SIDE, SIDE]
    graph = helper.make_graph(
        nodes, "one_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, CLASSES])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
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
        quantize_static(str(source), str(path), Calibration(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        per_channel=True)
    finally:
        logging.disable(logging.NOTSET)
    return Path(path)
