"""A classifier whose only training that fits the STM32F746 is sparse training of one late
block (issue 64): a 96x96 input whose first convolutions keep wide activations, so full
training and every sparse build that holds all its blocks exceed the 256 KB budget, while
a build of the last block alone fits. Built with onnx.helper, quantized (QDQ, int8,
per-channel) by onnxruntime from fixed seeds; only the tests use it.

``LATE_CHANNELS`` / ``LATE_STRIDES`` make its deeper sibling: two more 128-channel
convolutions at 6x6, so that the last of the default 4 blocks is too large as well and
only a finer partition's last block fits (`--blocks 5 --block 4`)."""
from __future__ import annotations

from pathlib import Path

SIDE = 96
CHANNELS = (16, 16, 32, 32, 64, 64, 128, 128)
STRIDES = (1, 2, 1, 2, 1, 2, 1, 2)
LATE_CHANNELS = CHANNELS + (128, 128)
LATE_STRIDES = STRIDES + (1, 1)
CLASSES = 10


def one_block_model(path: Path, channels: tuple[int, ...] = CHANNELS,
                    strides: tuple[int, ...] = STRIDES) -> Path:
    """Write the model to ``path`` (.onnx) and return it."""
    from generated_models import one_block_graph
    graph, logits = one_block_graph(channels, strides, SIDE, CLASSES)
    return graph.save_quantized(path, logits, [1, 3, SIDE, SIDE], CLASSES, "one_block")
