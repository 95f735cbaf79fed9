"""A folder of the user's files -> the arrays of DATA.npz, in the model's input quantization
(``zocodegen pack FOLDER``, docs/your-model.md).

Every user otherwise writes this preprocessing by hand and gets it subtly wrong: the wrong
channel order, the wrong float range, numpy's round-half-even instead of TFLite's
half-away-from-zero. Here the model says what it takes (shape, colour, dtype, scale and zero
point) and one preset names the float range it was trained on.

Layouts (labels are class indices; names are kept for the image header and reports):

* ``FOLDER/<class>/<file>``: one subfolder per class, classes in sorted name order (as
  Keras' ``image_dataset_from_directory``), or by number when every name is an integer;
* ``FOLDER/{train,val,test}/<class>/<file>``: the same, per split;
* ``--labels FILE``: a CSV (``file,label`` rows) or JSON (``{"file": label}``) naming the
  files, relative to FOLDER.

A label (a class folder's name, a labels file's label) is a class index when it is an
integer (in JSON a number or a string of digits, e.g. ``3``, ``"3"``, ``-1``), else a class
name (text that is not a number); names take the indices of their sorted order. One data set
uses one kind; an index outside the model's outputs, a mix of indices and names, and a label
that is neither (``null``, ``[1, 2]``, ``1.5``, ``true``, empty) are refused, naming the file
and the row: never re-mapped.

Images are decoded with Pillow, converted to RGB or greyscale as the model's channels say,
centre-cropped to the model's aspect ratio and resized (bilinear) to its height and width
(``--resize stretch`` skips the crop). Any other modality goes through a hook,
``--preprocess module:function`` (or ``file.py:function``): it maps a file's path to the
float input the model was trained on, so e.g. a keyword-spotting model's own MFCC front end
is reused, not re-implemented.
"""
from __future__ import annotations

import csv
import json
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..errors import DataError, UserError, check_labels
from ..files import displayable, open_input, read_text
from ..ir import Graph, Quantization
from ..reference.quantize import quantize_float
from .hooks import Hook, call_hook, load_hook

#: --normalize presets: 8-bit pixel values p (0..255) -> the float the model was trained on.
MEAN_IMAGENET = np.array([0.485, 0.456, 0.406], np.float32)
STD_IMAGENET = np.array([0.229, 0.224, 0.225], np.float32)


def _imagenet(p: np.ndarray) -> np.ndarray:
    """(p / 255 - mean) / std per channel (H, W, C); greyscale uses the channels' means."""
    rgb = p.shape[-1] == 3
    mean = MEAN_IMAGENET if rgb else MEAN_IMAGENET.mean(dtype=np.float32)
    std = STD_IMAGENET if rgb else STD_IMAGENET.mean(dtype=np.float32)
    return (p / np.float32(255) - mean) / std


NORMALIZE = {
    "0..1": lambda p: p / np.float32(255),
    "-1..1": lambda p: p / np.float32(127.5) - np.float32(1),
    "0..255": lambda p: p,
    "imagenet": _imagenet,
}
#: The float range of each preset over pixel values 0..255 (RGB), for --normalize auto.
PRESET_RANGES = {name: (float(f(np.zeros((1, 3), np.float32)).min()),
                        float(f(np.full((1, 3), 255, np.float32)).max()))
                 for name, f in NORMALIZE.items()}
RESIZE_MODES = ("crop", "stretch")
SPLIT_FOLDERS = ("train", "val", "test")
SPLIT_ARRAYS = {"train": ("x", "y"), "val": ("x_val", "y_val"), "test": ("x_test", "y_test")}
#: A label as read: a class index or a class name.
Label = int | str
#: Text that reads as a number but not as an integer: neither an index nor a name.
_NUMBER = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?|[+-]?(nan|inf|infinity)",
                     re.IGNORECASE)


@dataclass(frozen=True)
class FolderData:
    """What :func:`read_folder` found: DATA.npz's arrays, the class names in label order,
    and how the files were made into inputs (recorded in the image header)."""

    arrays: dict[str, np.ndarray]
    class_names: tuple[str, ...]
    preprocess: str
    class_order: str  # how the labels became the model's outputs, said by pack


