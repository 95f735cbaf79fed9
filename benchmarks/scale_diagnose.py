"""Why zeroth-order training at scale levels off (issue 48, docs/scale.md section 10): one
instrumented run of the default estimator on one cell of the 64x64 task, recording per
trainable layer and over the run

  (a) the cosine between the ZO gradient estimate and the true gradient of the same INT8
      graph at the same parameters and batch, and how it grows with Q (probes);
  (b) the share of estimated per-weight updates that round to zero, and that sit at the
      --max-step clip; how often and how hard the layer's clip scaled the update;
  (c) eta over time: the --lr auto trials, the schedule, the guard's halvings;
  (d) loss on the training split against validation (the guard's records) and test;
  (e) which layers move: changed int8 weights / biases and the L1 of the change;
  (f) the parameter counts per layer: weights, biases, per-channel scales.

    .venv/bin/python benchmarks/scale_diagnose.py --corruption contrast --seed 1 --stop 300
    .venv/bin/python benchmarks/scale_diagnose.py --report build/diagnose/contrast-s5-d0-seed1
    .venv/bin/python benchmarks/scale_diagnose.py --check-reference --corruption contrast

The run is exactly `zocodegen simulate MODEL --data DATA --epochs 1 --queries 20 --seed S`
(the grid's "ours" run, docs/scale.md section 6: --lr auto, the guard, cosine over the
900 steps) stopped after --stop steps. Nothing of the product changes: the script wraps
``simulator.train_step`` (to compute the reference gradient before each step) and the
layer-wise estimator's ``update_layer`` (to look at each gradient and update, then call the
product's own function), so the parameters are the product's to the bit.

The reference gradient ("true gradient of the INT8 graph") is training/backprop.py's
back-propagation through every layer (the rules the ElasticZO hybrid's BP layers use:
straight-through the int8 rounding, zero where an output is clamped), evaluated in exact
arithmetic instead of its int32 Q24 fixed point: the error tensors are kept as int64 in
Q36 and each multiplier is applied as a float64 product, so no error underflows in the
early layers. That is the gradient the ZO estimate is an estimate of: the loss is piecewise
constant in the int8 weights, and a +-1 LSB perturbation's loss difference is, to first
order, this gradient's inner product with the perturbation.

--check-reference asks whether that reference is a descent direction of the int8 graph
itself (per layer: the loss after a 2-LSB step against it, along it, and at random).

Candidates, measured on the simulator only: --estimator and --layers are the product's own
options (e.g. ``--estimator np``; ``--layers`` of the NP layers with a larger --queries at
equal forwards); --variant changes the update rule of this one run, not the product's
numerics: ``sr`` rounds every update stochastically (floor(x + u), u uniform in [0, 1) from
a seeded numpy generator; in C it would be 16 bits of the step's PRNG stream), unbiased
where round-half-away zeroes every |x| < 1/2. Results go to build/diagnose/ (generated,
never committed).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(HERE), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from zocodegen.frontends import load_model  # noqa: E402
from zocodegen.training import backprop as bp  # noqa: E402
from zocodegen.training import runner, simulator, step_parts  # noqa: E402
from zocodegen.training import update as upd  # noqa: E402
from zocodegen.training.config import TrainConfig, parse_layer_list  # noqa: E402
from zocodegen.training.data import load_dataset  # noqa: E402
from zocodegen.training.estimators import layerwise  # noqa: E402
from zocodegen.training.guard import GuardState  # noqa: E402
from zocodegen.training.plan import loss_head, training_plans  # noqa: E402

MODEL = ROOT / "tests" / "fixtures" / "scale_model.tflite"
OUT = ROOT / "build" / "diagnose"
EXACT_BITS = 36  # the reference's error tensors: int64 in Q36 (nats per LSB * 2^36)


# ------------------------------------------------------------------ reference gradient
def _exact_mbqm(x, real):
    return np.rint(np.asarray(x, dtype=np.float64) * np.asarray(real, dtype=np.float64)
                   ).astype(np.int64)


def _exact_softmax_gradient(logits_q, labels, params):
    """(p - onehot) of the dequantized logits (exact softmax), int64 in Q(EXACT_BITS)."""
    z = np.asarray(logits_q, dtype=np.float64) * _LOGIT_SCALE[0]  # (the zero point cancels)
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(labels)), labels] -= 1.0
    return np.rint(p * 2.0 ** EXACT_BITS).astype(np.int64)


_LOGIT_SCALE = [1.0]


@contextlib.contextmanager
def exact_backprop(graph, plan):
    """backprop.py's rules with its fixed-point rounding and int32 saturation removed."""
    saved = bp._mbqm, bp._sat32, bp.softmax_gradient_q24
    _LOGIT_SCALE[0] = float(graph.tensor(plan.logits).quant.scalar_scale)
    bp._mbqm, bp._sat32 = _exact_mbqm, (lambda x: np.asarray(x, dtype=np.int64))
    bp.softmax_gradient_q24 = _exact_softmax_gradient
    try:
        yield
    finally:
        bp._mbqm, bp._sat32, bp.softmax_gradient_q24 = saved


