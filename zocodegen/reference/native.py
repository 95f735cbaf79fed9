"""The fast kernels' compiled loops, built on first use: the requantization
(requantize_rows.c: one pass over memory instead of numpy's four) and the accumulations of
CONV_2D, FULLY_CONNECTED and DEPTHWISE_CONV_2D (linear_kernels.c: an integer matrix product
on AVX-512 VNNI, depthwise taps over the batch rows).

Each library is built with the host's C compiler into the cache (``ZOCODEGEN_CACHE``, else
``~/.cache/zocodegen``) under a name that hashes its source, flags and compiler, so a change
of any rebuilds it and concurrent processes never see a half-written file. Without a C
compiler, or when the build fails, the functions here decline and numpy runs the same
arithmetic (reference/fast.py): the results are the same bits either way
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
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..files import cache_root

#: False: numpy only (tests compare the two).
ENABLED = True
HERE = Path(__file__).parent
#: No fused multiply-add (numpy rounds the product and the sum separately); no trapping
#: math, so the comparisons become blends and every loop vectorizes.
FLAGS = ("-O3", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math", "-fPIC",
         "-shared")
#: Tried first: this CPU's widest vectors (the library is keyed by the CPU's feature flags).
NATIVE_FLAGS = ("-march=native",)
_P, _I, _D, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double, ctypes.c_float
#: source file -> {function: argument types}; every function returns int (or nothing).
SIGNATURES = {
    "requantize_rows.c": {"zo_requantize_rows": [_P, ctypes.c_int, _I, _I, _I, _P, _P, _P, _P,
                                                 _D, _D, _P, _I]},
    "linear_kernels.c": {"zo_gemm_available": [],
                         "zo_gemm_u8s8": [_P, _I, _I, _I, _P, _P, _I, _I, _F, _P, _I],
                         "zo_depthwise_group": [_I, _I],
                         "zo_depthwise_moves": [_I] * 13 + [_P],
                         "zo_depthwise": [_P, _I, _I, _I, _I, _I, _I, _P, _I, _I, _P, _I, _I, _I,
                                          _P]},
}


def _cpu_features() -> bytes:
    """The CPU's feature flags (Linux), so a cache shared between machines never hands one
    a library built for instructions it lacks."""
    try:
        with open("/proc/cpuinfo", "rb") as info:
            return next((line for line in info if line.startswith((b"flags", b"Features"))),
                        b"")
    except OSError:
        return b""


def _build(source: Path, compiler: str, flags: tuple[str, ...]) -> Path | None:
    """The library built with ``flags`` (cached), or None when the compiler refuses."""
    key = hashlib.sha256(b"\0".join([source.read_bytes(), " ".join(flags).encode(),
                                      compiler.encode(), platform.machine().encode(),
                                      _cpu_features()])).hexdigest()[:16]
    library = cache_root() / "native" / f"{source.stem}-{key}.so"
    if library.is_file():
        return library
    library.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=library.parent) as tmp:
        built = Path(tmp) / library.name
        result = subprocess.run([compiler, *flags, "-o", str(built), str(source)],
                                check=False, capture_output=True)
        if result.returncode != 0:
            return None
        os.replace(built, library)
    return library


@functools.cache
def _library(name: str) -> ctypes.CDLL | None:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    source = HERE / name
    try:
        library = _build(source, compiler, FLAGS + NATIVE_FLAGS) or _build(source, compiler,
                                                                           FLAGS)
        if library is None:
            return None
        lib = ctypes.CDLL(str(library))
    except OSError:
        return None
    for function, argtypes in SIGNATURES[name].items():
        getattr(lib, function).restype = ctypes.c_int64
        getattr(lib, function).argtypes = argtypes
    return lib


def _loaded(name: str) -> ctypes.CDLL | None:
    return _library(name) if ENABLED else None


def available() -> bool:
    return _loaded("requantize_rows.c") is not None


def gemm_available() -> bool:
    """Whether :func:`gemm_u8s8` runs here (a compiler targeting AVX-512 VNNI)."""
    lib = _loaded("linear_kernels.c")
    return lib is not None and bool(lib.zo_gemm_available())


#: The accumulator types zo_requantize_rows takes, by its acc_type code.
ACC_TYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int32))


def _address(column: np.ndarray | None) -> int | None:
    return None if column is None else column.ctypes.data


def requantize_rows(acc: np.ndarray, scale: np.ndarray, offset: np.ndarray,
                    threshold: np.ndarray | None, step: np.ndarray | None, lo: float,
                    hi: float, out: np.ndarray) -> bool:
    """``out`` (C, n) float32 = clamp(floor(acc scale + offset - [acc < threshold] step)),
    the per-channel columns (C, 1) contiguous float64; ``acc`` float32, float64 or int32.
    False (nothing written) when the library is missing or the operands are not in a form
    it takes."""
    lib = _loaded("requantize_rows.c")
    if (lib is None or acc.ndim != 2 or acc.dtype not in ACC_TYPES
            or out.dtype != np.float32 or not (np.isfinite(lo) and np.isfinite(hi))
            or acc.strides[1] != acc.itemsize or out.strides[1] != out.itemsize
            or len(acc) != len(scale)):
        return False
    lib.zo_requantize_rows(
        acc.ctypes.data, ACC_TYPES.index(acc.dtype), acc.shape[0], acc.shape[1],
        acc.strides[0] // acc.itemsize, _address(scale), _address(offset),
        _address(threshold), _address(step), lo, hi, out.ctypes.data,
        out.strides[0] // out.itemsize)
    return True



def gemm_u8s8(packed: np.ndarray, rows: int, k: int, correction: np.ndarray, x: np.ndarray,
              shift: int) -> np.ndarray | None:
    """(rows, n) int32 = packed weights (int8, rows padded to a multiple of 8, k to a
    multiple of 4, with zeros) times ``x`` (k, n) float32 taken as the bytes x + shift,
    minus ``correction`` (int32 per row: shift times the row's weight sum); None when the
    library does not run here or ``x`` is not row-contiguous."""
    lib = _loaded("linear_kernels.c")
    if (lib is None or x.dtype != np.float32 or x.ndim != 2 or x.strides[1] != 4
            or not lib.zo_gemm_available()):
        return None
    out = np.empty((rows, x.shape[1]), dtype=np.int32)
    if not lib.zo_gemm_u8s8(packed.ctypes.data, rows, k, packed.shape[1], correction.ctypes.data,
                            x.ctypes.data, x.shape[1], x.strides[0] // 4, float(shift),
                            out.ctypes.data, x.shape[1]):
        return None
    return out


#: sizeof(zo_move) in linear_kernels.c: 16 int32 lane indices, three int32, a uint32 mask.
MOVE_BYTES = 80


@dataclass(frozen=True)
class DepthwiseGeometry:
    """A depthwise convolution's shape, and its moves (zo_depthwise_moves) once computed."""

    kernel: tuple[int, int]  # KH, KW
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pad: tuple[int, int]  # top, left
    in_hw: tuple[int, int]
    out_hw: tuple[int, int]
    mult: int  # depth multiplier
    moves: np.ndarray | None = None  # uint8 (count, MOVE_BYTES)


def depthwise_geometry(geometry: DepthwiseGeometry) -> DepthwiseGeometry | None:
    """``geometry`` with its moves, or None where the library does not run here."""
    lib = _loaded("linear_kernels.c")
    if lib is None or not lib.zo_gemm_available():
        return None
    g = lib.zo_depthwise_group(int(np.prod(geometry.in_hw)), int(np.prod(geometry.out_hw)))
    args = [g, *geometry.in_hw, *geometry.kernel, *geometry.stride, *geometry.dilation,
            *geometry.pad, *geometry.out_hw]
    moves = np.zeros((lib.zo_depthwise_moves(*args, None), MOVE_BYTES), dtype=np.uint8)
    lib.zo_depthwise_moves(*args, moves.ctypes.data)
    return replace(geometry, moves=moves)


def depthwise(x: np.ndarray, taps: np.ndarray, geometry: DepthwiseGeometry
              ) -> np.ndarray | None:
    """Depthwise accumulators (C, rows out_h out_w) float32 of ``x`` (C_in, rows, H, W)
    float32, each channel's rows contiguous, and ``taps`` (C, KH, KW) float32 contiguous;
    ``geometry`` from :func:`depthwise_geometry`. None when ``x`` is not in that form."""
    lib = _loaded("linear_kernels.c")
    if (lib is None or x.dtype != np.float32 or x.ndim != 4
            or x.strides[1:] != (x.shape[2] * x.shape[3] * 4, x.shape[3] * 4, 4)):
        return None
    channels = len(taps)
    out = np.empty((channels, x.shape[1] * geometry.out_hw[0] * geometry.out_hw[1]),
                   dtype=np.float32)
    if not lib.zo_depthwise(x.ctypes.data, channels, x.shape[1], x.strides[0] // 4,
                            geometry.mult, x.shape[2], x.shape[3], taps.ctypes.data,
                            *geometry.kernel, geometry.moves.ctypes.data, len(geometry.moves),
                            *geometry.out_hw, out.ctypes.data):
        return None
    return out
