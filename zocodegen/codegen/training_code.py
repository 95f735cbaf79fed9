"""Training plan + arena plan + layer code -> the data ``src/training.c`` is rendered from
(pure): trainable SRAM copies, one descriptor per trainable layer, the byte spans a partial
forward restores, and the buffer sizes the memory report lists."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ..formats.image import SECTOR_BYTES, checkpoint_slot_bytes
from ..ir import Graph
from ..planner import ArenaPlan, RamItem
from ..training.checkpoint import encoded_size
from ..training.config import DEFAULT_EPOCHS
from ..training.guard import (CONFIRM_Z2, FALLS_TO_ROLL_BACK, LR_CANDIDATES,
                              MIN_VAL_RECORDS, SHARE_DIVISOR)
from ..training.int8 import q16
from ..errors import UserError
from ..ops.table import OPS
from ..training.perturbation import MIN_UNIFORM_SHIFT, pool_values, rotating_shifts
from ..training import scales
from ..training.plan_types import TrainableLayer, TrainingPlan
from .layers.common import c_float
from .model_code import ModelCode
from .query_batch import BatchCode, BatchLayer, query_batch_code
from .training_head import HeadCode, head_code
from .training_regions import choose_groups, query_macs, recomputed_macs, slot_bytes

BUFFER_ALIGN = 8


@dataclass(frozen=True)
class Span:
    arena_offset: int
    bytes: int
    saved_offset: int


@dataclass(frozen=True)
class PerturbCode:
    """--perturbation / --distribution / --two-sided for zo_train_config.h and the flash
    tables of training.c (zo_perturb.h)."""

    source: str  # xorshift / pool / rotating
    source_text: str  # as the user wrote it
    size: int
    distribution: str
    max_magnitude: int
    node_shifts: tuple[int, ...]  # NP: the deltas h(z + delta) is precomputed for
    two_sided: bool
    pool: tuple[int, ...]  # pool:N's values (flash)
    cycle_shifts: tuple[int, ...]  # rotating + uniform: 256 shifts (flash)

    @property
    def stream_bytes(self) -> int:
        """sizeof(zo_perturb_stream) for this source (zo_perturb.h)."""
        if self.source == "pool":
            return 4
        if self.source == "rotating":
            return _align(self.size, 4) + 12
        return 8


def perturb_code(plan: TrainingPlan) -> PerturbCode:
    """The build's perturbation tables; refuses a plan whose uniform XORShift draws lack a
    layer's scale (a plan not made by training_plan(), e.g. edited through the API)."""
    rule = plan.perturbation
    kind, size = rule.source.kind, rule.source.size
    if rule.distribution == "uniform" and kind == "xorshift":
        for layer in plan.zo_layers:
            if not MIN_UNIFORM_SHIFT <= layer.perturb_shift <= 31:
                raise UserError(f"--distribution uniform: trainable layer {layer.index} "
                                f"('{layer.op.name}') has no scale in the plan's table "
                                f"(shift {layer.perturb_shift}); make the plan with "
                                "training_plan() so every layer gets one")
    pool = (tuple(int(v) for v in pool_values(rule.seed, size, rule.distribution))
            if kind == "pool" else ())
    shifts = (tuple(int(v) for v in rotating_shifts(size))
              if kind == "rotating" and rule.distribution == "uniform" else ())
    return PerturbCode(kind, str(rule.source), size or 1, rule.distribution,
                       rule.max_magnitude, plan.node_shifts, plan.config.two_sided, pool, shifts)


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
    defines: bool  # the first of the layer's entries (a BP head appears in every block)
    perturb_shift: int = 0  # --distribution uniform, XORShift: the layer's scale
    query_batch: BatchLayer | None = None  # --query-batch: where its batched queries go
    gradient_bytes: int = 0  # its gradient region (TrainingPlan.layer_gradient_bytes)
    # where its estimate's gradient region is: arena bytes no op from its restart op on
    # uses (the arena's tail may be extended for it), or None: the shared gradient buffer
    gradient_offset: int | None = None
    # its queries restart at this op from the saved activations (`restart`) of its restart
    # group's first layer (training_regions.py); its own op unless it recomputes
    restart_op: int = -1
    # slot 0 of its group's saved activations in the arena's storage and the bytes per
    # sample (training_regions.place_regions); None: split's static buffer
    saved_offset: int | None = None
    saved_stride: int = 0
    # --scales: its float32 filter scales as the model has them, and the input's and the
    # output's scale as double literals (the multipliers are rebuilt from them, zo_scales.c)
    model_scales: tuple[str, ...] = ()
    scale_in: str = ""
    scale_out: str = ""

    @property
    def scaled(self) -> bool:
        return bool(self.model_scales)

    @property
    def scale_count(self) -> int:
        return len(self.model_scales)

    @property
    def input_offset(self) -> str:
        return dict(self.geometry)["input_offset"]

    def shifted(self, delta: int, ram: str = "", suffix: str = ""
                ) -> tuple[tuple[str, str], ...]:
        """The kernel parameters with the output zero point moved by delta (NP: the kernel
        then writes h(z + delta)); a scaled layer's read its SRAM multipliers (in_ram)."""
        return tuple((k, str(int(v) + delta) if k == "output_offset" else v)
                     for k, v in self.in_ram(ram, suffix))

    def in_ram(self, ram: str, suffix: str) -> tuple[tuple[str, str], ...]:
        """The kernel parameters; a scaled layer's read the multipliers and shifts of its
        SRAM copies (``<ram>multiplier<suffix>``), and since a rebuilt shift can be >= 0 the
        fast kernels' right-shift-only form is off."""
        if not self.scaled:
            return self.geometry
        moved = {"multiplier": f"{ram}multiplier{suffix}", "shift": f"{ram}shift{suffix}",
                 "right_shift_only": "0"}
        return tuple((k, moved.get(k, v)) for k, v in self.geometry)

    @property
    def output_zero_point(self) -> str:
        return dict(self.geometry)["output_offset"]

    @property
    def act_min(self) -> str:
        return dict(self.geometry)["act_min"]

    @property
    def act_max(self) -> str:
        return dict(self.geometry)["act_max"]

    @property
    def parameter_bytes(self) -> int:
        return (_align(self.weight_count) + _align(4 * self.bias_count)
                + _align(4 * self.folded_count) + 3 * _align(4 * self.scale_count))

    @property
    def has_geometry(self) -> bool:
        """Its engine calls the kernel with its own parameters: NP's outer product, BP's,
        and WP's batched queries (single WP queries and INT8 run the model's layer, CH
        its shifted copies alone)."""
        return (self.mode in ("ZO_TRAIN_NP", "ZO_TRAIN_BP")
                or (self.mode == "ZO_TRAIN_WP" and bool(self.query_batch)))

    @property
    def geometry_use(self) -> str:
        return ("batched queries (one slot per call)" if self.mode == "ZO_TRAIN_WP"
                else self.mode.removeprefix("ZO_TRAIN_") + " outer product")

    @property
    def kernel_pointers(self) -> tuple[str, str]:
        """zo_train_layer's .conv and .fc: its parameters, as the kernel kind wants them."""
        return self._by_kind(f"&{self.symbol}_geometry" if self.has_geometry else None)

    @property
    def has_shifted(self) -> bool:
        """NP, CH: its parameters with the output offset moved (h(z + delta),
        zo_node_queries.c)."""
        return self.mode in ("ZO_TRAIN_NP", "ZO_TRAIN_CH")

    @property
    def shifted_pointers(self) -> tuple[str, str]:
        """.conv_shifted and .fc_shifted: NP's / CH's parameters with the output offset
        moved."""
        return self._by_kind(f"{self.symbol}_shifted" if self.has_shifted else None)

    def _by_kind(self, own: str | None) -> tuple[str, str]:
        """(conv slot, fc slot): ``own`` in the one its kernel kind reads, NULL elsewhere."""
        if own is None:
            return "NULL", "NULL"
        return ("NULL", own) if self.kind == "ZO_TRAIN_FC" else (own, "NULL")


