"""Run zocodegen firmware on QEMU's ``mps2-an500`` (Cortex-M7) board.

The firmware (built with ``qemu/board/``: ``platform.mk``, ``startup_mps2.c``,
``platform_mps2.c``, ``mps2_an500.ld``) talks through CMSDK UART0, which this module wires
to the QEMU process's stdin/stdout as a clean 8-bit channel, and ends through semihosting,
so the QEMU exit status is the firmware's ``platform_exit()`` status. Exit statuses
``FAULT_EXIT_BASE + n`` (100 + exception number, HardFault = 103) mean the firmware took
exception ``n``; a line describing it goes to QEMU's stderr.

``qemu_command``: the command line; ``start``: a ``Popen`` for a host program that speaks the
harness protocol; ``run_elf``: all input at once, all output at the end; ``QemuSession``:
exact reads with deadlines (what tests use so that a stuck firmware fails instead of
hanging).
"""
from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Sequence

from zocodegen.errors import UserError

QEMU_SYSTEM = "qemu-system-arm"
MACHINE = "mps2-an500"
CPU = "cortex-m7"
APT_INSTALL = "sudo apt-get install qemu-system-arm"
#: The firmware exits with FAULT_EXIT_BASE + exception number when it takes a fault.
FAULT_EXIT_BASE = 100
#: Where the board support sources live (package data: zocodegen/qemu/board).
BOARD_DIR = Path(__file__).resolve().parent / "board"

_EXCEPTION_NAMES = {2: "NMI", 3: "HardFault", 4: "MemManage", 5: "BusFault",
                    6: "UsageFault", 11: "SVCall", 12: "DebugMonitor", 14: "PendSV",
                    15: "SysTick"}


class QemuError(RuntimeError):
    """The emulated firmware did not do what the host expected (exited, stalled)."""

    def __init__(self, message: str, returncode: int | None = None, stderr: str = ""):
        detail = f"{message} (QEMU {describe_exit(returncode)})" if returncode is not None \
            else message
        if stderr.strip():
            detail += f"; QEMU stderr: {stderr.strip()[-2000:]}"
        super().__init__(detail)
        self.returncode = returncode
        self.stderr = stderr


