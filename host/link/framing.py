"""Frames of the host link (docs/link.md, "Frames"): COBS-encoded bodies ended by a zero byte,
each body a 6-byte header, a payload and a CRC-32.

The decoder drops what the firmware's decoder (templates/link/zo_link.c) drops, by the same
rules in the same order, so a differential fuzz test can compare the two byte for byte.
COBS comes from the ``cobs`` package; the CRC is zlib's (the same CRC-32 as the firmware's).
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from cobs import cobs

from zocodegen.formats.link import CRC_BYTES, HEADER_BYTES, MAX_ENCODED, MAX_PAYLOAD, VERSION

HEADER = struct.Struct("<BBHH")  # type, version, sequence, payload length
assert HEADER.size == HEADER_BYTES
DELIMITER = b"\x00"


@dataclass(frozen=True)
class Frame:
    type: int
    seq: int
    payload: bytes


def encode_frame(frame_type: int, seq: int, payload: bytes = b"") -> bytes:
    """The bytes to put on the wire for one frame, delimiter included."""
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    body = HEADER.pack(frame_type, VERSION, seq & 0xFFFF, len(payload)) + payload
    body += struct.pack("<I", zlib.crc32(body))
    return cobs.encode(body) + DELIMITER


def decode_body(encoded: bytes) -> Frame | None:
    """One frame from the bytes between two delimiters, or None when it must be dropped."""
    if len(encoded) > MAX_ENCODED:
        return None
    try:
        body = cobs.decode(encoded)
    except cobs.DecodeError:
        return None
    if len(body) < HEADER.size + CRC_BYTES:
        return None
    frame_type, version, seq, length = HEADER.unpack_from(body)
    if length != len(body) - HEADER.size - CRC_BYTES or length > MAX_PAYLOAD:
        return None
    (crc,) = struct.unpack_from("<I", body, len(body) - CRC_BYTES)
    if crc != zlib.crc32(body[:-CRC_BYTES]) or version != VERSION:
        return None
    return Frame(frame_type, seq, bytes(body[HEADER.size:-CRC_BYTES]))


class FrameDecoder:
    """Incremental decoder: feed it whatever arrived, get back the frames it completed.

    ``dropped`` counts frames thrown away (corrupted, too long, wrong version); empty frames
    (two delimiters in a row) are not counted. Memory stays bounded on endless garbage: past
    MAX_ENCODED bytes only the fact that the frame overflowed is kept.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._overflow = False
        self.dropped = 0

    def feed(self, data: bytes) -> list[Frame | None]:
        """Events in arrival order: a Frame, or None for a dropped frame."""
        events: list[Frame | None] = []
        for chunk_end, part in _split_keep(data):
            if self._overflow or len(self._buffer) + len(part) > MAX_ENCODED:
                self._overflow = True
                self._buffer.clear()
            else:
                self._buffer += part
            if not chunk_end:
                continue
            if self._overflow:
                frame = None
            elif not self._buffer:
                continue
            else:
                frame = decode_body(bytes(self._buffer))
            self._buffer.clear()
            self._overflow = False
            if frame is None:
                self.dropped += 1
            events.append(frame)
        return events


def _split_keep(data: bytes):
    """(ends_with_delimiter, bytes before it) for each delimiter-separated piece of data."""
    pieces = bytes(data).split(DELIMITER)
    for k, piece in enumerate(pieces):
        yield k < len(pieces) - 1, piece
