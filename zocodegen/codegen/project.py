"""Plan and render a complete firmware project from IR + plans (pure): the build's stages
after its fit search (fit.py); project_files.py writes it.

Every file comes from a template: ``templates/`` (model, kernels, host link, command loop,
Makefile, PlatformIO), ``qemu/board/`` (mps2-an500 support) and ``targets/<name>/`` (STM32
support).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from importlib import resources

import jinja2
import numpy as np

from ..version import __version__
from ..errors import UserError
from ..formats import link, status
from ..ir import Graph
from ..planner import (ArenaPlan, BudgetError, Placement, RamItem, budget_message,
                       default_suggestions, kb, place, plan_arena, report_dict, report_text)
from ..planner.lifetimes import align_up
from ..planner.patches import best_patched_arena
from ..planner.placement import ITEM_ALIGNMENT
from ..target import (DEFAULT_TARGET, TARGET_NAMES, Target, check_baud, load_target,
                      target_data)
from ..training import checkpoint
from ..training.config import BLOCKS_AUTO, BLOCKS_FIT, BP_AUTO, TrainConfig
from ..training.estimators import ENGINE_SOURCES, REGISTRY, engine_sources
from ..training.plan import trainable_ops, training_plans
from .layers.common import c_float
from .host_inputs import host_quantizable, quantize_inputs_on_host
from .alternatives import Total, training_tips
from .model_code import ModelCode, model_code
from .project_files import MANIFEST, sign
from .training_code import TrainingCode, training_code
from .training_regions import EVERY, RECOMPUTE_MODES

BUILD_TARGETS = ("native", "qemu") + TARGET_NAMES
STACK_BYTES = 8192
#: Static buffers of templates/link/zo_link.c: the payload of an answer that is not READ /
#: FETCH data (those are decoded straight into the caller's buffer) and the COBS group being
#: sent (a request goes out from the caller's bytes); docs/link.md.
LINK_RX_BYTES = link.RESPONSE_BUFFER
LINK_TX_BYTES = 254
#: A field trainer (--data-source sdcard) has no link buffers but templates/field/field.h's state:
#: the card's sector, the status record's fields, HELLO's identity.
FIELD_STATE_BYTES = 752
#: The rest of the firmware's .bss, besides the link buffers (or the field trainer's state):
#: zo_link.c's state and counters (the SD driver's), the platform's clock and exit-status
#: words, and for training main.c's image reader (with its sector scratch) and run state.
#: Measured with arm-none-eabi-size -A, the same for both boards and every estimator (368,
#: 1128 and, field, 1548 B of .bss in all); tests/test_linked_fit.py checks every fixture's
#: linked firmware against the plan, so a new static shows there (tests/test_field.py a
#: field trainer's).
RUNTIME_BSS_BYTES = {"inference": 368 - LINK_RX_BYTES - LINK_TX_BYTES,
                     "training": 1128 - LINK_RX_BYTES - LINK_TX_BYTES,
                     "field": 1548 - FIELD_STATE_BYTES}
#: .zo_arena is 32-byte aligned (the linker scripts) after the 4-byte aligned .bss where the
#: two share a memory (the F746): up to 28 bytes between them belong to neither.
ARENA_ALIGNMENT_GAP = 28
#: C types of output 0 that the accuracy command ('A') takes the argmax of.
SCORE_CTYPES = {"int8": "int8_t", "uint8": "uint8_t", "float32": "float"}
VALUES_PER_LINE = 16
PATCH_MODES = ("auto", "on", "off")
INPUT_QUANTIZE_MODES = ("auto", "device", "host")
#: Where a training firmware's data image lives: served by the host over the link, or on the
#: board's own card, trained from without a host (templates/field, docs/sdcard.md).
DATA_MODES = ("link", "sdcard")


@dataclass(frozen=True)
class BuildOptions:
    target: str  # one of BUILD_TARGETS
    emulate: str = DEFAULT_TARGET  # the board whose budget native and QEMU builds stand for
    train: TrainConfig | None = None  # None: inference only
    # patch-based inference (planner/patches.py): auto uses it when the build would not fit
    # the board without it; on whenever it lowers the arena; off never
    patches: str = "auto"
    # host: the host runs the leading QUANTIZE (host_inputs.py); auto: host only when the
    # build fits the board that way and not with the float input on the device
    input_quantize: str = "auto"
    # training: restart groups that recompute instead of saving (training_regions.py): auto
    # when they cost under 1 % of a step's MACs or the build does not fit otherwise; on
    # for the least SRAM; off never
    recompute: str = "auto"
    baud: int = link.DEFAULT_BAUD  # the host link's line on a board (firmware.h FIRMWARE_BAUD)
    library: bool = False  # --as-library: sources and zo_library.h for a firmware (library.py)
    data_source: str = "link"  # one of DATA_MODES (--data-source)
    # --estimator not given: the train's estimator (the default) or, when its build does not
    # fit the board and ESTIMATOR_FALLBACK's does, that one (fit.py)
    estimator_fit: bool = False

    @property
    def field(self) -> bool:
        """A field trainer: the image and checkpoints on the board's card, no host."""
        return self.data_source == "sdcard"

    @property
    def board(self) -> str:
        """The STM32 target whose memory budget applies."""
        return self.target if self.target in TARGET_NAMES else self.emulate


