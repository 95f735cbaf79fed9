"""Host link frames and the host's request handling, without firmware: hypothesis fuzzing of
the host-side decoder, the retransmission rules of docs/link.md on a scripted byte stream,
and the firmware's C decoder compared with the host's on the same fuzzed streams."""
from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zocodegen.formats import link as p
from zocodegen.formats import status
from zocodegen.host.link.framing import (MAX_ENCODED, MAX_PAYLOAD, Frame, FrameDecoder,
                                         decode_body, encode_frame)
from zocodegen.host.link.server import DeviceSession, HostLink, LinkError

REPO = Path(__file__).resolve().parent.parent
frames = st.builds(lambda t, s, pl: (t, s, pl), st.integers(0, 255), st.integers(0, 0xFFFF),
                   st.binary(max_size=300))


@given(frames)
def test_frame_round_trip(frame):
    t, s, payload = frame
    wire = encode_frame(t, s, payload)
    assert wire.count(0) == 1 and wire.endswith(b"\0"), "the only zero ends the frame"
    assert FrameDecoder().feed(wire) == [Frame(t, s, payload)]


def test_largest_frame_fits_the_limit():
    wire = encode_frame(1, 2, bytes(MAX_PAYLOAD))  # all zeros: the worst COBS case is none
    assert len(wire) - 1 <= MAX_ENCODED
    wire = encode_frame(1, 2, b"\xff" * MAX_PAYLOAD)  # no zeros: one code byte per 254
    assert len(wire) - 1 == MAX_ENCODED
    assert FrameDecoder().feed(wire)[0].payload == b"\xff" * MAX_PAYLOAD
    with pytest.raises(ValueError):
        encode_frame(1, 2, bytes(MAX_PAYLOAD + 1))


@given(st.binary(max_size=4000))
def test_decoder_survives_garbage(data):
    decoder = FrameDecoder()
    events = decoder.feed(data)
    assert len(events) <= data.count(0)
    assert decoder.dropped == sum(e is None for e in events)
    assert len(decoder._buffer) <= MAX_ENCODED


@given(st.lists(st.tuples(st.binary(max_size=60), frames), max_size=6),
       st.lists(st.integers(1, 50), max_size=10))
def test_frames_recovered_between_garbage_in_any_chunking(items, cuts):
    """Garbage before a frame costs at most one dropped frame; the frame itself arrives,
    however the bytes are split into reads."""
    stream, expected = b"", []
    for garbage, (t, s, payload) in items:
        stream += garbage + b"\0" + encode_frame(t, s, payload)
        expected.append(Frame(t, s, payload))
    decoder, events, pos = FrameDecoder(), [], 0
    for cut in cuts + [len(stream)]:
        events += decoder.feed(stream[pos:pos + cut])
        pos += cut
    events += decoder.feed(stream[pos:])
    assert [e for e in events if e is not None and e in expected] == expected


@given(frames, st.integers(0, 10_000), st.integers(1, 255))
def test_a_corrupted_byte_never_yields_another_frame(frame, where, flip):
    t, s, payload = frame
    wire = bytearray(encode_frame(t, s, payload))
    wire[where % (len(wire) - 1)] ^= flip
    for event in FrameDecoder().feed(bytes(wire) + b"\0"):
        assert event is None or event == Frame(t, s, payload)


def test_decoder_rejects_each_kind_of_bad_frame():
    def body(t=1, version=1, seq=5, payload=b"ab", length=None, crc=None):
        head = struct.pack("<BBHH", t, version, seq, len(payload) if length is None else length)
        raw = head + payload
        return raw + struct.pack("<I", zlib.crc32(raw) if crc is None else crc)
    from cobs import cobs
    assert decode_body(cobs.encode(body())) == Frame(1, 5, b"ab")
    assert decode_body(cobs.encode(body(version=2))) is None
    assert decode_body(cobs.encode(body(length=3))) is None
    assert decode_body(cobs.encode(body(crc=1))) is None
    assert decode_body(cobs.encode(body()[:9])) is None
    assert decode_body(b"\x05ab") is None  # a COBS code pointing past the end


class ScriptedPort:
    """A byte stream whose device side is a list of bytes to deliver, one read at a time."""

    def __init__(self, chunks: list[bytes]):
        self.chunks = list(chunks)
        self.sent: list[bytes] = []

    def read(self, size: int = 1) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""

    @property
    def in_waiting(self) -> int:
        return 0

    def write(self, data: bytes) -> int:
        self.sent.append(data)
        return len(data)

    def close(self) -> None:
        pass


