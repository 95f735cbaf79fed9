"""The training data (DESIGN.md section 8), checked against the model before any training
starts: DATA.npz, or the data image packed from it (docs/image.md), which is what the device
reads, so simulating on the image sees the device's samples in the device's order. Both hold
``x`` (N, *input shape) in the input dtype and ``y`` (N,) integer labels in [0, classes);
optional ``x_val``/``y_val`` and ``x_test``/``y_test`` alike. :func:`pack` writes the image.
DATA.npz without ``x_val`` gets one set aside from ``x`` by :func:`with_validation`, the same
way when packed and when simulated, so both see the same train and validation records."""
from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataError, UserError, check_finite, check_labels
from ..files import check_output, file_sha256, not_a_file, open_input
from ..frontends import load_model
from ..formats import field
from ..formats.image import MAGIC, SECTOR_BYTES, ImageLayout, pack_image, read_image
from ..ir import Graph
from . import checkpoint
from .config import TrainConfig
from .folders import InputSpec, read_folder
from .guard import MIN_VAL_RECORDS
from .hooks import Hook, hook_file
from .plan import loss_head, training_plan

SPLITS = (("x", "y"), ("x_val", "y_val"), ("x_test", "y_test"))
#: Checkpoint area of an image packed without a model. Trained parameters are a subset of the
#: model's constants, which live in flash, so any model the boards can hold (2 MiB of flash
#: on the STM32H7B3, 1 MiB on the F746) has a smaller checkpoint; twice that, for headroom.
DEFAULT_CHECKPOINT_BYTES = 4 << 20
#: Share of each class's train records set aside for validation when DATA.npz has no x_val.
DEFAULT_VAL_FRACTION = 0.1
#: The fixed seed of that choice: the same DATA.npz always gives the same split.
VALIDATION_SEED = 0
#: Share of each class's train records a folder's pack holds out for the guard's end
#: confirmation (records no step trains on and no check sees; with a test split, which
#: measures the result itself, or DATA.npz: with --held-out-fraction only), raised to
#: MIN_HELD_OUT while half the records stay to train.
DEFAULT_HELD_OUT_FRACTION = 0.1
#: Fewer held-out records than this are not set aside: the confirmation could not show a gain.
MIN_HELD_OUT = MIN_VAL_RECORDS
#: The seed of the held-out choice, apart from the validation split's.
HELD_OUT_SEED = 1
#: A folder's train records are shuffled with this seed unless --shuffle says otherwise.
FOLDER_SHUFFLE_SEED = 0


@dataclass(frozen=True)
class Dataset:
    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    x_val: np.ndarray | None = None
    y_val: np.ndarray | None = None
    class_names: tuple[str, ...] = ()  # from the image header, when pack kept them
    held_out: int = 0  # x_val's last records: the guard's end confirmation's alone


@dataclass(frozen=True)
class Packed:
    """What :func:`pack` wrote, for its summary."""

    layout: ImageLayout
    ignored: tuple[str, ...]  # arrays of DATA.npz that belong to no split
    val_derived: bool  # the val split was set aside from x (DATA.npz has no x_val)
    full_training_bytes: int | None  # checkpoint of the model's full training (with a model)
    shuffled: int | None = None  # the seed the train split was permuted with
    counts: dict[str, tuple[int, ...]] | None = None  # split -> records per class
    class_order: str = ""  # how class names became outputs (a folder's), for the summary
    val_fraction: float | None = None  # the share set aside, when raised to the guard's need
    held_out: str = ""  # why none were held out for the end's confirmation ("" when some were)
    #: a float input's (scale, zero point) in the model's own leading QUANTIZE: the records
    #: stay float and the header has no input quantization, yet the summary can name it
    quantized_by_model: tuple[float, int] | None = None


