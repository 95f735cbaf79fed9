"""The checkpoint area of a field run on its card (docs/image.md, "The checkpoint area of a
field run"): what `build --data-source sdcard` firmware keeps there (templates/field/zo_field.h, whose
``#define`` values tests/test_field.py checks against these) and how the host reads it back
(`zocodegen card read`).

Sectors from the area's first, S = slot sectors: the run slot and the best slot (what link
firmware uses too), their copies, then at the area's end the run log and the two status
records. A slot is written only while its twin verifies, so the newer twin that verifies is
the run's checkpoint; the best is the best twin of the step that checkpoint names.
"""
from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import DataError
from ..files import Replaces, open_input
from .image import MAGIC as IMAGE_MAGIC
from .image import SECTOR_BYTES, ImageLayout

SLOTS = 4
RUN, BEST, RUN_COPY, BEST_COPY = range(SLOTS)
LOG_SECTORS = 128
STATUS_SECTORS = 2
ENTRY_BYTES = 64
ENTRIES_PER_SECTOR = SECTOR_BYTES // ENTRY_BYTES
MAGIC = b"ZOFIELD1"
VERSION = 1
#: The status record (one sector, little endian): name -> (offset, struct format).
STATUS_FIELDS = {"version": (8, "I"), "sequence": (12, "I"), "state": (16, "I"),
                 "status": (20, "i"), "value": (24, "I"), "step": (28, "I"),
                 "steps": (32, "I"), "every": (36, "I"), "slot": (40, "I"), "log": (44, "I"),
                 "boots": (48, "I"), "correct": (52, "I"), "of": (56, "I"),
                 "split": (60, "I")}
OFF_IDENTITY = 64
OFF_STATUS_CRC = 508
IDENTITY_BYTES = 124  # HELLO's identity (docs/link.md)
#: The HELLO bytes a resumed run must share (the model and the training options).
RUN_IDENTITY = (8, 96)
STATES = {1: "training", 2: "complete", 3: "stopped"}
#: A run log entry (64 bytes): name -> (offset, struct format).
ENTRY_FIELDS = {"sequence": (0, "I"), "kind": (4, "B"), "decision": (5, "B"),
                "step": (8, "I"), "correct": (12, "I"), "of": (16, "I"),
                "halvings": (20, "I"), "eta_ppm": (24, "I"), "value": (28, "I"),
                "loss_q16": (32, "q"), "lr": (40, "f")}
OFF_ENTRY_CRC = 60
#: Entry kinds; 1..5 are the link's EVENT kinds (formats/link.py EventKind).
GUARD_CHECK, LR_TRIAL, LR_CHOSEN, CONFIRM, STOP = 1, 2, 3, 4, 5
START, BLOCK, EVALUATION, CHECKPOINT, END, FAULT = range(16, 22)
NO_SPLIT = 0xFF
NO_BEST = 0xFFFFFFFF  # the checkpoint's best step before the guard's first check

# The checkpoint header (zocodegen/training/checkpoint.py) fields a slot is judged by.
_CKPT_STEP, _CKPT_BYTES, _CKPT_BEST_STEP = 48, 56, 72


def slot_sectors(checkpoint_bytes: int) -> int:
    """S: the firmware's largest checkpoint in whole sectors."""
    return math.ceil(checkpoint_bytes / SECTOR_BYTES)


def area_sectors(slot: int) -> int:
    """Sectors a field run's area needs for slots of ``slot`` sectors."""
    return SLOTS * slot + LOG_SECTORS + STATUS_SECTORS


def _fields(raw: bytes, table: dict[str, tuple[int, str]]) -> dict[str, int | float]:
    return {name: struct.unpack_from("<" + fmt, raw, off)[0]
            for name, (off, fmt) in table.items()}


@dataclass(frozen=True)
class FieldStatus:
    """The newest status record: where the run stands and why it stopped, if it did."""

    sequence: int
    state: str  # training, complete, stopped
    status: int  # 0, or a status code (formats/status.py)
    value: int  # the record a record problem names
    step: int
    steps: int
    every: int
    slot: int
    boots: int
    correct: int  # the last accuracy measurement ...
    of: int
    split: int  # ... of this split (0 train, 1 val, 2 test; NO_SPLIT)
    identity: bytes  # HELLO's bytes (formats/link.py parse_hello)

    @classmethod
    def from_sector(cls, raw: bytes) -> FieldStatus | None:
        """The record of one status sector; None when it does not verify."""
        if (raw[:8] != MAGIC or struct.unpack_from("<I", raw, 8)[0] != VERSION
                or struct.unpack_from("<I", raw, OFF_STATUS_CRC)[0]
                != zlib.crc32(raw[:OFF_STATUS_CRC])):
            return None
        f = _fields(raw, STATUS_FIELDS)
        return cls(f["sequence"], STATES.get(f["state"], f"state {f['state']}"), f["status"],
                   f["value"], f["step"], f["steps"], f["every"], f["slot"], f["boots"],
                   f["correct"], f["of"], f["split"],
                   raw[OFF_IDENTITY:OFF_IDENTITY + IDENTITY_BYTES])


