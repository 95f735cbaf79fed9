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
from .frontends import load_model
from .ir import Graph
from .reference import run
from .summary import format_summary, summarize
from .target import TARGET_NAMES, load_target


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
    p.add_argument("--engine", choices=("reference",), default="reference",
                   help="reference: the bit-exact numpy golden model")
    p.set_defaults(func=cmd_infer)
    return parser


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


def cmd_infer(args: argparse.Namespace) -> None:
    graph = load_model(args.model)
    inputs = read_inputs(graph, args.input)
    batch = next(iter(inputs.values())).shape[0]
    results: dict[str, list[np.ndarray]] = {n: [] for n in graph.outputs}
    for i in tqdm(range(batch), desc="infer", unit="sample", disable=None, leave=False):
        sample = {n: x[i:i + 1] for n, x in inputs.items()}
        for name, y in run(graph, sample).items():
            results[name].append(y.reshape(y.shape[1:]) if y.shape[:1] == (1,) else y)
    write_outputs(graph, args.output, {n: np.stack(v) for n, v in results.items()})
    print(f"{batch} sample(s) -> {args.output}", file=sys.stderr)


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
