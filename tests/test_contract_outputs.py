"""One way out (issue 62, docs/contract.md "Files: what is never overwritten"): every command
writes through `zocodegen/files.py`, replaces without --force only its own earlier output of
the same kind, never an input (not even with --force), and a multi-file output whole or not
at all; `build` deletes only the files its previous build wrote, with their recorded bytes.

One row per defect of the issue, each run as the user runs it (``main``): a refusal is exit 2
and one line naming the path and --force, and the file refused is byte for byte as it was.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import stat
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, REPO, assert_refused
from test_field import LR_AUTO, _boot, _native, _pack
from zocodegen.cli import main
from zocodegen.codegen import project_files
from zocodegen.errors import UserError
from zocodegen.host import card

MODEL = FIXTURES / "digits_cnn.tflite"
MCUNET = FIXTURES / "mcunet_tiny.tflite"
pytestmark = pytest.mark.usefixtures("module_build_cache")


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> tuple[Path, Path]:
    """Digits as DATA.npz and the image `pack --model` makes of it (test_field's)."""
    tmp = tmp_path_factory.mktemp("outputs")
    image = _pack(tmp, "digits", False)
    return image.with_suffix(".npz"), image


@pytest.fixture(scope="module")
def field_card(packed, tmp_path_factory) -> Path:
    """A card copy a native field trainer completed its run on (never read back)."""
    done = tmp_path_factory.mktemp("card") / "done.img"
    shutil.copy(packed[1], done)
    assert _boot(_native(LR_AUTO), done).returncode == 0
    return done


@pytest.fixture(scope="module")
def run(packed, tmp_path_factory) -> Path:
    """A simulated run whose checkpoint export takes."""
    out = tmp_path_factory.mktemp("sim") / "R"
    assert main(["simulate", str(MODEL), "--data", str(packed[1]), "--steps", "2", "--no-guard",
                 "--lr", "0.01", "-o", str(out)]) == 0
    return out


def _refused(code: int, capsys, path: Path, before: bytes, *words: str) -> None:
    assert_refused(code, capsys.readouterr().err, (str(path), *words))
    assert path.read_bytes() == before


# ---- defect 3: card write over a file ------------------------------------------------------
def test_card_write_refuses_a_card_copy_holding_an_unread_field_run(packed, field_card, capsys):
    before = field_card.read_bytes()
    _refused(main(["card", "write", str(packed[1]), str(field_card)]), capsys, field_card,
             before, "field run", "card read", "--force")


def test_card_write_refuses_an_unrelated_file(packed, tmp_path, capsys):
    existing = tmp_path / "existing.txt"
    existing.write_text("my notes\n")
    _refused(main(["card", "write", str(packed[1]), str(existing)]), capsys, existing,
             existing.read_bytes(), "not a data image", "--force")


def test_card_write_replaces_its_own_blank_copy_and_force_any(packed, tmp_path, capsys):
    """An earlier blank copy is the command's own output: replaced; --force replaces the
    rest; the image itself never (also with --force)."""
    copy = tmp_path / "done.img"
    assert main(["card", "write", str(packed[1]), str(copy)]) == 0
    assert main(["card", "write", str(packed[1]), str(copy)]) == 0
    other = tmp_path / "other.txt"
    other.write_text("x")
    assert main(["card", "write", str(packed[1]), str(other), "--force"]) == 0
    assert other.read_bytes() == packed[1].read_bytes()
    capsys.readouterr()
    _refused(main(["card", "write", str(packed[1]), str(packed[1]), "--force"]), capsys,
             packed[1], packed[1].read_bytes(), "is the IMAGE file")


# ---- defects 4, 5 and the full disk: card read's RUN -------------------------------------------
def test_card_read_never_overwrites_its_own_input(field_card, tmp_path, capsys):
    """Defect 4: the card copy stored under the output's name, with --force."""
    out = tmp_path / "R"
    out.mkdir()
    copy = out / "checkpoint.bin"
    shutil.copy(field_card, copy)
    _refused(main(["card", "read", str(copy), "-o", str(out), "--force"]), capsys, copy,
             field_card.read_bytes(), "being read")
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.bin"]


def test_card_read_force_replaces_the_whole_run(field_card, tmp_path, capsys):
    """Defect 5: nothing of the run read before stays beside the new one."""
    fresh, out = tmp_path / "fresh", tmp_path / "R"
    assert main(["card", "read", str(field_card), "-o", str(fresh)]) == 0
    assert main(["card", "read", str(field_card), "-o", str(out)]) == 0
    (out / "scalars.bin").write_bytes(b"an earlier run's")
    (out / "notes").mkdir()
    assert main(["card", "read", str(field_card), "-o", str(out), "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in fresh.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["R", "fresh"]
    capsys.readouterr()


def test_a_full_disk_in_card_read_leaves_the_old_run(field_card, tmp_path, capsys,
                                                     monkeypatch):
    """A full disk at run.json, the last file: the old RUN as it was, never one without its
    run.json; a new RUN not made at all."""
    out = tmp_path / "R"
    assert main(["card", "read", str(field_card), "-o", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    real = card.write_atomic

    def full(path, data, *args, **kw):
        if Path(path).name == "run.json":
            raise UserError(f"cannot write {path}: No space left on device")
        return real(path, data, *args, **kw)

    monkeypatch.setattr(card, "write_atomic", full)
    capsys.readouterr()
    assert_refused(main(["card", "read", str(field_card), "-o", str(out), "--force"]),
                   capsys.readouterr().err, ("No space left",))
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert_refused(main(["card", "read", str(field_card), "-o", str(tmp_path / "new")]),
                   capsys.readouterr().err, ("No space left",))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["R"]


# ---- defect 6: export and pack over another kind of file --------------------------------
def test_export_refuses_an_unrelated_file(run, tmp_path, capsys):
    notes = tmp_path / "notes.tflite"
    notes.write_text("my notes\n")
    _refused(main(["export", str(MODEL), str(run / "checkpoint.bin"), "-o", str(notes)]),
             capsys, notes, notes.read_bytes(), "not a TFLite model", "--force")
    out = tmp_path / "tuned.tflite"
    assert main(["export", str(MODEL), str(run / "checkpoint.bin"), "-o", str(out)]) == 0
    assert main(["export", str(MODEL), str(run / "checkpoint.bin"), "-o", str(out)]) == 0


def test_export_refuses_an_unrelated_labels_file_before_writing_the_model(run, tmp_path,
                                                                         capsys):
    out = tmp_path / "tuned.tflite"
    labels = tmp_path / "tuned.tflite.labels.json"
    labels.write_text('{"mine": 1}\n')
    _refused(main(["export", str(MODEL), str(run / "checkpoint.bin"), "-o", str(out)]),
             capsys, labels, labels.read_bytes(), "--force")
    assert not out.exists()


def test_pack_refuses_to_replace_a_model(packed, tmp_path, capsys):
    model = tmp_path / "model.tflite"
    shutil.copy(MODEL, model)
    _refused(main(["pack", str(packed[0]), "-o", str(model)]), capsys, model,
             model.read_bytes(), "not a data image", "--force")


def test_pack_refuses_a_card_copy_holding_a_field_run(packed, field_card, capsys):
    _refused(main(["pack", str(packed[0]), "-o", str(field_card), "--model", str(MODEL)]),
             capsys, field_card, field_card.read_bytes(), "field run", "--force")


def test_infer_refuses_to_replace_a_data_set(packed, tmp_path, capsys):
    data = tmp_path / "data.npz"
    shutil.copy(packed[0], data)
    x = tmp_path / "x.npy"
    np.save(x, np.load(packed[0])["x"][:2])
    _refused(main(["infer", str(MODEL), "--input", str(x), "--output", str(data)]), capsys,
             data, data.read_bytes(), "no outputs of this model", "--force")
    y = tmp_path / "y.npy"
    assert main(["infer", str(MODEL), "--input", str(x), "--output", str(y)]) == 0
    assert main(["infer", str(MODEL), "--input", str(x), "--output", str(y)]) == 0


def test_replay_refuses_an_unrelated_file(tmp_path, capsys):
    notes = tmp_path / "notes.bin"
    notes.write_text("my notes\n")
    scalars = tmp_path / "scalars.bin"
    scalars.write_bytes(b"")
    _refused(main(["replay", str(MODEL), "--build", str(tmp_path), "--scalars", str(scalars),
                   "-o", str(notes)]), capsys, notes, notes.read_bytes(),
             "not a checkpoint", "--force")


# ---- defect 7: build deletes files written into DIR while it runs -------------------------
def test_build_keeps_files_written_into_dir_while_it_runs(tmp_path, capsys):
    out = tmp_path / "p"
    assert main(["build", str(MODEL), "--target", "native", "-o", str(out)]) == 0
    written: list[Path] = []

    def writer() -> None:
        for k in range(150):
            path = out / f"note{k:03d}.txt"
            path.write_text(f"note {k}\n")
            written.append(path)
            time.sleep(0.02)

    thread = threading.Thread(target=writer)
    thread.start()
    models = [MCUNET, MODEL]
    while thread.is_alive():
        assert main(["build", str(models[0]), "--target", "native", "-o", str(out)]) == 0
        models.reverse()
    thread.join()
    assert len(written) == 150
    lost = [p.name for p in written if not p.is_file()]
    assert lost == []
    assert all(p.read_text() == f"note {k}\n" for k, p in enumerate(written))
    capsys.readouterr()


# ---- defect 9: a re-signed manifest cannot make a build delete a file ------------------------
def _unkeyed_signature(record: dict) -> str:
    """What anyone can compute: the signature before it was keyed."""
    import hashlib
    body = json.dumps({k: v for k, v in record.items() if k != "signature"}, sort_keys=True)
    return hashlib.sha256(b"zocodegen project\0" + body.encode()).hexdigest()


@pytest.mark.parametrize("force", [False, True])
def test_a_resigned_manifest_cannot_make_build_delete_a_users_file(tmp_path, capsys, force):
    out = tmp_path / "p"
    assert main(["build", str(MODEL), "--target", "native", "-o", str(out)]) == 0
    notes = out / "NOTES.txt"
    notes.write_text("my notes\n")
    record = json.loads((out / "manifest.json").read_text())
    record["files"] = sorted([*record["files"], "NOTES.txt"])
    record["file_sha256"]["NOTES.txt"] = project_files._sha256(notes.read_bytes())
    record["signature"] = _unkeyed_signature(record)
    (out / "manifest.json").write_text(json.dumps(record, indent=2) + "\n")
    code = main(["build", str(MCUNET), "--target", "native", "-o", str(out),
                 *(["--force"] if force else [])])
    assert notes.read_text() == "my notes\n"
    if not force:
        assert_refused(code, capsys.readouterr().err, ("not a project zocodegen built",
                                                        "--force"))


def test_a_build_deletes_only_unchanged_files_it_wrote(tmp_path, capsys):
    """A stale generated file (the training sources of a training build, rebuilt for
    inference) goes when unchanged; edited, and with --force, it stays."""
    out = tmp_path / "p"
    assert main(["build", str(MODEL), "--target", "native", "--train", "full", "-o",
                 str(out)]) == 0
    trained = set(json.loads((out / "manifest.json").read_text())["file_sha256"])
    assert main(["build", str(MODEL), "--target", "native", "-o", str(out)]) == 0
    stale = sorted(trained - set(json.loads((out / "manifest.json").read_text())["files"]))
    assert stale and not any((out / rel).exists() for rel in stale)
    assert main(["build", str(MODEL), "--target", "native", "--train", "full", "-o",
                 str(out)]) == 0
    edited = out / stale[0]
    edited.write_text(edited.read_text() + "/* mine */\n")
    assert main(["build", str(MODEL), "--target", "native", "-o", str(out), "--force"]) == 0
    assert edited.read_text().endswith("/* mine */\n")
    assert not any((out / rel).exists() for rel in stale[1:])
    capsys.readouterr()


def test_the_signing_key_is_the_users_own(tmp_path):
    out = tmp_path / "p"
    assert main(["build", str(MODEL), "--target", "native", "-o", str(out)]) == 0
    key = Path(os.environ["ZOCODEGEN_CACHE"]) / project_files.KEY_FILE
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32


# ---- one writer: no module writes a file but through zocodegen/files.py ---------------------
#: Writers outside files.py, and why each is one: a folder writer, a disk, a compiler's output.
WRITERS_ALLOWED = {
    "zocodegen/codegen/project_files.py": "build's project folder, written whole and swapped in",
    "zocodegen/reference/native.py": "the compiler's library, moved into the cache when whole",
}
#: Calls that put a file for writing: a method of any object, or a function of a module.
_WRITE_METHODS = {"write_text", "write_bytes", "savefig", "tofile"}
_WRITE_FUNCTIONS = {"os": {"replace", "rename", "renames", "link", "symlink", "mkfifo",
                           "truncate", "open"},
                    "shutil": {"copy", "copy2", "copyfile", "copytree", "move"},
                    "np": {"save", "savez", "savez_compressed", "savetxt"}}


def _writes(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, call) of every write in a module but those into a file ``atomic_writer`` or
    ``open_append`` opened (``with atomic_writer(p) as f: np.save(f, x)``)."""
    opened = {item.optional_vars.id for node in ast.walk(tree) if isinstance(node, ast.With)
              for item in node.items if isinstance(item.optional_vars, ast.Name)
              and re.match(r"(atomic_writer|open_append)\(", ast.unparse(item.context_expr))}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        owner = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
        if name == "open" and owner != "os":
            mode = node.args[1] if len(node.args) >= 2 else next(
                (k.value for k in node.keywords if k.arg == "mode"), None)
            if mode is not None and re.search(r"[wax+]", ast.unparse(mode)):
                found.append((node.lineno, f"open(..., {ast.unparse(mode)})"))
        elif name == "open" and owner == "os":
            if re.search(r"O_WRONLY|O_RDWR|O_CREAT", ast.unparse(node)) \
                    and "os.devnull" not in ast.unparse(node):
                found.append((node.lineno, ast.unparse(node)))
        elif node.args and ast.unparse(node.args[0]) in opened:
            continue  # into a file the writer opened
        elif name in _WRITE_METHODS or name in _WRITE_FUNCTIONS.get(owner, ()):
            found.append((node.lineno, f"{owner}.{name}" if owner else name))
    return found


def test_every_command_writes_through_the_one_writer():
    """No module of zocodegen/ or host/ opens a file for writing, copies, moves or saves one
    but files.py (and the writers listed, each for its reason): a command's output is then
    written whole, never over a FIFO or a device, by the rules check_output enforces."""
    bad = []
    for folder in ("zocodegen", "host"):
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel == "zocodegen/files.py" or rel in WRITERS_ALLOWED:
                continue
            bad += [f"{rel}:{line}: {what}"
                    for line, what in _writes(ast.parse(path.read_text()))]
    assert bad == [], "\n".join(bad)
