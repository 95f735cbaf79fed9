"""Check a TFLite flatbuffer's structure before anything reads it.

Why this exists: the ``tflite`` package's generated reader (like every flatbuffers reader)
trusts the buffer. It follows offsets without checking them, so a corrupted file either
fails somewhere deep inside the reader with an unhelpful exception or, worse, reads bytes
that happen to decode (a length that runs into the next table, an offset that lands on
weight data) and yields a plausible-looking model that the TFLite runtime itself refuses
as "not a valid Flatbuffer buffer". The runtime runs the flatbuffers verifier before it
reads a model; this module applies the same rules (written here; only the table of field
ids and types is generated), so zocodegen refuses the same files, with one line that names
the table, field and bytes.

The rules, those of the flatbuffers runtime verifier (``flatbuffers/verifier.h``), for every
table reachable from the root ``Model``:

* every offset (root, table, vector, string, union value) is 4-byte aligned, non-zero,
  below 2**31 and lands inside the file;
* a table's vtable lies inside the file, is 2-byte aligned and has an even size;
  stricter than the runtime, in ways no flatbuffers writer produces: the vtable holds at
  least its two size words, every field it declares lies inside the table's declared
  size, and the table itself lies inside the file (for 1-3 % of the byte-mutated copies
  of the test fixtures that the runtime accepts, all of them corrupt);
* scalar fields lie inside the file and are aligned to their size (8-byte integers to 8);
* vectors and strings have an aligned length word and run no further than the end of
  the file; strings end with a NUL byte;
* tables nest at most 64 deep and there are at most 1,000,000 of them.

Field ids and types come from ``tflite_schema``, generated from the reference runtime's
schema classes (scripts/gen_tflite_schema.py): every table of the schema, not just those
zocodegen reads, since the runtime verifies them all and an options table checked under the
wrong union type is as corrupt as a bad tensor. A union type code the schema does not know
(a newer converter's options) is checked as a table whose declared fields lie inside it.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from .tflite_schema import TABLES, UNIONS

MAX_DEPTH = 64
MAX_TABLES = 1_000_000
MAX_BUFFER = (1 << 31) - 1  # flatbuffers' limit: offsets are signed 32-bit
FILE_IDENTIFIER = b"TFL3"

_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_I32 = struct.Struct("<i").unpack_from


class InvalidFlatbuffer(ValueError):
    """The buffer breaks a flatbuffers verifier rule; the message says which and where."""


class Field(NamedTuple):
    name: str
    slot: int  # field id: the vtable entry at 4 + 2 * slot
    kind: str  # scalar | string | vector | strings | table | tables | union
    arg: object = None  # scalar/vector element size, table name, or union name


SCHEMA: dict[str, tuple[Field, ...]] = {
    name: tuple(Field(*f) for f in fields) for name, fields in TABLES.items()}
_FIELD_NAMES = {(table, f.slot): f"field '{f.name}'"
                for table, fields in SCHEMA.items() for f in fields}


def verify_tflite(data: bytes) -> None:
    """Raise InvalidFlatbuffer naming the first rule ``data`` breaks; return if it is sound."""
    _Verifier(data).root()


class _Verifier:
    def __init__(self, data: bytes) -> None:
        self.buf = data
        self.size = len(data)
        self.depth = 0
        self.tables = 0

    # -- primitives: each raises with ``where`` naming the table/field being checked -------
    def fail(self, where: str, problem: str) -> None:
        raise InvalidFlatbuffer(f"{where}: {problem}")

    def in_bounds(self, pos: int, length: int, where: str, what: str) -> None:
        if pos < 0 or pos + length > self.size:
            self.fail(where, f"{what} runs past the end of the file "
                             f"(offset {pos}, {length} bytes of {self.size})")

    def aligned(self, pos: int, align: int, where: str, what: str) -> None:
        if pos % align:
            self.fail(where, f"{what} at offset {pos} is not {align}-byte aligned")

    def offset(self, pos: int, where: str) -> int:
        """Follow the uoffset stored at ``pos``; return the position it points to."""
        self.aligned(pos, 4, where, "offset")
        self.in_bounds(pos, 4, where, "offset")
        o = _U32(self.buf, pos)[0]
        if o == 0:
            self.fail(where, f"offset at {pos} is zero (points to itself)")
        if o > MAX_BUFFER:
            self.fail(where, f"offset {o} at {pos} exceeds the 2 GB flatbuffer limit")
        if pos + o >= self.size:
            self.fail(where, f"offset {o} at {pos} points past the end of the file "
                             f"(to {pos + o} of {self.size})")
        return pos + o

    def vector(self, pos: int, elem_size: int, where: str, what: str = "vector") -> int:
        """Check the vector/string at ``pos``; return its element count."""
        self.aligned(pos, 4, where, f"{what} length")
        self.in_bounds(pos, 4, where, f"{what} length")
        n = _U32(self.buf, pos)[0]
        if n >= MAX_BUFFER // elem_size:
            self.fail(where, f"{what} of {n} elements at offset {pos} is impossibly long")
        self.in_bounds(pos, 4 + n * elem_size, where, what)
        return n

    def string(self, pos: int, where: str) -> None:
        n = self.vector(pos, 1, where, "string")
        end = pos + 4 + n
        if end >= self.size or self.buf[end] != 0:
            self.fail(where, f"string at offset {pos} ({n} bytes) is not NUL-terminated")

    # -- tables -----------------------------------------------------------------------------
    def root(self) -> None:
        if self.size >= MAX_BUFFER:
            raise InvalidFlatbuffer(f"file of {self.size} bytes exceeds the 2 GB "
                                    "flatbuffer limit")
        if self.size < 12:  # root offset + soffset + the smallest vtable
            raise InvalidFlatbuffer(f"file of {self.size} bytes is too short")
        if self.buf[4:8] != FILE_IDENTIFIER:
            raise InvalidFlatbuffer("no 'TFL3' file identifier")
        self.table(self.offset(0, "root"), "Model", "Model")

    def table(self, pos: int, name: str | None, where: str) -> None:
        """Check the table at ``pos``; ``name`` None: a table whose fields are unknown.
        ``where`` names it in messages ("SubGraph 0 Tensor 3")."""
        self.aligned(pos, 4, where, "table")
        self.in_bounds(pos, 4, where, "table")
        self.depth += 1
        self.tables += 1
        if self.depth > MAX_DEPTH:
            self.fail(where, f"tables nested more than {MAX_DEPTH} deep")
        if self.tables > MAX_TABLES:
            self.fail(where, f"more than {MAX_TABLES} tables")
        vt = pos - _I32(self.buf, pos)[0]
        if vt < 0 or vt + 4 > self.size:
            self.fail(where, f"vtable of the table at {pos} lies outside the file "
                             f"(at {vt} of {self.size})")
        self.aligned(vt, 2, where, "vtable")
        vsize, tsize = _U16(self.buf, vt)[0], _U16(self.buf, vt + 2)[0]
        if vsize < 4 or vsize & 1:
            self.fail(where, f"vtable at {vt} declares an impossible size of {vsize} bytes")
        self.in_bounds(vt, vsize, where, "vtable")
        if tsize < 4:
            self.fail(where, f"vtable at {vt} declares a table of {tsize} bytes")
        self.in_bounds(pos, tsize, where, "table")
        n_fields = (vsize - 4) // 2
        offsets = struct.unpack_from(f"<{n_fields}H", self.buf, vt + 4) if n_fields else ()
        for slot, fo in enumerate(offsets):
            if fo and not 4 <= fo < tsize:
                field = _FIELD_NAMES.get((name, slot), f"field {slot}")
                self.fail(where, f"{field} at table offset {fo} lies outside the "
                                 f"table's {tsize} bytes")
        if name is not None:
            for field in SCHEMA[name]:
                fo = offsets[field.slot] if field.slot < n_fields else 0
                if fo:
                    self.field(pos, fo, tsize, offsets, field, where)
        self.depth -= 1

    def field(self, pos: int, fo: int, tsize: int, offsets: tuple[int, ...], field: Field,
              owner: str) -> None:
        """Check one present field of the table at ``pos`` (named ``owner``)."""
        where = f"{owner} field '{field.name}'"
        at = pos + fo
        size = field.arg if field.kind == "scalar" else 4
        if fo + size > tsize:
            self.fail(where, f"{size}-byte field at table offset {fo} runs past the "
                             f"table's {tsize} bytes")
        if field.kind == "scalar":  # inside the file: the table is
            self.aligned(at, size, where, "field")
            return
        target = self.offset(at, where)
        if field.kind == "string":
            self.string(target, where)
        elif field.kind == "vector":
            self.vector(target, field.arg, where)
        elif field.kind == "table":
            self.table(target, field.arg, f"{where} ({field.arg})")
        elif field.kind == "strings":
            n = self.vector(target, 4, where)
            for i in range(n):
                elem = target + 4 + 4 * i
                self.string(elem + _U32(self.buf, elem)[0], f"{where} [{i}]")
        elif field.kind == "tables":
            n = self.vector(target, 4, where)
            prefix = "" if owner == "Model" else f"{owner} "
            for i in range(n):
                elem = target + 4 + 4 * i
                self.table(elem + _U32(self.buf, elem)[0], field.arg, f"{prefix}{field.arg} {i}")
        elif field.kind == "union":
            type_fo = offsets[field.slot - 1] if field.slot - 1 < len(offsets) else 0
            code = self.buf[pos + type_fo] if type_fo else 0
            if code:  # NONE: the runtime ignores the value, so does this
                table = UNIONS[field.arg].get(code)
                self.table(target, table, f"{where} ({table or f'{field.arg} type {code}'})")
