"""The Python API: the commands of the command line as functions that return results, for
notebooks and scripts (docs/api.md). The command line is a thin layer over these.

Options are the command line's, named as its long options with ``_`` for ``-``
(``--lr`` -> ``lr``, ``--input-quantize`` -> ``input_quantize``). Their defaults, choices and
checks are the command line's own: each call reads them from the same argparse definitions
(``cli_options``), so the two cannot drift apart. Bad input raises
:class:`zocodegen.errors.UserError` (or its subclass ``DataError``) with the one line the
command would print.

    import zocodegen
    zocodegen.build("model.tflite", target="stm32f746", train="sparse", steps=500)
    packed = zocodegen.pack("photos/", "data.img", model="model.tflite")
    run = zocodegen.simulate("model.tflite", "data.img", "run", epochs=1)
    print(run.accuracy_before, run.accuracy_after)
"""
from __future__ import annotations

import argparse
import numbers
import os
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any

from .cli_options import build_parser, path as path_option, set_train_options, train_config
from .board_fit import BoardFit, board_fit
from .codegen.project import BuildOptions, ProjectPlan
from .errors import UserError
from .files import check_output, writing_run
from .frontends import load_model
from .host.device_time import link_seconds_per_record
from .host.devices import open_device
from .host.trainer import Trainer, TrainSummary
from .projects import generate
from .summary import ModelSummary, summarize
from .formats.link import DEFAULT_BAUD
from .target import DEFAULT_TARGET, TARGET_NAMES, Target, load_target
from .training import checkpoint, labels
from .training.data import Packed
from .training.data import pack as pack_data
from .training.estimators import REGISTRY
from . import model_export
from .training.export import export_checkpoint
from .training.runner import RunSummary, Say, silent
from .training.runner import simulate as simulate_run

PathLike = str | Path
#: Options that take a Python function too, not only the command line's text.
CALLABLE_OPTIONS = frozenset({"preprocess"})
#: simulate() and train() print nothing unless asked: progress=True prints the command's
#: lines and bars, a function (e.g. ``logging.info``) is given each line instead.
Progress = bool | Callable[[str], None]


def _progress(progress: Progress) -> tuple[Say, bool | None]:
    """progress= -> (where the lines go, whether bars show)."""
    if callable(progress):
        return progress, False
    if not isinstance(progress, bool):
        raise TypeError(f"progress takes True, False or a function, got "
                        f"{type(progress).__name__}")
    return (print, None) if progress else (silent, False)


def _subcommands() -> argparse._SubParsersAction:
    """The command line's subcommands, as cli_options defines them."""
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def options(command: str, positional: dict[str, Any], given: dict[str, Any]
            ) -> argparse.Namespace:
    """The namespace the command line would parse: its defaults, then ``given`` checked by
    the option's own type and choices. Unknown names raise TypeError, as for any function."""
    sub = _subcommands().choices[command]
    actions = {a.dest: a for a in sub._actions if a.dest != "help"}
    namespace = argparse.Namespace(**{d: a.default for d, a in actions.items()},
                                   **sub._defaults)
    for name, value in {**positional, **given}.items():
        action = actions.get(name)
        if action is None:
            raise TypeError(f"{command}() got an unexpected option '{name}'; its options: "
                            f"{', '.join(sorted(d for d in actions if d not in positional))}")
        if value is not None:
            value = _typed(command, name, action, value)
        if value is not None and action.choices is not None and value not in action.choices:
            raise UserError(f"{name}: choose one of {', '.join(map(str, action.choices))}, "
                            f"got {value!r}")
        setattr(namespace, name, value)
    missing = [d for d, a in actions.items() if a.required and getattr(namespace, d) is None]
    if missing:
        raise TypeError(f"{command}() missing required option(s): {', '.join(missing)}")
    for group in sub._mutually_exclusive_groups:
        chosen = [a.dest for a in group._group_actions if getattr(namespace, a.dest)]
        if len(chosen) > 1 or (group.required and not chosen):
            raise TypeError(f"{command}() takes exactly one of "
                            f"{', '.join(a.dest for a in group._group_actions)}")
    return namespace


def _typed(command: str, name: str, action: argparse.Action, value: Any) -> Any:
    """``value`` for option ``name`` as the command line's parser makes it from text, once its
    Python type is checked: a switch takes a bool, a file a str or os.PathLike, any other
    option text or a number (read as its text). A wrong type is a TypeError naming the
    option: as text, a list, an array or bytes would pass on as a file name or a value."""
    def wrong(expected: str) -> TypeError:
        return TypeError(f"{command}() option {name} takes {expected}, got "
                         f"{type(value).__name__}")
    if action.nargs == 0:  # --no-guard, --force, ...
        if not isinstance(value, bool):
            raise wrong("True or False")
        return value
    if name in CALLABLE_OPTIONS and callable(value):
        return value
    if action.type is path_option:
        if not isinstance(value, (str, os.PathLike)):
            raise wrong("a path (str or os.PathLike)")
        try:
            return path_option(os.fspath(value))
        except argparse.ArgumentTypeError as exc:
            raise UserError(f"{name}: {exc}") from None
    if isinstance(value, bool) or not isinstance(value, (str, numbers.Real)):
        also = ", or a function" if name in CALLABLE_OPTIONS else ""
        raise wrong(f"text or a number, as on the command line{also}")
    if action.type is None:
        return str(value)
    try:
        return action.type(str(value))
    except argparse.ArgumentTypeError as exc:
        raise UserError(f"{name}: {exc}") from None


