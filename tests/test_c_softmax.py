"""The C SOFTMAX / LOG_SOFTMAX kernels (templates/kernels/zo_softmax.c) must reproduce the
numpy reference (zocodegen/reference/softmax.py, itself bit-exact with TFLite) to the bit.

A small C driver reads cases from stdin (a header of parameters, then the int8 rows), runs
each kernel out of place on exactly-sized heap buffers and again in place (output == input),
checks that both agree and writes the output to stdout. It is built twice: -O2, and with
AddressSanitizer + UndefinedBehaviorSanitizer aborting on the first report. The kernel file is
also built as a shared library with the warning flags the generator uses, and for Cortex-M7
when arm-none-eabi-gcc is installed.

Where TFLite aborts (SOFTMAX rows whose sum of exps reaches 512: a TFLITE_CHECK on the
reciprocal exponent, raised as ValueError by the numpy reference) the C kernel outputs -128,
the correctly rounded probability (below 1/512); that is checked separately.
"""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from zocodegen.reference.softmax import (log_softmax_int8, log_softmax_params, softmax_int8,
                                         softmax_params)

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "templates" / "kernels"
KERNEL_C = KERNELS / "zo_softmax.c"
GCC = shutil.which("gcc")
ARM_GCC = shutil.which("arm-none-eabi-gcc")
WARNINGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off", f"-I{KERNELS}"]

pytestmark = pytest.mark.skipif(GCC is None,
                                reason="host gcc not installed: cannot build C kernels")

# Input scales: from 1e-4 (diff_min about -250000, nothing is ever clipped) through ~1
# (diff_min around -15) to 20, 40, 1000 (left shift 31, diff_min 0: only the maxima survive),
# with 3.7 * 2.5 giving diff_min -1. Mostly the ones tests/test_softmax_kernels.py checks
# against TFLite itself.
INPUT_SCALES = (1e-4, 0.00390625, 0.0045740120112895966, 0.02, 0.0625, 0.14469251036643982,
                0.17185351252555847, 0.5, 1.0, 3.7, 20.0, 40.0, 1000.0)
BETAS = (1.0, 0.25, 2.5, 0.1)
DEPTHS = (1, 2, 10, 12, 1000, 4000)
N_RANDOM_SCALES = 150

OP_SOFTMAX, OP_LOG_SOFTMAX = 0, 1
HEADER = struct.Struct("<9i")  # op, rows, depth, multiplier, left shift, diff_min, rev div/shift, 0

DRIVER_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zo_kernels.h"

static int read_all(void *dst, size_t n)
{
    return fread(dst, 1, n, stdin) == n;
}

