"""--bp-layers C (ElasticZO's hybrid: the model's last C trainable layers by exact integer
back-propagation through the head, the rest by zeroth-order): simulator == native == QEMU
checkpoints; the integer node gradients against a float64 back-propagation written here;
the softmax gradient's C twin against numpy; the refusals; the memory the head needs."""
from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import replace

import numpy as np
import pytest

from conftest import FIXTURES
from conftest import softmax_driver as build_softmax_driver
from test_training import (NEEDS_ARM, _data, _firmware_checkpoint, _image, _resolve,
                           _simulated, _simulated_with_guard)
from test_training_math import random_logits
from zocodegen.projects import cached_build, generate
from zocodegen.cli import main
from zocodegen.codegen.project import BuildOptions
from zocodegen.host.engines import FirmwareSession
from zocodegen.frontends import load_model
from zocodegen.formats.image import pack_image
from zocodegen.formats import link as protocol
from zocodegen.reference.common import output_range
from zocodegen.reference.softmax import log_softmax_params, softmax_gradient_q24
from zocodegen.training import checkpoint, simulator, step_parts
from zocodegen.training.backprop import node_gradients
from zocodegen.training.config import BP_AUTO, TrainConfig
from zocodegen.training.plan import training_plan, training_plans

K_STEPS = 3
#: firmware builds cached per module, away from the user's cache (conftest.py)
pytestmark = pytest.mark.usefixtures("module_build_cache")

DIGITS = "fixture:digits_cnn.tflite"
KWS = "shared:kws_ref_model.tflite"
ONNX = "fixture:onnx_qdq_int8.onnx"


def _config(c: int, **kw) -> TrainConfig:
    return TrainConfig(**{"steps": 10, "queries": 3, "lr": 0.01, "bp_layers": c, **kw})


def _initial(graph, plan, sha: bytes) -> bytes:
    return checkpoint.encode(simulator.to_checkpoint(
        plan, simulator.initial_params(graph, plan), K_STEPS, sha))


def _assert_bp_layers_moved(plan, blob: bytes, initial: bytes) -> None:
    """Non-vacuous: the run changed the checkpoint, and the BP layers' own parameters."""
    assert blob != initial, "training changed nothing: the comparison would be vacuous"
    got, before = checkpoint.decode(blob), checkpoint.decode(initial)
    bp_ops = {layer.op_index for layer in plan.bp_layers}
    assert bp_ops
    moved = [a.op_index for a, b in zip(got.layers, before.layers)
             if a.op_index in bp_ops and (not np.array_equal(a.weights, b.weights)
                                          or not np.array_equal(a.bias, b.bias))]
    assert moved, "back-propagation moved no parameter of the BP layers"


# ---- 1. simulator == native == QEMU ------------------------------------------------------

BIT_EXACT = [
    pytest.param(DIGITS, 1, {}, "native", id="digits-C1-native"),
    pytest.param(DIGITS, 2, {}, "native", id="digits-C2-native"),
    pytest.param(KWS, 1, {}, "native", id="kws-C1-native"),
    pytest.param(KWS, 2, {}, "native", id="kws-C2-native"),
    pytest.param(ONNX, 1, {}, "native", id="onnx-C1-native"),
    pytest.param(ONNX, 2, {}, "native", id="onnx-C2-native"),
    pytest.param(DIGITS, 1, {"batch": 3}, "native", id="digits-C1-batch3-native"),
    pytest.param(DIGITS, 2, {"batch": 3}, "native", id="digits-C2-batch3-native"),
    pytest.param(DIGITS, 1, {"mode": "sparse", "blocks": 2, "block": 1}, "native",
                 id="digits-C1-sparse-block1-native"),
    # the backward rules the C = 1, 2 heads do not reach: a 3x3 DEPTHWISE between BP layers
    # (kws), a padded 3x3 CONV_2D and an ADD of two computed inputs (digits_resnet)
    pytest.param(KWS, 4, {}, "native", id="kws-C4-native"),
    pytest.param("fixture:digits_resnet.tflite", 4, {}, "native", id="digits_resnet-C4-native"),
    pytest.param("fixture:digits_resnet.tflite", 6, {"batch": 2}, "native",
                 id="digits_resnet-C6-batch2-native"),
    pytest.param(DIGITS, 2, {}, "qemu", marks=NEEDS_ARM, id="digits-C2-qemu"),
    pytest.param(KWS, 1, {}, "qemu", marks=NEEDS_ARM, id="kws-C1-qemu"),
    pytest.param(ONNX, 2, {}, "qemu", marks=NEEDS_ARM, id="onnx-C2-qemu"),
]


