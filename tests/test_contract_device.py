"""The command-line contract on the device side (docs/contract.md, issue 31): `train`,
`monitor`, `replay` and `fleet join` against real native firmware, silent and garbage lines
and a firmware that exits. Refusals are exit 2 and one line with nothing in RUN/ changed; a
lost best.bin is recovered with one line and never looped on; the firmware the host started
is always reaped."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import socket
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES
from zocodegen.projects import ARTEFACTS
from zocodegen.cli import main
from zocodegen.frontends import load_model
from zocodegen.formats.image import pack_image
from zocodegen.training.metrics import read_metrics

MODEL = FIXTURES / "digits_cnn.tflite"
TRAIN_OPTIONS = ["--steps", "6", "--queries", "2", "--batch", "2", "--lr", "0.01",
                 "--guard-every", "2"]

pytestmark = pytest.mark.usefixtures("module_build_cache")


def _pack(path: Path, seed: int) -> Path:
    graph = load_model(MODEL)
    rng = np.random.default_rng(seed)
    shape = tuple(graph.tensor(graph.inputs[0]).shape[1:])
    x = rng.integers(-128, 128, size=(60,) + shape).astype(np.int8)
    y = rng.integers(0, 10, size=60)
    pack_image(path, x[:20], y[:20], x_val=x[20:40], y_val=y[20:40], x_test=x[40:],
               y_test=y[40:], num_classes=10, checkpoint_bytes=1 << 16,
               model_sha256=hashlib.sha256(MODEL.read_bytes()).digest())
    return path


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> dict[str, Path]:
    """A guarded native firmware, two images, and a finished run of the first."""
    root = tmp_path_factory.mktemp("device_contract")
    fw = root / "fw"
    assert main(["build", str(MODEL), "--target", "native", "--train", "full",
                 *TRAIN_OPTIONS, "-o", str(fw)]) == 0
    img, other = _pack(root / "a.img", 1), _pack(root / "b.img", 2)
    run = root / "run"
    assert main(["train", "--native", str(fw), "--image", str(img), "-o", str(run),
                 "--checkpoint-every", "2"]) == 0
    assert (run / "best.bin").is_file()
    return {"ROOT": root, "FW": fw, "IMG": img, "OTHER": other, "RUN": run}


def _copy_run(ws: dict[str, Path], tmp_path: Path, drop: tuple[str, ...] = ()) -> Path:
    run = tmp_path / "run"
    shutil.copytree(ws["RUN"], run)
    for name in drop:
        (run / name).unlink()
    return run


def _files(run: Path) -> dict[str, str]:
    return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run.rglob("*")) if p.is_file()}


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("zocodegen: error: "), "\n".join(err)
    return err[0]


def _train(ws, run: Path, *extra: str) -> int:
    return main(["train", "--native", str(ws["FW"]), "--image", str(ws["IMG"]), "-o",
                 str(run), "--timeout", "20", *extra])


# ---------------------------------------------------------------- refusals: exit 2, one line
REFUSALS = [
    # (name, how RUN is prepared, extra arguments, expected words)
    ("4 a checkpoint without run.json", ("run.json",), (),
     ("does not say which firmware", "--force")),
    ("4 resume on another image", (), ("--image-other",), ("another image", "--force")),
    ("11 --steps beyond the firmware's plan", (), ("--steps", "9"),
     ("beyond the 6 steps", "rebuild")),
]


@pytest.mark.parametrize("name, drop, extra, words", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_train_refusals_keep_the_run(ws, tmp_path, capsys, name, drop, extra, words):
    run = _copy_run(ws, tmp_path, drop)
    before = _files(run)
    if extra == ("--image-other",):
        code = main(["train", "--native", str(ws["FW"]), "--image", str(ws["OTHER"]), "-o",
                     str(run)])
    else:
        code = _train(ws, run, *extra)
    assert code == 2
    line = _one_line(capsys)
    assert all(word in line for word in words), line
    assert _files(run) == before


@pytest.mark.parametrize("edit, words", [
    ({"firmware": None}, ("other firmware",)), ({"firmware": [1]}, ("other firmware",)),
    ({"image_sha256": 5}, ("another image", "--force"))])
def test_an_edited_run_json_is_refused(ws, tmp_path, capsys, edit, words):
    """Issue 47, second sweep: a run.json whose firmware or image record is of another
    kind (hand-edited) ended `train` with an internal error (exit 1)."""
    run = _copy_run(ws, tmp_path)
    record = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**record, **edit}))
    before = _files(run)
    assert _train(ws, run) == 2
    line = _one_line(capsys)
    assert all(word in line for word in words), line
    assert _files(run) == before


def test_another_firmwares_run_is_refused(ws, tmp_path, capsys):
    """Issue 31 #4: a run of 6 steps is not continued by a firmware that plans 4."""
    other = tmp_path / "fw_short"
    assert main(["build", str(MODEL), "--target", "native", "--train", "full",
                 *TRAIN_OPTIONS, "--steps", "4", "-o", str(other)]) == 0
    run = _copy_run(ws, tmp_path)
    before = _files(run)
    assert main(["train", "--native", str(other), "--image", str(ws["IMG"]), "-o",
                 str(run)]) == 2
    line = _one_line(capsys)
    assert "other firmware" in line and "steps" in line
    assert _files(run) == before


