"""`build --as-library` (pure): the model and, when it trains, the training engine as sources
for a firmware that owns main(), startup, linker script and clocks, behind one public header
(zo_library.h) stating the SRAM it takes; plus an example firmware for the board that links
it, booted by the same target sources as a project (docs/firmware.md "Use it as a library").
Written like a project: whole or not at all, with a signed manifest (project_files.py)."""
from __future__ import annotations

from ..errors import UserError
from ..ir import Graph
from ..planner.lifetimes import align_up
from ..planner.placement import ITEM_ALIGNMENT
from ..target import TARGET_NAMES
from ..training.checkpoint import encoded_size
from .layers.common import c_float
from .project import (BuildOptions, ProjectPlan, environment, finish, render_board_sources,
                      render_context, render_model)

#: Engine files a library does without: the data image, its block device and the guard that
#: reads validation records from it. A library trains from the caller's samples.
IMAGE_FILES = frozenset({"zo_guard.c", "zo_guard.h", "zo_image.c", "zo_image.h",
                         "zo_train_io.c", "zo_train_io.h", "zo_blockdev.h", "zo_log_line.h"})
#: What the checkpoint code (zo_checkpoint.c) takes from templates/link.
CHECKSUM_FILES = ("zo_bytes.h", "zo_crc32.h", "zo_crc32.c")


def check_library(options: BuildOptions) -> None:
    """A library runs on a board and trains without a data image: refuse, with the options
    that fix it, what needs one."""
    if options.target not in TARGET_NAMES:
        raise UserError(f"--as-library is for a board's firmware: --target "
                        f"{'|'.join(TARGET_NAMES)} (native and qemu builds are projects)")
    train = options.train
    if train is None:
        return
    needs = [fix for fix, needed in (
        ("--no-guard", train.guard), ("--lr ETA", train.lr_auto),
        ("--block K", train.selects_block)) if needed]
    if needs:
        raise UserError("--as-library trains from your firmware's own samples, without the data "
                        "image whose validation records the training guard, --lr auto and "
                        f"--block auto read: add {', '.join(needs)}")
    if train.record_scalars:
        raise UserError("--record-scalars sends each step's query sums over the host link, "
                        "which --as-library leaves to your firmware: drop --record-scalars")


def library_sizes(plan: ProjectPlan) -> dict[str, int]:
    """The numbers zo_library.h states: the arena as .zo_arena reserves it (the memory
    report's arena item), the training buffers and a checkpoint's bytes."""
    training = plan.training
    tail = training.arena_tail if training else 0
    arena = align_up(plan.arena.arena_bytes + tail, ITEM_ALIGNMENT)
    buffers = sum(item.bytes for item in training.ram_items()) if training else 0
    checkpoint = encoded_size((L.weight_count, L.bias_count, L.scale_count)
                              for L in training.layers) \
        if training else 0
    return dict(arena_bytes=arena, training_bytes=buffers, sram_bytes=arena + buffers,
                checkpoint_bytes=checkpoint)


def input_quantization(graph: Graph) -> dict[str, str | int] | None:
    """Input 0's scale and zero point for zo_library.h, so that a caller quantizes its
    samples as the model expects; None for a float input (the library quantizes it) or a
    per-channel one."""
    quant = graph.tensor(graph.inputs[0]).quant
    if quant is None or quant.per_channel:
        return None
    return dict(scale=c_float(quant.scalar_scale), zero_point=int(quant.scalar_zero_point))


def render_library(graph: Graph, model_bytes: bytes, model_name: str, options: BuildOptions,
                   plan: ProjectPlan) -> dict[str, str]:
    """Relative path -> file content of the library and its example (pure)."""
    check_library(options)  # after the fit search: --train auto has its mode
    env = environment()
    context = dict(render_context(graph, model_bytes, model_name, options, plan),
                   library=library_sizes(plan), input_quant=input_quantization(graph))
    files: dict[str, str] = {}

    def render(template: str, dest: str) -> None:
        files[dest] = env.get_template(template).render(context)

    render_model(env, context, files, plan, IMAGE_FILES)
    if plan.training is not None:
        for name in CHECKSUM_FILES:
            render(f"templates/link/{name}",
                   ("include/" if name.endswith(".h") else "src/link/") + name)
    render("templates/library/zo_library.h.j2", "include/zo_library.h")
    render("templates/library/zo_library.c", "src/zo_library.c")
    render("templates/library/library.mk.j2", "library.mk")
    # The example: main.c, and the board support and firmware.h (FIRMWARE_BAUD) it boots with.
    render("templates/library/example_main.c", "example/main.c")
    render("templates/project/firmware.h.j2", "example/firmware.h")
    board = render_board_sources(env, options.target, context, plan.placement, files,
                                 f"example/platform/{options.target}/",
                                 f"platform/{options.target}")
    files["example/Makefile"] = env.get_template("templates/library/example.mk.j2").render(
        board)
    return finish(files, graph, context, plan, library=True)
