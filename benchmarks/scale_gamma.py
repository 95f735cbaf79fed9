"""Would the per-channel requantization scales help where the biases stop? (issue 48,
docs/scale.md section 19) A screen on the simulator only, before anything is built in C.

The default's CH layers (docs/training.md, "Per step") train each channel's bias by
perturbing every position of the channel's pre-activation z by the same xi_c = +-1 LSB.
The folded batch norm has a second per-channel term, the scale: the requantization
multiplier M_c (z - zp = M_c (acc + bias)). Scaling it by gamma_c moves z - zp by
(gamma_c - 1) (z - zp). This screen trains gamma_c beside the bias *in the same queries*
(so at the default's forwards): each query adds a second Rademacher xi'_c, drawn from the
same stream right after the bias's Q x C values (so the bias's own xi are unchanged),

    z + xi_c + round(xi'_c (z - zp) / 2^SHIFT)          (round half away, SHIFT = 5)

and estimates dL/du_c with u_c = A_c (gamma_c - 1), A_c = max(RMS of z - zp over the
channel's positions this step, 2^SHIFT): the perturbation moves u_c by about
xi'_c A_c / 2^SHIFT output LSB, so g_u = sum_q,n D_qn xi'_qnc 2^SHIFT / A_c. u_c then takes
the bias rule's step in output LSB per unit of gradient (eta_t g_i / (N Q) inv_s2[c]
2^-16 M_c: the same learning rate, the same trials, nothing tuned for it), and gamma_c
-= that step / A_c, clamped to [0.25, 4]. The simulator keeps gamma_c in float64 and
rebuilds M_c from the model's real multiplier times gamma_c (TFLite's QuantizeMultiplier),
so the numerics are those a device would get from a float32 shadow of gamma_c.

    .venv/bin/python benchmarks/scale_gamma.py --cell contrast --seed 1
    .venv/bin/python benchmarks/scale_gamma.py --cell fog --seed 2 --off   # the control
    .venv/bin/python benchmarks/scale_gamma.py --cell fog --severity 4 --data-seed 5 --step 0.25

Each run is exactly the F746's default run of scale_experiment.py's "sparse" method before
the product's own scales (``zocodegen simulate MODEL --data build/scale/data/CELL-s5-d0.npz
--epochs 1 --queries 20 --seed S --train sparse --no-scales``: block trials, --lr auto, the
guard) with the screen's scale group added (``--off``: without it). The product's
``--scales`` (docs/scale.md section 20) is this group in the form the C engine computes
(h(z) where this uses z). Nothing of the product changes:
the script wraps the layer-wise estimator's ``_layer_queries`` and ``_finish_layer`` and the
wavefront's forwards (to set each gamma'd layer's multipliers from the parameters the
forward is given) while it runs. Output: build/scale/gamma/CELL[-sS-dD]-seedS[-off|-stepF]/
(not committed); data: build/scale/data/CELL-sS-dD.npz, written when missing.
"""
from __future__ import annotations

import argparse
import functools
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(HERE), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import scale  # noqa: E402
from zocodegen.cli import main as cli_main  # noqa: E402
from zocodegen.numerics import per_channel_multipliers  # noqa: E402
from zocodegen.reference.common import output_range  # noqa: E402
from zocodegen.reference.conv import requant_params  # noqa: E402
from zocodegen.reference.fast import Linear, network  # noqa: E402
from zocodegen.training import wavefront  # noqa: E402
from zocodegen.training.estimators import layerwise  # noqa: E402
from zocodegen.training.prng import sample_seed  # noqa: E402
from zocodegen.training.step_parts import loss_differences  # noqa: E402
from zocodegen.training.update import step_coefficient  # noqa: E402

MODEL = ROOT / "tests" / "fixtures" / "scale_model.tflite"
SHIFT = 5
GAMMA_RANGE = (0.25, 4.0)


