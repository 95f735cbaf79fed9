"""How `build` writes a project folder: whole or not at all, and never over a user's files
(docs/contract.md, "What `build` may overwrite, and how").

The new project is assembled in a temporary folder beside ``-o DIR`` and swapped in with one
rename, so a refused build, a full disk or a killed process leaves under DIR either the old
project or the new one, never a mix. The new tree holds every generated file (one whose bytes
did not change is a hard link to the old file, so its mtime stays and `make` rebuilds
nothing) and every other file of the old DIR: the user's notes and data, and make's
``build/``. What an earlier build generated and this one does not is left out: the Makefile
compiles folders by wildcard, so a stale source would be linked in.

A project is ours when its ``manifest.json`` records the SHA-256 of every file the build
wrote and a signature, an HMAC-SHA-256 of the manifest under the user's own key
(``cache_root()/project.key``, made on the first build): a hand-written, edited or re-signed
manifest, or another tool's, is not taken for ours, so it cannot make a build delete anything.
Refused unless ``force``: a DIR that holds files and no manifest we signed, a generated file
changed since (its hash is not the recorded one), and a file of the user's where this build
writes one. A file is only ever deleted when a signed manifest recorded it and its bytes are
still the recorded ones; anything else in the old tree after the swap (a file written into
DIR while the build ran) is moved into the new one.
"""
from __future__ import annotations

import errno
import glob
import hashlib
import hmac
import json
import os
import secrets
import shutil
import stat
import sys
import uuid
from collections.abc import Iterable
from pathlib import Path

from ..errors import UserError
from ..files import (MissingInput, blocking_file, cache_root, file_sha256,
                     no_empty_folders_on_failure, process_alive, read_input, swap_in,
                     write_new)

MANIFEST = "manifest.json"
#: Marks the temporary folders a build assembles beside DIR (and the old project it swaps out).
STAGING = ".zocodegen-"
#: How many bytes of DIR's name they carry: with the marker, a process id, 12 hex digits and
#: "-old", still within the 255 bytes a file name may have.
NAME_KEPT = 200
#: The user's signing key, in the cache folder: 32 random bytes, readable by the user only.
KEY_FILE = "project.key"
KEY_BYTES = 32


def sign(manifest: dict, files: dict[str, str]) -> str:
    """The text of ``manifest.json``: ``manifest`` with the file list, the SHA-256 of each
    file, and the signature that tells a later build this project is its own."""
    record = dict(manifest, files=sorted([*files, MANIFEST]),
                  file_sha256={rel: _sha256(files[rel].encode()) for rel in sorted(files)})
    record["signature"] = _signature(record)
    return json.dumps(record, indent=2) + "\n"


def _signature(record: dict) -> str:
    body = json.dumps({k: v for k, v in record.items() if k != "signature"}, sort_keys=True)
    return hmac.new(signing_key(), b"zocodegen project\0" + body.encode(),
                    hashlib.sha256).hexdigest()


def signing_key() -> bytes:
    """The user's key for manifests (made once, 0o600): only a build by this user signs a
    manifest a later build trusts to say which files it may delete."""
    path = cache_root() / KEY_FILE
    try:
        key = read_input(path, "key")
    except MissingInput:
        try:
            write_new(path, secrets.token_bytes(KEY_BYTES), permissions=0o600)
        except FileExistsError:  # another build made it first: use theirs
            pass
        return signing_key()
    if len(key) != KEY_BYTES:
        raise UserError(f"{path} is not a zocodegen signing key ({KEY_BYTES} bytes): delete "
                        "it (projects signed with it are then rebuilt only with --force)")
    return key


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _signed_files(out_dir: Path) -> dict[str, str] | None:
    """Relative path -> SHA-256 of the files the manifest in ``out_dir`` says a build wrote;
    None unless that manifest carries a valid signature. Only paths inside the project."""
    try:
        record = json.loads(read_input(out_dir / MANIFEST, "manifest"))
    except (MissingInput, ValueError):
        return None
    if not isinstance(record, dict) or record.get("signature") != _signature(record):
        return None
    hashes = record.get("file_sha256")
    if not isinstance(hashes, dict):
        return None
    return {rel: digest for rel, digest in hashes.items() if isinstance(digest, str)
            and not Path(rel).is_absolute() and ".." not in Path(rel).parts}


