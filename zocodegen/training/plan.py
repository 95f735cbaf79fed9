"""Model + TRAIN options -> what to train and how (pure): the trainable layers, WP or NP for
each, the host-precomputed scaling constants, where a partial forward restarts, and the loss
head. The simulator and the C generator both read this one plan, so they cannot disagree on
any of these choices. The rules are in docs/training.md."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..errors import UserError
from ..ir import Graph, Op
from ..ops.table import TRAINABLE_OP_TYPES, macs
from ..reference.softmax import log_softmax_params
from .backprop import head, largest_bp_layers, linear_multipliers
from .config import DEFAULT_BLOCKS, LAYERS_FIRST, TrainConfig
from .estimators import REGISTRY
from .plan_types import TrainableLayer, TrainingPlan
from .scales import SCALED_OP_TYPES


#: the cross-entropy's Q12.19 sum of exponentials fits int32 below 2^12 terms
MAX_CLASSES = 1 << 12


def producers(graph: Graph) -> dict[str, int]:
    return {name: k for k, op in enumerate(graph.ops) for name in op.outputs}


def crossing_tensors(graph: Graph, restart: int, stop: int) -> tuple[str, ...]:
    """Activations produced before op ``restart`` (or graph inputs) that ops
    ``restart..stop`` read: what must be restored to rerun the network from there."""
    made = producers(graph)
    names: list[str] = []
    for op in graph.ops[restart:stop + 1]:
        for name in op.inputs:
            if (name and not graph.tensor(name).is_constant and made.get(name, -1) < restart
                    and name not in names):
                names.append(name)
    return tuple(names)


def final_softmax(graph: Graph) -> Op | None:
    """The SOFTMAX / LOG_SOFTMAX whose output is the model's output 0: directly, or through
    a DEQUANTIZE (a float output) and, before it, a QUANTIZE that only requantizes the
    probabilities (an ONNX QDQ softmax's own output scale, 1/255, after TFLite's fixed
    1/256); None when the model ends otherwise."""
    made = producers(graph)
    name = graph.outputs[0]
    for kinds in (("DEQUANTIZE",), ("QUANTIZE",), ("SOFTMAX", "LOG_SOFTMAX")):
        op = graph.ops[made[name]] if name in made else None
        if op is not None and op.type in kinds:
            if op.type in ("SOFTMAX", "LOG_SOFTMAX"):
                return op
            name = op.inputs[0]
    return None


def loss_head(graph: Graph) -> tuple[str, int]:
    """(logits tensor, index of the op producing it): the int8 input of the final
    SOFTMAX/LOG_SOFTMAX (:func:`final_softmax`), else of the final DEQUANTIZE, else the int8
    output itself."""
    if len(graph.outputs) != 1:
        raise UserError(f"training needs a model with one output (a classifier); this one "
                        f"has {len(graph.outputs)}")
    made = producers(graph)
    softmax = final_softmax(graph)
    if softmax is not None:
        name = softmax.inputs[0]
    else:
        name = graph.outputs[0]
        last = graph.ops[made[name]] if name in made else None
        if last is not None and last.type == "DEQUANTIZE":
            name = last.inputs[0]
    t = graph.tensor(name)
    if np.dtype(t.dtype) != np.int8 or name not in made:
        raise UserError(f"the loss needs int8 logits; '{name}' is {np.dtype(t.dtype).name}")
    return name, made[name]


def _channels(graph: Graph, op: Op) -> tuple[int, int]:
    """(channels, channel_inner) of the op's weight layout."""
    shape = graph.tensor(op.inputs[1]).shape
    if op.type == "DEPTHWISE_CONV_2D":
        return shape[3], 1
    return shape[0], int(np.prod(shape[1:]))


