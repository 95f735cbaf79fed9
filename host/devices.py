"""Where the device is: a serial port given by URL, or firmware the host starts itself so that
trying zocodegen needs no board (DESIGN.md section 6):

* native: the executable's stdin/stdout are the master side of a pty, and the host opens the
  slave side (``/dev/pts/N``) with pyserial, exactly as it opens a board's ``/dev/ttyACM0``;
* QEMU: UART0 is a TCP server socket, and the host opens ``socket://127.0.0.1:PORT``; both
  ends turn Nagle's algorithm off (see ``no_delay``);
* emulated: a board firmware ELF in its emulated board (host/emulator), USART1 on a pty
  as the native executable's line is. The board is the ELF's build folder
  (``build/<board>/firmware.elf``, as ``make firmware`` writes it).
"""
from __future__ import annotations

import json
import os
import socket
import sys
import subprocess
import tempfile
import termios
import time
import tty
from collections.abc import Callable
from pathlib import Path

import serial

from zocodegen.errors import UserError
from zocodegen.files import MissingInput, read_text
from zocodegen.formats import link as p
from zocodegen.formats.link import DEFAULT_BAUD
from .link.server import DeviceSession, LinkError, Port

#: How long a read waits before the host checks that the firmware process still runs.
POLL_SECONDS = 0.05


def open_port(url: str, baud: int = DEFAULT_BAUD) -> Port:
    """A pyserial port for ``url`` (a device path, ``socket://host:port``, ...) at ``baud``
    (a pty or a socket ignores it). A pty whose firmware has just exited fails in pyserial's
    unwrapped ``tcsetattr`` with a ``termios.error`` (EIO): that is a port that cannot be
    opened too, never an internal error."""
    try:
        return no_delay(serial.serial_for_url(url, baudrate=baud, timeout=POLL_SECONDS,
                                              write_timeout=10))
    except (serial.SerialException, ValueError, OSError, termios.error) as exc:
        if "://" not in url and not Path(url).exists():  # the newcomer's case: no board yet
            raise UserError(f"cannot open port {url}: there is no such device (is the board "
                            "plugged in by its ST-LINK USB port? `ls /dev/ttyACM*` lists the "
                            "ports; without a board, --emulated DIR runs the board "
                            "project's firmware on its emulated board, docs/emulated.md)"
                            ) from None
        raise UserError(f"cannot open port {url}: {exc}") from None


def no_delay(port: Port) -> Port:
    """``port`` with TCP_NODELAY when it is a ``socket://`` URL (pyserial leaves Nagle on).

    A frame crosses a TCP line in several small writes (QEMU's UART sends byte by byte), and
    with Nagle's algorithm every write after the first waits for the peer's delayed ACK:
    40 ms and more per request / response round trip instead of well under 1 ms, and often
    past the device's 100 ms retransmission timeout (docs/link.md "Pacing under QEMU")."""
    sock = getattr(port, "_socket", None)  # pyserial's protocol_socket keeps it there
    if isinstance(sock, socket.socket):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return port


class DeviceExited(LinkError):
    """The firmware process the host started has exited."""

    def __init__(self, message: str, returncode: int | None):
        super().__init__(message)
        self.returncode = returncode


