"""Issue 50, the host side of a field run (docs/sdcard.md): `zocodegen card write` refuses a
partition, a mounted disk, a disk that is not removable and one too small (the kernel's facts
read from fake /proc and /sys trees), writes a file whole; `card read` gives the RUN/ that
`train` writes, on which `export` works; `monitor` prints a field trainer's lines."""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
import tty
from pathlib import Path

import pytest

from conftest import FIXTURES, assert_refused
from test_field import LR_AUTO, _boot, _native, _pack
from zocodegen.cli import main
from zocodegen.errors import UserError
from zocodegen.host import card
from zocodegen.host.devices import open_port
from zocodegen.host.monitor import monitor
from zocodegen.training import checkpoint
from zocodegen.training.metrics import read_metrics

MODEL = FIXTURES / "digits_cnn.tflite"
SECTOR = 512
pytestmark = pytest.mark.usefixtures("module_build_cache")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    """A packed image and a card (file) a native field trainer completed its run on."""
    tmp = tmp_path_factory.mktemp("card")
    image = _pack(tmp, "digits", False)
    done = tmp / "card.img"
    shutil.copy(image, done)
    assert _boot(_native(LR_AUTO), done).returncode == 0
    return image, done


def _sys_tree(root: Path, name: str = "sdb", removable: str = "1", sectors: int = 62333952,
              kind: str | None = None) -> Path:
    """/sys as the kernel shows a disk with one partition: block/NAME, dev/block/M:m links."""
    disk = root / "block" / name
    (disk / "device").mkdir(parents=True)
    (disk / "removable").write_text(removable + "\n")
    (disk / "size").write_text(f"{sectors}\n")
    (disk / "device" / "model").write_text("Card Reader\n")
    if kind:
        (disk / "device" / "type").write_text(kind + "\n")
    part = disk / f"{name}1"
    part.mkdir()
    (part / "partition").write_text("1\n")
    links = root / "dev" / "block"
    links.mkdir(parents=True, exist_ok=True)
    (links / "8:16").symlink_to(f"../../block/{name}")
    (links / "8:17").symlink_to(f"../../block/{name}/{name}1")
    return root


def _check(tmp_path: Path, rdev=(8, 16), mounts: str = "", image_bytes: int = 1 << 20,
           **tree) -> None:
    disk, partition = card.disk_of(rdev, _sys_tree(tmp_path / "sys", **tree))
    card.check_disk(Path("/dev/x"), disk, partition, mounts, image_bytes)


def test_a_removable_unmounted_disk_passes(tmp_path):
    disk, partition = card.disk_of((8, 16), _sys_tree(tmp_path / "sys"))
    assert (disk.name, disk.removable, disk.partitions, partition) == ("sdb", True, ("sdb1",),
                                                                       False)
    card.check_disk(Path("/dev/sdb"), disk, partition, "/dev/sda1 / ext4 rw 0 0\n", 1 << 20)


@pytest.mark.parametrize("setup, words", [
    (dict(rdev=(8, 17)), ("partition", "/dev/sdb")),
    (dict(mounts="/dev/sdb1 /media/my\\040card vfat rw 0 0\n"), ("mounted", "/media/my card",
                                                                 "unmount")),
    (dict(removable="0"), ("not a removable disk", "dd")),
    (dict(sectors=100), ("use a larger card",)),
    (dict(name="mmcblk0", removable="0", kind="MMC"), ("not a removable disk",))])
def test_card_write_refuses_what_it_must_not_overwrite(tmp_path, setup, words):
    with pytest.raises(UserError) as refused:
        _check(tmp_path, **setup)
    for word in words:
        assert word in str(refused.value)


def test_a_built_in_readers_sd_card_counts_as_removable(tmp_path):
    _check(tmp_path, name="mmcblk0", removable="0", kind="SD")


def test_what_a_disk_holds_is_named():
    mbr = bytearray(4096)
    mbr[510:512] = b"\x55\xaa"
    assert card.holds(bytes(mbr)) == "an MBR partition table"
    fat = bytearray(mbr)
    fat[82:90] = b"FAT32   "
    assert "FAT32" in card.holds(bytes(fat))
    assert card.holds(bytes(4096)).startswith("zeros")


