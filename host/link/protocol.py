"""Messages of the host link (docs/link.md, "Requests" and "COMMAND"): type codes and the
payload layouts, packed and unpacked in one place."""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from ...training.config import ESTIMATORS


class Request(enum.IntEnum):
    """Device-to-host requests; the response type is ``request | 0x80``."""
    HELLO = 0x01
    NEXT = 0x02
    READ = 0x03
    WRITE = 0x04
    TELEMETRY = 0x05
    LOG = 0x06
    DONE = 0x07
    ERROR = 0x08
    FETCH = 0x09
    PUT = 0x0A
    SCALARS = 0x0B


RESPONSE_BIT = 0x80
NAK = 0xFF
RESTART = 0xFE
NAK_SEQ = 0xFFFF


class Command(bytes, enum.Enum):
    """The first byte of a COMMAND response."""
    WAIT = b"W"
    INFER = b"I"
    OPEN = b"O"
    SELECT = b"B"  # sparse --block auto: the block trials; DONE value = the block
    TRAIN = b"T"
    SAVE = b"S"
    LOAD = b"L"
    ACCURACY = b"A"
    RESET = b"R"
    QUIT = b"Q"


class Split(enum.IntEnum):
    TRAIN = 0
    VAL = 1
    TEST = 2


# Block-device statuses (zo_blockdev.h) the host answers with.
STATUS_OK = 0
STATUS_RANGE = -4
STATUS_READ_ONLY = -5
STATUS_ARG = -6

SECTOR = 512
MAX_SECTORS = 4
MAX_FETCH = 2048

HELLO_MAGIC = b"ZOLK"
_HELLO = struct.Struct("<4sHH32sIIIfiIIBBBBIIIIfII24s")
_MODES = ("full", "sparse")
_FLAG_TRAINING, _FLAG_GNORM_SCALING, _FLAG_COSINE, _FLAG_QUANT_SCALING = 1, 2, 4, 8
_FLAG_GUARD, _FLAG_LR_AUTO = 16, 32


@dataclass(frozen=True)
class Identity:
    """What HELLO says about the firmware."""
    version: int
    max_payload: int
    model_sha256: bytes
    input_bytes: int
    output_bytes: int
    classes: int
    input_scale: float
    input_zero_point: int
    checkpoint_bytes: int
    training: bool
    gnorm_scaling: bool
    cosine: bool
    estimator: str
    mode: str
    block: int | None
    blocks: int
    queries: int
    batch: int
    steps: int
    seed: int
    lr: float
    trainable_layers: int
    cycles_per_second: int
    target: str
    quant_scaling: bool = True
    guard: bool = False
    lr_auto: bool = False

    @property
    def selects_block(self) -> bool:
        """Sparse training whose block the device chooses by trials (command B)."""
        return self.training and self.mode == "sparse" and self.block is None

    def training_options(self) -> dict:
        """The options a resumed run must share with the run it continues (run.json)."""
        return {"estimator": self.estimator, "mode": self.mode, "block": self.block,
                "blocks": self.blocks, "queries": self.queries, "batch": self.batch,
                "steps": self.steps, "seed": self.seed, "lr": self.lr,
                "schedule": "cosine" if self.cosine else "constant",
                "gnorm_scaling": self.gnorm_scaling, "quant_scaling": self.quant_scaling,
                "guard": self.guard, "lr_auto": self.lr_auto,
                "trainable_layers": self.trainable_layers}


def parse_hello(payload: bytes) -> Identity:
    if len(payload) < _HELLO.size:
        raise ValueError(f"HELLO payload of {len(payload)} bytes, expected {_HELLO.size}")
    (magic, version, max_payload, sha, in_bytes, out_bytes, classes, scale, zp, ckpt, flags,
     estimator, mode, block, blocks, queries, batch, steps, seed, lr, layers, cps,
     target) = _HELLO.unpack_from(payload)
    if magic != HELLO_MAGIC:
        raise ValueError(f"HELLO magic {magic!r}, expected {HELLO_MAGIC!r}")
    return Identity(version, max_payload, sha, in_bytes, out_bytes, classes, scale, zp, ckpt,
                    bool(flags & _FLAG_TRAINING), bool(flags & _FLAG_GNORM_SCALING),
                    bool(flags & _FLAG_COSINE),
                    ESTIMATORS[estimator] if estimator < len(ESTIMATORS) else f"#{estimator}",
                    _MODES[mode] if mode < len(_MODES) else f"#{mode}",
                    None if block == 0xFF else block, blocks, queries, batch, steps, seed,
                    lr, layers, cps, target.rstrip(b"\0").decode(errors="replace"),
                    bool(flags & _FLAG_QUANT_SCALING), bool(flags & _FLAG_GUARD),
                    bool(flags & _FLAG_LR_AUTO))


