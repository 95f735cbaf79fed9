"""Messages of the host link (docs/link.md, "Frames", "Requests", "COMMAND", "Events"): frame
sizes, type codes and payload layouts, packed and unpacked in one place. ``c_header`` renders
the codes and sizes into the ``include/zo_link_messages.h`` of every project, so the
firmware's zo_link.c and the host's host/link read the same numbers."""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from ..training.estimators import BY_WIRE_CODE, REGISTRY
from . import status


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
    EVENT = 0x0C


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


#: What follows a command's byte, and which commands end without DONE (docs/link.md).
COMMAND_ARGUMENTS = {Command.WAIT: "u32 milliseconds; no DONE", Command.TRAIN: "u32 steps",
                     Command.SELECT: "sparse --block auto: block trials; value = the block",
                     Command.ACCURACY: "u8 split", Command.QUIT: "no DONE"}


class Split(enum.IntEnum):
    TRAIN = 0
    VAL = 1
    TEST = 2


# Block-device statuses (status.py) the host answers with.
STATUS_OK = status.code("ZO_BLOCKDEV_OK")
STATUS_RANGE = status.code("ZO_BLOCKDEV_ERR_RANGE")
STATUS_READ_ONLY = status.code("ZO_BLOCKDEV_ERR_READ_ONLY")
STATUS_ARG = status.code("ZO_BLOCKDEV_ERR_ARG")

# Frames (docs/link.md "Frames"): COBS-encoded bodies of header, payload and CRC-32.
VERSION = 1
HEADER_BYTES = 6  # type u8, version u8, sequence u16, payload length u16
CRC_BYTES = 4
SECTOR = 512
#: The line's default baud rate, the build's and the host's (--baud). An ST-LINK/V2-1 VCP (the
#: F746 kit's) forwards 1,228,800 baud without losing bytes, and loses some at 1,843,200
#: (ST community, "STLink VCP works: 1,228,800 baud rate", 2017); the H7B3 kit's STLINK-V3E is
#: faster, but one default serves both boards and every host. Both USART1s make it within
#: 0.2 % (F746: 108 MHz / 88; H7B3: 140 MHz / 114); docs/link.md "Baud rate".
DEFAULT_BAUD = 1_228_800

#: Sectors per READ / WRITE. The device decodes a READ's answer straight into the caller's
#: buffer and sends from it, so this costs no device memory; 16 (8 KB) keeps the turnaround of
#: a request under 3 % of its time at the default 1,228,800 baud (docs/benchmarks.md "Link").
MAX_SECTORS = 16
MAX_FETCH = MAX_SECTORS * SECTOR  # bytes per FETCH / PUT
MAX_PAYLOAD = MAX_SECTORS * SECTOR + 16
#: Payload bytes the device keeps of an answer that is not READ / FETCH data: a COMMAND (its
#: byte and at most a u32 argument) or a status.
RESPONSE_BUFFER = 16
MAX_BODY = HEADER_BYTES + MAX_PAYLOAD + CRC_BYTES
#: COBS adds one byte per started run of 254; decoders refuse longer frames.
MAX_ENCODED = MAX_BODY + MAX_BODY // 254 + 1

HELLO_MAGIC = b"ZOLK"
#: More bytes than any device's input, output or checkpoint can be (the boards hold 1.4 MB of
#: SRAM at most): a HELLO that announces more is refused, so a faulty or hostile device cannot
#: make the host reserve gigabytes for its PUTs (found by tests/fuzz, host_link).
MAX_DEVICE_BYTES = 1 << 26
TARGET_BYTES = 24
_HELLO = struct.Struct(f"<4sHH32sIIIfiIIBBBBIIIIfII{TARGET_BYTES}s")
_MODES = ("full", "sparse")
NO_BLOCK = 0xFF  # HELLO's block of a firmware that selects it (or does not train sparse)
_FLAG_TRAINING, _FLAG_GNORM_SCALING, _FLAG_COSINE, _FLAG_QUANT_SCALING = 1, 2, 4, 8
_FLAG_GUARD, _FLAG_LR_AUTO = 16, 32
#: The device's link layer takes a SECTORS answer without its trailing zero bytes and fills
#: them in itself (zo_link.c): a one-sector record of a small model is ~100 bytes on the wire
#: instead of 530. Set by every zo_link.c that does; the host trims only for such a device.
_FLAG_TRIMMED_READS = 64


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
    trimmed_reads: bool = False

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
    for what, count in (("input", in_bytes), ("output", out_bytes), ("checkpoint", ckpt)):
        if count > MAX_DEVICE_BYTES:
            raise ValueError(f"HELLO announces {count:,} {what} bytes, more than any device "
                             f"holds ({MAX_DEVICE_BYTES:,})")
    return Identity(version, max_payload, sha, in_bytes, out_bytes, classes, scale, zp, ckpt,
                    bool(flags & _FLAG_TRAINING), bool(flags & _FLAG_GNORM_SCALING),
                    bool(flags & _FLAG_COSINE),
                    BY_WIRE_CODE[estimator].name if estimator in BY_WIRE_CODE
                    else f"#{estimator}",
                    _MODES[mode] if mode < len(_MODES) else f"#{mode}",
                    None if block == NO_BLOCK else block, blocks, queries, batch, steps, seed,
                    lr, layers, cps, target.rstrip(b"\0").decode(errors="replace"),
                    bool(flags & _FLAG_QUANT_SCALING), bool(flags & _FLAG_GUARD),
                    bool(flags & _FLAG_LR_AUTO), bool(flags & _FLAG_TRIMMED_READS))