def test_card_write_to_a_file_and_its_refusals(trained, tmp_path, capsys):
    image, _ = trained
    target = tmp_path / "copy.img"
    assert main(["card", "write", str(image), str(target)]) == 0
    assert target.read_bytes() == image.read_bytes()
    assert_refused(main(["card", "write", str(image), "/dev/null"]), capsys.readouterr().err,
                   ("neither a file nor a disk",))
    damaged = tmp_path / "damaged.img"
    raw = bytearray(image.read_bytes())
    raw[SECTOR + 8] ^= 1  # inside train record 0
    damaged.write_bytes(bytes(raw))
    before = target.read_bytes()
    assert_refused(main(["card", "write", str(damaged), str(target)]),
                   capsys.readouterr().err, ("corrupted",))
    assert target.read_bytes() == before


def test_card_read_gives_the_run_train_writes_and_export_takes_it(trained, tmp_path, capsys):
    image, done = trained
    run = tmp_path / "run"
    assert main(["card", "read", str(done), "-o", str(run)]) == 0
    out = capsys.readouterr().out
    assert "run complete (step 30 of 30" in out and "checkpoint.bin (step 30)" in out
    # the card knows the model's hash, not its format: the next step names both outputs
    # (an ONNX model's run exported with the '-o tuned.tflite' it named was refused)
    assert (f"next: zocodegen export MODEL {run}/checkpoint.bin -o tuned.tflite (tuned.onnx "
            "for an ONNX MODEL)") in out, out
    assert checkpoint.load(run / "checkpoint.bin").step == 30
    assert (run / "best.bin").is_file() and (run / "run.json").is_file()
    rows = read_metrics(run / "metrics.csv")
    assert rows[0].step == 0 and rows[0].accuracy is not None and rows[0].event == "best"
    assert rows[-1].step == 30 and rows[-1].event in ("best", "restore", "start", "")
    assert main(["export", str(MODEL), str(run / "checkpoint.bin"), "-o",
                 str(tmp_path / "tuned.tflite")]) == 0
    assert (tmp_path / "tuned.tflite").is_file()
    capsys.readouterr()
    # nothing lost: a RUN that holds files is refused, and the image holds no field run
    assert_refused(main(["card", "read", str(done), "-o", str(run)]), capsys.readouterr().err,
                   ("not empty", "--force"))
    assert main(["card", "read", str(done), "-o", str(run), "--force"]) == 0
    capsys.readouterr()
    assert_refused(main(["card", "read", str(image), "-o", str(tmp_path / "r2")]),
                   capsys.readouterr().err, ("no field run",))
    assert_refused(main(["card", "read", str(MODEL), "-o", str(tmp_path / "r3")]),
                   capsys.readouterr().err, (str(MODEL),))
    assert not (tmp_path / "r2").exists() and not (tmp_path / "r3").exists()


def test_monitor_prints_a_field_trainers_lines(trained, tmp_path):
    image, _ = trained
    fresh = tmp_path / "card.img"
    shutil.copy(image, fresh)
    master, slave = os.openpty()
    tty.setraw(slave)
    port = open_port(os.ttyname(slave))
    os.close(slave)
    proc = subprocess.Popen([str(_native(LR_AUTO))], stdin=subprocess.DEVNULL, stdout=master,
                            env={**os.environ, "ZO_CARD": str(fresh)})

    def hang_up() -> None:
        """The line goes away after the firmware ended and its lines were read (closing a
        pty's master at once may drop what its slave has not read yet)."""
        proc.wait(60)
        time.sleep(0.5)
        os.close(master)

    closer = threading.Thread(target=hang_up)
    closer.start()
    lines: list[str] = []
    seen = monitor(port, 30.0, out=lines.append)
    closer.join()
    assert proc.returncode == 0
    assert seen == len(lines) and lines[0].startswith("field: zocodegen ")
    assert lines[-1].startswith("field: end: complete: 30 steps")


def test_card_write_to_a_dev_name_with_no_disk_writes_nothing(tmp_path, capsys):
    """docs/sdcard.md's `card write train.img /dev/sdX` with the card not in the reader (or
    a mistyped name) wrote a regular file into /dev and said "written"."""
    image = _pack(tmp_path, "digits", False)
    missing = "/dev/zocodegen-no-such-card"
    assert not os.path.exists(missing)
    assert_refused(main(["card", "write", str(image), missing]), capsys.readouterr().err,
                   ("is not a disk: no card there", "lsblk", "nothing written"))
    assert not os.path.exists(missing)
