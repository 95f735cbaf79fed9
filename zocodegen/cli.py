"""The ``zocodegen`` commands (DESIGN.md section 8); their options are in ``cli_options``.

Exit status: 0 success, 2 bad input or usage (one line on stderr, no traceback),
1 internal failure. Set ZOCODEGEN_DEBUG=1 to see tracebacks of internal failures.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import traceback
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np
from tqdm import tqdm

from . import api, board_fit, cli_fleet
from .errors import DataError, UserError, check_finite, interrupted
from .files import (Replaces, atomic_writer, check_output, file_sha256,
                    no_empty_folders_on_failure, open_input)
from .codegen.fit import device_graph
from .codegen.project import BuildOptions
from .codegen.host_inputs import host_side_inputs
from .frontends import load_model
from .ir import Graph
from .projects import cached_build
from .cli_options import build_parser, train_config
from .host.engines import run_samples
from .flash import flash_project
from .host import card, device_time
from .host.devices import open_port
from .host.monitor import monitor
from .host.devices import open_device
from .reference.executor import run
from .summary import format_summary
from .reference.softmax import LOSS_CAP_NATS
from .target import TARGET_NAMES
from .training import checkpoint
from .training.config import DEFAULT_BLOCKS, DEFAULT_ESTIMATOR
from .formats.image import SECTOR_BYTES, SPLITS as IMAGE_SPLITS, read_header
from .host.image_fit import check_image_model
from .training import labels
from .training.folders import InputSpec, files_under, recorded_maker
from .training.plan import final_softmax
from .training.metrics import class_labels, format_confusion
from .training.replay import replay_build
from .training.data import load_numpy
from .training.guard import MIN_VAL_RECORDS
from .training.runner import NO_IMPROVEMENT


def cmd_inspect(args: argparse.Namespace) -> None:
    found = api.run_inspect(args)
    budget = None
    if found.target:
        t = found.target
        budget = {"target": t.name, "sram_budget_bytes": t.sram_budget_bytes,
                  "flash_bytes": t.flash_bytes}
    if args.json:
        data = found.summary.as_dict()
        if budget:
            data["target"] = budget
            data["board_fit"] = found.board_fit.as_dict()
        print(json.dumps(data, indent=2))
    else:
        if found.board_fit is not None:  # the question first: can it train on this board?
            print("\n".join(board_fit.describe(found.board_fit)) + "\n")
        print(format_summary(found.summary, budget))


def read_inputs(graph: Graph, path: Path) -> dict[str, np.ndarray]:
    """Load X.npy / X.npz and check it against the model's inputs (batch axis first)."""
    loaded = load_numpy(path, ".npy/.npz")
    if isinstance(loaded, np.ndarray):
        if len(graph.inputs) != 1:
            raise DataError(f"{path}: the model has {len(graph.inputs)} inputs "
                            f"({', '.join(graph.inputs)}); pass an .npz keyed by input name")
        arrays = {graph.inputs[0]: loaded}
    else:
        missing = [n for n in graph.inputs if n not in loaded.files]
        if missing:
            raise DataError(f"{path}: missing input(s) {', '.join(missing)}; "
                            f"found {', '.join(loaded.files) or 'nothing'}")
        arrays = {n: loaded[n] for n in graph.inputs}
    batch = None
    for name, x in arrays.items():
        t = graph.tensor(name)
        sample = t.shape[1:] if t.shape and t.shape[0] == 1 else t.shape
        if x.dtype != t.dtype:
            raise DataError(f"{path}: input '{name}' must be {t.dtype}, got {x.dtype}")
        check_finite(x, f"{path}: input '{name}'")
        if x.ndim != len(sample) + 1 or tuple(x.shape[1:]) != tuple(sample):
            raise DataError(f"{path}: input '{name}' must have shape (N, "
                            f"{', '.join(map(str, sample))}), got {tuple(x.shape)}")
        if batch is not None and x.shape[0] != batch:
            raise DataError(f"{path}: inputs disagree on the batch size")
        batch = x.shape[0]
    if not batch:
        raise DataError(f"{path}: the batch is empty")
    return arrays


