"""The fast kernels' requantization compiled on first use (requantize_rows.c), one pass over
memory instead of numpy's four: about half of a training step's time at the paper's scale.

The library is built with the host's C compiler into the cache (``ZOCODEGEN_CACHE``, else
``~/.cache/zocodegen``) under a name that hashes its source, flags and compiler, so a change
of any rebuilds it and concurrent processes never see a half-written file. Without a C
compiler, or when the build fails, :func:`requantize_rows` declines and numpy runs the same
expression (fast.FloatRequant): the results are the same bits either way
(tests/test_fast_paths.py compares both with the reference kernels).
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ..files import cache_root

#: False: numpy only (tests compare the two).
ENABLED = True
SOURCE = Path(__file__).with_name("requantize_rows.c")
#: No fused multiply-add (numpy rounds the product and the sum separately); no trapping
#: math, so the comparisons become blends and every loop vectorizes.
FLAGS = ("-O3", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math", "-fPIC",
         "-shared")
#: Tried first: this CPU's widest vectors (the library is keyed by the CPU's feature flags).
NATIVE_FLAGS = ("-march=native",)


def _cpu_features() -> bytes:
    """The CPU's feature flags (Linux), so a cache shared between machines never hands one
    a library built for instructions it lacks."""
    try:
        with open("/proc/cpuinfo", "rb") as info:
            return next((line for line in info if line.startswith((b"flags", b"Features"))),
                        b"")
    except OSError:
        return b""


def _build(compiler: str, flags: tuple[str, ...]) -> Path | None:
    """The library built with ``flags`` (cached), or None when the compiler refuses."""
    key = hashlib.sha256(b"\0".join([SOURCE.read_bytes(), " ".join(flags).encode(),
                                      compiler.encode(), platform.machine().encode(),
                                      _cpu_features()])).hexdigest()[:16]
    library = cache_root() / "native" / f"requantize_rows-{key}.so"
    if library.is_file():
        return library
    library.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=library.parent) as tmp:
        built = Path(tmp) / library.name
        result = subprocess.run([compiler, *flags, "-o", str(built), str(SOURCE)],
                                check=False, capture_output=True)
        if result.returncode != 0:
            return None
        os.replace(built, library)
    return library


@functools.cache
def _library() -> ctypes.CDLL | None:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    try:
        library = _build(compiler, FLAGS + NATIVE_FLAGS) or _build(compiler, FLAGS)
        if library is None:
            return None
        lib = ctypes.CDLL(str(library))
    except OSError:
        return None
    lib.zo_requantize_rows.restype = None
    lib.zo_requantize_rows.argtypes = [
        ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_double,
        ctypes.c_double, ctypes.c_void_p, ctypes.c_int64]
    return lib


def available() -> bool:
    return ENABLED and _library() is not None


def _address(column: np.ndarray | None) -> int | None:
    return None if column is None else column.ctypes.data


def requantize_rows(acc: np.ndarray, scale: np.ndarray, offset: np.ndarray,
                    threshold: np.ndarray | None, step: np.ndarray | None, lo: float,
                    hi: float, out: np.ndarray) -> bool:
    """``out`` (C, n) float32 = clamp(floor(acc scale + offset - [acc < threshold] step)),
    the per-channel columns (C, 1) contiguous float64; False (nothing written) when the
    library is missing or the operands are not in a form it takes."""
    lib = _library() if ENABLED else None
    if (lib is None or acc.ndim != 2 or acc.dtype not in (np.float32, np.float64)
            or out.dtype != np.float32 or not (np.isfinite(lo) and np.isfinite(hi))
            or acc.strides[1] != acc.itemsize or out.strides[1] != out.itemsize
            or len(acc) != len(scale)):
        return False
    lib.zo_requantize_rows(
        acc.ctypes.data, int(acc.dtype == np.float64), acc.shape[0], acc.shape[1],
        acc.strides[0] // acc.itemsize, _address(scale), _address(offset),
        _address(threshold), _address(step), lo, hi, out.ctypes.data,
        out.strides[0] // out.itemsize)
    return True