def _inv_s2(graph: Graph, op: Op, mode: str, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """Quantization-aware scaling per channel, float64 -> float32 (docs/training.md):
    WP: 1/s^2 (weights), 1/(s_in s)^2 (biases), with s the layer's LARGEST weight scale, not
    the channel's own: the paper's QAS (Eq. 8, [55]) is per tensor, and with per-channel
    scales a near-dead channel (tiny s_c) would multiply its estimate, which is mostly the
    other channels' noise, by 1/s_c^2 (thousands of LSB per step: measured, it wrecks
    NP training of the digits CNN). NP additionally carries the exact chain factor
    s_in s_c / s_out from the output's int8 units to the parameters'."""
    s_in = np.float64(graph.tensor(op.inputs[0]).quant.scalar_scale)
    s_c = np.broadcast_to(graph.tensor(op.inputs[1]).quant.scale.astype(np.float64), (channels,))
    s_ref = s_c.max()
    w = np.full(channels, 1.0 / s_ref ** 2)
    b = np.full(channels, 1.0 / (s_in * s_ref) ** 2)
    if mode in ("NP", "CH", "BP"):
        chain = linear_multipliers(graph, op)  # s_in s_c / s_out
        w, b = w * chain, b * chain
    return w.astype(np.float32), b.astype(np.float32)


def trainable_ops(graph: Graph) -> tuple[int, ...]:
    return tuple(k for k, op in enumerate(graph.ops) if op.type in TRAINABLE_OP_TYPES)


#: --layers first: a step's queries cost at most this many whole forwards each. Six is
#: where test accuracy per device hour peaked on the scale model (docs/decisions/first-layers.md:
#: the first 3, 6 and 10 layers)
FIRST_LAYERS_FORWARDS = 6.0


def first_layers(graph: Graph) -> tuple[int, ...]:
    """The leading trainable layers a default run trains. A shift in what the sensor sees
    (light, contrast, noise, blur) is best undone in the first layers (surgical fine-tuning,
    Lee et al. 2023), and those are the layers whose queries cost most: a query of layer l
    re-runs the model from l to the loss. So: the first layers, as many as keep a step within
    FIRST_LAYERS_FORWARDS forwards a query (at least one; every layer of a small model)."""
    _, logits_op = loss_head(graph)
    ops = [k for k in trainable_ops(graph) if k <= logits_op]
    per_op = [macs(graph, op) for op in graph.ops[:logits_op + 1]]
    whole = max(sum(per_op), 1)
    chosen: list[int] = []
    spent = 0.0
    for i, k in enumerate(ops):
        spent += sum(per_op[k:]) / whole
        if chosen and spent > FIRST_LAYERS_FORWARDS:
            break
        chosen.append(i)
    return tuple(chosen)


def describe_layers(layers: tuple[int, ...], graph: Graph) -> str:
    """The trainable layers of a run, in one line a user can act on (``layers``: resolved;
    empty = every layer)."""
    ops = trainable_ops(graph)
    if not layers:
        return f"all {len(ops)} trainable layers"
    if layers == tuple(range(len(ops))):
        return (f"all {len(ops)} trainable layers (--layers first: a step of every layer costs "
                f"at most {FIRST_LAYERS_FORWARDS:g} forwards a query)")
    first, last = graph.ops[ops[layers[0]]].name, graph.ops[ops[layers[-1]]].name
    if layers != tuple(range(len(layers))):
        return f"{len(layers)} of {len(ops)} trainable layers ({first} .. {last})"
    return (f"the first {len(layers)} of {len(ops)} trainable layers ({layers[0]}-{layers[-1]}: "
            f"{first} .. {last}), where a shift in what the sensor sees is undone and each "
            "query costs the most; --layers all trains every layer")


def resolve_layers(graph: Graph, config: TrainConfig) -> TrainConfig:
    """``config`` with --layers first replaced by the layers it stands for."""
    if config.layers != LAYERS_FIRST:
        return config
    return replace(config, layers=first_layers(graph))


def _selected(graph: Graph, config: TrainConfig, count: int) -> list[int]:
    chosen = list(resolve_layers(graph, config).layers) or list(range(count))
    bad = [i for i in chosen if not 0 <= i < count]
    if bad:
        raise UserError(f"--layers {bad[0]} is out of range: the model has {count} trainable "
                        f"layers (0..{count - 1})")
    return chosen


def partition_blocks(sizes: list[int], blocks: int) -> list[tuple[int, int]]:
    """Split a sequence into at most ``blocks`` consecutive non-empty runs whose largest sum
    is as small as possible: [start, stop) per block. The sizes are parameter bytes, so the
    largest block sets the SRAM sparse training needs. Ties go to the earliest split."""
    n = len(sizes)
    k_max = min(blocks, n)
    prefix = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    inf = np.iinfo(np.int64).max
    # best[k][j]: smallest largest-block sum of sizes[:j] in k blocks; cut[k][j] its last start
    best = np.full((k_max + 1, n + 1), inf, dtype=np.int64)
    cut = np.zeros((k_max + 1, n + 1), dtype=np.int64)
    best[0][0] = 0
    for k in range(1, k_max + 1):
        for j in range(k, n + 1):
            for i in range(k - 1, j):
                if best[k - 1][i] == inf:
                    continue
                worst = max(best[k - 1][i], prefix[j] - prefix[i])
                if worst < best[k][j]:
                    best[k][j], cut[k][j] = worst, i
    bounds, j = [], n
    for k in range(k_max, 0, -1):
        bounds.append((int(cut[k][j]), j))
        j = int(cut[k][j])
    return bounds[::-1]


def _check_batch_one(graph: Graph) -> None:
    for name, t in graph.tensors.items():
        if not t.is_constant and (not t.shape or t.shape[0] != 1):
            raise UserError(f"training needs batch-1 activations; tensor '{name}' has shape "
                            f"{list(t.shape)}: export the model with batch size 1 (e.g. "
                            "torch.onnx.export with a [1, ...] example input)")


def _trains_scales(config: TrainConfig, op: Op, mode: str) -> bool:
    """--scales: a CH convolution trains its per-channel filter scales."""
    return config.scales and mode == "CH" and op.type in SCALED_OP_TYPES


def _layer_bytes(graph: Graph, op: Op, config: TrainConfig) -> int:
    """The SRAM a layer's trained copies take (TrainableLayer.parameter_bytes, before the
    plan): with --scales a CH layer's 12 bytes a channel too."""
    bias = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] else None
    weights, biases = graph.tensor(op.inputs[1]).size, graph.tensor(bias).size if bias else 0
    scaled = _trains_scales(config, op, REGISTRY[config.estimator].layer_mode(
        weights + biases, graph.tensor(op.outputs[0]).size))
    return weights + 4 * biases + (12 * _channels(graph, op)[0] if scaled else 0)