@pytest.mark.parametrize("spec, c, options, engine", BIT_EXACT)
def test_bp_checkpoint_equals_simulator(spec, c, options, engine, tmp_path):
    """The last C layers by back-propagation, the rest by ZO, K = 3 steps: identical
    checkpoint bytes; the BP layers' parameters moved."""
    model = _resolve(spec)
    graph = load_model(model)
    config = _config(c, **options)
    plan = training_plan(graph, config)
    assert [layer.mode for layer in plan.layers][-c:] == ["BP"] * c
    assert len(plan.bp_layers) == c
    x, y = _data(graph, plan.num_classes, count=7)
    image = _image(tmp_path, x, y, plan.num_classes)
    sha = hashlib.sha256(model.read_bytes()).digest()
    expected = _simulated(graph, plan, x, y, K_STEPS, sha)
    got = _firmware_checkpoint(model, graph, config, engine, image, K_STEPS)
    assert got == expected
    _assert_bp_layers_moved(plan, got, _initial(graph, plan, sha))


def test_bp_with_guard_and_lr_auto_native(tmp_path):
    """The guard's checks and the --lr auto trials run the hybrid step too: the device's
    checkpoint (guard state included) is the simulator's."""
    model = FIXTURES / "digits_cnn.tflite"
    graph = load_model(model)
    config = _config(2, steps=4, queries=2, lr_auto=True, guard=True, guard_every=1,
                     guard_samples=16)
    x, y = _data(graph, 10, count=8 + 16, seed=2)
    path = tmp_path / "train.img"
    pack_image(path, x[:8], y[:8], x_val=x[8:], y_val=y[8:], num_classes=10,
               checkpoint_bytes=1 << 20)
    got = _firmware_checkpoint(model, graph, config, "native", path, 2)
    assert got == _simulated_with_guard(model, graph, config, path, 2)


def test_bp_sparse_block_auto_native(tmp_path):
    """--block auto with the head: the device's trials (command B) count what the
    simulator's count, choose its block, and train it to the simulator's bytes; the head
    is trained in every block."""
    model = FIXTURES / "digits_cnn.tflite"
    graph = load_model(model)
    config = _config(1, mode="sparse", blocks=2, block=None, trial_samples=4)
    plans = training_plans(graph, config)
    assert len(plans) == 2
    for plan in plans:  # the head is in every block
        assert [layer.mode for layer in plan.layers][-1] == "BP"
    x, y = _data(graph, plans[0].num_classes, count=10, seed=4)
    image = _image(tmp_path, x, y, plans[0].num_classes)
    selection = simulator.select_block(graph, plans, x, y)
    plan = plans[selection.block]
    sha = hashlib.sha256(model.read_bytes()).digest()
    expected = _simulated(graph, plan, x, y, K_STEPS, sha)
    artefact = cached_build(model, "native", graph=graph, train=config)
    with FirmwareSession(graph, "native", artefact, icount=False) as session:
        session.attach_image(image)
        done = session._run("selecting the block", protocol.Command.SELECT.value)
        assert done.value == selection.block
        session.train(K_STEPS)
        got = session.save_checkpoint()
    assert got == expected
    _assert_bp_layers_moved(plan, got, _initial(graph, plan, sha))


# ---- 2. the integer node gradients against float64 back-propagation -----------------------

def _scale(graph, name: str) -> float:
    return float(np.float64(graph.tensor(name).quant.scalar_scale))


def _zero_point(graph, name: str) -> int:
    return int(np.asarray(graph.tensor(name).quant.zero_point).reshape(-1)[0])


def _float_conv_backward(op, w: np.ndarray, g: np.ndarray, in_shape) -> np.ndarray:
    """dL/d input of a CONV_2D / DEPTHWISE_CONV_2D (multiplier 1) from the output's
    g (N, OH, OW, O), already times the per-channel factor; w dequantization-free
    (the factor holds s_w). Plain loops over the forward's index map."""
    n, out_h, out_w, out_c = g.shape
    top, _, left, _ = op.options["padding"]
    sh, sw = op.options["stride"]
    dh, dw = op.options["dilation"]
    e = np.zeros((n,) + tuple(in_shape[1:]))
    depthwise = op.type == "DEPTHWISE_CONV_2D"
    kh, kw = w.shape[1], w.shape[2]
    for oy in range(out_h):
        for ox in range(out_w):
            for i in range(kh):
                iy = oy * sh - top + i * dh
                if not 0 <= iy < in_shape[1]:
                    continue
                for j in range(kw):
                    ix = ox * sw - left + j * dw
                    if not 0 <= ix < in_shape[2]:
                        continue
                    if depthwise:
                        e[:, iy, ix, :] += g[:, oy, ox, :] * w[0, i, j, :]
                    else:  # w (O, KH, KW, I)
                        e[:, iy, ix, :] += g[:, oy, ox, :] @ w[:, i, j, :]
    return e


