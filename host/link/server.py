"""The host's half of the link (docs/link.md): answer each device request once, repeat the
cached answer to a retransmission, and run commands on the device by answering its NEXT.

``HostLink`` is the frame level (sequence numbers, cached responses, NAK, timeouts);
``DeviceSession`` is the command level (HELLO, COMMAND, serving READ / WRITE / FETCH / PUT,
collecting TELEMETRY / LOG / ERROR until DONE).
"""
from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from serial import SerialException

from zocodegen.formats import link as p
from .framing import Frame, FrameDecoder, encode_frame


class LinkError(RuntimeError):
    """The device stopped answering, or answered something the protocol does not allow."""


class LineFailed(LinkError):
    """The line itself failed: the peer closed the connection, or the port went away."""


class DeviceReset(LinkError):
    """The device said HELLO in the middle of a session: it was reset (or restarted)."""

    def __init__(self, hello: Frame):
        super().__init__("the device was reset")
        self.hello = hello


class Port(Protocol):
    """What the link needs from a byte stream: pyserial ``Serial`` objects (whose ``read``
    returns early, with what arrived, after their read timeout)."""

    def read(self, size: int = 1) -> bytes: ...

    @property
    def in_waiting(self) -> int: ...

    def write(self, data: bytes) -> int | None: ...

    def close(self) -> None: ...


class HostLink:
    """Requests in, responses out. ``alive`` is polled while waiting, so a firmware process
    that died is noticed at once instead of after ``timeout`` seconds of silence."""

    def __init__(self, port: Port, timeout: float = 60.0,
                 alive: Callable[[], None] | None = None):
        self.port = port
        self.timeout = timeout
        self.alive = alive or (lambda: None)
        self._decoder = FrameDecoder()
        self._pending: list[Frame | None] = []
        self._last: tuple[int, int] | None = None  # (type, seq) of the last request
        self._cached: bytes | None = None
        self.retransmissions = 0  # duplicate requests answered from the cache
        self.received = 0  # bytes read from the line, frames or not

    @property
    def dropped(self) -> int:
        return self._decoder.dropped

    def _frames(self, deadline: float) -> Frame | None:
        """The next decoded event (a Frame, or None for a dropped frame)."""
        while not self._pending:
            self.alive()
            if time.monotonic() > deadline:
                raise LinkError(f"the device sent nothing valid for {self.timeout:g} s")
            try:
                data = read_some(self.port)
            except (SerialException, OSError) as exc:
                self._line_failed(exc)
            if data:
                self.received += len(data)
                self._pending.extend(self._decoder.feed(data))
        return self._pending.pop(0)

    def request(self) -> Frame:
        """The next new request; retransmissions are answered here and never returned."""
        deadline = time.monotonic() + self.timeout
        while True:
            frame = self._frames(deadline)
            if frame is None:
                self._send(encode_frame(p.NAK, p.NAK_SEQ))
                continue
            if frame.type & p.RESPONSE_BIT:
                continue  # our own frames echoed by a loop, or line noise that decoded
            deadline = time.monotonic() + self.timeout
            if (frame.type, frame.seq) == self._last:
                if self._cached is not None:
                    self.retransmissions += 1
                    self._send(self._cached)
                continue
            self._last, self._cached = (frame.type, frame.seq), None
            return frame

    def respond(self, request: Frame, payload: bytes = b"") -> None:
        self._cached = encode_frame(request.type | p.RESPONSE_BIT, request.seq, payload)
        self._send(self._cached)

    def restart(self, request: Frame) -> None:
        """Tell a device whose session we do not know to start over with HELLO."""
        self._cached = encode_frame(p.RESTART, request.seq)
        self._send(self._cached)

    def _send(self, data: bytes) -> None:
        try:
            self.port.write(data)
        except (SerialException, OSError) as exc:
            self._line_failed(exc)

    def _line_failed(self, exc: Exception) -> None:
        """A dead firmware process explains a broken line best (alive() raises); otherwise
        the port itself went away (a board unplugged). A process that closed its end of the
        line is about to exit: it gets half a second to say so."""
        for _ in range(10):
            self.alive()
            time.sleep(0.05)
        raise LineFailed(f"the serial line failed: {exc}") from None


def read_some(port: Port) -> bytes:
    """What has arrived: waits up to the port's read timeout for the first byte, then takes
    whatever else is buffered without waiting (a plain ``read(4096)`` would wait the whole
    timeout for bytes that are not coming, once per round trip)."""
    data = port.read(1)
    while data and len(data) < 65536:
        waiting = port.in_waiting
        more = port.read(waiting) if waiting else b""
        if not more:
            break
        data += more
    return data


@dataclass
class Result:
    done: p.Done
    output: bytearray = field(default_factory=bytearray)


class BlockServer:
    """Sectors for READ / WRITE; the default serves no medium (inference-only sessions)."""

    def read(self, lba: int, count: int) -> tuple[int, bytes]:
        return -1, b""  # ZO_BLOCKDEV_ERR_NOT_ATTACHED

    def write(self, lba: int, count: int, data: bytes) -> int:
        return -1