def _responses(port: ScriptedPort) -> list[Frame]:
    decoder = FrameDecoder()
    return [f for chunk in port.sent for f in decoder.feed(chunk)]


def test_retransmission_gets_the_cached_answer_and_runs_once():
    telemetry = struct.pack("<IiifI", 3, -1, 65536, 0.01, 7)
    port = ScriptedPort([encode_frame(p.Request.TELEMETRY, 9, telemetry),
                         encode_frame(p.Request.TELEMETRY, 9, telemetry),  # retransmitted
                         b"\x13garbage\0",  # a frame that does not decode: NAK
                         encode_frame(p.Request.TELEMETRY, 10, telemetry)])
    seen = []
    session = DeviceSession(HostLink(port, timeout=0.5), telemetry=seen.append)
    session._serve(session.link.request(), None)
    session._serve(session.link.request(), None)
    assert [t.step for t in seen] == [3, 3]
    answers = _responses(port)
    assert [(f.type, f.seq) for f in answers] == [
        (p.Request.TELEMETRY | p.RESPONSE_BIT, 9), (p.Request.TELEMETRY | p.RESPONSE_BIT, 9),
        (p.NAK, p.NAK_SEQ), (p.Request.TELEMETRY | p.RESPONSE_BIT, 10)]
    assert session.link.retransmissions == 1 and session.link.dropped == 1


def test_unknown_session_is_told_to_restart_and_silence_times_out():
    hello = p.pack_hello(p.Identity(1, MAX_PAYLOAD, bytes(range(32)), 64, 10, 10, 0.5, -3, 0,
                                    False, False, False, "adaptive", "full", None, 4, 1, 1, 1,
                                    0, 0.0, 0, 0, "native"))
    port = ScriptedPort([encode_frame(p.Request.READ, 77, struct.pack("<IH", 0, 1)),
                         encode_frame(p.Request.HELLO, 0, hello)])
    session = DeviceSession(HostLink(port, timeout=0.3))
    identity = session.hello()
    assert identity.target == "native" and identity.input_zero_point == -3
    assert [(f.type, f.seq) for f in _responses(port)] == [(p.RESTART, 77),
                                                           (p.Request.HELLO | 0x80, 0)]
    with pytest.raises(LinkError, match="nothing valid"):
        session.link.request()


@pytest.mark.parametrize("kind", [p.Request.TELEMETRY, p.Request.SCALARS, p.Request.READ,
                                  p.Request.FETCH, p.Request.PUT, p.Request.ERROR])
def test_a_short_request_is_a_link_error_naming_it(kind):
    """Found by tests/fuzz (host_link): a payload shorter than its fields escaped as
    struct.error, a traceback instead of the one line every link failure gets."""
    port = ScriptedPort([encode_frame(kind, 1, b"\x01")])
    session = DeviceSession(HostLink(port, timeout=0.5))
    with pytest.raises(LinkError, match=f"malformed {kind.name} request"):
        session._serve(session.link.request(), None)


def test_put_beyond_the_output_is_refused_and_grows_nothing():
    """Found by tests/fuzz (host_link): PUT at offset 0xFFFFFF00 made the host grow its
    output buffer to 4 GB; now anything beyond the output HELLO announced is RANGE."""
    from zocodegen.host.link.server import Result
    hello = p.pack_hello(p.Identity(1, MAX_PAYLOAD, bytes(32), 64, 10, 10, 0.5, -3, 0,
                                    False, False, False, "adaptive", "full", None, 4, 1, 1, 1,
                                    0, 0.0, 0, 0, "native"))
    port = ScriptedPort([encode_frame(p.Request.HELLO, 0, hello),
                         encode_frame(p.Request.PUT, 1, struct.pack("<I", 0xFFFFFF00) + b"ab"),
                         encode_frame(p.Request.PUT, 2, struct.pack("<I", 8) + b"ab")])
    session = DeviceSession(HostLink(port, timeout=0.5))
    session.hello()
    result = Result(p.Done(b"I", 0, 0, 0))
    session._serve(session.link.request(), result)
    session._serve(session.link.request(), result)
    statuses = [struct.unpack("<i", f.payload)[0] for f in _responses(port)[1:]]
    assert statuses == [p.STATUS_RANGE, p.STATUS_OK]
    assert bytes(result.output) == bytes(8) + b"ab"