def _float_pool_backward(op, x: np.ndarray, g: np.ndarray, ratio: float) -> np.ndarray:
    n, out_h, out_w, channels = g.shape
    top, _, left, _ = op.options["padding"]
    sh, sw = op.options["stride"]
    fh, fw = op.options["filter"]
    e = np.zeros(x.shape)
    for oy in range(out_h):
        for ox in range(out_w):
            cells = [(y, v) for y in range(oy * sh - top, oy * sh - top + fh)
                     for v in range(ox * sw - left, ox * sw - left + fw)
                     if 0 <= y < x.shape[1] and 0 <= v < x.shape[2]]
            for b in range(n):
                for c in range(channels):
                    if op.type == "AVERAGE_POOL_2D":
                        for y, v in cells:
                            e[b, y, v, c] += g[b, oy, ox, c] * ratio / len(cells)
                    else:  # the first maximum of the window: the one the max returns
                        values = [x[b, y, v, c] for y, v in cells]
                        y, v = cells[int(np.argmax(values))]
                        e[b, y, v, c] += g[b, oy, ox, c] * ratio
    return e


SOFTMAX_ERROR = 1e-5  # |fixed-point softmax - float softmax| (Q12.19 exps; measured < 5e-6)


def _float_node_gradients(graph, plan, env, labels
                          ) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """float64 2^24 dL/d(output LSB) of every BP layer, masked where the output clamps:
    softmax - onehot of the dequantized logits times s_logits, then each op's real
    derivative (dequantized weights and scales) down to the first BP layer. Alongside, a
    bound on what the integer rules may differ by: 1 LSB per quantized-multiplier product
    (two roundings of half an LSB), carried through the same derivatives in absolute
    value, plus the fixed-point softmax's error at the logits."""
    n = len(labels)
    hd = plan.head
    q24 = 2.0 ** 24
    s_logits = _scale(graph, plan.logits)
    logits = env[plan.logits].reshape(n, -1).astype(np.float64)
    z = s_logits * (logits - _zero_point(graph, plan.logits))
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(n), labels] -= 1.0
    shape = env[plan.logits].shape
    errors = {plan.logits: (q24 * s_logits * p).reshape(shape)}
    bounds = {plan.logits: np.full(shape, q24 * s_logits * SOFTMAX_ERROR + 1.0)}
    made = set(hd.error_tensors)
    bp_ops = {layer.op_index for layer in plan.bp_layers}
    out, out_bounds = {}, {}
    for k in reversed(hd.ops):
        op = graph.ops[k]
        y_name = op.outputs[0]
        e = errors.get(y_name, np.zeros(env[y_name].shape))
        b = bounds.get(y_name, np.zeros(env[y_name].shape))
        if op.type not in ("RESHAPE", "SQUEEZE"):
            lo, hi = output_range(graph, op)
            inside = (env[y_name] > lo) & (env[y_name] < hi)
            e, b = np.where(inside, e, 0.0), np.where(inside, b, 0.0)
        if k in bp_ops:
            out[k], out_bounds[k] = e.reshape(n, -1), b.reshape(n, -1)
        if k == hd.first_op:
            continue
        x_name = op.inputs[0]
        x_shape = env[x_name].shape
        s_out = _scale(graph, y_name)
        contributions = []  # (input, error, bound)
        if op.type in ("RESHAPE", "SQUEEZE"):
            contributions.append((x_name, e.reshape(x_shape), b.reshape(x_shape)))
        elif op.type in ("FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D"):
            w = graph.tensor(op.inputs[1])
            wq = np.asarray(w.data, dtype=np.float64)
            s_w = np.asarray(w.quant.scale, dtype=np.float64).reshape(-1)
            factor = _scale(graph, x_name) * s_w / s_out  # per output channel
            scaled_bound = np.where(e != 0, factor * b + 1.0, factor * b)
            if op.type == "FULLY_CONNECTED":
                rows = (e * factor).reshape(n, -1, wq.shape[0])
                rb = scaled_bound.reshape(n, -1, wq.shape[0])
                contributions.append((x_name, (rows @ wq).reshape(x_shape),
                                      (rb @ np.abs(wq)).reshape(x_shape)))
            else:
                contributions.append((x_name, _float_conv_backward(op, wq, e * factor, x_shape),
                                      _float_conv_backward(op, np.abs(wq), scaled_bound,
                                                           x_shape)))
        elif op.type in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
            ratio = _scale(graph, x_name) / s_out
            contributions.append((x_name, _float_pool_backward(op, env[x_name], e, ratio),
                                  _float_pool_backward(op, env[x_name], b, ratio)
                                  + (_float_pool_backward(op, env[x_name], (e != 0) * 1.0, 1.0)
                                     > 0)))
        elif op.type == "MEAN":
            axes = tuple(op.options["axes"])
            count = np.prod([x_shape[a] for a in axes])
            ratio = _scale(graph, x_name) / (s_out * count)
            kept = [1 if a in axes else s for a, s in enumerate(x_shape)]
            contributions.append((x_name, np.broadcast_to(e.reshape(kept) * ratio, x_shape),
                                  np.broadcast_to(b.reshape(kept) * ratio + 1.0, x_shape)))
        elif op.type == "ADD":
            for name in op.inputs:
                if name in made:
                    ratio = _scale(graph, name) / s_out
                    contributions.append((name, e * ratio, b * ratio + 1.0))
        else:
            raise AssertionError(f"no float rule for {op.type}")
        for name, value, bound in contributions:
            if name in made:
                errors[name] = errors.get(name, 0.0) + value
                bounds[name] = bounds.get(name, 0.0) + bound
    return out, out_bounds


