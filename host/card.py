"""`zocodegen card`: a packed image onto a card, and a field run back from one (docs/sdcard.md).

``write`` puts an image on a card for a `build --data-source sdcard` firmware, safely: a regular file
is written whole or not at all; a block device only when it is a whole removable disk that
nothing has mounted, after saying what it holds and how much of it the image overwrites, and
after the user said yes (or gave ``--yes``). The mount table and the kernel's disk facts are
read from ``proc`` and ``sys`` roots, which tests point at fake trees.

``read`` reads back what the device kept in the image's checkpoint area (formats/field.py):
the newest checkpoint that verifies, the guard's best, the run log and the status, into RUN/
as `zocodegen train` writes it, so `zocodegen export MODEL RUN/checkpoint.bin` works on it.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from zocodegen.errors import DataError, UserError
from zocodegen.files import (RUN_LOCK, atomic_writer, check_opened, check_output, open_input,
                             replacing_folder, write_atomic, writing_run)
from zocodegen.formats import field, status
from zocodegen.formats import link as p
from zocodegen.formats.image import SECTOR_BYTES, ImageLayout, verify_image
from zocodegen.training import checkpoint
from zocodegen.training.metrics import MetricsRow, write_curves, write_metrics
from zocodegen.training.runner import end_record
from .trainer import identity_record

CHUNK = 1 << 20
#: What the first sectors of a disk say it holds (offset, bytes, what).
SIGNATURES = ((0, b"ZOIMG01\0", "a zocodegen image"), (512, b"EFI PART", "a GPT partition table"),
              (3, b"EXFAT   ", "an exFAT file system"), (3, b"NTFS    ", "an NTFS file system"),
              (82, b"FAT32   ", "a FAT32 file system"), (54, b"FAT1", "a FAT file system"),
              (1080, b"\x53\xef", "an ext2/3/4 file system"))
Say = Callable[[str], None]


# ---- card write ------------------------------------------------------------------------

@dataclass(frozen=True)
class Disk:
    """A whole disk as the kernel describes it in /sys/block/NAME."""

    name: str
    sectors: int  # of 512 bytes
    removable: bool
    model: str
    partitions: tuple[str, ...]


def disk_of(rdev: tuple[int, int], sys_root: Path = Path("/sys")) -> tuple[Disk, bool]:
    """The disk of block device number (major, minor), and whether that number is one of its
    partitions rather than the disk itself."""
    node = (sys_root / "dev" / "block" / f"{rdev[0]}:{rdev[1]}").resolve()
    if not node.is_dir():
        raise UserError(f"the kernel knows no block device {rdev[0]}:{rdev[1]} "
                        f"({sys_root}/dev/block)")
    partition = (node / "partition").is_file()
    disk = node.parent if partition else node

    def read(name: str, default: str = "") -> str:
        try:
            return (disk / name).read_text().strip()
        except OSError:
            return default

    sd_slot = disk.name.startswith("mmcblk") and read("device/type") == "SD"
    parts = tuple(sorted(c.name for c in disk.iterdir() if (c / "partition").is_file()))
    return Disk(disk.name, int(read("size", "0") or 0), read("removable") == "1" or sd_slot,
                read("device/model") or read("device/name") or "unknown model", parts), partition


def mounted(disk: Disk, mounts: str) -> list[str]:
    """Where ``disk`` or one of its partitions is mounted, from /proc/mounts' text."""
    names = {disk.name, *disk.partitions}
    places = []
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0].startswith("/dev/") and names & {
                os.path.basename(fields[0]), os.path.basename(os.path.realpath(fields[0]))}:
            places.append(fields[1].replace("\\040", " "))
    return places


def check_disk(device: Path, disk: Disk, partition: bool, mounts: str, image_bytes: int) -> None:
    """Refuse what `card write` must not overwrite, naming why and what to do instead."""
    if partition:
        raise UserError(f"{device} is a partition of /dev/{disk.name}: the image goes on the "
                        f"whole card (LBA 0 of the image = block 0 of the card): write it to "
                        f"/dev/{disk.name}")
    places = mounted(disk, mounts)
    if places:
        raise UserError(f"{device} is mounted (on {', '.join(places)}): unmount it first "
                        f"(umount, or eject it in the file manager), then write again")
    if not disk.removable:
        raise UserError(f"{device} ({disk.model}) is not a removable disk: `zocodegen card "
                        "write` only writes cards in a card reader; if you are sure, write "
                        "it with dd (docs/sdcard.md)")
    if disk.sectors * SECTOR_BYTES < image_bytes:
        raise UserError(f"{device} holds {disk.sectors * SECTOR_BYTES:,} B, the image "
                        f"{image_bytes:,} B: use a larger card")