@dataclass(frozen=True)
class Inspection:
    """`inspect`: the per-layer summary, and the board when one was named with what of the
    model fits it (inference, full and sparse training, estimated step times)."""

    summary: ModelSummary
    target: Target | None
    board_fit: BoardFit | None = None


@dataclass(frozen=True)
class BuildResult:
    """`build`: the generated project and its plan (memory, layer code, training tables;
    ``plan.options`` has every auto choice resolved)."""

    project: Path
    plan: ProjectPlan


@dataclass(frozen=True)
class ExportResult:
    """`export`: the model file written and how many trained tensors it took."""

    model: Path
    tensors: int
    step: int
    best_step: int | None  # the guard's best (0: it kept the start; None: no guard ran)
    labels: Path | None = None  # OUT.labels.json: the run's class names (training/labels.py)


def inspect(model: PathLike, **given: Any) -> Inspection:
    """Per-layer shapes, quantization, parameters and MACs of a model."""
    args = options("inspect", {"model": model}, given)
    return run_inspect(args)


def run_inspect(args: argparse.Namespace) -> Inspection:
    graph = load_model(args.model)
    if not args.target:
        if getattr(args, "layers", None) is not None:
            raise UserError(f"--layers {args.layers} asks what trains on a board: add "
                            f"--target ({' or '.join(TARGET_NAMES)})")
        return Inspection(summarize(graph), None)
    board = load_target(args.target)
    # the command line's default run (every default of `simulate`), its mode set per line
    layers = {} if getattr(args, "layers", None) is None else {"layers": args.layers}
    run = train_config(options("simulate", {"model": args.model, "data": args.model,
                                            "output": "run"}, layers))
    return Inspection(summarize(graph), board,
                      board_fit(graph, board, run, link_seconds_per_record(graph)))


def build(model: PathLike, **given: Any) -> BuildResult:
    """Generate the firmware project of a model (``train="full"|"sparse"`` for training);
    raises BudgetError naming what to try when it does not fit the board."""
    args = options("build", {"model": model}, given)
    return run_build(args)


def run_build(args: argparse.Namespace) -> BuildResult:
    out = args.output or Path(f"{Path(args.model).stem}_{args.target}")
    train = None
    ignored = set_train_options(args)
    if args.recompute != "auto":  # it places a training build's saved activations
        ignored.append("--recompute")
    if args.train == "none" and ignored:
        raise UserError(f"{', '.join(ignored)} set training options, but --train none builds "
                        "inference only: add --train full or --train sparse")
    if args.train != "none":
        if args.epochs is not None:
            raise UserError(f"--epochs {args.epochs}: build takes --steps T, or no --steps: "
                            "the device then trains one epoch of its image's training "
                            "records (--epochs is simulate's)")
        check_firmware_estimator(args.estimator, "the device")
        train = train_config(args)
    board = args.target in TARGET_NAMES
    if board and args.emulate is not None:
        raise UserError(f"--emulate {args.emulate} names the board a native or qemu build "
                        f"stands for; --target {args.target} is a board: drop --emulate")
    if not board and args.baud != DEFAULT_BAUD:
        raise UserError(f"--baud {args.baud} sets a board's serial link; --target "
                        f"{args.target} has none: drop --baud")
    plan = generate(args.model, BuildOptions(target=args.target,
                                             emulate=args.emulate or DEFAULT_TARGET,
                                             train=train, patches=args.patches,
                                             input_quantize=args.input_quantize,
                                             recompute=args.recompute, baud=args.baud,
                                             library=args.as_library, data_source=args.data_source,
                                             estimator_fit=args.estimator is None), out,
                    force=args.force)
    return BuildResult(Path(out), plan)


def check_firmware_estimator(estimator: str | None, where: str) -> None:
    """A board runs only the estimators that have firmware; the others are simulator
    baselines (build and `simulate --target` refuse them alike)."""
    if estimator is not None and not REGISTRY[estimator].firmware:
        raise UserError(f"--estimator {estimator} is a simulator baseline; {where} runs "
                        f"{', '.join(n for n, e in REGISTRY.items() if e.firmware)}")


def pack(data: PathLike, output: PathLike, **given: Any) -> Packed:
    """DATA.npz or a folder of files -> the data image the device trains from."""
    args = options("pack", {"data": data, "output": output}, given)
    return run_pack(args, progress=False)


