"""Run generated firmware from Python: the native executable or the QEMU ELF, started by the
host and driven over the host link (docs/link.md). ``infer --engine native|qemu``, the
bit-exactness tests and the benchmarks use this; ``zocodegen train`` uses the same pieces
(host/trainer.py)."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .blocks import ImageBlocks
from .devices import Firmware
from zocodegen.formats import link as p
from .link.server import DeviceSession, HostLink, LinkError
from zocodegen.ir import Graph


@dataclass(frozen=True)
class EngineResult:
    outputs: dict[str, np.ndarray]  # one sample, shapes as in the graph
    cycles: int  # platform_cycles() around model_run (QEMU: instructions; native: 0)


class ProtocolError(LinkError):
    """The firmware did not answer as the link protocol says (a crash, most likely)."""


class FirmwareError(RuntimeError):
    """The firmware finished a command with an error code (zo_train.h, zo_image.h)."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


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


class FirmwareSession:
    """One firmware (native process or QEMU) the host started, spoken to over the link:
    inference, and for training builds the image / step / checkpoint commands. Use as a
    context manager; ``close`` tells the firmware to quit and checks that it exited cleanly."""

    def __init__(self, graph: Graph, engine: str, artefact: Path, icount: bool = True,
                 timeout: float = 120.0):
        self.graph = graph
        self.firmware = Firmware(engine, artefact, icount)
        self.telemetry: list[p.Telemetry] = []
        self.scalars: list[p.Scalars] = []  # --record-scalars builds: every piece received
        try:
            port = self.firmware.start()
            self.link = HostLink(port, timeout, alive=self.firmware.alive)
            self.session = DeviceSession(self.link, telemetry=self.telemetry.append,
                                         scalars=self.scalars.append)
            self.identity = self.session.hello()
        except BaseException:
            self.firmware.close()
            raise
        self.input_bytes = self.identity.input_bytes
        self.output_bytes = self.identity.output_bytes

    def __enter__(self) -> FirmwareSession:
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.close()
        else:
            self.firmware.close()

    def _run(self, what: str, command: bytes, input_bytes: bytes = b"") -> p.Done:
        result = self.session.run(command, input_bytes)
        if result.done.status != 0:
            raise FirmwareError(f"{what}: firmware error {result.done.status}",
                                result.done.status)
        self._output = bytes(result.output)
        return result.done

    def infer(self, sample: dict[str, np.ndarray]) -> EngineResult:
        payload = _sample_bytes(self.graph, sample)
        if len(payload) != self.input_bytes:
            raise ProtocolError(f"firmware expects {self.input_bytes} input bytes, the model "
                                f"gives {len(payload)}: stale build?")
        done = self._run("inference", p.Command.INFER.value, payload)
        if len(self._output) != self.output_bytes:
            raise ProtocolError(f"firmware sent {len(self._output)} output bytes, "
                                f"expected {self.output_bytes}")
        return EngineResult(_split_outputs(self.graph, self._output), done.cycles)

    def attach_image(self, path: Path, checkpoint: bytes = b"") -> int:
        """Serve image ``path`` and open it on the device; returns its train record count."""
        self.session.blocks = ImageBlocks(path, checkpoint)
        return self._run(f"opening image {path}", p.Command.OPEN.value).value

    def train(self, steps: int) -> list[p.Telemetry]:
        """Run ``steps`` optimisation steps; returns the end-of-step telemetry records."""
        self.telemetry.clear()
        self._run("training", p.train(steps))
        return [t for t in self.telemetry if t.layer < 0]

    def save_checkpoint(self) -> bytes:
        """The device writes its checkpoint into the image's checkpoint area; its bytes."""
        size = self._run("saving the checkpoint", p.Command.SAVE.value).value
        return self.session.blocks.checkpoint(size)

    def load_checkpoint(self, blob: bytes) -> int:
        """Put ``blob`` in the checkpoint area and have the device load it; returns its step."""
        self.session.blocks.set_checkpoint(blob)
        return self._run("loading the checkpoint", p.Command.LOAD.value).value

    def accuracy(self, split: p.Split = p.Split.TEST) -> int:
        """Correct predictions of the device on a split of the attached image."""
        return self._run("measuring accuracy", p.accuracy(split)).value

    def close(self) -> None:
        try:
            self.session.run(p.Command.QUIT.value)
            status = self.firmware.wait()
            if status != 0:
                raise ProtocolError(f"firmware exited with status {status} "
                                    f"{self.firmware.stderr_text()}")
        finally:
            self.firmware.close()


def run_samples(graph: Graph, engine: str, artefact: Path,
                samples: Iterable[dict[str, np.ndarray]], icount: bool = True
                ) -> Iterator[EngineResult]:
    """Start the firmware once and run every sample through it, yielding results in order."""
    with FirmwareSession(graph, engine, artefact, icount) as session:
        for sample in samples:
            yield session.infer(sample)
