"""The ``zocodegen`` command line (DESIGN.md section 8).

Exit status: 0 success, 2 bad input or usage (one line on stderr, no traceback),
1 internal failure. Set ZOCODEGEN_DEBUG=1 to see tracebacks of internal failures.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

import numpy as np
from tqdm import tqdm

from . import __version__
from .errors import DataError, UserError
from .codegen import BUILD_TARGETS, BuildOptions
from .frontends import load_model
from .ir import Graph
from .build import cached_build, generate
from .engines import run_samples
from .reference import run
from .summary import format_summary, summarize
from .target import TARGET_NAMES, load_target
from .training import checkpoint
from .training.config import TrainConfig, parse_layer_list
from .training.export import export_checkpoint
from .training.runner import simulate

ENGINES = ("reference", "native", "qemu")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zocodegen",
        description="Turn an INT8 TFLite/ONNX model into Cortex-M7 firmware that runs and "
                    "trains it without back-propagation.")
    parser.add_argument("--version", action="version", version=f"zocodegen {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("inspect", help="per-layer shapes, quantization, parameters, MACs")
    p.add_argument("model", type=Path, metavar="MODEL")
    p.add_argument("--target", choices=TARGET_NAMES, help="also compare with a target's budget")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("infer", help="run the model on a batch of inputs")
    p.add_argument("model", type=Path, metavar="MODEL")
    p.add_argument("--input", type=Path, required=True, metavar="X.npy",
                   help="inputs with a leading batch axis (.npz keyed by input name when "
                        "the model has several inputs)")
    p.add_argument("--output", type=Path, required=True, metavar="Y.npy",
                   help="where to write outputs (.npz when the model has several outputs)")
    p.add_argument("--engine", choices=ENGINES, default="reference",
                   help="reference: the bit-exact numpy golden model; native: the generated C "
                        "built with the host compiler; qemu: the generated C on an emulated "
                        "Cortex-M7 (builds are cached by content hash)")
    p.add_argument("--target", choices=TARGET_NAMES, default="stm32f746",
                   help="the board whose memory budget native/qemu builds stand for "
                        "(default stm32f746)")
    p.set_defaults(func=cmd_infer)

    p = sub.add_parser("build", help="generate the firmware project (C sources, Makefile, "
                                     "PlatformIO project, memory report)")
    p.add_argument("model", type=Path, metavar="MODEL")
    p.add_argument("--target", choices=BUILD_TARGETS, required=True,
                   help="native (host gcc), qemu (mps2-an500), or a board")
    p.add_argument("-o", "--output", type=Path, metavar="DIR",
                   help="project directory (default: <model name>_<target>)")
    p.add_argument("--emulate", choices=TARGET_NAMES, default="stm32f746",
                   help="for native/qemu: the board whose SRAM budget applies (default "
                        "stm32f746)")
    p.add_argument("--train", choices=("none", "full", "sparse"), default="none",
                   help="also generate the on-device zeroth-order training engine")
    _add_train_options(p, default_queries=50)
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("simulate", help="zeroth-order training in the bit-exact numpy "
                                        "simulator (what the device computes)")
    p.add_argument("model", type=Path, metavar="MODEL")
    p.add_argument("--data", type=Path, required=True, metavar="DATA.npz",
                   help="x (N, *input shape) in the input dtype, y (N,) labels; optional "
                        "x_test/y_test for accuracy")
    p.add_argument("-o", "--output", type=Path, default=Path("run"), metavar="RUN",
                   help="run directory: checkpoint.bin, metrics.csv, curves.png (default run)")
    p.add_argument("--mode", choices=("full", "sparse"), default="full",
                   help="train all selected layers, or one block of them (--block K)")
    _add_train_options(p, default_queries=100)
    p.add_argument("--eval-every", type=int, metavar="K",
                   help="test accuracy every K steps (default: 20 times per run)")
    p.add_argument("--resume", action="store_true",
                   help="continue from RUN/checkpoint.bin")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("export", help="write trained parameters into a copy of the model")
    p.add_argument("model", type=Path, metavar="MODEL")
    p.add_argument("checkpoint", type=Path, metavar="CHECKPOINT")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT.tflite|OUT.onnx")
    p.set_defaults(func=cmd_export)
    return parser


def _add_train_options(p: argparse.ArgumentParser, default_queries: int) -> None:
    g = p.add_argument_group("training options (DESIGN.md section 4)")
    g.add_argument("--steps", type=int, default=100, metavar="T",
                   help="optimisation steps; the cosine schedule decays over them")
    g.add_argument("--epochs", type=int, metavar="E", help="simulate: T = E passes over x")
    g.add_argument("--queries", type=int, default=default_queries, metavar="Q",
                   help=f"perturbations per layer and step (default {default_queries})")
    g.add_argument("--batch", type=int, default=1, metavar="N",
                   help="samples per step (gradient accumulation)")
    g.add_argument("--lr", type=float, default=0.01, metavar="ETA")
    g.add_argument("--schedule", choices=("cosine", "constant"), default="cosine")
    g.add_argument("--seed", type=int, default=1, metavar="S")
    g.add_argument("--estimator", choices=("adaptive", "wp", "np", "mezo"), default="adaptive",
                   help="adaptive: WP where a layer has fewer weights than outputs, else NP; "
                        "mezo: model-wise baseline with Q x layers queries (simulator only)")
    g.add_argument("--no-scaling", action="store_true",
                   help="no gradient-norm / quantization-aware learning-rate scaling")
    g.add_argument("--layers", metavar="LIST",
                   help="trainable-layer indices, e.g. 0,2,5-7 (default: all)")
    g.add_argument("--blocks", type=int, default=4, help="sparse mode: number of blocks")
    g.add_argument("--block", metavar="K", help="sparse mode: the block to train")


def _train_config(args: argparse.Namespace, mode: str) -> TrainConfig:
    block = None
    if args.block is not None:
        if args.block == "auto":
            raise UserError("--block auto (on-device block selection) arrives with the STM32 "
                            "targets work (issue 6); choose a block with --block K")
        try:
            block = int(args.block)
        except ValueError:
            raise UserError(f"--block expects a block index, got '{args.block}'") from None
    return TrainConfig(steps=args.steps, queries=args.queries, batch=args.batch, lr=args.lr,
                       schedule=args.schedule, seed=args.seed, estimator=args.estimator,
                       scaling=not args.no_scaling, layers=parse_layer_list(args.layers),
                       mode=mode, blocks=args.blocks, block=block)


def cmd_inspect(args: argparse.Namespace) -> None:
    graph = load_model(args.model)
    summary = summarize(graph)
    budget = None
    if args.target:
        t = load_target(args.target)
        budget = {"target": t.name, "sram_budget_bytes": t.sram_budget_bytes,
                  "flash_bytes": t.flash_bytes}
    if args.json:
        data = summary.as_dict()
        if budget:
            data["target"] = budget
        print(json.dumps(data, indent=2))
    else:
        print(format_summary(summary, budget))


def read_inputs(graph: Graph, path: Path) -> dict[str, np.ndarray]:
    """Load X.npy / X.npz and check it against the model's inputs (batch axis first)."""
    try:
        loaded = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (ValueError, OSError, EOFError) as exc:
        raise DataError(f"{path}: not a readable .npy/.npz file ({exc})") from None
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
        if x.ndim != len(sample) + 1 or tuple(x.shape[1:]) != tuple(sample):
            raise DataError(f"{path}: input '{name}' must have shape (N, "
                            f"{', '.join(map(str, sample))}), got {tuple(x.shape)}")
        if batch is not None and x.shape[0] != batch:
            raise DataError(f"{path}: inputs disagree on the batch size")
        batch = x.shape[0]
    if not batch:
        raise DataError(f"{path}: the batch is empty")
    return arrays