def _candidates(graph: Graph, config: TrainConfig) -> tuple[list[int], int]:
    """Trainable-layer indices the run trains by zeroth-order (before sparse blocks): the
    selected ones minus the back-propagated head; and the loss op."""
    _check_batch_one(graph)
    _, logits_op = loss_head(graph)
    all_ops = trainable_ops(graph)
    if not all_ops:
        raise UserError("the model has no CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED "
                        "layer to train")
    bp = set(bp_layer_indices(graph, config))
    return [i for i in _selected(graph, config, len(all_ops))
            if all_ops[i] <= logits_op and i not in bp], logits_op


def bp_layer_indices(graph: Graph, config: TrainConfig) -> list[int]:
    """--bp-layers C: the model's last C trainable layers (before the loss), trained by
    back-propagation in every run and every sparse block. Refuses a C whose head holds an
    op without a backward rule, naming the op and the largest C that works."""
    c = config.bp_layers
    if c == 0:
        return []
    _, logits_op = loss_head(graph)
    all_ops = trainable_ops(graph)
    usable = [i for i, k in enumerate(all_ops) if k <= logits_op]
    largest = largest_bp_layers(graph, all_ops, logits_op)
    if c > len(usable):
        raise UserError(f"--bp-layers {c}: the model has {len(usable)} trainable layers "
                        f"before its loss; the largest --bp-layers that works is {largest}")
    try:
        head(graph, all_ops[usable[-c]], logits_op)
    except UserError as e:
        raise UserError(f"--bp-layers {c}: back-propagation reaches {e}; the largest "
                        f"--bp-layers that works is {largest}") from None
    return usable[-c:]


