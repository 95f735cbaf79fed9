"""The paper-scale benchmark task (issue 32, docs/scale.md): DATA.npz files of MNIST-M-style
digits under CIFAR-10-C's corruptions, for the pre-trained MCUNet-class fixtures
``tests/fixtures/scale_model.tflite`` (64x64x3) and ``scale_model_128.tflite`` (128x128x3).

    .venv/bin/python benchmarks/scale.py list
    .venv/bin/python benchmarks/scale.py data --corruption gaussian_noise --severity 5 \\
        --seed 0 -o DATA.npz [--size 64|128] [--model MODEL] [--float]

DATA.npz holds ``x``/``y``: the 1000 adapt images (what the device trains on) and
``x_test``/``y_test``: the 1000 test images, both under the corruption at that severity with
independent random streams; labels int64. The clean images are fixed (benchmarks/scale_data.py,
seed 0); ``--seed K`` draws only the corruption's randomness. Images are the model's int8 input
(quantized by the input scale and zero point of ``--model``, by default the fixture of that
size, which takes [0, 1] as scale 1/255 and zero point -128: pixel p/255 -> p - 128), or
float32 in [0, 1] with ``--float``. ``--corruption none`` gives the clean images.

Exit status 2 with one line on stderr for bad arguments.
"""
from __future__ import annotations

import argparse
import io
import sys
import zipfile
from functools import lru_cache
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(HERE), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import corruptions  # noqa: E402
import scale_data  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
#: The default model of each size.
MODELS = {64: FIXTURES / "scale_model.tflite", 128: FIXTURES / "scale_model_128.tflite"}
NONE = "none"


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"scale.py: error: {message} (see {self.prog} --help)\n")


def _severity(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer 1..5, got {text!r}") from None
    if value not in corruptions.SEVERITIES:
        raise argparse.ArgumentTypeError(f"must be in 1..5, got {value}")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


@lru_cache(maxsize=2)
def clean_split(split: str, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The clean renders of ``split`` at ``size`` (read-only, cached: several DATA.npz of one
    process share them)."""
    x, y, _ = scale_data.render(split, size)
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y


def corrupted_splits(corruption: str, severity: int, seed: int, size: int
                     ) -> dict[str, np.ndarray]:
    """The adapt and test splits at ``size`` under ``corruption`` (or ``none``) at
    ``severity``: float32 ``x``, ``x_test`` in [0, 1], int64 ``y``, ``y_test``. The adapt
    images draw their corruption from ``default_rng(SeedSequence([seed, 1]))``, the test
    images from ``SeedSequence([seed, 2])``."""
    x, y = clean_split("adapt", size)
    x_test, y_test = clean_split("test", size)
    if corruption != NONE:
        x = corruptions.corrupt(x, corruption, severity,
                                np.random.default_rng(np.random.SeedSequence([seed, 1])))
        x_test = corruptions.corrupt(x_test, corruption, severity,
                                     np.random.default_rng(np.random.SeedSequence([seed, 2])))
    return {"x": x, "y": y, "x_test": x_test, "y_test": y_test}


def _input_quantization(model: Path, size: int) -> tuple[np.dtype, float | None, int | None]:
    """The model's input dtype and (for int8) scale and zero point; checks its shape."""
    from zocodegen.errors import UserError
    from zocodegen.frontends import load_model
    try:
        graph = load_model(model)
    except UserError as exc:
        raise ValueError(f"--model {model}: {exc}") from None
    if len(graph.inputs) != 1:
        raise ValueError(f"--model {model}: needs exactly one input")
    t = graph.tensor(graph.inputs[0])
    if tuple(t.shape[1:]) != (size, size, 3):
        raise ValueError(f"--model {model}: input shape {list(t.shape)} is not "
                         f"[1, {size}, {size}, 3] (--size {size})")
    dtype = np.dtype(t.dtype)
    if dtype == np.float32:
        return dtype, None, None
    if dtype != np.int8 or t.quant is None or t.quant.per_channel:
        raise ValueError(f"--model {model}: input must be float32 or per-tensor int8")
    return dtype, float(t.quant.scalar_scale), int(t.quant.scalar_zero_point)


def write_data(path: Path, corruption: str, severity: int, seed: int, size: int,
               model: Path | None, as_float: bool) -> dict[str, np.ndarray]:
    """Write DATA.npz (see the module docstring) and return its arrays."""
    if not as_float:
        model = model or MODELS[size]
        if not model.is_file():
            raise ValueError(f"model {model} does not exist (give --model or --float)")
        dtype, scale, zero_point = _input_quantization(model, size)
        as_float = dtype == np.float32
    arrays = corrupted_splits(corruption, severity, seed, size)
    if not as_float:
        for key in ("x", "x_test"):
            arrays[key] = scale_data.quantize(arrays[key], scale, zero_point)
    save_npz(path, arrays)
    return arrays


def save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """``numpy.savez`` with fixed zip timestamps, so the same arrays give the same bytes (and
    the same sha256 in a run's run.json) whenever they are written."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, array in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(array), allow_pickle=False)
            zf.writestr(zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0)),
                        buf.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="scale.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("list", help="print the corruption names, one a line")
    data = sub.add_parser("data", help="write DATA.npz for zocodegen pack / simulate")
    data.add_argument("--corruption", required=True, metavar="NAME",
                      help="a name of `list`, or none")
    data.add_argument("--severity", type=_severity, metavar="S",
                      help="1..5 (required unless --corruption none)")
    data.add_argument("--seed", type=_seed, default=0, metavar="K",
                      help="seed of the corruption's randomness (default 0)")
    data.add_argument("-o", "--output", required=True, type=Path, metavar="DATA.npz")
    data.add_argument("--size", type=int, choices=scale_data.SIZES, default=64)
    data.add_argument("--model", type=Path, help="quantize for this model's input "
                      "(default: the fixture of --size)")
    data.add_argument("--float", dest="as_float", action="store_true",
                      help="write float32 images in [0, 1] instead")
    args = parser.parse_args(argv)
    if args.command == "list":
        print("\n".join(corruptions.NAMES))
        return 0
    if args.corruption != NONE and args.corruption not in corruptions.NAMES:
        data.error(f"argument --corruption: unknown {args.corruption!r}; choose from "
                     f"{', '.join(corruptions.NAMES)} or none")
    if args.corruption != NONE and args.severity is None:
        data.error("argument --severity: required with --corruption "
                     f"{args.corruption}")
    if args.output.suffix != ".npz":
        data.error(f"argument -o: {args.output} must end in .npz")
    if not args.output.parent.is_dir():
        data.error(f"argument -o: folder {args.output.parent} does not exist")
    try:
        arrays = write_data(args.output, args.corruption, args.severity or 0, args.seed,
                            args.size, args.model, args.as_float)
    except (ValueError, OSError) as exc:
        print(f"scale.py: error: {exc}", file=sys.stderr)
        return 2
    what = "clean" if args.corruption == NONE else f"{args.corruption} severity {args.severity}"
    print(f"{args.output}: {len(arrays['y'])} adapt + {len(arrays['y_test'])} test images, "
          f"{args.size}x{args.size}x3 {arrays['x'].dtype}, {what}, seed {args.seed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
