"""zocodegen/files.py: how every command writes a result (checkpoints, records, keys, builds):
all or nothing, and what an interrupted write left behind does not pile up; and how every
command opens what it reads: regular files within their kind's size, each refusal one line."""
from __future__ import annotations

import os
import stat

import pytest

from conftest import ended_pid
from zocodegen.errors import UserError
from zocodegen.files import atomic_writer, write_atomic
from zocodegen.files import INPUT_KINDS, MissingInput, open_input, read_input, read_json


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


# ---- the one opener ---------------------------------------------------------------------

def _refusal(path, kind: str) -> str:
    with pytest.raises(UserError) as refused:
        read_input(path, kind)
    message = str(refused.value)
    assert str(path) in message and "\n" not in message, message
    return message


def test_the_opener_reads_regular_files_within_their_kind(tmp_path):
    record = tmp_path / "run.json"
    record.write_text('{"step": 3}')
    assert read_input(record, "run record") == b'{"step": 3}'
    assert read_json(record, "run record") == {"step": 3}
    with open_input(record, "run record") as f:
        assert f.read(1) == b"{" and os.get_blocking(f.fileno())
    with pytest.raises(KeyError):
        read_input(record, "no such kind")


def test_the_opener_refuses_what_is_no_file_in_one_line(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opening it to read would block until a writer came
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")  # read whole, it never ends
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for path, words in ((fifo, "is a named pipe (FIFO), not a manifest file"),
                        (zero, "is a character device, not a manifest file"),
                        (tmp_path, "is a directory"), (loop, "loop of symbolic links")):
        assert words in _refusal(path, "manifest")
    with pytest.raises(MissingInput, match="does not exist"):
        read_input(tmp_path / "none.json", "manifest")


def test_each_kind_is_read_to_its_limit_and_no_further(tmp_path):
    big = tmp_path / "labels.json"
    with open(big, "wb") as f:
        f.truncate(INPUT_KINDS["labels"].limit + 1)  # sparse: nothing is written
    assert "larger than any labels file" in _refusal(big, "labels")
    assert all(rule.limit is None or rule.limit >= 1 << 20 for rule in INPUT_KINDS.values())


def test_only_a_card_may_be_a_block_device():
    assert [kind for kind, rule in INPUT_KINDS.items() if rule.block_device] == ["card"]
    devices = [os.path.join("/dev", name) for name in sorted(os.listdir("/dev"))]
    block = next((d for d in devices if os.path.exists(d)
                  and stat.S_ISBLK(os.stat(d).st_mode) and os.access(d, os.R_OK)), None)
    if block is None:
        pytest.skip("no readable block device here")
    assert "block device, not a data image file" in _refusal(block, "data image")