def sparse_blocks(graph: Graph, config: TrainConfig) -> list[list[int]]:
    """Sparse mode's blocks: the selected trainable layers (indices into the model's
    trainable-layer list) in ``config.blocks`` consecutive groups of nearly equal
    parameter bytes (docs/training.md)."""
    chosen, _ = _candidates(graph, config)
    if not chosen:
        raise UserError(f"sparse training needs a zeroth-order layer to put in blocks, and "
                        f"--bp-layers {config.bp_layers} leaves none (the back-propagated "
                        "layers train in every block); use --train full or a smaller "
                        "--bp-layers")
    all_ops = trainable_ops(graph)
    sizes = [_layer_bytes(graph, graph.ops[all_ops[i]], config) for i in chosen]
    return [chosen[a:b] for a, b in partition_blocks(sizes, config.blocks)]


def check_blocks(graph: Graph, config: TrainConfig) -> None:
    """A --blocks N the user gave is built as asked or refused: every block holds at least
    one zeroth-order layer, so an N above their count would build fewer blocks than the
    manifest and run.json record (and --block K could name a block that does not exist)."""
    if config.mode != "sparse" or config.blocks < 1:  # full mode, or auto: resolved later
        return
    if config.blocks == DEFAULT_BLOCKS:  # the default is "up to 4": a small model gets fewer
        return
    layers = len(_candidates(graph, config)[0])
    if config.blocks > layers:
        raise UserError(f"--blocks {config.blocks}: sparse mode puts at least one of the "
                        f"{layers} layers it trains by zeroth-order in each block, so at most "
                        f"--blocks {layers}, or --blocks auto")


def training_plans(graph: Graph, config: TrainConfig) -> tuple[TrainingPlan, ...]:
    """The plans a build holds: one, or one per block when the device selects the block
    (sparse --block auto)."""
    if config.selects_block:
        return tuple(_plan(graph, replace(config, block=k), chosen)
                     for k, chosen in enumerate(sparse_blocks(graph, config)))
    return (training_plan(graph, config),)


def training_plan(graph: Graph, config: TrainConfig) -> TrainingPlan:
    """The plan of a run that trains a known set of layers (full, or sparse with a block)."""
    if config.selects_block:
        raise ValueError("sparse --block auto has one plan per block: use training_plans()")
    if config.mode != "sparse":
        return _plan(graph, config, _candidates(graph, config)[0])
    blocks = sparse_blocks(graph, config)
    if config.block >= len(blocks):
        raise UserError(f"--block {config.block}: only {len(blocks)} blocks of trainable "
                        "layers exist")
    return _plan(graph, config, blocks[config.block])


