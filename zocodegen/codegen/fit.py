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
from ..training.plan import (check_blocks, loss_head, resolve_layers, sparse_blocks,
                             trainable_ops)
from .host_inputs import host_quantizable, quantize_inputs_on_host
from .alternatives import MAX_SUGGESTED_BLOCKS, fewest_blocks, single_blocks
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

    # the fewest blocks that can hold block K: K + 1 (a --block beyond every partition is
    # refused by its own check once resolved)
    least = DEFAULT_BLOCKS if train.block is None else max(DEFAULT_BLOCKS, train.block + 1)
    default = replace(train, blocks=least)
    if train.blocks == BLOCKS_FIT and total(default) is not None:
        return replace(options, train=default)
    most = min(len(sparse_blocks(graph, replace(train, blocks=MAX_SUGGESTED_BLOCKS,
                                                block=None))), MAX_SUGGESTED_BLOCKS)
    first = 1 if train.block is None else train.block + 1
    chosen = fewest_blocks(train, total, first=first, last=most)
    if chosen is None and train.blocks == BLOCKS_FIT:
        return replace(options, train=default)  # nothing fits: refuse the default, naming why
    return replace(options, train=replace(train, blocks=chosen[0] if chosen else
                                          max(most, first)))


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
    return graph, resolve_run(graph, options)


def resolve_run(graph: Graph, options: BuildOptions) -> BuildOptions:
    """Every auto choice of the run (mode, estimator, --bp-layers, blocks) resolved for the
    board first, then the options that depend on them checked against that run: --block K
    is a block of the resolved partition (the one `simulate --target` announces), so
    giving it changes neither the blocks nor the estimator. Only when no build with the
    device choosing its block fits does the search look for one where block K fits."""
    train = options.train
    if train is None:
        return options
    train = resolve_layers(graph, train)
    options = replace(options, train=train)
    if train.block is None or (train.mode == "sparse" and train.blocks >= 1
                               and not options.estimator_fit):
        resolved = resolve_estimator(graph, options)
        check_sparse_options(train, resolved.train, _full_why(train, options.board))
        return resolved
    free = resolve_estimator(graph, replace(options, train=replace(train, block=None)))
    check_sparse_options(train, free.train, _full_why(train, options.board))
    if _placed_fits(graph, free):
        count = len(sparse_blocks(graph, free.train))
        if train.block >= count:
            raise UserError(f"--block {train.block}: the {options.board} run has {count} "
                            f"blocks ({_run_options(free.train)}), so --block must be in "
                            f"0..{count - 1} or auto")
        return replace(free, train=replace(free.train, block=train.block))
    return resolve_estimator(graph, options)  # a build of block K alone may fit


#: The options that choose among sparse mode's blocks, with their defaults (--blocks: not
#: given on the command line, or TrainConfig's own).
SPARSE_OPTIONS = (("--block", "block", (None,)),
                  ("--blocks", "blocks", (BLOCKS_FIT, DEFAULT_BLOCKS)),
                  ("--trial-samples", "trial_samples", (TrainConfig.trial_samples,)),
                  ("--trial-held-out", "trial_held_out", (TrainConfig.trial_held_out,)))


def check_sparse_options(given: TrainConfig, run: TrainConfig, why: str) -> None:
    """Options of sparse mode's blocks are refused when the resolved run is full training
    (``why``: --train auto picked it), since they would be silently ignored."""
    if run.mode == "sparse":
        return
    named = [option for option, field, defaults in SPARSE_OPTIONS
             if getattr(given, field) not in defaults]
    if named:
        raise UserError(f"{', '.join(named)} choose(s) among sparse mode's blocks, but {why}; "
                        f"add --train sparse or drop {', '.join(named)}")


def one_block_runs(graph: Graph, options: BuildOptions) -> list[BuildOptions]:
    """For a resolved sparse run that does not fit: the runs of one block that do
    (alternatives.single_blocks, the search build's refusal suggests), with the run's
    estimator, else the fallback's when --estimator was not given; latest block first."""
    train = options.train
    board = load_target(options.board)
    runs = [train]
    if options.estimator_fit and train.estimator != ESTIMATOR_FALLBACK:
        runs.append(replace(train, estimator=ESTIMATOR_FALLBACK, scales=False))
    for run in runs:
        arena = whole_arena(graph, run, in_place_convolutions=True)
        if found := single_blocks(graph, run, sram_total(graph, arena, board, options)):
            blocks, fitting = found
            return [replace(options, train=replace(run, blocks=blocks, block=k),
                            estimator_fit=False) for k, _ in reversed(fitting)]
    return []


def _full_why(given: TrainConfig, board: str) -> str:
    return (f"--train auto picked full training, which fits the {board}"
            if given.mode == MODE_AUTO else "the run is full training")


def _run_options(train: TrainConfig) -> str:
    """The options that give ``train``'s mode, blocks and estimator, as a build takes them."""
    return f"--train {train.mode} --blocks {train.blocks} --estimator {train.estimator}"


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