def pack_hello(identity: Identity) -> bytes:
    """The device's HELLO payload (for tests and simulated devices)."""
    flags = (_FLAG_TRAINING * identity.training | _FLAG_GNORM_SCALING * identity.gnorm_scaling
             | _FLAG_COSINE * identity.cosine | _FLAG_QUANT_SCALING * identity.quant_scaling
             | _FLAG_GUARD * identity.guard | _FLAG_LR_AUTO * identity.lr_auto)
    return _HELLO.pack(HELLO_MAGIC, identity.version, identity.max_payload,
                       identity.model_sha256, identity.input_bytes, identity.output_bytes,
                       identity.classes, identity.input_scale, identity.input_zero_point,
                       identity.checkpoint_bytes, flags, ESTIMATORS.index(identity.estimator),
                       _MODES.index(identity.mode),
                       0xFF if identity.block is None else identity.block, identity.blocks,
                       identity.queries, identity.batch, identity.steps, identity.seed,
                       identity.lr, identity.trainable_layers, identity.cycles_per_second,
                       identity.target.encode())


@dataclass(frozen=True)
class Telemetry:
    step: int  # completed steps
    layer: int  # trainable layer, -1 for the end-of-step record
    loss: float  # nats
    lr: float
    cycles: int


_TELEMETRY = struct.Struct("<IiifI")


def parse_telemetry(payload: bytes) -> Telemetry:
    step, layer, loss_q16, lr, cycles = _TELEMETRY.unpack_from(payload)
    return Telemetry(step, layer, loss_q16 / 65536.0, lr, cycles)


@dataclass(frozen=True)
class Scalars:
    """A piece of one WP layer's query sums (--record-scalars): values first..first+count-1
    of ``total``."""
    step: int  # the step they belong to (0-based)
    layer: int  # trainable layer index
    first: int
    total: int
    values: tuple[int, ...]


_SCALARS = struct.Struct("<IHHHH")


def parse_scalars(payload: bytes) -> Scalars:
    step, layer, first, count, total = _SCALARS.unpack_from(payload)
    body = payload[_SCALARS.size:]
    if len(body) != 4 * count or first + count > total:
        raise ValueError(f"SCALARS of step {step}, layer {layer}: {len(body)} bytes for "
                         f"{count} values {first}..{first + count - 1} of {total}")
    return Scalars(step, layer, first, total, struct.unpack(f"<{count}i", body))


@dataclass(frozen=True)
class Done:
    command: bytes
    status: int
    value: int
    cycles: int


_DONE = struct.Struct("<B3xiII")


def parse_done(payload: bytes) -> Done:
    command, status, value, cycles = _DONE.unpack_from(payload)
    return Done(bytes([command]), status, value, cycles)


_BLOCK = struct.Struct("<IH")  # READ / WRITE: lba, count
_RANGE = struct.Struct("<IH")  # FETCH: offset, length
_STATUS = struct.Struct("<i")


def parse_block(payload: bytes) -> tuple[int, int, bytes]:
    """READ / WRITE: (lba, count, data)."""
    lba, count = _BLOCK.unpack_from(payload)
    return lba, count, payload[_BLOCK.size:]


def parse_fetch(payload: bytes) -> tuple[int, int]:
    return _RANGE.unpack_from(payload)


def parse_put(payload: bytes) -> tuple[int, bytes]:
    (offset,) = struct.unpack_from("<I", payload)
    return offset, payload[4:]


def parse_error(payload: bytes) -> tuple[int, str]:
    (code,) = _STATUS.unpack_from(payload)
    return code, payload[4:].decode(errors="replace")


def status(code: int, data: bytes = b"") -> bytes:
    """A status response payload (SECTORS, WRITTEN, BYTES, STORED)."""
    return _STATUS.pack(code) + (data if code == STATUS_OK else b"")


def command(cmd: Command, argument: bytes = b"") -> bytes:
    return cmd.value + argument


def wait(milliseconds: int) -> bytes:
    return command(Command.WAIT, struct.pack("<I", milliseconds))


def train(steps: int) -> bytes:
    return command(Command.TRAIN, struct.pack("<I", steps))


def accuracy(split: Split) -> bytes:
    return command(Command.ACCURACY, bytes([split]))