@dataclass(frozen=True)
class GuardCode:
    """zo_guard_config of one zo_train_model (docs/training.md "Training guard")."""

    guard: bool
    lr_auto: bool
    every_given: int  # --guard-every, 0: from the forward budget (zo_guard.c, guard_schedule)
    forwards_per_step: int
    share_divisor: int
    samples: int
    min_samples: int
    falls_to_roll_back: int
    patience: int
    confirm_z2: int
    candidates: tuple[str, ...]


@dataclass(frozen=True)
class TrainingCode:
    layers: tuple[TrainLayerCode, ...]  # every layer any block trains, in forward order
    models: tuple[tuple[int, int], ...]  # (first layer, layer count) per zo_train_model
    selects_block: bool  # sparse --block auto: models are the blocks, selected by trials
    block: int | None  # sparse with a fixed block (or auto on a model of one block)
    trial_samples: int
    trial_held_out: int
    saved_stride: int
    gradient_words: int
    queries: int
    batch: int
    steps: int  # 0: epochs passes over the image's training records (counted on the device)
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
    head: HeadCode | None  # --bp-layers
    integer_only: bool  # --estimator int8: the engine's integer-only build
    r_max: int
    p_zero_q16: int  # -1: the paper's schedule
    b_zo: int
    b_bp: int
    perturb: PerturbCode
    query_batch: BatchCode | None  # --query-batch B > 1
    record_scalars: bool  # main.c sends each WP layer's query sums (zocodegen replay)
    split: int  # --estimator split: position of block 2's first layer (0: not split)
    inner_queries: int  # split: P_s
    block1_diff_limit: int
    blocks: int  # sparse: the run's number of blocks (resolved from --blocks auto)
    arena_tail: int = 0  # bytes added after the arena for the step's regions
    recomputed_macs: int = 0  # per step, by restart groups (training_regions.py)
    query_macs: int = 0  # per step, of the query forwards without recomputation
    epochs: int = DEFAULT_EPOCHS  # with steps 0: the passes over the image's records

    @property
    def channel(self) -> bool:
        """Some layer trains by channel-wise node perturbation (zo_estimate_ch.c)."""
        return any(layer.mode == "ZO_TRAIN_CH" for layer in self.layers)

    @property
    def scales(self) -> bool:
        """Some CH layer trains its filter scales too (--scales, zo_scales.c)."""
        return any(layer.scaled for layer in self.layers)

    @property
    def query_sum_count(self) -> int:
        """Q query sums, or split's P_1 + P_2."""
        return self.queries * (1 + 2 * self.inner_queries) if self.split else self.queries

    @property
    def largest_saved_bytes(self) -> int:
        """The largest restart group's saved activations, every sample's slot."""
        return self.batch * max((L.saved_stride for L in self.layers), default=0)

    @property
    def saved_slots(self) -> int:
        """One per sample, plus split's slot for the cutoff's inputs."""
        return self.batch + (1 if self.split else 0)

    def ram_items(self) -> list[RamItem]:
        """The training buffers, for placement and the memory report (docs/training.md)."""
        return [
            RamItem("trainable parameters", self.parameter_bytes,
                    "int8 weights + int32 biases (+ CONV_2D folded biases), SRAM copies"
                    + (f" of the largest of {len(self.models)} blocks (one in SRAM at a time)"
                       if self.selects_block else "")),
            RamItem("gradient buffer", 4 * self.gradient_words, self._gradient_description()),
            RamItem("saved activations",
                    self.saved_slots * self.saved_stride if self.split else 0,
                    "per sample: what a forward from the current layer reads; split: the "
                    "cutoff's inputs" if self.split else self._saved_description()),
            RamItem("training state", _align(4 * self.query_sum_count) + 2 * _align(4 * self.batch)
                    + (_align(2 * len(self.layers) * self.perturb.stream_bytes) if self.split
                       else 0),
                    "query loss sums, N clean losses and labels"
                    + ("; split: two perturbation streams per layer" if self.split else "")),
        ] + ([] if self.query_batch is None else [
            RamItem("query batch arena", self.query_batch.arena_bytes,
                    f"--query-batch {self.query_batch.batch}: {self.query_batch.batch}-wide "
                    f"activations of layers {self.query_batch.first_op}.."
                    f"{self.query_batch.last_op}")])


    def _saved_description(self) -> str:
        text = (f"none: each restart group's are in arena bytes dead during its estimate "
                f"(arena tail +{self.arena_tail} B)")
        recomputing = [L for L in self.layers if L.restart_op != L.op]
        if recomputing:
            share = self.recomputed_macs / self.query_macs if self.query_macs else 0.0
            verb = "layers restart" if len(recomputing) > 1 else "layer restarts"
            text += (f"; {len(recomputing)} {verb} from an earlier layer's (ops "
                     + ", ".join(f"{L.restart_op}..{L.op}" for L in recomputing)
                     + f"): +{self.recomputed_macs / 1e6:.2f} M MACs per step "
                     f"({100 * share:.2f} % of its query MACs)")
        return text

    def _gradient_description(self) -> str:
        in_arena = sum(1 for layer in self.layers if layer.gradient_offset is not None)
        if in_arena == len(self.layers):
            return (f"none: every layer's gradient region is in arena bytes dead during its "
                    f"estimate (arena tail +{self.arena_tail} B)")
        text = "largest per-layer need: NP node gradient / WP gradient + weight backup"
        if self.channel:
            text += " / CH channel gradient"
        if self.head:
            text += " / the BP head's activations and errors"
        if in_arena:
            text += (f"; {in_arena} of {len(self.layers)} layers use dead arena bytes "
                     f"instead (arena tail +{self.arena_tail} B)")
        return text

    @property
    def parameter_bytes(self) -> int:
        """SRAM of the trainable copies: every layer's, or (--block auto) the largest
        block's, since the blocks share one region."""
        return max(sum(layer.parameter_bytes for layer in self.layers[first:first + count])
                   for first, count in self.models)

    def block_layers(self, block: int) -> tuple[TrainLayerCode, ...]:
        first, count = self.models[block]
        return self.layers[first:first + count]

    def layer_index(self, block: int, op: int) -> int:
        """Index of the layer computing model op ``op`` in block ``block``'s layer table."""
        return next(i for i, layer in enumerate(self.block_layers(block)) if layer.op == op)


