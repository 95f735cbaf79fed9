"""Class names and preprocessing that travel with the data and the trained model, so that
`infer MODEL --input photo.jpg` prints a class name made exactly as `pack` made its inputs.

The data image keeps them in its header (docs/image.md, under the header CRC). `export`
writes them beside the model it writes, in ``OUT.labels.json`` (``{"model_sha256",
"class_names", "preprocess"}``), not inside the .tflite: export patches the trained
constants in place so that the file differs from the input model in those bytes only (and
equals it when nothing was trained); TFLite metadata would mean re-serialising the whole
flatbuffer, and the same sidecar serves ONNX. The sidecar names the model's sha256, so a
stale one (the model changed since) is not believed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError
from ..files import Replaces, file_sha256, write_atomic
from ..formats.image import MAGIC, read_header

SIDECAR_SUFFIX = ".labels.json"


@dataclass(frozen=True)
class Labels:
    """The class names in output order and how `pack` made the inputs (e.g. "0..1 crop")."""

    class_names: tuple[str, ...]
    preprocess: str


def sidecar_path(model: Path) -> Path:
    """``tuned.tflite`` -> ``tuned.tflite.labels.json``."""
    return model.with_name(model.name + SIDECAR_SUFFIX)


def of_image(image: Path) -> Labels:
    """What a data image's header records."""
    layout = read_header(image)
    return Labels(layout.class_names, layout.preprocess)


def of_run(ckpt_path: Path) -> Labels | None:
    """The labels of the image a checkpoint's run trained on (RUN/run.json beside it names
    it: ``data`` for simulate, ``image`` for train); None when there is none to read."""
    try:
        record = json.loads((ckpt_path.parent / "run.json").read_text())
        image = Path(record.get("image") or record.get("data") or "")
        with open(image, "rb") as f:
            if f.read(len(MAGIC)) != MAGIC:
                return None
        return of_image(image)
    except (OSError, ValueError, AttributeError, DataError):
        return None


def write_sidecar(model: Path, labels: Labels) -> Path:
    """``OUT.labels.json`` for the model file just written."""
    path = sidecar_path(model)
    write_atomic(path, (json.dumps({
        "model_sha256": file_sha256(model).hex(), "class_names": list(labels.class_names),
        "preprocess": labels.preprocess}, indent=2) + "\n").encode())
    return path


def _not_a_sidecar(path: Path) -> str | None:
    """Why ``path`` is no labels file export wrote (None when it is one)."""
    with open(path, "rb") as f:
        head = f.read(1 << 20)
    try:
        record = json.loads(head)
    except ValueError:
        record = None
    if isinstance(record, dict) and {"model_sha256", "class_names", "preprocess"} <= set(record):
        return None
    return "is not a labels file `zocodegen export` wrote"


#: What export replaces beside its model without --force.
SIDECAR = Replaces("a labels file export wrote", _not_a_sidecar)


def read_sidecar(model: Path) -> Labels | None:
    """The labels written beside ``model`` by export; None when absent, unreadable or
    written for another version of the file."""
    try:
        record = json.loads(sidecar_path(model).read_text())
        if record["model_sha256"] != file_sha256(model).hex():
            return None
        return Labels(tuple(str(n) for n in record["class_names"]), str(record["preprocess"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
