"""Every status code the firmware can return, in one table.

Each subsystem owns a range of negative codes, so a code names its subsystem on its own: a
DONE or ERROR status from the device means one thing whichever layer produced it. The table
is rendered into the ``include/zo_status.h`` of every generated project (``c_header``), and
the host names codes from the same rows (``describe``), so the two cannot drift apart.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Status:
    name: str      # the C macro
    code: int
    meaning: str   # what the host prints next to the code


@dataclass(frozen=True)
class Subsystem:
    name: str
    header: str    # the C header whose functions return these codes
    ok: str        # its success macro (0)
    first: int     # codes run from first down to last (both negative)
    last: int
    codes: tuple[Status, ...]
    # rendered only into `build --data-source sdcard` firmware's zo_status.h: a link build's C stays
    # byte for byte what it was before the field trainer (issue 50)
    sdcard: bool = False


def _rows(prefix: str, first: int, rows: tuple[tuple[str, str], ...]) -> tuple[Status, ...]:
    """Numbered down from ``first`` in table order: a new code goes at the end of its rows."""
    return tuple(Status(prefix + name, first - i, meaning) for i, (name, meaning)
                 in enumerate(rows))


SUBSYSTEMS = (
    Subsystem("block device", "zo_blockdev.h", "ZO_BLOCKDEV_OK", -1, -9, _rows("ZO_BLOCKDEV_ERR_", -1, (
        ("NOT_ATTACHED", "a read or write before the block device was attached"),
        ("OPEN", "the medium or file cannot be opened"),
        ("IO", "the sector transfer failed (I/O error or link down)"),
        ("RANGE", "a sector beyond the end of the image"),
        ("READ_ONLY", "a write to an image attached read-only"),
        ("ARG", "a NULL pointer or bad argument to the block device"),
    ))),
    Subsystem("data image", "zo_image.h", "ZO_IMAGE_OK", -10, -29, _rows("ZO_IMAGE_ERR_", -10, (
        ("IO", "the block device failed while reading the image"),
        ("MAGIC", "sector 0 is not a zocodegen image header: pack the image with `zocodegen "
                  "pack`"),
        ("VERSION", "the image has another format version: pack it again"),
        ("CRC", "the image header does not match its CRC-32: the header is corrupted"),
        ("FORMAT", "the image header's fields contradict each other"),
        ("SPLIT", "a split index outside train / val / test"),
        ("INDEX", "a record index beyond the split's count"),
        ("ARG", "a NULL image handle"),
        ("INPUT_SIZE", "the image's record input size differs from the model's input"),
        ("LABEL", "a record's label is outside the model's classes"),
        ("CLASSES", "the image has more classes than the model outputs"),
        ("SPLIT_CRC", "a split's records do not match the split's CRC-32"),
        ("NOT_OPEN", "the image has not been opened (command O) on the device"),
        ("RECORD_CRC", "a record's bytes do not match its own CRC-32: the data is corrupted"),
    ))),
    Subsystem("training", "zo_train.h", "ZO_TRAIN_OK", -30, -39, _rows("ZO_TRAIN_ERR_", -30, (
        ("SAMPLE", "the sample source failed"),
        ("LABEL", "a label outside the model's classes"),
        ("CHECKPOINT", "the checkpoint does not belong to this model and run"),
        ("CRC", "the checkpoint does not match its CRC-32"),
        ("IO", "the block device failed while moving a checkpoint"),
        ("NO_BLOCK", "no block selected yet (command B)"),
        ("SPACE", "the image's checkpoint area is too small"),
        ("VAL", "too few validation records for the guard or --lr auto"),
    ))),
    Subsystem("host link", "zo_link.h", "ZO_LINK_OK", -40, -49, _rows("ZO_LINK_ERR_", -40, (
        ("RESTART", "the host answered RESTART: the device starts over with HELLO"),
        ("PROTOCOL", "a link message of the wrong size or content"),
        ("UNSUPPORTED", "a command this firmware does not have"),
    ))),
    # The SD card backend's own failures (targets/common/blockdev_sdmmc.c, docs/sdcard.md): the
    # block device's range above is full, so they take a range of their own.
    Subsystem("SD card", "zo_blockdev.h", "ZO_BLOCKDEV_OK", -50, -59, _rows("ZO_BLOCKDEV_ERR_", -50, (
        ("NO_CARD", "no card in the slot (its card-detect switch is open)"),
        ("TIMEOUT", "the SD card did not answer a command or send its data in time"),
        ("CRC", "an SD card response or data block failed its CRC check"),
        ("WRITE", "the SD card reported that a write failed (its status shows an error)"),
        ("CARD", "the card is unusable: SD 1.x, or it refused the voltage or identification"),
        ("CLOCK", "the SD interface's kernel clock does not run (the PLL output it needs is "
                  "off)"),
    )), sdcard=True),
    # The field trainer's own stops (templates/field/field.c, docs/sdcard.md "Faults").
    Subsystem("field run", "zo_field.h", "ZO_FIELD_OK", -60, -69, _rows("ZO_FIELD_ERR_", -60, (
        ("AREA", "the image's checkpoint area is too small for a field run (two copies of the "
                 "run and best slots, the run log, the status): pack the image with --model "
                 "MODEL (or a larger --checkpoint-kb)"),
        ("IMAGE", "the image was packed for another model or input quantization than the "
                  "firmware's: pack it with --model MODEL"),
        ("OTHER_RUN", "the card holds a run of another build (model or training options): "
                      "write the image to the card again to start a new run"),
        ("DONE", "the card's run is complete, nothing is left to train: read it with "
                 "`zocodegen card read`, or write the image again to train anew"),
        ("BEST", "neither copy of the guard's best slot verifies: the best restarts from the "
                 "run's checkpoint"),
    )), sdcard=True),
)

CODES: dict[int, Status] = {s.code: s for sub in SUBSYSTEMS for s in sub.codes}
BY_NAME: dict[str, Status] = {s.name: s for s in CODES.values()}


def code(name: str) -> int:
    """The value of a C status macro, e.g. ``code("ZO_IMAGE_ERR_RECORD_CRC")``."""
    if any(name == sub.ok for sub in SUBSYSTEMS):
        return 0
    return BY_NAME[name].code


def describe(value: int) -> str:
    """What a firmware status means, with its C name ("0" is success)."""
    if value == 0:
        return "ok"
    status = CODES.get(value)
    if status is None:
        return f"unknown status {value} (not in zocodegen/formats/status.py)"
    return f"{status.meaning} ({status.name})"


def _rendered(sdcard: bool) -> tuple[Subsystem, ...]:
    return tuple(sub for sub in SUBSYSTEMS if sdcard or not sub.sdcard)


def c_header(sdcard: bool = False) -> str:
    """include/zo_status.h: the table as C macros, one block per subsystem (``sdcard``: also
    the subsystems only `build --data-source sdcard` firmware has)."""
    lines = ["/* zo_status.h - every status code of the firmware, one range per subsystem.",
             " * Generated from zocodegen/formats/status.py; the host names codes from the same",
             " * table. Do not edit: add a row there. */",
             "#ifndef ZO_STATUS_H", "#define ZO_STATUS_H"]
    defined: set[str] = set()
    for sub in _rendered(sdcard):  # a second range of one header shares its success macro
        lines += ["", f"/* {sub.name} ({sub.header}): {sub.first}..{sub.last} */"]
        lines += [] if sub.ok in defined else [f"#define {sub.ok} 0"]
        defined.add(sub.ok)
        width = max(len(f"#define {s.name} ({s.code})") for s in sub.codes)
        for s in sub.codes:
            define = f"#define {s.name} ({s.code})"
            line = f"{define:<{width}} /* {s.meaning} */"
            lines += [line] if len(line) <= 100 else [f"/* {s.meaning} */", define]
    lines += ["", "#endif /* ZO_STATUS_H */", ""]
    return "\n".join(lines)


def c_names() -> str:
    """include/zo_status_names.h of `--data-source sdcard` firmware: the name of every code, so a
    field trainer prints ``ZO_FIELD_ERR_AREA`` on its UART where a host is not there to."""
    cases = [f'    case {s.name}:\n        return "{s.name}";' for sub in _rendered(True)
             for s in sub.codes]
    return "\n".join([
        "/* zo_status_names.h - the name of each status code (zo_status.h), for the text a",
        " * field trainer prints. Generated from zocodegen/formats/status.py. */",
        "#ifndef ZO_STATUS_NAMES_H", "#define ZO_STATUS_NAMES_H", "",
        '#include "zo_status.h"', "",
        "static inline const char *zo_status_name(int code)", "{", "    switch (code) {",
        "    case 0:", '        return "ok";', *cases, "    default:",
        '        return "unknown status";', "    }", "}", "", "#endif /* ZO_STATUS_NAMES_H */",
        ""])
