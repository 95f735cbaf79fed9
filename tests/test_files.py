"""zocodegen/files.py: how every command writes a result (checkpoints, records, keys, builds):
all or nothing, and what an interrupted write left behind does not pile up."""
from __future__ import annotations

import os

import pytest

from conftest import ended_pid
from zocodegen.errors import UserError
from zocodegen.files import atomic_writer, write_atomic


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "checkpoint.bin"
    write_atomic(path, b"old")
    with pytest.raises(RuntimeError):
        with atomic_writer(path) as f:
            f.write(b"half")
            raise RuntimeError("power cut")
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.bin"]


def test_a_refused_check_keeps_the_old_file(tmp_path):
    path = tmp_path / "record.bin"
    write_atomic(path, b"old")

    def refuse(tmp):
        raise UserError(f"{tmp.name} fails its CRC")

    with pytest.raises(UserError):
        with atomic_writer(path, check=refuse) as f:
            f.write(b"bad")
    assert path.read_bytes() == b"old"


@pytest.mark.skipif(os.name != "posix", reason="process ids are checked with kill(pid, 0)")
def test_temporaries_of_ended_writers_are_removed_by_the_next_write(tmp_path):
    """A kill or power cut between the temporary and the rename leaves the temporary; the
    next write of that file removes it. A live writer's temporary (another process mid-file)
    and other files' temporaries stay."""
    path = tmp_path / "checkpoint.bin"
    dead = tmp_path / f".checkpoint.{ended_pid()}-0123456789ab.tmp.bin"
    live = tmp_path / f".checkpoint.{os.getppid()}-0123456789ab.tmp.bin"
    other = tmp_path / f".best.{ended_pid()}-0123456789ab.tmp.bin"
    for stale in (dead, live, other):
        stale.write_bytes(b"torn")
    write_atomic(path, b"new")
    assert path.read_bytes() == b"new"
    assert not dead.exists()
    assert live.exists() and other.exists()


def test_the_temporary_has_the_destination_suffix_and_the_writer(tmp_path):
    """Readers tell formats apart by the suffix (numpy, ONNX), and the writer's id is what
    the clean-up reads."""
    with atomic_writer(tmp_path / "data.npz"):
        [name] = [p.name for p in tmp_path.iterdir()]
    assert name.startswith(f".data.{os.getpid()}-") and name.endswith(".tmp.npz")
