"""The one definition of a training run: the TRAIN options of DESIGN.md section 8, their
defaults and ranges, validated once. `build --train`, `simulate`, `device-time`, the Python
API and the build manifest all read them from here (the command line's defaults are these
fields' defaults), so the host's default run is the board's (issue 49)."""
from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass, fields

from ..errors import UserError
from .estimators import NAMES as ESTIMATORS
from .estimators import REGISTRY
from ..limits import MAX_LR, MAX_SAMPLES_TIMES_QUERIES, MIN_LR, TRAIN_INTEGERS
from .guard import PATIENCE_CHECKS
from .perturbation import DISTRIBUTIONS, Perturbation, parse_source

SCHEDULES = ("cosine", "constant")
MODES = ("full", "sparse")
#: --train auto: full training when its build fits the board, else sparse; the build's fit
#: search (codegen/fit.py resolve_auto) resolves it before anything is planned
MODE_AUTO = "auto"
BP_AUTO = -1  # --bp-layers auto, before the build resolves it
#: --layers first (the command line's default), before the run is resolved for the model:
#: the leading layers plan.first_layers picks (docs/decisions/first-layers.md)
LAYERS_FIRST: tuple[int, ...] = (-1,)
#: The command line's queries per layer and step (TrainConfig keeps the paper's 50): with
#: --layers first, Q = 20 reached 65 % of the FP32 gain soonest in device hours, where Q = 10
#: led --lr auto to a smaller eta and learned half as much (docs/decisions/first-layers.md)
COMMAND_LINE_QUERIES = 20
BLOCKS_AUTO = -1  # --blocks auto, before the build resolves it
DEFAULT_BLOCKS = 4
# --blocks not given: DEFAULT_BLOCKS when they fit the board, else as auto (issue 36: a
# default never refuses where a documented choice fits); resolved by the build
BLOCKS_FIT = -2
#: --estimator not given: CH on the per-channel biases where adaptive uses WP, NP elsewhere
#: (docs/decisions/np-channel-default.md)
DEFAULT_ESTIMATOR = "np-channel"
#: What a build takes when the default estimator's does not fit its board and --estimator was
#: not given: adaptive keeps a copy of a WP layer's weights where np-channel's CH layers keep
#: two shifted copies of their outputs (docs/memory.md)
ESTIMATOR_FALLBACK = "adaptive"
#: The command line trains CH layers' filter scales (--scales) unless --no-scales, where they
#: apply (scales_apply); TrainConfig() itself leaves them off, as it leaves the guard
SCALES_BY_DEFAULT = True
#: --steps not given: this many passes over the training records, counted where the data is
#: (the simulator's data, the device's image); the guard's stop may end the run earlier
#: (docs/decisions/epochs-and-schedule.md: one epoch with cosine decay)
DEFAULT_EPOCHS = 1


def scales_apply(estimator: str, distribution: str, query_batch: int) -> bool:
    """Whether --scales can go with these options: an estimator with CH layers, +-1
    perturbations, one query forward at a time (TrainConfig refuses it otherwise)."""
    return ("zo_estimate_ch.c" in REGISTRY[estimator].sources and distribution == "rademacher"
            and query_batch == 1)