@pytest.mark.parametrize("damage", ["missing", "garbage", "truncated"])
def test_a_lost_best_bin_is_rebuilt_not_looped_on(ws, tmp_path, capsys, damage):
    """Issue 31 #3: the run resumes (exit 0) with one line naming best.bin; metrics.csv keeps
    every step once, in order."""
    run = tmp_path / "run"
    assert _train(ws, run, "--steps", "2") == 0
    best = run / "best.bin"
    if damage == "missing":
        best.unlink()
    elif damage == "garbage":
        best.write_bytes(b"\xff" * 300)
    else:
        best.write_bytes(best.read_bytes()[:-7])
    assert _train(ws, run, "--steps", "6") == 0
    said = capsys.readouterr()
    assert "best.bin" in said.out + said.err and "restart from checkpoint.bin" in \
        said.out + said.err
    steps = [row.step for row in read_metrics(run / "metrics.csv")]
    assert steps == sorted(steps)
    assert (run / "best.bin").is_file()


def test_force_starts_anew(ws, tmp_path, capsys):
    run = _copy_run(ws, tmp_path, ("run.json",))
    assert _train(ws, run, "--force", "--checkpoint-every", "2") == 0
    assert (run / "checkpoint.bin").read_bytes() == (ws["RUN"] / "checkpoint.bin").read_bytes()


# --------------------------------------------------------------- devices that do not answer
class _GarbageLine:
    """A TCP 'device' that sends random bytes (and optionally nothing at all)."""

    def __init__(self, garbage: bool):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"socket://127.0.0.1:{self.server.getsockname()[1]}"
        self.garbage, self.stop = garbage, threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        rng = np.random.default_rng(5)
        with conn:
            while not self.stop.wait(0.05):
                if self.garbage:
                    try:
                        conn.sendall(rng.bytes(200))
                    except OSError:
                        return

    def close(self) -> None:
        self.stop.set()
        self.server.close()


@pytest.mark.parametrize("garbage", [False, True], ids=["silent", "garbage"])
def test_a_device_that_never_answers_is_one_line(ws, tmp_path, capsys, garbage):
    line = _GarbageLine(garbage)
    try:
        assert main(["train", "--port", line.url, "--image", str(ws["IMG"]), "-o",
                     str(tmp_path / "run"), "--timeout", "1"]) == 2
    finally:
        line.close()
    said = _one_line(capsys)
    assert "nothing valid" in said and "zocodegen firmware" in said
    assert not (tmp_path / "run").exists()


def _children(name: str) -> list[int]:
    """Live or unreaped child processes of this process running ``name``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            comm = stat.read_text().split("(", 1)[1].rsplit(")", 1)[0]
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid() and name.startswith(comm[:15]):
            found.append(int(stat.parent.name))
    return found


def test_a_firmware_that_exits_is_one_line_and_reaped(ws, tmp_path, capsys):
    """Issue 31 #9/#10: the firmware dies at every start: five restarts, then exit 2 with
    one line that says where the run stands; no process of it is left."""
    fw = tmp_path / "fw"
    shutil.copytree(ws["FW"], fw)
    binary = fw / ARTEFACTS["native"]
    binary.write_text("#!/bin/sh\necho dying >&2\nexit 3\n")
    os.utime(binary, (binary.stat().st_mtime + 3600,) * 2)  # newer than its sources: no make
    assert main(["train", "--native", str(fw), "--image", str(ws["IMG"]), "-o",
                 str(tmp_path / "run"), "--timeout", "5"]) == 2
    said = _one_line(capsys)
    assert "exited with status 3" in said
    assert _children(binary.name) == []



def test_a_pty_that_hangs_up_while_it_opens_is_a_port_error(monkeypatch):
    """CI at ed5b45a: the firmware above exited while pyserial configured its pty, and
    pyserial's unwrapped tcsetattr raised termios.error (EIO), which reached the user as an
    internal error (exit 1) instead of the restart loop's one line (exit 2)."""
    import termios
    from zocodegen.errors import UserError
    from zocodegen.host import devices

    def hung_up(*_args, **_kwargs):
        raise termios.error(errno.EIO, "Input/output error")

    monkeypatch.setattr(devices.serial, "serial_for_url", hung_up)
    with pytest.raises(UserError, match="cannot open port /dev/pts/9"):
        devices.open_port("/dev/pts/9")

# ------------------------------------------------------------------------------ monitor
def test_monitor_on_a_garbage_line_is_refused(capsys):
    line = _GarbageLine(True)
    try:
        assert main(["monitor", "--port", line.url, "--duration", "1"]) == 2
    finally:
        line.close()
    assert "no frame of the zocodegen link decoded" in _one_line(capsys)