class ScaleGroup:
    """The gamma_c of every CH layer the run has perturbed, and their forwards' multipliers."""

    def __init__(self, step: float = 1.0) -> None:
        self.step = step  # gamma's step as a multiple of the bias rule's (in output LSB)
        self.op_of: dict[str, int] = {}  # params key -> op index
        self.base: dict[int, np.ndarray] = {}  # op index -> the model's real multipliers
        self.applied: dict[int, tuple] = {}  # op index -> (kernel, gamma) last set
        self.xi: dict[int, np.ndarray] = {}  # layer index -> this step's xi' (Q, N, C)

    @staticmethod
    def key(layer) -> str:
        return layer.weights + ":gamma"

    def real_multipliers(self, graph, k: int) -> np.ndarray:
        """Op k's per-channel real multipliers as the model has them (M_c = q 2^(e - 31))."""
        if k not in self.base:
            p = requant_params(graph, graph.ops[k])
            self.base[k] = p.multiplier.astype(np.float64) * 2.0 ** (p.shift - 31.0)
        return self.base[k]

    def sync(self, graph, env: dict) -> None:
        """Every gamma'd layer's multipliers from ``env``'s gamma (the model's when absent:
        the trials and the start run without them); an update replaces the array, so a
        kernel already holding this very array is left as it is."""
        net = network(graph)
        for name, k in self.op_of.items():
            kernel = net.kernel(k)
            assert isinstance(kernel, Linear), f"op {k} runs on the reference kernel"
            gamma = env.get(name)
            held = self.applied.get(k)  # kept alive, so `is` cannot match a reused id
            if held is not None and held[0] is kernel and held[1] is gamma:
                continue
            self.applied[k] = (kernel, gamma)
            real = self.real_multipliers(graph, k)
            real = real if gamma is None else real * gamma
            mult, shift = per_channel_multipliers(real)
            kernel.params = replace(kernel.params, multiplier=mult, shift=shift)

    def queries(self, original, graph, plan, layer, params, env, n, t):
        """A CH layer's query group with xi'_c's scale shift added to its nodes."""
        queries = original(graph, plan, layer, params, env, n, t)
        if layer.mode != "CH":
            return queries
        self.op_of[self.key(layer)] = layer.op_index
        q, width = plan.config.queries, layer.channels
        draws = np.stack([plan.perturbation.values(sample_seed(queries.seed, k), 2 * q * width,
                                                   layer.perturb_shift)
                          .reshape(2 * q, width) for k in range(n)], axis=1)
        assert np.array_equal(draws[:q], queries.perturbations)
        xs = draws[q:]
        self.xi[layer.index] = xs
        z, tiles = queries.z, layer.output_count // width
        centered = z[None] - graph.tensor(layer.output).quant.scalar_zero_point
        rel = centered * np.tile(xs, tiles).astype(np.int64)
        scale_shift = np.trunc(rel / float(1 << SHIFT) + 0.5 * np.sign(rel)).astype(np.int64)
        lo, hi = output_range(graph, layer.op)
        nodes = np.clip(z[None] + np.tile(queries.perturbations, tiles).astype(np.int64)
                        + scale_shift, lo, hi).astype(np.int8)
        group = wavefront.QueryGroup(layer.op_index, nodes=nodes.reshape(
            (-1,) + env[layer.output].shape[1:]))
        return replace(queries, group=group)

    def finish(self, original, graph, plan, queries, params, env, losses, clean, eta_t,
               halvings, record):
        """The product's update of the layer, then (CH) gamma's from the same losses."""
        original(graph, plan, queries, params, env, losses, clean, eta_t, halvings, record)
        layer = queries.layer
        if layer.mode != "CH":
            return
        diffs = loss_differences(plan, losses, clean)
        g = np.einsum("qn,qnc->c", diffs, self.xi.pop(layer.index).astype(np.int64))
        real = self.real_multipliers(graph, layer.op_index)
        coef = float(step_coefficient(eta_t, layer.gscale, plan.inv_nq))
        per_lsb = coef * layer.bias_inv_s2.astype(np.float64) / 65536.0 * real
        centered = (queries.z.reshape(-1, layer.channels)
                    - graph.tensor(layer.output).quant.scalar_zero_point).astype(np.float64)
        a = np.maximum(np.sqrt((centered ** 2).mean(axis=0)), float(1 << SHIFT))
        du = per_lsb * g.astype(np.float64) * (1 << SHIFT) / a
        gamma = params.get(self.key(layer), np.ones(layer.channels))
        params[self.key(layer)] = np.clip(gamma - self.step * du / a, *GAMMA_RANGE)


def install(group: ScaleGroup) -> None:
    """Wrap the estimator's two steps and the wavefront's forwards (this process only)."""
    layerwise._layer_queries = functools.partial(group.queries, layerwise._layer_queries)
    layerwise._finish_layer = functools.partial(group.finish, layerwise._finish_layer)
    for name, env_at in (("forward", 0), ("query_logits", 1), ("pre_activation", 1)):
        def synced(graph, *args, _original=getattr(wavefront, name), _at=env_at, **kwargs):
            group.sync(graph, args[_at])
            return _original(graph, *args, **kwargs)
        setattr(wavefront, name, synced)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cell", required=True, help="corruption")
    parser.add_argument("--severity", type=int, default=5)
    parser.add_argument("--data-seed", type=int, default=0,
                        help="the data's seed (the grid's: 0); data written when missing")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--off", action="store_true", help="the control: no scale group")
    parser.add_argument("--step", type=float, default=1.0,
                        help="gamma's step as a multiple of the bias rule's (default 1; 0 "
                             "perturbs gamma and never moves it: what the shared queries "
                             "cost the bias)")
    parser.add_argument("--root", type=Path, default=ROOT / "build" / "scale")
    args = parser.parse_args()
    cell = f"{args.cell}-s{args.severity}-d{args.data_seed}"
    data = args.root / "data" / f"{cell}.npz"
    if not data.is_file():
        data.parent.mkdir(parents=True, exist_ok=True)
        scale.write_data(data, args.cell, args.severity, args.data_seed, 64, MODEL, False)
    grid_cell = args.severity == 5 and args.data_seed == 0  # the names of the runs so far
    variant = "-off" if args.off else ("" if args.step == 1.0 else f"-step{args.step:g}")
    out = args.root / "gamma" / f"{args.cell if grid_cell else cell}-seed{args.seed}{variant}"
    if not args.off:
        install(ScaleGroup(args.step))
    return cli_main(["simulate", str(MODEL), "--data", str(data), "-o", str(out), "--force",
                     "--epochs", "1", "--queries", "20", "--seed", str(args.seed),
                     "--train", "sparse", "--no-scales"])  # the product's own scales: off


if __name__ == "__main__":
    sys.exit(main())