def write_outputs(graph: Graph, path: Path, outputs: dict[str, np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if len(outputs) == 1:
        np.save(path, next(iter(outputs.values())))
    else:
        np.savez(path, **outputs)


def _sample_outputs(graph: Graph, engine: str, model: Path, target: str,
                    samples: list[dict[str, np.ndarray]]):
    """Yield (outputs, cycles) per sample from the chosen engine."""
    if engine == "reference":
        for sample in samples:
            yield run(graph, sample), 0
        return
    artefact = cached_build(model, engine, emulate=target, graph=graph)
    for result in run_samples(graph, engine, artefact, samples):
        yield result.outputs, result.cycles


def cmd_infer(args: argparse.Namespace) -> None:
    graph = load_model(args.model)
    inputs = read_inputs(graph, args.input)
    batch = next(iter(inputs.values())).shape[0]
    samples = [{n: x[i:i + 1] for n, x in inputs.items()} for i in range(batch)]
    results: dict[str, list[np.ndarray]] = {n: [] for n in graph.outputs}
    cycles = []
    progress = tqdm(_sample_outputs(graph, args.engine, args.model, args.target, samples),
                    total=batch, desc=f"infer ({args.engine})", unit="sample", disable=None,
                    leave=False)
    for outputs, count in progress:
        cycles.append(count)
        for name, y in outputs.items():
            results[name].append(y.reshape(y.shape[1:]) if y.shape[:1] == (1,) else y)
    write_outputs(graph, args.output, {n: np.stack(v) for n, v in results.items()})
    note = (f", {int(np.mean(cycles)):,} instructions per inference (qemu -icount)"
            if args.engine == "qemu" else "")
    print(f"{batch} sample(s) -> {args.output}{note}", file=sys.stderr)


def cmd_build(args: argparse.Namespace) -> None:
    out = args.output or Path(f"{args.model.stem}_{args.target}")
    train = None
    if args.train != "none":
        if args.epochs is not None:
            raise UserError("build needs --steps T: the firmware is generated before it sees "
                            "the data, so it cannot count epochs")
        if args.estimator == "mezo":
            raise UserError("--estimator mezo is a simulator baseline; the device runs "
                            "adaptive, wp or np")
        train = _train_config(args, args.train)
    plan = generate(args.model, BuildOptions(target=args.target, emulate=args.emulate,
                                             train=train), out)
    placement = plan.placement
    print(f"{out}/: {len(plan.code.layers)} layers, arena {plan.arena.arena_bytes:,} B "
          f"({plan.arena.arena_bytes / plan.arena.lower_bound:.2f}x lower bound), "
          f"flash data {plan.code.flash_bytes:,} B")
    print(f"SRAM {placement.total / 1024:.1f} KB of the {plan.board.name} budget "
          f"{placement.budget / 1024:.1f} KB{'' if placement.fits else ' (DOES NOT FIT)'}; "
          f"details in {out / 'memory_report.txt'}")
    if plan.training is not None:
        items = {i.name: i.bytes for i in plan.training.ram_items()}
        print("training: " + ", ".join(f"{k} {v:,} B" for k, v in items.items()))
    goals = "make native | make qemu" + (" | make firmware  (or: pio run)"
                                          if args.target in TARGET_NAMES else "")
    print(f"next: cd {out} && {goals}")


def cmd_simulate(args: argparse.Namespace) -> None:
    config = _train_config(args, args.mode)
    result = simulate(args.model, args.data, args.output, config, epochs=args.epochs,
                      eval_every=args.eval_every, resume=args.resume)
    acc = ""
    if result.accuracy_before is not None and result.accuracy_after is not None:
        acc = (f"; test accuracy {100 * result.accuracy_before:.1f}% -> "
               f"{100 * result.accuracy_after:.1f}%")
    print(f"{result.steps} steps, loss {result.first_loss:.3f} -> {result.last_loss:.3f} "
          f"(mean of first / last 50 steps){acc}; {result.forward_evaluations:,} query "
          f"forwards", file=sys.stderr)
    print(f"{args.output}/: checkpoint.bin, metrics.csv, curves.png", file=sys.stderr)


def cmd_export(args: argparse.Namespace) -> None:
    graph = load_model(args.model)
    written = export_checkpoint(args.model, graph, args.checkpoint, args.output)
    print(f"{args.output}: {written} trained tensors written (step "
          f"{checkpoint.load(args.checkpoint).step})", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        args.func(args)
    except UserError as exc:
        message = " ".join(str(exc).split("\n"))  # the contract is one line
        print(f"zocodegen: error: {message}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and the like: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("zocodegen: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # an internal bug: say so, keep the traceback for debugging
        if os.environ.get("ZOCODEGEN_DEBUG"):
            traceback.print_exc()
        print(f"zocodegen: internal error: {type(exc).__name__}: {exc} "
              "(set ZOCODEGEN_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
