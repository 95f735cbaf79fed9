"""The fast kernels (issue 15) against their references.

* zo_mbqm_pos and the whole output step zo_requantize_channel in its three forms (the
  requantizations the fast kernels use) equal TFLite's zo_mbqm
  (plus the output offset and the clamp) on millions of random and edge-case operands, built
  natively with the sanitizers, and on QEMU with the DSP instructions themselves;
* the generator picks the kernel variant per layer from its shape;
* the portable path (-DZO_PORTABLE_KERNELS, the readable reference every fast path is tested
  against) stays bit-exact with the numpy reference: native builds otherwise run the fast
  kernels with their DSP instructions emulated in C (zo_simd.h), QEMU runs them for real
  (tests/test_codegen_bitexact.py);
* the im2col rows are planned in the arena, and the plan check catches a scratch buffer laid
  over a live tensor;
* the fast convolution kernels (depthwise, im2col, 1x1) equal the reference on thousands of
  random geometries (filters, strides, dilations, padding, channel counts, batches, both
  requantizations; tests/data/conv_fuzz.c), natively under the sanitizers and under QEMU,
  where their hand-written assembly runs.
"""
from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest

from conftest import random_inputs, shared_model
from zocodegen.projects import cached_build
from zocodegen.codegen.layers.conv import conv_kernel, folded_bias
from zocodegen.host.engines import run_samples
from zocodegen.frontends import load_model
from zocodegen.planner import plan_arena, plan_problems
from zocodegen.planner.scratch import kernel_scratch
from zocodegen.qemu import runner
from zocodegen.reference.executor import run

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
KERNELS = REPO / "templates" / "kernels"
GCC = shutil.which("gcc")
CONV_FUZZ = REPO / "tests" / "data" / "conv_fuzz.c"

MBQM_DRIVER = r"""
#include "zo_requant.h"
#ifdef ZO_FUZZ_QEMU
#include "platform.h"
#else
#include <stdio.h>
#endif

static unsigned long long s = 88172645463325252ull;
static unsigned long long next(void) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; }

int main(void)
{
    long bad = 0;
    for (long i = 0; i < ITERATIONS; ++i) {
        const unsigned long long r = next();
        int32_t x;
        switch (r & 3u) { /* any int32, accumulator-sized, small, and the extremes */
        case 0: x = (int32_t)(uint32_t)(r >> 32); break;
        case 1: x = (int32_t)((long long)(r >> 40) - (1 << 23)); break;
        case 2: x = (int32_t)((r >> 32) & 0xFFFFu) - 32768; break;
        default: x = (r & 4u) ? INT32_MAX - (int32_t)((r >> 8) & 255u)
                              : INT32_MIN + (int32_t)((r >> 8) & 255u);
        }
        int32_t m = (int32_t)((next() >> 33) | 1u);
        if (next() & 1u) {
            m |= 0x40000000;
        }
        int shift = (int)(next() % 40u) - 31;
        shift = shift > 8 ? 8 : shift;
        const int32_t offset = (int32_t)(next() % 256u) - 128;
        const int32_t expected = zo_mbqm(x, m, shift);
        /* the fast kernels' output step: clamp(MBQM + offset) to int8 and to [lo, hi] */
        const int8_t expected8 = zo_offset_clamp_s8(expected, offset, -128, 127);
        const int8_t clamped8 = zo_offset_clamp_s8(expected, offset, -100, 90);
        if (expected != zo_mbqm_pos(x, m, shift)
            || (shift < 0 && expected8 != zo_requantize_channel(x, m, shift, ZO_REQUANT_INT8,
                                                                offset, -128, 127))
            || (shift < 0 && clamped8 != zo_requantize_channel(x, m, shift, ZO_REQUANT_CLAMPED,
                                                               offset, -100, 90))
            || expected8 != zo_requantize_channel(x, m, shift, ZO_REQUANT_GENERAL, offset,
                                                  -128, 127)
            || clamped8 != zo_requantize_channel(x, m, shift, ZO_REQUANT_GENERAL, offset, -100,
                                                 90)) {
#ifndef ZO_FUZZ_QEMU
            if (bad < 5) {
                printf("x=%d m=%d shift=%d offset=%d\n", x, m, shift, offset);
            }
#endif
            ++bad;
        }
    }
#ifdef ZO_FUZZ_QEMU
    platform_exit(bad != 0);
    return 0;
#else
    printf("mismatches %ld\n", bad);
    return bad != 0;
#endif
}
"""