@dataclass(frozen=True)
class InputSpec:
    """What the model takes: one input's shape (without the batch), dtype and quantization."""

    shape: tuple[int, ...]
    dtype: str
    quant: Quantization | None

    @classmethod
    def of(cls, graph: Graph) -> "InputSpec":
        tensor = graph.tensor(graph.inputs[0])
        quant, name = tensor.quant, graph.inputs[0]
        while np.dtype(tensor.dtype) == np.float32 and quant is None:
            # the leading QUANTIZE's (past layout ops, e.g. an ONNX model's NCHW transpose)
            reader = next((op for op in graph.ops if name in op.inputs), None)
            if reader is None or reader.type not in ("QUANTIZE", "TRANSPOSE", "RESHAPE"):
                break
            name = reader.outputs[0]
            quant = graph.tensor(name).quant if reader.type == "QUANTIZE" else None
        return cls(tuple(int(d) for d in tensor.shape[1:]), np.dtype(tensor.dtype).name, quant)


def choose_normalize(spec: InputSpec, requested: str) -> str:
    """The preset: as requested, or for auto the one whose float range is nearest the range
    the model's input quantization covers (the range it was calibrated on)."""
    if requested != "auto":
        if requested not in NORMALIZE:
            raise DataError(f"--normalize {requested}: choose one of auto, "
                            f"{', '.join(NORMALIZE)}")
        return requested
    if spec.quant is None or spec.quant.per_channel:
        raise DataError("--normalize auto needs the model's input quantization, which this "
                        f"model does not have: choose one of {', '.join(NORMALIZE)}")
    s, zp = spec.quant.scalar_scale, spec.quant.scalar_zero_point
    lo, hi = (-128 - zp) * s, (127 - zp) * s
    return min(PRESET_RANGES, key=lambda n: abs(PRESET_RANGES[n][0] - lo)
               + abs(PRESET_RANGES[n][1] - hi))


def channels_first(shape: tuple[int, ...]) -> bool:
    """(C, H, W) with C of 1 or 3, as ONNX models from PyTorch take their images."""
    return len(shape) == 3 and shape[0] in (1, 3) and shape[-1] not in (1, 3)


#: Pillow's modes of more than 8 bits per pixel (one channel): 16-bit unsigned ones, and
#: 32-bit integers, in which Pillow reads 16-bit PGM files (their maxval scaled to 65535).
SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")
#: The 8-bit modes whose convert("RGB") / convert("L") is a colour conversion.
EIGHT_BIT_MODES = ("1", "L", "P", "RGB", "RGBA", "RGBX", "RGBa", "CMYK", "YCbCr", "LA", "La",
                   "PA")


def _eight_bits(image, path: Path):
    """An image of more than 8 bits per pixel -> its 8-bit greyscale ("L"), as scikit-image's
    img_as_ubyte and TensorFlow's convert_image_dtype make it: 16-bit values shifted right by 8
    (p * 257 and p * 256 give p), floats taken as 0..1 and rounded from v * 255. Pillow's own
    convert("L") clips instead (any 16-bit value above 255 -> 255, a float in 0..1 -> 0),
    which made such images blank. Values outside those ranges are refused: no guess."""
    from PIL import Image

    if image.mode not in (*SIXTEEN_BIT_MODES, "F"):
        if image.mode not in EIGHT_BIT_MODES:  # LAB, HSV: Pillow would copy their channels
            raise DataError(f"{path}: an image of Pillow mode {image.mode}, which is not "
                            "converted to RGB here: save it as RGB, or decode it in a "
                            "--preprocess hook")
        return image
    values = np.asarray(image)
    if image.mode == "F":
        if not (np.isfinite(values).all() and values.min() >= 0 and values.max() <= 1):
            raise DataError(f"{path}: a float image (Pillow mode F) of values "
                            f"{values.min():g}..{values.max():g}: float images are read as "
                            "0..1; scale it into 0..1, or decode it in a --preprocess hook")
        pixels = np.floor(values.astype(np.float64) * 255 + 0.5)
    else:
        if values.min() < 0 or values.max() > 65535:
            raise DataError(f"{path}: a 32-bit integer image (Pillow mode I) of values "
                            f"{values.min()}..{values.max()}: integer images are read as "
                            "16-bit, 0..65535; decode it in a --preprocess hook")
        pixels = values.astype(np.int64) >> 8
    return Image.fromarray(pixels.astype(np.uint8), "L")


