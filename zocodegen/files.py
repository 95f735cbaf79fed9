"""How every command writes a result file: never over one of its own inputs, never half.

A result goes to a temporary name beside its destination and is renamed over it only once it
is complete (and, where asked, checked and on disk), so a crash, a full disk or a refused check
leaves the old file, or nothing, under the final name. A missing parent folder is created, the
same for every command. The temporary name carries the writer's process id: what a power cut
or a kill left behind is removed by the next write of the same file, once no process of that
id is alive, so a long training run does not collect one stale checkpoint per crash.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import glob
import hashlib
import json
import os
import shutil
import stat
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

from .errors import UserError


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
        return False


#: What a path that is no regular file is, by its mode.
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def not_a_file(path: Path) -> str | None:
    """Why ``path`` cannot be read as a file, in words, or None for a regular file: a FIFO
    would block the reader, a device read nothing, and "no such file" for a symlink loop
    would send the user looking for a file that is there."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return "no such file"
        if exc.errno == errno.ELOOP:
            return "a loop of symbolic links"
        return f"not readable ({(exc.strerror or str(exc)).lower()})"
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def not_a_destination(path: Path) -> str | None:
    """What ``path`` is when it exists as no regular file, else None: a result renamed over
    a FIFO, a device (``-o /dev/full``) or a socket would replace it with a file."""
    what = not_a_file(path)
    if what is None or what == "no such file" or what.startswith("not readable"):
        return None  # a new file, or one whose folder refuses us: the write says so
    return what


@contextmanager
def no_empty_folders_on_failure(folder: Path, resumable: str | None = None) -> Iterator[None]:
    """Run a command that writes into ``folder``; when it fails (refused, a full disk,
    interrupted), the folders it created are removed again: a refused command leaves nothing
    behind. Whole, when ``folder`` holds no ``resumable`` file (a run's checkpoint.bin: then
    all in it is this command's debris, a metrics header or a run.json of a run that never
    started); else, and without ``resumable``, only the folders left empty (a run that failed
    at step 40 keeps its checkpoint to resume from, a fleet the logs its message names).
    Folders that were there before are never touched."""
    folder = Path(folder)
    new = [p for p in (folder, *folder.parents) if not os.path.lexists(p)]
    try:
        yield
    except BaseException:
        if new and resumable is not None and not (folder / resumable).exists():
            shutil.rmtree(new[-1], ignore_errors=True)
        elif new:
            for root, _, _ in os.walk(new[-1], topdown=False):
                try:
                    os.rmdir(root)  # only an empty one
                except OSError:
                    pass
        raise


#: The advisory lock file a simulate or train RUN holds while a command writes it.
RUN_LOCK = ".lock"


def blocking_file(folder: Path) -> Path:
    """What stands where ``folder`` must be made: itself, or the first folder above it that
    exists (and so is a file, when making ``folder`` failed), named as the user gave it."""
    return next((path for path in (folder, *folder.parents)
                 if path.exists() or path.is_symlink()), folder)


@contextmanager
def writing_run(folder: Path) -> Iterator[None]:
    """Run a command that writes the run in ``folder`` (`simulate`, `train`): nothing left
    behind when it fails (``no_empty_folders_on_failure``), and ``folder`` locked for its
    whole run, so a second process on the same RUN is refused instead of writing
    checkpoints and run.json between the first's."""
    folder = Path(folder)
    with no_empty_folders_on_failure(folder, "checkpoint.bin"), _locked(folder):
        yield


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``folder/.lock``, never waited for: the kernel drops it when
    the holder ends (a kill -9 included), so a lock file left behind locks nothing. The
    file is removed on release; one locked after its holder removed it is opened again."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise UserError(f"{blocking_file(folder)} is a file, not a directory: choose another "
                        "-o RUN") from None
    except OSError as exc:
        raise UserError(f"cannot make {folder}: {exc.strerror or exc}") from None
    path = folder / RUN_LOCK
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UserError(f"{folder} is in use by another zocodegen process (it holds "
                            f"{path}): wait for it to end, or choose another -o RUN") from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)