def run_pack(args: argparse.Namespace, progress: bool = True) -> Packed:
    return pack_data(args.data, args.output, model_path=args.model, shuffle=args.shuffle,
                     checkpoint_bytes=None if args.checkpoint_kb is None
                     else args.checkpoint_kb * 1024, val_fraction=args.val_fraction,
                     held_out_fraction=args.held_out_fraction,
                     labels=args.labels, normalize=args.normalize, resize=args.resize,
                     classes=args.classes,
                     preprocess=args.preprocess, progress=progress, force=args.force)


def simulate(model: PathLike, data: PathLike, output: PathLike, progress: Progress = False,
             **given: Any) -> RunSummary:
    """Train in the bit-exact simulator; RUN/ gets checkpoint.bin, metrics.csv, curves."""
    args = options("simulate", {"model": model, "data": data, "output": output}, given)
    return run_simulate(args, *_progress(progress))


def run_simulate(args: argparse.Namespace, say: Say = silent, bars: bool | None = False
                 ) -> RunSummary:
    config = train_config(args)
    if args.resume and args.force:
        raise UserError("--resume continues the run in RUN, --force deletes it: choose one")
    if args.epochs is not None and args.steps is not None:
        raise UserError(f"--steps {args.steps} and --epochs {args.epochs} both set the run's "
                        "length: give one")
    if args.record_scalars:
        raise UserError("--record-scalars makes a device send its query sums for `zocodegen "
                        "replay` (build); the simulator computes the parameters itself: drop "
                        "--record-scalars")
    if args.target is not None:
        check_firmware_estimator(args.estimator, f"--target {args.target}")
    with writing_run(args.output):
        return simulate_run(args.model, args.data, args.output, config, epochs=args.epochs,
                            eval_every=args.eval_every, resume=args.resume, force=args.force,
                            say=say, progress=bars, target=args.target,
                            estimator_fit=args.estimator is None)


def train(image: PathLike, output: PathLike, progress: Progress = False, **given: Any
          ) -> TrainSummary:
    """Train on a device: a board (``port``), or firmware the host launches (``native``,
    ``qemu`` or ``emulated`` naming a built project), serving it ``image``."""
    args = options("train", {"image": image, "output": output}, given)
    return run_train(args, *_progress(progress))


def run_train(args: argparse.Namespace, say: Say = silent, bars: bool | None = False
              ) -> TrainSummary:
    for name in ("steps", "checkpoint_every"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if not Path(args.image).is_file():
        raise UserError(f"image not found: {args.image}")
    device = open_device(args.port, args.native, args.qemu, args.emulated, baud=args.baud,
                         say=say)
    with writing_run(args.output):
        return Trainer(device, args.image, args.output, steps=args.steps,
                       checkpoint_every=args.checkpoint_every, timeout=args.timeout,
                       force=args.force, model=args.model, progress=bars, log=say).run()


def export(model: PathLike, checkpoint_path: PathLike, output: PathLike) -> ExportResult:
    """Write a checkpoint's trained parameters into a copy of the model file (.tflite or
    .onnx, as ``output`` names it)."""
    args = options("export", {"model": model, "checkpoint": checkpoint_path,
                              "output": output}, {})
    return run_export(args)


def run_export(args: argparse.Namespace) -> ExportResult:
    inputs = [("MODEL", args.model), ("CHECKPOINT", args.checkpoint)]
    check_output(args.output, inputs, replaces=model_export.replaces(args.model),
                 force=args.force)
    graph = load_model(args.model)
    classes = graph.tensor(graph.outputs[0]).shape[-1]
    found = labels.of_run(Path(args.checkpoint), classes)  # refused before anything is written
    if found:  # the labels file beside the model is checked before the model is written
        check_output(labels.sidecar_path(Path(args.output)), inputs, replaces=labels.SIDECAR,
                     force=args.force)
    written = export_checkpoint(args.model, graph, args.checkpoint, args.output, args.force)
    ckpt = checkpoint.load(args.checkpoint)
    sidecar = labels.write_sidecar(Path(args.output), found) if found else None
    best = None if ckpt.best_step == checkpoint.NO_BEST else ckpt.best_step  # not 4294967295
    return ExportResult(Path(args.output), written, ckpt.step, best, sidecar)


def option_table() -> str:
    """The options of every API function, from the command line's definitions (the table
    in docs/api.md; ``python -m zocodegen.api`` prints it)."""
    commands = _subcommands()
    helps = {a.dest: a.help for a in commands._choices_actions}
    lines = []
    for name in ("inspect", "build", "pack", "simulate", "train", "export"):
        sub = commands.choices[name]
        lines += [f"### `zocodegen.{name}`", "", f"`zocodegen {name}`: {helps[name]}.", "",
                  "| option | command line | default | meaning |", "|---|---|---|---|"]
        for action in sub._actions:
            if action.dest == "help" or action.help == argparse.SUPPRESS:  # an old spelling
                continue
            flag = action.option_strings[-1] if action.option_strings else action.metavar
            default = "required" if action.required or not action.option_strings else (
                "" if action.default is None else f"`{action.default}`")
            meaning = " ".join((action.help or "").replace("%%", "%").split())
            lines.append(f"| `{action.dest}` | `{flag}` | {default} | {meaning} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(option_table())