@dataclass(frozen=True)
class ProjectPlan:
    arena: ArenaPlan
    placement: Placement
    code: ModelCode
    board: Target
    training: TrainingCode | None = None
    options: BuildOptions | None = None  # as planned: every auto choice resolved


def whole_arena(graph: Graph, train: TrainConfig | None,
                in_place_convolutions: bool = False) -> ArenaPlan:
    """The arena with every op run whole. The layers the build trains never compute in
    place: the training engine also runs their kernels on buffers of its own."""
    if train is None:
        return plan_arena(graph, in_place_convolutions=in_place_convolutions)
    ops = trainable_ops(graph)
    trained = {ops[i] for i in (train.layers or range(len(ops))) if 0 <= i < len(ops)}
    if train.blocks not in (BLOCKS_AUTO, BLOCKS_FIT) and train.bp_layers != BP_AUTO:
        try:  # a fixed sparse block trains only its own layers
            trained = {layer.op_index for plan in training_plans(graph, train)
                       for layer in plan.layers}
        except UserError:  # the build's own checks speak later
            pass
    return plan_arena(graph, separate_ops=frozenset(trained),
                      in_place_convolutions=in_place_convolutions)


def _inference_items(arena: ArenaPlan, board: Target, training: TrainingCode | None = None,
                     field: bool = False) -> list[RamItem]:
    """What the linked firmware puts in SRAM besides the training buffers: a fit is judged on
    what links (statics, stack, alignment), not on the arena alone. ``field``: a field
    trainer's (--data-source sdcard), which keeps the card's state where others keep the link's."""
    stack_memory = target_data(board.name)["linker"]["stack_region"]
    # The link buffers are ordinary .bss, which every linker script puts right after the
    # stack: pinned to the stack's memory, they are placed (and reported) there too.
    what = "inference activations"
    # The arena item is what .zo_arena reserves for it: rounded up to 8 B, because the object
    # after it is placed 8-byte aligned (MODEL_ARENA_STORAGE_BYTES in model.h).
    if arena.patches is not None:
        what += f"; patch-based: {arena.patches.describe()}"
    return [RamItem("arena", align_up(arena.arena_bytes, ITEM_ALIGNMENT), what),
            RamItem("stack", STACK_BYTES, "call stack", memory=stack_memory),
            RamItem("field trainer", FIELD_STATE_BYTES, "a card sector, the run's status and "
                    "identity (static)", memory=stack_memory) if field else
            RamItem("host link buffers", LINK_RX_BYTES + LINK_TX_BYTES,
                    f"answer payloads {LINK_RX_BYTES} B + COBS group {LINK_TX_BYTES} B "
                    "(static; sectors go straight to their buffer)", memory=stack_memory),
            _statics_item(training, stack_memory, field)]


def _statics_item(training: TrainingCode | None, memory: str, field: bool) -> RamItem:
    """.data and the rest of .bss, which follow the stack, and the gap before .zo_arena.
    Sparse --block auto keeps a pointer to each trained array in .data (*_active), and to
    each --scales layer's parameters (*_params_active)."""
    pointers = 0 if training is None or not training.selects_block else sum(
        1 + L.has_bias + (L.folded_count > 0) + L.scaled for L in training.layers
        if L.defines)
    bss = RUNTIME_BSS_BYTES["inference" if training is None else "field" if field
                            else "training"]
    return RamItem("firmware statics", bss + 4 * pointers + ARENA_ALIGNMENT_GAP,
                   f"runtime state {bss} B (.bss), {pointers} trained-array pointers (.data), "
                   f"up to {ARENA_ALIGNMENT_GAP} B aligning the arena", memory=memory)