@pytest.mark.parametrize("spec, c", [
    pytest.param(KWS, 3, id="kws-C3"),  # DEPTHWISE, 1x1 CONV, AVERAGE_POOL, RESHAPE, FC
    pytest.param(DIGITS, 2, id="digits-C2"),  # MAX_POOL
    pytest.param("fixture:digits_resnet.tflite", 4, id="digits_resnet-C4"),  # 3x3, two-input ADD
    pytest.param(ONNX, 2, id="onnx-C2"),  # 3x3 CONV, MEAN, ADD of a constant
])
def test_node_gradients_match_float_backprop(spec, c):
    """Each BP layer's integer node gradient (Q24) is 2^24 times the float64 one, to within
    the rounding the integer rules allow (a bound far below the gradient itself)."""
    got, want, bound, graph = _gradients(spec, c)
    for k in want:
        ref, largest = want[k], np.abs(want[k]).max()
        assert bound[k].max() < 0.05 * largest, f"op {k}: the bound would prove nothing"
        excess = np.abs(got[k] - ref) - (bound[k] + 1e-4 * largest + 4)
        worst = int(np.argmax(excess))
        assert excess.max() <= 0, (f"op {k} {graph.ops[k].type}: element {worst}: int "
                                   f"{got[k].flat[worst]}, float {ref.flat[worst]:.1f}, "
                                   f"bound {bound[k].flat[worst]:.1f}")


def test_deep_head_node_gradients_match_float_backprop():
    """MCUNet-in1, C = 12 (strided DEPTHWISE, RELU6, inverted-residual ADDs, MEAN): eight
    ops down, the worst-case rounding bound is meaningless (it multiplies |w| sums), and
    the measured error grows to 1-2 % (each FC / CONV rounds its scaled error to an LSB
    before the weights multiply it): direction and size still hold to 3 %."""
    got, want, _, _ = _gradients("fixture:mcunet_in1.tflite", 12)
    for k in want:
        a, b = got[k].ravel().astype(np.float64), want[k].ravel()
        relative = np.linalg.norm(a - b) / np.linalg.norm(b)
        cosine = a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
        assert relative < 0.03 and cosine > 0.999, (k, relative, cosine)