def check_output_path(graph: Graph, path: Path) -> None:
    """Refuse an --output the outputs cannot be written to as named, before anything runs."""
    suffix = path.suffix.lower()
    if len(graph.outputs) > 1 and suffix != ".npz":
        raise UserError(f"{path}: the model has {len(graph.outputs)} outputs "
                        f"({', '.join(graph.outputs)}); pass --output "
                        f"{path.with_suffix('.npz')} (one array per output name)")
    if suffix not in (".npy", ".npz"):
        raise UserError(f"{path}: pass --output {path.with_suffix('.npy')} (or .npz, keyed "
                        "by output name)")


def outputs_of(graph: Graph) -> Callable[[Path], str | None]:
    """Why an existing file is no earlier `infer --output` of ``graph`` (None when it is
    one): a .npy of the first output's dtype and sample shape, a .npz of exactly its outputs.
    Anything else (a data set, another model's outputs) needs --force."""
    def foreign(path: Path) -> str | None:
        sample = graph.tensor(graph.outputs[0]).shape[1:]
        try:
            with open_input(path, "existing output") as f:
                if path.suffix.lower() == ".npz":
                    with np.lib.npyio.NpzFile(f, allow_pickle=False) as found:
                        ours = sorted(found.files) == sorted(graph.outputs)
                else:  # its header only
                    major, _ = np.lib.format.read_magic(f)
                    shape, _, dtype = (np.lib.format.read_array_header_1_0 if major == 1
                                       else np.lib.format.read_array_header_2_0)(f)
                    ours = (dtype == graph.tensor(graph.outputs[0]).dtype
                            and tuple(shape[1:]) == tuple(sample))
        except (ValueError, OSError, EOFError, zipfile.BadZipFile):
            ours = False
        return None if ours else "holds no outputs of this model"
    return foreign


def write_outputs(path: Path, outputs: dict[str, np.ndarray]) -> None:
    """Write exactly ``path`` (numpy would append .npy/.npz to a name without it): .npz keyed
    by output name, .npy for the one output."""
    with atomic_writer(path) as f:
        if path.suffix.lower() == ".npz":
            np.savez(f, **outputs)
        else:
            np.save(f, next(iter(outputs.values())))


def _sample_outputs(graph: Graph, engine: str, model: Path, args: argparse.Namespace,
                    samples: list[dict[str, np.ndarray]]):
    """Yield (outputs, cycles) per sample from the chosen engine."""
    if engine == "reference":
        for sample in samples:
            yield run(graph, sample), 0
        return
    options = BuildOptions(target=args.target if engine == "emulated" else engine,
                           emulate=args.target, patches=args.patches,
                           input_quantize=args.input_quantize)
    device = device_graph(graph, options)
    artefact = cached_build(model, engine, emulate=args.target, graph=graph,
                            patches=args.patches, input_quantize=args.input_quantize)
    device_samples = (host_side_inputs(graph, device, sample) for sample in samples)
    for result in run_samples(device, engine, artefact, device_samples):
        yield result.outputs, result.cycles


#: What `infer --input` reads as a photo (anything else as .npy / .npz arrays).
PHOTO_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm",
                  ".pgm")


def _photo_inputs(graph: Graph, args: argparse.Namespace) -> tuple[dict[str, np.ndarray],
                                                                   list[Path], list[str]]:
    """`infer --input PHOTO|FOLDER`: the inputs made as `pack` made the model's data (the
    preprocessing its image or export recorded), the files, and a name per output."""
    if len(graph.inputs) != 1:
        raise DataError("photos are for a model with exactly one input")
    files = files_under(args.input) if args.input.is_dir() else [args.input]
    if not files:
        raise DataError(f"{args.input} holds no files")
    classes = graph.tensor(graph.outputs[0]).shape[-1]
    if args.data:
        _check_data_image(graph, args.model, args.data, classes)
        found = labels.of_image(args.data, classes)
    else:
        found = labels.read_sidecar(args.model, classes)
    make = recorded_maker(InputSpec.of(graph), found.preprocess if found else "",
                          args.preprocess)
    inputs = {graph.inputs[0]: np.stack([make(f) for f in files])}
    return inputs, files, class_labels(found.class_names if found else (), classes)