def _check_split(source: str, xk: str, yk: str, x: np.ndarray, y: np.ndarray,
                 graph: Graph | None, num_classes: int | None) -> None:
    """The checks of one (x, y) pair; shape, dtype and labels against the model when given
    (without one, :func:`pack_image` checks what the image format needs)."""
    if graph is not None:
        t = graph.tensor(graph.inputs[0])
        want = tuple(t.shape[1:])
        if x.dtype != np.dtype(t.dtype):
            raise DataError(f"{source}: '{xk}' is {x.dtype}, the model's input is "
                            f"{np.dtype(t.dtype).name}")
        if x.ndim != len(want) + 1 or tuple(x.shape[1:]) != want:
            raise DataError(f"{source}: '{xk}' has shape {list(x.shape)}, expected "
                            f"[N, {', '.join(map(str, want))}]")
    elif x.ndim < 2:
        raise DataError(f"{source}: '{xk}' has shape {list(x.shape)}, expected "
                        "[N, *input shape]")
    if len(x) == 0:
        raise DataError(f"{source}: '{xk}' is empty")
    check_finite(x, f"{source}: '{xk}'")
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"{source}: '{yk}' must be a 1-D integer array, got {y.dtype} "
                        f"{list(y.shape)}")
    if len(y) != len(x):
        raise DataError(f"{source}: '{xk}' has {len(x)} samples but '{yk}' has {len(y)}")
    if num_classes is not None:
        check_labels(y, num_classes, lambda k: f"{source}: '{yk}'[{k}]")


def _checked(source: str, arrays: dict[str, np.ndarray], graph: Graph | None = None,
             num_classes: int | None = None) -> dict[str, np.ndarray]:
    """The split arrays of ``arrays``, checked, labels as int64; other arrays are dropped."""
    if "x" not in arrays or "y" not in arrays:
        raise DataError(f"{source} needs arrays 'x' and 'y' (has: "
                        f"{', '.join(sorted(arrays)) or 'none'})")
    found = {}
    for xk, yk in SPLITS:
        if (xk in arrays) != (yk in arrays):
            raise DataError(f"{source}: '{xk}' and '{yk}' must come together")
        if xk in arrays:
            _check_split(source, xk, yk, arrays[xk], arrays[yk], graph, num_classes)
            found[xk], found[yk] = arrays[xk], arrays[yk].astype(np.int64)
    return found


def validation_indices(y: np.ndarray, fraction: float, seed: int = VALIDATION_SEED
                       ) -> np.ndarray:
    """Ascending indices of the records of ``y`` to set aside for validation (docs/image.md).

    Stratified, so a small or unbalanced set still validates every class: a class with n
    records gives min(n - 1, max(1, floor(fraction * n + 1/2))) of them (none when fraction is
    0; never its last one, so training still sees it), chosen, class by class in ascending
    label order, as the first ones of ``numpy.random.default_rng(seed).permutation(n)``
    applied to that class's records in their order in ``y``.
    """
    if not 0.0 <= fraction < 1.0:
        what = "--val-fraction" if seed == VALIDATION_SEED else "--held-out-fraction"
        raise DataError(f"{what} must be in [0, 1), got {fraction}")
    if fraction == 0.0:
        return np.zeros(0, np.int64)
    rng = np.random.default_rng(seed)
    chosen = []
    for label in np.unique(y):
        members = np.flatnonzero(y == label)
        n = len(members)
        take = min(n - 1, max(1, int(np.floor(fraction * n + 0.5))))
        chosen.append(members[rng.permutation(n)[:take]])
    return np.sort(np.concatenate(chosen))


def with_validation(arrays: dict[str, np.ndarray],
                    fraction: float = DEFAULT_VAL_FRACTION) -> dict[str, np.ndarray]:
    """Checked split arrays with a validation split: ``arrays`` itself when it has ``x_val``,
    else ``x``/``y`` divided by :func:`validation_indices` (train keeps its order; no val
    split when nothing is set aside)."""
    if "x_val" in arrays:
        return arrays
    val = validation_indices(arrays["y"], fraction)
    if len(val) == 0:
        return arrays
    train = np.setdiff1d(np.arange(len(arrays["y"])), val)
    return {**arrays, "x": arrays["x"][train], "y": arrays["y"][train],
            "x_val": arrays["x"][val], "y_val": arrays["y"][val]}


def folder_val_fraction(y: np.ndarray, fraction: float, source: str) -> float:
    """A folder without ``val/``: ``fraction``, or the smallest larger share (at most half
    the images) whose :func:`validation_indices` give the guard its MIN_VAL_RECORDS, so
    that a small folder trains with the default guard; refused in pack's terms otherwise."""
    if fraction == 0.0:
        return fraction
    share, step = fraction, 1.0 / len(y)
    while len(validation_indices(y, share)) < MIN_VAL_RECORDS and share + step <= 0.5:
        share += step
    if len(validation_indices(y, share)) < MIN_VAL_RECORDS:
        raise DataError(f"{source} has {len(y)} training images: the training guard needs "
                        f"{MIN_VAL_RECORDS} of them set aside for validation and at least as "
                        f"many left to train on: add images (at least {2 * MIN_VAL_RECORDS}), "
                        f"or add a {source}/val/<class>/ folder of {MIN_VAL_RECORDS} or more")
    return share


