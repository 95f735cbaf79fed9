"""``checkpoint.bin``: one format for the simulator, the device and the host tools.

Little-endian; every field at a fixed offset (C twin: ``templates/train/zo_checkpoint.c``)::

    0   8  magic "ZOCKPT01"
    8   4  format version (3)
    12  4  header bytes (96)
    16 32  sha256 of the model file the parameters belong to
    48  4  completed optimisation steps t (training resumes at step t)
    52  4  layer count L
    56  4  total file bytes, CRC included
    60  4  base seed of the run
    64  4  eta the run uses (float32: the --lr auto winner, else --lr; 0 before the trials)
    68  4  halvings of eta by the training guard
    72  4  step of the best validated parameters (0xFFFFFFFF: no guard check yet)
    76  4  their correct validation predictions
    80  8  their validation loss, sum of Q16 losses (int64)
    88  4  rollbacks so far
    92  4  guard checks in a row that fell below the best (a rollback needs two; 0 in
           checkpoints written before the rule, which then read as none pending), or
           0xFFFFFFFF (STOPPED): the guard ended the run by its patience
    96 16L per layer: op index, weight count, bias count, scale count (u32 each)
    ..     per layer: int8 weights (IR layout) padded with zeros to 4 bytes, int32 biases,
           float32 filter scales (--scales; none otherwise)
    end 4  CRC-32 (zlib.crc32 / IEEE 802.3) of every byte before it

Version 2 had no scale count (12-byte table entries) and version 1 no guard state; both
are refused with one line.
"""
from __future__ import annotations

import hashlib
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from ..files import MissingInput, read_input, starts_with, write_atomic
from ..errors import DataError

MAGIC = b"ZOCKPT01"
VERSION = 3
TABLE_ENTRY = struct.Struct("<IIII")
#: The header's fields in order, each with its struct code: the offsets of ``c_header``'s
#: macros come from here, so the C and the Python cannot disagree on a field's place.
HEADER_FIELDS = (("magic", "8s"), ("version", "I"), ("header_bytes", "I"), ("sha256", "32s"),
                 ("step", "I"), ("layers", "I"), ("bytes", "I"), ("seed", "I"), ("lr", "f"),
                 ("halvings", "I"), ("best_step", "I"), ("best_correct", "I"),
                 ("best_loss", "q"), ("rollbacks", "I"), ("falling", "I"))
HEADER = struct.Struct("<" + "".join(code for _, code in HEADER_FIELDS))
NO_BEST = 0xFFFFFFFF
#: ``falling`` of a run the guard ended by its patience (docs/training.md "Training guard"):
#: nothing resumes it
STOPPED = 0xFFFFFFFF
#: The fields up to the seed must match the model and its plan for a checkpoint to load; the
#: seed and the guard state after them are the run's own.
IDENTITY_END = "seed"


@dataclass(frozen=True)
class LayerParams:
    op_index: int
    weights: np.ndarray  # int8, flattened IR layout
    bias: np.ndarray  # int32 (may be empty)
    # float32 filter scales (--scales), or empty
    scales: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))


@dataclass(frozen=True)
class Checkpoint:
    model_sha256: bytes
    step: int
    seed: int
    layers: tuple[LayerParams, ...]
    # the training guard's state (docs/training.md), so a resumed run decides identically
    lr: float = 0.0
    halvings: int = 0
    best_step: int = NO_BEST
    best_correct: int = 0
    best_loss: int = 0
    rollbacks: int = 0
    falling: int = 0


def _pad4(n: int) -> int:
    return (n + 3) & ~3


def encoded_size(counts: Iterable[tuple[int, int, int]]) -> int:
    """Bytes of a checkpoint whose layers have these (weight, bias, scale counts): what the
    checkpoint area of a data image must hold (C twin: ``zo_checkpoint_bytes``)."""
    counts = list(counts)
    return (HEADER.size + TABLE_ENTRY.size * len(counts)
            + sum(_pad4(w) + 4 * b + 4 * c for w, b, c in counts) + 4)


def encode(ckpt: Checkpoint) -> bytes:
    table = b"".join(TABLE_ENTRY.pack(lp.op_index, lp.weights.size, lp.bias.size,
                                      lp.scales.size) for lp in ckpt.layers)
    data = bytearray()
    for lp in ckpt.layers:
        w = np.ascontiguousarray(lp.weights, dtype=np.int8).tobytes()
        data += w + bytes(_pad4(len(w)) - len(w))
        data += np.ascontiguousarray(lp.bias, dtype="<i4").tobytes()
        data += np.ascontiguousarray(lp.scales, dtype="<f4").tobytes()
    total = HEADER.size + len(table) + len(data) + 4
    head = HEADER.pack(MAGIC, VERSION, HEADER.size, ckpt.model_sha256, ckpt.step,
                       len(ckpt.layers), total, ckpt.seed, ckpt.lr, ckpt.halvings,
                       ckpt.best_step, ckpt.best_correct, ckpt.best_loss, ckpt.rollbacks,
                       ckpt.falling)
    body = head + table + bytes(data)
    return body + struct.pack("<I", zlib.crc32(body))