def build_arena(graph: Graph, options: BuildOptions, board: Target) -> ArenaPlan:
    """The arena of the build: the cheapest in instructions that fits the board. Every op
    whole; else convolutions in place too (row by row: a few % more instructions); else,
    for inference, the first stage in patches (--patches; it recomputes overlaps). Training
    builds run every op whole: a partial forward restarts from saved activations, which a
    patched stage never holds whole."""
    if options.patches not in PATCH_MODES:
        raise UserError(f"--patches {options.patches}: choose one of {', '.join(PATCH_MODES)}")
    train = options.train
    if train is not None and options.patches == "on":
        raise UserError("--patches on is for inference builds: training restarts partial "
                        "forwards from saved activations, which patches never hold whole")

    def fits(arena: ArenaPlan) -> bool:
        items = (_inference_items(arena, board) if train is None
                 else layout(graph, arena, board, train, options.recompute, options.field)[2])
        return place(items, board.name, board.sram_budget_bytes, strict=False).fits

    whole = whole_arena(graph, train)
    if options.patches != "on" and fits(whole):
        return whole
    in_place = whole_arena(graph, train, in_place_convolutions=True)
    leaner = in_place if in_place.arena_bytes < whole.arena_bytes else whole
    if train is not None or options.patches == "off":
        return leaner
    if options.patches == "on":
        return best_patched_arena(graph) or leaner
    if fits(leaner):
        return leaner
    for convolutions in (False, True):  # the cheaper patched plans first
        patched = best_patched_arena(graph, fits, in_place_convolutions=convolutions)
        if patched is not None and fits(patched):
            return patched
    return patched or leaner  # the smallest; the refusal names it


def plan_project(graph: Graph, options: BuildOptions) -> ProjectPlan:
    """Plan memory and generate the layer code of ``graph`` (the device graph); refuses
    (BudgetError) when the board's SRAM budget is exceeded, except for native builds, which
    only report it. A refused build names what would fit or what else to try."""
    if options.target not in BUILD_TARGETS:
        raise UserError(f"unknown target '{options.target}'; choose one of "
                        f"{', '.join(BUILD_TARGETS)}")
    _check_data(options)
    board = load_target(options.board)
    if options.target in TARGET_NAMES:
        check_baud(board.name, options.baud)
    arena = build_arena(graph, options, board)
    code, training, items = layout(graph, arena, board, options.train, options.recompute,
                                   options.field)
    placement = place(items, board.name, board.sram_budget_bytes, strict=False)
    if not placement.fits and options.target != "native":
        tips = (training_tips(graph, options.train, training, options.recompute,
                              sram_total(graph, arena, board, options), board.name)
                if training else _inference_suggestions(graph, arena, options))
        raise BudgetError(budget_message(placement, tips))
    if options.target in TARGET_NAMES and code.flash_bytes > board.flash_bytes:
        raise BudgetError(flash_message(code.flash_bytes, board))
    return ProjectPlan(arena, placement, code, board, training, options)


def flash_message(flash_bytes: int, board: Target) -> str:
    """The refusal of a model whose constants exceed the board's flash: SRAM options cannot
    help, and the firmware would not link (inspect prints the same figure as DOES NOT FIT)."""
    return (f"the model's weights and parameters need {flash_bytes / 1024:.1f} KB of flash but "
            f"the {board.name} has {board.flash_bytes / 1024:.0f} KB "
            f"({(flash_bytes - board.flash_bytes) / 1024:.1f} KB over); no build option "
            "lowers them: a smaller model (fewer channels or layers, a lower width multiplier)"
            + "".join(f", or a board with more flash (--target {name})"
                      for name in TARGET_NAMES
                      if load_target(name).flash_bytes >= flash_bytes))


def _check_data(options: BuildOptions) -> None:
    """--data-source sdcard is a whole firmware that trains by itself (templates/field)."""
    if options.data_source not in DATA_MODES:
        raise UserError(f"--data-source {options.data_source}: choose one of "
                        f"{', '.join(DATA_MODES)}")
    if not options.field:
        return
    if options.train is None:
        raise UserError("--data-source sdcard builds a field trainer, which trains from its card: add "
                        "--train full|sparse|auto")
    if options.library:
        raise UserError("--data-source sdcard builds a whole firmware; --as-library leaves the "
                        "storage to your firmware: drop one of them")
    if options.train.record_scalars:
        raise UserError("--record-scalars sends the query sums to a host; a --data-source sdcard "
                        "firmware has none: drop one of them")