def held_out_indices(y: np.ndarray, fraction: float, set_aside: int) -> tuple[np.ndarray, str]:
    """The train records (labels ``y``, after the val split's ``set_aside`` were taken) to
    hold out for the guard's end confirmation, and why none when none: ``fraction`` of each
    class as :func:`validation_indices` chooses them (with HELD_OUT_SEED), raised like the
    val share until MIN_HELD_OUT, unless that would leave fewer than half of all the records
    to train on (a small folder: then too few to confirm anything, said in those words)."""
    if fraction == 0.0 or set_aside == 0:
        return np.zeros(0, np.int64), ("--held-out-fraction 0" if fraction == 0.0 else
                                       "no val split, so no guard to confirm with")
    total, share, step = len(y) + set_aside, fraction, 1.0 / len(y)
    held = validation_indices(y, share, HELD_OUT_SEED)
    while (len(held) < MIN_HELD_OUT and 2 * (len(y) - len(held)) >= total
           and share + step < 1.0):
        share += step
        held = validation_indices(y, share, HELD_OUT_SEED)
    if len(held) < MIN_HELD_OUT or (share != fraction and 2 * (len(y) - len(held)) < total):
        return np.zeros(0, np.int64), (
            f"{total} records are too few to hold {MIN_HELD_OUT} out beside the "
            f"{set_aside} for validation and keep half of them to train on")
    return held, ""


def class_counts(arrays: dict[str, np.ndarray], classes: int) -> dict[str, tuple[int, ...]]:
    """Split name -> records per class (label order), for pack's summary; ``y_held``, the
    val split's held-out records, as "held-out" when there are any."""
    names = (("train", "y"), ("val", "y_val"), ("test", "y_test"), ("held-out", "y_held"))
    return {split: tuple(int(c) for c in np.bincount(arrays[yk], minlength=classes))
            for split, yk in names if len(arrays.get(yk, ()))}


def is_image(path: Path) -> bool:
    """A data image starts with its magic; anything else is taken for DATA.npz (and a FIFO
    or a device is not opened here: reading it as DATA.npz names what it is)."""
    if not_a_file(path) is not None:
        return False
    try:
        with open_input(path, "data image") as f:
            return f.read(len(MAGIC)) == MAGIC
    except (OSError, UserError):
        return False  # reading it as DATA.npz reports the problem


#: How .npy and .npz (zip) files start; numpy takes anything else for a pickle.
NUMPY_MAGICS = (b"\x93NUMPY", b"PK\x03\x04", b"PK\x05\x06")


def load_numpy(path: Path, kind: str) -> np.ndarray | np.lib.npyio.NpzFile:
    """``np.load`` without pickles, its failures one line naming the file as what it is:
    numpy would advise ``allow_pickle`` for a model or a checkpoint given by mistake, and
    block on a FIFO."""
    why = not_a_file(path)
    if why == "no such file":
        raise DataError(f"data file {path} does not exist")
    if why is not None:
        raise DataError(f"{path} is {why}, not a {kind} file")
    f = open_input(path, "data")
    try:
        head = f.read(6)
        if not head.startswith(NUMPY_MAGICS):
            raise DataError(f"{path} is not a readable {kind} file: it does not start as a "
                            ".npy or .npz file does (a model, checkpoint or image?)")
        f.seek(0)
        if head.startswith(NUMPY_MAGICS[0]):
            return np.load(f, allow_pickle=False)
        npz, f = np.lib.npyio.NpzFile(f, own_fid=True, allow_pickle=False), None
        return npz  # read as its arrays are asked for; closing it closes the file
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path} is not a readable {kind} file ({exc})") from None
    finally:
        if f is not None:
            f.close()


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    loaded = load_numpy(path, ".npz")
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise DataError(f"{path} is not a readable .npz file (it holds a single array)")
    try:
        with loaded as npz:
            return {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path} is not a readable .npz file ({exc})") from None