def holds(head: bytes) -> str:
    """What the first sectors of a disk or file say it holds, for the question."""
    found = [what for off, sig, what in SIGNATURES if head[off:off + len(sig)] == sig]
    if not found and head[510:512] == b"\x55\xaa":
        found.append("an MBR partition table")
    if head[:8] == b"ZOIMG01\0":
        try:
            layout = ImageLayout.from_header(head[:SECTOR_BYTES])
        except DataError:
            return "a damaged zocodegen image"
        return (f"a zocodegen image ({layout.count('train'):,} train records; a field run on "
                "it is lost: read it first with `zocodegen card read`)")
    if not any(head):
        return "zeros (nothing recognisable)"
    return ", ".join(found) or "data of no format zocodegen recognises"


def write_card(image: Path, target: Path, yes: bool = False, ask: Callable[[str], str] = input,
               say: Say = print, proc_root: Path = Path("/proc"),
               sys_root: Path = Path("/sys"), force: bool = False) -> None:
    """`zocodegen card write IMAGE TARGET`: a regular file is written whole or not at all,
    over an existing one only when it is a data image without a field run on it (or with
    ``force``); a block device only as described in the module's docstring."""
    layout = verify_image(image)  # a damaged image is refused before anything is touched
    size = layout.image_bytes
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise UserError(f"cannot read {target}: {exc.strerror or exc}") from None
    in_dev = Path(os.path.abspath(target)).parts[1:2] == ("dev",)
    if in_dev and (mode is None or stat.S_ISREG(mode)):
        # a card that is not in the reader (or a mistyped name): writing a regular file in
        # /dev said "written", with the card still blank
        raise UserError(f"{target} is not a disk: no card there (is it in the reader? "
                        "`lsblk` lists the disks and their names); nothing written")
    if mode is None or stat.S_ISREG(mode):
        check_output(Path(target), [("IMAGE", image)], "", field.DATA_IMAGE, force)
        _write_file(image, target)
        say(f"{target}: {size:,} B written (the image {image}); next: copy it to the card, "
            f"or `zocodegen card write {target} /dev/sdX`")
        return
    if not stat.S_ISBLK(mode):
        raise UserError(f"{target} is neither a file nor a disk (block device)")
    rdev = os.stat(target).st_rdev
    disk, partition = disk_of((os.major(rdev), os.minor(rdev)), sys_root)
    check_disk(target, disk, partition, (proc_root / "mounts").read_text(), size)
    with _Raw(target, os.O_RDONLY) as f:
        head = f.read(8 * SECTOR_BYTES)
    say(f"{target}: {disk.model}, {disk.sectors * SECTOR_BYTES:,} B, removable; it holds "
        f"{holds(head)}. The image overwrites its first {size:,} B ({_size(size)}); the rest "
        "of the card is left as it is.")
    if not yes:
        if not sys.stdin.isatty():
            raise UserError(f"{target}: nothing written: add --yes to write without a "
                            "terminal to answer on")
        if ask(f"write {image} to {target}? [y/N] ").strip().lower() not in ("y", "yes"):
            raise UserError(f"{target}: nothing written (not confirmed)")
    digest = _write_disk(image, target, size)
    say(f"{target}: {size:,} B written and read back (sha256 {digest[:16]}...); put the card "
        "in the board and power it")


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


class _Raw:
    """A raw file descriptor as a context manager, its errors one line."""

    def __init__(self, path: Path, flags: int):
        try:
            self.fd = os.open(path, flags | os.O_NONBLOCK)  # a FIFO given as a card: no wait
        except PermissionError:
            raise UserError(f"cannot open {path}: permission denied: run it with sudo, or as a "
                            f"member of the group that owns {path} (disk)") from None
        except OSError as exc:
            raise UserError(f"cannot open {path}: {exc.strerror or exc}") from None
        try:
            check_opened(self.fd, path, "card")
        except UserError:
            os.close(self.fd)
            raise
        self.file = os.fdopen(self.fd, "rb" if flags == os.O_RDONLY else "r+b", buffering=0)

    def __enter__(self):
        return self.file

    def __exit__(self, *exc: object) -> None:
        self.file.close()


def _write_file(image: Path, target: Path) -> None:
    """The image as ``target``, whole or not at all (written beside it, then renamed)."""
    try:
        with open_input(image, "data image") as src, atomic_writer(target, sync=True) as dst:
            for chunk in iter(lambda: src.read(CHUNK), b""):
                dst.write(chunk)
    except OSError as exc:
        raise UserError(f"cannot write {target}: {exc.strerror or exc} (nothing "
                        "changed)") from None


