"""Who may join a fleet (issue 35; docs/reliability.md "The fleet's trust model"): `fleet
serve` started with its defaults listens on every interface, speaks TLS and admits only
enrolled devices. A device that is not enrolled, one without the server's CA certificate and
one that trusts another CA are each refused with one line naming what is missing; an
enrolled device, and one whose key is dropped into the folder while the fleet runs, join."""
from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import FIXTURES
from zocodegen.cli import main
from zocodegen.formats.image import pack_image

pytest.importorskip("flwr")
from zocodegen.host.fleet import launch, security  # noqa: E402

MODEL = FIXTURES / "digits_cnn.tflite"
pytestmark = pytest.mark.usefixtures("module_build_cache")


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fleet") / "build"
    assert main(["build", str(MODEL), "--target", "native", "--train", "full", "--estimator",
                 "wp", "--record-scalars", "--no-guard", "--lr", "0.01", "--queries", "3",
                 "--schedule", "constant", "--steps", "1000", "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    import numpy as np
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("img") / "device.img"
    pack_image(path, rng.integers(-128, 128, (8, 8, 8, 1)).astype(np.int8),
               rng.integers(0, 10, 8), num_classes=10, checkpoint_bytes=1 << 16)
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory, build):
    """`fleet serve` with its defaults (all interfaces) and one enrolled device."""
    root = tmp_path_factory.mktemp("serve")
    devices = root / "devices"
    devices.mkdir()
    _, public = security.device_key(root / "enrolled" / "keys")
    shutil.copy(public, devices / "enrolled.pub")
    port = launch.free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "zocodegen", "fleet", "serve", str(MODEL), "--build", str(build),
         "-o", str(root / "out"), "--devices", str(devices), "--listen-port", str(port),
         "--min-devices", "9", "--wait", "900"], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    said = {"root": root, "port": port, "ca": root / "out" / "keys" / "ca.crt",
            "devices": devices, "log": root / "out" / "flower" / "logs" / "superlink.log",
            "lines": lines, "proc": proc}
    _wait_for_line(said, "enrolled.pub")  # ready once the enrolled key is in
    yield said
    proc.send_signal(signal.SIGINT)  # Ctrl-C: the server stops the Flower processes it started
    try:
        proc.wait(30)
    finally:
        launch.kill_group(proc, signal.SIGKILL)


def _wait_for_line(server: dict, text: str, seconds: float = 120) -> None:
    """Until the server's output has a line with ``text`` (it enrols keys as it finds them)."""
    end = time.monotonic() + seconds
    while not any(text in line for line in server["lines"]):
        if time.monotonic() > end:
            pytest.fail(f"`fleet serve` did not say {text!r}:\n" + "".join(server["lines"]))
        time.sleep(0.2)


def _join(build, image, state: Path, superlink: str, *extra: str) -> int:
    return main(["fleet", "join", "--superlink", superlink, "--native", str(build), "--image",
                 str(image), "--build", str(build), "--state", str(state), *extra])


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_a_device_that_is_not_enrolled_is_refused(server, build, image, tmp_path, capsys):
    code = _join(build, image, tmp_path / "stranger", f"127.0.0.1:{server['port']}",
                 "--ca", str(server["ca"]))
    assert code == 2
    line = _one_line(capsys)
    assert "not enrolled" in line and str(tmp_path / "stranger/keys/device.pub") in line


def test_a_device_without_the_ca_is_told_to_give_it(server, build, image, tmp_path, capsys):
    code = _join(build, image, tmp_path / "s", f"{socket.gethostname()}:{server['port']}")
    assert code == 2
    assert "--ca FILE" in _one_line(capsys)


def test_a_device_trusting_another_ca_is_refused(server, build, image, tmp_path, capsys):
    other = security.server_keys(tmp_path / "other", security.LOOPBACK)
    _, public = security.device_key(tmp_path / "s" / "keys")
    shutil.copy(public, server["devices"] / "other-ca.pub")  # enrolled: only the CA is wrong
    code = _join(build, image, tmp_path / "s", f"127.0.0.1:{server['port']}",
                 "--ca", str(other.ca))
    assert code == 2
    assert "does not verify" in _one_line(capsys)


def _activated(server, before: int, seconds: float = 60) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if server["log"].read_text(errors="replace").count("Activated node") > before:
            return True
        time.sleep(0.5)
    return False


@pytest.mark.parametrize("when", ["at start", "while running"])
def test_enrolled_devices_join(server, build, image, tmp_path, when):
    if when == "at start":
        key = server["root"] / "enrolled" / "keys" / "device"
    else:
        key, public = security.device_key(tmp_path / "late" / "keys")
        shutil.copy(public, server["devices"] / "late.pub")
        _wait_for_line(server, "late.pub")  # the server looks at the folder every 2 s
    before = server["log"].read_text(errors="replace").count("Activated node")
    with launch.Flower(tmp_path / "flower") as flower:
        node = flower.supernode(f"127.0.0.1:{server['port']}", launch.node_config(
            image, build, tmp_path / "state", native=build), "device", ca=server["ca"], key=key)
        assert _activated(server, before), (tmp_path / "flower/logs/device.log").read_text()
        assert node.poll() is None


def test_serve_beyond_localhost_wants_enrolled_devices(build, tmp_path, capsys):
    assert main(["fleet", "serve", str(MODEL), "--build", str(build), "-o",
                 str(tmp_path / "out")]) == 2
    assert "--devices DIR" in _one_line(capsys)
    assert not (tmp_path / "out" / "flower").exists()  # refused before Flower started


def test_private_keys_are_created_owner_only(tmp_path, monkeypatch):
    """A device key is 0600 from the moment its file exists: the temporary file is created
    with those permissions (files.atomic_writer), not narrowed after the bytes are in."""
    import os
    created = []
    real_open = os.open

    def watching_open(path, flags, mode=0o777, *args, **kwargs):
        if flags & os.O_CREAT:
            created.append((str(path), mode))
        return real_open(path, flags, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", watching_open)
    private, public = security.device_key(tmp_path / "keys")
    monkeypatch.undo()
    assert os.stat(private).st_mode & 0o777 == 0o600
    assert any(mode == 0o600 and ".tmp" in path for path, mode in created), created


def test_a_terminated_server_stops_the_flower_processes(server):
    """Last in this file (it ends the module's server): `kill` (SIGTERM, what systemd and
    `docker stop` send) unwinds `fleet serve` as Ctrl-C does, so the SuperLink it started is
    stopped too and its port closes, rather than left listening with nobody to stop it."""
    proc = server["proc"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 128 + signal.SIGTERM
    _wait_for_line(server, "zocodegen: terminated", 10)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server["port"]), timeout=2).close()