def _inference_suggestions(graph: Graph, arena: ArenaPlan, options: BuildOptions) -> list[str]:
    """What else to try when an inference build does not fit, given what is applied."""
    tips = []
    if arena.patches is None and options.patches == "off":
        tips.append("patch-based inference of the first stage (--patches auto)")
    elif arena.patches is None:
        tips.append("patch-based inference does not lower this model's arena (no stage of "
                    "convolutions whose patches need less)")
    if options.input_quantize == "device" and host_quantizable(graph):
        floats = sum(graph.tensors[n].nbytes for n in graph.inputs)
        ints = sum(graph.tensors[n].nbytes for n in quantize_inputs_on_host(graph).inputs)
        tips.append(f"quantize the input on the host (--input-quantize host): the device then "
                    f"takes {kb(ints)} of int8 instead of {kb(floats)} of float32")
    return tips + default_suggestions(options.board)


def layout(graph: Graph, arena: ArenaPlan, board: Target, train: TrainConfig | None,
            recompute: str = "auto", field: bool = False
            ) -> tuple[ModelCode, TrainingCode | None, list[RamItem]]:
    """Layer code, training tables and the SRAM items of one build configuration (``field``:
    of a field trainer, BuildOptions.field)."""
    if recompute not in RECOMPUTE_MODES + (EVERY,):
        raise UserError(f"--recompute {recompute}: choose one of {', '.join(RECOMPUTE_MODES)}")
    if train is None:
        return model_code(graph, arena), None, _inference_items(arena, board)
    plans = training_plans(graph, train)
    code = model_code(graph, arena, frozenset(l.op_index for p in plans for l in p.layers),
                      switched=len(plans) > 1,
                      scaled_ops=frozenset(l.op_index for p in plans for l in p.layers
                                           if l.scaled))
    def fits(training: TrainingCode) -> bool:
        items = _training_items(arena, board, training, field)
        return place(items, board.name, board.sram_budget_bytes, strict=False).fits

    training = training_code(graph, arena, code, plans, recompute, fits)
    return code, training, _training_items(arena, board, training, field)


def sram_total(graph: Graph, arena: ArenaPlan, board: Target, options: BuildOptions) -> Total:
    """The SRAM that a run's build of ``graph`` needs on ``board``, None when it does not fit
    (what alternatives.py weighs)."""
    def total(config: TrainConfig) -> int | None:
        _, _, items = layout(graph, arena, board, config, options.recompute, options.field)
        placement = place(items, board.name, board.sram_budget_bytes, strict=False)
        return placement.total if placement.fits else None
    return total


def _training_items(arena: ArenaPlan, board: Target, training: TrainingCode,
                    field: bool) -> list[RamItem]:
    items = _inference_items(arena, board, training, field)
    if training.arena_tail:
        saved = ("" if training.split else f"saved activations of {training.batch} "
                 f"sample{'s' if training.batch > 1 else ''} (up to "
                 f"{kb(training.largest_saved_bytes)}) and ")
        items[0] = replace(items[0], bytes=align_up(arena.arena_bytes + training.arena_tail,
                                                    ITEM_ALIGNMENT),
                           description=items[0].description + f" + {training.arena_tail} B "
                           f"past its end for the training step's {saved}gradient regions")
    items[1:1] = training.ram_items()
    return items


def environment() -> jinja2.Environment:
    roots = {
        "templates": resources.files("zocodegen.templates"),
        "qemu": resources.files("zocodegen.qemu").joinpath("board"),
        "targets": resources.files("zocodegen.targets"),
    }
    env = jinja2.Environment(
        loader=jinja2.PrefixLoader({k: jinja2.FileSystemLoader(str(v)) for k, v in roots.items()}),
        keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
        undefined=jinja2.StrictUndefined, autoescape=False)
    env.filters["c_rows"] = _c_rows
    return env


def _c_rows(values: np.ndarray) -> str:
    flat = [str(int(v)) for v in np.asarray(values).reshape(-1)]
    return "\n".join("    " + ", ".join(flat[i:i + VALUES_PER_LINE]) + ","
                     for i in range(0, len(flat), VALUES_PER_LINE))