def check_packed_for(layout: ImageLayout, image: Path, model_sha256: bytes,
                     whose: str) -> None:
    """Refuse an image packed for another model than the one of ``model_sha256`` (an image
    packed without --model, sha256 all zero, fits any); ``whose`` names that model. The one
    check simulate, infer and the host's trainer make (host/image_fit.py)."""
    if layout.model_sha256 != bytes(32) and layout.model_sha256 != model_sha256:
        raise DataError(f"{image} was packed for another model (sha256 "
                        f"{layout.model_sha256.hex()[:12]}..., {whose} is "
                        f"{model_sha256.hex()[:12]}...): pack it with --model MODEL")


def load_dataset(path: Path, graph: Graph, num_classes: int,
                 model_path: Path | None = None) -> Dataset:
    """DATA.npz or a data image (told apart by the image's magic), checked against the model.

    An image is used as packed (its records verified first); one packed for another model
    than ``model_path`` is refused, as the device refuses it. DATA.npz without ``x_val`` gets
    the validation split `pack` would set aside by default (:func:`with_validation`)."""
    if len(graph.inputs) != 1:
        raise DataError("training needs a model with exactly one input")
    source = str(path)
    if is_image(path):
        layout, arrays = read_image(path)
        if model_path is not None:
            check_packed_for(layout, path, file_sha256(Path(model_path), "model"),
                             f"the model {model_path}")
        if layout.num_classes > num_classes:
            raise DataError(f"{source}: the image's num_classes is {layout.num_classes}, the "
                            f"model has {num_classes} classes")
        return Dataset(**_checked(source, arrays, graph, num_classes),
                       class_names=layout.class_names, held_out=layout.held_out)
    return Dataset(**with_validation(_checked(source, _read_npz(path), graph, num_classes)))