def displayable(name: str) -> str:
    """A file or folder name as text every writer takes (UTF-8 files, matplotlib, a strict
    stdout): a name that is not UTF-8 reaches Python with its bytes as surrogates, which
    nothing can encode; they are shown as U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


@dataclass(frozen=True)
class Replaces:
    """What a command's output may replace without ``--force``: its own earlier output of the
    same kind, recognised by its format (``foreign`` says why an existing file is not one, or
    None when it is). Anything else at the output (a user's notes, a model where a data image
    goes, a card copy holding a field run) is refused unless ``--force``."""

    kind: str  # "a data image", in the refusal
    foreign: Callable[[Path], str | None]


def starts_with(kind: str, *magics: bytes, offset: int = 0) -> Replaces:
    """An output kind recognised by the bytes its format starts with (at ``offset``)."""
    def foreign(path: Path) -> str | None:
        with open_input(path, "existing output") as f:
            f.seek(offset)
            head = f.read(max(map(len, magics)))
        return None if any(head.startswith(m) for m in magics) else f"is not {kind}"
    return Replaces(kind, foreign)


def check_output(path: Path, inputs: Iterable[tuple[str, Path | None]] = (),
                 option: str = "-o", replaces: Replaces | None = None,
                 force: bool = False) -> Path:
    """Refuse an output that is a folder or one of the command's inputs (given as
    (option, path) pairs, None for an absent one), also with ``force``; and, unless ``force``,
    an existing file that ``replaces`` does not recognise as the command's own earlier output
    (any existing file when ``replaces`` is None). ``option`` is "" for a positional output."""
    path = Path(path)
    named = f"{option} {path}" if option else str(path)
    what = not_a_destination(path)
    if what is not None:
        raise UserError(f"{named} is {what}; give a file name")
    for name, source in inputs:
        if source is not None and _same_file(path, Path(source)):
            raise UserError(f"{named} is the {name} file: writing it would overwrite "
                            "the input; choose another output name")
    if force or not os.path.lexists(path):
        return path
    try:
        why = "" if replaces is None else replaces.foreign(path)
    except OSError as exc:
        why = f"cannot be read ({(exc.strerror or str(exc)).lower()})"
    if why is not None:
        raise UserError(f"{named} exists{why and ' and '}{why}: choose another name, "
                        "or add --force to replace it")
    return path


@contextmanager
def atomic_writer(path: Path, mode: str = "wb", sync: bool = False,
                  check: Callable[[Path], None] | None = None,
                  permissions: int = 0o666) -> Iterator[IO]:
    """Open a temporary file beside ``path``; when the block ends without an error (and
    ``check(temporary)`` accepts it), move it to ``path``. ``sync``: on disk before the rename
    (checkpoints survive a power cut). ``permissions`` (less the umask) are the file's from
    its creation: a key written 0o600 is never readable by others, not even for a moment.
    OSError becomes a one-line UserError."""
    path = Path(path)
    what = not_a_destination(path)
    if what is not None:
        raise UserError(f"cannot write {path}: it is {what}, not a file")
    # the suffix stays last: readers (ONNX, numpy) tell formats apart by it
    tmp = path.with_name(f".{path.stem}.{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp{path.suffix}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(path)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, permissions)
        with open(fd, mode) as f:
            yield f
            f.flush()
            if sync:
                os.fsync(f.fileno())
        if check is not None:
            check(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # its folder could not be made: nothing was written
            pass


def _remove_stale_temporaries(path: Path) -> None:
    """Delete the temporaries of ``path`` whose writer is no longer alive (an interrupted
    write), keeping those of live processes (another writer may be mid-file)."""
    for stale in path.parent.glob(f".{glob.escape(path.stem)}.*-*.tmp{glob.escape(path.suffix)}"):
        pid = stale.name[len(path.stem) + 2:].split("-", 1)[0]
        if pid.isdigit() and not process_alive(int(pid)):
            stale.unlink(missing_ok=True)


def process_alive(pid: int) -> bool:
    """Whether a process of this id may still be writing (what it left is then not stale)."""
    if pid == os.getpid() or os.name != "posix":  # Windows' kill(pid, 0) would end it
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):  # exists, another user's; or cannot tell: keep it
        return True
    return True


#: Marks the temporary folder a multi-file result is assembled in beside its destination.
FOLDER_STAGING = ".zocodegen-run-"


@contextmanager
def replacing_folder(out: Path) -> Iterator[Path]:
    """A multi-file result (`card read`'s RUN) whole or not at all: yield an empty folder
    beside ``out`` to write it into; when the block ends without an error that folder takes
    ``out``'s place in one rename (``exchange_folders``) and the old ``out``, which the caller
    was allowed to replace, is deleted. On an error (a full disk, Ctrl-C) ``out`` is as it
    was. What a killed process left beside ``out`` is removed by the next write of it."""
    out = Path(out).absolute()
    prefix = f".{os.fsdecode(os.fsencode(out.name)[:200])}{FOLDER_STAGING}"
    staging = out.with_name(f"{prefix}{os.getpid()}-{uuid.uuid4().hex[:12]}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        for stale in out.parent.glob(glob.escape(prefix) + "*"):
            pid = stale.name[len(prefix):].split("-", 1)[0]
            if not pid.isdigit() or process_alive(int(pid)) or stale.is_symlink():
                continue
            if stale.name.endswith("-old") and not os.path.lexists(out):
                stale.rename(out)  # killed between the two renames: the old one back
            else:
                shutil.rmtree(stale, ignore_errors=True)
        staging.mkdir()
    except OSError as exc:
        raise UserError(f"cannot write {out}: {exc.strerror or exc}") from None
    try:
        yield staging
        old = swap_in(staging, out)
    except OSError as exc:
        raise UserError(f"cannot write {out}: {exc.strerror or exc} (nothing "
                        "changed)") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def swap_in(staging: Path, out: Path) -> Path | None:
    """Put the assembled folder ``staging`` at ``out`` in one step (``exchange_folders``,
    else two renames); return where the old ``out`` now is (``staging``'s name with
    ``-old``: from the first rename on, that name says "a tree to retire"), or None when
    there was none. A kill between the two fallback renames leaves the old tree under that
    name and no ``out``, which the next write of ``out`` puts back."""
    if not os.path.lexists(out):
        os.rename(staging, out)
        return None
    old = staging.with_name(staging.name + "-old")
    os.rename(staging, old)
    try:
        exchanged = exchange_folders(old, out)
    except BaseException:
        os.rename(old, staging)
        raise
    if not exchanged:
        os.rename(old, staging)
        os.rename(out, old)
        try:
            os.rename(staging, out)
        except BaseException:
            os.rename(old, out)
            raise
    return old


def exchange_folders(a: Path, b: Path) -> bool:
    """Swap two folders atomically (Linux renameat2 RENAME_EXCHANGE); False where the system
    or the file system has no such rename."""
    if not sys.platform.startswith("linux"):
        return False
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def open_append(path: Path, mode: str = "ab", **kwargs) -> IO:
    """A log to append to (a run's metrics.csv after its whole rewrite, a server's log):
    created if missing, never a FIFO or a device (a FIFO would block the command)."""
    path = Path(path)
    what = not_a_destination(path)
    if what is not None:
        raise UserError(f"cannot write {path}: it is {what}, not a file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, mode, **kwargs)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None


def write_atomic(path: Path, data: bytes, sync: bool = False, permissions: int = 0o666) -> None:
    with atomic_writer(path, sync=sync, permissions=permissions) as f:
        f.write(data)


def write_new(path: Path, data: bytes, permissions: int = 0o666) -> None:
    """``data`` as the new file ``path``, whole, never over an existing one: written beside
    it and linked into place; FileExistsError when ``path`` exists (another process made it
    first: the caller reads theirs)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, permissions)
        with open(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def file_sha256(path: Path, kind: str) -> bytes:
    """SHA-256 of a file's bytes, read a megabyte at a time (images and data can be large):
    the one identity every record of a model, data file or image uses. ``kind``: what the
    file is (the opener's, below)."""
    digest = hashlib.sha256()
    with open_input(path, kind) as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.digest()


def cache_root() -> Path:
    """Where built artefacts are kept between runs: ``ZOCODEGEN_CACHE``, else the XDG cache."""
    base = os.environ.get("ZOCODEGEN_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "zocodegen")
    return Path(base)


# ---- reading: the one opener -----------------------------------------------------------
# Every file a command reads is opened here, so that none can hang it or exhaust its memory:
# a FIFO would block the open (or the first read) forever, a link to /dev/zero is read without
# end, a device is no file at all. docs/contract.md, "What a command reads", is this table.

GiB, MiB = 1 << 30, 1 << 20


@dataclass(frozen=True)
class InputKind:
    """What a command reads of one kind: at most ``limit`` bytes (None: read in parts, never
    whole, so no limit is needed), and whether a block device is meant (a card)."""

    limit: int | None
    block_device: bool = False


#: Every kind of file a command reads, by the name its refusals use.
INPUT_KINDS: dict[str, InputKind] = {
    "model": InputKind(2 * GiB),  # FlatBuffers and protobuf both end at 2 GiB
    "checkpoint": InputKind(2 * GiB),  # the model's trainable parameters, at most
    "data image": InputKind(None),  # a packed image, read a split at a time
    "card": InputKind(None, block_device=True),  # a card in a reader, or a copy of one
    "data": InputKind(64 * GiB),  # DATA.npz, X.npy: read whole, as numpy loads them
    "photo": InputKind(256 * MiB),  # one image file (Pillow also refuses decompression bombs)
    "labels": InputKind(16 * MiB),  # MODEL.labels.json, pack's --labels CSV or JSON
    "manifest": InputKind(16 * MiB),  # a project's manifest.json
    "run record": InputKind(16 * MiB),  # run.json, fleet.json, a device's facts
    "metrics": InputKind(GiB),  # a run's metrics.csv
    "scalars": InputKind(GiB),  # replay's scalar record
    "firmware": InputKind(256 * MiB),  # an ELF the emulated board loads
    "key": InputKind(MiB),  # a PEM key or certificate
    "log": InputKind(64 * MiB),  # a fleet device's log, searched for why it failed
    "project file": InputKind(None),  # a file `build` wrote, hashed a megabyte at a time
    "existing output": InputKind(None),  # what an output would replace: its first bytes
}


class MissingInput(UserError):
    """The input does not exist (a reader of an optional file takes this for "none")."""


def open_input(path: Path | str, kind: str) -> BinaryIO:
    """``path`` opened for reading as a file of ``kind`` (a key of :data:`INPUT_KINDS`), or a
    one-line UserError naming the path and what it is. Opened without blocking and judged by
    what was opened (fstat), so a FIFO swapped in after a check cannot block us."""
    path = Path(path)
    try:
        f = open(path, "rb", opener=_nonblocking)
    except OSError as exc:
        raise _refusal(path, kind, exc) from None
    try:
        check_opened(f.fileno(), path, kind)
    except BaseException:
        f.close()
        raise
    return f


def _nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NONBLOCK)


def check_opened(fd: int, path: Path, kind: str) -> None:
    """Refuse what ``fd`` (``path`` opened with O_NONBLOCK, which no FIFO blocks) holds unless
    it is a file of ``kind`` (or the block device a card kind means) within the kind's limit;
    then make ``fd`` blocking again. For a caller that opens a device itself (a card)."""
    rule = INPUT_KINDS[kind]
    info = os.fstat(fd)
    if not (stat.S_ISREG(info.st_mode) or (rule.block_device and stat.S_ISBLK(info.st_mode))):
        what = next((what for test, what in _KINDS if test(info.st_mode)), "not a regular file")
        meant = ("a card (a block device) or a card's image file" if rule.block_device
                 else f"a {kind} file")
        raise UserError(f"{path} is {what}, not {meant}")
    if rule.limit is not None and info.st_size > rule.limit:
        raise UserError(f"{path} is {info.st_size:,} B, larger than any {kind} file "
                        f"({rule.limit:,} B at most)")
    os.set_blocking(fd, True)


def _refusal(path: Path, kind: str, exc: OSError) -> UserError:
    if exc.errno == errno.ENOENT:
        return MissingInput(f"{kind} file {path} does not exist")
    what = {errno.ELOOP: "is a loop of symbolic links", errno.EISDIR: "is a directory",
            errno.ENXIO: "is a socket or a device with nothing behind it"}.get(exc.errno)
    if what is not None:
        return UserError(f"{path} {what}, not a {kind} file")
    return UserError(f"cannot read {kind} file {path}: {(exc.strerror or str(exc)).lower()}")


def read_input(path: Path | str, kind: str) -> bytes:
    """The whole of ``path``, a file of ``kind`` (:func:`open_input`); never more than its
    kind's limit, even when the file grows while it is read."""
    limit = INPUT_KINDS[kind].limit
    with open_input(path, kind) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            data = f.read(size + 1)  # one read of the size fstat said, and a byte to spare
            if len(data) > size:  # it grew since: read on, to the limit
                data += f.read() if limit is None else f.read(limit + 1 - len(data))
        except OSError as exc:
            raise _refusal(Path(path), kind, exc) from None
    if limit is not None and len(data) > limit:
        raise UserError(f"{path} grew past {limit:,} B while it was read, larger than any "
                        f"{kind} file")
    return data


def read_text(path: Path | str, kind: str) -> str:
    """:func:`read_input` as UTF-8 text (a byte that is none is refused, naming the file)."""
    try:
        return read_input(path, kind).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path} is not UTF-8 text (byte {exc.start}), not a {kind} "
                        "file") from None


def read_json(path: Path | str, kind: str) -> object:
    """:func:`read_text` as JSON; text that is none is refused, naming the file."""
    try:
        return json.loads(read_text(path, kind))
    except ValueError as exc:
        raise UserError(f"{path} is not a readable {kind} file (not JSON: {exc})") from None