def listing(env: jinja2.Environment, prefix: str) -> list[str]:
    return sorted(n for n in env.list_templates()
                  if n.startswith(prefix + "/") and "__" not in n and not n.endswith(".md"))


def render_project(graph: Graph, model_bytes: bytes, model_name: str, options: BuildOptions,
                   plan: ProjectPlan) -> dict[str, str]:
    """Relative path -> file content of the whole project (pure)."""
    env = environment()
    context = render_context(graph, model_bytes, model_name, options, plan)
    files: dict[str, str] = {}

    def render(template: str, dest: str) -> None:
        files[dest] = env.get_template(template).render(context)

    render_model(env, context, files, plan)
    render("templates/project/firmware.h.j2", "include/firmware.h")
    render("templates/project/Makefile.j2", "Makefile")
    render("templates/project/main.c", "src/main.c")  # plain C: firmware.h carries the data
    for template in listing(env, "templates/platform/native"):
        render(template, "src/platform/native/" + template.rsplit("/", 1)[1])
    files["include/zo_link_messages.h"] = link.c_header()
    for template in listing(env, "templates/link"):
        base = template.rsplit("/", 1)[1]
        if options.field and base in FIELD_REPLACES:
            continue
        if base != LINK_BLOCKDEV or plan.training is not None:  # zo_blockdev.h trains only
            render(template, ("include/" if base.endswith(".h") else "src/link/") + base)
    if options.field:
        _render_field(env, render)
    for template in listing(env, "qemu"):
        base = template.rsplit("/", 1)[1]
        if base != "platform.h":
            render(template, "src/platform/qemu/" + base.removesuffix(".j2"))
    if options.target in TARGET_NAMES:
        _render_board(env, options.target, context, plan.placement, files)
    return finish(files, graph, context, plan)


def finish(files: dict[str, str], graph: Graph, context: dict, plan: ProjectPlan,
           **manifest: object) -> dict[str, str]:
    """The memory report and, last, the signed manifest of every file (project_files.py):
    how a project and a library (library.py) end. ``manifest``: entries to add to it."""
    files["memory_report.txt"] = report_text(graph, plan.arena, plan.placement,
                                             flash=_flash(plan)) + "\n"
    files["memory_report.json"] = json.dumps(
        report_dict(graph, plan.arena, plan.placement, flash=_flash(plan)), indent=2) + "\n"
    files[MANIFEST] = sign(dict(_manifest(context, plan, plan.options), **manifest), files)
    return files