def pack(data_path: Path, image_path: Path, model_path: Path | None = None,
         shuffle: int | None = None, checkpoint_bytes: int | None = None,
         val_fraction: float = DEFAULT_VAL_FRACTION, labels: Path | None = None,
         normalize: str = "auto", resize: str = "crop", preprocess: str | Hook | None = None,
         progress: bool = True, force: bool = False, classes: str | None = None,
         held_out_fraction: float | None = None) -> Packed:
    """DATA.npz, or a folder of files (``folders.read_folder``: images, or anything through
    the ``preprocess`` hook), -> the data image the device trains from (docs/image.md).

    With ``model_path`` the data is checked as :func:`load_dataset` checks it, and the header
    records the model's sha256 (the checkpoint's), input quantization and class count; the
    checkpoint area holds the checkpoint of the model's full training. Without one it has
    :data:`DEFAULT_CHECKPOINT_BYTES`; ``checkpoint_bytes`` overrides both. Without ``x_val``,
    :func:`with_validation` sets ``val_fraction`` of the train records aside as the val split.
    Then :func:`held_out_indices` holds ``held_out_fraction`` (default
    :data:`DEFAULT_HELD_OUT_FRACTION` for a folder without a test split, else 0) of the rest
    out for the guard's end confirmation, at the val split's end (the header's ``held_out``).
    ``shuffle`` then permutes the train split with ``numpy.random.default_rng(shuffle)``; by
    default the device trains in the order of DATA.npz, and a folder's records (grouped by
    class, which would train a run on one class at a time) are shuffled with seed 0. Nothing
    is written when anything is wrong, nor over an existing file that is not a data
    image without a field run (``formats.field.DATA_IMAGE``) unless ``force``.
    """
    source = str(data_path)
    check_output(Path(image_path), [("DATA.npz", data_path), ("--model", model_path),
                                    ("--labels", labels), ("--preprocess", hook_file(preprocess))],
                 replaces=field.DATA_IMAGE, force=force)
    folder = Path(data_path).is_dir()
    if is_image(data_path):
        raise DataError(f"{source} is already a data image; pack reads DATA.npz or a folder")
    if folder and model_path is None:
        raise DataError(f"packing the folder {source} needs --model: the model says the "
                        "input's shape, colour and quantization")
    if not folder and (labels is not None or preprocess is not None
                       or normalize != "auto" or resize != "crop"):
        raise DataError("--labels, --preprocess, --normalize and --resize read a folder of "
                        f"files; {source} is not a folder")
    described: dict = {}
    class_order = ""
    if folder:
        graph = load_model(model_path)
        logits, _ = loss_head(graph)
        read = read_folder(Path(data_path), InputSpec.of(graph),
                           graph.tensor(logits).shape[-1], labels, normalize, resize,
                           preprocess, progress, classes)
        arrays = read.arrays
        described = dict(class_names=read.class_names, preprocess=read.preprocess)
        class_order = read.class_order
    else:
        arrays = _read_npz(data_path)
    names = {k for pair in SPLITS for k in pair}
    ignored = tuple(sorted(k for k in arrays if k not in names))
    header: dict = {}
    need = None
    quantized_by_model = None
    if model_path is None:
        found = _checked(source, arrays)
    else:
        graph = load_model(model_path)
        if len(graph.inputs) != 1:
            raise DataError("training needs a model with exactly one input")
        logits, _ = loss_head(graph)
        classes = graph.tensor(logits).shape[-1]
        found = _checked(source, arrays, graph, classes)
        plan = training_plan(graph, TrainConfig(scales=True))  # the largest checkpoint
        need = checkpoint.encoded_size((l.weight_count, l.bias_count, l.scale_count)
                                       for l in plan.layers)
        header = dict(num_classes=classes,
                      model_sha256=file_sha256(Path(model_path), "model"))
        quant = graph.tensor(graph.inputs[0]).quant
        if quant is not None and not quant.per_channel:
            header.update(input_scale=quant.scalar_scale,
                          input_zero_point=quant.scalar_zero_point)
        leading = InputSpec.of(graph).quant
        if quant is None and leading is not None and not leading.per_channel:
            quantized_by_model = (leading.scalar_scale, leading.scalar_zero_point)
    raised = None
    if folder and "x_val" not in found:
        raised = folder_val_fraction(found["y"], val_fraction, source)
        val_fraction, raised = raised, raised if raised != val_fraction else None
    elif folder and len(found["x_val"]) < MIN_VAL_RECORDS:
        raise DataError(f"{source}/val has {len(found['x_val'])} images: the training guard "
                        f"measures on at least {MIN_VAL_RECORDS}: add images to "
                        f"{source}/val/<class>/, or remove val/ and pack sets "
                        f"{MIN_VAL_RECORDS} training images aside")
    found = with_validation(found, val_fraction)
    default = folder and "x_test" not in found  # a test split measures the result itself
    if held_out_fraction is None:
        fraction = DEFAULT_HELD_OUT_FRACTION if default else 0.0
    else:
        fraction = held_out_fraction
    held, no_held = held_out_indices(found["y"], fraction, len(found.get("y_val", ())))
    if fraction and not len(held) and held_out_fraction is not None:  # asked for, not there
        raise DataError(f"--held-out-fraction {fraction:g}: {no_held}: add images, or pass "
                        "--held-out-fraction 0")
    if held_out_fraction is None and not default:
        no_held = ("DATA.npz: only with --held-out-fraction" if not folder else
                   "the test split measures the result: --held-out-fraction F holds some "
                   "out for the guard's confirmation too")
    held_x, held_y = found["x"][held], found["y"][held]
    kept = np.setdiff1d(np.arange(len(found["y"])), held)
    found["x"], found["y"] = found["x"][kept], found["y"][kept]
    if shuffle is None and folder:
        shuffle = FOLDER_SHUFFLE_SEED
    if shuffle is not None:
        if shuffle < 0:
            raise DataError(f"--shuffle SEED must be >= 0, got {shuffle}")
        order = np.random.default_rng(shuffle).permutation(len(found["x"]))
        found["x"], found["y"] = found["x"][order], found["y"][order]
    if checkpoint_bytes is None:  # room for a field run (formats/field.py), which holds more
        checkpoint_bytes = (field.area_sectors(field.slot_sectors(need)) * SECTOR_BYTES
                            if need is not None else DEFAULT_CHECKPOINT_BYTES)
    x, y = found.pop("x"), found.pop("y")
    splits = dict(found)
    if len(held):  # at the val split's end
        splits["x_val"] = np.concatenate([found["x_val"], held_x])
        splits["y_val"] = np.concatenate([found["y_val"], held_y])
    try:
        layout = pack_image(image_path, x, y, **splits, checkpoint_bytes=checkpoint_bytes,
                            held_out=len(held), **header, **described)
    except DataError as exc:
        raise DataError(f"{source}: {exc}") from None
    counts = class_counts({"y": y, **found, "y_held": held_y}, layout.num_classes)
    return Packed(layout, ignored, "x_val" not in arrays and layout.count("val") > 0, need,
                  shuffle, counts, class_order, raised, no_held, quantized_by_model)
