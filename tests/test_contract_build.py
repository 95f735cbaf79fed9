"""`build -o DIR` over folders that already hold something (docs/contract.md, "What `build`
may overwrite, and how"): a folder that is not a project zocodegen built, a generated file the
user changed, a file of the user's where the build writes, a half-written project, file names
that are not UTF-8, an -o name too long, a full disk part-way.

Each row of the table sets up a folder and runs `build` into it in-process (``main``): exit 2,
one line on stderr naming the problem and ``--force`` where that is the way out, and every
byte under the test's folder as it was (nothing deleted, nothing overwritten, no temporary
folder or empty parent left behind).
"""
from __future__ import annotations

import builtins
import errno
import io
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import FIXTURES, assert_refused
import zocodegen
from zocodegen.cli import main
from zocodegen import files as file_io
from zocodegen.codegen import project_files
from zocodegen.errors import UserError

DIGITS = FIXTURES / "digits_cnn.tflite"
MCUNET = FIXTURES / "mcunet_tiny.tflite"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """An inference-only digits project for the native target, as `build` wrote it."""
    out = tmp_path_factory.mktemp("built") / "p"
    assert main(["build", str(DIGITS), "--target", "native", "-o", str(out)]) == 0
    return out


def _build(out: Path, *extra: str, model: Path = DIGITS) -> int:
    return main(["build", str(model), "--target", "native", "-o", str(out), *extra])


def _snapshot(root: Path) -> dict[str, object]:
    """Every entry under ``root``: a file's bytes and permissions, a folder's permissions, a
    symlink's target."""
    out: dict[str, object] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            rel = path.relative_to(root).as_posix()
            mode = stat.S_IMODE(path.lstat().st_mode)
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                out[rel] = ("dir", mode)
            else:
                out[rel] = (path.read_bytes(), mode)
    return out


# ------------------------------------------------------------------ the folders of the table
def foreign_manifest(tmp: Path, built: Path) -> Path:
    """Issue 47 defect 1: another tool's manifest.json listing the user's files."""
    p = tmp / "p"
    (p / "data").mkdir(parents=True)
    (p / "data" / "train.csv").write_text("x\n")
    (p / "README").write_text("mine\n")
    (p / "manifest.json").write_text('{"files": ["data/train.csv", "README"]}\n')
    return p


def user_files(tmp: Path, built: Path) -> Path:
    """Defect 2: the user's own Makefile and notes."""
    p = tmp / "p"
    p.mkdir()
    (p / "Makefile").write_text("mine:\n\ttrue\n")
    (p / "notes.txt").write_text("keep me\n")
    return p


def edited_source(tmp: Path, built: Path) -> Path:
    """Defect 2: a hand edit of a generated src/main.c."""
    p = tmp / "p"
    shutil.copytree(built, p)
    with open(p / "src" / "main.c", "a") as f:
        f.write("/* my change */\n")
    return p


def user_file_where_the_build_writes(tmp: Path, built: Path) -> Path:
    """An inference project whose user added src/training.c; a training build writes one."""
    p = tmp / "p"
    shutil.copytree(built, p)
    (p / "src" / "training.c").write_text("/* mine */\n")
    return p


def generated_file_replaced_by_a_link(tmp: Path, built: Path) -> Path:
    """A generated file the user replaced by a symlink to their own copy."""
    p = tmp / "p"
    shutil.copytree(built, p)
    (tmp / "my_model.c").write_text("/* mine */\n")
    (p / "src" / "model.c").unlink()
    (p / "src" / "model.c").symlink_to(tmp / "my_model.c")
    return p


def half_written_without_manifest(tmp: Path, built: Path) -> Path:
    """What an interrupted older build left: some files, one cut short, no manifest."""
    p = tmp / "p"
    shutil.copytree(built, p)
    (p / "manifest.json").unlink()
    model_c = p / "src" / "model.c"
    model_c.write_bytes(model_c.read_bytes()[:100])
    return p