def _head_group(layers: list) -> list:
    """The back-propagated head's layers restart together from its first layer's saved
    activations (estimate_bp runs them all at once)."""
    out = list(layers)
    for i in range(1, len(out)):
        if (out[i].mode == "ZO_TRAIN_BP" and out[i - 1].mode == "ZO_TRAIN_BP"
                and out[i].block == out[i - 1].block):
            first = out[i - 1]
            out[i] = replace(out[i], restart_op=first.restart_op, restart=first.restart)
    return out


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


def _scale_fields(graph: Graph, layer: TrainableLayer) -> dict:
    """--scales: what the engine rebuilds a scaled layer's multipliers from."""
    if not layer.scaled:
        return {}
    op = layer.op
    return dict(model_scales=tuple(c_float(v) for v in scales.model_scales(graph, layer)),
                scale_in=repr(graph.tensor(op.inputs[0]).quant.scalar_scale),
                scale_out=repr(graph.tensor(op.outputs[0]).quant.scalar_scale))


def training_code(graph: Graph, arena: ArenaPlan, code: ModelCode,
                  plans: tuple[TrainingPlan, ...], recompute: str = "off",
                  fits: Callable[[TrainingCode], bool] = lambda training: True
                  ) -> TrainingCode:
    """One zo_train_model per plan (several only for --block auto, one per block).
    ``recompute`` and ``fits`` (does the build fit with this code?): the restart groups'
    choice and the regions' placement (training_regions.choose_groups)."""
    layers, models = [], []
    cfg = plans[0].config
    symbols: dict[int, str] = {}
    saved_offsets: dict[int, dict[str, int]] = {}
    for block, plan in enumerate(plans):
        models.append((len(layers), len(plan.layers)))
        for k, layer in enumerate(plan.layers):
            intervals, where = _spans(graph, arena, layer.crossing)
            saved_offsets[layer.op_index] = where
            next_op = (plan.layers[k + 1].op_index if k + 1 < len(plan.layers)
                       else layer.op_index)
            call = code.layers[layer.op_index].calls[0]
            symbol = call.args[1].rsplit("_weights", 1)[0]
            defines = layer.op_index not in symbols
            symbols[layer.op_index] = symbol
            layers.append(TrainLayerCode(
                symbol, code.layers[layer.op_index].function,
                code.layers[layer.op_index].op_name, OPS[layer.op.type].weights.train_kind,
                "ZO_TRAIN_" + layer.mode, layer.index, block, layer.op_index, next_op,
                layer.weight_count, layer.bias_count, layer.bias is not None,
                layer.channels, layer.channel_inner, c_float(layer.gscale),
                tuple(c_float(v) for v in layer.weight_inv_s2),
                tuple(c_float(v) for v in layer.bias_inv_s2),
                arena.offsets[layer.output], layer.output_count, where.get(layer.input, 0),
                tuple(Span(*iv) for iv in intervals), call.params_type, call.params,
                call.function, layer.channels if layer.op.type == "CONV_2D" else 0, defines,
                layer.perturb_shift, gradient_bytes=plan.layer_gradient_bytes(layer),
                restart_op=layer.op_index, **_scale_fields(graph, layer)))
    # the shared gradient buffer: split's backups of every layer (live the whole step), or
    # the BP head's region; each zeroth-order layer's own region is in the arena
    grad_words = 2  # at least one 8-byte unit: C has no empty arrays
    forwards = cfg.queries * (2 if cfg.two_sided else 1) * cfg.batch
    query_batch = query_batch_code(graph, code, plans, saved_offsets, len(plans) > 1)
    if query_batch is not None:  # before the groups: batched layers restart on their own
        layers = [replace(L, query_batch=query_batch.layer(L.op))
                  if L.mode in ("ZO_TRAIN_WP", "ZO_TRAIN_NP", "ZO_TRAIN_CH") else L
                  for L in layers]
    if plans[0].split:
        grad_words = plans[0].gradient_bytes() // 4
    else:
        layers = _head_group(layers)
    head = None
    if plans[0].head is not None:
        head = head_code(graph, arena, code, plans[0], symbols)
        grad_words = max(grad_words, head.words)
    grad_words += grad_words % 2  # whole 8-byte units, as the linker lays the buffers out
    for plan in plans:  # what the shared region must hold (the rest is in the arena)
        assert 4 * grad_words >= (plan.gradient_bytes() if plan.split
                                  else plan.backprop_bytes())
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
        guards = tuple(GuardCode(cfg.guard, cfg.lr_auto, cfg.guard_every,
                                 p.forwards_per_step, SHARE_DIVISOR, cfg.guard_samples,
                                 MIN_VAL_RECORDS,
                                 FALLS_TO_ROLL_BACK, cfg.patience, CONFIRM_Z2,
                                 tuple(c_float(np.float32(c)) for c in LR_CANDIDATES))
                       for p in plans)
    largest = max(encoded_size((layer.weight_count, layer.bias_count, layer.scale_count)
                               for layer in p.layers) for p in plans)
    training = TrainingCode(tuple(layers), tuple(models), len(plans) > 1, fixed,
                        cfg.trial_samples, cfg.trial_held_out, max(slot_bytes(L) for L in layers),
                        grad_words, cfg.queries, cfg.batch,
                        cfg.steps, cfg.seed, c_float(np.float32(cfg.lr)),
                        cfg.schedule == "cosine", c_float(plan.inv_nq), plan.diff_limit,
                        c_float(np.float32(cfg.max_step)),
                        plan.logits_op,
                        arena.offsets[plan.logits], plan.num_classes, loss,
                        arena.offsets[graph.inputs[0]], x.nbytes, guards,
                        checkpoint_slot_bytes(largest) // SECTOR_BYTES, head,
                        cfg.integer_only, cfg.r_max,
                        -1 if cfg.p_zero is None else q16(cfg.p_zero), cfg.b_zo, cfg.b_bp,
                        perturb_code(plan), query_batch, cfg.record_scalars, plan.split,
                        cfg.inner_queries, plan.block1_diff_limit, cfg.blocks)
    if plan.split:  # its regions live across layers: the static buffers
        return training

    placed, tail = choose_groups(graph, arena, layers, cfg.batch, forwards, plan.logits_op,
                                 recompute, lambda tail: fits(replace(training,
                                                                      arena_tail=tail)))
    return replace(training, layers=tuple(placed), arena_tail=tail,
                   recomputed_macs=recomputed_macs(graph, placed, forwards),
                   query_macs=query_macs(graph, placed, forwards, plan.logits_op))