@dataclass(frozen=True)
class TrainConfig:
    """One training run. ``steps`` is the total number of optimisation steps T (the cosine
    schedule decays over it); ``layers`` are indices into the model's trainable-layer list
    (every CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED in order), empty = all of them."""

    steps: int = 0  # T; 0: DEFAULT_EPOCHS passes over the training records (run_steps)
    queries: int = 50  # the paper's on-device Q, on the host too (DESIGN.md said 100 there)
    batch: int = 1
    lr: float = 0.01
    schedule: str = "cosine"
    seed: int = 1
    estimator: str = DEFAULT_ESTIMATOR
    max_step: float = 2.0  # update clipping: no weight moves more than this many LSB a step
    gnorm_scaling: bool = True  # g_i = NQ / (NQ + d - 1), paper Eq. 8
    quant_scaling: bool = True  # 1 / s_c^2 (and NP's chain factor), paper Eq. 8
    layers: tuple[int, ...] = ()  # LAYERS_FIRST: the command line's default, resolved by
    # plan.first_layers for the model before anything else reads it
    bp_layers: int = 0  # the model's last C trainable layers by back-propagation (ElasticZO);
    # BP_AUTO: the build picks the largest C that fits the board (resolve_bp_layers)
    mode: str = "full"
    # --estimator int8 (ElasticZO-INT8, training/int8.py): perturbation range, sparsity
    # (None: the paper's schedule), bits of the ZO and the BP update; estimators/int8.py's
    # Int8Options owns and checks them (as SplitOptions does cutoff and inner_queries)
    r_max: int = 7
    p_zero: float | None = None
    b_zo: int = 1
    b_bp: int = 1
    # PeZO (training/perturbation.py): where the random numbers come from and their
    # distribution; P-RGE's inner loop: +z and -z per query (WP / NP)
    perturbation: str = "xorshift"
    distribution: str = "rademacher"
    two_sided: bool = False
    # CH layers also train their per-channel filter scales in the same queries (scales.py);
    # the bare algorithm leaves them off, the CLI turns them on where they apply
    scales: bool = False
    query_batch: int = 1  # P-RGE's outer loop: forwards evaluated together (device only)
    record_scalars: bool = False  # the device sends each WP layer's query sums (replay.py)
    # --estimator split (FedSPZO's split perturbation, docs/training.md): block 2 starts at
    # trainable layer ``cutoff`` (None: the last trained layer); P_s inner perturbations
    cutoff: int | None = None
    inner_queries: int = 2
    blocks: int = DEFAULT_BLOCKS  # BLOCKS_AUTO / BLOCKS_FIT: resolved for the board
    block: int | None = None  # sparse: the block to train; None = select it on the device
    trial_samples: int = 64  # sparse --block auto: the records each block's trial trains on
    # sparse --block auto: the last H training records score the trials
    # (docs/decisions/block-trials.md: 64 records could not see a 7-point gain)
    trial_held_out: int = 256
    # The bare algorithm by default; the CLI turns both on (docs/training.md "Training guard")
    lr_auto: bool = False  # --lr auto: short trials on the device pick eta
    guard: bool = False  # validation checks, keep the best, roll back and halve eta on a fall
    guard_every: int = 0  # K steps between checks; 0: from the forward budget
    guard_samples: int = 128  # validation records a check uses (at most)
    # the guard ends the run after this many checks without a new best (0: never)
    patience: int = PATIENCE_CHECKS
    # --budget: device seconds on the build's board; the build makes ``steps`` as many as
    # fit (board_fit.budget_steps, at most the steps given), 0: none
    budget: float = 0.0

    def __post_init__(self) -> None:
        self._check_types()
        for name, (least, most) in TRAIN_INTEGERS.items():  # what the C fields hold
            value = getattr(self, name)
            if not least <= value <= most:
                raise UserError(f"--{name.replace('_', '-')} must be in {least}..{most} "
                                f"(got {value})")
        if self.estimator not in ESTIMATORS:
            raise UserError(f"--estimator must be one of {', '.join(ESTIMATORS)}")
        if self.schedule not in SCHEDULES:
            raise UserError(f"--schedule must be one of {', '.join(SCHEDULES)}")
        if self.mode not in MODES + (MODE_AUTO,):
            raise UserError(f"--train must be one of {', '.join(MODES + (MODE_AUTO,))}")
        if not MIN_LR <= self.lr <= MAX_LR:  # also refuses nan and inf
            raise UserError(f"--lr must be a number in [{MIN_LR:.9g}, {MAX_LR:g}] (a normal "
                            f"float32) or auto (got {self.lr:g})")
        if self.batch * self.queries > MAX_SAMPLES_TIMES_QUERIES:
            raise UserError(f"--batch x --queries = {self.batch * self.queries} exceeds "
                            f"{MAX_SAMPLES_TIMES_QUERIES}, where the loss-difference clamp "
                            "that keeps the int32 gradient sums exact would cut ordinary "
                            "differences; lower one of them")
        if self.bp_layers < BP_AUTO:
            raise UserError(f"--bp-layers must be 0 or more, or auto (got {self.bp_layers})")
        parse_source(self.perturbation)
        if self.distribution not in DISTRIBUTIONS:
            raise UserError(f"--distribution must be one of {', '.join(DISTRIBUTIONS)}")
        forwards = self.queries * (2 if self.two_sided else 1)
        if self.query_batch < 1:
            raise UserError(f"--query-batch must be at least 1 (got {self.query_batch})")
        if forwards % self.query_batch:
            fits = [b for b in range(1, min(forwards, 16) + 1) if forwards % b == 0]
            raise UserError(f"--query-batch {self.query_batch} must divide the query forwards "
                            f"per layer and sample (Q{' x 2 two-sided' if self.two_sided else ''}"
                            f" = {forwards}): try --query-batch "
                            + " or ".join(str(b) for b in fits[-3:]))
        self._refuse_other_estimators_options()
        if self.scales and "zo_estimate_ch.c" not in REGISTRY[self.estimator].sources:
            raise UserError(f"--scales trains the filter scales of the layers an estimator "
                            f"trains channel-wise; --estimator {self.estimator} has none "
                            "(use np-channel or channel)")
        if self.scales and self.query_batch > 1:
            raise UserError("--scales: the batched queries (--query-batch) do not move the "
                            "scales yet; drop one of them")
        if self.scales and self.distribution != "rademacher":
            raise UserError("--scales perturbs a scale by +-1/32 of a node's value, drawn as "
                            "+-1; add --distribution rademacher")
        REGISTRY[self.estimator].options_of(self)  # its own options' ranges (estimators/)
        REGISTRY[self.estimator].check(self)  # and how they combine with the rest
        if self.query_batch > 1 and not REGISTRY[self.estimator].query_batching:
            raise UserError(f"--query-batch applies to the WP / NP estimators; --estimator "
                            f"{self.estimator} evaluates one forward at a time")
        if self.record_scalars and (self.guard or self.lr_auto):
            raise UserError("--record-scalars: a replay rebuilds the run from seeds and query "
                            "sums alone, but the guard and --lr auto decide from validation "
                            "data; add --no-guard and a fixed --lr")
        if self.record_scalars and not self.steps and self.schedule == "cosine":
            raise UserError("--record-scalars: a replay rebuilds the cosine schedule from the "
                            "run's T, which the build must know: add --steps T (or --schedule "
                            "constant)")
        if not 0 <= self.budget < float("inf"):  # also refuses nan
            raise UserError(f"--budget must be a duration like 1h, 90min or 600s (got "
                            f"{self.budget:g} seconds)")
        if not 0 <= self.max_step <= 127:  # also refuses nan and inf
            raise UserError(f"--max-step must be 0 (off) or a number of LSB up to 127 (got "
                            f"{self.max_step:g})")
        if self.blocks == BLOCKS_AUTO and self.bp_layers == BP_AUTO:
            raise UserError("--blocks auto and --bp-layers auto each size the build to the "
                            "board; choose one of them (e.g. --bp-layers 1 --blocks auto)")
        if self.mode == "sparse":
            if self.blocks < 1 and self.blocks not in (BLOCKS_AUTO, BLOCKS_FIT):
                raise UserError("--blocks must be at least 1, or auto")
            if (self.block is not None and self.blocks not in (BLOCKS_AUTO, BLOCKS_FIT)
                    and not 0 <= self.block < self.blocks):
                raise UserError(f"--block must be in 0..{self.blocks - 1} or auto")

    def _check_types(self) -> None:
        """Each option of its annotated kind: a run.json, a manifest or an API call can hold
        anything, and ``True`` as a count or ``"0,1"`` as the layers would reach the ranges
        below (or the generated C) as something else."""
        for field in fields(self):
            value, kind = getattr(self, field.name), field.type
            if value is None and kind.endswith("| None"):
                continue
            if kind.startswith("tuple"):
                fits = isinstance(value, tuple) and all(_is_kind(v, "int") for v in value)
            else:
                fits = _is_kind(value, kind.split(" |")[0])
            if not fits:
                raise UserError(f"--{field.name.replace('_', '-')} must be {_KIND_WORDS[kind]} "
                                f"(got {value!r:.60})")

    def _refuse_other_estimators_options(self) -> None:
        """An option only another estimator reads, set away from its default, would be
        silently ignored: say whose it is instead."""
        defaults = {f.name: f.default for f in fields(self)}
        for name, row in REGISTRY.items():
            for option in row.option_names if name != self.estimator else ():
                if getattr(self, option) != defaults[option]:
                    raise UserError(f"--{option.replace('_', '-')} is an option of "
                                    f"--estimator {name}; --estimator {self.estimator} does "
                                    "not read it")

    @property
    def integer_only(self) -> bool:
        """ElasticZO-INT8: no floating point from perturbation to update."""
        return REGISTRY[self.estimator].integer_only

    @property
    def perturbation_rule(self) -> Perturbation:
        return Perturbation(parse_source(self.perturbation), self.distribution, self.seed)

    @property
    def selects_block(self) -> bool:
        """Sparse training whose block is chosen by trials (docs/training.md)."""
        return self.mode == "sparse" and self.block is None

    def as_dict(self) -> dict:
        return asdict(self)