def _write_disk(image: Path, target: Path, size: int) -> str:
    """The image onto the disk from block 0, synced and read back; its SHA-256."""
    written = hashlib.sha256()
    with open_input(image, "data image") as src, _Raw(target, os.O_RDWR) as dst:
        for chunk in iter(lambda: src.read(CHUNK), b""):
            dst.write(chunk)
            written.update(chunk)
        os.fsync(dst.fileno())
        dst.seek(0)
        back = hashlib.sha256()
        left = size
        while left:
            chunk = dst.read(min(CHUNK, left))
            if not chunk:
                break
            back.update(chunk)
            left -= len(chunk)
    if back.digest() != written.digest():
        raise UserError(f"{target}: what was read back differs from the image: the card is "
                        "failing or was removed; write again, or use another card")
    return written.hexdigest()


# ---- card read -------------------------------------------------------------------------

@dataclass(frozen=True)
class CardRun:
    """What `card read` found and wrote."""

    status: field.FieldStatus
    identity: p.Identity
    step: int | None  # of checkpoint.bin (None: no checkpoint saved yet)
    best_step: int | None
    rows: int
    torn: int  # log entries that did not verify
    measured: bool = True  # an accuracy was measured (the status's last one is a measurement)


def read_card(source: Path, run_dir: Path, force: bool = False) -> CardRun:
    """`zocodegen card read SOURCE -o RUN` (the module's docstring): RUN is replaced whole
    (files.replacing_folder), so no file of an earlier run stays beside the new one."""
    run_dir = Path(run_dir)
    _check_run_output(source, run_dir, force)
    with _Raw(source, os.O_RDONLY) as f:
        try:
            layout = ImageLayout.from_header(f.read(SECTOR_BYTES), source=str(source))
        except DataError as exc:
            raise UserError(f"{exc}: is it the card a field trainer trained from?") from None
        f.seek(layout.checkpoint_lba * SECTOR_BYTES)
        raw = f.read(layout.checkpoint_sectors * SECTOR_BYTES)
    if len(raw) < layout.checkpoint_sectors * SECTOR_BYTES:
        raise UserError(f"{source} ends inside the image's checkpoint area: a card or a copy "
                        "of one holds the whole image")
    area = field.read_area(raw)
    if area.status is None:
        raise UserError(f"{source} holds no field run: no `--data-source sdcard` firmware has "
                        "trained from it yet (or the image's checkpoint area was too small "
                        "for one: pack with --model MODEL)")
    try:
        identity = p.parse_hello(area.status.identity)
    except ValueError as exc:
        raise UserError(f"{source}: the field run's status record verifies, but its identity "
                        f"(the firmware's HELLO) does not: {exc}: was the card written by a "
                        "zocodegen field trainer?") from None
    if area.run is None and _written_slots(raw, area.status, (field.RUN, field.RUN_COPY)):
        raise UserError(f"{source}: the field run (step {area.status.step} of "
                        f"{area.status.steps}) saved a checkpoint, but both copies of it are "
                        "damaged (neither verifies): nothing to read back; the card is left "
                        "as it is")
    entries = field.this_run(area.entries)
    rows = metrics_rows(entries)
    with writing_run(run_dir), replacing_folder(run_dir) as new:
        if area.run is not None:
            checkpoint.save_bytes(new / "checkpoint.bin", area.run)
        if area.best is not None and identity.guard:
            checkpoint.save_bytes(new / "best.bin", area.best)
        write_metrics(new / "metrics.csv", rows)
        if any(not math.isnan(r.loss) for r in rows):
            write_curves(rows, new, f"{identity.target} (card): {identity.estimator}, "
                         f"Q={identity.queries}")
        write_atomic(new / "run.json", (json.dumps(
            run_record(source, area.status, identity, entries), indent=2) + "\n").encode())
    return CardRun(area.status, identity, _step(area.run), _step(area.best), len(rows),
                   area.torn, any(r.accuracy is not None for r in rows))


def _written_slots(raw: bytes, status: field.FieldStatus, slots: tuple[int, ...]) -> bool:
    """Whether any of these checkpoint slots holds bytes (a packed image's are zeros): a
    checkpoint was saved there, whether it still verifies or not."""
    size = status.slot * SECTOR_BYTES
    if field.area_sectors(status.slot) * SECTOR_BYTES > len(raw):  # no run's slots fit
        return False
    return any(any(raw[k * size:(k + 1) * size]) for k in slots)