def decode_image(path: Path, spec: InputSpec, resize: str) -> np.ndarray:
    """An image file -> float32 pixels (H, W, C) of 0..255 at the model's size and colour
    (for a channels-first model too: :func:`image_input` lays them out)."""
    from PIL import Image

    shape = ((*spec.shape[1:], spec.shape[0]) if channels_first(spec.shape)
             else spec.shape)
    if len(shape) != 3 or shape[-1] not in (1, 3):
        raise DataError(f"the model takes {list(spec.shape)}, not an image (H, W, 1 or 3, "
                        "or 1 or 3, H, W): pass --preprocess module:function to make its "
                        "input from a file")
    height, width, channels = shape
    try:
        with warnings.catch_warnings():  # over the limit: refused below, not a stderr line
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with open_input(path, "photo") as f, Image.open(f) as opened:
                image = _eight_bits(opened, path).convert("RGB" if channels == 3 else "L")
    except UserError:  # the opener's refusals, _eight_bits' (DataError is one)
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise DataError(f"{path}: not decoded: {exc} (Pillow's limit, PIL.Image.MAX_IMAGE_"
                        f"PIXELS = {Image.MAX_IMAGE_PIXELS:,}: shrink the image, or decode it "
                        "in a --preprocess hook)") from None
    except Exception as exc:  # Pillow's decoders raise many kinds on a damaged file
        raise DataError(f"{path}: not a readable image ({type(exc).__name__}: {exc})"
                        ) from None
    if resize == "crop":  # the centre region of the model's aspect ratio
        w, h = image.size
        if w * height > h * width:
            keep = round(h * width / height)
            image = image.crop(((w - keep) // 2, 0, (w - keep) // 2 + keep, h))
        else:
            keep = round(w * height / width)
            image = image.crop((0, (h - keep) // 2, w, (h - keep) // 2 + keep))
    image = image.resize((width, height), Image.Resampling.BILINEAR)
    return np.asarray(image, np.float32).reshape(height, width, channels)


def image_input(path: Path, spec: InputSpec, resize: str, preset: str) -> np.ndarray:
    """An image file -> the model's float input: decoded, normalised, laid out."""
    values = NORMALIZE[preset](decode_image(path, spec, resize))
    return values.transpose(2, 0, 1) if channels_first(spec.shape) else values


def to_input(values: np.ndarray, spec: InputSpec, what: str) -> np.ndarray:
    """Float input -> the model's input dtype (TFLite's QUANTIZE rounding). ``what`` says
    where the values came from: "FILE: --preprocess HOOK returned"."""
    with np.errstate(over="ignore", invalid="ignore"):  # beyond float32: refused below
        values = np.asarray(values, np.float32)
    if values.shape != spec.shape and values.shape != (1, *spec.shape):
        raise DataError(f"{what} shape {list(values.shape)}; the model takes "
                        f"{list(spec.shape)}")
    values = values.reshape(spec.shape)
    if not np.isfinite(values).all():
        raise DataError(f"{what} NaN or infinite values (or values beyond float32's range)")
    if spec.dtype == "float32":
        return values
    if spec.quant is None or spec.quant.per_channel:
        raise DataError(f"the model's {spec.dtype} input has no per-tensor quantization to "
                        "pack into")
    if spec.dtype == "int8":
        return quantize_float(values, spec.quant)
    if spec.dtype == "uint8":  # the same rounding, the uint8 range
        shifted = Quantization(spec.quant.scale, spec.quant.zero_point - 128)
        return (quantize_float(values, shifted).astype(np.int16) + 128).astype(np.uint8)
    raise DataError(f"the model's input dtype {spec.dtype} cannot be packed")


def input_maker(spec: InputSpec, normalize: str = "auto", resize: str = "crop",
                hook: str | Hook | None = None) -> tuple[Callable[[Path], np.ndarray], str]:
    """(file -> the model's input, how: the text the image header records), the one
    preprocessing `pack` and `infer --input photo.jpg` share."""
    if resize not in RESIZE_MODES:
        raise DataError(f"--resize {resize}: choose one of {', '.join(RESIZE_MODES)}")
    if hook is not None:
        function, name = load_hook(hook)

        def from_hook(path: Path) -> np.ndarray:
            return to_input(call_hook(function, name, path), spec,
                            f"{path}: --preprocess {name} returned")
        return from_hook, f"hook {name}"
    preset = choose_normalize(spec, normalize)

    def from_image(path: Path) -> np.ndarray:
        return to_input(image_input(path, spec, resize, preset), spec, f"{path}: decoded to")
    return from_image, f"{preset} {resize}"


def recorded_maker(spec: InputSpec, recorded: str,
                   hook: str | None = None) -> Callable[[Path], np.ndarray]:
    """The input maker of an image header's (or export's) record, e.g. "0..1 crop"; ""
    (none recorded) is pack's default. A hook cannot be recorded, only named: `infer
    --preprocess` passes it again (``hook``), and a record of decoded images refuses it."""
    preset, _, resize = (recorded or "auto crop").partition(" ")
    if hook is not None:
        if recorded and preset != "hook":
            raise DataError(f"the model's inputs were made by decoding images ('{recorded}'), "
                            "not by a hook: drop --preprocess")
        return input_maker(spec, hook=hook)[0]
    if preset == "hook" or preset not in ("auto", *NORMALIZE) or resize not in RESIZE_MODES:
        again = f" (--preprocess {resize})" if preset == "hook" else ""
        raise DataError(f"the inputs were made by '{recorded}', not by decoding an image: pass "
                        f"the same hook again{again}, or make them with it and pass them as "
                        "X.npy")
    return input_maker(spec, preset, resize)[0]


def _class_folders(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def files_under(folder: Path) -> list[Path]:
    """Every file under ``folder`` (hidden ones left out), in name order."""
    return sorted(p for p in folder.rglob("*") if p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def _label(value: object) -> Label | None:
    """A class folder's name or a labels file's label, as the module docstring's rule reads
    it: an index, a name, or None for neither."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, str):
        return None
    text = value.strip()
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    return None if not text or _NUMBER.fullmatch(text) else text


def _given_classes(classes: str | None, places: dict[Label, str]) -> list[str] | None:
    """--classes a,b,...: the model's own class order; every class found must be in it,
    once (a class in it without files keeps its output)."""
    if classes is None:
        return None
    given = [name.strip() for name in classes.split(",")]
    if not all(given) or len(set(given)) != len(given):
        raise DataError(f"--classes {classes}: give each class name once, separated by commas")
    for label, where in places.items():
        if str(label) not in given:
            raise DataError(f"{where} is class '{label}', which --classes does not name "
                            f"({', '.join(given)})")
    return given


def _class_index(places: dict[Label, str], num_classes: int) -> dict[Label, int]:
    """Label -> class index (indices are themselves, names their sorted order), checked
    against the model's outputs; ``places`` says where each label was first given."""
    numbers = [label for label in places if isinstance(label, int)]
    names = sorted(label for label in places if isinstance(label, str))
    if numbers and names:
        raise DataError(f"{places[names[0]]} names class '{names[0]}' but "
                        f"{places[numbers[0]]} gives class index {numbers[0]}: label with "
                        "class indices or with class names, not both")
    index = {label: label for label in numbers} or {n: k for k, n in enumerate(names)}
    order = list(index)
    check_labels([index[label] for label in order], num_classes, lambda k: places[order[k]])
    return index


def _labelled_from_folders(root: Path) -> tuple[dict[str, list[tuple[Path, Label]]],
                                                dict[Label, str]]:
    """split -> [(file, label)] from class subfolders (optionally under split folders), and
    where each label was found."""
    subfolders = _class_folders(root)
    if not subfolders:
        raise DataError(f"{root} has no class subfolders (FOLDER/<class>/<file>) and no "
                        "--labels file")
    split_roots = ({p.name: p for p in subfolders} if {p.name for p in subfolders}
                   <= set(SPLIT_FOLDERS) else {"train": root})
    if "train" not in split_roots:
        raise DataError(f"{root} has {', '.join(sorted(split_roots))} but no train folder")
    found: dict[str, list[tuple[Path, Label]]] = {}
    places: dict[Label, str] = {}
    for split, base in split_roots.items():
        classes = _class_folders(base)
        if not classes:
            raise DataError(f"{base} has no class subfolders")
        found[split] = []
        for folder in classes:
            files = files_under(folder)
            if not files and split == "train":
                raise DataError(f"class folder {folder} is empty")
            label = _label(folder.name)
            if label is None:
                raise DataError(f"class folder {folder}: its name is a number but not an "
                                "integer, so neither a class index nor a class name")
            found[split] += [(f, label) for f in files]
            places.setdefault(label, f"class folder {folder}")
    return found, places


def _labelled_from_file(root: Path, labels: Path) -> tuple[dict[str, list[tuple[Path, Label]]],
                                                           dict[Label, str]]:
    """{"train": [(file, label)]} from a CSV or JSON labels file, and where each label is."""
    try:
        text = read_text(labels, "labels")
        if labels.suffix.lower() == ".json":
            rows = [(f'"{name}"', (name, label)) for name, label in json.loads(text).items()]
        else:
            rows = [(f"row {n}", tuple(r[:2]))
                    for n, r in enumerate(csv.reader(text.splitlines()), 1) if r]
            if rows and rows[0][1][0].strip().lower() in ("file", "filename", "path"):
                rows = rows[1:]  # a header row
    except (OSError, ValueError, AttributeError) as exc:
        raise DataError(f"--labels {labels}: not a readable CSV (file,label) or JSON "
                        f"({{\"file\": label}}) ({type(exc).__name__}: {exc})") from None
    if not rows:
        raise DataError(f"--labels {labels} names no files")
    pairs, places = [], {}
    for where, row in rows:
        if len(row) != 2:
            raise DataError(f"--labels {labels}: {where} {list(row)} is not file,label")
        name, label = str(row[0]).strip(), _label(row[1])
        place = f"--labels {labels}: {where}" + (f" ({name})" if where.startswith("row") else "")
        if label is None:
            raise DataError(f"{place}: the label {json.dumps(row[1])} is neither a class index "
                            "(an integer) nor a class name")
        if not (root / name).is_file():
            raise DataError(f"--labels {labels}: no file {root / name}")
        pairs.append((root / name, label))
        places.setdefault(label, place)
    return {"train": pairs}, places


def read_folder(root: Path, spec: InputSpec, num_classes: int, labels: Path | None = None,
                normalize: str = "auto", resize: str = "crop", hook: str | Hook | None = None,
                progress: bool = True, classes: str | None = None) -> FolderData:
    """Every file under ``root`` made into the model's input; DataError (one line) on the
    first file, class or label that cannot be used."""
    found, places = (_labelled_from_file(root, labels) if labels is not None
                     else _labelled_from_folders(root))
    given = _given_classes(classes, places)
    index = (_class_index(places, num_classes) if given is None else
             {label: given.index(str(label)) for label in places})
    if given is not None:
        check_labels(list(range(len(given))), num_classes, lambda k: f"--classes {classes}")
    make, preprocess = input_maker(spec, normalize, resize, hook)
    arrays: dict[str, np.ndarray] = {}
    total = sum(len(v) for v in found.values())
    with tqdm(total=total, desc="pack", unit="file", disable=None if progress else True,
              leave=False) as bar:
        for split, pairs in found.items():
            if not pairs:
                continue
            x = np.empty((len(pairs), *spec.shape), np.dtype(spec.dtype))
            for k, (path, _) in enumerate(pairs):
                x[k] = make(path)
                bar.update()
            xk, yk = SPLIT_ARRAYS[split]
            arrays[xk] = x
            arrays[yk] = np.array([index[label] for _, label in pairs], np.int64)
    ordered = [""] * (max(index.values()) + 1) if given is None else list(given)
    for label, k in index.items():
        ordered[k] = displayable(str(label))  # a folder name need not be UTF-8
    where = "class folder" if labels is None else "--labels"
    order = ("--classes order" if given is not None else
             f"{where} names in alphabetical order" if isinstance(next(iter(index)), str)
             else f"{where} indices as given")
    return FolderData(arrays, tuple(ordered), preprocess, order)
