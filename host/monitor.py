"""`zocodegen monitor --port URL`: watch a device without driving it. Identity, telemetry, logs
and errors are printed as they arrive and acknowledged so the device goes on; a device that
asks for a command is told to wait, and requests for data are refused (the monitor serves no
image: that is `zocodegen train`). A field trainer (`build --data-source sdcard`) speaks no link: its
lines of text (`field: ...`, docs/sdcard.md) are printed as they come, from the first whole
one after the monitor attached."""
from __future__ import annotations

import time
from collections.abc import Callable

from zocodegen.errors import UserError
from zocodegen.formats import link as p
from .link.server import BlockServer, HostLink, LineFailed, LinkError, Port

#: A device that asks for work is told to ask again after this long.
IDLE_WAIT_MS = 1000
#: How a field trainer's line begins (templates/field/field_report.c field_say).
FIELD_PREFIX = b"field: "


class FieldLines:
    """The port, passing every byte on to the link's decoder, and printing the field
    trainer's text lines among them: whole lines that start with FIELD_PREFIX and hold only
    printable text (a link frame never ends in a newline with such a start)."""

    def __init__(self, port: Port, out: Callable[[str], None]):
        self.port, self.out = port, out
        self.line = bytearray()
        self.whole = False  # the line being collected began after a newline we saw
        self.lines = 0
        self.ended = False  # the last line was the run's end ("field: end: ...")

    def read(self, size: int = 1) -> bytes:
        data = self.port.read(size)
        for byte in data:
            if byte == 0x0A:
                text = bytes(self.line).rstrip(b"\r")
                if self.whole and text.startswith(FIELD_PREFIX) and all(
                        0x20 <= b < 0x7F for b in text):
                    self.out(text.decode("ascii"))
                    self.lines += 1
                    self.ended = text.startswith(FIELD_PREFIX + b"end:")
                self.line.clear()
                self.whole = True
            elif len(self.line) < 4096:
                self.line.append(byte)
        return data

    @property
    def in_waiting(self) -> int:
        return self.port.in_waiting

    def write(self, data: bytes) -> int | None:
        return self.port.write(data)

    def close(self) -> None:
        self.port.close()


def describe_identity(identity: p.Identity) -> str:
    line = (f"device: {identity.target}, model sha256 {identity.model_sha256.hex()[:12]}..., "
            f"input {identity.input_bytes} B, output {identity.output_bytes} B")
    if identity.training:
        block = (f" block {identity.block} of {identity.blocks}" if identity.block is not None
                 else f", block chosen on the device of {identity.blocks}"
                 if identity.selects_block else "")
        line += (f"; training {identity.mode}{block}, {identity.estimator}, "
                 f"{identity.trainable_layers} layers, Q={identity.queries}, "
                 f"N={identity.batch}, lr={identity.lr:g}, "
                 f"T={identity.steps or 'an epoch of the image'}, "
                 f"seed {identity.seed}")
    return line


def monitor(port: Port, duration: float | None = None,
            out: Callable[[str], None] = print) -> int:
    """Watch until ``duration`` seconds have passed (forever when None); returns the number
    of requests and field lines seen. A line that only ever carried bytes no frame decodes
    from is refused (wrong port or baud rate); a silent one is said; a line the peer closed
    is refused, as `train` does, unless a field trainer said its end. Closes the port."""
    end = None if duration is None else time.monotonic() + duration
    port = FieldLines(port, out)
    link = HostLink(port, timeout=duration if duration is not None else 1e9)
    refuse = BlockServer()
    seen = 0
    try:
        while end is None or time.monotonic() < end:
            link.timeout = 1e9 if end is None else max(0.05, end - time.monotonic())
            try:
                request = link.request()
            except LineFailed as exc:
                if port.ended:
                    break  # a native or emulated field trainer exits after its last line
                raise UserError(f"{exc}: the peer closed the connection, or the port went "
                                f"away ({seen} request(s) seen)") from None
            except LinkError:
                break  # the watch time is over
            seen += 1
            reply = b""
            kind = request.type
            if kind == p.Request.HELLO:
                out(describe_identity(p.parse_hello(request.payload)))
            elif kind == p.Request.NEXT:
                reply = p.wait(IDLE_WAIT_MS)
            elif kind == p.Request.TELEMETRY:
                t = p.parse_telemetry(request.payload)
                where = "step" if t.layer < 0 else f"layer {t.layer}"
                out(f"step {t.step} {where}: loss {t.loss:.4f}, lr {t.lr:.6g}, "
                    f"{t.cycles} cycles")
            elif kind in (p.Request.LOG, p.Request.ERROR):
                out(f"device: {request.payload.decode(errors='replace')}"
                    if kind == p.Request.LOG else "device error %d: %s"
                    % p.parse_error(request.payload))
            elif kind == p.Request.DONE:
                done = p.parse_done(request.payload)
                out(f"command {done.command.decode(errors='replace')} done: status "
                    f"{done.status}, value {done.value}")
            elif kind in (p.Request.READ, p.Request.WRITE, p.Request.FETCH, p.Request.PUT):
                reply = p.status(refuse.read(0, 0)[0])
            link.respond(request, reply)
    finally:
        port.close()
    seen += port.lines
    if seen == 0 and link.received:
        raise UserError(f"{link.received} bytes arrived but no frame of the zocodegen link "
                        f"decoded ({link.dropped} garbled): is a zocodegen firmware on this "
                        "port, at the same baud rate?")
    if seen == 0:
        out(f"nothing arrived in {duration:g} s")
    return seen