@pytest.mark.skipif(GCC is None, reason="host gcc not installed: cannot build the C driver")
def test_fast_requantization_equals_tflite_form(tmp_path):
    source = tmp_path / "mbqm.c"
    source.write_text(MBQM_DRIVER)
    exe = tmp_path / "mbqm"
    subprocess.run([GCC, "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{KERNELS}",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                    "-DITERATIONS=3000000", str(source), "-o", str(exe)], check=True)
    result = subprocess.run([str(exe)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "mismatches 0" in result.stdout


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None or runner.find_qemu() is None,
                    reason="arm-none-eabi-gcc or qemu-system-arm is missing")
def test_fast_requantization_equals_tflite_form_on_qemu(tmp_path):
    """The same check with the DSP instructions themselves (SMMLAR, QADD, SSAT with a shift)."""
    from test_qemu_board import build, make_project
    project = make_project(tmp_path / "mbqm")
    (project / "src" / "main.c").write_text(MBQM_DRIVER)
    done = build(project, "mbqm", "-DZO_FUZZ_QEMU", "-DITERATIONS=300000", f"-I{KERNELS}")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    status, _ = runner.run_elf(project / "build" / "mbqm.elf", timeout=120)
    assert status == 0, runner.describe_exit(status)


#: zo_depthwise.h's ZO_DEPTHWISE_DIRECT: its own choice, every geometry pixel by pixel, none
DEPTHWISE_PATHS = pytest.mark.parametrize("direct", ["0", "100", "-1"],
                                          ids=["depthwise-chosen", "depthwise-direct",
                                               "depthwise-runs"])


@pytest.mark.skipif(GCC is None, reason="host gcc not installed: cannot build the C driver")
@DEPTHWISE_PATHS
def test_fast_conv_kernels_equal_reference_natively(tmp_path, direct):
    exe = tmp_path / "conv_fuzz"
    subprocess.run([GCC, "-std=c99", "-O1", "-g", "-Wall", "-Wextra", "-Werror", f"-I{KERNELS}",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                    "-DGEOMETRIES=10000", f"-DZO_DEPTHWISE_DIRECT={direct}", str(CONV_FUZZ),
                    "-o", str(exe)], check=True)
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = re.search(r"layers (\d+) depthwise \(with an interior block: (\d+)\), (\d+) "
                        r"im2col, (\d+) 1x1; mismatches (\d+)", result.stdout)
    assert summary, result.stdout
    depthwise, interior, im2col, one_by_one, mismatches = map(int, summary.groups())
    assert (depthwise, im2col, one_by_one, mismatches) == (10000, 10000, 10000, 0)
    assert interior > 2500  # the depthwise interior (channel-block) path ran often


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None or runner.find_qemu() is None,
                    reason="arm-none-eabi-gcc or qemu-system-arm is missing")
@DEPTHWISE_PATHS
def test_fast_conv_kernels_equal_reference_on_qemu(tmp_path, direct):
    from test_qemu_board import build, make_project
    project = make_project(tmp_path / "fuzz")
    shutil.copy(CONV_FUZZ, project / "src" / "main.c")
    done = build(project, "fuzz", "-DZO_FUZZ_QEMU", f"-DZO_DEPTHWISE_DIRECT={direct}",
                 f"-I{KERNELS}")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    status, _ = runner.run_elf(project / "build" / "fuzz.elf", timeout=120)
    assert status == 0, runner.describe_exit(status)