@dataclass(frozen=True)
class LogEntry:
    sequence: int
    kind: int
    decision: int
    step: int
    correct: int
    of: int
    halvings: int
    eta_ppm: int
    value: int  # steps of a trial or a mean, a block, a status
    loss_q16: int  # a check's or trial's sum; a checkpoint's mean
    lr: float

    @classmethod
    def from_bytes(cls, raw: bytes) -> LogEntry | None:
        """The entry of 64 bytes; None when it does not verify (never written, or torn)."""
        if (raw[4] == 0 or struct.unpack_from("<I", raw, OFF_ENTRY_CRC)[0]
                != zlib.crc32(raw[:OFF_ENTRY_CRC])):
            return None
        return cls(**_fields(raw, ENTRY_FIELDS))


@dataclass(frozen=True)
class FieldArea:
    """What a card's checkpoint area holds, as the firmware would resume from it."""

    status: FieldStatus | None
    run: bytes | None  # the newer run twin that verifies
    best: bytes | None  # the best twin of the step ``run`` names
    entries: tuple[LogEntry, ...]  # every entry that verifies, in sequence order
    torn: int  # entries that did not verify where one had been written (nonzero bytes)


def newest_status(sectors: Iterable[bytes]) -> FieldStatus | None:
    found = [s for s in map(FieldStatus.from_sector, sectors) if s is not None]
    return max(found, key=lambda s: s.sequence, default=None)


def slot_checkpoint(raw: bytes) -> bytes | None:
    """The checkpoint a slot holds when its CRC-32 verifies (the firmware's test), else
    None; the model and the rest are checked by whoever loads it."""
    if len(raw) < 100 or raw[:8] != b"ZOCKPT01":
        return None
    size = struct.unpack_from("<I", raw, _CKPT_BYTES)[0]
    if not 100 <= size <= len(raw):
        return None
    blob = raw[:size]
    return blob if struct.unpack_from("<I", blob, size - 4)[0] == zlib.crc32(blob[:-4]) else None


def read_area(area: bytes) -> FieldArea:
    """The field run in a checkpoint area's bytes (the whole area, from its first sector)."""
    sectors = len(area) // SECTOR_BYTES
    if sectors < STATUS_SECTORS:
        return FieldArea(None, None, None, (), 0)
    end = sectors * SECTOR_BYTES
    status = newest_status(area[end - (STATUS_SECTORS - k) * SECTOR_BYTES:][:SECTOR_BYTES]
                           for k in range(STATUS_SECTORS))
    if status is None or area_sectors(status.slot) > sectors:
        return FieldArea(status, None, None, (), 0)
    slot = status.slot * SECTOR_BYTES
    blobs = [slot_checkpoint(area[k * slot:(k + 1) * slot]) for k in range(SLOTS)]
    runs = [b for b in (blobs[RUN], blobs[RUN_COPY]) if b is not None]
    run = max(runs, key=lambda b: struct.unpack_from("<I", b, _CKPT_STEP)[0], default=None)
    best = None
    if run is not None:
        best_step = struct.unpack_from("<I", run, _CKPT_BEST_STEP)[0]
        best = next((b for b in (blobs[BEST], blobs[BEST_COPY]) if b is not None
                     and struct.unpack_from("<I", b, _CKPT_STEP)[0] == best_step), None)
    log = area[end - (STATUS_SECTORS + LOG_SECTORS) * SECTOR_BYTES:end - STATUS_SECTORS
               * SECTOR_BYTES]
    raws = [log[k:k + ENTRY_BYTES] for k in range(0, len(log), ENTRY_BYTES)]
    entries = [LogEntry.from_bytes(r) for r in raws]
    torn = sum(1 for r, e in zip(raws, entries) if e is None and any(r))
    return FieldArea(status, run, best, tuple(sorted((e for e in entries if e is not None),
                                                     key=lambda e: e.sequence)), torn)


def this_run(entries: Iterable[LogEntry]) -> list[LogEntry]:
    """The entries of the run as it stands: a boot that resumed from step s (START) drops what
    came after s before it (the device trained those steps again, to the same values, and
    logged them anew), and a boot that started anew drops everything before it."""
    kept: list[LogEntry] = []
    for e in entries:
        if e.kind == START:
            kept = [k for k in kept if e.step and k.step <= e.step]
        kept.append(e)
    return kept


def _not_a_blank_image(path) -> str | None:
    """Why the file ``path`` is not a data image `pack` or `card write` may replace (None
    when it is one): another kind of file, a damaged image, or a card copy holding a field
    run, which the device trained and only the card (copy) keeps."""
    with open_input(path, "existing output") as f:
        head = f.read(SECTOR_BYTES)
        if head[:len(IMAGE_MAGIC)] != IMAGE_MAGIC:
            return "is not a data image"
        try:
            layout = ImageLayout.from_header(head, source=str(path))
        except DataError:
            return "is a damaged data image"
        f.seek(layout.checkpoint_lba * SECTOR_BYTES)
        found = read_area(f.read(layout.checkpoint_sectors * SECTOR_BYTES)).status
    if found is None:
        return None
    return (f"holds a field run (step {found.step} of {found.steps}), lost when it is "
            f"replaced: read it first with `zocodegen card read {path} -o RUN`")


#: What `pack -o IMAGE` and `card write IMAGE FILE` replace without --force.
DATA_IMAGE = Replaces("a data image", _not_a_blank_image)
