"""Errors a user can fix. The CLI prints their message on one line and exits with status 2;
anything else that escapes is an internal failure (status 1)."""
from __future__ import annotations

import sys
from collections.abc import Callable, Sequence


class UserError(Exception):
    """Bad input or usage: a malformed/unsupported model, wrong data shape, missing file."""


class ModelError(UserError):
    """The model file cannot be read or uses something the IR cannot express."""


class UnsupportedOpError(ModelError):
    pass


class DataError(UserError):
    """Input data (tensors, datasets) does not match what the model expects."""


def check_finite(x, what: str) -> None:
    """Refuse float data with NaN or infinity: quantizing it gives arbitrary int8 values (NaN
    casts are undefined), so a run would train or infer on garbage without a word."""
    import numpy as np
    if np.issubdtype(x.dtype, np.floating):
        bad = ~np.isfinite(x)
        if bad.any():
            first = np.argwhere(bad)[0]
            raise DataError(f"{what} holds {int(bad.sum()):,} NaN or infinite value(s), the "
                            f"first at index {tuple(int(i) for i in first)}; clean the data")


def check_labels(labels: Sequence[int], num_classes: int, where: Callable[[int], str]) -> None:
    """Refuse a class index outside 0..num_classes-1, naming where the first one is
    (``where(k)`` for its position k): the one rule for DATA.npz's ``y`` arrays, class folders
    and labels files. A label the model has no output for is never re-mapped to one it has
    (that would shift every label) nor dropped."""
    import numpy as np
    values = labels if isinstance(labels, np.ndarray) else np.array(labels, dtype=object)
    bad = np.flatnonzero((values < 0) | (values >= num_classes))
    if len(bad):
        k = int(bad[0])
        raise DataError(f"{where(k)} has label {values[k]} outside 0..{num_classes - 1} (the "
                        f"model has {num_classes} classes)")


def interrupted() -> int:
    """Say so in one line (the contract's Ctrl-C); the exit status of an interrupted command."""
    print("zocodegen: interrupted", file=sys.stderr)
    return 130
