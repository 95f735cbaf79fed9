"""Run generated firmware on inputs: the native executable as a child process, or the QEMU
ELF under qemu-system-arm, both speaking the harness protocol of docs/firmware.md over
stdin/stdout. (The host link of DESIGN.md section 6 will replace this simple channel.)"""
from __future__ import annotations

import struct
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from .ir import Graph

BANNER = b"ZOCG"


@dataclass(frozen=True)
class EngineResult:
    outputs: dict[str, np.ndarray]  # one sample, shapes as in the graph
    cycles: int  # platform_cycles() difference (QEMU: instructions; native: 0)


class ProtocolError(RuntimeError):
    """The firmware did not answer as the harness protocol says (a crash, most likely)."""


def _start(engine: str, artefact: Path, icount: bool, stderr: IO[bytes]) -> subprocess.Popen:
    """The firmware's stderr (QEMU warnings, fault reports, sanitizer findings) goes to a
    file, read back only to explain a failure: a pipe nobody drains could block the child."""
    if engine == "qemu":
        from .qemu.runner import start
        return start(artefact, icount=icount, stderr=stderr)
    return subprocess.Popen([str(artefact)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=stderr)


def _stderr_text(stderr: IO[bytes]) -> str:
    stderr.seek(0)
    lines = stderr.read().decode(errors="replace").splitlines()
    return " ".join(line for line in lines if "has no peer" not in line).strip()


def _read_exact(proc: subprocess.Popen, n: int, stderr: IO[bytes]) -> bytes:
    data = proc.stdout.read(n)
    if len(data) != n:
        proc.kill()
        status = proc.wait()
        detail = _stderr_text(stderr)
        raise ProtocolError(f"firmware closed the link after {len(data)} of {n} bytes "
                            f"(exit {status}){': ' + detail if detail else ''}")
    return data


def _sample_bytes(graph: Graph, sample: dict[str, np.ndarray]) -> bytes:
    parts = []
    for name in graph.inputs:
        t = graph.tensor(name)
        parts.append(np.ascontiguousarray(sample[name], dtype=np.dtype(t.dtype).newbyteorder("<"))
                     .tobytes())
    return b"".join(parts)


def _split_outputs(graph: Graph, payload: bytes) -> dict[str, np.ndarray]:
    outputs, pos = {}, 0
    for name in graph.outputs:
        t = graph.tensor(name)
        dtype = np.dtype(t.dtype).newbyteorder("<")
        size = int(np.prod(t.shape, dtype=np.int64)) * dtype.itemsize
        outputs[name] = (np.frombuffer(payload[pos:pos + size], dtype=dtype)
                         .astype(t.dtype).reshape(t.shape))
        pos += size
    return outputs


@dataclass(frozen=True)
class StepTelemetry:
    step: int  # completed steps
    loss: float  # mean clean loss of the step's batch, nats
    lr: float
    cycles: int


class FirmwareSession:
    """One running firmware (native process or QEMU) spoken to with the harness protocol of
    docs/firmware.md: inference, and for training builds the image / step / checkpoint
    commands. Use as a context manager; ``close`` asks the firmware to exit cleanly."""

    def __init__(self, graph: Graph, engine: str, artefact: Path, icount: bool = True):
        self.graph = graph
        self._stderr = tempfile.TemporaryFile()
        self._proc = _start(engine, artefact, icount, self._stderr)
        header = self._read(12)
        if header[:4] != BANNER:
            self._kill()
            raise ProtocolError(f"unexpected banner {header[:4]!r} from {artefact}")
        self.input_bytes, self.output_bytes = struct.unpack("<II", header[4:])

    def __enter__(self) -> FirmwareSession:
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.close()
        else:
            self._kill()

    def _read(self, n: int) -> bytes:
        return _read_exact(self._proc, n, self._stderr)

    def _send(self, data: bytes) -> None:
        self._proc.stdin.write(data)
        self._proc.stdin.flush()

    def _kill(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._stderr.close()

    def _answer(self, what: str) -> int:
        """'A' + u32 value, or 'E' + i32 firmware error code (raised)."""
        tag, value = struct.unpack("<cI", self._read(5))
        if tag == b"E":
            code = struct.unpack("<i", struct.pack("<I", value))[0]
            raise FirmwareError(f"{what}: firmware error {code}", code)
        if tag != b"A":
            raise ProtocolError(f"{what}: firmware answered {tag!r}")
        return value

    def infer(self, sample: dict[str, np.ndarray]) -> EngineResult:
        payload = _sample_bytes(self.graph, sample)
        if len(payload) != self.input_bytes:
            raise ProtocolError(f"firmware expects {self.input_bytes} input bytes, the model "
                                f"gives {len(payload)}: stale build?")
        self._send(b"I" + payload)
        tag = self._read(1)
        if tag != b"O":
            raise ProtocolError(f"firmware answered {tag!r} instead of 'O'")
        body = self._read(self.output_bytes + 4)
        return EngineResult(_split_outputs(self.graph, body[:self.output_bytes]),
                            struct.unpack("<I", body[self.output_bytes:])[0])

    def attach_image(self, path: Path) -> int:
        """Open the data image (by host path: stdio or semihosting); returns its train count."""
        raw = str(Path(path).resolve()).encode()
        self._send(b"D" + struct.pack("<H", len(raw)) + raw)
        return self._answer(f"opening image {path}")

    def train(self, steps: int) -> Iterator[StepTelemetry]:
        """Run ``steps`` optimisation steps, yielding each step's telemetry as it arrives."""
        self._send(b"T" + struct.pack("<I", steps))
        while True:
            tag = self._read(1)
            if tag == b"S":
                step, loss, lr, cycles = struct.unpack("<IifI", self._read(16))
                yield StepTelemetry(step, loss / 65536.0, lr, cycles)
                continue
            value = self._read(4)
            if tag == b"A":
                return
            code = struct.unpack("<i", value)[0]
            if tag == b"E":
                raise FirmwareError(f"training stopped: firmware error {code}", code)
            raise ProtocolError(f"training: firmware answered {tag!r}")

    def save_checkpoint(self) -> int:
        """Write the checkpoint into the image's checkpoint area; returns its size."""
        self._send(b"C")
        return self._answer("saving the checkpoint")

    def load_checkpoint(self) -> int:
        """Load the checkpoint from the image (verified first); returns its step."""
        self._send(b"L")
        return self._answer("loading the checkpoint")

    def close(self) -> None:
        try:
            self._send(b"Q")
            self._proc.stdin.close()
            status = self._proc.wait(timeout=30)
            if status != 0:
                raise ProtocolError(f"firmware exited with status {status} "
                                    f"{_stderr_text(self._stderr)}")
        finally:
            self._kill()


class FirmwareError(RuntimeError):
    """The firmware answered a command with an error code (zo_train.h, zo_image.h)."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def run_samples(graph: Graph, engine: str, artefact: Path,
                samples: Iterable[dict[str, np.ndarray]], icount: bool = True
                ) -> Iterator[EngineResult]:
    """Start the firmware once and run every sample through it, yielding results in order."""
    with FirmwareSession(graph, engine, artefact, icount) as session:
        for sample in samples:
            yield session.infer(sample)
