"""Class names and preprocessing that travel with the data and the trained model, so that
`infer MODEL --input photo.jpg` prints a class name made exactly as `pack` made its inputs.

The data image keeps them in its header (docs/image.md, under the header CRC). `export`
writes them beside the model it writes, in ``OUT.labels.json`` (``{"model_sha256",
"class_names", "preprocess"}``), not inside the .tflite: export patches the trained
constants in place so that the file differs from the input model in those bytes only (and
equals it when nothing was trained); TFLite metadata would mean re-serialising the whole
flatbuffer, and the same sidecar serves ONNX. The sidecar names the model's sha256, so a
stale one (the model changed since) is not believed; one that is the model's but whose names
do not fit it (more names than outputs, names that are no strings) is refused, never printed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError
from ..files import MissingInput, Replaces, file_sha256, open_input, read_text, write_atomic
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


def checked_names(names: object, classes: int, source: str) -> tuple[str, ...]:
    """``names`` as class names of a model with ``classes`` outputs, or a DataError naming
    ``source``: a list of strings, no longer than the outputs (shorter is a folder of fewer
    classes than the model has outputs; the rest print as "output k")."""
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise DataError(f"{source}: class_names is {_what(names)}, not a list of names "
                        "(strings): export the model again, or delete the file")
    if len(names) > classes:
        raise DataError(f"{source} has {len(names)} class names, the model {classes} classes "
                        "(outputs): the names are another model's")
    return tuple(names)


def _what(value: object) -> str:
    if isinstance(value, (list, tuple)):
        first = next(n for n in value if not isinstance(n, str))
        return f"a list holding {type(first).__name__} {first!r}"
    return f"a {type(value).__name__}"


def of_image(image: Path, classes: int) -> Labels:
    """What a data image's header records, for a model of ``classes`` outputs."""
    layout = read_header(image)
    return Labels(checked_names(layout.class_names, classes, str(image)), layout.preprocess)


def of_run(ckpt_path: Path, classes: int) -> Labels | None:
    """The labels of the image a checkpoint's run trained on (RUN/run.json beside it names
    it: ``data`` for simulate, ``image`` for train), for a model of ``classes`` outputs; None
    when there is none to read (no run.json, a damaged one, DATA.npz, a moved image). A
    run.json or image that is no file is refused (the opener)."""
    try:
        record = json.loads(read_text(ckpt_path.parent / "run.json", "run record"))
    except (MissingInput, ValueError):
        return None
    image = (record.get("image") or record.get("data")) if isinstance(record, dict) else None
    if not isinstance(image, str) or not image:
        return None
    try:
        with open_input(image, "data image") as f:
            if f.read(len(MAGIC)) != MAGIC:
                return None
        layout = read_header(image)
    except (MissingInput, DataError):  # moved since, or damaged: export needs no names
        return None
    return Labels(checked_names(layout.class_names, classes, image), layout.preprocess)


def write_sidecar(model: Path, labels: Labels) -> Path:
    """``OUT.labels.json`` for the model file just written."""
    path = sidecar_path(model)
    write_atomic(path, (json.dumps({
        "model_sha256": file_sha256(model, "model").hex(), "class_names": list(labels.class_names),
        "preprocess": labels.preprocess}, indent=2) + "\n").encode())
    return path


def _not_a_sidecar(path: Path) -> str | None:
    """Why ``path`` is no labels file export wrote (None when it is one)."""
    with open_input(path, "existing output") as f:
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


def read_sidecar(model: Path, classes: int) -> Labels | None:
    """The labels written beside ``model`` (of ``classes`` outputs) by export; None when
    absent or written for another version of the file; a DataError naming the file when it
    is the model's but damaged or its names do not fit the model."""
    path = sidecar_path(model)
    try:
        record = json.loads(read_text(path, "labels"))
    except MissingInput:
        return None
    except ValueError as exc:
        raise DataError(f"{path} is not a labels file (not JSON: {exc}): export the model "
                        "again, or delete it") from None
    if not isinstance(record, dict) or not isinstance(record.get("model_sha256"), str):
        raise DataError(f"{path} is not a labels file `zocodegen export` wrote (no "
                        "model_sha256): export the model again, or delete it")
    if record["model_sha256"] != file_sha256(model, "model").hex():
        return None
    if not isinstance(record.get("preprocess"), str):
        raise DataError(f"{path}: preprocess is {_what(record.get('preprocess'))}, not text: "
                        "export the model again, or delete the file")
    return Labels(checked_names(record.get("class_names"), classes, str(path)),
                  record["preprocess"])
