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


def run_samples(graph: Graph, engine: str, artefact: Path,
                samples: Iterable[dict[str, np.ndarray]], icount: bool = True
                ) -> Iterator[EngineResult]:
    """Start the firmware once and run every sample through it, yielding results in order."""
    stderr = tempfile.TemporaryFile()
    proc = _start(engine, artefact, icount, stderr)
    try:
        header = _read_exact(proc, 12, stderr)
        if header[:4] != BANNER:
            raise ProtocolError(f"unexpected banner {header[:4]!r} from {artefact}")
        in_bytes, out_bytes = struct.unpack("<II", header[4:])
        for sample in samples:
            payload = _sample_bytes(graph, sample)
            if len(payload) != in_bytes:
                raise ProtocolError(f"firmware expects {in_bytes} input bytes, the model "
                                    f"gives {len(payload)}: stale build?")
            proc.stdin.write(b"I" + payload)
            proc.stdin.flush()
            tag = _read_exact(proc, 1, stderr)
            if tag != b"O":
                raise ProtocolError(f"firmware answered {tag!r} instead of 'O'")
            body = _read_exact(proc, out_bytes + 4, stderr)
            yield EngineResult(_split_outputs(graph, body[:out_bytes]),
                               struct.unpack("<I", body[out_bytes:])[0])
        proc.stdin.write(b"Q")
        proc.stdin.flush()
        proc.stdin.close()
        status = proc.wait(timeout=30)
        if status != 0:
            raise ProtocolError(f"firmware exited with status {status} {_stderr_text(stderr)}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr.close()