def write_project(files: dict[str, str], out_dir: Path, force: bool = False) -> None:
    """Write the rendered ``files`` as the project in ``out_dir``, whole or not at all;
    ``force`` replaces files the user wrote or changed where the build writes (everything
    else of theirs is kept, always)."""
    shown = Path(out_dir)
    data = {rel: text.encode() for rel, text in files.items()}
    out = staging = None
    try:
        with no_empty_folders_on_failure(shown):
            if shown.exists() and not shown.is_dir():
                raise UserError(f"{shown} exists and is not a directory; choose another -o DIR")
            if not blocking_file(shown).is_dir():  # a file where a folder above DIR goes
                raise UserError(f"cannot write the project into {shown}: "
                                f"{blocking_file(shown)} is a file, not a directory; choose "
                                "another -o DIR")
            out = shown.resolve()  # a symlink's folder is the one replaced
            if out.parent.is_dir():
                _remove_stale(out)
            existing, folders = _listing(out)
            old = _signed_files(out)
            if existing and not force:
                _refuse_overwrites(shown, data, existing, old)
            out.parent.mkdir(parents=True, exist_ok=True)
            staging = out.with_name(f"{_prefix(out)}{os.getpid()}-{uuid.uuid4().hex[:12]}")
            staging.mkdir()
            try:
                _assemble(staging, data, existing, folders, old)
                retired = _swap(staging, out)
            except BaseException:  # a full disk, Ctrl-C: the old project was not touched
                shutil.rmtree(staging, ignore_errors=True)
                raise
    except OSError as exc:
        raise UserError(f"cannot write the project into {shown}: "
                        f"{_refused(exc, shown, (staging, out))}"
                        f"(nothing changed){_hint(exc, shown)}") from None
    if retired is not None:
        _retire(retired, out, old or {}, {rel: _inode(existing[rel]) for rel in data
                                          if rel in existing})


def _refused(exc: OSError, shown: Path, roots: tuple[Path | None, ...]) -> str:
    """What the system refused, named as the user knows it ("DIR/src: File exists ..."):
    a path in the staging folder or the resolved DIR is shown under DIR."""
    why = f"{exc.strerror or exc} "
    if not isinstance(exc.filename, (str, os.PathLike)):
        return why
    path = Path(exc.filename)
    for root in roots:
        if root is not None and path.is_relative_to(root):
            path = shown / path.relative_to(root)
            break
        if root is not None and root.is_relative_to(path):  # a folder above DIR
            path = (shown / "_").parents[len(root.parts) - len(path.parts)]
            break
    if exc.errno in (errno.EEXIST, errno.ENOTDIR):
        return (f"{path}: {exc.strerror}: a file (or a link to one) is where the project "
                "needs a folder; move it away ")
    return f"{path}: {why}"


def _hint(exc: OSError, shown: Path) -> str:
    """What to do when the swap itself is what the system refused."""
    if exc.errno in (errno.EBUSY, errno.EXDEV):
        return ": it cannot be replaced (a mount point?); build into a folder inside it"
    if exc.errno == errno.EACCES:
        return f": the new project is assembled beside it, in {shown.absolute().parent}"
    return ""


def _listing(out: Path) -> tuple[dict[str, Path], dict[str, tuple[int, bool]]]:
    """Every file (symlinks included, not followed) under ``out`` by relative path, and every
    folder with its permissions and whether it is empty; both empty when ``out`` does not
    exist."""
    files: dict[str, Path] = {}
    folders: dict[str, tuple[int, bool]] = {}
    if not out.is_dir():
        return files, folders
    pending = [out]
    while pending:
        folder = pending.pop()
        with os.scandir(folder) as scan:
            entries = list(scan)
        folders[folder.relative_to(out).as_posix()] = (stat.S_IMODE(folder.lstat().st_mode),
                                                       not entries)
        for entry in entries:
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                pending.append(path)
            else:
                files[path.relative_to(out).as_posix()] = path
    return files, folders


def _digest(path: Path) -> str | None:
    """SHA-256 of a regular file's bytes; None for anything else (a symlink, a folder, a
    FIFO, which reading would block on): never a file build wrote."""
    if not stat.S_ISREG(path.lstat().st_mode):
        return None
    return file_sha256(path, "project file").hex()


def _refuse_overwrites(shown: Path, data: dict[str, bytes], existing: dict[str, Path],
                       old: dict[str, str] | None) -> None:
    """One line naming what the build would overwrite or delete that the user wrote."""
    if old is None:
        raise UserError(
            f"{shown} is not a project zocodegen built (it has no {MANIFEST} zocodegen signed) "
            f"and holds {_some(existing)}: build into a new or empty folder, or add --force to "
            "build into this one (files of the names the build writes are replaced, the others "
            "kept)")
    edited = sorted(rel for rel, digest in old.items()
                    if rel in existing and _digest(existing[rel]) != digest)
    taken = sorted(rel for rel in data if rel in existing and rel not in old and rel != MANIFEST
                   and _digest(existing[rel]) != _sha256(data[rel]))
    if edited or taken:
        what = "; ".join(part for part in (
            edited and f"changed since zocodegen wrote them: {_some(edited)}",
            taken and f"yours where the build writes: {_some(taken)}") if part)
        raise UserError(f"{shown} holds files the build would overwrite or delete ({what}): "
                        "move them aside, or add --force to replace them (files you added "
                        "elsewhere are kept)")


def _some(names: Iterable[str], shown: int = 5) -> str:
    names = sorted(names)
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"{len(names)} file(s): " + ", ".join(names[:shown]) + more


def _prefix(out: Path) -> str:
    """How the names of the temporary folders of a build into ``out`` begin."""
    return f".{os.fsdecode(os.fsencode(out.name)[:NAME_KEPT])}{STAGING}"


