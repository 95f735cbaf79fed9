"""`zocodegen monitor --port URL`: watch a device without driving it. Identity, telemetry, logs
and errors are printed as they arrive and acknowledged so the device goes on; a device that
asks for a command is told to wait, and requests for data are refused (the monitor serves no
image: that is `zocodegen train`)."""
from __future__ import annotations

import time
from collections.abc import Callable

from zocodegen.errors import UserError
from zocodegen.formats import link as p
from .link.server import BlockServer, HostLink, LineFailed, LinkError, Port

#: A device that asks for work is told to ask again after this long.
IDLE_WAIT_MS = 1000


def describe_identity(identity: p.Identity) -> str:
    line = (f"device: {identity.target}, model sha256 {identity.model_sha256.hex()[:12]}..., "
            f"input {identity.input_bytes} B, output {identity.output_bytes} B")
    if identity.training:
        block = (f" block {identity.block} of {identity.blocks}" if identity.block is not None
                 else f", block chosen on the device of {identity.blocks}"
                 if identity.selects_block else "")
        line += (f"; training {identity.mode}{block}, {identity.estimator}, "
                 f"{identity.trainable_layers} layers, Q={identity.queries}, "
                 f"N={identity.batch}, lr={identity.lr:g}, T={identity.steps}, "
                 f"seed {identity.seed}")
    return line


def monitor(port: Port, duration: float | None = None,
            out: Callable[[str], None] = print) -> int:
    """Watch until ``duration`` seconds have passed (forever when None); returns the number
    of requests seen. A line that only ever carried bytes no frame decodes from is refused
    (wrong port or baud rate); a silent one is said; a line the peer closed is refused, as
    `train` does. Closes the port."""
    end = None if duration is None else time.monotonic() + duration
    link = HostLink(port, timeout=duration if duration is not None else 1e9)
    refuse = BlockServer()
    seen = 0
    try:
        while end is None or time.monotonic() < end:
            link.timeout = 1e9 if end is None else max(0.05, end - time.monotonic())
            try:
                request = link.request()
            except LineFailed as exc:
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
    if seen == 0 and link.received:
        raise UserError(f"{link.received} bytes arrived but no frame of the zocodegen link "
                        f"decoded ({link.dropped} garbled): is a zocodegen firmware on this "
                        "port, at the same baud rate?")
    if seen == 0:
        out(f"nothing arrived in {duration:g} s")
    return seen
