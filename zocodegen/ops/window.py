"""Window geometry shared by the windowed ops (convolutions and pools) and the frontends."""
from __future__ import annotations

from ..errors import ModelError
from ..ir import Op


def conv_output_size(size: int, kernel: int, stride: int, dilation: int,
                     pad_before: int, pad_after: int) -> int:
    effective = (kernel - 1) * dilation + 1
    return (size + pad_before + pad_after - effective) // stride + 1


def window_output(op: Op, x: tuple, kernel: tuple[int, int], channels: int,
                  at: str) -> tuple[int, ...]:
    """NHWC output of a ``kernel`` window run over ``x`` with the op's stride, dilation and
    explicit padding."""
    o = op.options
    top, bottom, left, right = o["padding"]
    dilation = o.get("dilation", (1, 1))
    h = conv_output_size(x[1], kernel[0], o["stride"][0], dilation[0], top, bottom)
    w = conv_output_size(x[2], kernel[1], o["stride"][1], dilation[1], left, right)
    if h < 1 or w < 1:
        raise ModelError(f"{at}: the window does not fit the input {list(x)}")
    return (x[0], h, w, channels)