class DeviceSession:
    """Commands on one device through a HostLink.

    ``telemetry``, ``scalars``, ``event`` and ``log`` are called for every TELEMETRY /
    SCALARS / EVENT / LOG and ERROR the device sends while a command runs; without an
    ``event`` callback an EVENT goes to ``log`` as its line of key=value pairs. A HELLO in
    the middle raises DeviceReset; ``hello`` handles it (start over on a new session).
    """

    def __init__(self, link: HostLink, blocks: BlockServer | None = None,
                 telemetry: Callable[[p.Telemetry], None] | None = None,
                 log: Callable[[str], None] | None = None,
                 scalars: Callable[[p.Scalars], None] | None = None,
                 event: Callable[[p.Event], None] | None = None):
        self.link = link
        self.blocks = blocks or BlockServer()
        self.on_telemetry = telemetry or (lambda t: None)
        self.on_scalars = scalars or (lambda s: None)
        self.on_log = log or (lambda s: None)
        self.on_event = event or (lambda e: self.on_log(e.text()))
        self.identity: p.Identity | None = None
        self._next: Frame | None = None

    def hello(self, first: Frame | None = None) -> p.Identity:
        """Wait for HELLO (any other request gets RESTART), welcome it, return who it is."""
        request = first or self.link.request()
        while request.type != p.Request.HELLO:
            self.link.restart(request)
            request = self.link.request()
        try:
            self.identity = p.parse_hello(request.payload)
        except ValueError as exc:
            raise LinkError(f"the device's HELLO is not understood ({exc}): "
                            f"firmware from another zocodegen version?") from None
        if self.identity.version != 1:
            raise LinkError(f"the device speaks link version {self.identity.version}, this "
                            f"host speaks 1: rebuild the firmware with this zocodegen")
        self.link.respond(request)
        self._next = None
        return self.identity

    def _wait_next(self) -> Frame:
        if self._next is not None:
            frame, self._next = self._next, None
            return frame
        while True:
            request = self.link.request()
            if request.type == p.Request.NEXT:
                return request
            self._serve_idle(request)

    def _serve_idle(self, request: Frame) -> None:
        """A request outside a command: HELLO means a reset; the rest is acknowledged."""
        if request.type == p.Request.HELLO:
            raise DeviceReset(request)
        self._serve(request, None)

    def run(self, command: bytes, input_bytes: bytes = b"") -> Result:
        """Send one command and serve the device until its DONE."""
        self.link.respond(self._wait_next(), command)
        if command[:1] in (p.Command.WAIT.value, p.Command.QUIT.value):
            return Result(p.Done(command[:1], 0, 0, 0))
        result = Result(p.Done(command[:1], 0, 0, 0))
        while True:
            request = self.link.request()
            if request.type == p.Request.HELLO:
                raise DeviceReset(request)
            if request.type == p.Request.NEXT:
                raise LinkError(f"the device asked for the next command without finishing "
                                f"{command[:1]!r}")
            if request.type == p.Request.DONE:
                try:
                    result.done = p.parse_done(request.payload)
                except struct.error as exc:
                    raise LinkError(f"the device sent a malformed DONE ({exc})") from None
                self.link.respond(request)
                return result
            self._serve(request, result, input_bytes)

    def _serve(self, request: Frame, result: Result | None, input_bytes: bytes = b"") -> None:
        try:
            reply, notify = self._answer(request, result, input_bytes)
        except (ValueError, struct.error) as exc:
            raise LinkError(f"the device sent a malformed {_name(request.type)} request "
                            f"({exc})") from None
        notify()
        self.link.respond(request, reply)

    def _answer(self, request: Frame, result: Result | None, input_bytes: bytes
                ) -> tuple[bytes, Callable[[], None]]:
        """The response payload to one request and the callback its news goes to;
        ValueError / struct.error for a payload the protocol does not allow."""
        kind, payload = request.type, request.payload
        reply, notify = b"", _nothing
        if kind == p.Request.READ:
            lba, count, _ = p.parse_block(payload)
            code, data = (self.blocks.read(lba, count) if 1 <= count <= p.MAX_SECTORS
                          else (p.STATUS_ARG, b""))
            reply = p.sectors(code, data, self.identity is not None
                              and self.identity.trimmed_reads)
        elif kind == p.Request.WRITE:
            lba, count, data = p.parse_block(payload)
            ok = 1 <= count <= p.MAX_SECTORS and len(data) == count * p.SECTOR
            reply = p.status(self.blocks.write(lba, count, data) if ok else p.STATUS_ARG)
        elif kind == p.Request.FETCH:
            offset, length = p.parse_fetch(payload)
            ok = 1 <= length <= p.MAX_FETCH and offset + length <= len(input_bytes)
            reply = p.status(p.STATUS_OK if ok else p.STATUS_RANGE,
                             input_bytes[offset:offset + length])
        elif kind == p.Request.PUT:
            offset, data = p.parse_put(payload)
            limit = self.identity.output_bytes if self.identity else 0
            if result is None:
                reply = p.status(p.STATUS_ARG)
            elif offset + len(data) > limit:  # never grow the output past what HELLO said
                reply = p.status(p.STATUS_RANGE)
            else:
                if len(result.output) < offset + len(data):
                    result.output.extend(bytes(offset + len(data) - len(result.output)))
                result.output[offset:offset + len(data)] = data
                reply = p.status(p.STATUS_OK)
        elif kind == p.Request.TELEMETRY:
            notify = partial(self.on_telemetry, p.parse_telemetry(payload))
        elif kind == p.Request.SCALARS:
            notify = partial(self.on_scalars, p.parse_scalars(payload))
        elif kind == p.Request.EVENT:
            notify = partial(self.on_event, p.parse_event(payload))
        elif kind == p.Request.LOG:
            notify = partial(self.on_log, payload.decode(errors="replace"))
        elif kind == p.Request.ERROR:
            code, text = p.parse_error(payload)
            notify = partial(self.on_log, f"device error {code}: {text}")
        return reply, notify


def _nothing() -> None:
    pass


def _name(request_type: int) -> str:
    try:
        return p.Request(request_type).name
    except ValueError:
        return f"0x{request_type:02x}"