class Firmware:
    """A native or QEMU firmware process with its link port; ``start`` again after it exited
    is a device reset. ``baud``: the host's line speed, which an emulated board checks the
    firmware's USART divider against (native and QEMU lines have none)."""

    def __init__(self, kind: str, artefact: Path, icount: bool = True,
                 baud: int = DEFAULT_BAUD):
        if kind not in ("native", "qemu", "emulated"):
            raise ValueError(kind)
        self.kind, self.artefact, self.icount, self.baud = kind, Path(artefact), icount, baud
        self.proc: subprocess.Popen | None = None
        self.port: Port | None = None
        self._stderr = None

    def start(self) -> Port:
        self.close()
        self._stderr = tempfile.TemporaryFile()
        self.port = self._start_qemu() if self.kind == "qemu" else self._start_on_pty()
        return self.port

    def _command(self) -> list[str]:
        if self.kind == "emulated":  # ZOCODEGEN_EMULATOR_REPORT: where it writes its report
            report = os.environ.get("ZOCODEGEN_EMULATOR_REPORT")
            return [sys.executable, "-m", "zocodegen.host.emulator", "--board",
                    self.artefact.parent.name, "--baud", str(self.baud),
                    *(["--report-json", report] if report else []),
                    str(self.artefact)]
        return [str(self.artefact)]

    def _start_on_pty(self) -> Port:
        master, slave = os.openpty()
        tty.setraw(slave)  # no echo, no line editing, no CR/LF translation: a clean 8-bit line
        name = os.ttyname(slave)  # before the firmware can hang the line up
        try:
            self.proc = subprocess.Popen(self._command(), stdin=master, stdout=master,
                                         stderr=self._stderr)
        finally:
            os.close(master)
        try:
            return open_port(name)
        except UserError as exc:  # a firmware that died at once explains it best
            self.alive()
            raise LinkError(str(exc)) from None
        finally:
            os.close(slave)

    def _start_qemu(self) -> Port:
        from zocodegen.qemu.runner import qemu_command, require_qemu
        require_qemu()
        with socket.socket() as probe:  # a free port; QEMU binds it a moment later
            probe.bind(("127.0.0.1", 0))
            tcp_port = probe.getsockname()[1]
        cmd = qemu_command(self.artefact, self.icount, serial=f"socket,host=127.0.0.1,"
                           f"port={tcp_port},server=on,wait=on,nodelay=on")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self._stderr)
        deadline = time.monotonic() + 20
        while True:  # QEMU waits for us (wait=on) before it starts the CPU
            self.alive()
            try:
                return no_delay(serial.serial_for_url(f"socket://127.0.0.1:{tcp_port}",
                                                      timeout=POLL_SECONDS,
                                                      write_timeout=10))
            except serial.SerialException:
                if time.monotonic() > deadline:
                    raise LinkError("QEMU did not open its serial socket within 20 s: "
                                    + self.stderr_text()) from None
                time.sleep(0.05)

    def stderr_text(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        lines = self._stderr.read().decode(errors="replace").splitlines()
        return " ".join(line for line in lines if "has no peer" not in line).strip()

    def alive(self) -> None:
        """Raise DeviceExited when the process is gone (with what it said on stderr)."""
        if self.proc is not None and self.proc.poll() is not None:
            detail = self.stderr_text()
            raise DeviceExited(f"the {self.kind} firmware exited with status "
                               f"{self.proc.returncode}" + (f": {detail}" if detail else ""),
                               self.proc.returncode)

    def wait(self, timeout: float = 30) -> int:
        """Exit status after the firmware was told to quit."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise LinkError(f"the {self.kind} firmware did not exit") from None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        self.kill()
        if self.port is not None:
            try:
                self.port.close()
            except (serial.SerialException, OSError):
                pass
            self.port = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


class Device:
    """A device at a serial URL: a reset shows up as a HELLO on the same port."""

    restartable = False

    def __init__(self, url: str, baud: int = p.DEFAULT_BAUD):
        self.url, self.baud = url, baud
        self.port: Port | None = None

    def connect(self) -> Port:
        if self.port is None:
            self.port = open_port(self.url, self.baud)
        return self.port

    def alive(self) -> None:
        pass

    def finish(self, session: DeviceSession) -> None:
        """Leave the board idle: it keeps asking for commands until a host answers."""

    def close(self) -> None:
        if self.port is not None:
            self.port.close()
            self.port = None

    def describe(self) -> str:
        return self.url


class LaunchedDevice(Device):
    """Firmware the host started (``--native`` / ``--qemu``): restarting it is a reset."""

    restartable = True

    def __init__(self, firmware: Firmware):
        super().__init__("")
        self.firmware = firmware

    def connect(self) -> Port:
        return self.firmware.start()

    def alive(self) -> None:
        self.firmware.alive()

    def finish(self, session: DeviceSession) -> None:
        session.run(p.Command.QUIT.value)
        self.firmware.wait()

    def close(self) -> None:
        self.firmware.close()

    def describe(self) -> str:
        return f"{self.firmware.kind} firmware {self.firmware.artefact}"


def open_device(port: str | None = None, native: Path | None = None,
                qemu: Path | None = None, emulated: Path | None = None,
                baud: int = p.DEFAULT_BAUD, say: Callable[[str], None] = lambda text: None
                ) -> Device:
    """The device of `--port URL`, `--native PROJECT`, `--qemu PROJECT` or `--emulated
    PROJECT` (a board project, its firmware on the emulated board), built with make when
    needed (said first through ``say``: a compile takes seconds); `--baud` for a board's
    line and an emulated one."""
    from zocodegen.projects import make
    if port:
        return Device(port, baud)
    where = {"native": native, "qemu": qemu, "emulated": emulated}
    kind = next((k for k, project in where.items() if project is not None), "qemu")
    project = where[kind]
    if project is None or not (Path(project) / "Makefile").is_file():
        raise UserError(f"{project} is not a project made by `zocodegen build` (no Makefile)")
    manifest = _manifest(Path(project))
    if manifest.get("data_source") == "sdcard":
        raise UserError(f"{project} is a field trainer (built with --data-source sdcard): it "
                        "trains from the image on its card, not over a link: put the image on "
                        "its card with `zocodegen card write IMAGE DEVICE` (natively: "
                        f"ZO_CARD=IMAGE {project}/build/native/model), or build it with "
                        "--data-source link to train it with `zocodegen train`")
    goal = "firmware" if kind == "emulated" else kind
    if kind == "emulated":
        _check_emulated(Path(project), manifest)
    say(f"compiling {project} (make {goal}) ...")
    return LaunchedDevice(Firmware(kind, make(Path(project), goal), baud=baud))


def _manifest(project: Path) -> dict:
    """The project's manifest.json, read before make runs (what the firmware is)."""
    try:
        manifest = json.loads(read_text(project / "manifest.json", "manifest"))
    except MissingInput:
        raise UserError(f"{project} is not a project made by `zocodegen build` (no "
                        "manifest.json)") from None
    except ValueError as exc:
        raise UserError(f"{project}/manifest.json is unreadable ({exc}); build the project "
                        "again") from None
    if not isinstance(manifest, dict):
        raise UserError(f"{project}/manifest.json is unreadable (not a JSON object); build "
                        "the project again")
    return manifest


def _check_emulated(project: Path, manifest: dict) -> None:
    """The emulated board runs a board's firmware: a native or QEMU project has none, and
    make would only fail on it with pages of output."""
    from .emulator.machine import BOARDS
    try:
        target, budget = manifest["target"], manifest.get("budget_of")
    except KeyError as exc:
        raise UserError(f"{project}/manifest.json is unreadable (no {exc}); build the project "
                        f"again with `zocodegen build MODEL --target {BOARDS[0]}`") from None
    if target not in BOARDS:
        board = budget if budget in BOARDS else BOARDS[0]
        raise UserError(f"{project} was built for {target} (--target {target}); --emulated "
                        f"runs a board's firmware: build it with `zocodegen build MODEL "
                        f"--target {board} -o {project}`")
