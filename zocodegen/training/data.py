"""DATA.npz (DESIGN.md section 8) checked against the model before any training starts:
``x`` (N, *input shape) in the input dtype, ``y`` (N,) integer labels in [0, classes);
optional ``x_val``/``y_val`` and ``x_test``/``y_test`` alike."""
from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataError
from ..ir import Graph

SPLITS = (("x", "y"), ("x_val", "y_val"), ("x_test", "y_test"))


@dataclass(frozen=True)
class Dataset:
    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    x_val: np.ndarray | None = None
    y_val: np.ndarray | None = None


def _check_split(graph: Graph, num_classes: int, source: str, xk: str, yk: str,
                 x: np.ndarray, y: np.ndarray) -> None:
    t = graph.tensor(graph.inputs[0])
    want = tuple(t.shape[1:])
    if x.dtype != np.dtype(t.dtype):
        raise DataError(f"{source}: '{xk}' is {x.dtype}, the model's input is "
                        f"{np.dtype(t.dtype).name}")
    if x.ndim != len(want) + 1 or tuple(x.shape[1:]) != want:
        raise DataError(f"{source}: '{xk}' has shape {list(x.shape)}, expected "
                        f"[N, {', '.join(map(str, want))}]")
    if len(x) == 0:
        raise DataError(f"{source}: '{xk}' is empty")
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"{source}: '{yk}' must be a 1-D integer array, got {y.dtype} "
                        f"{list(y.shape)}")
    if len(y) != len(x):
        raise DataError(f"{source}: '{xk}' has {len(x)} samples but '{yk}' has {len(y)}")
    bad = (y < 0) | (y >= num_classes)
    if bad.any():
        raise DataError(f"{source}: '{yk}' has label {int(y[bad][0])} outside "
                        f"0..{num_classes - 1} (the model has {num_classes} classes)")


def load_dataset(path: Path, graph: Graph, num_classes: int) -> Dataset:
    if len(graph.inputs) != 1:
        raise DataError("training needs a model with exactly one input")
    source = str(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except FileNotFoundError:
        raise DataError(f"data file {source} does not exist") from None
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise DataError(f"{source} is not a readable .npz file ({exc})") from None
    if "x" not in arrays or "y" not in arrays:
        raise DataError(f"{source} needs arrays 'x' and 'y' (has: "
                        f"{', '.join(sorted(arrays)) or 'none'})")
    found = {}
    for xk, yk in SPLITS:
        if (xk in arrays) != (yk in arrays):
            raise DataError(f"{source}: '{xk}' and '{yk}' must come together")
        if xk in arrays:
            _check_split(graph, num_classes, source, xk, yk, arrays[xk], arrays[yk])
            found[xk], found[yk] = arrays[xk], arrays[yk].astype(np.int64)
    return Dataset(**found)