def describe_exit(returncode: int | None) -> str:
    """Human-readable meaning of a QEMU exit status under this board support."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        return f"killed by signal {-returncode}"
    n = returncode - FAULT_EXIT_BASE
    if 2 <= n < 16 + 32:
        name = _EXCEPTION_NAMES.get(n, f"IRQ {n - 16}" if n >= 16 else "exception")
        return f"exit status {returncode}: firmware fault, exception {n} ({name})"
    return f"exit status {returncode}"


def find_qemu() -> str | None:
    """Path of qemu-system-arm, or None."""
    return shutil.which(QEMU_SYSTEM)


def require_qemu() -> str:
    """Path of qemu-system-arm; a UserError saying how to install it when it is missing."""
    path = find_qemu()
    if path is None:
        raise UserError(f"{QEMU_SYSTEM} was not found on PATH; install it with: {APT_INSTALL}")
    return path


def qemu_command(elf: Path, icount: bool = True, serial: str = "stdio,mux=off,signal=off"
                 ) -> list[str]:
    """The qemu-system-arm command line that runs ``elf``.

    * ``-nodefaults -display none -monitor none``: no default devices, no
      display, no monitor (nothing else reads stdin or writes stdout);
    * ``-chardev stdio,mux=off,signal=off`` as ``-serial``: UART0 is the process's
      stdin/stdout, byte for byte (no mux, so 0x01 is not an escape; no CR/LF translation
      on pipes; Ctrl-C is data when stdin is a terminal); ``serial`` names another
      chardev backend instead (the host link uses ``socket,...,server=on,wait=on``);
    * ``-semihosting-config enable=on,target=native``: platform_exit() sets QEMU's exit
      status, fault reports go to stderr;
    * ``-icount shift=0`` (when ``icount``): one instruction = 1 ns of virtual time, so
      platform_cycles() counts instructions (resolution 40) and runs are repeatable.
    """
    backend, _, options = serial.partition(",")
    cmd = [QEMU_SYSTEM, "-M", MACHINE, "-cpu", CPU,
           "-nodefaults", "-display", "none", "-monitor", "none",
           "-chardev", f"{backend},id=zo_uart0" + (f",{options}" if options else ""),
           "-serial", "chardev:zo_uart0",
           "-semihosting-config", "enable=on,target=native"]
    if icount:
        cmd += ["-icount", "shift=0"]
    cmd += ["-kernel", str(elf)]
    return cmd


def _checked_elf(elf: Path) -> Path:
    elf = Path(elf)
    if not elf.is_file():
        raise UserError(f"firmware ELF not found: {elf}")
    return elf


def start(elf: Path, icount: bool = True, stderr: int | IO | None = None,
          bufsize: int = -1) -> subprocess.Popen:
    """Start QEMU on ``elf`` with binary pipes on UART0.

    ``proc.stdin`` writes to the firmware's UART0 RX (call ``proc.stdin.flush()`` after
    writing: the pipe is buffered unless ``bufsize=0``), ``proc.stdout`` reads what the
    firmware sends; every byte value passes unchanged both ways. ``stderr`` goes where the
    caller says (inherited by default): QEMU warnings and firmware fault reports.
    """
    require_qemu()
    return subprocess.Popen(qemu_command(_checked_elf(elf), icount),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                            bufsize=bufsize)


def run_elf(elf: Path, stdin_bytes: bytes = b"", timeout: float = 60.0,
            icount: bool = True, stderr: int | IO | None = None) -> tuple[int, bytes]:
    """Run ``elf`` to completion with ``stdin_bytes`` as UART0 input.

    Returns ``(returncode, stdout_bytes)``. Raises ``subprocess.TimeoutExpired`` (after
    killing QEMU) when the firmware has not exited within ``timeout`` seconds.
    """
    require_qemu()
    done = subprocess.run(qemu_command(_checked_elf(elf), icount), input=stdin_bytes,
                          stdout=subprocess.PIPE, stderr=stderr, timeout=timeout, check=False)
    return done.returncode, done.stdout


class QemuSession:
    """A running firmware with deadline-bounded, exact reads and writes.

    >>> with QemuSession(elf, timeout=10) as s:
    ...     banner = s.read(12)
    ...     s.write(b"Q")
    ...     assert s.wait() == 0

    Every operation raises :class:`QemuError` (with QEMU's exit status and stderr) when
    QEMU exits early or the deadline passes; closing kills QEMU if it still runs.
    """

    def __init__(self, elf: Path, icount: bool = True, timeout: float = 30.0,
                 extra_args: Sequence[str] = ()):
        require_qemu()
        self.timeout = timeout
        self._stderr = tempfile.TemporaryFile()
        cmd = qemu_command(_checked_elf(elf), icount)
        cmd[-2:-2] = list(extra_args)
        self.started = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, bufsize=0)
        self._buf = bytearray()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.proc.stdout, selectors.EVENT_READ)

    # -- helpers ---------------------------------------------------------------------
    def stderr_text(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (self.timeout if timeout is None else timeout)

    def _fail(self, message: str) -> QemuError:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            return QemuError(message + " (QEMU killed)", None, self.stderr_text())
        return QemuError(message, self.proc.returncode, self.stderr_text())

    # -- I/O -------------------------------------------------------------------------
    def write(self, data: bytes, timeout: float | None = None) -> None:
        """Send all of ``data`` to UART0."""
        deadline = self._deadline(timeout)
        view = memoryview(bytes(data))
        fd = self.proc.stdin.fileno()
        os.set_blocking(fd, False)
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_WRITE)
            while view:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._fail(f"timed out writing to the firmware "
                                     f"({len(view)} bytes not accepted)")
                if not sel.select(min(left, 0.5)):
                    if self.proc.poll() is not None:
                        raise self._fail("QEMU exited while the host was writing")
                    continue
                try:
                    n = os.write(fd, view)
                except BlockingIOError:
                    continue
                except BrokenPipeError:
                    self.proc.wait()
                    raise self._fail("QEMU exited while the host was writing") from None
                view = view[n:]

    def read(self, n: int, timeout: float | None = None) -> bytes:
        """Exactly ``n`` bytes from UART0."""
        deadline = self._deadline(timeout)
        fd = self.proc.stdout.fileno()
        while len(self._buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._fail(f"timed out waiting for the firmware: got {len(self._buf)} "
                                 f"of {n} bytes ({bytes(self._buf[:64])!r})")
            if not self._sel.select(left):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                self.proc.wait()
                raise self._fail(f"QEMU exited after {len(self._buf)} of {n} bytes "
                                 f"({bytes(self._buf[:64])!r})")
            self._buf += chunk
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def wait(self, timeout: float | None = None) -> int:
        """QEMU's exit status (the firmware's platform_exit status)."""
        try:
            return self.proc.wait(self.timeout if timeout is None else timeout)
        except subprocess.TimeoutExpired:
            raise self._fail("the firmware did not exit") from None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._sel.close()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self._stderr.close()

    def __enter__(self) -> "QemuSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
