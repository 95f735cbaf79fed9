"""Training plan + arena plan + layer code -> the data ``src/training.c`` is rendered from
(pure): trainable SRAM copies, one descriptor per trainable layer, the byte spans a partial
forward restores, and the buffer sizes the memory report lists."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..host.image import SECTOR_BYTES, checkpoint_slot_bytes
from ..ir import Graph
from ..planner import ArenaPlan, RamItem
from ..training.checkpoint import encoded_size
from ..training.guard import MIN_VAL_RECORDS, guard_schedule
from ..training.plan import TrainingPlan
from .layers.common import c_float
from .model_code import ModelCode

KINDS = {"CONV_2D": "ZO_TRAIN_CONV", "DEPTHWISE_CONV_2D": "ZO_TRAIN_DEPTHWISE",
         "FULLY_CONNECTED": "ZO_TRAIN_FC"}
BUFFER_ALIGN = 8


@dataclass(frozen=True)
class Span:
    arena_offset: int
    bytes: int
    saved_offset: int


@dataclass(frozen=True)
class TrainLayerCode:
    symbol: str  # e.g. layer_03_conv_2d_1's op symbol: weights are <symbol>_weights
    function: str
    op_name: str
    kind: str
    mode: str
    seed_index: int
    block: int  # which of the build's zo_train_models (one per block with --block auto)
    op: int
    next_op: int
    weight_count: int
    bias_count: int
    has_bias: bool
    channels: int
    channel_inner: int
    gscale: str
    weight_inv_s2: tuple[str, ...]
    bias_inv_s2: tuple[str, ...]
    output_offset: int
    output_count: int
    input_saved_offset: int
    restart: tuple[Span, ...]
    geometry_type: str  # zo_conv_params / zo_fc_params
    geometry: tuple[tuple[str, str], ...]  # the layer's kernel parameters
    kernel: str  # the kernel function model.c calls for this layer
    folded_count: int  # CONV_2D: one folded bias per output channel (zo_conv.c); else 0

    @property
    def input_offset(self) -> str:
        return dict(self.geometry)["input_offset"]

    def shifted(self, delta: int) -> tuple[tuple[str, str], ...]:
        """The kernel parameters with the output zero point moved by delta (NP: the kernel
        then writes h(z + delta))."""
        return tuple((k, str(int(v) + delta) if k == "output_offset" else v)
                     for k, v in self.geometry)

    @property
    def parameter_bytes(self) -> int:
        return (_align(self.weight_count) + _align(4 * self.bias_count)
                + _align(4 * self.folded_count))


@dataclass(frozen=True)
class GuardCode:
    """zo_guard_config of one zo_train_model (docs/training.md "Training guard")."""

    guard: bool
    lr_auto: bool
    every: int
    samples: int
    min_samples: int
    trial_steps: int
    candidates: tuple[str, ...]


@dataclass(frozen=True)
class TrainingCode:
    layers: tuple[TrainLayerCode, ...]  # every layer any block trains, in forward order
    models: tuple[tuple[int, int], ...]  # (first layer, layer count) per zo_train_model
    selects_block: bool  # sparse --block auto: models are the blocks, selected by trials
    block: int | None  # sparse with a fixed block (or auto on a model of one block)
    trial_samples: int
    saved_stride: int
    gradient_words: int
    queries: int
    batch: int
    steps: int
    seed: int
    lr: str
    cosine: bool
    inv_nq: str
    diff_limit: int
    max_step: str
    logits_op: int
    logits_offset: int
    classes: int
    loss_params: tuple[tuple[str, str], ...]
    input_offset: int
    input_bytes: int
    guards: tuple[GuardCode, ...] | None  # per zo_train_model; None: no guard, fixed eta
    slot_sectors: int  # sectors of each of the checkpoint area's two slots

    def ram_items(self) -> list[RamItem]:
        """The training buffers, for placement and the memory report (docs/training.md)."""
        return [
            RamItem("trainable parameters", self.parameter_bytes,
                    "int8 weights + int32 biases (+ CONV_2D folded biases), SRAM copies"
                    + (f" of the largest of {len(self.models)} blocks (one in SRAM at a time)"
                       if self.selects_block else "")),
            RamItem("gradient buffer", 4 * self.gradient_words,
                    "largest per-layer need: NP node gradient / WP gradient + weight backup"),
            RamItem("saved activations", self.batch * self.saved_stride,
                    "per sample: what a forward from the current layer reads"),
            RamItem("training state", _align(4 * self.queries) + 2 * _align(4 * self.batch),
                    "Q query loss sums, N clean losses and labels"),
        ]


    @property
    def parameter_bytes(self) -> int:
        """SRAM of the trainable copies: every layer's, or (--block auto) the largest
        block's, since the blocks share one region."""
        return max(sum(layer.parameter_bytes for layer in self.layers[first:first + count])
                   for first, count in self.models)

    def block_layers(self, block: int) -> tuple[TrainLayerCode, ...]:
        first, count = self.models[block]
        return self.layers[first:first + count]