int main(void)
{
    int32_t h[9];
    while (read_all(h, sizeof h)) {
        zo_softmax_params p;
        size_t n = (size_t)h[1] * (size_t)h[2];
        int8_t *in, *out, *inplace;
        p.rows = h[1];
        p.depth = h[2];
        p.input_multiplier = h[3];
        p.input_left_shift = h[4];
        p.diff_min = h[5];
        p.reverse_scaling_divisor = h[6];
        p.reverse_scaling_right_shift = h[7];
        /* exactly-sized buffers so that AddressSanitizer sees any overrun */
        in = malloc(n);
        out = malloc(n);
        inplace = malloc(n);
        if (in == NULL || out == NULL || inplace == NULL || !read_all(in, n)) {
            fprintf(stderr, "driver: bad input\n");
            return 3;
        }
        memcpy(inplace, in, n);
        if (h[0] == 0) {
            zo_softmax_s8(&p, in, out);
            zo_softmax_s8(&p, inplace, inplace);
        } else {
            zo_log_softmax_s8(&p, in, out);
            zo_log_softmax_s8(&p, inplace, inplace);
        }
        if (memcmp(out, inplace, n) != 0) {
            fprintf(stderr, "driver: in-place result differs (op %d, depth %d)\n",
                    (int)h[0], (int)h[2]);
            return 2;
        }
        fwrite(out, 1, n, stdout);
        free(in);
        free(out);
        free(inplace);
    }
    return 0;
}
"""


# --------------------------------------------------------------------------------------------
# cases
# --------------------------------------------------------------------------------------------

def _rows(depth: int, diff_min: int, rng: np.random.Generator) -> np.ndarray:
    """Constant rows, one spike, tied maxima, values at diff_min - 2 .. diff_min + 2 below the
    max (where an 8-bit difference reaches it; max at 127 and at the bottom of the range),
    ramps and random rows (full range, narrow ranges, extremes only)."""
    rows = [np.full(depth, v) for v in (-128, -1, 0, 127)]
    spike = np.full(depth, -128)
    spike[depth // 2] = 127
    rows.append(spike)
    tie = np.full(depth, -128)
    tie[: max(1, depth // 3)] = 127
    rows.append(tie)
    for d in range(diff_min - 2, diff_min + 3):
        if -255 <= d <= 0:
            row = np.full(depth, 127 + d)
            row[::3] = 127
            rows.append(row)
            row = np.full(depth, -128)
            row[1::3] = -128 - d
            rows.append(row)
    rows.append(np.linspace(127, -128, depth).round())
    for _ in range(3):
        rows.append(rng.integers(-128, 128, size=depth))
    for _ in range(3):
        lo, hi = sorted(rng.integers(-128, 128, size=2))
        rows.append(rng.integers(lo, hi + 1, size=depth))
    rows.append(rng.choice([-128, 127], size=depth))
    return np.stack(rows).astype(np.int8)


def _reference(fn, x: np.ndarray, params) -> tuple[np.ndarray, np.ndarray]:
    """Reference output, plus a mask of the rows where it raises (TFLite aborts there); those
    rows get -128 everywhere, the C kernel's answer. Each term of the Q12.19 sum of exps is at
    most 1.0 and exactly 1.0 for the maxima, and TFLite aborts when the sum reaches 512: rows
    with fewer than 512 terms cannot abort, rows with 512 maxima (SOFTMAX, below 4096 terms)
    must; the others are bisected to find the culprits (numpy is slow on single rows)."""
    out = np.full_like(x, -128)
    aborted = np.zeros(len(x), bool)
    diff = x.astype(np.int64) - x.max(axis=1, keepdims=True)
    may_abort = (diff >= params.diff_min).sum(axis=1) >= 512
    if fn is softmax_int8 and x.shape[1] < 4096:  # longer rows may wrap the int32 sum
        aborted[:] = (diff == 0).sum(axis=1) >= 512
        may_abort &= ~aborted

    def run(rows: np.ndarray) -> None:
        if len(rows) == 0:
            return
        try:
            out[rows] = fn(x[rows], params)
        except ValueError:
            if len(rows) == 1:
                aborted[rows] = True
            else:
                run(rows[: len(rows) // 2])
                run(rows[len(rows) // 2:])

    safe = np.flatnonzero(~may_abort & ~aborted)
    if len(safe):
        out[safe] = fn(x[safe], params)
    run(np.flatnonzero(may_abort))
    return out, aborted


def _header(op: int, x: np.ndarray, params) -> bytes:
    if op == OP_SOFTMAX:
        rev = (0, 0)
    else:
        rev = (params.reverse_scaling_divisor, params.reverse_scaling_right_shift)
    return HEADER.pack(op, x.shape[0], x.shape[1], params.input_multiplier,
                       params.input_left_shift, params.diff_min, *rev, 0)


def _build_cases() -> list[tuple]:
    """(label, op, rows, params, expected, aborted-row mask) for every scale, beta and depth,
    random scales, and rows long enough to wrap the sum."""
    cases = []
    for s_index, scale in enumerate(INPUT_SCALES):
        scale32 = np.float32(scale).item()  # what a .tflite file stores
        param_sets = [(f"softmax scale={scale} beta={beta}", OP_SOFTMAX, softmax_int8,
                       softmax_params(scale32, np.float32(beta).item())) for beta in BETAS]
        param_sets.append((f"log_softmax scale={scale}", OP_LOG_SOFTMAX, log_softmax_int8,
                           log_softmax_params(scale32)))
        for p_index, (label, op, fn, params) in enumerate(param_sets):
            for depth in DEPTHS:
                rng = np.random.default_rng(1000 * s_index + 10 * p_index + depth)
                x = _rows(depth, params.diff_min, rng)
                expected, aborted = _reference(fn, x, params)
                cases.append((f"{label} depth={depth}", op, x, params, expected, aborted))
    # Random scales and betas, each with rows holding every difference 0 .. -255 once (a
    # permutation of -128..127) and shorter spreads below maxima inside the range.
    rng = np.random.default_rng(2024)
    for k in range(N_RANDOM_SCALES):
        scale = np.float32(10.0 ** rng.uniform(-4.0, 1.7)).item()
        beta = np.float32(rng.uniform(0.05, 4.0)).item()
        x = np.stack([rng.permutation(256) - 128,
                      rng.integers(-128, 128) - rng.permutation(256) % 64,
                      rng.integers(-128, -127 + rng.integers(1, 256), size=256)])
        x = np.clip(x, -128, 127).astype(np.int8)
        for label, op, fn, params in (
                (f"random softmax scale={scale} beta={beta}", OP_SOFTMAX, softmax_int8,
                 softmax_params(scale, beta)),
                (f"random log_softmax scale={scale}", OP_LOG_SOFTMAX, log_softmax_int8,
                 log_softmax_params(scale))):
            expected, aborted = _reference(fn, x, params)
            cases.append((label, op, x, params, expected, aborted))
    # Beyond TFLite: rows of 4096+ elements whose Q12.19 sum wraps int32 (to INT32_MIN at 4096
    # equal values, to 0 at 8192): the reference defines the wrap, the C must follow it without
    # undefined behaviour. SOFTMAX there is a TFLite abort (-128 here).
    for depth in (4095, 4096, 4097, 8192):
        x = np.stack([np.zeros(depth), np.arange(depth) % 2 - 1]).astype(np.int8)
        for op, fn, params in ((OP_LOG_SOFTMAX, log_softmax_int8, log_softmax_params(0.1)),
                               (OP_SOFTMAX, softmax_int8, softmax_params(0.1))):
            expected, aborted = _reference(fn, x, params)
            cases.append((f"long op={op} depth={depth}", op, x, params, expected, aborted))
    return cases


@pytest.fixture(scope="module")
def cases():
    return _build_cases()


# --------------------------------------------------------------------------------------------
# builds
# --------------------------------------------------------------------------------------------

def _compile(args: list[str]) -> None:
    result = subprocess.run(args, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(args)}\n{result.stderr}"


@pytest.fixture(scope="module")
def drivers(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("c_softmax")
    driver_c = tmp / "driver.c"
    driver_c.write_text(DRIVER_C)
    plain = tmp / "driver_o2"
    _compile([GCC, "-O2", *WARNINGS, str(KERNEL_C), str(driver_c), "-o", str(plain)])
    sanitized = tmp / "driver_san"
    probe = subprocess.run([GCC, "-fsanitize=address,undefined", "-x", "c", "-", "-o",
                            str(tmp / "probe")], input="int main(void){return 0;}\n",
                           capture_output=True, text=True)
    built = {"O2": plain}
    if probe.returncode == 0:
        _compile([GCC, "-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
                  "-fno-sanitize-recover=all", *WARNINGS, str(KERNEL_C), str(driver_c),
                  "-o", str(sanitized)])
        built["sanitized"] = sanitized
    return built


def _run_driver(exe: Path, cases) -> list[np.ndarray]:
    stream = b"".join(_header(op, x, params) + x.tobytes() for _, op, x, params, _, _ in cases)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=0",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    result = subprocess.run([str(exe)], input=stream, capture_output=True, env=env,
                            timeout=120)
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-4000:]
    assert result.stderr == b"", result.stderr.decode(errors="replace")[-4000:]
    outputs, offset = [], 0
    for _, _, x, _, _, _ in cases:
        outputs.append(np.frombuffer(result.stdout, np.int8, x.size, offset).reshape(x.shape))
        offset += x.size
    assert offset == len(result.stdout)
    return outputs


# --------------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------------

def test_shared_library_builds_warning_free(tmp_path):
    _compile([GCC, "-shared", "-fPIC", "-O2", *WARNINGS, str(KERNEL_C),
              "-o", str(tmp_path / "libzo_softmax.so")])


@pytest.mark.skipif(ARM_GCC is None, reason="arm-none-eabi-gcc not installed")
def test_cortex_m7_build_warning_free(tmp_path):
    _compile([ARM_GCC, "-c", "-O2", "-mcpu=cortex-m7", "-mthumb", "-mfloat-abi=hard",
              "-mfpu=fpv5-d16", *WARNINGS, "-Wconversion", str(KERNEL_C),
              "-o", str(tmp_path / "zo_softmax.o")])


@pytest.mark.parametrize("build", ("O2", "sanitized"))
def test_c_kernels_match_numpy_reference(build, drivers, cases):
    if build not in drivers:
        pytest.skip("gcc cannot link -fsanitize=address,undefined here (libasan/libubsan "
                    "missing)")
    outputs = _run_driver(drivers[build], cases)
    compared = {OP_SOFTMAX: 0, OP_LOG_SOFTMAX: 0}
    aborted_rows = 0
    for (label, op, x, params, expected, aborted), got in zip(cases, outputs):
        np.testing.assert_array_equal(got, expected, err_msg=f"{build}: {label} {params}")
        compared[op] += int(x.shape[0] - aborted.sum())
        aborted_rows += int(aborted.sum())
    # every configuration ran, and the TFLite-abort rows stayed a minority
    assert len(cases) == (len(INPUT_SCALES) * (len(BETAS) + 1) * len(DEPTHS)
                          + 2 * N_RANDOM_SCALES + 8)
    assert compared[OP_SOFTMAX] > 4000 and compared[OP_LOG_SOFTMAX] > 1500
    assert 0 < aborted_rows < compared[OP_SOFTMAX] // 2


def test_cases_reach_the_edges(cases):
    """The sweep covers left shift 31, diff_min 0 and -1, diff_min far below -255, and rows
    straddling diff_min exactly."""
    shifts = {params.input_left_shift for _, _, _, params, _, _ in cases}
    diff_mins = {params.diff_min for _, _, _, params, _, _ in cases}
    assert 31 in shifts and {0, -1}.issubset(diff_mins) and min(diff_mins) < -100_000
    straddled = 0
    for label, _, x, params, _, _ in cases:
        diff = x.astype(np.int64) - x.max(axis=1, keepdims=True)
        if -255 < params.diff_min < 0 and x.shape[1] > 2 and not label.startswith("long"):
            assert (diff == params.diff_min - 1).any() and (diff == params.diff_min).any()
            straddled += 1
    assert straddled > 100
