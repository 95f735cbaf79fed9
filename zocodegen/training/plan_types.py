"""What a training plan is (training/plan.py makes one): the trained layers and the run's
constants, read by the simulator's steps, the guard, replay and the C generator. Apart from
plan.py so that the steps (training/steps/) can name these types without importing the
estimator registry plan.py chooses from."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..ir import Op

if TYPE_CHECKING:
    from ..reference.softmax import LogSoftmaxParams
    from .backprop import Head
    from .config import TrainConfig
    from .perturbation import Perturbation


@dataclass(frozen=True)
class TrainableLayer:
    """One CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED whose int8 weights and int32 biases
    are trained. Weight j (IR layout, flattened) belongs to output channel
    ``(j // channel_inner) % channels``."""

    index: int  # i of the step seed S(t, i): position in the model's trainable-layer list
    op_index: int
    op: Op
    weights: str
    bias: str | None
    weight_count: int
    bias_count: int
    output_count: int  # d_a
    channels: int
    channel_inner: int
    # "WP", "NP", "CH" (channel-wise node perturbation: the per-channel biases only),
    # "INT8" (ElasticZO-INT8) or "BP" (back-propagation, --bp-layers)
    mode: str
    gscale: np.float32  # NQ / (NQ + d - 1); BP: Q, so that the coefficient is eta / N
    weight_inv_s2: np.ndarray  # float32 (channels,)
    bias_inv_s2: np.ndarray  # float32 (channels,)
    crossing: tuple[str, ...]  # activations a forward from op_index needs from before it
    node_crossing: tuple[str, ...]  # the same for a forward from op_index + 1 (NP queries)
    perturb_shift: int = 0  # --distribution uniform with XORShift: z = rdbpot(u, shift)
    # --scales: a CH layer also trains its per-channel filter scales (training/scales.py)
    scaled: bool = False

    @property
    def d_w(self) -> int:
        return self.weight_count + self.bias_count

    @property
    def d(self) -> int:
        """The dimension the layer's perturbation has (the d of the scaling rule). WP
        perturbs the weights only: a bias LSB (s_in * s_w) is far below a weight LSB, so a
        +-1 bias perturbation does not move the loss and its estimate would be pure noise
        (which 1/s_b^2 scaling then amplifies); biases are trained where NP is used."""
        if self.mode == "CH":
            return self.channels
        return self.weight_count if self.mode == "WP" else self.output_count

    @property
    def input(self) -> str:
        return self.op.inputs[0]

    @property
    def output(self) -> str:
        return self.op.outputs[0]

    @property
    def scale_count(self) -> int:
        """Its trained filter scales (--scales): one a channel, or none."""
        return self.channels if self.scaled else 0

    @property
    def parameter_bytes(self) -> int:
        """SRAM its trained copies take (unaligned): int8 weights, int32 biases, and with
        --scales a float32 scale, an int32 multiplier and an int32 shift per channel."""
        return self.weight_count + 4 * self.bias_count + (12 * self.channels if self.scaled
                                                          else 0)


@dataclass(frozen=True)
class TrainingPlan:
    config: TrainConfig
    layers: tuple[TrainableLayer, ...]  # the layers this run trains, in forward order
    all_trainable: tuple[int, ...]  # op indices of every trainable op of the model
    logits: str  # the loss reads this int8 tensor
    logits_op: int  # partial forwards stop after this op
    loss_params: LogSoftmaxParams
    num_classes: int
    inv_nq: np.float32  # 1 / (N Q) (one-sided) or 1 / (2 N Q) (two-point: MeZO, --two-sided)
    queries_per_step: int  # queries per layer (WP/NP) or per step (MeZO: two forwards each)
    diff_limit: int  # |loss difference| clamp, Q16: (2^31 - 1) // (N Q), int32-exact sums
    head: Head | None = None  # --bp-layers: the ops back-propagation runs through
    # the base seed of S(t, i) when it is not --seed: a loaded checkpoint's, which the device
    # adopts too (a fleet server gives each device its own); --seed still draws the pool
    run_seed: int | None = None
    # --estimator split: layers[:split] are block 1, layers[split:] block 2 (0: no split);
    # block 1's loss-difference clamp (diff_limit is block 2's)
    split: int = 0
    block1_diff_limit: int = 0
    # from the estimator's row (estimators/), which the plan is made from
    whole_model: bool = False  # one perturbation of every trained layer per query (MeZO)
    two_point: bool = False  # every query is two forwards, theta + z and theta - z

    def scalar_source(self, layer: TrainableLayer) -> tuple[int, int]:
        """Where a WP layer's query sums come from: (key, count). Its own Q sums, keyed by
        its index; with --estimator split its block's: the P_1 sums of block 1 (keyed by
        its first layer) or the P_2 of block 2 (keyed by the cutoff layer)."""
        if not self.split:
            return layer.index, self.config.queries
        cut = self.layers[self.split]
        if layer.index < cut.index:  # trained layers are in forward order
            return self.layers[0].index, self.config.queries
        return cut.index, self.inner_perturbations

    @property
    def scalar_layout(self) -> tuple[tuple[int, int], ...]:
        """The (key, count) of every scalar record of a step, in the order they are sent."""
        return tuple(dict.fromkeys(self.scalar_source(layer) for layer in self.layers))

    @property
    def inner_perturbations(self) -> int:
        """Split: P_2 = 2 P_1 P_s block-2 perturbations per step."""
        return 2 * self.config.queries * self.config.inner_queries

    @property
    def seed(self) -> int:
        return self.config.seed if self.run_seed is None else self.run_seed

    @property
    def zo_layers(self) -> tuple[TrainableLayer, ...]:
        return tuple(layer for layer in self.layers if layer.mode != "BP")

    @property
    def bp_layers(self) -> tuple[TrainableLayer, ...]:
        return tuple(layer for layer in self.layers if layer.mode == "BP")

    @property
    def forwards_per_step(self) -> int:
        """Query forwards (partial or full) per step: the budget methods are compared at."""
        n = self.config.batch
        if self.whole_model:
            return 2 * self.queries_per_step * n
        if self.split:  # 2 P_1 block-1 forwards, each followed by 2 P_s block-2 ones
            return 2 * self.config.queries * (1 + 2 * self.config.inner_queries) * n
        return self.sides * self.queries_per_step * len(self.zo_layers) * n

    @property
    def sides(self) -> int:
        """Forwards per query: 2 for the two-point estimates (theta + z and theta - z)."""
        return 2 if self.config.two_sided or self.two_point else 1

    @property
    def perturbation(self) -> Perturbation:
        return self.config.perturbation_rule

    @property
    def node_shifts(self) -> tuple[int, ...]:
        """The deltas NP precomputes h(z + delta) for: every value a draw can take (0 needs
        the clean h(z) once uniform perturbations can be 0)."""
        r = self.perturbation.max_magnitude
        return tuple(d for d in range(-r, r + 1) if d or r > 1)

    @property
    def parameter_bytes(self) -> int:
        return sum(layer.parameter_bytes for layer in self.layers)

    def layer_gradient_bytes(self, layer: TrainableLayer) -> int:
        """A zeroth-order layer's gradient region (docs/training.md), live from its first
        query to its update: WP holds an int32 gradient and a backup copy of the weights;
        NP an int32 node gradient of d_a and the int8 h(z + delta) of every node shift (plus
        an int32 weight-gradient accumulator when N > 1); INT8 Q generator states and the
        weight backup (G is rebuilt). 0 for back-propagated layers (the head's region)."""
        if layer.mode == "INT8":
            return 4 * self.config.queries + align4(layer.weight_count)
        if layer.mode == "WP":
            return 4 * layer.weight_count + align4(layer.weight_count)
        if layer.mode == "CH":  # the int32 channel gradient and h(z + delta) per shift;
            # --scales: the scales' int32 gradient and an int64 sum of squares per channel
            return (4 * layer.channels * (4 if layer.scaled else 1)
                    + align4(len(self.node_shifts) * layer.output_count))
        if layer.mode == "NP":
            return (4 * layer.output_count + align4(len(self.node_shifts) * layer.output_count)
                    + (4 * layer.d_w if self.config.batch > 1 else 0))
        return 0

    def gradient_bytes(self) -> int:
        """The one gradient region a build without arena placement would need: the largest
        layer's (``layer_gradient_bytes``), the BP head's, or split's."""
        if self.split:  # a backup of every trained weight; then one layer's int32 gradient
            return max(align4(sum(layer.weight_count for layer in self.layers)),
                       4 * max(layer.weight_count for layer in self.layers))
        return max([self.layer_gradient_bytes(layer) for layer in self.zo_layers]
                   + [self.backprop_bytes()])

    def backprop_bytes(self) -> int:
        """What back-propagation holds in the gradient region (paper Eq. 4): the head's int8
        activations, an int32 error per head tensor, and with N > 1 an int32 gradient
        accumulator per BP parameter. Sizes come from the plan's head (0 without one)."""
        if self.head is None:
            return 0
        total = sum(align4(size) for size in self.head.saved_bytes)
        total += 4 * (sum(self.head.error_counts) + self.head.scaled_count)
        if self.config.batch > 1 or self.config.integer_only:  # INT8 rounds the whole G
            total += 4 * sum(layer.d_w for layer in self.bp_layers)
        return total


def align4(n: int) -> int:
    return (n + 3) // 4 * 4