def test_kernel_variant_per_layer():
    graph = load_model(shared_model("kws_ref_model.tflite"))
    chosen = {(op.type, tuple(graph.tensor(op.inputs[1]).shape)): conv_kernel(graph, op)
              for op in graph.ops if op.type in ("CONV_2D", "DEPTHWISE_CONV_2D")}
    assert chosen == {("CONV_2D", (64, 10, 4, 1)): "zo_conv2d_im2col_s8",
                      ("CONV_2D", (64, 1, 1, 64)): "zo_conv2d_1x1_s8",
                      ("DEPTHWISE_CONV_2D", (1, 3, 3, 64)): "zo_depthwise_conv2d_c4_s8"}
    multi = load_model(FIXTURES / "multi_op.tflite")  # has a depth-multiplier-2 depthwise
    kernels = {conv_kernel(multi, op) for op in multi.ops if op.type == "DEPTHWISE_CONV_2D"}
    assert "zo_depthwise_conv2d_s8" in kernels


def test_folded_bias_is_bias_plus_offset_times_weight_sum():
    graph = load_model(FIXTURES / "digits_cnn.tflite")
    op = next(op for op in graph.ops if op.type == "CONV_2D")
    w = np.asarray(graph.tensor(op.inputs[1]).data, dtype=np.int64)
    b = np.asarray(graph.tensor(op.inputs[2]).data, dtype=np.int64)
    zero_point = int(graph.tensor(op.inputs[0]).quant.zero_point[0])
    expected = b - zero_point * w.reshape(w.shape[0], -1).sum(axis=1)
    assert np.array_equal(folded_bias(graph, op), expected)


@pytest.mark.parametrize("name", ["mcunet_tiny.tflite", "multi_op.tflite", "edge_ops.tflite",
                                  "onnx_qdq_int8.onnx"])
def test_portable_kernels_equal_reference(name):
    path = FIXTURES / name
    graph = load_model(path)
    x = graph.tensor(graph.inputs[0])
    samples = [{graph.inputs[0]: v} for v in random_inputs(x.shape, x.dtype, 4, seed=5)]
    exe = cached_build(path, "native", extra_cflags="-DZO_PORTABLE_KERNELS")
    for sample, result in zip(samples, run_samples(graph, "native", exe, samples)):
        expected = run(graph, sample)
        for name_ in graph.outputs:
            assert np.array_equal(result.outputs[name_], expected[name_])


def test_im2col_rows_are_planned_and_checked():
    graph = load_model(shared_model("pretrainedResnet_quant.tflite"))
    scratch = kernel_scratch(graph)
    # every 3x3 conv and the two strided 1x1 shortcuts need rows (2 pixels x k_h k_w in_c)
    # after the rows widened to int16 (2 pixels x 2 bytes, 4-aligned: 8 bytes of slack)
    assert len(scratch) == 9 and max(scratch.values()) == 2 * 576 + 4 * 576 + 8
    kws = load_model(shared_model("kws_ref_model.tflite"))
    widened = {kws.ops[i].type: n for i, n in kernel_scratch(kws).items()
               if conv_kernel(kws, kws.ops[i]) == "zo_conv2d_1x1_s8"}
    assert widened == {"CONV_2D": 8 * 64 + 8}  # 1x1 at stride 1: 4 widened rows only
    plan = plan_arena(graph)
    assert set(plan.scratch_offsets) == set(scratch)
    assert plan_problems(graph, plan) == []
    # lay the first conv's rows over its own input: the check must object
    index = min(scratch)
    bad = dataclasses.replace(plan, scratch_offsets=MappingProxyType(
        {**plan.scratch_offsets, index: plan.offsets[graph.ops[index].inputs[0]]}))
    assert any("scratch" in p and "overlaps" in p for p in plan_problems(graph, bad))