def _align(n: int, a: int = BUFFER_ALIGN) -> int:
    return (n + a - 1) // a * a


def _spans(graph: Graph, arena: ArenaPlan, names: tuple[str, ...]
           ) -> tuple[list[tuple[int, int]], dict[str, int]]:
    """Merged arena intervals of the tensors, and each tensor's offset in the saved copy."""
    ranges = sorted((arena.offsets[n], arena.offsets[n] + graph.tensor(n).nbytes)
                    for n in names)
    merged: list[list[int]] = []
    for lo, hi in ranges:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    where, pos, intervals = {}, 0, []
    for lo, hi in merged:
        intervals.append((lo, hi - lo, pos))
        pos += _align(hi - lo, 4)
    for n in names:
        off = arena.offsets[n]
        base = next(iv for iv in intervals if iv[0] <= off < iv[0] + iv[1])
        where[n] = base[2] + off - base[0]
    return intervals, where


def training_code(graph: Graph, arena: ArenaPlan, code: ModelCode,
                  plans: tuple[TrainingPlan, ...]) -> TrainingCode:
    """One zo_train_model per plan (several only for --block auto, one per block)."""
    layers, models, stride, grad_words = [], [], 0, 0
    cfg = plans[0].config
    for block, plan in enumerate(plans):
        models.append((len(layers), len(plan.layers)))
        for k, layer in enumerate(plan.layers):
            intervals, where = _spans(graph, arena, layer.crossing)
            stride = max(stride, sum(_align(iv[1], 4) for iv in intervals))
            next_op = (plan.layers[k + 1].op_index if k + 1 < len(plan.layers)
                       else layer.op_index)
            if layer.mode == "WP":
                words = layer.weight_count + (layer.weight_count + 3) // 4
            else:
                words = (layer.output_count + (2 * layer.output_count + 3) // 4
                         + (layer.d_w if cfg.batch > 1 else 0))
            grad_words = max(grad_words, words)
            call = code.layers[layer.op_index].calls[0]
            symbol = call.args[1].rsplit("_weights", 1)[0]
            layers.append(TrainLayerCode(
                symbol, code.layers[layer.op_index].function,
                code.layers[layer.op_index].op_name, KINDS[layer.op.type],
                "ZO_TRAIN_" + layer.mode, layer.index, block, layer.op_index, next_op,
                layer.weight_count, layer.bias_count, layer.bias is not None,
                layer.channels, layer.channel_inner, c_float(layer.gscale),
                tuple(c_float(v) for v in layer.weight_inv_s2),
                tuple(c_float(v) for v in layer.bias_inv_s2),
                arena.offsets[layer.output], layer.output_count, where.get(layer.input, 0),
                tuple(Span(*iv) for iv in intervals), call.params_type, call.params,
                call.function, layer.channels if layer.op.type == "CONV_2D" else 0))
        # what plan.gradient_bytes() counts, in words of the int32 region
        assert 4 * grad_words >= plan.gradient_bytes()
    plan = plans[0]
    lp = plan.loss_params
    loss = (("rows", "1"), ("depth", str(plan.num_classes)),
            ("input_multiplier", str(lp.input_multiplier)),
            ("input_left_shift", str(lp.input_left_shift)), ("diff_min", str(lp.diff_min)),
            ("reverse_scaling_divisor", str(lp.reverse_scaling_divisor)),
            ("reverse_scaling_right_shift", str(lp.reverse_scaling_right_shift)))
    x = graph.tensor(graph.inputs[0])
    fixed = cfg.block if cfg.mode == "sparse" and len(plans) == 1 else None
    guards = None
    if cfg.guard or cfg.lr_auto:
        guards = tuple(GuardCode(cfg.guard, cfg.lr_auto, g.every, g.samples, MIN_VAL_RECORDS,
                                 g.trial_steps, tuple(c_float(np.float32(c))
                                                      for c in g.candidates))
                       for g in map(guard_schedule, plans))
    largest = max(encoded_size((layer.weight_count, layer.bias_count) for layer in p.layers)
                  for p in plans)
    return TrainingCode(tuple(layers), tuple(models), len(plans) > 1, fixed, cfg.trial_samples,
                        _align(stride), grad_words, cfg.queries, cfg.batch,
                        cfg.steps, cfg.seed, c_float(np.float32(cfg.lr)),
                        cfg.schedule == "cosine", c_float(plan.inv_nq), plan.diff_limit,
                        c_float(np.float32(cfg.max_step)),
                        plan.logits_op,
                        arena.offsets[plan.logits], plan.num_classes, loss,
                        arena.offsets[graph.inputs[0]], x.nbytes, guards,
                        checkpoint_slot_bytes(largest) // SECTOR_BYTES)
