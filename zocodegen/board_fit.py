"""`inspect MODEL --target BOARD`: can this model train on this board, and how fast?

Inference, full training and sparse training are planned exactly as `build` plans them (the
same fit search, ``codegen.fit.fit``, and memory plan), so a line that says a mode fits
is the build that fits. A training step's device seconds are estimated without QEMU from
the instructions each op costs (per MAC, per output element and per layer, by op family)
and what a step adds to its forwards (perturbations, NP's outer products, updates), each
measured under QEMU -icount (docs/training.md "Device time before a run"); `zocodegen
device-time RUN` measures a simulated run's instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .codegen.fit import fit, one_block_runs
from .codegen.project import BuildOptions, ProjectPlan, plan_project
from .codegen.training_code import TrainingCode
from .errors import UserError
from .ir import Graph, Op
from .ops.table import macs
from .summary import duration
from .target import Target, target_data
from .training.config import DEFAULT_BLOCKS, MODES, TrainConfig, layer_list_option
from .training.guard import CHECK_SHARE, LR_CANDIDATES, TRIAL_SHARE
from .training.plan import describe_layers, resolve_layers

#: Instructions of one op: its COUNTS priced by its family's FAMILY_COST, and what a training
#: step adds to its forwards (STEP_COSTS): per perturbed value and query (a WP weight, an NP
#: node or a CH channel: the draw, applying it, WP's restore), per NP layer MAC (the outer
#: product of the node gradient with the layer input, with the clipping pass), per trained
#: parameter (the update) and, with --scales, per output value a scale perturbation moves
#: in a query. Effective figures, fitted together (`benchmarks/inspect_costs.py fit`, data in
#: benchmarks/data/inspect_costs.json, measured 2026-12-02): every model of tests/fixtures
#: and ../shared/models and the tests' one-block models, one inference each and the steps
#: of each board's default run (and of the builds the step costs were first fitted on) at
#: Q = 20 and 50 under QEMU -icount; the costs nearest the per-layer fit (the profiling
#: build's counts, -DZO_PROFILE_LAYERS) whose largest relative error is within a point of
#: the least any costs reach.
COUNTS = ("MACs", "kernel taps", "output values", "input values", "op")
FAMILY_COST = {"CONV_2D 1x1": (1.073, 0.0, 16.94, 0.0, 1137.0),
               "CONV_2D kxk": (1.026, 0.05, 56.79, 0.0, 5701.0),
               "DEPTHWISE_CONV_2D": (2.063, 0.0, 7.94, 0.0, 2801.0),
               "DEPTHWISE_CONV_2D multiplier": (11.798, 0.0, 55.92, 0.0, 0.0),
               "FULLY_CONNECTED": (3.237, 0.0, 43.16, 0.0, 452.0),
               "ADD/MUL": (0.0, 0.0, 31.23, 0.0, 14772.0),
               "pooling": (0.0, 0.0, 0.0, 23.11, 1810.0),
               "softmax": (0.0, 0.0, 95.79, 0.0, 1709.0), "view": (0.0, 0.0, 0.0, 0.0, 22.0),
               "quantize": (0.0, 0.0, 40.81, 0.0, 0.0), "other": (0.0, 0.0, 26.83, 0.0, 0.0)}
STEP_COSTS = (9.3, 14.4, 82.7, 50.1)
#: How far an estimate may be from QEMU, as `inspect` states it: on the models recorded
#: (every recorded cell is within 5.8 %; tests/test_board_fit.py holds each to the bound;
#: docs/training.md "Device time before a run" has every cell), and on six models outside
#: the record, measured with `benchmarks/inspect_costs.py check` (VWW, the large CIFAR
#: ResNet, TFLite Micro's person detector and micro_speech, a public LeNet-5 and a CNN in
#: ONNX: within 3.6-6.1 % but LeNet-5's inference -11.6 %, and steps of micro_speech -13.8 %
#: and of the ResNet's sparse block -10.1 %). A kernel path no recorded model exercises is
#: priced by its family's average: `device-time` measures a model of one's own.
ESTIMATE_BOUND = 0.07
INFERENCE_BOUND = 0.07
OUTSIDE_RECORD_BOUND = 0.14
#: How `inspect` qualifies each estimate.
_ACCURACY = (f"estimated without QEMU: within {100 * max(ESTIMATE_BOUND, INFERENCE_BOUND):.0f}"
             f" % of QEMU on the models recorded, {100 * OUTSIDE_RECORD_BOUND:.0f} % on others")
#: Records a training epoch is quoted for: `inspect` sees no data.
EPOCH_RECORDS = 1000


#: Op types whose kernel copies or reinterprets values one by one, by family.
_SOFTMAX = ("SOFTMAX", "LOG_SOFTMAX")
_VIEWS = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS")
_QUANTIZE = ("QUANTIZE", "DEQUANTIZE")


def family(graph: Graph, op: Op) -> str:
    """The op family whose costs FAMILY_COST holds: a family is one kernel (a 1x1
    convolution and a depthwise convolution with a channel multiplier have their own)."""
    if op.type == "CONV_2D":
        kernel = graph.tensor(op.inputs[1]).shape  # OHWI
        return "CONV_2D 1x1" if tuple(kernel[1:3]) == (1, 1) else "CONV_2D kxk"
    if op.type == "DEPTHWISE_CONV_2D":
        multiplier = op.options.get("depth_multiplier", 1)
        return op.type if multiplier == 1 else "DEPTHWISE_CONV_2D multiplier"
    if op.type == "FULLY_CONNECTED":
        return op.type
    if op.type in ("ADD", "MUL"):
        return "ADD/MUL"
    if op.type in ("AVERAGE_POOL_2D", "MAX_POOL_2D", "MEAN"):
        return "pooling"
    for name, types in (("softmax", _SOFTMAX), ("view", _VIEWS), ("quantize", _QUANTIZE)):
        if op.type in types:
            return name
    return "other"


def op_counts(graph: Graph, op: Op) -> tuple[int, int, int, int, int]:
    """What an op's instructions are priced in (COUNTS): its MACs, the kernel taps of a
    k x k convolution (output values x kernel positions: the inner loop's setup per tap,
    which weighs where few input channels share it), its output and input values, and 1."""
    taps = 0
    if family(graph, op) == "CONV_2D kxk":
        kernel = graph.tensor(op.inputs[1]).shape
        taps = graph.tensor(op.outputs[0]).size * kernel[1] * kernel[2]
    return (macs(graph, op), taps, graph.tensor(op.outputs[0]).size,
            graph.tensor(op.inputs[0]).size, 1)


def op_instructions(graph: Graph, op: Op, costs: dict = FAMILY_COST) -> float:
    return sum(c * n for c, n in zip(costs[family(graph, op)], op_counts(graph, op)))


@dataclass(frozen=True)
class StepWork:
    """What one training step does, in the units inspect prices it in: its forwards (priced
    by op family) and the counts the PER_* constants price, kept apart so that
    benchmarks/inspect_costs.py can refit the constants against QEMU."""

    forwards: float  # instructions of every forward of the step, by FAMILY_COST
    perturbed: float  # perturbed values, summed over the queries
    outer_macs: float  # NP's outer products
    parameters: float  # trained parameters (the update)
    scaled: float  # --scales: output values a scale perturbation moves, summed over queries

    def counts(self) -> tuple[float, float, float, float]:
        """What STEP_COSTS prices, in its order."""
        return self.perturbed, self.outer_macs, self.parameters, self.scaled

    def instructions(self, costs: tuple[float, ...] = STEP_COSTS) -> float:
        return self.forwards + sum(c * n for c, n in zip(costs, self.counts()))


def step_work(graph: Graph, training: TrainingCode, model: int = 0,
              costs: dict = FAMILY_COST) -> StepWork:
    """One training step of ``training``'s model ``model`` (a sparse build's block): N clean
    forwards, per trained layer and query the forward from where its queries restart to the
    logits, and what the step adds to them."""
    ops = [op_instructions(graph, op, costs) for op in graph.ops]
    end = training.logits_op + 1
    queries = training.queries * (2 if training.perturb.two_sided else 1) * training.batch
    forwards = training.batch * sum(ops[:end])
    perturbed = outer = parameters = scaled = 0.0
    for layer in (L for L in training.layers if L.block == model):
        # NP and CH perturb the layer's output and restart from the next op, WP perturbs the
        # weights; a query costs a draw per perturbed value: CH draws one per channel and
        # picks each position's h(z + delta) from the shifted copies, which measures as
        # free beside the draws (tests/test_board_fit.py, the digits CNN)
        node = layer.mode in ("ZO_TRAIN_NP", "ZO_TRAIN_CH")
        own = layer.op + 1 if node else layer.op
        start = layer.restart_op if 0 <= layer.restart_op < layer.op else own
        forwards += queries * sum(ops[start:end])
        perturbed += queries * {"ZO_TRAIN_NP": layer.output_count,
                                "ZO_TRAIN_CH": layer.channels}.get(layer.mode,
                                                                   layer.weight_count)
        if layer.scaled:  # each query moves every output value by its channel's xi'
            scaled += queries * layer.output_count
        if node:  # h(z - 1), h(z + 1), once a step and sample
            forwards += training.batch * 2 * ops[layer.op]
        if layer.mode == "ZO_TRAIN_NP":  # the weights' outer product; CH trains no weights
            outer += training.batch * macs(graph, graph.ops[layer.op])
        parameters += layer.bias_count if layer.mode == "ZO_TRAIN_CH" else (
            layer.weight_count + layer.bias_count)
    return StepWork(forwards, perturbed, outer, parameters, scaled)


def step_instructions(graph: Graph, training: TrainingCode, model: int = 0) -> float:
    """Estimated instructions of one training step (step_work, priced)."""
    return step_work(graph, training, model).instructions()


def budget_steps(graph: Graph, training: TrainingCode, run: TrainConfig, board: str) -> int:
    """The steps a run of ``run.budget`` device seconds takes on ``board`` (``--budget``): as
    many as fit by the estimate of a step (the slowest block's, when --block auto chooses on
    the device), with what the run adds to its steps: --lr auto's trials (TRIAL_SHARE of the
    steps per candidate), the guard's checks (CHECK_SHARE of the forwards) and sparse
    --block auto's trials (one epoch of --trial-samples per block). The link's time is not
    counted (a field trainer has none; docs/training.md "Length of a run"). Computed once,
    at build time, into the build's steps: the simulator and the board run the same run."""
    step = [step_instructions(graph, training, k) / clock_hz(board)
            for k in range(len(training.models))]
    trials = (-(-run.trial_samples // run.batch) * sum(step)) if run.selects_block else 0.0
    share = 1.0 + (len(LR_CANDIDATES) * TRIAL_SHARE if run.lr_auto else 0.0) + (
        CHECK_SHARE if run.guard else 0.0)
    steps = math.floor((run.budget - trials) / (max(step) * share))
    if steps < 1:
        after = f", after {duration(trials)} of block trials" if trials else ""
        raise UserError(f"--budget {duration(run.budget)} is less than one training step on "
                        f"the {board} ({duration(max(step) * share)} with its trials and "
                        f"checks{after}): give a longer --budget")
    return min(steps, run.steps) if run.steps else steps


def resolve_budget(graph: Graph, options: BuildOptions) -> BuildOptions:
    """A build (or the simulated run of one) with --budget: its steps become budget_steps's,
    at most --steps. ``graph`` and ``options`` as the fit search left them."""
    run = options.train
    if run is None or not run.budget:
        return options
    plan = plan_project(graph, options)
    return replace(options, train=replace(run, steps=budget_steps(graph, plan.training, run,
                                                                  options.board)))


def clock_hz(board: str) -> float:
    return float(target_data(board)["clock_hz"])


@dataclass(frozen=True)
class ModeFit:
    """One build of the model for the board: inference, full or sparse training."""

    mode: str  # "inference", "full", "sparse"
    sram_bytes: int | None  # None: not planned (refused before memory, see ``note``)
    flash_data_bytes: int | None
    fits: bool
    option: str  # the build options of this line, e.g. "--train sparse --blocks 6"
    step_seconds: tuple[float, ...] = ()  # training: per model (a sparse build's blocks)
    note: str = ""
    # sparse: the build of one block (--block K), which --train auto does not pick; the
    # other blocks that fit alone, as (options, SRAM bytes)
    one_block: bool = False
    also: tuple[tuple[str, int], ...] = ()
    inference_seconds: float | None = None  # inference: one forward pass, estimated
    #: what the build places beside the budget, as (memory, bytes): the H7B3's DTCM
    outside: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class BoardFit:
    """`inspect --target`: each mode against the board, and the mode `--train auto` takes."""

    board: Target
    modes: tuple[ModeFit, ...]
    queries: int
    batch: int
    link_seconds: float  # one training record over the host link
    layers: str = ""  # which layers the run trains (plan.describe_layers)

    @property
    def chosen(self) -> ModeFit | None:
        """What `build --train auto` / `simulate --target` train: full, else sparse."""
        return next((m for m in self.modes if m.mode != "inference" and m.fits
                     and not m.one_block), None)

    @property
    def fitting(self) -> ModeFit | None:
        """The training that fits: --train auto's, else a build of one sparse block."""
        return self.chosen or next((m for m in self.modes if m.one_block and m.fits), None)

    def as_dict(self) -> dict:
        return {"target": self.board.name, "sram_budget_bytes": self.board.sram_budget_bytes,
                "flash_bytes": self.board.flash_bytes, "queries": self.queries, "layers": self.layers,
                "batch": self.batch, "train_auto": self.chosen.mode if self.chosen else None,
                "modes": [{"mode": m.mode, "sram_bytes": m.sram_bytes,
                           "flash_data_bytes": m.flash_data_bytes, "fits": m.fits,
                           "option": m.option, "step_seconds": list(m.step_seconds),
                           "note": m.note, "one_block": m.one_block,
                           "inference_seconds": m.inference_seconds,
                           "outside": [{"memory": r, "bytes": b} for r, b in m.outside],
                           "also": [{"option": o, "sram_bytes": b} for o, b in m.also]}
                          for m in self.modes]}


def _plan(graph: Graph, board: str, train: TrainConfig | None) -> ModeFit:
    """The build of ``train`` (None: inference) for ``board``, as `build` plans it; a sparse
    build that does not fit with the device choosing its block is followed by the builds of
    one block that do (fit.one_block_runs, what build's refusal suggests)."""
    mode = "inference" if train is None else train.mode
    try:
        device, options = fit(graph, BuildOptions("native", board, train,
                                                  estimator_fit=True))
        plan = plan_project(device, options)  # a native build reports, never refuses
    except UserError as exc:
        return ModeFit(mode, None, None, False, f"--train {mode}", note=str(exc))
    found = _mode_fit(device, plan, train)
    if mode != "sparse" or found.fits:
        return found
    runs = one_block_runs(device, options)
    if not runs:
        return found
    fits = [_mode_fit(device, plan_project(device, run), train) for run in runs]
    fits = [f for f in fits if f.fits]  # the plan of each, which the search only sized
    if not fits:
        return found
    return replace(fits[0], one_block=True,
                   also=tuple((f.option, f.sram_bytes) for f in fits[1:]))


def _mode_fit(device: Graph, plan: ProjectPlan, train: TrainConfig | None) -> ModeFit:
    """One line of ``plan``: its size, whether it fits, the options that build it."""
    mode = "inference" if train is None else train.mode
    option = ("--train none" if train is None
              else f"--train {mode}{layer_list_option(train.layers)}")
    seconds: tuple[float, ...] = ()
    board = plan.board.name
    if plan.training is not None:
        resolved = plan.options.train
        if resolved.mode == "sparse" and resolved.blocks != DEFAULT_BLOCKS:
            option += f" --blocks {resolved.blocks}"
        if resolved.block is not None:
            option += f" --block {resolved.block}"
        if resolved.bp_layers:
            option += f" --bp-layers {resolved.bp_layers}"
        if resolved.estimator != train.estimator:
            option += f" --estimator {resolved.estimator}"
        seconds = tuple(step_instructions(device, plan.training, k) / clock_hz(board)
                        for k in range(len(plan.training.models)))
    forward = (inference_instructions(device) / clock_hz(board) if train is None else None)
    return ModeFit(mode, plan.placement.total, plan.code.flash_bytes,
                   plan.placement.fits and plan.code.flash_bytes <= plan.board.flash_bytes,
                   option, seconds, inference_seconds=forward,
                   outside=plan.placement.outside)


def inference_instructions(graph: Graph, costs: dict = FAMILY_COST) -> float:
    """Estimated instructions of one inference: every op's FAMILY_COST (within
    INFERENCE_BOUND of QEMU on every model recorded)."""
    return sum(op_instructions(graph, op, costs) for op in graph.ops)


def board_fit(graph: Graph, board: Target, run: TrainConfig, link_seconds: float
              ) -> BoardFit:
    """Inference, full and sparse training of ``run`` (the command line's default run, its
    mode set per line) on ``board``."""
    modes = [_plan(graph, board.name, None)]
    modes += [_plan(graph, board.name, replace(run, mode=mode)) for mode in MODES]
    try:
        layers = describe_layers(resolve_layers(graph, run).layers, graph)
    except UserError:  # a model training refuses: each mode's line says why
        layers = ""
    return BoardFit(board, tuple(modes), run.queries, run.batch, link_seconds, layers)


def describe(found: BoardFit) -> list[str]:
    """The lines `inspect --target` prints first: the answer, then each mode."""
    board, chosen, one = found.board, found.chosen, found.fitting
    training = [m for m in found.modes if m.mode != "inference"]
    refused = chosen is None and all(m.sram_bytes is None for m in training) and len(
        {m.note for m in training}) == 1
    if chosen is None and one is not None:
        answer = (f"trains on the {board.name} as sparse training of one block: `build "
                  f"--target {board.name} {one.option}` ({one.sram_bytes / 1024:.1f} KB; "
                  f"give the same options to `simulate --target {board.name}`: `--train auto` "
                  "picks no single block)")
    elif refused:
        # every training mode refused for one reason: the model's, not the board's budget
        answer = f"training refuses this model: {training[0].note}"
    elif chosen is None and (short := _inference_short(found)):
        answer = (f"does not fit the {board.name}, not even inference: {short} (see below "
                  "for what needs how much)")
    elif chosen is None:
        answer = (f"training does not fit the {board.name}: neither full nor sparse "
                  "training (see below for what needs how much)")
    else:
        answer = (f"trains on the {board.name}: {chosen.mode} training fits "
                  f"(`build --target {board.name} {chosen.option}`; `--train auto` and "
                  f"`simulate --target {board.name}` pick it)")
    lines = [answer] + ([f"  trains   {found.layers}"] if found.layers and not refused else [])
    for m in found.modes:
        if m.sram_bytes is None:
            lines.append(f"  {m.mode:9} refused: {m.note}")
            continue
        verdict = "fits" if m.fits else "DOES NOT FIT"
        beside = "".join(f" (+ {size / 1024:.1f} KB in {memory} outside the budget)"
                         for memory, size in m.outside)
        lines.append(f"  {m.mode:9} SRAM {m.sram_bytes / 1024:7.1f} of "
                     f"{board.sram_budget_bytes / 1024:.1f} KB{beside}, flash data "
                     f"{m.flash_data_bytes / 1024:.1f} of {board.flash_bytes / 1024:.0f} KB: "
                     f"{verdict}" + (f" ({m.option})" if m.mode != "inference" else ""))
        if m.inference_seconds is not None:
            seconds = m.inference_seconds
            lines.append(f"            an inference about "
                         f"{f'{1000 * seconds:.1f} ms' if seconds < 1 else duration(seconds)} "
                         f"at {clock_hz(board.name) / 1e6:g} MHz ({_ACCURACY})")
        if m.also:
            lines.append("            other blocks that fit alone: " + ", ".join(
                f"{option} ({size / 1024:.1f} KB)" for option, size in m.also))
        if m.step_seconds:
            lines.append("            " + _step_line(found, m))
    return lines


def _inference_short(found: BoardFit) -> str:
    """What an inference build lacks on the board ("" when it fits): flash first, which no
    build option lowers (build refuses it, codegen/project.flash_message)."""
    m, board = found.modes[0], found.board
    if m.fits or m.sram_bytes is None:
        return ""
    if m.flash_data_bytes > board.flash_bytes:
        return (f"its weights and parameters need {m.flash_data_bytes / 1024:.1f} KB of "
                f"flash of {board.flash_bytes / 1024:.0f} KB")
    return (f"it needs {m.sram_bytes / 1024:.1f} KB of SRAM of "
            f"{board.sram_budget_bytes / 1024:.1f} KB")


def _step_line(found: BoardFit, m: ModeFit) -> str:
    """Estimated device time of a step and of an epoch of EPOCH_RECORDS records."""
    slowest = max(m.step_seconds)
    steps = -(-EPOCH_RECORDS // found.batch)
    epoch = steps * slowest + EPOCH_RECORDS * found.link_seconds
    blocks = (f" (blocks {', '.join(duration(s) for s in m.step_seconds)}; the device "
              "picks one)" if len(m.step_seconds) > 1 else "")
    return (f"a step at Q = {found.queries}, N = {found.batch}: about "
            f"{duration(slowest)}{blocks}; an epoch of {EPOCH_RECORDS:,} records about "
            f"{duration(epoch)} ({_ACCURACY}, docs/training.md)")