def chain(graph, layer) -> np.ndarray:
    """d z_q / d (x w)_q per output channel: s_in s_c / s_out."""
    return bp.linear_multipliers(graph, layer.op)


def channel_of(layer) -> np.ndarray:
    return (np.arange(layer.weight_count) // layer.channel_inner) % layer.channels


class Reference:
    """Per layer: the exact dl/dw_int (per weight LSB) and dl/db_int (per bias LSB) of the
    INT8 graph at given parameters, on given samples (summed over them)."""

    def __init__(self, graph, plan):
        self.graph, self.plan = graph, plan
        self.head = bp.head(graph, plan.layers[0].op_index, plan.logits_op)
        self.ops = tuple(layer.op_index for layer in plan.layers)
        self.chains = {layer.index: chain(graph, layer) for layer in plan.layers}

    def env(self, params, xs):
        env = {self.graph.inputs[0]: xs}
        env.update(params)
        return step_parts.forward(self.graph, env, 0, self.plan.logits_op)

    def gradients(self, params, xs, labels, env=None):
        env = env if env is not None else self.env(params, xs)
        with exact_backprop(self.graph, self.plan):
            nodes = bp.node_gradients(self.graph, self.head, env, params, labels,
                                      self.plan.logits, self.plan.loss_params, self.ops)
        out = {}
        for layer in self.plan.layers:
            gw, gb = step_parts.node_to_parameter_gradient(
                self.graph, layer, env[layer.input], nodes[layer.op_index])
            c = self.chains[layer.index]
            gw = gw.sum(axis=0).astype(np.float64) * c[channel_of(layer)] / 2.0 ** EXACT_BITS
            gb = gb.sum(axis=0).astype(np.float64) * c / 2.0 ** EXACT_BITS
            out[layer.index] = (gw, gb)
        return out


def cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(a @ b / (na * nb)) if na > 0 and nb > 0 else float("nan")


def zo_in_lsb(graph, layer, grad) -> tuple[np.ndarray, np.ndarray | None]:
    """The estimator's gradient in the reference's units' direction (per weight LSB): WP's
    sum D_q xi_q is already per weight LSB; NP's outer product lacks the chain factor."""
    gw = np.asarray(grad[0], dtype=np.float64)
    gb = None if grad[1] is None else np.asarray(grad[1], dtype=np.float64)
    if layer.mode == "NP":
        c = chain(graph, layer)
        gw = gw * c[channel_of(layer)]
        gb = None if gb is None else gb * c
    return gw, gb


# ------------------------------------------------------------------ the update, observed
class Observer:
    """Wraps layerwise.update_layer: records the gradient and what the update does with it,
    then applies the product's update (or the --variant's)."""

    def __init__(self, graph, plan, variant: str, seed: int):
        self.graph, self.plan, self.variant = graph, plan, variant
        self.active = False
        self.apply = True
        self.step = 0
        self.grads: dict[int, tuple] = {}
        self.rows: list[dict] = []
        self.rng = np.random.default_rng(seed)
        self.original = step_parts.update_layer

    def __call__(self, plan, layer, params, grad, eta_t):
        if self.active:
            self.grads[layer.index] = grad
            self.rows.append(self.stats(plan, layer, grad, eta_t))
        if not self.apply:
            return
        if self.variant == "sr":
            return self.stochastic_update(plan, layer, params, grad, eta_t)
        return self.original(plan, layer, params, grad, eta_t)

    def coefficient(self, plan, layer, grad, eta_t):
        coef = upd.step_coefficient(eta_t, layer.gscale, plan.inv_nq)
        raw = upd.raw_deltas(coef, layer.weight_inv_s2, grad[0], channel_of(layer))
        largest = np.abs(raw).max()
        clipped = upd.clipped_coefficient(coef, largest, plan.config.max_step)
        return coef, clipped, raw, largest

    def stats(self, plan, layer, grad, eta_t) -> dict:
        coef, clipped, raw, largest = self.coefficient(plan, layer, grad, eta_t)
        if clipped != coef:
            raw = upd.raw_deltas(clipped, layer.weight_inv_s2, grad[0], channel_of(layer))
        d = upd.round_half_away(raw)
        row = dict(step=self.step, layer=layer.index, clip_scale=float(clipped / coef)
                   if coef else 1.0, largest=float(largest),
                   w_zero=float(np.mean(d == 0)), w_at_clip=float(np.mean(np.abs(d) >= 2)),
                   w_moved=int(np.count_nonzero(d)), w_l1=int(np.abs(d).sum()),
                   w_raw_abs_mean=float(np.abs(raw).mean()))
        if grad[1] is not None:
            db = upd.update_deltas(clipped, layer.bias_inv_s2, grad[1], np.arange(layer.channels))
            rb = upd.raw_deltas(clipped, layer.bias_inv_s2, grad[1], np.arange(layer.channels))
            row.update(b_zero=float(np.mean(db == 0)), b_moved=int(np.count_nonzero(db)),
                       b_raw_abs_mean=float(np.abs(rb).mean()))
        return row

    def stochastic_update(self, plan, layer, params, grad, eta_t):
        """The product's update with floor(x + u) for round-half-away (same coefficient and
        clip); in C: u from the step's PRNG stream, 16 bits, one add and a shift."""
        _, clipped, _, _ = self.coefficient(plan, layer, grad, eta_t)
        raw = upd.raw_deltas(clipped, layer.weight_inv_s2, grad[0], channel_of(layer))
        d = np.floor(raw.astype(np.float64) + self.rng.random(raw.shape)).astype(np.int64)
        w = params[layer.weights]
        params[layer.weights] = upd.apply_weights(w.reshape(-1), d).reshape(w.shape)
        if grad[1] is not None:
            rb = upd.raw_deltas(clipped, layer.bias_inv_s2, grad[1], np.arange(layer.channels))
            db = np.floor(rb.astype(np.float64) + self.rng.random(rb.shape)).astype(np.int64)
            params[layer.bias] = upd.apply_biases(params[layer.bias], db)


# ------------------------------------------------------------------------------ the run
def data_file(corruption: str, severity: int, data_seed: int) -> Path:
    import scale
    path = OUT / "data" / f"{corruption}-s{severity}-d{data_seed}.npz"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        scale.write_data(path, corruption, severity, data_seed, 64, MODEL, False)
    return path


def mean_loss_acc(graph, plan, params, x, y, chunk=200) -> tuple[float, float]:
    losses, correct = [], 0
    for k in range(0, len(x), chunk):
        s = simulator.validation_score(graph, plan, params, x[k:k + chunk], y[k:k + chunk])
        losses.append(s.loss)
        correct += s.correct
    return sum(losses) / 65536 / len(x), correct / len(x)


def zo_probe(graph, plan, params, xs, labels, t, queries, observer, ref_grads, mean_grads):
    """The estimator's gradients at these parameters and batch with Q = queries (same
    seeds, so the first 20 queries are the run's), not applied; cosines to the reference."""
    two = str(queries).endswith("t")  # "160t": two-sided, 160 pairs (320 forwards)
    probe_plan = training_plans(graph, replace(plan.config, queries=int(str(queries).rstrip("t")),
                                               two_sided=two))[0]
    probe_plan = replace(probe_plan, config=replace(probe_plan.config, lr=plan.config.lr))
    env = {graph.inputs[0]: xs}
    env.update(params)
    env = step_parts.forward(graph, env, 0, probe_plan.logits_op)
    clean = step_parts.losses_q16(probe_plan, env[probe_plan.logits], labels)
    observer.grads, observer.apply, observer.active = {}, False, True
    rows_before = len(observer.rows)
    try:
        layerwise.step(graph, probe_plan, dict(params), step_parts.StepBatch(
            xs, labels, env, clean, t, np.float32(plan.config.lr), 0, None))
    finally:
        del observer.rows[rows_before:]
        observer.apply, observer.active = True, False
    out = {}
    for layer in plan.layers:
        gw, gb = zo_in_lsb(graph, layer, observer.grads[layer.index])
        rw, rb = ref_grads[layer.index]
        out[layer.index] = (cosine(gw, rw), None if gb is None else cosine(gb, rb),
                            cosine(gw, mean_grads[layer.index][0]))
    return out


def reference_check(args) -> None:
    """Is the reference a descent direction of the INT8 graph itself? Per layer, at the
    model's parameters: the mean loss of --check-samples training samples after moving the
    layer's weights by round(2 g / max|g|) LSB against the reference gradient g of those
    samples, along it, and along a random sign pattern of the same size."""
    graph = load_model(MODEL)
    logits, _ = loss_head(graph)
    data = load_dataset(data_file(args.corruption, args.severity, args.data_seed), graph,
                        graph.tensor(logits).shape[-1])
    plan = training_plans(graph, TrainConfig(queries=args.queries, seed=args.seed))[0]
    params = simulator.initial_params(graph, plan)
    reference = Reference(graph, plan)
    x, y = data.x[:args.check_samples], data.y[:args.check_samples]
    grads = {layer.index: [0.0, 0.0] for layer in plan.layers}
    for k in range(len(x)):
        for i, (gw, _) in reference.gradients(params, x[k:k + 1], y[k:k + 1]).items():
            grads[i][0] = grads[i][0] + gw
    base, _ = mean_loss_acc(graph, plan, params, x, y)
    rng = np.random.default_rng(0)
    print(f"mean loss of {len(x)} training samples at the start: {base:.5f}")
    print("| layer | mode | weights moved | loss change against g | along g | random |")
    print("|---|---|---|---|---|---|")
    for layer in plan.layers:
        g = grads[layer.index][0]
        step = np.rint(2.0 * g / np.abs(g).max()).astype(np.int64)
        moved = int(np.count_nonzero(step))
        rand = rng.permutation(np.abs(step)) * rng.choice((-1, 1), step.size)
        out = []
        for delta in (-step, step, rand):
            p = dict(params)
            w = params[layer.weights]
            p[layer.weights] = np.clip(w.reshape(-1).astype(np.int64) + delta, -128, 127
                                       ).astype(np.int8).reshape(w.shape)
            out.append(mean_loss_acc(graph, plan, p, x, y)[0] - base)
        print(f"| {layer.index} | {layer.mode} | {moved} | {out[0]:+.5f} | {out[1]:+.5f} | "
              f"{out[2]:+.5f} |", flush=True)


def layer_table(graph, plan) -> list[dict]:
    rows = []
    for layer in plan.layers:
        rows.append(dict(layer=layer.index, op=layer.op_index, type=layer.op.type,
                         mode=layer.mode, weights=layer.weight_count, biases=layer.bias_count,
                         scales=layer.channels, d=layer.d, d_a=layer.output_count,
                         gscale=float(layer.gscale)))
    return rows


def run(args) -> Path:
    out = Path(args.out) if args.out else OUT / (
        f"{args.corruption}-s{args.severity}-d{args.data_seed}-seed{args.seed}"
        + (f"-q{args.queries}" if args.queries != 20 else "")
        + (f"-{args.estimator}" if args.estimator != "adaptive" else "")
        + ("-two-sided" if args.two_sided else "")
        + (f"-layers{args.layers}" if args.layers else "")
        + (f"-{args.variant}" if args.variant != "default" else ""))
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    graph = load_model(MODEL)
    logits, _ = loss_head(graph)
    data = load_dataset(data_file(args.corruption, args.severity, args.data_seed), graph,
                        graph.tensor(logits).shape[-1])
    config = runner.steps_for(TrainConfig(queries=args.queries, lr_auto=True, guard=True,
                                          seed=args.seed, estimator=args.estimator,
                                          two_sided=args.two_sided,
                                          layers=parse_layer_list(args.layers)),
                              1, len(data.x))
    plan = training_plans(graph, config)[0]
    params0 = simulator.initial_params(graph, plan)
    layers = layer_table(graph, plan)
    observer = Observer(graph, plan, args.variant, args.seed)
    layerwise.update_layer = observer  # the estimator's module calls it by this name
    reference = Reference(graph, plan)

    # (c) the lr trials, as runner.begin runs them (the observer applies the variant)
    x_val, y_val, schedule = runner._validation(data, plan)
    if args.lr == "auto":
        lr, scores = simulator.choose_lr(graph, plan, params0, data.x, data.y, x_val, y_val,
                                         schedule)
    else:  # a fixed eta, no trials
        lr, scores = float(np.float32(float(args.lr))), ()
    trials = [dict(eta=eta, steps=schedule.trial_steps, correct=s.correct,
                   loss=s.loss / 65536 / len(y_val)) for eta, s in zip(schedule.candidates,
                                                                    scores)]
    print(f"lr trials: {trials} -> {lr:g}", flush=True)
    plan = replace(plan, config=replace(plan.config, lr=lr))
    held = confirmation_records(len(data.x), schedule)
    guard = simulator.Guard(x_val, y_val, schedule, GuardState(lr), data.x[held],
                            data.y[held], params0)
    guard.baseline(graph, plan, params0)

    steps_rows, cos_rows, probes, evals = [], [], [], []
    original_step = simulator.train_step
    x_seen = data.x[:args.stop]
    y_seen = data.y[:args.stop]

    def evaluate(step, params):
        tl, ta = mean_loss_acc(graph, plan, params, x_seen, y_seen)
        vl, va = mean_loss_acc(graph, plan, params, x_val, y_val)
        el, ea = mean_loss_acc(graph, plan, params, data.x_test[:args.test],
                               data.y_test[:args.test])
        moved = []
        for layer in plan.layers:
            dw = params[layer.weights].astype(np.int64) - params0[layer.weights]
            db = (params[layer.bias].astype(np.int64) - params0[layer.bias]) if layer.bias \
                else np.zeros(0)
            moved.append(dict(layer=layer.index, w_changed=int(np.count_nonzero(dw)),
                              w_l1=int(np.abs(dw).sum()), b_changed=int(np.count_nonzero(db)),
                              b_l1=int(np.abs(db).sum())))
        row = dict(step=step, train_loss=tl, train_acc=ta, val_loss=vl, val_acc=va,
                   test_loss=el, test_acc=ea, moved=moved,
                   seconds=time.perf_counter() - start)
        evals.append(row)
        print(f"step {step}: train(seen {len(x_seen)}) loss {tl:.4f} acc {ta:.3f} | val loss "
              f"{vl:.4f} acc {va:.3f} | test loss {el:.4f} acc {ea:.3f} | "
              f"{sum(m['w_changed'] for m in moved)} weights changed | "
              f"{row['seconds']:.0f} s", flush=True)

    def instrumented_step(graph_, plan_, params, t, xs, labels, halvings=0, record=None):
        measure = t % args.reference_every == 0 or t in args.probe_steps
        if not measure:  # the update statistics only
            observer.grads, observer.step, observer.active = {}, t, True
            try:
                return original_step(graph_, plan_, params, t, xs, labels, halvings, record)
            finally:
                observer.active = False
        env = reference.env(params, xs)
        ref = reference.gradients(params, xs, labels, env)
        if t in args.probe_steps:
            row = dict(step=t, cos={})
            # the SGD noise floor: this sample's reference gradient against the mean one
            idx = np.arange(min(args.probe_samples, len(data.x)))
            mean_ref = {layer.index: [np.zeros(layer.weight_count), np.zeros(layer.channels)]
                        for layer in plan.layers}
            for k in idx:
                g = reference.gradients(params, data.x[k:k + 1], data.y[k:k + 1])
                for i, (gw, gb) in g.items():
                    mean_ref[i][0] += gw
                    mean_ref[i][1] += gb
            row["sample_vs_mean"] = {i: cosine(ref[i][0], mean_ref[i][0]) for i in ref}
            for q in args.probe_queries:
                cs = zo_probe(graph, plan_, params, xs, labels, t, q, observer, ref, mean_ref)
                row["cos"][q] = {i: c for i, c in cs.items()}
            probes.append(row)
            print(f"probe at step {t}: mean cosine over layers "
                  + ", ".join(f"Q={q}: {np.nanmean([c[0] for c in row['cos'][q].values()]):.4f}"
                              for q in args.probe_queries)
                  + f"; sample vs mean reference {np.nanmean(list(row['sample_vs_mean'].values())):.3f}"
                  f" ({time.perf_counter() - start:.0f} s)", flush=True)
        observer.grads, observer.step, observer.active = {}, t, True
        try:
            new, loss = original_step(graph_, plan_, params, t, xs, labels, halvings, record)
        finally:
            observer.active = False
        for layer in plan_.layers:
            if layer.index not in observer.grads:  # CH: no weight gradient to compare
                continue
            gw, gb = zo_in_lsb(graph, layer, observer.grads[layer.index])
            rw, rb = ref[layer.index]
            d = (new[layer.weights].astype(np.int64) - params[layer.weights]).ravel()
            cos_rows.append(dict(step=t, layer=layer.index, cos_w=cosine(gw, rw),
                                 cos_b=None if gb is None else cosine(gb, rb),
                                 cos_update=cosine(-d, rw)))
        return new, loss

    simulator.train_step = instrumented_step
    evaluate(0, params0)
    params = params0
    try:
        for t_rec, params in simulator.run(graph, plan, params0, data.x, data.y, 0, None,
                                           None, 0, guard):
            steps_rows.append(dict(step=t_rec.step, loss=t_rec.loss, lr=t_rec.lr,
                                   val_acc=t_rec.val_accuracy, event=t_rec.event,
                                   halvings=guard.state.halvings))
            if t_rec.step % args.eval_every == 0 or t_rec.step == args.stop:
                evaluate(t_rec.step, params)
                save(out, args, layers, trials, steps_rows, cos_rows, probes, evals,
                     observer.rows, start)
            if t_rec.step >= args.stop:
                break
    finally:
        simulator.train_step = original_step
        layerwise.update_layer = observer.original
    save(out, args, layers, trials, steps_rows, cos_rows, probes, evals, observer.rows, start)
    print(f"wall time {time.perf_counter() - start:.0f} s; {out}", flush=True)
    return out


def save(out, args, layers, trials, steps, cos_rows, probes, evals, update_rows, start):
    doc = dict(args={k: (sorted(v) if isinstance(v, set) else v) for k, v in vars(args).items()},
               layers=layers, lr_trials=trials,
               steps=steps, cosines=cos_rows, probes=probes, evals=evals,
               updates=update_rows, seconds=time.perf_counter() - start)
    tmp = out / "diagnosis.json.tmp"
    tmp.write_text(json.dumps(doc, default=_plain))
    tmp.replace(out / "diagnosis.json")


def _plain(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    raise TypeError(type(value))


# --------------------------------------------------------------------------- the report
def report(path: Path) -> None:
    import warnings
    warnings.simplefilter("ignore", RuntimeWarning)  # nan means of layers that never moved
    doc = json.loads((path / "diagnosis.json").read_text())
    layers = doc["layers"]
    size = {L["layer"]: L["weights"] for L in layers}
    cos = doc["cosines"]
    upd_rows = doc["updates"]
    steps = doc["steps"]
    last = steps[-1]["step"] if steps else 0
    print(f"# {path}: {last} steps, {doc['seconds']:.0f} s wall")
    print(f"lr trials: " + "; ".join(f"eta {t['eta']:g}: {t['correct']} correct, loss "
                                      f"{t['loss']:.4f}" for t in doc["lr_trials"]))
    events = [(s["step"], s["event"], s["halvings"]) for s in steps if s["event"]]
    print(f"guard events (step, event, halvings): {events}")
    lrs = [s["lr"] for s in steps]
    if lrs:
        print(f"eta at steps 1, {len(lrs)//2}, {len(lrs)}: {lrs[0]:.5f}, "
              f"{lrs[len(lrs)//2 - 1]:.5f}, {lrs[-1]:.5f}")
    print("\n## per layer (means over the run's steps)")
    print("| layer | type | mode | weights | biases | scales | d | cos(ZO, true) w | cos b | "
          "cos(applied int8 step, -true) | w updates = 0 | w at clip | clip scale | "
          "changed w (end) | L1 w | changed b | L1 b |")
    print("|" + "---|" * 17)
    end = doc["evals"][-1]["moved"] if doc["evals"] else []
    by = {}
    for r in cos:
        by.setdefault(r["layer"], []).append(r)
    ub = {}
    for r in upd_rows:
        ub.setdefault(r["layer"], []).append(r)
    totals = dict(w=0, b=0, s=0)
    for L in layers:
        i = L["layer"]
        rs, us = by.get(i, []), ub.get(i, [])
        cw = np.nanmean([r["cos_w"] for r in rs]) if rs else float("nan")
        cb = [r["cos_b"] for r in rs if r["cos_b"] is not None]
        cu = np.nanmean([r["cos_update"] for r in rs]) if rs else float("nan")
        zero = np.mean([u["w_zero"] for u in us]) if us else float("nan")
        clip = np.mean([u["w_at_clip"] for u in us]) if us else float("nan")
        scale = np.median([u["clip_scale"] for u in us]) if us else float("nan")
        m = next((m for m in end if m["layer"] == i), {})
        totals["w"] += L["weights"]
        totals["b"] += L["biases"]
        totals["s"] += L["scales"]
        print(f"| {i} | {L['type'].replace('_2D', '').replace('DEPTHWISE', 'DW')} | "
              f"{L['mode']} | {L['weights']} | {L['biases']} | {L['scales']} | {L['d']} | "
              f"{cw:.3f} | {np.nanmean(cb) if cb else float('nan'):.3f} | {cu:.3f} | "
              f"{100 * zero:.1f} % | {100 * clip:.2f} % | {scale:.3f} | "
              f"{m.get('w_changed', 0)} | {m.get('w_l1', 0)} | {m.get('b_changed', 0)} | "
              f"{m.get('b_l1', 0)} |")
    print(f"totals: {totals['w']} weights, {totals['b']} biases, {totals['s']} per-channel "
          "scales")
    print("\n## the same by group (weights-weighted shares; cosines: mean over layers)")
    print("| group | layers | weights | biases | cos w | cos applied step | w updates = 0 | "
          "layer updates clipped | weights changed by the end | mean abs change (LSB) of "
          "the weights | biases changed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    groups: dict = {}
    for L in layers:
        kind = "DW" if L["type"] == "DEPTHWISE_CONV_2D" else (
            "FC" if L["type"] == "FULLY_CONNECTED" else "CONV")
        groups.setdefault(f"{L['mode']} {kind}", []).append(L)
    for name, ls in sorted(groups.items()):
        ids = {L["layer"] for L in ls}
        rs = [r for r in cos if r["layer"] in ids]
        us = [u for u in upd_rows if u["layer"] in ids]
        w = sum(L["weights"] for L in ls)
        ms = [m for m in end if m["layer"] in ids]
        per_layer_cos = [np.nanmean([r["cos_w"] for r in by.get(i, [])]) for i in ids]
        per_layer_app = [np.nanmean([r["cos_update"] for r in by.get(i, [])]) for i in ids]
        zero = np.average([u["w_zero"] for u in us], weights=[size[u["layer"]]
                                                               for u in us]) if us else np.nan
        print(f"| {name} | {len(ls)} | {w} | {sum(L['biases'] for L in ls)} | "
              f"{np.nanmean(per_layer_cos):.3f} | {np.nanmean(per_layer_app):.3f} | "
              f"{100 * zero:.1f} % | "
              f"{100 * np.mean([u['clip_scale'] < 1 for u in us]) if us else np.nan:.1f} % | "
              f"{100 * sum(m['w_changed'] for m in ms) / w:.1f} % | "
              f"{sum(m['w_l1'] for m in ms) / w:.2f} | "
              f"{sum(m['b_changed'] for m in ms)} of {sum(L['biases'] for L in ls)} |")
    wz = np.average([u["w_zero"] for u in upd_rows],
                    weights=[size[u["layer"]] for u in upd_rows]) if upd_rows else float("nan")
    print(f"\nall layers, weighted by weights: {100 * wz:.1f} % of per-weight updates round "
          "to 0")
    clipped = np.mean([u["clip_scale"] < 1 for u in upd_rows]) if upd_rows else float("nan")
    print(f"layer updates scaled down by the clip: {100 * clipped:.1f} %")
    # over time
    print("\n## over the run (windows of steps)")
    print("| steps | batch loss | eta | mean cos w (all layers) | updates = 0 (weighted) | "
          "clipped layer updates |")
    print("|---|---|---|---|---|---|")
    width = max(1, last // 6)
    for a in range(0, last, width):
        b = a + width
        sl = [s for s in steps if a < s["step"] <= b]
        cw = [r["cos_w"] for r in cos if a <= r["step"] < b]
        us = [u for u in upd_rows if a <= u["step"] < b]
        if not sl:
            continue
        zw = np.average([u["w_zero"] for u in us], weights=[size[u["layer"]]
                                                           for u in us]) if us else np.nan
        print(f"| {a + 1}-{b} | {np.mean([s['loss'] for s in sl]):.3f} | "
              f"{sl[0]['lr']:.5f}-{sl[-1]['lr']:.5f} | {np.nanmean(cw):.4f} | "
              f"{100 * zw:.1f} % | {100 * np.mean([u['clip_scale'] < 1 for u in us]):.1f} % |")
    print("\n## training split (samples seen), validation, test")
    print("| step | train loss | train acc | val loss | val acc | test loss | test acc | "
          "changed weights | changed biases |")
    print("|---|---|---|---|---|---|---|---|---|")
    for e in doc["evals"]:
        print(f"| {e['step']} | {e['train_loss']:.4f} | {100 * e['train_acc']:.1f} | "
              f"{e['val_loss']:.4f} | {100 * e['val_acc']:.1f} | {e['test_loss']:.4f} | "
              f"{100 * e['test_acc']:.1f} | {sum(m['w_changed'] for m in e['moved'])} | "
              f"{sum(m['b_changed'] for m in e['moved'])} |")
    if doc["probes"]:
        qs = list(doc["probes"][0]["cos"].keys())
        print("\n## cosine(ZO, true) against Q, at the run's parameters and batch")
        print("| step | " + " | ".join(f"Q={q} (mean over layers)" for q in qs)
              + " | single-sample true vs mean true |")
        print("|---|" + "---|" * (len(qs) + 1))
        for p in doc["probes"]:
            vals = [np.nanmean([c[0] for c in p["cos"][q].values()]) for q in qs]
            print(f"| {p['step']} | " + " | ".join(f"{v:.4f}" for v in vals)
                  + f" | {np.nanmean(list(p['sample_vs_mean'].values())):.3f} |")
        print("\nthe same estimates against the mean true gradient of the first "
              f"{doc['args']['probe_samples']} training samples (what SGD follows on average):")
        print("| step | " + " | ".join(f"Q={q}" for q in qs) + " |")
        print("|---|" + "---|" * len(qs))
        for p in doc["probes"]:
            vals = [np.nanmean([c[2] for c in p["cos"][q].values()]) for q in qs]
            print(f"| {p['step']} | " + " | ".join(f"{v:.4f}" for v in vals) + " |")
        for mode in ("WP", "NP"):
            idx = [str(L["layer"]) for L in layers if L["mode"] == mode]
            vals = [np.nanmean([p["cos"][q][i][0] for p in doc["probes"] for i in idx])
                    for q in qs]
            print(f"{mode} layers ({len(idx)}), mean over probes: "
                  + ", ".join(f"Q={q}: {v:.4f}" for q, v in zip(qs, vals)))
        print("\nper layer, mean over probes:")
        print("| layer | mode | d | " + " | ".join(f"Q={q}" for q in qs) + " |")
        print("|---|---|---|" + "---|" * len(qs))
        for L in layers:
            i = str(L["layer"])
            vals = [np.nanmean([p["cos"][q][i][0] for p in doc["probes"]]) for q in qs]
            print(f"| {i} | {L['mode']} | {L['d']} | " + " | ".join(f"{v:.4f}" for v in vals)
                  + " |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corruption", default="contrast")
    p.add_argument("--severity", type=int, default=5)
    p.add_argument("--data-seed", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--queries", type=int, default=20)
    p.add_argument("--stop", type=int, default=300, help="steps to run (of the 900-step run)")
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--reference-every", type=int, default=1,
                   help="steps between reference gradients (cosines); 1: every step")
    p.add_argument("--test", type=int, default=1000, help="test images per evaluation")
    p.add_argument("--probe-steps", default="0,150,300",
                   help="steps at which the Q sweep and the noise floor are measured")
    p.add_argument("--probe-queries", default="20,80,320,1280,10t,160t",
                   help="Q of each probe; 'Kt': two-sided, K pairs (2K forwards)")
    p.add_argument("--probe-samples", type=int, default=64,
                   help="training samples for the mean reference gradient at a probe")
    p.add_argument("--estimator", default="adaptive", help="a candidate: e.g. np")
    p.add_argument("--two-sided", action="store_true",
                   help="a candidate: +z and -z per query (--queries pairs, twice the forwards)")
    p.add_argument("--layers", default="", help="a candidate: trainable layers, e.g. 9,12")
    p.add_argument("--lr", default="auto", help="auto (the default's trials) or a fixed eta")
    p.add_argument("--variant", choices=("default", "sr"), default="default")
    p.add_argument("--out")
    p.add_argument("--report", metavar="DIR", help="print the tables of a finished run")
    p.add_argument("--check-reference", action="store_true",
                   help="only: is the reference gradient a descent direction of the INT8 "
                        "graph (per layer, on --check-samples training samples)?")
    p.add_argument("--check-samples", type=int, default=64)
    args = p.parse_args(argv)
    if args.check_reference:
        reference_check(args)
        return 0
    if args.report:
        report(Path(args.report))
        return 0
    args.probe_steps = {int(s) for s in args.probe_steps.split(",") if s}
    args.probe_queries = [q if q.endswith("t") else int(q)
                          for q in args.probe_queries.split(",") if q]
    out = run(args)
    report(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
