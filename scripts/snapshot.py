"""A digest of everything the generator and the simulator produce, to prove a refactor
byte-identical: every generated source of every model at every target, training mode and
estimator, and the checkpoint of a short simulated run per estimator.

    .venv/bin/python scripts/snapshot.py -o before.json   # at the old commit
    .venv/bin/python scripts/snapshot.py -o after.json    # at the new one
    .venv/bin/python scripts/snapshot.py --diff before.json after.json

Files a change adds on purpose (a new header) show as added; nothing may show as changed
unless the change meant it.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
SHARED = REPO.parent / "shared" / "models"
INFERENCE_MODELS = ["digits_cnn.tflite", "digits_resnet.tflite", "edge_ops.tflite",
                    "float_model.tflite", "mcunet_in1.tflite", "mcunet_tiny.tflite",
                    "multi_op.tflite", "onnx_qdq_int8.onnx", "onnx_qdq_uint8.onnx",
                    "onnx_qop_uint8.onnx", "onnx_float.onnx", "scale_model.tflite"]
SHARED_MODELS = ["kws_ref_model.tflite", "mcunet_det.tflite", "pretrainedResnet_quant.tflite"]
TARGETS = ["native", "qemu", "stm32f746", "stm32h7b3"]
# Every estimator and the options that switch C code on or off.
TRAIN_VARIANTS: dict[str, dict] = {
    "adaptive": {}, "wp": {"estimator": "wp"}, "np": {"estimator": "np"},
    "mezo": {"estimator": "mezo"}, "int8": {"estimator": "int8", "bp_layers": 1},
    "split": {"estimator": "split"}, "bp1": {"bp_layers": 1},
    "two_sided_b4": {"two_sided": True, "query_batch": 4, "queries": 8},
    "guard_lr": {"guard": True, "lr_auto": True}, "scalars": {"record_scalars": True, "estimator": "wp"},
    "sparse": {"mode": "sparse", "blocks": 2},
    "sparse_auto": {"mode": "sparse", "blocks": 2, "guard": True, "lr_auto": True},
    "pool": {"perturbation": "pool:255"}, "rotating": {"perturbation": "rotating:31"},
}
TRAIN_MODELS = ["digits_cnn.tflite", "digits_resnet.tflite", "mcunet_in1.tflite",
                "onnx_qdq_int8.onnx"]
SIM_MODEL = "digits_cnn.tflite"


def _models(names: list[str], shared: bool) -> list[Path]:
    """The fixtures named, and the shared models when ../shared is there."""
    paths = [FIXTURES / n for n in names]
    return paths + [SHARED / n for n in SHARED_MODELS if shared and (SHARED / n).exists()]


def _render(model: Path, target: str, train) -> dict[str, str]:
    from zocodegen.projects import _render as render
    from zocodegen.codegen.project import BuildOptions
    from zocodegen.errors import UserError
    emulate = "stm32f746" if target in ("native", "qemu") else target
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            _, files = render(model, BuildOptions(target=target, emulate=emulate, train=train),
                              None)
    except UserError as exc:
        message = str(exc).replace(str(REPO), "<repo>")  # the same wherever it is cloned
        return {"<refused>": hashlib.sha256(message.encode()).hexdigest()}
    return {rel: hashlib.sha256(text.encode()).hexdigest() for rel, text in files.items()}


def sources() -> dict[str, str]:
    from zocodegen.training.config import TrainConfig
    out: dict[str, str] = {}
    for model in _models(INFERENCE_MODELS, shared=True):
        for target in TARGETS:
            for rel, digest in _render(model, target, None).items():
                out[f"src/{model.name}/{target}/none/{rel}"] = digest
    for model in _models(TRAIN_MODELS, shared=False):
        for target in TARGETS:
            for name, options in TRAIN_VARIANTS.items():
                config = TrainConfig(**{"steps": 10, "queries": 4, **options})
                for rel, digest in _render(model, target, config).items():
                    out[f"src/{model.name}/{target}/{name}/{rel}"] = digest
    return out


def checkpoints() -> dict[str, str]:
    """A few simulated steps per estimator and option set: the checkpoint and metrics."""
    from zocodegen.datasets import digits_npz
    from zocodegen.frontends import load_model
    from zocodegen.training.config import TrainConfig
    from zocodegen.training.runner import simulate
    model = FIXTURES / SIM_MODEL
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "digits.npz"
        digits_npz(data, load_model(model).tensor(load_model(model).inputs[0]).quant)
        for name, options in TRAIN_VARIANTS.items():
            options = {"steps": 12, "queries": 4, "batch": 2, **options}
            if options.get("mode") == "sparse":
                options["trial_samples"] = 16
            run = Path(tmp) / name
            with contextlib.redirect_stdout(io.StringIO()):
                simulate(model, data, run, TrainConfig(**options), progress=False)
            for rel in ("checkpoint.bin", "metrics.csv"):
                out[f"ckpt/{name}/{rel}"] = hashlib.sha256((run / rel).read_bytes()).hexdigest()
    return out


def _source_file(key: str) -> str:
    """src/MODEL/TARGET/VARIANT/FILE -> FILE (checkpoint keys stay whole)."""
    parts = key.split("/", 4)
    return parts[4] if key.startswith("src/") and len(parts) == 5 else key


def diff(before: dict[str, str], after: dict[str, str]) -> int:
    """Differences grouped by file (how many builds each one changed in): a refactor that
    meant to change only, say, zo_link.h shows that file alone."""
    changed = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
    removed = sorted(before.keys() - after.keys())
    added = sorted(after.keys() - before.keys())
    for title, keys in (("changed", changed), ("removed", removed), ("added", added)):
        counts = Counter(_source_file(k) for k in keys)
        print(f"{title}: {len(keys)} digests")
        for name, count in sorted(counts.items()):
            print(f"  {name}  (in {count} builds)")
    print(f"identical: {len(before.keys() & after.keys()) - len(changed)} digests")
    return 1 if changed or removed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path)
    parser.add_argument("--diff", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.diff:
        return diff(*(json.loads(p.read_text()) for p in args.diff))
    if not args.output:
        parser.error("give -o FILE or --diff BEFORE AFTER")
    sys.path.insert(0, str(REPO))
    snapshot = {**sources(), **checkpoints()}
    args.output.write_text(json.dumps(snapshot, indent=1, sort_keys=True))
    print(f"{len(snapshot)} digests -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