def _plan(graph: Graph, config: TrainConfig, chosen: list[int]) -> TrainingPlan:
    """The plan that trains trainable layers ``chosen`` (indices, forward order) by
    zeroth-order and the --bp-layers head by back-propagation."""
    logits, logits_op = loss_head(graph)
    all_ops = trainable_ops(graph)
    bp = bp_layer_indices(graph, config)
    n = config.batch
    # MeZO (two-point SPSA): Q L / 2 queries of two full forwards each = the Q L forwards a
    # layer-wise step spends
    estimator = REGISTRY[config.estimator]
    q = max(1, config.queries * len(chosen) // 2) if estimator.whole_model else config.queries
    sides = 2 if config.two_sided or estimator.halves_difference else 1
    rule = config.perturbation_rule
    split = _split_position(config, chosen)
    total_d = 0
    drafts = []
    for i in chosen + bp:
        k = all_ops[i]
        op = graph.ops[k]
        weights = graph.tensor(op.inputs[1])
        bias = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] else None
        bias_count = graph.tensor(bias).size if bias else 0
        channels, inner = _channels(graph, op)
        d_a = graph.tensor(op.outputs[0]).size
        mode = "BP" if i in bp else estimator.layer_mode(weights.size + bias_count, d_a)
        if mode == "CH" and not bias:
            raise UserError(f"--estimator {estimator.name} trains trainable layer {i}'s "
                            f"per-channel biases, and its {op.type} has none: leave it out "
                            f"with --layers, or pick another --estimator")
        total_d += weights.size if mode != "BP" else 0
        drafts.append((i, k, op, bias, weights.size, bias_count, d_a, channels, inner, mode))
    layers = []
    for position, (i, k, op, bias, w_count, b_count, d_a, channels, inner, mode) in enumerate(
            drafts):
        d = total_d if estimator.whole_model else {"WP": w_count, "INT8": w_count,
                                                   "CH": channels}.get(mode, d_a)
        q_layer = q
        if split:  # model-wise within each block: d of the block, P_1 or P_2 perturbations
            block = drafts[:split] if position < split else drafts[split:]
            d = sum(draft[4] for draft in block)
            q_layer = q if position < split else 2 * q * config.inner_queries
        gscale = np.float32(n * q_layer / (n * q_layer + d - 1) if config.gnorm_scaling
                            else 1.0)
        if mode == "BP":  # an exact gradient: coefficient eta gscale / (N Q) = eta / N
            gscale = np.float32(sides * q)
        if config.quant_scaling:
            w_s2, b_s2 = _inv_s2(graph, op, mode, channels)
        else:
            w_s2 = b_s2 = np.ones(channels, dtype=np.float32)
        layers.append(TrainableLayer(
            i, k, op, op.inputs[1], bias, w_count, b_count, d_a, channels, inner, mode, gscale,
            w_s2, b_s2, crossing_tensors(graph, k, logits_op),
            crossing_tensors(graph, k + 1, logits_op),
            rule.layer_shift(d) if mode in ("WP", "NP", "CH") else 0,
            _trains_scales(config, op, mode)))
    other = [f"{layer.index} ({layer.mode})" for layer in layers if layer.mode != "WP"]
    if config.record_scalars and other:
        raise UserError(f"--record-scalars: only weight-perturbation layers can be replayed "
                        f"from seeds and query sums; trainable layers {', '.join(other)} "
                        f"cannot: add --estimator wp and --bp-layers 0, or pick --layers")
    classes = graph.tensor(logits).shape[-1]
    if classes >= MAX_CLASSES:
        raise UserError(f"the loss's fixed-point softmax sums at most {MAX_CLASSES - 1} "
                        f"classes in int32; '{logits}' has {classes}")
    # split: 1 / (2 N P_2) for both blocks; block 1's 1 / (2 N P_1) and the mean over its
    # 2 P_s losses per side, 1 / (2 P_s), make the same number (P_2 = 2 P_1 P_s)
    q_last = 2 * q * config.inner_queries if split else q
    return TrainingPlan(config, tuple(layers), all_ops, logits, logits_op,
                        log_softmax_params(graph.tensor(logits).quant.scalar_scale), classes,
                        np.float32(1.0 / (sides * n * q_last)), q,
                        ((1 << 31) - 1) // (n * q_last),
                        head(graph, all_ops[bp[0]], logits_op) if bp else None,
                        split=split, block1_diff_limit=((1 << 31) - 1) // (n * q) if split else 0,
                        whole_model=estimator.whole_model, two_point=estimator.two_point)


def _split_position(config: TrainConfig, chosen: list[int]) -> int:
    """--estimator split: how many of the trained layers (trainable-layer indices, forward
    order) are in block 1; refuses a cutoff that leaves a block empty."""
    if config.estimator != "split":
        return 0
    if len(chosen) < 2:
        raise UserError("--estimator split needs at least two trained layers (one per block)")
    cutoff = chosen[-1] if config.cutoff is None else config.cutoff
    split = sum(1 for i in chosen if i < cutoff)
    if not 1 <= split < len(chosen) or cutoff not in chosen:
        raise UserError(f"--cutoff {cutoff} must be a trained layer after the first one: "
                        f"one of {', '.join(map(str, chosen[1:]))}")
    return split