def run_steps(steps: int, batch: int, train_records: int) -> int:
    """T of a run: ``steps``, or 0 for DEFAULT_EPOCHS passes over ``train_records`` at
    ``batch`` records a step (zo_train_run_steps in zo_train.c counts the same on the
    device, from its image)."""
    return steps or DEFAULT_EPOCHS * -(-train_records // batch)


#: What each annotation of TrainConfig's fields is, in words.
_KIND_WORDS = {"int": "an integer", "float": "a number", "str": "text", "bool": "true or false",
               "tuple[int, ...]": "a list of layer indices", "int | None": "an integer or none",
               "float | None": "a number or none"}


def _is_kind(value: object, kind: str) -> bool:
    """``value`` is of ``kind`` ("int", "float", "str", "bool"); a bool is no number."""
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "int":
        return isinstance(value, numbers.Integral)
    if kind == "float":
        return isinstance(value, numbers.Real)
    return isinstance(value, str)


def _count_or_auto(text: str, option: str, things: str, auto: int) -> int:
    """An option that is a count or 'auto' (the build sizes it to the board)."""
    if text == "auto":
        return auto
    try:
        return int(text)
    except ValueError:
        raise UserError(f"{option} expects a number of {things} or auto, got '{text}'"
                        ) from None


def parse_bp_layers(text: str) -> int:
    """'--bp-layers C|auto' -> C or BP_AUTO."""
    return _count_or_auto(text, "--bp-layers", "layers", BP_AUTO)


def parse_blocks(text: str | None) -> int:
    """'--blocks N|auto' -> N or BLOCKS_AUTO; not given -> BLOCKS_FIT."""
    if text is None:
        return BLOCKS_FIT
    return _count_or_auto(text, "--blocks", "blocks", BLOCKS_AUTO)


#: --budget's units, in seconds
DURATION_UNITS = {"s": 1.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """'1h', '90min', '600s' -> seconds (--budget)."""
    for unit, seconds in sorted(DURATION_UNITS.items(), key=lambda u: -len(u[0])):
        if text.endswith(unit):
            try:
                value = float(text[:-len(unit)])
            except ValueError:
                break
            if value > 0 and value * seconds < float("inf"):
                return value * seconds
            break
    raise UserError(f"--budget expects a duration like 1h, 90min or 600s, got '{text}'")


def layer_list_option(layers: tuple[int, ...]) -> str:
    """The ``--layers`` option that parses back to ``layers`` ('' for the default, first):
    what inspect appends to the builds it names, so copying one trains the same layers."""
    if layers == LAYERS_FIRST:
        return ""
    if not layers:
        return " --layers all"
    runs: list[list[int]] = []
    for index in sorted(layers):
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return " --layers " + ",".join(f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in runs)


def parse_layer_list(text: str | None) -> tuple[int, ...]:
    """'0,2,5-7' -> (0, 2, 5, 6, 7); 'all' -> () (every layer); 'first' -> LAYERS_FIRST."""
    if not text or text.strip() == "all":
        return ()
    if text.strip() == "first":
        return LAYERS_FIRST
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(v) for v in part.split("-", 1))
                out.extend(range(lo, hi + 1))
            elif part:
                out.append(int(part))
    except ValueError:
        raise UserError(f"--layers expects indices like '0,2,5-7', got '{text}'") from None
    return tuple(sorted(set(out)))