def test_a_hello_announcing_gigabytes_is_refused():
    """Found by tests/fuzz (host_link): a HELLO announcing 1 GB of output let the device's
    PUTs make the host reserve it."""
    hello = p.pack_hello(p.Identity(1, MAX_PAYLOAD, bytes(32), 64, 1 << 30, 10, 0.5, -3, 0,
                                    False, False, False, "adaptive", "full", None, 4, 1, 1, 1,
                                    0, 0.0, 0, 0, "native"))
    session = DeviceSession(HostLink(ScriptedPort([encode_frame(p.Request.HELLO, 0, hello)]),
                                     timeout=0.5))
    with pytest.raises(LinkError, match="announces 1,073,741,824 output bytes"):
        session.hello()


# ---- the firmware's decoder against this one ---------------------------------------------

def _c_decoder(tmp: Path) -> Path | None:
    if shutil.which("cc") is None:
        return None
    exe = tmp / "link_decoder"
    sources = [REPO / "tests/data/link_decoder_main.c", REPO / "templates/link/zo_link.c",
               REPO / "templates/link/zo_crc32.c"]
    if not all(s.is_file() for s in sources):
        return None
    generated = tmp / "include"  # what the generator renders from the Python tables
    generated.mkdir(exist_ok=True)
    (generated / "zo_status.h").write_text(status.c_header())
    (generated / "zo_link_messages.h").write_text(p.c_header())
    cmd = ["cc", "-std=c99", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
           "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
           f"-I{REPO / 'templates/link'}", f"-I{REPO / 'templates/project'}", f"-I{generated}",
           "-DZO_LINK_DECODER_ONLY", *map(str, sources), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return exe


def _python_events(data: bytes) -> list[str]:
    out = []
    for event in FrameDecoder().feed(data):
        out.append("B" if event is None else
                   f"F {event.type} {event.seq} {len(event.payload)} {event.payload.hex()}")
    return out


@pytest.fixture(scope="module")
def c_decoder(tmp_path_factory):
    exe = _c_decoder(tmp_path_factory.mktemp("link"))
    if exe is None:
        pytest.skip("needs a host C compiler (cc)")
    return exe


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(frames.map(lambda f: encode_frame(*f)), st.binary(max_size=80),
                          st.just(b"\0"), st.binary(min_size=2100, max_size=2200)),
                max_size=8),
       st.lists(st.tuples(st.integers(0, 100_000), st.integers(1, 255)), max_size=4))
def test_c_decoder_matches_python(c_decoder, parts, flips):
    """Sanitized native build of the firmware's decoder: same frames, same drops."""
    data = bytearray(b"".join(parts))
    for where, flip in flips:
        if data:
            data[where % len(data)] ^= flip
    run = subprocess.run([str(c_decoder)], input=bytes(data), capture_output=True, timeout=30)
    assert run.returncode == 0, run.stderr.decode()
    assert run.stdout.decode().split("\n")[:-1] == _python_events(bytes(data))


def test_events_round_trip_and_read_as_lines():
    events = [p.Event(p.EventKind.GUARD_CHECK, p.Decision.ROLLBACK, 270, 37, 53, 2280233, 1),
              p.Event(p.EventKind.LR_TRIAL, p.Decision.NONE, 0, 35, 53, 1 << 40, 0, 3000, 10),
              p.Event(p.EventKind.LR_CHOSEN, p.Decision.NONE, 0, 0, 0, 0, 0, 3000, 0)]
    for event in events:
        payload = p.pack_event(event)
        assert len(payload) == 36 and p.parse_event(payload) == event
    assert events[0].text() == ("guard check step=270 correct=37 of=53 loss_q16=2280233 "
                                "event=rollback halvings=1")
    assert events[2].text() == "lr chosen eta_ppm=3000"
    with pytest.raises(ValueError):
        p.parse_event(bytes(35))


def test_the_generated_link_header_has_the_python_codes():
    header = p.c_header()
    for request in p.Request:
        assert f"#define ZO_LINK_{request.name} 0x{request.value:02X}u" in header
    for cmd in p.Command:
        assert f"#define ZO_LINK_CMD_{cmd.name} '{cmd.value.decode()}'" in header
    assert f"#define ZO_LINK_MAX_ENCODED {MAX_ENCODED}u" in header
    assert "#define ZO_LINK_EVENT_BYTES 36u" in header
