"""The build's fit search (the first of its stages: fit, then render, then write): where
the input is quantized and every auto choice of a training run (--train, --bp-layers,
--blocks auto), each chosen by planning candidates for the board. `build`, `simulate
--target` and `inspect --target` take the run from ``fit``, so all three see one run."""
from __future__ import annotations

from dataclasses import replace

from ..errors import UserError
from ..ir import Graph
from ..planner import place
from ..target import load_target
from ..training.backprop import largest_bp_layers
from ..training.config import (BLOCKS_AUTO, BLOCKS_FIT, BP_AUTO, DEFAULT_BLOCKS,
                               ESTIMATOR_FALLBACK, MODE_AUTO, TrainConfig)
from ..training.plan import check_blocks, loss_head, sparse_blocks, trainable_ops
from .host_inputs import host_quantizable, quantize_inputs_on_host
from .alternatives import MAX_SUGGESTED_BLOCKS, fewest_blocks
from .project import (INPUT_QUANTIZE_MODES, BuildOptions, build_arena, layout, sram_total,
                      whole_arena)


def resolve_bp_layers(graph: Graph, options: BuildOptions) -> BuildOptions:
    """--bp-layers auto: the largest C that the head's backward rules allow and whose build
    fits the board's SRAM budget (0 when none does; the budget check then speaks)."""
    train = options.train
    if train is None or train.bp_layers != BP_AUTO:
        return options
    board = load_target(options.board)
    arena = whole_arena(graph, train, in_place_convolutions=True)
    _, logits_op = loss_head(graph)
    for c in range(largest_bp_layers(graph, trainable_ops(graph), logits_op), 0, -1):
        config = replace(train, bp_layers=c)
        try:
            _, _, items = layout(graph, arena, board, config, options.recompute,
                                 options.field)
        except UserError:  # e.g. sparse training with no zeroth-order layer left
            continue
        if place(items, board.name, board.sram_budget_bytes, strict=False).fits:
            return replace(options, train=config)
    return replace(options, train=replace(train, bp_layers=0))


def resolve_blocks(graph: Graph, options: BuildOptions) -> BuildOptions:
    """--blocks auto: sparse training in the fewest blocks (the most layers trained at once)
    whose build fits the board's SRAM budget; when none does, in as many blocks as there
    are layers (up to MAX_SUGGESTED_BLOCKS), and the budget check then names what does not
    fit. --blocks not given: DEFAULT_BLOCKS when they fit, else as auto. Full training does
    not use blocks."""
    train = options.train
    if train is None or train.blocks not in (BLOCKS_AUTO, BLOCKS_FIT):
        if train is not None:
            check_blocks(graph, train)
        return options
    if train.mode != "sparse":
        return replace(options, train=replace(train, blocks=DEFAULT_BLOCKS))
    board = load_target(options.board)
    arena = whole_arena(graph, train, in_place_convolutions=True)
    sram = sram_total(graph, arena, board, options)

    def total(config: TrainConfig) -> int | None:
        if config.block is not None and config.block >= len(sparse_blocks(graph, config)):
            return None
        return sram(config)

    default = replace(train, blocks=DEFAULT_BLOCKS)
    if train.blocks == BLOCKS_FIT and total(default) is not None:
        return replace(options, train=default)
    most = min(len(sparse_blocks(graph, replace(train, blocks=MAX_SUGGESTED_BLOCKS))),
               MAX_SUGGESTED_BLOCKS)
    chosen = fewest_blocks(train, total, last=most)
    if chosen is None and train.blocks == BLOCKS_FIT:
        return replace(options, train=default)  # nothing fits: refuse the default, naming why
    return replace(options, train=replace(train, blocks=chosen[0] if chosen else most))