def _gradients(spec: str, c: int):
    """(integer node gradients, float64 ones times 2^24, the rounding bound, graph) of the
    BP layers on four random samples; the gradients are not vanishing."""
    graph = load_model(_resolve(spec))
    plan = training_plan(graph, _config(c))
    x, y = _data(graph, plan.num_classes, count=4, seed=7)
    params = simulator.initial_params(graph, plan)
    env = step_parts.forward(graph, {graph.inputs[0]: x, **params}, 0, plan.logits_op)
    bp_ops = tuple(layer.op_index for layer in plan.bp_layers)
    got = node_gradients(graph, plan.head, env, params, y, plan.logits, plan.loss_params,
                         bp_ops)
    want, bound = _float_node_gradients(graph, plan, env, y)
    assert set(got) == set(want) == set(bp_ops) and len(bp_ops) == c
    for k in bp_ops:
        assert np.abs(want[k]).max() > 1000, f"op {k}: a vanishing gradient proves nothing"
        assert np.count_nonzero(got[k]) >= 0.1 * got[k].size
    return got, want, bound, graph


# ---- 3. the softmax gradient's C twin --------------------------------------------------------

SOFTMAX_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "zo_kernels.h"

/* stdin: "multiplier left_shift diff_min depth label v0 .. v{depth-1}" per row;
 * stdout: the depth Q24 gradients of the row */