def header_offsets() -> dict[str, int]:
    """Byte offset of every header field (little-endian, no padding)."""
    offsets, at = {}, 0
    for name, code in HEADER_FIELDS:
        offsets[name] = at
        at += struct.calcsize("<" + code)
    return offsets


def c_header() -> str:
    """include/zo_checkpoint_format.h: the magic, the version, the sizes and the header's
    field offsets as C macros, for the engine (zo_checkpoint.c) and the field trainer's
    slot reader (zo_field_card.c) alike."""
    magic = MAGIC.decode("ascii")
    lines = ["/* zo_checkpoint_format.h - checkpoint.bin's header (docs/training.md "
             '"Checkpoint").', " * Generated from zocodegen/training/checkpoint.py, which "
             "the simulator and the host", " * read too. Do not edit: change it there. */",
             "#ifndef ZO_CHECKPOINT_FORMAT_H", "#define ZO_CHECKPOINT_FORMAT_H", "",
             f'#define ZO_CKPT_MAGIC "{magic}" /* {len(MAGIC)} bytes, no terminator */',
             f"#define ZO_CKPT_MAGIC_BYTES {len(MAGIC)}u",
             f"#define ZO_CKPT_VERSION {VERSION}u",
             f"#define ZO_CKPT_HEADER_BYTES {HEADER.size}u",
             f"#define ZO_CKPT_ENTRY_BYTES {TABLE_ENTRY.size}u /* op index, weight, bias and "
             "scale counts */",
             f"#define ZO_CKPT_IDENTITY_BYTES {header_offsets()[IDENTITY_END]}u /* what must "
             "match; the seed and the guard state follow */",
             f"#define ZO_CKPT_STOPPED 0x{STOPPED:08X}u /* falling: the guard ended the run */",
             "", "/* field offsets */"]
    lines += [f"#define ZO_CKPT_OFF_{name.upper()} {offset}u"
              for name, offset in header_offsets().items()]
    return "\n".join(lines + ["", "#endif", ""])


def decode(blob: bytes, source: str = "checkpoint") -> Checkpoint:
    if len(blob) < HEADER.size + 4:
        raise DataError(f"{source}: {len(blob)} bytes is too short for a checkpoint")
    (magic, version, header, sha, step, count, total, seed, lr, halvings, best_step,
     best_correct, best_loss, rollbacks, falling) = HEADER.unpack_from(blob)
    if magic != MAGIC:
        raise DataError(f"{source}: not a zocodegen checkpoint (magic {magic!r})")
    if version != VERSION or header != HEADER.size:
        raise DataError(f"{source}: checkpoint format version {version} is not supported "
                        f"(this zocodegen writes version {VERSION}): start a new run")
    if total != len(blob):
        raise DataError(f"{source}: truncated or padded: header says {total} bytes, "
                        f"file has {len(blob)}")
    (crc,) = struct.unpack_from("<I", blob, total - 4)
    if zlib.crc32(blob[:total - 4]) != crc:
        raise DataError(f"{source}: CRC mismatch, the checkpoint is corrupted")
    pos = HEADER.size + TABLE_ENTRY.size * count
    if pos > total - 4:
        raise DataError(f"{source}: layer table does not match the file size")
    layers = []
    for k in range(count):
        op_index, w_count, b_count, s_count = TABLE_ENTRY.unpack_from(
            blob, HEADER.size + TABLE_ENTRY.size * k)
        if pos + _pad4(w_count) + 4 * (b_count + s_count) > total - 4:
            raise DataError(f"{source}: layer table does not match the file size")
        weights = np.frombuffer(blob, np.int8, w_count, pos).copy()
        pos += _pad4(w_count)
        bias = np.frombuffer(blob, "<i4", b_count, pos).astype(np.int32)
        pos += 4 * b_count
        scales = np.frombuffer(blob, "<f4", s_count, pos).astype(np.float32)
        pos += 4 * s_count
        layers.append(LayerParams(op_index, weights, bias, scales))
    if pos != total - 4:
        raise DataError(f"{source}: layer table does not match the file size")
    return Checkpoint(sha, step, seed, tuple(layers), lr, halvings, best_step, best_correct,
                      best_loss, rollbacks, falling)


def parameters_sha256(blob: bytes) -> str:
    """SHA-256 (hex) of a checkpoint's layer table and parameters, not of its header: the
    same for every step, seed or guard state (a fleet names a round's model by it)."""
    return hashlib.sha256(blob[HEADER.size:-4]).hexdigest()


#: What `replay -o` replaces without --force.
CHECKPOINT_FILE = starts_with("a checkpoint", MAGIC)


def save(path: Path, ckpt: Checkpoint) -> None:
    save_bytes(path, encode(ckpt))


def save_bytes(path: Path, blob: bytes) -> None:
    """Atomic: a crash or power cut leaves either the old file or the new one (the data is
    on disk before the rename makes it the checkpoint)."""
    write_atomic(Path(path), blob, sync=True)


def read_bytes(path: Path) -> bytes:
    """A checkpoint's bytes (the opener's rules); a missing one is a DataError, as a damaged
    one is (a lost best.bin is rebuilt from the run's checkpoint)."""
    try:
        return read_input(path, "checkpoint")
    except MissingInput as exc:
        raise DataError(str(exc)) from None


def load(path: Path) -> Checkpoint:
    return decode(read_bytes(path), str(path))