def pack_hello(identity: Identity) -> bytes:
    """The device's HELLO payload (for tests and simulated devices)."""
    flags = (_FLAG_TRAINING * identity.training | _FLAG_GNORM_SCALING * identity.gnorm_scaling
             | _FLAG_COSINE * identity.cosine | _FLAG_QUANT_SCALING * identity.quant_scaling
             | _FLAG_GUARD * identity.guard | _FLAG_LR_AUTO * identity.lr_auto
             | _FLAG_TRIMMED_READS * identity.trimmed_reads)
    return _HELLO.pack(HELLO_MAGIC, identity.version, identity.max_payload,
                       identity.model_sha256, identity.input_bytes, identity.output_bytes,
                       identity.classes, identity.input_scale, identity.input_zero_point,
                       identity.checkpoint_bytes, flags, REGISTRY[identity.estimator].wire_code,
                       _MODES.index(identity.mode),
                       NO_BLOCK if identity.block is None else identity.block, identity.blocks,
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


class EventKind(enum.IntEnum):
    """What an EVENT reports: the training guard's check or an --lr auto trial / choice."""
    GUARD_CHECK = 1
    LR_TRIAL = 2
    LR_CHOSEN = 3
    CONFIRM = 4  # the end of the run: the start (step 0) or the result on held-back records
    STOP = 5  # the guard ends the run at this check: no new best for --patience checks


class Decision(enum.IntEnum):
    """A guard check's outcome (docs/training.md "Training guard")."""
    NONE = 0
    BEST = 1  # a new best: saved to the best slot
    ROLLBACK = 2  # validation fell: the best parameters back, eta halved
    RESTORE = 3  # the last step: the best parameters are the result
    START = 4  # the last step: the result did not confirm, the start is the result


@dataclass(frozen=True)
class Event:
    """EVENT: a decision of the guard or of --lr auto, with the validation score behind it
    (``correct`` of ``of`` records, ``loss_q16`` summed over them)."""
    kind: EventKind
    decision: Decision
    step: int
    correct: int
    of: int
    loss_q16: int
    halvings: int = 0
    eta_ppm: int = 0  # --lr auto: the candidate (trial) or the winner (chosen)
    steps: int = 0  # --lr auto: steps of the trial; CONFIRM: records where the two disagree;
    # STOP: steps since the best (so the best's step is step - steps; its score the event's)

    def text(self) -> str:
        """The event as a log line of key=value pairs."""
        if self.kind == EventKind.GUARD_CHECK:
            return (f"guard check step={self.step} correct={self.correct} of={self.of} "
                    f"loss_q16={self.loss_q16} event={self.decision.name.lower()} "
                    f"halvings={self.halvings}")
        if self.kind == EventKind.CONFIRM:
            return (f"guard confirm step={self.step} correct={self.correct} of={self.of} "
                    f"loss_q16={self.loss_q16}")
        if self.kind == EventKind.STOP:
            return (f"guard stop step={self.step} since_best={self.steps} "
                    f"best_step={self.step - self.steps} correct={self.correct} of={self.of} "
                    f"loss_q16={self.loss_q16}")
        if self.kind == EventKind.LR_TRIAL:
            return (f"lr trial eta_ppm={self.eta_ppm} steps={self.steps} "
                    f"correct={self.correct} of={self.of} loss_q16={self.loss_q16}")
        return f"lr chosen eta_ppm={self.eta_ppm}"


# kind, decision, 2 reserved, step, correct, of, halvings, eta_ppm, steps, loss_q16
_EVENT = struct.Struct("<BB2xIIIIIIq")


def parse_event(payload: bytes) -> Event:
    if len(payload) != _EVENT.size:
        raise ValueError(f"EVENT payload of {len(payload)} bytes, expected {_EVENT.size}")
    kind, decision, step, correct, of, halvings, eta_ppm, steps, loss = \
        _EVENT.unpack(payload)
    return Event(EventKind(kind), Decision(decision), step, correct, of, loss, halvings,
                 eta_ppm, steps)


def pack_event(event: Event) -> bytes:
    """An EVENT payload (for tests and simulated devices)."""
    return _EVENT.pack(event.kind, event.decision, event.step, event.correct, event.of,
                       event.halvings, event.eta_ppm, event.steps, event.loss_q16)


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


def sectors(code: int, data: bytes, trimmed: bool) -> bytes:
    """READ's SECTORS answer; for a device whose HELLO has the trimmed-reads flag, without
    the trailing zero bytes (records are padded to whole sectors with zeros)."""
    return status(code, data.rstrip(b"\0") if trimmed else data)


def command(cmd: Command, argument: bytes = b"") -> bytes:
    return cmd.value + argument


def wait(milliseconds: int) -> bytes:
    return command(Command.WAIT, struct.pack("<I", milliseconds))


def train(steps: int) -> bytes:
    return command(Command.TRAIN, struct.pack("<I", steps))


def accuracy(split: Split) -> bytes:
    return command(Command.ACCURACY, bytes([split]))


def c_header() -> str:
    """include/zo_link_messages.h: the codes and sizes above as C macros."""
    u = "u"
    lines = ["/* zo_link_messages.h - the host link's frame sizes, message types, commands and",
             " * events (docs/link.md). Generated from zocodegen/formats/link.py, which the host",
             " * reads too. Do not edit: change it there. */",
             "#ifndef ZO_LINK_MESSAGES_H", "#define ZO_LINK_MESSAGES_H", "",
             "/* frames */"]
    sizes = {"VERSION": VERSION, "HEADER_BYTES": HEADER_BYTES, "CRC_BYTES": CRC_BYTES,
             "SECTOR_BYTES": SECTOR, "MAX_SECTORS": MAX_SECTORS, "MAX_CHUNK": MAX_FETCH,
             "MAX_PAYLOAD": MAX_PAYLOAD, "MAX_BODY": MAX_BODY, "MAX_ENCODED": MAX_ENCODED,
             "RESPONSE_BUFFER": RESPONSE_BUFFER}
    lines += [f"#define ZO_LINK_{name} {value}{u}" for name, value in sizes.items()]
    lines += ["", "/* requests; the response to request type t has type t | ZO_LINK_RESPONSE */"]
    lines += [f"#define ZO_LINK_{r.name} 0x{r.value:02X}{u}" for r in Request]
    lines += [f"#define ZO_LINK_RESPONSE 0x{RESPONSE_BIT:02X}{u}",
              f"#define ZO_LINK_RESTART 0x{RESTART:02X}{u} /* the host knows no session: start"
              " over */",
              f"#define ZO_LINK_NAK 0x{NAK:02X}{u} /* the host could not decode a frame: "
              "retransmit */", "", "/* commands: the first byte of a COMMAND payload */"]
    lines += [f"#define ZO_LINK_CMD_{c.name} '{c.value.decode()}'"
              + (f" /* {COMMAND_ARGUMENTS[c]} */" if c in COMMAND_ARGUMENTS else "")
              for c in Command]
    lines += ["", "/* HELLO (docs/link.md \"HELLO\") */",
              f"#define ZO_LINK_HELLO_BYTES {_HELLO.size}{u}",
              f"#define ZO_LINK_TARGET_BYTES {TARGET_BYTES}{u}",
              f"#define ZO_LINK_NO_BLOCK 0x{NO_BLOCK:02X}{u}"]
    flags = {"TRAINING": _FLAG_TRAINING, "GNORM_SCALING": _FLAG_GNORM_SCALING,
             "COSINE": _FLAG_COSINE, "QUANT_SCALING": _FLAG_QUANT_SCALING,
             "GUARD": _FLAG_GUARD, "LR_AUTO": _FLAG_LR_AUTO,
             "TRIMMED_READS": _FLAG_TRIMMED_READS}
    lines += [f"#define ZO_LINK_FLAG_{name} 0x{value:X}{u}" for name, value in flags.items()]
    lines += ["", "/* EVENT: kind, decision, 2 reserved, u32 step, correct, of, halvings, "
              "eta_ppm, steps,", " * i64 loss_q16 */", f"#define ZO_LINK_EVENT_BYTES "
              f"{_EVENT.size}{u}"]
    lines += [f"#define ZO_EVENT_{k.name} {k.value}{u}" for k in EventKind]
    lines += [f"#define ZO_DECISION_{d.name} {d.value}{u}" for d in Decision]
    lines += ["", "#endif /* ZO_LINK_MESSAGES_H */", ""]
    return "\n".join(lines)