int main(void)
{
    long m, shift, diff_min, depth, label;
    while (scanf("%ld %ld %ld %ld %ld", &m, &shift, &diff_min, &depth, &label) == 5) {
        int8_t *logits = malloc((size_t)depth);
        int32_t *gradient = malloc((size_t)depth * sizeof *gradient);
        if (logits == NULL || gradient == NULL) return 3;
        for (long i = 0; i < depth; ++i) {
            int v;
            if (scanf("%d", &v) != 1) return 2;
            logits[i] = (int8_t)v;
        }
        zo_softmax_params p = {1, (int32_t)depth, (int32_t)m, (int32_t)shift,
                               (int32_t)diff_min, 0, 0};
        zo_softmax_gradient_q24(&p, logits, (int32_t)label, gradient);
        for (long i = 0; i < depth; ++i) printf("%ld ", (long)gradient[i]);
        printf("\n");
        free(logits);
        free(gradient);
    }
    return 0;
}
"""


@pytest.fixture(scope="module", params=["plain", "sanitize"])
def softmax_driver(request, tmp_path_factory):
    return build_softmax_driver(SOFTMAX_DRIVER, request.param, tmp_path_factory)


def test_softmax_gradient_c_matches_numpy(softmax_driver):
    rng = np.random.default_rng(3)
    cases, expected = [], []
    for scale in (1e-3, 0.01, 0.05, 0.1, 0.17, 0.3, 0.5, 1.0, 2.0, 20.0):
        params = log_softmax_params(scale)
        for depth in (1, 2, 10, 12, 100, 1000):
            rows = [rng.integers(-128, 128, depth), np.full(depth, 5), np.full(depth, -128),
                    np.where(np.arange(depth) == 0, 127, -128),
                    np.clip(127 + params.diff_min + rng.integers(-2, 3, depth), -128, 127)]
            for row in rows:
                for label in sorted({0, depth - 1, int(rng.integers(depth))}):
                    cases.append(f"{params.input_multiplier} {params.input_left_shift} "
                                 f"{params.diff_min} {depth} {label} "
                                 + " ".join(str(int(v)) for v in row) + "\n")
                    expected.append(softmax_gradient_q24(np.asarray(row, np.int8)[None],
                                                         np.array([label]), params)[0])
    out = subprocess.run([str(softmax_driver)], input="".join(cases), capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert len(out) == len(expected)
    for line, want in zip(out, expected):
        assert [int(v) for v in line.split()] == [int(v) for v in want]
    # and the numbers are softmax - onehot: each row sums to ~0, within rounding
    sums = np.array([int(np.sum(e)) for e in expected])
    depths = np.array([len(e) for e in expected])
    assert np.all(np.abs(sums) <= depths)


def test_softmax_gradient_is_the_float_gradient():
    logits, labels, params, z = random_logits(4)
    got = softmax_gradient_q24(logits, labels, params) / 2.0 ** 24
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(50), labels] -= 1
    assert np.abs(got - p).max() < SOFTMAX_ERROR


# ---- 4. refusals -----------------------------------------------------------------------

@pytest.mark.parametrize("model, value, messages", [
    # ONNX: from the third-to-last CONV_2D (op 7) the error would have to pass the MUL
    # after it (then CONCATENATION and TRANSPOSE): the first one in forward order is named
    ("onnx_qdq_int8.onnx", "3", ("op 8 MUL", "has no backward rule",
                                 "the largest --bp-layers that works is 2")),
    ("digits_cnn.tflite", "5", ("the model has 4 trainable layers",
                                "the largest --bp-layers that works is 4")),
    ("digits_cnn.tflite", "x", ("--bp-layers expects a number of layers or auto, got 'x'",)),
    ("digits_cnn.tflite", "-2", ("--bp-layers must be 0 or more",)),
])
def test_build_refuses_bad_bp_layers(model, value, messages, tmp_path, capsys):
    code = main(["build", str(FIXTURES / model), "--target", "native", "--train", "full",
                 "--bp-layers", value, "-o", str(tmp_path / "fw")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for message in messages:
        assert message in err, err
    assert not (tmp_path / "fw").exists()


# ---- 5. memory ---------------------------------------------------------------------------

@pytest.mark.parametrize("spec, c, batch", [
    pytest.param(DIGITS, 2, 1, id="digits-C2"), pytest.param(DIGITS, 4, 3, id="digits-C4-N3"),
    pytest.param(KWS, 3, 1, id="kws-C3"), pytest.param(ONNX, 2, 2, id="onnx-C2-N2")])
def test_gradient_region_holds_the_head(spec, c, batch, tmp_path):
    """The report's gradient buffer >= plan.backprop_bytes() (paper Eq. 4: copies of the
    head's activations, an error per head tensor, the scaled output error, N > 1 gradient
    accumulators), which is exactly the region layout training.c describes."""
    model = _resolve(spec)
    graph = load_model(model)
    config = _config(c, batch=batch, steps=100, queries=50)
    plan = training_plan(graph, config)
    project = generate(model, BuildOptions("native", train=config), tmp_path / "p", graph)
    report = json.loads((tmp_path / "p" / "memory_report.json").read_text())
    items = {i["name"]: i["bytes"] for i in report["sram"]["items"]}
    head = project.training.head
    assert plan.backprop_bytes() > 0
    assert 4 * head.words == plan.backprop_bytes()
    assert items["gradient buffer"] >= plan.backprop_bytes()
    assert items["gradient buffer"] >= plan.gradient_bytes()
    accumulators = sum(layer.d_w for layer in plan.bp_layers) if batch > 1 else 0
    assert head.accumulator_words == accumulators
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert manifest["training"]["bp_layers"] == c
    assert manifest["training"]["modes"][-c:] == ["BP"] * c


def test_bp_layers_auto_picks_and_records_a_c(tmp_path, capsys):
    """--bp-layers auto on the digits CNN: every layer fits the F746 budget, so C = 4; the
    manifest records the resolved C; simulate resolves it the same way (run.json)."""
    model = FIXTURES / "digits_cnn.tflite"
    out = tmp_path / "fw"
    assert main(["build", str(model), "--target", "native", "--train", "full",
                 "--bp-layers", "auto", "--steps", "10", "-o", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["training"]["bp_layers"] == 4 != BP_AUTO
    assert manifest["training"]["modes"] == ["BP"] * 4
    graph = load_model(model)
    x, y = _data(graph, 10, count=6)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    run = tmp_path / "run"
    assert main(["simulate", str(model), "--data", str(tmp_path / "d.npz"), "-o", str(run),
                 "--steps", "2", "--queries", "2", "--lr", "0.01", "--no-guard",
                 "--bp-layers", "auto"]) == 0
    assert json.loads((run / "run.json").read_text())["config"]["bp_layers"] == 4
    capsys.readouterr()


@pytest.mark.parametrize("spec, board, expected", [
    pytest.param(KWS, "stm32f746", 4, id="kws-f746"),  # the budget decides
    pytest.param(KWS, "stm32h7b3", 10, id="kws-h7b3"),  # every layer fits
    pytest.param(ONNX, "stm32h7b3", 2, id="onnx-h7b3"),  # the MUL decides
])
def test_bp_layers_auto_is_the_largest_c_that_fits(spec, board, expected, tmp_path):
    model = _resolve(spec)
    graph = load_model(model)
    config = TrainConfig(steps=100, queries=50, bp_layers=BP_AUTO)
    plan = generate(model, BuildOptions("native", board, config), tmp_path / "auto", graph)
    assert plan.placement.fits
    manifest = json.loads((tmp_path / "auto" / "manifest.json").read_text())
    assert manifest["training"]["bp_layers"] == expected
    if spec == KWS and board == "stm32f746":  # one more layer would not fit
        bigger = generate(model, BuildOptions("native", board, replace(config, bp_layers=5)),
                          tmp_path / "bigger", graph)
        assert not bigger.placement.fits
