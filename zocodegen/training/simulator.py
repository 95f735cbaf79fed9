"""The numpy training simulator: DESIGN.md section 4 exactly as the generated C runs it
(docs/training.md), so parameters after any number of steps are bit-identical.

The device evaluates the Q perturbed copies of a layer one after the other; the simulator
evaluates the copies of all layers of a step as one batch (training/wavefront.py) on the
fast twins of the reference kernels (reference/fast.py), which gives the same integers far
faster. Activations of the clean forward stay in a dict, so the "global update" rule (every
layer's estimate sees step t's network) holds by construction here; the C engine gets the
same effect by re-running from saved activations.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from ..errors import DataError
from ..ir import Graph
from ..numerics import rounding_divide_by_pot
from ..reference.conv import tap_windows
from ..reference.common import output_range
from ..reference.softmax import cross_entropy_q26
from .checkpoint import Checkpoint, LayerParams
from .estimators import REGISTRY
from . import int8, wavefront
from .backprop import node_gradients, parameter_gradient
from .guard import GuardSchedule, GuardState, Score, lr_scale
from .plan import TrainableLayer, TrainingPlan
from .prng import sample_seed, step_seed
from .update import (apply_biases, apply_weights, clipped_coefficient, learning_rate,
                     raw_deltas, round_half_away, step_coefficient, update_deltas)

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
Params = dict[str, np.ndarray]  # weight / bias tensor name -> int8 / int32 array (IR shape)
Gradient = tuple[np.ndarray, np.ndarray | None]  # int weight gradient (flat), bias gradient


def initial_params(graph: Graph, plan: TrainingPlan) -> Params:
    params: Params = {}
    for layer in plan.layers:
        params[layer.weights] = np.array(graph.tensor(layer.weights).data, dtype=np.int8)
        if layer.bias:
            params[layer.bias] = np.array(graph.tensor(layer.bias).data, dtype=np.int32)
    return params


def forward(graph: Graph, env: dict[str, np.ndarray], start: int, stop: int,
            keep: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """Run ops ``start..stop`` (inclusive) on a batch; ``env`` holds activations and the
    trainable parameters (possibly with a variant axis: variant v owns the v-th share of the
    batch rows). Returns the env extended with every output, or with those in ``keep``."""
    return wavefront.forward(graph, env, start, stop, keep)


def losses_q16(plan: TrainingPlan, logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Cross-entropy per row in Q16 (2^-16 nats), int64."""
    rows = logits.reshape(logits.shape[0], -1)
    return rounding_divide_by_pot(cross_entropy_q26(rows, labels, plan.loss_params), 10)


def loss_differences(plan: TrainingPlan, losses: np.ndarray, clean: np.ndarray) -> np.ndarray:
    """Delta l = l_q - l (Q16) clamped to +-plan.diff_limit: N Q terms of the gradient sums
    then fit int32 exactly, whatever N and Q are (docs/training.md)."""
    return np.clip(losses - clean, -plan.diff_limit, plan.diff_limit)


def _tile(value: np.ndarray, copies: int) -> np.ndarray:
    return np.tile(value, (copies,) + (1,) * (value.ndim - 1))


def _perturbed_weights(layer: TrainableLayer, params: Params, xi: np.ndarray) -> np.ndarray:
    """The layer's weights plus each row of ``xi`` (int8 saturation): (copies, *shape)."""
    w = params[layer.weights]
    return np.clip(w[None].astype(np.int16) + xi.reshape((-1,) + w.shape), -128, 127
                   ).astype(np.int8)


def _perturbed_params(layer: TrainableLayer, params: Params, xi: np.ndarray) -> Params:
    """The perturbed copies as a parameter with a variant axis (simulator.forward)."""
    return {layer.weights: _perturbed_weights(layer, params, xi)}


