"""Model files -> IR. ``load_model`` picks the frontend from the file's content, then checks
that the graph is one the rest of the pipeline can handle."""
from __future__ import annotations

from pathlib import Path

from ..errors import ModelError
from ..files import not_a_file, open_input
from ..ir import Graph
from .validate import validate


def check_model_file(path: Path) -> None:
    """A model argument that is no file, named as what it is."""
    why = not_a_file(path)
    if why == "no such file":
        raise ModelError(f"{path}: no such model file")
    if why is not None:
        raise ModelError(f"{path} is {why}, not a model file: MODEL is a .tflite or .onnx "
                         "file")


def model_format(path: Path) -> str | None:
    """"tflite" or "onnx", as the file's first bytes (or an ONNX file's name) say; None for
    neither."""
    check_model_file(path)
    with open_input(path, "model") as f:
        head = f.read(8)
    if head[4:8] == b"TFL3":
        return "tflite"
    return "onnx" if path.suffix.lower() == ".onnx" or head[:1] == b"\x08" else None


def load_model(path: str | Path) -> Graph:
    path = Path(path)
    kind = model_format(path)
    try:
        if kind == "tflite":
            from .tflite import load_tflite
            graph = load_tflite(path)
        elif kind == "onnx":
            from .onnx import load_onnx
            graph = load_onnx(path)
        else:
            raise ModelError(f"{path}: not a TFLite (.tflite) or ONNX (.onnx) model")
    except ModelError as exc:  # a damaged file's error names it, whichever frontend read it
        if str(path) in str(exc):
            raise
        raise type(exc)(f"{path}: {exc}") from None
    validate(graph, str(path))
    return graph


__all__ = ["check_model_file", "load_model"]