def render_context(graph: Graph, model_bytes: bytes, model_name: str, options: BuildOptions,
                   plan: ProjectPlan) -> dict:
    """What every template of a build sees: the project's and the library's (library.py)."""
    board = plan.board
    model_name = _printable(model_name)
    return dict(
        version=__version__, target=options.target,
        model=dict(name=model_name, source=model_name,
                   sha256=hashlib.sha256(model_bytes).hexdigest(),
                   sha256_bytes=", ".join(str(b) for b in hashlib.sha256(model_bytes).digest())),
        identity=_identity(graph, plan, model_name, options),
        training=plan.training,
        arena_tail=plan.training.arena_tail if plan.training else 0,
        layers=plan.code.layers, arrays=plan.code.arrays, inputs=plan.code.inputs,
        outputs=plan.code.outputs, arena_bytes=plan.arena.arena_bytes,
        flash_data_bytes=plan.code.flash_bytes, stack_bytes=STACK_BYTES,
        emulated=dict(name=board.name, sram_kb=board.sram_budget_bytes // 1024),
        ram_bytes=board.sram_budget_bytes, flash_bytes=board.flash_bytes,
        firmware=options.target in TARGET_NAMES, baud=options.baud, field=options.field,
        firmware_note=(f"{options.target} ELF + bin   build/{options.target}/firmware.elf"
                       if options.target in TARGET_NAMES else
                       "(not for this target: regenerate with --target "
                       f"{'|'.join(TARGET_NAMES)})"),
    )


def render_model(env: jinja2.Environment, context: dict, files: dict[str, str],
                 plan: ProjectPlan, leave_out: frozenset[str] = frozenset()) -> None:
    """The model's code, its kernels and, when it trains, the training engine and tables:
    what the project and the library (library.py) both compile. ``leave_out``: engine files
    (templates/train) the build does without."""
    def render(template: str, dest: str) -> None:
        files[dest] = env.get_template(template).render(context)

    for name in ("model.c", "model.h", "weights.c", "weights.h"):
        render(f"templates/project/{name}.j2", ("include/" if name.endswith(".h") else "src/")
               + name)
    render("templates/project/platform.h", "include/platform.h")
    for template in listing(env, "templates/kernels"):
        base = template.rsplit("/", 1)[1]
        render(template, ("include/" if base.endswith(".h") else "src/kernels/") + base)
    field = plan.options is not None and plan.options.field
    files["include/zo_status.h"] = status.c_header(sdcard=field)
    if field:
        files["include/zo_status_names.h"] = status.c_names()
    if plan.training is not None:
        _render_training(env, render, plan.options.train.estimator, plan.training, leave_out)
        files["include/zo_checkpoint_format.h"] = checkpoint.c_header()


#: The block device of every firmware: the host serves the image over the host link.
LINK_BLOCKDEV = "blockdev_link.c"
#: What a field trainer does without: the host link and its block device (templates/field
#: answers main.c's link calls on the board).
FIELD_REPLACES = ("zo_link.c", LINK_BLOCKDEV)
#: The field trainer's card on each platform: native and QEMU read a file, a board its SD card
#: (targets/common/blockdev_sdmmc.c).
FIELD_CARDS = {"blockdev_stdio.c": "src/platform/native/",
               "blockdev_semihosting.c": "src/platform/qemu/"}
#: targets/ files of the SD card only field trainers have.
FIELD_TARGET_PREFIXES = ("blockdev_", "sdmmc_")


def _render_field(env: jinja2.Environment, render) -> None:
    """The field trainer (templates/field): the driver in src/field, each platform's card
    backend beside its platform files, and the status names it prints."""
    for template in listing(env, "templates/field"):
        base = template.rsplit("/", 1)[1]
        render(template, FIELD_CARDS.get(base, "include/" if base.endswith(".h")
                                         else "src/field/") + base)


def _render_training(env: jinja2.Environment, render, estimator: str,
                     training: TrainingCode, leave_out: frozenset[str]) -> None:
    """The training engine (templates/train: the files this build uses) and the model's
    training tables."""
    render("templates/project/training.c.j2", "src/training.c")
    render("templates/project/training.h.j2", "include/training.h")
    render("templates/project/zo_train_config.h.j2", "include/zo_train_config.h")
    used = engine_sources(estimator, backprop=bool(training.head))
    for template in listing(env, "templates/train"):
        base = template.rsplit("/", 1)[1]
        if (base in used or base not in ENGINE_SOURCES) and base not in leave_out:
            render(template, ("include/" if base.endswith(".h") else "src/train/") + base)


def _printable(name: str) -> str:
    """A file name as generated files can hold it: a character that is not printable (a byte
    of a name that is not UTF-8, a newline that would end a Makefile comment) becomes '_'."""
    return "".join(ch if ch.isprintable() else "_" for ch in name)


def _c_string(text: str) -> str:
    """A C string literal of printable ASCII text (other characters become '_'; '?' is
    escaped so that no trigraph can form)."""
    out = []
    for ch in text:
        if ch in '"\\?':
            out.append("\\" + ch)
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.append("_")
    return '"' + "".join(out) + '"'


def _identity(graph: Graph, plan: ProjectPlan, model_name: str, options: BuildOptions) -> dict:
    """What main.c reports about the model and the build: HELLO (docs/link.md) and the LOG
    line after it."""
    x = graph.tensor(graph.inputs[0])
    y = graph.tensor(graph.outputs[0])
    quantized = x.quant is not None and np.dtype(x.dtype).kind in "iu"
    log = (f"zocodegen {__version__}: {model_name}, arena {plan.arena.arena_bytes} B, "
           + (f"training {len(plan.training.layers)} layers" if plan.training else
              "inference only"))
    identity = dict(
        classes=y.size,
        input_scale=c_float(x.quant.scalar_scale if quantized else 0.0),
        input_zero_point=x.quant.scalar_zero_point if quantized else 0,
        score_ctype=SCORE_CTYPES.get(np.dtype(y.dtype).name),
        log=_c_string(log))
    if options.train is not None:
        cfg = options.train
        if not REGISTRY[cfg.estimator].firmware:
            raise UserError(f"--estimator {cfg.estimator} has no firmware (simulator only)")
        if identity["score_ctype"] is None:
            raise UserError(f"output 0 is {np.dtype(y.dtype).name}: the firmware's accuracy "
                            f"command needs int8, uint8 or float32 scores")
        identity.update(estimator=REGISTRY[cfg.estimator].wire_code, gnorm_scaling=int(cfg.gnorm_scaling),
                        quant_scaling=int(cfg.quant_scaling), guard=int(cfg.guard),
                        lr_auto=int(cfg.lr_auto),
                        sparse=int(cfg.mode == "sparse"),
                        block=0xFF if plan.training.block is None else plan.training.block,
                        blocks=len(plan.training.models) if cfg.selects_block else cfg.blocks)
    return identity


def _arena_region(data: dict, placement: Placement) -> str:
    """The linker-script region that gets .zo_arena: where the planner placed the arena."""
    for region in placement.regions:
        if any(p.item.name == "arena" for p in region.items):
            return data["linker"].get("arena_region_aliases", {}).get(region.name, region.name)
    return data["linker"]["default_arena_region"]


def render_board_sources(env: jinja2.Environment, target: str, context: dict,
                         placement: Placement, files: dict[str, str], folder: str,
                         platform_dir: str) -> dict:
    """The STM32 support files (startup, reset, clocks and USART, linker script, platform.mk)
    into ``folder``; ``platform_dir`` is that folder as the including Makefile sees it.
    Returns the context they were rendered with."""
    data = target_data(target)
    board_context = dict(context, target_info=data, platform_dir=platform_dir,
                         arena_region=_arena_region(data, placement))
    for template in listing(env, "targets/common") + listing(env, f"targets/{target}"):
        base = template.rsplit("/", 1)[1]
        if base == "target.json" or base.startswith("board_") or (
                base.startswith(FIELD_TARGET_PREFIXES) and not context["field"]):
            continue
        files[folder + base.removesuffix(".j2")] = env.get_template(template).render(
            board_context)
    return board_context


def _render_board(env: jinja2.Environment, target: str, context: dict, placement: Placement,
                  files: dict[str, str]) -> None:
    """STM32 support files, platformio.ini and (H7B3) the board JSON PlatformIO lacks."""
    data = target_data(target)
    folder = f"src/platform/{target}"
    board_context = render_board_sources(env, target, context, placement, files, folder + "/",
                                         folder)
    files["platformio.ini"] = env.get_template("templates/project/platformio.ini.j2").render(
        board_context)
    files["pio_link_flags.py"] = env.get_template("templates/project/pio_link_flags.py").render(
        board_context)
    for template in listing(env, f"targets/{target}"):
        base = template.rsplit("/", 1)[1]
        if base.startswith("board_") and base.endswith(".json.j2"):
            board_id = data.get("platformio_board_id", base.removeprefix("board_")
                                .removesuffix(".json.j2"))
            files[f"boards/{board_id}.json"] = env.get_template(template).render(board_context)


def _flash(plan: ProjectPlan) -> dict:
    return {"weights_and_parameters_bytes": plan.code.flash_bytes,
            "flash_bytes": plan.board.flash_bytes}


def _manifest(context: dict, plan: ProjectPlan, options: BuildOptions) -> dict:
    return {
        "zocodegen": __version__, "model": context["model"], "target": options.target,
        "budget_of": plan.board.name, "arena_bytes": plan.arena.arena_bytes,
        "stack_bytes": STACK_BYTES, "flash_data_bytes": plan.code.flash_bytes,
        "layers": len(plan.code.layers),
        "training": None if options.train is None else {
            **options.train.as_dict(),
            "trainable_layers": [l.op for l in plan.training.layers],
            "block_ops": [[l.op for l in plan.training.block_layers(k)]
                       for k in range(len(plan.training.models))],
            "modes": [l.mode.removeprefix("ZO_TRAIN_") for l in plan.training.layers],
            "buffers": {i.name: i.bytes for i in plan.training.ram_items()},
            "perturbation_rule": {**options.train.perturbation_rule.manifest(),
                             "layer_shifts": [l.perturb_shift for l in plan.training.layers],
                             "two_sided": options.train.two_sided},
        },
        "inputs": [t.__dict__ for t in plan.code.inputs],
        "outputs": [t.__dict__ for t in plan.code.outputs],
        **({"data_source": options.data_source} if options.field else {}),  # link builds: as before it
    }