def resolve_auto(graph: Graph, options: BuildOptions) -> BuildOptions:
    """The build's --train auto (full when that build fits the board, else sparse), then
    --bp-layers auto and --blocks auto, chosen for its board (the default blocks stay
    DEFAULT_BLOCKS when --bp-layers auto sizes the build)."""
    train = options.train
    if train is not None and train.mode == MODE_AUTO:
        full = resolve_auto(graph, replace(options, train=replace(train, mode="full")))
        if _placed_fits(graph, full):
            return full
        train = replace(train, mode="sparse")
        options = replace(options, train=train)
    if train is not None and train.bp_layers == BP_AUTO and train.blocks == BLOCKS_FIT:
        return resolve_bp_layers(graph, replace(options, train=replace(train,
                                                                       blocks=DEFAULT_BLOCKS)))
    return resolve_blocks(graph, resolve_bp_layers(graph, options))


def resolve_input_quantize(graph: Graph, options: BuildOptions) -> BuildOptions:
    """--input-quantize auto (the default): the float32 input is quantized on the device
    unless the build does not fit the board that way and does with the host quantizing it
    (a quarter of the input bytes); a model without a leading float QUANTIZE: device."""
    if options.input_quantize not in INPUT_QUANTIZE_MODES:
        raise UserError(f"--input-quantize {options.input_quantize}: choose one of "
                        f"{', '.join(INPUT_QUANTIZE_MODES)}")
    if options.input_quantize != "auto":
        return options
    device, host = (replace(options, input_quantize=mode) for mode in ("device", "host"))
    if not host_quantizable(graph) or _fits(graph, device) or not _fits(graph, host):
        return device
    return host


def fit(graph: Graph, options: BuildOptions) -> tuple[Graph, BuildOptions]:
    """The build's fit search, once: where the input is quantized, then every auto choice of
    the training run for the board. `build` and `simulate --target` both take the run from
    here, so the simulator trains exactly what the board gets."""
    options = resolve_input_quantize(graph, options)
    graph = device_graph(graph, options)
    return graph, resolve_estimator(graph, options)


def resolve_estimator(graph: Graph, options: BuildOptions) -> BuildOptions:
    """Every auto choice for the run's estimator; with --estimator not given and no build of
    it that fits the board, the same choices for ESTIMATOR_FALLBACK when that one fits (the
    budget check of the first otherwise speaks)."""
    resolved = resolve_auto(graph, options)
    train = options.train
    if (not options.estimator_fit or train is None or train.estimator == ESTIMATOR_FALLBACK
            or _placed_fits(graph, resolved)):
        return resolved
    try:
        fallback = resolve_auto(graph, replace(options, train=replace(  # no CH, no scales
            train, estimator=ESTIMATOR_FALLBACK, scales=False)))
    except UserError:  # an option of the run that the fallback refuses: the first speaks
        return resolved
    return fallback if _placed_fits(graph, fallback) else resolved


def _fits(graph: Graph, options: BuildOptions) -> bool:
    """Whether the build of ``options`` (input placement resolved) fits its board."""
    try:
        graph = device_graph(graph, options)
        return _placed_fits(graph, resolve_auto(graph, options))
    except UserError:  # the build itself refuses: plan_project says why
        return False


def _placed_fits(graph: Graph, options: BuildOptions) -> bool:
    """Whether the build of ``options`` (every auto choice resolved) fits its board."""
    try:
        board = load_target(options.board)
        arena = build_arena(graph, options, board)
        _, _, items = layout(graph, arena, board, options.train, options.recompute,
                             options.field)
    except UserError:  # the build itself refuses: plan_project says why
        return False
    return place(items, board.name, board.sram_budget_bytes, strict=False).fits


def device_graph(graph: Graph, options: BuildOptions) -> Graph:
    """The graph the device runs: the model, or with --input-quantize host (or auto choosing
    it) the model without its leading QUANTIZE ops."""
    options = resolve_input_quantize(graph, options)
    return quantize_inputs_on_host(graph) if options.input_quantize == "host" else graph
