"""Coverage-guided fuzzing of what the host reads from a device or from the network, with
atheris (libFuzzer for Python: the same engine, corpus layout and replay as the device's
harnesses; hypothesis generates values but does not steer by coverage, and these parsers sit
behind magics and CRC-32s that only coverage feedback gets past).

    python tests/fuzz/host_targets.py NAME [libFuzzer options] [corpus dirs or files]

NAME is one of TARGETS. A target may raise only the errors its caller turns into one clear
line (LinkError, DataError); anything else (struct.error, IndexError, MemoryError, a hang)
is a finding. tests/fuzz/run.py runs them beside the C harnesses.
"""
from __future__ import annotations

import dataclasses
import inspect
import struct
import sys
import zlib
from pathlib import Path
from typing import Callable

import atheris
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from host.fleet import updates  # noqa: E402
from host.link import framing  # noqa: E402
from host.link.framing import FrameDecoder, encode_frame  # noqa: E402
from host.link.server import DeviceSession, HostLink, LinkError  # noqa: E402
from zocodegen.errors import DataError  # noqa: E402
from zocodegen.formats import link as p  # noqa: E402
from zocodegen.training import checkpoint, replay  # noqa: E402


def _instrument(*modules) -> None:
    """Coverage for the parsers' own functions. Not atheris.instrument_imports(): atheris
    2.3.0 rewrites some Python 3.11 bytecode wrongly (DeviceSession.run then reads
    attributes of the wrong object), so the session and link classes run as they are and
    only these modules' top-level functions are instrumented."""
    for module in modules:
        for name, value in vars(module).items():
            if inspect.isfunction(value) and value.__module__ == module.__name__:
                setattr(module, name, atheris.instrument_func(value))


_instrument(p, framing, checkpoint, replay, updates)


class _Exhausted(Exception):
    """The input ran out: the device said all it had."""


class _Line:
    """A serial port whose device sends the fuzzer's frames and then falls silent."""

    def __init__(self, data: bytes):
        self.data = data

    def read(self, size: int = 1) -> bytes:
        if not self.data:
            raise _Exhausted
        out, self.data = self.data[:size], self.data[size:]
        return out

    @property
    def in_waiting(self) -> int:
        return len(self.data)

    def write(self, data: bytes) -> int:
        return len(data)

    def close(self) -> None:
        pass


def _device_frames(data: bytes) -> bytes:
    """Records [type u8][length u16][payload] as the device's frames, sequence numbered."""
    out, pos, seq = b"", 0, 0
    while pos + 3 <= len(data):
        kind, length = data[pos], int.from_bytes(data[pos + 1:pos + 3], "little")
        payload = data[pos + 3:pos + 3 + min(length, framing.MAX_PAYLOAD)]
        pos += 3 + length
        seq = 0 if kind == p.Request.HELLO else seq + 1
        out += encode_frame(kind, seq, payload)
    return out


def link(data: bytes) -> None:
    """A device's side of a session: HELLO, then commands with every request it may send."""
    FrameDecoder().feed(data)
    session = DeviceSession(HostLink(_Line(_device_frames(data)), timeout=1.0))
    try:
        session.hello()
        for command in (p.Command.INFER.value, p.train(2), p.Command.SAVE.value):
            session.run(command, bytes(64))
    except (LinkError, _Exhausted):
        pass


def checkpoint_file(data: bytes) -> None:
    try:
        checkpoint.decode(data)
    except DataError:
        pass


def scalar_file(data: bytes) -> None:
    try:
        replay.decode(data, "fuzz")
    except DataError:
        pass


_START = checkpoint.Checkpoint(bytes(32), 0, 1, (
    checkpoint.LayerParams(0, np.arange(-6, 6, dtype=np.int8), np.array([5, -5], np.int32)),
    checkpoint.LayerParams(3, np.arange(4, dtype=np.int8), np.zeros(0, np.int32))))
_LAYOUT = ((0, 4), (1, 4))


def fleet_upload(data: bytes) -> None:
    """What a fleet server unpacks of a device's upload before any model math: the
    compressed scalars of a 3-step round over two layers of 4 queries, or a delta against a
    two-layer checkpoint."""
    kind = "scalars" if data[:1] == b"s" else "delta"
    try:
        body = updates.inflate(data[1:], updates.upload_limit(kind, _START, 3, _LAYOUT), kind)
        if kind == "scalars":
            updates.unpack_scalars(body, range(3), _LAYOUT)
        else:
            updates.apply_delta(_START, body, 3)
    except DataError:
        pass


TARGETS: dict[str, Callable[[bytes], None]] = {
    "host_link": link, "host_checkpoint": checkpoint_file, "host_scalars": scalar_file,
    "host_fleet": fleet_upload,
}


def seeds(checkpoint_blob: bytes, from_device: bytes) -> dict[str, dict[str, bytes]]:
    """Seed inputs of each target from a real session (tests/fuzz/seeds.py)."""
    records = b"".join(struct.pack("<BH", f.type, len(f.payload)) + f.payload
                       for f in FrameDecoder().feed(from_device) if f is not None)
    moved = dataclasses.replace(_START, layers=tuple(
        dataclasses.replace(lp, weights=lp.weights[::-1].copy()) for lp in _START.layers))
    sums = {(t, key): np.arange(count, dtype=np.int32) - t for t in range(3)
            for key, count in _LAYOUT}
    owner = replay.ScalarOwner(bytes(32), 1, 3, 4, 0.01)
    return {
        "host_link": {"device-to-host": records},
        "host_checkpoint": {"device-checkpoint": checkpoint_blob},
        "host_scalars": {"scalar-file": replay.encode(sums, owner)},
        "host_fleet": {
            "delta": b"d" + zlib.compress(updates.parameter_delta(_START, moved)),
            "scalars": b"s" + zlib.compress(updates.pack_scalars(sums, range(3), _LAYOUT))},
    }


def main() -> None:
    name = sys.argv.pop(1)
    atheris.Setup(sys.argv, TARGETS[name])
    atheris.Fuzz()


if __name__ == "__main__":
    main()