def _check_data_image(graph: Graph, model: Path, image: Path, classes: int) -> None:
    """`infer --data IMAGE`: refuse an image packed for another model (its header records
    the model's sha256, input size, classes and input quantization), as `train` does."""
    x = graph.tensor(graph.inputs[0])
    quantized = (x.quant is not None and not x.quant.per_channel
                 and np.dtype(x.dtype).kind in "iu")
    check_image_model(read_header(image), image, file_sha256(model, "model"), x.nbytes,
                      classes, x.quant.scalar_scale if quantized else 0.0,
                      x.quant.scalar_zero_point if quantized else 0, f"the model {model}")


def confidences(graph: Graph, scores: np.ndarray) -> np.ndarray:
    """Output 0 of each sample as class probabilities: dequantized, and through a softmax
    unless the model ends in one (its outputs already are)."""
    out = graph.tensor(graph.outputs[0])
    values = scores.reshape(len(scores), -1).astype(np.float64)
    if out.quant is not None and not out.quant.per_channel:
        values = out.quant.scalar_scale * (values - out.quant.scalar_zero_point)
    softmax = final_softmax(graph)
    if softmax is not None and softmax.type == "SOFTMAX":
        return values
    shifted = np.exp(values - values.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def _print_photo_classes(graph: Graph, files: list[Path], names: list[str],
                         scores: np.ndarray, root: Path) -> None:
    """Each photo's class and its probability; for a folder of class subfolders, the
    accuracy against the subfolder names (files in no named class are not counted)."""
    probabilities = confidences(graph, scores)
    right = counted = 0
    for path, p in zip(files, probabilities):
        k = int(np.argmax(p))
        print(f"{path}: {names[k]} ({p[k]:.2f})")
        truth = path.parent.name if root.is_dir() and path.parent != root else None
        if truth in names:
            counted += 1
            right += names[k] == truth
    if counted:
        print(f"accuracy against the class folders: {right}/{counted} "
              f"({100 * right / counted:.1f} %)")


def cmd_infer(args: argparse.Namespace) -> None:
    graph = load_model(args.model)
    photos = args.input.is_dir() or args.input.suffix.lower() in PHOTO_SUFFIXES
    shape = list(graph.tensor(graph.outputs[0]).shape)
    classifies = photos and int(np.prod(shape[1:])) == shape[-1]  # one score per class
    if args.output is None and not classifies:
        why = (f" (output 0 of {args.model.name} is {shape}, not one score per class)"
               if photos else "")
        raise UserError(f"--input {args.input}: pass --output Y.npy for its outputs{why}")
    if args.output is not None:
        check_output(args.output, [("--input", args.input), ("MODEL", args.model)],
                     "--output", Replaces("outputs of this model", outputs_of(graph)),
                     args.force)
        check_output_path(graph, args.output)
    files, names = [], []
    if photos:
        inputs, files, names = _photo_inputs(graph, args)
    else:
        inputs = read_inputs(graph, args.input)
    batch = next(iter(inputs.values())).shape[0]
    samples = [{n: x[i:i + 1] for n, x in inputs.items()} for i in range(batch)]
    results: dict[str, list[np.ndarray]] = {n: [] for n in graph.outputs}
    cycles = []
    progress = tqdm(_sample_outputs(graph, args.engine, args.model, args, samples),
                    total=batch, desc=f"infer ({args.engine})", unit="sample", disable=None,
                    leave=False)
    for outputs, count in progress:
        cycles.append(count)
        for name, y in outputs.items():
            results[name].append(y.reshape(y.shape[1:]) if y.shape[:1] == (1,) else y)
    stacked = {n: np.stack(v) for n, v in results.items()}
    if classifies:
        _print_photo_classes(graph, files, names, stacked[graph.outputs[0]], args.input)
    note = (f", {int(np.mean(cycles)):,} instructions per inference ({args.engine})"
            if args.engine in ("qemu", "emulated") else "")
    if args.output is not None:
        write_outputs(args.output, stacked)
        print(f"{batch} sample(s) -> {args.output}{note}", file=sys.stderr)
    elif note:
        print(f"{batch} sample(s){note}", file=sys.stderr)


def cmd_build(args: argparse.Namespace) -> None:
    result = api.run_build(args)
    out, plan = result.project, result.plan
    train = plan.options.train if plan.training is not None else None
    placement = plan.placement
    if args.input_quantize == "auto" and plan.options.input_quantize == "host":
        print(f"--input-quantize auto: host (the float32 input does not fit the "
              f"{plan.board.name} budget on the device; the host quantizes it to int8)")
    print(f"{out}/: {len(plan.code.layers)} layers, arena {plan.arena.arena_bytes:,} B "
          f"({plan.arena.arena_bytes / plan.arena.lower_bound:.2f}x lower bound), "
          f"flash data {plan.code.flash_bytes:,} B")
    print(f"SRAM {placement.total / 1024:.1f} KB of the {plan.board.name} budget "
          f"{placement.budget / 1024:.1f} KB{'' if placement.fits else ' (DOES NOT FIT)'}"
          f"{placement.outside_text()}; details in {out / 'memory_report.txt'}")
    if not placement.fits:  # only a host build gets here: a board refuses what does not fit
        print(f"a {args.target} build holds no board's budget: it runs on this host, but the "
              f"{plan.board.name} would refuse it (`zocodegen inspect {args.model} --target "
              f"{plan.board.name}` names what fits)")
    if plan.training is not None:
        if args.estimator is None and train.estimator != DEFAULT_ESTIMATOR:
            print(f"--estimator: {train.estimator} (the default {DEFAULT_ESTIMATOR} does "
                  f"not fit the {plan.board.name} budget; --estimator sets it)")
        if args.train == "auto":
            print(f"--train auto: {train.mode} training (full "
                  f"{'fits' if train.mode == 'full' else 'does not fit'} the "
                  f"{plan.board.name} budget" + ("" if placement.fits else
                                                  f", nor does this {train.mode} build") + ")")
        items = {i.name: i.bytes for i in plan.training.ram_items()}
        print("training: " + ", ".join(f"{k} {v:,} B" for k, v in items.items()))
        if args.bp_layers == "auto":
            chosen = sum(1 for layer in plan.training.layers
                         if layer.mode == "ZO_TRAIN_BP" and layer.defines)
            print(f"--bp-layers auto: the last {chosen} trainable layer(s) by back-propagation "
                  f"(the largest C that fits the {plan.board.name} budget)")
        if train.mode == "sparse" and args.blocks == "auto":
            print(f"--blocks auto: {plan.training.blocks} block(s) (the fewest that fit the "
                  f"{plan.board.name} budget)")
        elif (train.mode == "sparse" and args.blocks is None
              and plan.training.blocks != DEFAULT_BLOCKS):
            print(f"--blocks: {plan.training.blocks} block(s), the fewest that fit the "
                  f"{plan.board.name} budget ({DEFAULT_BLOCKS} do not; --blocks N sets them)")
    if plan.options.library:
        print(f"next: include {out / 'library.mk'} in your firmware's Makefile and "
              f"#include \"zo_library.h\" (it states the SRAM); the example: make -C "
              f"{out / 'example'}")
        return
    goals = "make native | make qemu" + (" | make firmware  (or: pio run)"
                                          if args.target in TARGET_NAMES else "")
    print(f"next: cd {out} && {goals}")
    if plan.options.field:
        print("a field trainer: put the image packed with --model on its card (zocodegen card "
              "write IMAGE DEVICE); natively ZO_CARD=IMAGE build/native/model (docs/sdcard.md)")


def _say(text: str) -> None:
    """A run's progress line, on stdout: stderr is for errors, one line each (the
    contract's refusals count its lines)."""
    print(text)


def _loss(nats: float) -> str:
    """A mean loss, and when it is the int8 cross-entropy's cap, that it is."""
    capped = nats >= LOSS_CAP_NATS - 5e-4
    return f"{nats:.3f}" + (f" (the cap: every record's loss saturates at "
                            f"{LOSS_CAP_NATS:.0f} nats)" if capped else "")


def cmd_simulate(args: argparse.Namespace) -> None:
    result = api.run_simulate(args, _say, None)
    config = train_config(args)
    acc = ""
    if result.accuracy_before is not None and result.accuracy_after is not None:
        acc = (f"; {result.accuracy_split} accuracy {100 * result.accuracy_before:.1f}% -> "
               f"{100 * result.accuracy_after:.1f}%")
    guard = f", {result.rollbacks} rollback(s)" if config.guard else ""
    step = (f"int8 updates of {config.b_zo} bit(s)" if config.integer_only
            else f"eta {result.lr:g}")
    window = ("the one step" if result.loss_window == result.steps == 1 else
              f"mean of the first / last {result.loss_window} step(s)")
    if result.first_step == result.steps:  # no step ran: no loss to show
        print(f"--resume: the run had finished (step {result.steps} of {result.steps}): no "
              f"steps left to train{acc}", file=sys.stderr)
    else:
        print(f"{result.steps} steps at {step}{guard}, loss {_loss(result.first_loss)} -> "
              f"{_loss(result.last_loss)} ({window}){acc}; "
              f"{result.forward_evaluations:,} query forwards", file=sys.stderr)
    if result.accuracy_note:
        print(result.accuracy_note, file=sys.stderr)
    if result.unchanged:
        print(f"{NO_IMPROVEMENT}: {result.unchanged}", file=sys.stderr)
    if result.unvalidated:  # a kept result whose confirmation saw only fitted records
        print(f"the result is the last trained parameters, {result.unvalidated}",
              file=sys.stderr)
    if result.confusion is not None:
        print(f"{result.accuracy_split} split after training:\n"
              + format_confusion(result.confusion, result.class_names), file=sys.stderr)
    print(f"{args.output}/: checkpoint.bin, metrics.csv, curves.png, tensorboard/"
          + (", confusion.csv" if result.confusion is not None else ""), file=sys.stderr)


def _val_share(packed) -> str:
    """The share of the images the val split really took: set aside per class, it rounds
    (2 of 8 is 0.25 whatever fraction asked for it), so the fraction asked is not it."""
    val = packed.counts["val"]
    train = [t + h for t, h in zip(packed.counts["train"],  # held out after val was
                                   packed.counts.get("held-out", [0] * len(val)))]
    totals = [v + t for v, t in zip(val, train) if v + t]
    taken = [v for v, t in zip(val, train) if v + t]
    if len(set(totals)) == 1 and len(set(taken)) == 1:
        return (f"{taken[0]} of each class's {totals[0]} images, a share of "
                f"{taken[0] / totals[0]:.3g}")
    return f"a share of {sum(val) / (sum(val) + sum(train)):.3g} of the images"


def cmd_pack(args: argparse.Namespace) -> None:
    packed = api.run_pack(args)
    layout = packed.layout
    counts = ", ".join(f"{layout.count(s):,} {s}" + (f" ({layout.held_out:,} of them held out)"
                                                     if s == "val" and layout.held_out else "")
                       for s in IMAGE_SPLITS if layout.count(s))
    order = ("the order of the data" if packed.shuffled is None
             else f"shuffled order (seed {packed.shuffled})")
    print(f"{args.output}: {counts} records of {layout.sectors_per_record} sector(s) "
          f"({list(layout.input_shape)} {layout.dtype}, {layout.num_classes} classes); train "
          f"in {order}")
    area = layout.checkpoint_sectors * SECTOR_BYTES
    print(f"{layout.image_sectors:,} sectors, {layout.image_bytes:,} B; checkpoint area "
          f"{layout.checkpoint_sectors:,} sectors ({area:,} B) from LBA {layout.checkpoint_lba:,}")
    for line in _class_lines(packed, args):
        print(line)
    if layout.preprocess:
        print(f"inputs made by: {layout.preprocess}")
    if args.model is not None:
        if layout.input_scale is not None:
            quant = f"input scale {layout.input_scale:.6g} zero point {layout.input_zero_point}"
        elif packed.quantized_by_model is not None:
            scale, zero_point = packed.quantized_by_model
            quant = (f"{layout.dtype} input, quantized by the model with scale {scale:.6g} "
                     f"zero point {zero_point}")
        else:
            quant = f"{layout.dtype} input, not quantized by the model"
        print(f"for {args.model.name}: sha256 {layout.model_sha256.hex()[:16]}..., {quant}")
    folder = args.data.is_dir()
    if packed.val_fraction is not None:
        print(f"val: {layout.checked_val:,} records set aside from the training images "
              f"({_val_share(packed)}, raised from --val-fraction {args.val_fraction:g} so "
              f"that the training guard has the {MIN_VAL_RECORDS} it needs)")
    elif packed.val_derived:
        print(f"val: {layout.checked_val:,} records set aside from "
              + ("the training images" if folder else "x") + f" ({_val_share(packed)}; "
              f"--val-fraction {args.val_fraction:g} per class"
              + (")" if folder else f", as simulate does on {args.data.name})"))
    if layout.held_out:
        print(f"held-out: {layout.held_out:,} records set aside from the training images for "
              "the training guard's end confirmation: no step trains on them and no check "
              "sees them, so a result it keeps is a validated improvement")
    elif layout.count("val"):
        # with a test split the run's test accuracy is the independent measure, and the run
        # does not call its result unvalidated (guard.unvalidated)
        print(f"held-out: none ({packed.held_out}), so the end's confirmation compares records "
              "the run may have trained on, "
              + ("and the test split's accuracy measures the result" if layout.count("test")
                 else "and a run on them says it cannot confirm a gain"))
    if not layout.count("test"):
        test = (f"{args.data}/test/<class>/" if folder else "x_test/y_test")
        print("test: none, so simulate and train report validation accuracy (the split the "
              f"guard also selects on, so it flatters); for an independent measure add {test}"
              if layout.count("val") else "test: none and val: none, so simulate and train "
              f"report no accuracy; add {test}")
    if layout.checked_val < MIN_VAL_RECORDS:
        fix = ("add a val/<class>/ folder of more images or a larger --val-fraction" if folder
               else "add x_val/y_val or pack with a larger --val-fraction")
        print(f"zocodegen: warning: {layout.checked_val} validation records: the training "
              f"guard and --lr auto (on by default) need {MIN_VAL_RECORDS}: {fix}, or train "
              "with --no-guard and a fixed --lr", file=sys.stderr)
    if packed.ignored:
        print(f"ignored arrays: {', '.join(packed.ignored)}")
    if packed.full_training_bytes is not None and area < packed.full_training_bytes:
        print(f"zocodegen: warning: the checkpoint area ({area:,} B) is smaller than the "
              f"{packed.full_training_bytes:,} B checkpoint of full training; the device can "
              "only save a smaller (sparse) one there", file=sys.stderr)


def _class_lines(packed: api.Packed, args: argparse.Namespace) -> list[str]:
    """The class -> output mapping and the records of each class per split."""
    layout = packed.layout
    names = layout.class_names or tuple(str(k) for k in range(layout.num_classes))
    lines = []
    if layout.class_names:
        used = len(layout.class_names)
        spare = (f"; outputs {used}..{layout.num_classes - 1} of the model's "
                 f"{layout.num_classes} have no class" if args.model is not None
                 and used < layout.num_classes else "")
        how = f", by {packed.class_order}" if packed.class_order else ""
        lines.append(f"classes: {', '.join(f'{k} {n}' for k, n in enumerate(names))} (the "
                     f"model's outputs 0..{used - 1}{how}{spare})")
        if "alphabetical" in packed.class_order and args.model is not None:
            lines.append("  (a pre-trained model may order its classes otherwise: give its "
                         f"order with --classes {','.join(names)} rearranged)")
    if packed.counts:
        shown = len(layout.class_names) or layout.num_classes
        lines.append("per class: " + "; ".join(
            f"{split} " + ", ".join(f"{c} {n}" for n, c in zip(names[:shown], counts))
            for split, counts in packed.counts.items()))
    return lines


def cmd_train(args: argparse.Namespace) -> None:
    summary = api.run_train(args, _say, None)
    acc = ""
    if summary.accuracy_after is not None:
        before = ("" if summary.accuracy_before is None
                  else f"{100 * summary.accuracy_before:.1f}% -> ")
        acc = (f", {summary.accuracy_split} accuracy {before}"
               f"{100 * summary.accuracy_after:.1f}%")
    resumed = f" (resumed at step {summary.first_step})" if summary.first_step else ""
    print(f"{args.output}: step {summary.steps}{resumed}{acc}; {summary.seconds:.1f} s, "
          f"{summary.resets} reset(s), {summary.retransmissions} retransmission(s), "
          f"{summary.dropped_frames} bad frame(s)")
    if summary.accuracy_note:
        print(summary.accuracy_note)
    if summary.unchanged:
        print(f"{NO_IMPROVEMENT}: {summary.unchanged}")


def cmd_monitor(args: argparse.Namespace) -> None:
    if args.port:
        monitor(open_port(args.port, args.baud), args.duration)
        return
    # the board project's firmware, emulated
    device = open_device(emulated=args.emulated, baud=args.baud)
    try:
        monitor(device.connect(), args.duration)
    finally:
        device.close()


def cmd_card_write(args: argparse.Namespace) -> None:
    card.write_card(args.image, args.target, args.yes, say=_say, force=args.force)


def cmd_card_read(args: argparse.Namespace) -> None:
    found = card.read_card(args.source, args.output, args.force)
    print("\n".join(card.describe(args.source, args.output, found)))


def cmd_export(args: argparse.Namespace) -> None:
    result = api.run_export(args)
    if result.tensors:
        print(f"{result.model}: {result.tensors} trained tensors written (step {result.step})",
              file=sys.stderr)
    else:
        why = (f"{NO_IMPROVEMENT}: the guard kept the start (no check beat it, or the result "
               "did not confirm against it: the run's last lines say which)"
               if result.best_step == 0 else "the checkpoint's parameters are the model's own")
        print(f"{result.model}: 0 trained tensors (step {result.step}): the file equals the "
              f"input model {args.model}; {why}", file=sys.stderr)
    if result.labels is not None:
        print(f"{result.labels}: its class names and preprocessing, for `zocodegen infer "
              f"{result.model} --input photo.jpg`", file=sys.stderr)


def cmd_replay(args: argparse.Namespace) -> None:
    check_output(args.output, [("--check", args.check), ("--scalars", args.scalars),
                               ("MODEL", args.model)], replaces=checkpoint.CHECKPOINT_FILE,
                 force=args.force)
    graph = load_model(args.model)
    # the device's checkpoint is read, and compared, before anything is written
    expected = checkpoint.read_bytes(args.check) if args.check else None
    device = checkpoint.decode(expected, str(args.check)) if args.check else None
    blob = replay_build(args.model, graph, args.build, args.scalars,
                        device.step if device else None)
    if expected is not None and blob != expected:
        # checkpoints end in their own CRC, so the CRC of the whole file is a constant: name
        # the parameters' digest instead
        raise UserError(f"the replay differs from {args.check} (parameters sha256 "
                        f"{checkpoint.parameters_sha256(blob)[:16]} against "
                        f"{checkpoint.parameters_sha256(expected)[:16]}): the scalars, the build "
                        f"or the model are not the run's; nothing written to {args.output}")
    checkpoint.save_bytes(args.output, blob)
    steps = checkpoint.decode(blob).step
    print(f"{args.output}: {steps} steps replayed from {args.scalars}")
    if expected is not None:
        print(f"{args.check}: identical, byte for byte ({len(blob)} bytes)")


def cmd_flash(args: argparse.Namespace) -> None:
    project = flash_project(args.project, port=args.port, verbose=args.verbose)
    print(f"{args.project}: flashed to the {project.target} board; next: zocodegen monitor "
          "--port PORT (its ST-LINK virtual COM port, /dev/ttyACM0 on Linux)")



def cmd_device_time(args: argparse.Namespace) -> None:
    target = args.target or device_time.recorded_target(args.run)
    estimate = device_time.estimate(args.run, target, args.baud,
                                    lambda text: print(text, file=sys.stderr),
                                    None if args.ceiling is None else args.ceiling / 100,
                                    args.shares)
    print("\n".join(device_time.describe(args.run, estimate)))
    if len(estimate.evaluations) >= 2:
        device_time.draw_hours(args.run, estimate)
        print(f"  accuracy against device hours: {args.run / 'curves.png'}")


COMMANDS = {"inspect": cmd_inspect, "infer": cmd_infer, "build": cmd_build,
            "simulate": cmd_simulate, "pack": cmd_pack, "train": cmd_train,
            "monitor": cmd_monitor, "export": cmd_export, "replay": cmd_replay,
            "flash": cmd_flash, "device_time": cmd_device_time,
            "fleet_serve": cli_fleet.cmd_fleet_serve, "fleet_join": cli_fleet.cmd_fleet_join,
            "fleet_local": cli_fleet.cmd_fleet_local, "card_write": cmd_card_write,
            "card_read": cmd_card_read}


#: The folder each fleet command writes (Flower's home, keys, rounds): a fleet command that
#: fails leaves none of them empty (simulate and train see to their RUN in ``api``).
FLEET_FOLDERS = {"fleet_serve": "output", "fleet_local": "output", "fleet_join": "state"}


class Terminated(BaseException):
    """SIGTERM arrived (``kill``, ``systemctl stop``, ``docker stop``). A BaseException, as
    KeyboardInterrupt is, so that no ``except Exception`` takes it for an error to handle."""


@contextmanager
def _terminate_unwinds() -> Iterator[None]:
    """While a command runs, SIGTERM unwinds it as Ctrl-C does, so what it started is stopped
    (Flower's processes, an emulator) and what it writes stays whole. Python's default is to
    die on the spot, leaving a `fleet serve`'s SuperLink listening with nobody to stop it.
    Only the main thread may set handlers; called from another one (a test, a notebook's
    worker) the process's handling is left as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: object) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version (0) or a usage error (2, one line printed)
        return exc.code if isinstance(exc.code, int) else 2
    except KeyboardInterrupt:
        return interrupted()
    try:
        folder = FLEET_FOLDERS.get(args.handler)
        with _terminate_unwinds(), (no_empty_folders_on_failure(getattr(args, folder))
                                    if folder else nullcontext()):
            COMMANDS[args.handler](args)
    except UserError as exc:
        message = " ".join(str(exc).split("\n"))  # the contract is one line
        print(f"zocodegen: error: {message}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and the like: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a full disk, a vanished file or port: foreseeable, one line
        if os.environ.get("ZOCODEGEN_DEBUG"):
            traceback.print_exc()
        # a name, never a file descriptor's number ("Is a directory: 3")
        where = (f": {exc.filename}" if isinstance(exc.filename, (str, bytes, os.PathLike))
                 and exc.filename else "")
        print(f"zocodegen: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return interrupted()
    except Terminated:
        print("zocodegen: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except Exception as exc:  # an internal bug: say so, keep the traceback for debugging
        if os.environ.get("ZOCODEGEN_DEBUG"):
            traceback.print_exc()
        print(f"zocodegen: internal error: {type(exc).__name__}: {exc} "
              "(set ZOCODEGEN_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