def wp_perturbations(plan: TrainingPlan, layer: TrainableLayer, seed: int) -> np.ndarray:
    """The layer's Q perturbations of the stream ``seed`` (Q, d_w), int8 (split: its
    block's P_1 or P_2)."""
    q = plan.scalar_source(layer)[1]
    return plan.perturbation.values(seed, q * layer.weight_count, layer.perturb_shift
                                    ).reshape(q, layer.weight_count)


def wp_gradient(xi: np.ndarray, sums: np.ndarray) -> Gradient:
    """g_j = sum_q D_q xi_qj; WP leaves the biases alone."""
    return np.asarray(sums, dtype=np.int64) @ xi.astype(np.int64), None


def node_to_parameter_gradient(graph: Graph, layer: TrainableLayer, a: np.ndarray,
                               gz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NP: weight gradient = the convolution / FC shaped outer product of the node gradient
    with the (zero-point corrected) layer input; bias gradient = node gradient summed over
    positions. Per sample, int64: (N, weight_count), (N, channels)."""
    op, n = layer.op, a.shape[0]
    offset = -graph.tensor(op.inputs[0]).quant.scalar_zero_point
    w_shape = graph.tensor(layer.weights).shape
    x = a.astype(np.int64) + offset
    if op.type == "FULLY_CONNECTED":
        rows = x.reshape(n, -1, w_shape[1])
        gzr = gz.reshape(n, rows.shape[1], w_shape[0])
        return np.einsum("nro,nrc->noc", gzr, rows).reshape(n, -1), gzr.sum(axis=1)
    out_shape = graph.tensor(op.outputs[0]).shape
    gz = gz.reshape((n,) + tuple(out_shape[1:]))
    gw = np.zeros((n,) + tuple(w_shape), dtype=np.int64)
    mult = op.options.get("depth_multiplier", 1)
    for i, j, patch in tap_windows(x, op, w_shape[1], w_shape[2], out_shape[1], out_shape[2]):
        if op.type == "DEPTHWISE_CONV_2D":
            gw[:, 0, i, j, :] = (gz * np.repeat(patch, mult, axis=3)).sum(axis=(1, 2))
        else:
            gw[:, :, i, j, :] = np.einsum("nhwo,nhwc->noc", gz, patch)
    return gw.reshape(n, -1), gz.sum(axis=(1, 2))


def _accumulate_int32(per_sample: np.ndarray) -> np.ndarray:
    """Each sample's int64 gradient saturated to int32, then summed with int32 saturation."""
    acc = np.zeros(per_sample.shape[1:], dtype=np.int64)
    for g in np.clip(per_sample, INT32_MIN, INT32_MAX):
        acc = np.clip(acc + g, INT32_MIN, INT32_MAX)
    return acc


def pre_activation(graph: Graph, layer: TrainableLayer, env: dict) -> np.ndarray:
    """z of the clean forward (``env`` holds its activations and the step's parameters): the
    layer's requantized output before the fused activation's clamp (int64, output shape)."""
    return wavefront.pre_activation(graph, layer.op_index, env).reshape(env[layer.output].shape)


@dataclass(frozen=True)
class _LayerQueries:
    """One layer's estimate between its query forwards and its update: the perturbed copies
    (a wavefront group) and what the gradient needs besides their losses."""

    layer: TrainableLayer
    seed: int
    group: wavefront.QueryGroup
    perturbations: np.ndarray  # WP: xi (Q, d_w); INT8: z (Q, d_w); NP: xi (Q, N, d_a)
    z: np.ndarray | None = None  # NP: the clean pre-activations (N, d_a)


def _layer_queries(graph: Graph, plan: TrainingPlan, layer: TrainableLayer, params: Params,
                   env: dict, n: int, t: int) -> _LayerQueries:
    """WP: the weights plus each xi_q (and minus, --two-sided); INT8: plus and minus each
    z_q (ElasticZO-INT8's two-point estimate, training/int8.py); NP as the paper writes it
    (Eq. 9/10): the next layer sees h(z + xi) with z the pre-activation and h the fused
    activation's clamp, each sample with its own xi (Alg. 1's xi_{q,n})."""
    cfg = plan.config
    seed = step_seed(plan.seed, t, layer.index)
    if layer.mode in ("WP", "INT8"):
        if layer.mode == "INT8":
            xi = int8.perturbations(seed, cfg.queries, layer.weight_count, cfg.r_max,
                                    int8.p_zero_q16(cfg.p_zero, t, cfg.steps))
        else:
            xi = wp_perturbations(plan, layer, seed)
        both = np.concatenate([xi, -xi]) if cfg.two_sided or layer.mode == "INT8" else xi
        group = wavefront.QueryGroup(layer.op_index,
                                     weights=_perturbed_weights(layer, params, both))
        return _LayerQueries(layer, seed, group, xi)
    lo, hi = output_range(graph, layer.op)
    z = pre_activation(graph, layer, env).reshape(n, -1)
    xi = np.stack([plan.perturbation.values(sample_seed(seed, k), cfg.queries
                                            * layer.output_count, layer.perturb_shift)
                   .reshape(cfg.queries, layer.output_count) for k in range(n)], axis=1)
    nodes = np.concatenate([np.clip(z[None] + sign * xi.astype(np.int64), lo, hi)
                            .astype(np.int8) for sign in ((1, -1) if cfg.two_sided else (1,))])
    group = wavefront.QueryGroup(layer.op_index, nodes=nodes.reshape(
        (-1,) + env[layer.output].shape[1:]))
    return _LayerQueries(layer, seed, group, xi, z)


def _finish_layer(graph: Graph, plan: TrainingPlan, queries: _LayerQueries, params: Params,
                  env: dict, losses: np.ndarray, clean: np.ndarray, eta_t: np.float32,
                  halvings: int, record: dict | None) -> None:
    """The layer's gradient from its copies' Q16 losses (V, N), and its update. WP: D_q, the
    batch's summed loss differences l(theta + xi_q) - l (or - l(theta - xi_q)), all a WP
    update depends on with the seed (replay.py); INT8: G_j = sum_q sgn(D_q) z_qj; NP: the
    node gradient, kept only where h passes both z - 1 and z + 1 (h'(z) = 1)."""
    layer, cfg = queries.layer, plan.config
    count = len(queries.perturbations)
    if layer.mode == "INT8":
        sums = loss_differences(plan, losses[:count], losses[count:]).sum(axis=1)
        _int8_update(layer, params, int8.sign_gradient(queries.perturbations, sums),
                     cfg.b_zo, halvings, queries.seed)
        return
    diffs = loss_differences(plan, losses[:count], losses[count:] if cfg.two_sided else clean)
    if layer.mode == "WP":
        sums = diffs.sum(axis=1)
        if record is not None:
            record[layer.index] = sums.astype(np.int32)
        grad = wp_gradient(queries.perturbations, sums)
    else:
        lo, hi = output_range(graph, layer.op)
        z = queries.z
        gz = (np.einsum("qn,qnd->nd", diffs, queries.perturbations.astype(np.int64))
              * ((z > lo) & (z < hi)))
        gw, gb = node_to_parameter_gradient(graph, layer, env[layer.input], gz)
        grad = _accumulate_int32(gw), (_accumulate_int32(gb) if layer.bias else None)
    _update_layer(plan, layer, params, grad, eta_t)


def _layerwise_step(graph: Graph, plan: TrainingPlan, params: Params, env: dict,
                    labels: np.ndarray, clean: np.ndarray, t: int, eta_t: np.float32,
                    halvings: int, record: dict | None) -> None:
    """Every ZO layer's estimate and update (Algorithm 1), the query forwards of as many
    layers at once as a wavefront holds."""
    n, layers = len(labels), plan.zo_layers
    rows = plan.sides * plan.config.queries * n
    first = 0
    for size in wavefront.waves(graph, plan, [(layer.op_index, rows) for layer in layers]):
        batch = [_layer_queries(graph, plan, layer, params, env, n, t)
                 for layer in layers[first:first + size]]
        logits, where = wavefront.query_logits(graph, plan, env, n, [q.group for q in batch])
        losses = losses_q16(plan, logits, _tile(labels, len(logits) // n))
        for queries, part in zip(batch, where):
            _finish_layer(graph, plan, queries, params, env, losses[part].reshape(-1, n), clean,
                          eta_t, halvings, record)
        first += size


def _update_layer(plan: TrainingPlan, layer: TrainableLayer, params: Params,
                  grad: Gradient, eta_t: np.float32) -> None:
    coef = step_coefficient(eta_t, layer.gscale, plan.inv_nq)
    w = params[layer.weights]
    channel_of = (np.arange(layer.weight_count) // layer.channel_inner) % layer.channels
    raw = raw_deltas(coef, layer.weight_inv_s2, grad[0], channel_of)
    clipped = clipped_coefficient(coef, np.abs(raw).max(), plan.config.max_step)
    if clipped != coef:  # only a clipped update is computed again
        coef = clipped
        raw = raw_deltas(coef, layer.weight_inv_s2, grad[0], channel_of)
    deltas = round_half_away(raw)
    params[layer.weights] = apply_weights(w.reshape(-1), deltas).reshape(w.shape)
    if grad[1] is not None:
        deltas = update_deltas(coef, layer.bias_inv_s2, grad[1], np.arange(layer.channels))
        params[layer.bias] = apply_biases(params[layer.bias], deltas)


def _mezo_step(graph: Graph, plan: TrainingPlan, params: Params, xs: np.ndarray,
               labels: np.ndarray, t: int, eta_t: np.float32) -> None:
    """MeZO as MeZO is (two-point SPSA, model-wise): one stream S(t, 0) over all trainable
    weights; per query the loss at theta + xi and at theta - xi (int8 saturation), two full
    forwards; g = sum_q (l+ - l-) xi, divided by 2 N Q through plan.inv_nq."""
    q, n = plan.queries_per_step, len(labels)
    total = sum(layer.weight_count for layer in plan.zo_layers)
    xi = plan.perturbation.values(step_seed(plan.seed, t, 0), q * total,
                                  plan.perturbation.layer_shift(total)).reshape(q, total)
    losses = []
    for sign in (1, -1):
        env = {graph.inputs[0]: _tile(xs, q)}
        env.update(params)
        pos = 0
        for layer in plan.zo_layers:
            env.update(_perturbed_params(layer, params,
                                         sign * xi[:, pos:pos + layer.weight_count]))
            pos += layer.weight_count
        out = forward(graph, env, 0, plan.logits_op, (plan.logits,))
        losses.append(losses_q16(plan, out[plan.logits], _tile(labels, q)).reshape(q, n))
    d = loss_differences(plan, losses[0], losses[1]).sum(axis=1)
    grad = d @ xi.astype(np.int64)
    pos = 0
    for layer in plan.zo_layers:
        _update_layer(plan, layer, params, (grad[pos:pos + layer.weight_count], None), eta_t)
        pos += layer.weight_count


def _split_step(graph: Graph, plan: TrainingPlan, params: Params, env: dict,
                labels: np.ndarray, t: int, eta_t: np.float32, record: dict | None) -> None:
    """FedSPZO's split perturbation (Alg. 2, Eqs. 2-4) in integers: for each of the P_1
    block-1 directions z1 and each side, block 1 runs once with theta_1 +- z1, then block 2
    runs 2 P_s times on that output with theta_2 +- z2_j (fresh z2 per side). Block 2's sums
    D2_j = sum_n clamp(l+ - l-); block 1's D1_p = sum_n clamp(sum of the 2 P_s losses on
    the + side - those on the - side). Each layer then updates as WP with its block's
    perturbations (z1_p: chunk p of S(t, i); z2_f: chunk f = (2p + side) P_s + j) and sums."""
    cfg = plan.config
    n, ps = len(labels), cfg.inner_queries
    block1, block2 = plan.layers[:plan.split], plan.layers[plan.split:]
    xi = {layer.index: wp_perturbations(plan, layer, step_seed(plan.seed, t, layer.index))
          for layer in plan.layers}
    cut = block2[0]
    start = {name: env[name] for name in block1[0].crossing}
    start.update(params)
    d1 = np.zeros(cfg.queries, dtype=np.int64)
    d2 = np.zeros(plan.inner_perturbations, dtype=np.int64)
    for p in range(cfg.queries):
        side_losses = []
        for side, sign in enumerate((1, -1)):
            first = dict(start)
            for layer in block1:
                first.update(_perturbed_params(layer, params, sign * xi[layer.index][p:p + 1]))
            out = forward(graph, first, block1[0].op_index, cut.op_index - 1, cut.crossing)
            f = (2 * p + side) * ps
            second = {name: _tile(out[name], 2 * ps) for name in cut.crossing}
            second.update(params)
            for layer in block2:
                z = xi[layer.index][f:f + ps]
                second.update(_perturbed_params(layer, params, np.concatenate([z, -z])))
            logits = forward(graph, second, cut.op_index, plan.logits_op,
                             (plan.logits,))[plan.logits]
            losses = losses_q16(plan, logits, _tile(labels, 2 * ps)).reshape(2 * ps, n)
            d2[f:f + ps] = np.clip(losses[:ps] - losses[ps:], -plan.diff_limit,
                                   plan.diff_limit).sum(axis=1)
            side_losses.append(losses.sum(axis=0))
        d1[p] = np.clip(side_losses[0] - side_losses[1], -plan.block1_diff_limit,
                        plan.block1_diff_limit).sum()
    if record is not None:
        record[block1[0].index], record[cut.index] = d1.astype(np.int32), d2.astype(np.int32)
    for position, layer in enumerate(plan.layers):
        sums = d1 if position < plan.split else d2
        _update_layer(plan, layer, params, wp_gradient(xi[layer.index], sums), eta_t)


def _int8_update(layer: TrainableLayer, params: Params, grad: np.ndarray, bits: int,
                 halvings: int, seed: int) -> None:
    """G rounded to ``bits`` bits (one more bit of shift per guard halving), subtracted from
    the weights with int8 saturation; biases unchanged."""
    w = params[layer.weights]
    update = int8.round_to_bits(grad, bits, halvings, seed)
    params[layer.weights] = int8.apply_update(w.reshape(-1), update).reshape(w.shape)


def _bp_step(graph: Graph, plan: TrainingPlan, params: Params, env: dict,
             labels: np.ndarray, eta_t: np.float32, t: int, halvings: int) -> None:
    """--bp-layers: the head's exact gradients from the clean forward's activations (the
    ZO layers' updates do not reach them: step t's network, as the global update rule
    wants), then each BP layer's update in forward order, as NP's with an exact node
    gradient (training/backprop.py)."""
    layers = plan.bp_layers
    grads = node_gradients(graph, plan.head, env, params, labels, plan.logits,
                           plan.loss_params, tuple(layer.op_index for layer in layers))
    for layer in layers:
        gw, gb = node_to_parameter_gradient(graph, layer, env[layer.input], grads[layer.op_index])
        if plan.config.integer_only:  # weights only, rounded to b_BP bits (Alg. 2 line 11)
            _int8_update(layer, params, _accumulate_int32(parameter_gradient(gw)),
                         plan.config.b_bp, halvings, step_seed(plan.seed, t, layer.index))
            continue
        grad = (_accumulate_int32(parameter_gradient(gw)),
                _accumulate_int32(parameter_gradient(gb)) if layer.bias else None)
        _update_layer(plan, layer, params, grad, eta_t)


def replay_step(plan: TrainingPlan, params: Params, t: int, sums: dict[int, np.ndarray]
                ) -> Params:
    """Step t rebuilt without data: every trained layer is WP, and its update follows from
    the stream S(t, i) and the query sums the device recorded (no guard, fixed eta); ``sums``
    by scalar key (plan.scalar_source)."""
    params = dict(params)
    eta_t = step_learning_rate(plan, t)
    for layer in plan.layers:
        xi = wp_perturbations(plan, layer, step_seed(plan.seed, t, layer.index))
        sums_of = sums[plan.scalar_source(layer)[0]]
        _update_layer(plan, layer, params, wp_gradient(xi, sums_of), eta_t)
    return params


def step_learning_rate(plan: TrainingPlan, t: int, halvings: int = 0) -> np.float32:
    """eta_t of the schedule, times 2^-halvings (the guard's rollbacks), float32."""
    cfg = plan.config
    return np.float32(learning_rate(cfg.lr, t, cfg.steps, cfg.schedule) * lr_scale(halvings))


def train_step(graph: Graph, plan: TrainingPlan, params: Params, t: int, xs: np.ndarray,
               labels: np.ndarray, halvings: int = 0, record: dict | None = None
               ) -> tuple[Params, float]:
    """One optimisation step on a batch of N samples; returns the new parameters and the
    batch's mean clean loss in nats (before the update). ``record``: filled with each WP
    layer's query sums (trainable-layer index -> int32 (Q,)), what the device sends with
    --record-scalars."""
    params = dict(params)
    cfg = plan.config
    eta_t = step_learning_rate(plan, t, halvings)
    env = {graph.inputs[0]: xs}
    env.update(params)
    env = forward(graph, env, 0, plan.logits_op)
    clean = losses_q16(plan, env[plan.logits], labels)
    if REGISTRY[cfg.estimator].whole_model:
        _mezo_step(graph, plan, params, xs, labels, t, eta_t)
    elif plan.split:
        _split_step(graph, plan, params, env, labels, t, eta_t, record)
    elif plan.zo_layers:
        _layerwise_step(graph, plan, params, env, labels, clean, t, eta_t, halvings, record)
    if plan.head is not None:
        _bp_step(graph, plan, params, env, labels, eta_t, t, halvings)
    return params, float(clean.mean()) / 65536.0


def batch_indices(step: int, batch: int, count: int) -> np.ndarray:
    """Samples of step t: (t N + n) mod M, in the order of the data (docs/training.md)."""
    return (step * batch + np.arange(batch)) % count


def predict(graph: Graph, params: Params, x: np.ndarray, chunk: int = 256) -> np.ndarray:
    """Class index per sample (argmax of the model's output), with the given parameters."""
    out = []
    for k in range(0, len(x), chunk):
        env = {graph.inputs[0]: x[k:k + chunk]}
        env.update(params)
        y = forward(graph, env, 0, len(graph.ops) - 1, (graph.outputs[0],))[graph.outputs[0]]
        out.append(y.reshape(y.shape[0], -1).argmax(axis=1))
    return np.concatenate(out)


def trial_size(train_count: int, trial_samples: int) -> int:
    """S of the block trials: the first S training samples train, the last S score."""
    size = min(trial_samples, train_count // 2)
    if size < 1:
        raise DataError("sparse --block auto needs at least 2 training samples (a trial "
                        "subset and a held-out subset)")
    return size


@dataclass(frozen=True)
class BlockSelection:
    """Sparse --block auto (docs/training.md): held-out correct predictions before any
    training and after each block's one-epoch trial; the first block with the largest gain
    wins."""

    samples: int  # S
    baseline: int
    correct: tuple[int, ...]

    @property
    def block(self) -> int:
        return int(np.argmax(self.correct))

    @property
    def gains(self) -> tuple[int, ...]:
        return tuple(c - self.baseline for c in self.correct)


def select_block(graph: Graph, plans: tuple[TrainingPlan, ...], x: np.ndarray, y: np.ndarray,
                 on_trial_step: Callable[[], None] | None = None) -> BlockSelection:
    """Each block trains for one epoch of the trial subset from the original parameters
    (a cosine schedule over the trial's steps), then scores the held-out subset."""
    cfg = plans[0].config
    size = trial_size(len(x), cfg.trial_samples)
    steps = -(-size // cfg.batch)
    held_x, held_y = x[len(x) - size:], y[len(y) - size:]
    baseline = int((predict(graph, {}, held_x) == held_y).sum())
    correct = []
    for plan in plans:
        trial = replace(plan, config=replace(plan.config, steps=steps))
        params = initial_params(graph, plan)
        for t in range(steps):
            idx = batch_indices(t, cfg.batch, size)
            params, _ = train_step(graph, trial, params, t, x[idx], y[idx])
            if on_trial_step is not None:
                on_trial_step()
        correct.append(int((predict(graph, params, held_x) == held_y).sum()))
    return BlockSelection(size, baseline, tuple(correct))


def validation_score(graph: Graph, plan: TrainingPlan, params: Params, x: np.ndarray,
                     y: np.ndarray) -> Score:
    """The guard's measurement: correct argmax of the logits (lowest index on ties) and the
    sum of Q16 losses, over the records given."""
    env = {graph.inputs[0]: x}
    env.update(params)
    logits = forward(graph, env, 0, plan.logits_op, (plan.logits,))[plan.logits].reshape(
        len(x), -1)
    return Score(int((logits.argmax(axis=1) == y).sum()),
                 int(losses_q16(plan, logits, y).sum()))


def choose_lr(graph: Graph, plan: TrainingPlan, params: Params, x: np.ndarray, y: np.ndarray,
              x_val: np.ndarray, y_val: np.ndarray, schedule: GuardSchedule
              ) -> tuple[float, tuple[Score, ...]]:
    """--lr auto: each candidate trains ``schedule.trial_steps`` steps from ``params`` at a
    constant eta on the run's first samples; the lowest validation loss wins (the first,
    i.e. smallest eta, on ties). Returns the winner (float32 value) and every score."""
    scores = []
    for eta in schedule.candidates:
        trial = replace(plan, config=replace(plan.config, lr=eta, schedule="constant",
                                             steps=schedule.trial_steps))
        p = params
        for t in range(schedule.trial_steps):
            idx = batch_indices(t, plan.config.batch, len(x))
            p, _ = train_step(graph, trial, p, t, x[idx], y[idx])
        scores.append(validation_score(graph, plan, p, x_val, y_val))
    best = min(range(len(scores)), key=lambda k: (scores[k].loss, k))
    return float(np.float32(schedule.candidates[best])), tuple(scores)


@dataclass(frozen=True)
class StepRecord:
    step: int  # completed steps after this one
    loss: float  # mean clean loss of the step's batch, nats
    lr: float
    accuracy: float | None  # on the test split, when evaluated at this step
    val_accuracy: float | None = None  # the guard's check at this step
    event: str = ""  # the guard's decision: best, rollback, restore (the final best)


@dataclass
class Guard:
    """The guard of one simulated run: its validation records, schedule and state, and the
    best parameters (the device keeps them in the image's second checkpoint slot)."""

    x_val: np.ndarray
    y_val: np.ndarray
    schedule: GuardSchedule
    state: GuardState
    best_params: Params | None = None

    def baseline(self, graph: Graph, plan: TrainingPlan, params: Params) -> Score:
        """The check before the first step: the parameters to beat."""
        score = validation_score(graph, plan, params, self.x_val, self.y_val)
        self.state = replace(self.state, best_step=0, best=score)
        self.best_params = params
        return score

    def check(self, graph: Graph, plan: TrainingPlan, params: Params, done: int
              ) -> tuple[Params, Score | None, str]:
        """After step ``done``: measure when due, keep a new best, roll back on a fall; after
        the last step the result is the best parameters."""
        last = done == plan.config.steps
        if done % self.schedule.every and not last:
            return params, None, ""
        score = validation_score(graph, plan, params, self.x_val, self.y_val)
        event = ""
        if score.better_than(self.state.best):
            self.state = replace(self.state, best_step=done, best=score)
            self.best_params, event = params, "best"
        elif score.falls_below(self.state.best, len(self.y_val)):
            self.state = replace(self.state, halvings=self.state.halvings + 1,
                                 rollbacks=self.state.rollbacks + 1)
            params, event = self.best_params, "rollback"
        if last and self.state.best_step != done and event != "rollback":
            params, event = self.best_params, "restore"
        return params, score, event


def run(graph: Graph, plan: TrainingPlan, params: Params, x: np.ndarray, y: np.ndarray,
        first_step: int = 0, x_test: np.ndarray | None = None, y_test: np.ndarray | None = None,
        eval_every: int = 0, guard: Guard | None = None
        ) -> Iterator[tuple[StepRecord, Params]]:
    """Steps first_step..T-1; yields a record and the parameters after each step. With a
    guard, ``plan.config.lr`` is the eta the run uses (the --lr auto winner) and the guard
    must have its baseline."""
    cfg = plan.config
    for t in range(first_step, cfg.steps):
        idx = batch_indices(t, cfg.batch, len(x))
        halvings = guard.state.halvings if guard else 0
        params, loss = train_step(graph, plan, params, t, x[idx], y[idx], halvings)
        done = t + 1
        score, event = None, ""
        if guard is not None:
            params, score, event = guard.check(graph, plan, params, done)
        acc = None
        if x_test is not None and eval_every and (done % eval_every == 0 or done == cfg.steps):
            acc = float((predict(graph, params, x_test) == y_test).mean())
        yield StepRecord(done, loss, float(step_learning_rate(plan, t, halvings)), acc,
                         None if score is None else score.correct / len(guard.y_val),
                         event), params


def to_checkpoint(plan: TrainingPlan, params: Params, step: int, model_sha256: bytes,
                  state: GuardState | None = None) -> Checkpoint:
    """The checkpoint of a run at ``step``; without a guard state, eta is the plan's."""
    state = state or GuardState(float(np.float32(plan.config.lr)))
    return Checkpoint(model_sha256, step, plan.seed, tuple(
        LayerParams(layer.op_index, params[layer.weights].reshape(-1),
                    params[layer.bias] if layer.bias else np.zeros(0, np.int32))
        for layer in plan.layers), state.lr, state.halvings, state.best_step,
        state.best.correct, state.best.loss, state.rollbacks)


def guard_state(ckpt: Checkpoint) -> GuardState:
    return GuardState(ckpt.lr, ckpt.halvings, ckpt.best_step,
                      Score(ckpt.best_correct, ckpt.best_loss), ckpt.rollbacks)


def from_checkpoint(graph: Graph, plan: TrainingPlan, ckpt: Checkpoint,
                    model_sha256: bytes | None = None) -> Params:
    """Parameters from a checkpoint, refusing one that belongs to another model or run."""
    if model_sha256 is not None and ckpt.model_sha256 != model_sha256:
        raise DataError("the checkpoint belongs to a different model file (sha256 differs)")
    layers = {lp.op_index: lp for lp in ckpt.layers}
    params: Params = {}
    for layer in plan.layers:
        lp = layers.get(layer.op_index)
        if lp is None or lp.weights.size != layer.weight_count or lp.bias.size != layer.bias_count:
            raise DataError(f"the checkpoint has no matching parameters for layer "
                            f"{layer.op_index} ('{layer.op.name}'); was it trained with "
                            "other --layers?")
        params[layer.weights] = lp.weights.reshape(graph.tensor(layer.weights).shape)
        if layer.bias:
            params[layer.bias] = lp.bias.copy()
    return params

