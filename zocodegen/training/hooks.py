"""The user's ``--preprocess`` hook (``pack FOLDER``, docs/your-model.md): found, imported and
called under one guard, its return checked, so that whatever the user's code does (raises,
calls ``sys.exit``, returns text or objects of the wrong shape) ends ``pack`` with one line
naming the hook and the file, exit 2, and no image.

A hook is ``module:function`` (importable: the working directory is searched first, as
``python -m`` does), ``path/to/file.py:function`` (its folder is searched for the modules it
imports), or, through the Python API, the function itself. It takes a file's path and
returns that file's float input: an array of real numbers (any int or float dtype) of the
model's input shape, with or without a leading batch axis of 1, all finite.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..errors import DataError

Hook = Callable[[Path], np.ndarray]


@contextmanager
def guarded(what: str) -> Iterator[None]:
    """The one guard around the user's code: any exception, and ``SystemExit`` (a hook's
    ``sys.exit(0)`` would end pack with status 0, no image and no word), becomes a DataError
    ``what: why``. Ctrl-C (KeyboardInterrupt) still interrupts the command (status 130)."""
    try:
        yield
    except (Exception, SystemExit) as exc:
        raise DataError(f"{what}: {_why(exc)}") from None


def _why(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r})"
    if isinstance(exc, ModuleNotFoundError):
        return (f"no module named '{exc.name}': a hook's module must be importable, from the "
                f"working directory ({os.getcwd()}) or installed; or give "
                "--preprocess path/to/file.py:function")
    return " ".join(f"{type(exc).__name__}: {exc}".split())


@contextmanager
def _searched_first(folder: Path) -> Iterator[None]:
    """``folder`` at the front of the module search path while the hook's module loads."""
    entry = str(folder)
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        sys.path.remove(entry)


def hook_file(spec: str | Hook | None) -> Path | None:
    """The file a 'path/to/file.py:function' hook is read from (an input of the command,
    never to be written over), else None."""
    where = spec.rpartition(":")[0] if isinstance(spec, str) else ""
    return Path(where) if where.endswith(".py") else None


def load_hook(spec: str | Hook) -> tuple[Hook, str]:
    """'module:function', 'path/to/file.py:function' or a function -> (the function, its
    name for messages and the image header)."""
    if callable(spec):
        return spec, (f"{getattr(spec, '__module__', None) or '?'}:"
                      f"{getattr(spec, '__qualname__', None) or type(spec).__name__}")
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise DataError(f"--preprocess expects module:function or file.py:function, got "
                        f"'{spec}'")
    file = hook_file(spec)
    if file is not None and not file.is_file():
        raise DataError(f"--preprocess: no file {where}")
    with _searched_first(Path.cwd() if file is None else file.parent.resolve()), \
            guarded(f"--preprocess: importing {where} failed"):
        if file is None:
            module = importlib.import_module(where)
        else:
            found = importlib.util.spec_from_file_location(file.stem, file)
            module = importlib.util.module_from_spec(found)
            found.loader.exec_module(module)
        hook = getattr(module, name, None)
    if not callable(hook):
        raise DataError(f"--preprocess: {where} has no function {name}")
    return hook, spec


def call_hook(hook: Hook, name: str, path: Path) -> np.ndarray:
    """The hook's values for one file, as an array of real numbers (shape and finiteness are
    checked with every input, by ``folders.to_input``)."""
    what = f"{path}: --preprocess {name}"
    with guarded(f"{what} failed"):
        values = hook(path)
        array = np.asarray(values)  # may run the user's __array__ too
    if array.dtype.kind not in "iuf":
        kind = f"{type(values).__name__} of {array.dtype}" if isinstance(values, np.ndarray) \
            else type(values).__name__
        raise DataError(f"{what} returned {kind}, not an array of real numbers (the model's "
                        "float input, e.g. float32)")
    return array