def _check_run_output(source: Path, run_dir: Path, force: bool) -> None:
    """Refuse a RUN that holds files (unless ``force``), and one that holds SOURCE (also with
    ``force``: replacing RUN would delete the card copy being read)."""
    try:
        inside = Path(source).resolve().is_relative_to(run_dir.resolve())
    except (OSError, RuntimeError):
        inside = False
    if inside:
        raise UserError(f"-o {run_dir} holds {source}, the card copy being read: replacing "
                        "RUN would delete it; read it into another -o RUN")
    if run_dir.is_dir() and any(p.name != RUN_LOCK for p in run_dir.iterdir()) and not force:
        raise UserError(f"{run_dir} is not empty: read the card into a new -o RUN, or add "
                        "--force to replace it (the whole folder)")


def _step(blob: bytes | None) -> int | None:
    return None if blob is None else checkpoint.decode(blob).step


def metrics_rows(entries: list[field.LogEntry]) -> list[MetricsRow]:
    """metrics.csv's rows from the run log, one per step that has any: the accuracy before
    training, each checkpoint's mean loss, η and accuracy, each guard check's validation
    accuracy and decision (the rows `train` writes, at checkpoints and checks)."""
    rows: dict[int, MetricsRow] = {}

    def merge(step: int, **values: object) -> None:
        rows[step] = replace(rows.get(step, MetricsRow(step, math.nan, 0.0)), **values)

    for e in entries:
        share = e.correct / e.of if e.of else None
        if e.kind == field.EVALUATION:
            merge(e.step, accuracy=share)
        elif e.kind == field.CHECKPOINT:
            merge(e.step, loss=e.loss_q16 / 65536, lr=e.lr, accuracy=share)
        elif e.kind == field.GUARD_CHECK:
            decision = p.Decision(e.decision)
            merge(e.step, val_accuracy=share,
                  event="" if decision == p.Decision.NONE else decision.name.lower())
    return [rows[k] for k in sorted(rows)]


def run_record(source: Path, found: field.FieldStatus, identity: p.Identity,
               entries: list[field.LogEntry]) -> dict:
    """run.json: the firmware as `train` records it, the card, and what the device chose."""
    record: dict = {"firmware": identity_record(identity), "image": str(source),
                    "device": f"card {source}",
                    "field": {"state": found.state, "status": found.status,
                              "status_name": status.describe(found.status), "step": found.step,
                              "steps": found.steps, "checkpoint_every": found.every,
                              "boots": found.boots}}
    for e in entries:
        if e.kind == field.EVALUATION and e.of:
            record["accuracy_before"] = e.correct / e.of
        elif e.kind == field.LR_CHOSEN:
            record["lr"] = e.eta_ppm / 1e6
        elif e.kind == field.BLOCK:
            record["block"] = e.value
        elif e.kind == field.STOP:
            record["end"] = end_record(e.step, e.value, e.correct, e.of)
    return record


def describe(source: Path, run_dir: Path, found: CardRun) -> list[str]:
    """What `card read` prints."""
    s = found.status
    where = f"step {s.step} of {s.steps}, {s.boots} boot(s)"
    record = (f" at record {s.value}" if s.status in (status.code("ZO_IMAGE_ERR_RECORD_CRC"),
                                                       status.code("ZO_IMAGE_ERR_LABEL"))
              else "")
    state = {"complete": f"run complete ({where})", "training": f"still training ({where}; "
             "the card was taken out, or the board lost power)"}.get(
        s.state, f"stopped at {where}: {status.describe(s.status)}{record}")
    lines = [f"{source}: a field run of {found.identity.target}, {state}"]
    split = {0: "train", 1: "validation", 2: "test"}.get(s.split)
    if split and s.of and found.measured:
        lines.append(f"last {split} accuracy {s.correct} of {s.of} "
                     f"({100 * s.correct / s.of:.1f}%)")
    elif split:
        lines.append(f"no {split} accuracy measured (the run stopped before its first "
                     "measurement)")
    files = [f"checkpoint.bin (step {found.step})" if found.step is not None
             else "no checkpoint yet"]
    if found.best_step is not None:
        files.append(f"best.bin (step {found.best_step})")
    files.append(f"metrics.csv ({found.rows} rows)")
    lines.append(f"{run_dir}/: " + ", ".join(files) + ", run.json")
    if found.torn:
        lines.append(f"{found.torn} run log entr{'y' if found.torn == 1 else 'ies'} did not "
                     "verify (torn by a power cut, or overwritten): left out")
    if found.step is not None:
        lines.append(f"next: zocodegen export MODEL {run_dir}/checkpoint.bin -o tuned.tflite "
                     "(tuned.onnx for an ONNX MODEL)")
    return lines
