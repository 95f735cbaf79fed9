"""The SD-card-style data image (``zocodegen pack``): format, packer and reader.

The firmware reads training data through a block device of 512-byte sectors (an image file
on the host over the serial link or semihosting, or a real SD card written with ``dd``).
The image is self-describing:

* sector 0: the header (magic, version, CRC-32, input shape/dtype/quantization, label
  count, record layout, the train/val/test split table, the checkpoint area, model hash;
  for the host only, the class names and how the inputs were made, which the device never
  reads);
* then the records of the train, val and test splits, in that order, one record per
  ``sectors_per_record`` sectors: the input bytes (raw, little endian), then the label as an
  int32 little endian, then the record's own CRC-32 (so a reader of a single record, the
  device reading an SD card, can tell a damaged record), then zero padding to the sector
  boundary;
* then the checkpoint area (zero-filled sectors the device may write).

Every field sits at a fixed offset, little endian; ``docs/image.md`` has the table and the C
reader is ``templates/train/zo_image.c``. The header CRC-32 is ``zlib.crc32`` over the whole
512-byte header sector with its CRC field (bytes 12..15) set to zero.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO, Iterator, Mapping

import numpy as np

from ..errors import DataError, check_finite
from ..files import MissingInput, atomic_writer, open_input

SECTOR_BYTES = 512
MAGIC = b"ZOIMG01\0"
#: Version 2 added the per-record CRC-32; version 1 images must be packed again.
FORMAT_VERSION = 2
MAX_RANK = 4
LABEL_BYTES = 4                      # int32, little endian, right after the input bytes
RECORD_CRC_BYTES = 4                 # u32, little endian, right after the label

#: Header flag bits.
FLAG_QUANTIZATION = 0x1              # input_scale / input_zero_point are meaningful

#: dtype codes of the header (field ``dtype``); 0 is never valid.
DTYPE_CODES = {"int8": 1, "uint8": 2, "float32": 3}
DTYPE_NAMES = {code: name for name, code in DTYPE_CODES.items()}

#: Split order in the split table and on the medium; the array names of DATA.npz.
SPLITS = ("train", "val", "test")
SPLIT_KEYS = {"train": ("x", "y"), "val": ("x_val", "y_val"), "test": ("x_test", "y_test")}

#: Byte offsets of the header fields (docs/image.md has the same table).
OFF_MAGIC = 0
OFF_VERSION = 8
OFF_HEADER_CRC = 12
OFF_SECTOR_BYTES = 16
OFF_FLAGS = 20
OFF_IMAGE_SECTORS = 24
OFF_INPUT_RANK = 28
OFF_INPUT_DIMS = 32
OFF_DTYPE = 48
OFF_INPUT_BYTES = 52
OFF_LABEL_OFFSET = 56
OFF_RECORD_BYTES = 60
OFF_SECTORS_PER_RECORD = 64
OFF_NUM_CLASSES = 68
OFF_INPUT_SCALE = 72
OFF_INPUT_ZERO_POINT = 76
OFF_SPLITS = 80                      # 3 entries of 16 bytes: first_lba, count, crc32, reserved
SPLIT_ENTRY_BYTES = 16
OFF_HELD_OUT = 108                   # the val entry's fourth word: its last records held out
OFF_CHECKPOINT_LBA = 128
OFF_CHECKPOINT_SECTORS = 132
OFF_RECORD_CRC_OFFSET = 136
OFF_MODEL_SHA256 = 144
HEADER_USED_BYTES = 176              # the fixed fields; the host-only text follows
CLASS_NAMES_OFFSET = 176                # UTF-8 class names, one per line, NUL-padded
CLASS_NAMES_BYTES = 304
PREPROCESS_OFFSET = 480                 # UTF-8: how `pack` made the inputs, NUL-padded
PREPROCESS_BYTES = 32

# magic, version, crc, sector_bytes, flags, image_sectors, rank, dims[4], dtype, input_bytes,
# label_offset, record_bytes, sectors_per_record, num_classes, scale, zero_point,
# 3 x (first_lba, count, crc32, reserved), checkpoint lba, sectors, record_crc_offset,
# reserved, sha256
_HEADER = struct.Struct("<8s6I4I6Ifi12I4I32s")
assert _HEADER.size == HEADER_USED_BYTES

_U32_MAX = 0xFFFFFFFF
_CHUNK_RECORDS = 4096                # records converted per write, bounds the packer's memory
_READ_CHUNK_BYTES = 16 << 20         # records checked per read, bounds the reader's memory


@dataclass(frozen=True)
class ImageLayout:
    """Everything the header of an image says.

    ``splits`` maps every split name (``train``, ``val``, ``test``) to ``(first_lba,
    count)``; an absent split has ``(0, 0)``. ``split_crc32`` has the CRC-32 of each split's
    input and label bytes (of every record in order; record CRCs and padding excluded).
    """

    input_shape: tuple[int, ...]
    dtype: str                                   # "int8" | "uint8" | "float32"
    num_classes: int
    splits: Mapping[str, tuple[int, int]]
    checkpoint_lba: int
    checkpoint_sectors: int
    image_sectors: int
    input_scale: float | None = None
    input_zero_point: int | None = None
    split_crc32: Mapping[str, int] = field(default_factory=dict)
    model_sha256: bytes = bytes(32)
    version: int = FORMAT_VERSION
    class_names: tuple[str, ...] = ()  # label order; () when unknown or too long to keep
    preprocess: str = ""  # e.g. "0..1 crop" or "hook mfcc:features"
    #: the val split's last records that only the guard's end confirmation measures: no
    #: step trains on them and no check sees them (``pack`` sets them aside, docs/image.md)
    held_out: int = 0

    # ---- derived sizes ------------------------------------------------------------
    @property
    def input_bytes(self) -> int:
        """Bytes of one record's input (shape product times element size)."""
        return int(np.prod(self.input_shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    @property
    def label_offset(self) -> int:
        return self.input_bytes

    @property
    def record_crc_offset(self) -> int:
        """Where a record's CRC-32 (of the input and label before it) sits in the record."""
        return self.input_bytes + LABEL_BYTES

    @property
    def record_bytes(self) -> int:
        """Input bytes, the int32 label and the record's CRC-32 (padding not included)."""
        return self.record_crc_offset + RECORD_CRC_BYTES

    @property
    def sectors_per_record(self) -> int:
        return -(-self.record_bytes // SECTOR_BYTES)

    @property
    def image_bytes(self) -> int:
        return self.image_sectors * SECTOR_BYTES

    def count(self, split: str) -> int:
        return self.splits.get(split, (0, 0))[1]

    @property
    def checked_val(self) -> int:
        """The val records the guard's checks may measure: all but the held-out ones."""
        return self.count("val") - self.held_out

    def record_lba(self, split: str, index: int) -> int:
        """First sector of record ``index`` of ``split``."""
        first, count = self.splits[split]
        if not 0 <= index < count:
            raise IndexError(f"{split} record {index} out of range (the split has {count})")
        return first + index * self.sectors_per_record

    # ---- header sector ------------------------------------------------------------
    def header_sector(self) -> bytes:
        """The 512-byte header sector, CRC included."""
        dims = list(self.input_shape) + [0] * (MAX_RANK - len(self.input_shape))
        quant = self.input_scale is not None
        entries: list[int] = []
        for name in SPLITS:
            first, count = self.splits.get(name, (0, 0))
            entries += [first, count, self.split_crc32.get(name, 0),
                        self.held_out if name == "val" else 0]
        packed = _HEADER.pack(
            MAGIC, self.version, 0, SECTOR_BYTES, FLAG_QUANTIZATION if quant else 0,
            self.image_sectors, len(self.input_shape), *dims, DTYPE_CODES[self.dtype],
            self.input_bytes, self.label_offset, self.record_bytes, self.sectors_per_record,
            self.num_classes, float(self.input_scale) if quant else 0.0,
            int(self.input_zero_point) if quant else 0, *entries,
            self.checkpoint_lba, self.checkpoint_sectors, self.record_crc_offset, 0,
            bytes(self.model_sha256))
        sector = bytearray(packed + bytes(SECTOR_BYTES - len(packed)))
        names = "\n".join(self.class_names).encode()
        sector[CLASS_NAMES_OFFSET:CLASS_NAMES_OFFSET + len(names)] = names
        text = self.preprocess.encode()
        sector[PREPROCESS_OFFSET:PREPROCESS_OFFSET + len(text)] = text
        struct.pack_into("<I", sector, OFF_HEADER_CRC, header_crc32(sector))
        return bytes(sector)

    @classmethod
    def from_header(cls, sector: bytes, source: str = "image") -> "ImageLayout":
        """Parse and validate a header sector; :class:`DataError` when it is not one."""
        if len(sector) < SECTOR_BYTES:
            raise DataError(f"{source}: truncated: {len(sector)} bytes, the header sector "
                            f"alone has {SECTOR_BYTES}")
        sector = bytes(sector[:SECTOR_BYTES])
        if sector[:8] != MAGIC:
            raise DataError(f"{source}: not a zocodegen data image (bad magic "
                            f"{sector[:8]!r}, expected {MAGIC!r})")
        (_, version, crc, sector_bytes, flags, image_sectors, rank, *rest) = \
            _HEADER.unpack_from(sector)
        dims, rest = rest[:4], rest[4:]
        (dtype_code, input_bytes, label_offset, record_bytes, spr, num_classes, scale, zp,
         *rest) = rest
        split_words, rest = rest[:12], rest[12:]
        ckpt_lba, ckpt_sectors, crc_offset, _, sha = rest
        if version < FORMAT_VERSION:
            raise DataError(f"{source}: image format version {version} is older than this "
                            f"zocodegen's {FORMAT_VERSION} (records now carry a CRC-32): "
                            "re-run `zocodegen pack` to write it again")
        if version != FORMAT_VERSION:
            raise DataError(f"{source}: image format version {version} is newer than this "
                            f"zocodegen's {FORMAT_VERSION}: update zocodegen")
        if crc != header_crc32(sector):
            raise DataError(f"{source}: header CRC mismatch (stored 0x{crc:08x}, computed "
                            f"0x{header_crc32(sector):08x}): the image is corrupted")

        def bad(what: str) -> DataError:
            return DataError(f"{source}: inconsistent header: {what}")

        if sector_bytes != SECTOR_BYTES:
            raise bad(f"sector size {sector_bytes}, expected {SECTOR_BYTES}")
        if not 1 <= rank <= MAX_RANK:
            raise bad(f"input rank {rank} (must be 1..{MAX_RANK})")
        if any(d == 0 for d in dims[:rank]) or any(d != 0 for d in dims[rank:]):
            raise bad(f"input dims {list(dims)} for rank {rank}")
        if dtype_code not in DTYPE_NAMES:
            raise bad(f"dtype code {dtype_code}")
        if num_classes < 1:
            raise bad("num_classes is 0")
        splits: dict[str, tuple[int, int]] = {}
        crcs: dict[str, int] = {}
        for k, name in enumerate(SPLITS):
            first, count, split_crc, _ = split_words[4 * k:4 * k + 4]
            splits[name] = (first, count)
            crcs[name] = split_crc
        held_out = split_words[(OFF_HELD_OUT - OFF_SPLITS) // 4]
        layout = cls(input_shape=tuple(int(d) for d in dims[:rank]),
                     dtype=DTYPE_NAMES[dtype_code], num_classes=num_classes, splits=splits,
                     checkpoint_lba=ckpt_lba, checkpoint_sectors=ckpt_sectors,
                     image_sectors=image_sectors,
                     input_scale=float(scale) if flags & FLAG_QUANTIZATION else None,
                     input_zero_point=int(zp) if flags & FLAG_QUANTIZATION else None,
                     split_crc32=crcs, model_sha256=sha, version=version,
                     class_names=tuple(_header_text(sector, CLASS_NAMES_OFFSET,
                                                    CLASS_NAMES_BYTES, source).split("\n")),
                     preprocess=_header_text(sector, PREPROCESS_OFFSET, PREPROCESS_BYTES, source),
                     held_out=held_out)
        if held_out > splits["val"][1]:
            raise bad(f"{held_out} held-out records, the val split has {splits['val'][1]}")
        if layout.class_names == ("",):
            layout = replace(layout, class_names=())
        if input_bytes != layout.input_bytes:
            raise bad(f"input_bytes {input_bytes}, the shape and dtype give "
                      f"{layout.input_bytes}")
        if (label_offset != input_bytes or crc_offset != layout.record_crc_offset
                or record_bytes != layout.record_bytes):
            raise bad(f"record layout (label at {label_offset}, CRC at {crc_offset}, record "
                      f"{record_bytes} bytes)")
        if spr != layout.sectors_per_record:
            raise bad(f"sectors_per_record {spr}, expected {layout.sectors_per_record}")
        regions = [(name, first, count * spr) for name, (first, count) in splits.items()]
        regions.append(("checkpoint area", ckpt_lba, ckpt_sectors))
        for name, first, length in regions:
            if length and (first < 1 or first + length > image_sectors):
                raise bad(f"{name} (sectors {first}..{first + length - 1}) lies outside "
                          f"the image's {image_sectors} sectors")
        return layout


def _header_text(sector: bytes, offset: int, size: int, source: str) -> str:
    raw = sector[offset:offset + size].rstrip(b"\0")
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise DataError(f"{source}: inconsistent header: the text at byte {offset} is not "
                        "UTF-8") from None


def fitting_class_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """The names if they fit the header (one per line, no line breaks inside), else ()."""
    text = "\n".join(names).encode()
    if len(text) > CLASS_NAMES_BYTES or any("\n" in n or "\0" in n for n in names):
        return ()
    return names


def checkpoint_slot_bytes(checkpoint_bytes: int) -> int:
    """One slot of the checkpoint area: a checkpoint rounded up to whole sectors. The area
    holds two (zo_train_io.h): the run's checkpoint, then the training guard's best."""
    return -(-int(checkpoint_bytes) // SECTOR_BYTES) * SECTOR_BYTES


#: Slots of the checkpoint area: the run's checkpoint (S / L) and the guard's best.
CHECKPOINT_SLOTS = 2


def header_crc32(sector: bytes) -> int:
    """zlib.crc32 of the 512-byte header sector with its CRC field (bytes 12..15) zeroed."""
    data = bytearray(sector[:SECTOR_BYTES])
    data[OFF_HEADER_CRC:OFF_HEADER_CRC + 4] = bytes(4)
    return zlib.crc32(bytes(data))


# ---- packing ----------------------------------------------------------------------------

def _check_split(name: str, x, y, num_classes: int | None) -> tuple[np.ndarray, np.ndarray]:
    xkey, ykey = SPLIT_KEYS[name]
    if y is None:
        raise DataError(f"{xkey} is given without {ykey}")
    x = np.asarray(x)
    y = np.asarray(y)
    if x.dtype.name not in DTYPE_CODES:
        raise DataError(f"{xkey} has dtype {x.dtype}; it must be int8, uint8 or float32 "
                        "(the model's input dtype)")
    check_finite(x, xkey)
    x = x.astype(x.dtype.newbyteorder("<"), copy=False)     # the medium is little endian
    if y.dtype.kind not in "iu":
        raise DataError(f"{ykey} has dtype {y.dtype}; labels must be integers")
    if x.ndim < 2 or x.ndim > MAX_RANK + 1:
        raise DataError(f"{xkey} has shape {x.shape}; it must be (N, *input shape) with an "
                        f"input rank of 1..{MAX_RANK}")
    if y.ndim != 1:
        raise DataError(f"{ykey} has shape {y.shape}; labels must be a vector (N,)")
    if x.shape[0] != y.shape[0]:
        raise DataError(f"{xkey} has {x.shape[0]} samples but {ykey} has {y.shape[0]}")
    if x.shape[0] == 0:
        raise DataError(f"the {name} split ({xkey}) is empty")
    if any(d == 0 for d in x.shape[1:]):
        raise DataError(f"{xkey} has shape {x.shape}; input dims must be non-zero")
    if any(d > _U32_MAX for d in x.shape[1:]):
        raise DataError(f"{xkey} has shape {x.shape}; input dims must fit in 32 bits")
    lo, hi = int(y.min()), int(y.max())
    if lo < 0 or (num_classes is not None and hi >= num_classes):
        bound = "num_classes" if num_classes is None else str(num_classes)
        raise DataError(f"{ykey} has labels in [{lo}, {hi}], outside [0, {bound})")
    return x, y


def _normalise_sha(model_sha256) -> bytes:
    if model_sha256 is None or len(model_sha256) == 0:
        return bytes(32)
    if isinstance(model_sha256, str):
        try:
            raw = bytes.fromhex(model_sha256)
        except ValueError:
            raw = b""
    else:
        raw = bytes(model_sha256)
    if len(raw) != 32:
        raise DataError("model_sha256 must be 32 bytes (or 64 hex digits)")
    return raw


def _records(x: np.ndarray, y: np.ndarray, spr: int) -> np.ndarray:
    """(N, spr*512) uint8 records: input bytes, int32 LE label, u32 LE CRC-32 of the two,
    zero padding."""
    n = x.shape[0]
    flat = np.ascontiguousarray(x).view(np.uint8).reshape(n, -1)
    out = np.zeros((n, spr * SECTOR_BYTES), np.uint8)
    ib = flat.shape[1]
    at = ib + LABEL_BYTES
    out[:, :ib] = flat
    out[:, ib:at] = y.astype("<i4").view(np.uint8).reshape(n, LABEL_BYTES)
    crcs = np.array([zlib.crc32(row[:at]) for row in out], "<u4")
    out[:, at:at + RECORD_CRC_BYTES] = crcs.view(np.uint8).reshape(n, RECORD_CRC_BYTES)
    return out


def pack_image(path, x, y, *, x_val=None, y_val=None, x_test=None, y_test=None,
               num_classes: int | None = None, input_scale: float | None = None,
               input_zero_point: int | None = None, checkpoint_bytes: int = 0,
               model_sha256: bytes | str = b"", class_names: tuple[str, ...] = (),
               preprocess: str = "", held_out: int = 0) -> ImageLayout:
    """Write the data image ``path`` and return its layout.

    ``x`` (N, *input shape) int8/uint8/float32 and ``y`` (N,) integer labels are the train
    split; ``x_val/y_val`` and ``x_test/y_test`` are optional and must have the same input
    shape and dtype. ``num_classes`` defaults to the largest label + 1. ``input_scale`` and
    ``input_zero_point`` (both or neither) record the model input's quantization.
    ``checkpoint_bytes`` reserves a zero-filled checkpoint area of that many bytes rounded up
    to whole sectors. ``model_sha256`` (32 bytes or 64 hex digits) names the model the data
    is for; zeros when unknown. ``class_names`` (kept when they fit the header's 304 bytes)
    and ``preprocess`` (at most 32 bytes) are for the host's reports. ``held_out``: how many
    of the val split's last records are the end confirmation's alone. Bad data raises
    :class:`DataError` before anything is written; an unwritable ``path`` raises :class:`UserError`. The image is written beside
    ``path`` and renamed into place when complete (``files.atomic_writer``).
    """
    if num_classes is not None and not 1 <= int(num_classes) <= 0x7FFFFFFF:
        raise DataError(f"num_classes must be at least 1, got {num_classes}")
    given = {"train": (x, y), "val": (x_val, y_val), "test": (x_test, y_test)}
    arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, (xs, ys) in given.items():
        if xs is None and ys is None:
            continue
        if xs is None:
            xkey, ykey = SPLIT_KEYS[name]
            raise DataError(f"{ykey} is given without {xkey}")
        arrays[name] = _check_split(name, xs, ys, num_classes)
    if "train" not in arrays:
        raise DataError("the train split (x, y) is required")
    ref_x = arrays["train"][0]
    for name, (xs, _) in arrays.items():
        if xs.shape[1:] != ref_x.shape[1:] or xs.dtype != ref_x.dtype:
            raise DataError(f"{SPLIT_KEYS[name][0]} has samples of shape {xs.shape[1:]} "
                            f"{xs.dtype}, but x has {ref_x.shape[1:]} {ref_x.dtype}")
    if num_classes is None:
        num_classes = max(int(ys.max()) for _, ys in arrays.values()) + 1
        if num_classes > 0x7FFFFFFF:
            raise DataError(f"labels up to {num_classes - 1} do not fit the int32 label field")
    if (input_scale is None) != (input_zero_point is None):
        raise DataError("input_scale and input_zero_point go together: give both or neither")
    if input_scale is not None:
        scale32 = float(np.float32(input_scale))
        if not np.isfinite(scale32) or scale32 <= 0.0:
            raise DataError(f"input_scale must be a positive float32, got {input_scale}")
        if not -2**31 <= int(input_zero_point) < 2**31:
            raise DataError(f"input_zero_point {input_zero_point} does not fit in int32")
        input_scale, input_zero_point = scale32, int(input_zero_point)
    if int(checkpoint_bytes) < 0:
        raise DataError(f"checkpoint_bytes must be >= 0, got {checkpoint_bytes}")
    val_count = len(arrays["val"][1]) if "val" in arrays else 0
    if not 0 <= int(held_out) <= val_count:
        raise DataError(f"held_out must be in [0, {val_count}] (the val split's records), "
                        f"got {held_out}")

    input_shape = tuple(int(d) for d in ref_x.shape[1:])
    dtype = ref_x.dtype.name                          # int8 | uint8 | float32
    input_bytes = int(np.prod(input_shape, dtype=np.int64)) * ref_x.dtype.itemsize
    record_bytes = input_bytes + LABEL_BYTES + RECORD_CRC_BYTES
    if record_bytes > _U32_MAX:
        raise DataError(f"one sample has {input_bytes} bytes; the image format allows "
                        "at most 4 GiB per record")
    spr = -(-record_bytes // SECTOR_BYTES)
    splits: dict[str, tuple[int, int]] = {}
    lba = 1
    for name in SPLITS:
        if name in arrays:
            count = arrays[name][0].shape[0]
            splits[name] = (lba, count)
            lba += count * spr
        else:
            splits[name] = (0, 0)
    ckpt_sectors = -(-int(checkpoint_bytes) // SECTOR_BYTES)
    ckpt_lba = lba
    image_sectors = lba + ckpt_sectors
    if image_sectors > _U32_MAX:
        raise DataError(f"the image would have {image_sectors} sectors; the format "
                        f"addresses at most {_U32_MAX} (2 TiB)")

    sha = _normalise_sha(model_sha256)
    crcs = {name: 0 for name in SPLITS}
    path = Path(path)
    with atomic_writer(Path(path)) as f:
        _write_records(f, arrays, input_bytes + LABEL_BYTES, spr, crcs)
        if ckpt_sectors:
            f.seek(image_sectors * SECTOR_BYTES - 1)
            f.write(b"\0")
        layout = ImageLayout(input_shape=input_shape, dtype=dtype,
                             num_classes=int(num_classes), splits=splits,
                             checkpoint_lba=ckpt_lba, checkpoint_sectors=ckpt_sectors,
                             image_sectors=image_sectors, input_scale=input_scale,
                             input_zero_point=input_zero_point, split_crc32=crcs,
                             model_sha256=sha, class_names=fitting_class_names(class_names),
                             preprocess=preprocess.encode()[:PREPROCESS_BYTES].decode(
                                 errors="ignore"), held_out=int(held_out))
        f.seek(0)
        f.write(layout.header_sector())
    return layout


def _write_records(f, arrays, covered: int, spr: int, crcs: dict[str, int]) -> None:
    """Write the header placeholder and every split's records; fill ``crcs`` with each
    split's CRC-32 of the first ``covered`` bytes (input and label) of its records."""
    f.write(bytes(SECTOR_BYTES))                     # header, written last
    for name in SPLITS:
        if name not in arrays:
            continue
        xs, ys = arrays[name]
        crc = 0
        for start in range(0, xs.shape[0], _CHUNK_RECORDS):
            chunk = _records(xs[start:start + _CHUNK_RECORDS],
                             ys[start:start + _CHUNK_RECORDS], spr)
            crc = zlib.crc32(np.ascontiguousarray(chunk[:, :covered]), crc)
            f.write(chunk.tobytes())
        crcs[name] = crc


# ---- reading ----------------------------------------------------------------------------

def read_header(path) -> ImageLayout:
    """The layout of image ``path`` (header only; the records are not checked)."""
    path = Path(path)
    try:
        with open_input(path, "data image") as f:
            sector = f.read(SECTOR_BYTES)
            f.seek(0, 2)
            size = f.tell()
    except OSError as exc:
        raise DataError(f"cannot read image {path}: {exc.strerror or exc}") from None
    except MissingInput:
        raise DataError(f"cannot read image {path}: no such file") from None
    layout = ImageLayout.from_header(sector, source=str(path))
    if size < layout.image_bytes:
        raise DataError(f"{path}: truncated: {size} bytes, the header says "
                        f"{layout.image_bytes} ({layout.image_sectors} sectors)")
    return layout


def _checked_records(f: BinaryIO, layout: ImageLayout, name: str,
                     source: str) -> Iterator[np.ndarray]:
    """The records of split ``name`` as (n, record_bytes) uint8 chunks, each record checked
    as it goes by (its CRC-32, then its label), and the split's CRC-32 after the last one.

    The one place the host decides whether an image's records can be trusted: `train`
    (through :func:`verify_image`) and `simulate` (through :func:`read_image`) both refuse
    what it refuses, with a :class:`DataError` naming the split and the record.
    """
    first, count = layout.splits[name]
    stride = layout.sectors_per_record * SECTOR_BYTES
    ib, at, rb = layout.input_bytes, layout.record_crc_offset, layout.record_bytes
    split_crc = 0
    f.seek(first * SECTOR_BYTES)
    per_read = max(1, _READ_CHUNK_BYTES // stride)
    for start in range(0, count, per_read):
        n = min(per_read, count - start)
        raw = f.read(n * stride)
        if len(raw) != n * stride:
            raise DataError(f"{source}: truncated in the {name} split")
        body = np.frombuffer(raw, np.uint8).reshape(n, stride)[:, :rb]
        stored = np.ascontiguousarray(body[:, at:rb]).view("<u4").reshape(n)
        for k in range(n):
            crc = zlib.crc32(body[k, :at])
            if crc != stored[k]:
                raise DataError(f"{source}: {name} record {start + k} is corrupted (stored "
                                f"CRC-32 0x{int(stored[k]):08x}, computed 0x{crc:08x}): pack "
                                "the image again")
        labels = np.ascontiguousarray(body[:, ib:at]).view("<i4").reshape(n)
        bad = np.flatnonzero((labels < 0) | (labels >= layout.num_classes))
        if bad.size:
            k = int(bad[0])
            raise DataError(f"{source}: {name} record {start + k} has label {labels[k]}, "
                            f"outside [0, {layout.num_classes})")
        body = np.ascontiguousarray(body)
        split_crc = zlib.crc32(np.ascontiguousarray(body[:, :at]), split_crc)
        yield body
    if split_crc != layout.split_crc32[name]:
        raise DataError(f"{source}: CRC mismatch in the {name} split (stored "
                        f"0x{layout.split_crc32[name]:08x}, computed 0x{split_crc:08x}): "
                        "the image is corrupted")


def verify_image(path) -> ImageLayout:
    """The layout of image ``path`` after every check :func:`read_image` makes (header, size,
    every record's CRC-32 and label, every split's CRC-32), reading one chunk of records at a
    time: what the host runs before it serves an image to a device."""
    path = Path(path)
    layout = read_header(path)
    with open_input(path, "data image") as f:
        for name in SPLITS:
            for _ in _checked_records(f, layout, name, str(path)):
                pass
    return layout


def read_image(path) -> tuple[ImageLayout, dict[str, np.ndarray]]:
    """Read and check image ``path``.

    Returns its layout and the arrays under DATA.npz names: ``x``/``y`` and, when present,
    ``x_val``/``y_val`` and ``x_test``/``y_test`` (labels as int32). Raises
    :class:`DataError` for a bad magic, an unsupported version, an inconsistent header, a
    truncated file, a record whose CRC-32 or label is wrong (naming the split and record) or
    a split CRC mismatch.
    """
    path = Path(path)
    layout = read_header(path)
    ib = layout.input_bytes
    dtype = np.dtype(layout.dtype).newbyteorder("<")
    out: dict[str, np.ndarray] = {}
    with open_input(path, "data image") as f:
        for name in SPLITS:
            count = layout.count(name)
            if count == 0:
                continue
            body = np.concatenate(list(_checked_records(f, layout, name, str(path))))
            x = np.ascontiguousarray(body[:, :ib]).view(dtype)
            x = x.reshape((count,) + layout.input_shape).astype(layout.dtype)
            y = np.ascontiguousarray(body[:, ib:layout.record_crc_offset]).view("<i4")
            xkey, ykey = SPLIT_KEYS[name]
            out[xkey], out[ykey] = x, y.reshape(count).astype(np.int32)
    return layout, out