def test_monitor_on_a_silent_line_says_so(capsys):
    line = _GarbageLine(False)
    try:
        assert main(["monitor", "--port", line.url, "--duration", "0.5"]) == 0
    finally:
        line.close()
    assert "nothing arrived" in capsys.readouterr().out


def test_monitor_on_a_line_the_peer_closes_is_refused(capsys):
    """Issue 47 #20: a peer that closes the connection is said (exit 2, as `train` ends), not
    taken for a silent line."""
    server = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=lambda: server.accept()[0].close(), daemon=True).start()
    try:
        code = main(["monitor", "--port", f"socket://127.0.0.1:{server.getsockname()[1]}",
                     "--duration", "4"])
    finally:
        server.close()
    assert code == 2
    assert "the peer closed the connection" in _one_line(capsys)


# ------------------------------------------------------------------ issue 47: runs and devices
def test_an_image_rewritten_during_train_is_refused(ws, tmp_path, capsys, monkeypatch):
    """Issue 47 #8: `cp other.img IMG` mid-run ends the run (exit 2, one line) before the
    steps trained on the new image are saved; run.json keeps the image the run began with."""
    from zocodegen.host import trainer
    from zocodegen.training import checkpoint
    img = tmp_path / "a.img"
    shutil.copy(ws["IMG"], img)
    save = trainer.Trainer._save

    def save_then_rewrite(self, session, step):
        save(self, session, step)
        if step == 2:
            shutil.copyfile(ws["OTHER"], img)  # in place, as cp does
    monkeypatch.setattr(trainer.Trainer, "_save", save_then_rewrite)
    run = tmp_path / "run"
    assert main(["train", "--native", str(ws["FW"]), "--image", str(img), "-o", str(run),
                 "--timeout", "20", "--checkpoint-every", "2"]) == 2
    line = _one_line(capsys)
    assert "changed during the run" in line and "keeps step 2" in line, line
    assert checkpoint.load(run / "checkpoint.bin").step == 2
    assert hashlib.sha256(ws["IMG"].read_bytes()).hexdigest() in (run / "run.json").read_text()


@pytest.mark.parametrize("command", ["train", "monitor"])
def test_emulated_on_a_native_project_is_one_line(ws, tmp_path, capsys, command):
    """Issue 47 #15: --emulated runs a board's firmware; a native project is refused naming
    the --target to build with, not with pages of make output."""
    args = (["train", "--emulated", str(ws["FW"]), "--image", str(ws["IMG"]), "-o",
             str(tmp_path / "run")] if command == "train" else
            ["monitor", "--emulated", str(ws["FW"]), "--duration", "1"])
    assert main(args) == 2
    line = _one_line(capsys)
    assert "built for native" in line and "--target stm32" in line, line
    assert not (tmp_path / "run").exists()


def test_fleet_serve_names_a_busy_port(ws, tmp_path, capsys):
    """Issue 47 #18: a --listen-port something listens on is named up front."""
    busy = socket.create_server(("127.0.0.1", 0))
    port = busy.getsockname()[1]
    try:
        code = main(["fleet", "serve", str(MODEL), "--build", str(ws["FW"]), "--host",
                     "127.0.0.1", "--listen-port", str(port), "-o", str(tmp_path / "fleet")])
    finally:
        busy.close()
    assert code == 2
    line = _one_line(capsys)
    assert f"127.0.0.1:{port} is in use" in line and "--listen-port" in line, line
    assert not (tmp_path / "fleet").exists()


# ------------------------------------------------------------------- disk full, in one line
def test_a_full_disk_is_one_line(ws, tmp_path, capsys, monkeypatch):
    from zocodegen.training import metrics

    def full(self, row):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
    monkeypatch.setattr(metrics.MetricsLog, "add", full)
    assert _train(ws, tmp_path / "run") == 2
    said = _one_line(capsys)
    assert "No space left on device" in said and "metrics.csv" in said


# ------------------------------------------------------------------------------ fleet join
def test_fleet_join_reports_a_supernode_that_gave_up(ws, tmp_path, capsys, monkeypatch):
    """Issue 31 #6: an endpoint that answers but is no SuperLink makes Flower's SuperNode exit
    non-zero (status 305 was seen; it can take minutes, so a stand-in exits at once here):
    exit 2 and one line naming the status, not exit 0 in silence."""
    pytest.importorskip("flwr")
    import subprocess
    from zocodegen.host.fleet import launch
    monkeypatch.setattr(launch.Flower, "supernode", lambda *a, **k: subprocess.Popen(
        ["sh", "-c", "exit 7"]))
    endpoint = socket.create_server(("127.0.0.1", 0))
    try:
        code = main(["fleet", "join", "--superlink",
                     f"127.0.0.1:{endpoint.getsockname()[1]}", "--native", str(ws["FW"]),
                     "--image", str(ws["IMG"]), "--build", str(ws["FW"]), "--state",
                     str(tmp_path / "state")])
    finally:
        endpoint.close()
    assert code == 2
    line = _one_line(capsys)
    assert "status 7" in line and "SuperLink" in line