def _remove_stale(out: Path) -> None:
    """Clear the temporary folders of builds into ``out`` that were killed. One still being
    assembled holds only copies: deleted. An old project swapped out (``-old``) is put back
    when nothing is at ``out`` (a crash between the two renames of a swap without
    RENAME_EXCHANGE), else retired as a finished build retires it (``_retire``)."""
    for stale in out.parent.glob(glob.escape(_prefix(out)) + "*"):
        pid = stale.name.rsplit(STAGING, 1)[1].split("-", 1)[0]
        if not stale.is_dir() or stale.is_symlink() or not pid.isdigit() \
                or process_alive(int(pid)):
            continue
        if not stale.name.endswith("-old"):
            shutil.rmtree(stale)
        elif not out.exists():
            stale.rename(out)
        else:
            _retire(stale, out, _signed_files(out) or {})


def _assemble(staging: Path, data: dict[str, bytes], existing: dict[str, Path],
              folders: dict[str, tuple[int, bool]], old: dict[str, str] | None) -> None:
    """The new project in ``staging``: the generated files, and every file of the old one
    that is neither generated now nor a file an earlier build generated, unchanged since."""
    for rel, path in existing.items():
        if rel not in data and not _generated(rel, path, old):
            _carry(path, staging / rel)
    for rel, content in data.items():
        target = staging / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel in existing and _digest(existing[rel]) == _sha256(content):
            _carry(existing[rel], target)  # unchanged: the same file, the same mtime
        else:
            _write(target, content)
    for rel, (mode, empty) in sorted(folders.items(),
                                     key=lambda f: (f[0] == ".", -f[0].count("/"))):
        folder = staging / rel
        if empty:
            folder.mkdir(parents=True, exist_ok=True)  # the user's empty folder
        if folder.is_dir():  # deepest first: a folder closed to writing is filled already
            folder.chmod(mode)


def _generated(rel: str, path: Path, recorded: dict[str, str] | None) -> bool:
    """Whether ``path`` is a file a signed manifest recorded, with the recorded bytes: the
    only files a build may delete (besides those at the names it writes)."""
    return recorded is not None and rel in recorded and _digest(path) == recorded[rel]


def _retire(old_tree: Path, out: Path, recorded: dict[str, str],
            replaced: dict[str, tuple[int, int]] | None = None) -> None:
    """Delete the old project swapped out of ``out``, file by file: a file also in the new
    tree (the same file, or the same bytes), one a signed manifest (``recorded``, or the old
    tree's own: another build's that swapped in meanwhile) recorded with these bytes, and one
    the build was let replace (``replaced``: at a name it writes, listed before it
    began) go; any other (written into DIR while the build ran) is moved into the new tree.
    One whose name the new tree has taken stays in ``old_tree``, which is then kept and named
    on stderr."""
    replaced = replaced or {}
    own = _signed_files(old_tree)
    kept = []
    for folder, _, names in os.walk(old_tree, topdown=False):
        for name in names:
            path = Path(folder, name)
            rel = path.relative_to(old_tree).as_posix()
            target = out / rel
            try:
                ours = (own is not None if rel == MANIFEST else
                        _generated(rel, path, recorded) or _generated(rel, path, own))
                if ours or _same_entry(path, target) or replaced.get(rel) == _inode(path):
                    path.unlink()
                elif not os.path.lexists(target):
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.rename(path, target)
                else:
                    kept.append(rel)
            except OSError:
                kept.append(rel)
        try:
            os.rmdir(folder)
        except OSError:
            pass
    if kept:
        print(f"zocodegen: {len(kept)} file(s) written into {out} while it was built are kept "
              f"in {old_tree} (the new project has files of their names): {_some(kept)}",
              file=sys.stderr)


def _inode(path: Path) -> tuple[int, int]:
    st = path.lstat()
    return st.st_dev, st.st_ino


def _same_entry(a: Path, b: Path) -> bool:
    """``a`` and ``b`` are one file (a hard link), or regular files of the same bytes."""
    try:
        sa, sb = a.lstat(), b.lstat()
    except OSError:
        return False
    if (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino):
        return True
    return stat.S_ISREG(sa.st_mode) and stat.S_ISREG(sb.st_mode) \
        and sa.st_size == sb.st_size and _digest(a) == _digest(b)


def _carry(source: Path, target: Path) -> None:
    """Put a file of the old project into the new one: a hard link (no bytes copied, the
    mtime kept), else a copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:  # another file system inside DIR, or one without hard links
        if source.is_symlink():
            os.symlink(os.readlink(source), target)
        else:
            shutil.copy2(source, target)


def _write(target: Path, content: bytes) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _swap(staging: Path, out: Path) -> Path | None:
    """Put the assembled ``staging`` at ``out`` in one step; return where the old project now
    is (``staging``'s name with ``-old``, for ``_retire``), None when there was none. The
    process's own working folder, when inside ``out``, follows to the new tree."""
    try:
        here = Path.cwd()
    except OSError:
        here = None
    retired = swap_in(staging, out)
    if here is not None and here.is_relative_to(out):
        os.chdir(here if here.is_dir() else out)
    return retired