def half_written_manifest(tmp: Path, built: Path) -> Path:
    """A project whose manifest.json was cut in half: no longer one zocodegen signed."""
    p = tmp / "p"
    shutil.copytree(built, p)
    manifest = p / "manifest.json"
    manifest.write_bytes(manifest.read_bytes()[: manifest.stat().st_size // 2])
    return p


def edited_manifest(tmp: Path, built: Path) -> Path:
    """A signed manifest edited by hand to list a file of the user's: not taken for ours."""
    p = tmp / "p"
    shutil.copytree(built, p)
    (p / "notes.txt").write_text("keep me\n")
    record = json.loads((p / "manifest.json").read_text())
    record["file_sha256"]["notes.txt"] = "0" * 64
    (p / "manifest.json").write_text(json.dumps(record))
    return p


def older_manifest(tmp: Path, built: Path) -> Path:
    """A project whose manifest has a file list and no signature (an older zocodegen's)."""
    p = tmp / "p"
    shutil.copytree(built, p)
    record = json.loads((p / "manifest.json").read_text())
    del record["signature"], record["file_sha256"]
    (p / "manifest.json").write_text(json.dumps(record))
    return p


def foreign_non_utf8_makefile(tmp: Path, built: Path) -> Path:
    """Defect 14: a Makefile that is not UTF-8 in a folder zocodegen did not write."""
    p = tmp / "p"
    p.mkdir()
    (p / "Makefile").write_bytes(b"# caf\xe9\nall:\n\ttrue\n")
    return p


def edited_non_utf8_makefile(tmp: Path, built: Path) -> Path:
    """Defect 14: the generated Makefile edited into bytes that are not UTF-8."""
    p = tmp / "p"
    shutil.copytree(built, p)
    with open(p / "Makefile", "ab") as f:
        f.write(b"# caf\xe9\n")
    return p


def too_long_name(tmp: Path, built: Path) -> Path:
    """Defect 22: a name longer than the file system takes, under a folder to be made."""
    return tmp / "out" / ("a" * 300)


Setup = Callable[[Path, Path], Path]
ROWS: list[tuple[str, Setup, tuple[str, ...], tuple[str, ...]]] = [
    ("1 a foreign manifest.json listing the user's files", foreign_manifest, (),
     ("not a project zocodegen built", "README", "data/train.csv", "--force")),
    ("2 a folder of the user's files", user_files, (),
     ("not a project zocodegen built", "Makefile", "notes.txt", "--force")),
    ("2 a generated source edited by hand", edited_source, (),
     ("changed since zocodegen wrote them", "src/main.c", "--force")),
    ("2 a file of the user's where the build writes", user_file_where_the_build_writes,
     ("--train", "full"), ("yours where the build writes", "src/training.c", "--force")),
    ("2 a generated file replaced by a symlink", generated_file_replaced_by_a_link, (),
     ("src/model.c", "--force")),
    ("2 a half-written project without its manifest", half_written_without_manifest, (),
     ("not a project zocodegen built", "--force")),
    ("2 a half-written manifest", half_written_manifest, (),
     ("not a project zocodegen built", "--force")),
    ("1 a signed manifest edited by hand", edited_manifest, (),
     ("not a project zocodegen built", "--force")),
    ("1 an unsigned manifest", older_manifest, (), ("not a project zocodegen built",)),
    ("14 a foreign Makefile that is not UTF-8", foreign_non_utf8_makefile, (),
     ("not a project zocodegen built", "Makefile")),
    ("14 a generated Makefile edited to bytes that are not UTF-8", edited_non_utf8_makefile,
     (), ("changed since zocodegen wrote them", "Makefile")),
    ("22 an -o name too long", too_long_name, (), ("File name too long",)),
]


@pytest.mark.parametrize("name, setup, extra, words", ROWS, ids=[r[0] for r in ROWS])
def test_a_refused_build_changes_nothing(built, tmp_path, capsys, name, setup, extra, words):
    out = setup(tmp_path, built)
    before = _snapshot(tmp_path)
    code = _build(out, *extra)
    assert_refused(code, capsys.readouterr().err, words)
    assert _snapshot(tmp_path) == before


# ------------------------------------------------------------------------ what --force does
@pytest.mark.parametrize("setup", [foreign_manifest, user_files, edited_source,
                                   user_file_where_the_build_writes,
                                   half_written_without_manifest, foreign_non_utf8_makefile])
def test_force_replaces_the_generated_names_and_keeps_the_rest(built, tmp_path, setup):
    out = setup(tmp_path, built)
    extra = ("--train", "full") if setup is user_file_where_the_build_writes else ()
    before = _snapshot(out)
    assert _build(out, *extra, "--force") == 0
    manifest = json.loads((out / "manifest.json").read_text())
    after = _snapshot(out)
    for rel, entry in before.items():  # every file of another name is kept as it was
        if rel not in manifest["files"] and not entry[0] == "dir":
            assert after.get(rel) == entry, rel
    for rel, digest in manifest["file_sha256"].items():
        assert project_files._sha256((out / rel).read_bytes()) == digest, rel
    assert _build(out, *extra) == 0  # now a project of ours: no --force needed


def test_the_api_takes_force(tmp_path):
    out = user_files(tmp_path, tmp_path)
    with pytest.raises(UserError, match="--force"):
        zocodegen.build(DIGITS, target="native", output=out)
    assert zocodegen.build(DIGITS, target="native", output=out, force=True).project == out
    assert (out / "notes.txt").read_text() == "keep me\n"


# ------------------------------------------------------------------- rebuilds that go ahead
def test_an_empty_folder_is_built_into(tmp_path):
    (tmp_path / "p").mkdir()
    assert _build(tmp_path / "p") == 0
    assert (tmp_path / "p" / "Makefile").is_file()


def test_a_rebuild_over_itself_touches_no_unchanged_file(built, tmp_path, capsys):
    """`make` compares mtimes: an identical regeneration must leave them, and keep make's
    build/ and the user's files."""
    out = tmp_path / "p"
    shutil.copytree(built, out)
    (out / "notes.txt").write_text("keep me\n")
    (out / "build" / "native").mkdir(parents=True)
    (out / "build" / "native" / "model").write_bytes(b"\x7fELF made by make")
    times = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    before = _snapshot(out)
    assert _build(out) == 0
    assert _snapshot(out) == before
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == times
    assert not [p for p in tmp_path.iterdir() if p.name != "p"]  # no temporary left


def test_a_rebuild_with_another_model_keeps_the_users_files(tmp_path):
    """Over our own unedited project: the new files, the stale ones gone (the Makefile
    compiles src/train/*.c by wildcard), the user's files and folders kept with their
    permissions."""
    out = tmp_path / "p"
    assert _build(out, "--train", "full") == 0
    old_files = set(json.loads((out / "manifest.json").read_text())["files"])
    (out / "data").mkdir(mode=0o700)
    (out / "data" / "train.csv").write_text("x\n")
    (out / "empty").mkdir()
    (out / "src" / "mine.h").write_text("/* mine */\n")
    (out / "link").symlink_to("data/train.csv")
    assert _build(out, model=MCUNET) == 0
    files = set(json.loads((out / "manifest.json").read_text())["files"])
    assert old_files - files and not (out / "src" / "train").exists()
    listed = {p.relative_to(out).as_posix() for p in out.rglob("*")
              if p.is_file() or p.is_symlink()}
    assert listed == files | {"data/train.csv", "src/mine.h", "link"}
    assert stat.S_IMODE((out / "data").stat().st_mode) == 0o700
    assert (out / "empty").is_dir() and os.readlink(out / "link") == "data/train.csv"
    assert "mcunet_tiny" in (out / "Makefile").read_text()


def test_a_rebuild_follows_the_working_folder_inside_it(tmp_path, monkeypatch):
    """The API in a notebook whose working folder is the project: still there afterwards."""
    out = tmp_path / "p"
    assert _build(out) == 0
    monkeypatch.chdir(out / "src")
    assert _build(out, model=MCUNET) == 0
    assert Path.cwd() == (out / "src").resolve() and Path("model.c").is_file()


def test_without_an_atomic_exchange_the_swap_is_two_renames(tmp_path, monkeypatch):
    out = tmp_path / "p"
    assert _build(out) == 0
    (out / "notes.txt").write_text("keep me\n")
    monkeypatch.setattr(file_io, "exchange_folders", lambda a, b: False)
    assert _build(out, model=MCUNET) == 0
    assert (out / "notes.txt").read_text() == "keep me\n"
    assert "mcunet_tiny" in (out / "Makefile").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


def test_a_crash_between_the_two_renames_is_undone(tmp_path):
    """Killed after moving the old project aside and before moving the new one in: the next
    build puts the old one back first, then builds over it as over any project of ours."""
    out = tmp_path / "p"
    assert _build(out) == 0
    (out / "notes.txt").write_text("keep me\n")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    staging = tmp_path / f".p.zocodegen-{dead}-0123456789ab"
    staging.mkdir()
    (staging / "Makefile").write_text("half")
    out.rename(staging.with_name(staging.name + "-old"))
    assert _build(out, model=MCUNET) == 0
    assert (out / "notes.txt").read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


def test_a_model_file_name_that_is_not_utf8(tmp_path, capsys):
    """Defect 14: the name goes into comments and the manifest printable."""
    model = tmp_path / os.fsdecode(b"bad\xff.tflite")
    shutil.copy(DIGITS, model)
    out = tmp_path / "p"
    assert main(["build", str(model), "--target", "native", "-o", str(out)]) == 0, \
        capsys.readouterr().err
    for rel in json.loads((out / "manifest.json").read_text())["files"]:
        (out / rel).read_bytes().decode("utf-8")
    assert "bad_.tflite" in (out / "Makefile").read_text()


# ------------------------------------------------------------------- whole or nothing
class DiskFull:
    """Fails the ``at``-th file opened for writing with ENOSPC (counting only when ``at`` is
    set): os.open with O_CREAT and open()/io.open in a writing mode, whichever the writer
    uses."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, at: int | None) -> None:
        self.at, self.count = at, 0
        os_open, io_open = os.open, io.open

        def opened_os(path, flags, *args, **kwargs):
            if flags & os.O_CREAT:
                self.tick()
            return os_open(path, flags, *args, **kwargs)

        def opened_io(file, mode="r", *args, **kwargs):
            if isinstance(file, (str, bytes, os.PathLike)) and set(mode) & set("wax+"):
                self.tick()
            return io_open(file, mode, *args, **kwargs)

        monkeypatch.setattr(os, "open", opened_os)
        monkeypatch.setattr(io, "open", opened_io)
        monkeypatch.setattr(builtins, "open", opened_io)

    def tick(self) -> None:
        self.count += 1
        if self.count == self.at:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _old_project(out: Path, built: Path) -> Path:
    """The digits project, a note of the user's and make's build/."""
    shutil.copytree(built, out)
    (out / "notes.txt").write_text("keep me\n")
    (out / "build" / "native").mkdir(parents=True)
    (out / "build" / "native" / "model").write_bytes(b"\x7fELF made by make")
    return out


def _files_written(tmp_path: Path, built: Path) -> int:
    """How many files the build under test opens for writing (on a copy of its folder)."""
    out = _old_project(tmp_path / "count" / "p", built)
    with pytest.MonkeyPatch.context() as patch:
        counter = DiskFull(patch, None)
        assert _build(out, "--train", "full", model=MCUNET) == 0
    shutil.rmtree(tmp_path / "count")
    return counter.count


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_full_disk_leaves_the_old_project(built, tmp_path, capsys, where):
    """Defect 3: mcunet over a digits project on a disk that fills up part-way: exit 2, one
    line, the old project byte for byte (the user's files and make's build/ too), no
    temporary folder left; the same build then succeeds once there is room."""
    total = _files_written(tmp_path, built)
    out = _old_project(tmp_path / "p", built)
    before = _snapshot(tmp_path)
    at = {"first": 1, "middle": total // 2, "last": total}[where]
    with pytest.MonkeyPatch.context() as patch:
        DiskFull(patch, at)
        code = _build(out, "--train", "full", model=MCUNET)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1, captured.err
    assert _snapshot(tmp_path) == before
    assert "No space left on device" in lines[0] and "nothing changed" in lines[0]
    assert _build(out, "--train", "full", model=MCUNET) == 0
    assert (out / "notes.txt").read_text() == "keep me\n"
