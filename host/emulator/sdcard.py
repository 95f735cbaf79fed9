"""An SD memory card at the level of its bus protocol, backed by a file: the packed image IS the
card (LBA n = byte n * 512 of the file, docs/image.md), as `dd` would have written it.

Facts from the SD Physical Layer Simplified Specification (version 2.00 and later): the card
states (4.3, figure "card state diagram": idle, ready, ident, stby, tran, data, rcv, prg), the
commands the host drivers use (4.7.4: CMD0, 2, 3, 7, 8, 9, 12, 13, 16, 17, 18, 24, 25, 55,
ACMD6, ACMD41), the responses (4.9: R1, R1b, R2, R3, R6, R7), the card status bits (4.10.1),
the OCR (5.1), the CSD versions 1.0 and 2.0 (5.3). A card ignores a command that is illegal in
its state (no response) and reports ILLEGAL_COMMAND in its next status; error bits clear once
reported. CRCs are not computed: a CRC failure is a flag the interface model raises
(sdmmc.py), injected here as a fault.

Faults (``Faults``), each at the Nth event counted from power-on, 1 the first: a command the
card does not answer, a response with a bad CRC, a sector sent with a bad data CRC or never
sent, a sector received with a bad CRC (the card's CRC status token says so and it writes
nothing), a sector whose programming fails (ERROR in the next status), and a power cut during
the Nth write command: a torn prefix of that write reaches the file and the emulation stops
(``PowerCut``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

SECTOR = 512
IDLE, READY, IDENT, STBY, TRAN, DATA, RCV, PRG = range(8)
OUT_OF_RANGE, ADDRESS_ERROR, BLOCK_LEN_ERROR = 1 << 31, 1 << 30, 1 << 29
ILLEGAL_COMMAND, ERROR, READY_FOR_DATA, APP_CMD = 1 << 22, 1 << 19, 1 << 8, 1 << 5
ERROR_BITS = 0xFFFF8008  # the status bits that clear once reported (4.10.1 type E / C)
OCR_WINDOW = 0x00FF8000  # 2.7-3.6 V
OCR_BUSY, OCR_CCS = 1 << 31, 1 << 30
#: How many ACMD41s answer "still powering up" and CMD13s "programming" (busy): the driver's
#: loops must wait for both.
POWER_UP_POLLS, BUSY_POLLS = 2, 2
FAULT_KINDS = ("cmd-timeout", "cmd-crc", "read-crc", "read-timeout", "write-crc",
               "write-fail")


class PowerCut(Exception):
    """The card lost power during a write: what reached the medium is in the file."""


@dataclass
class Faults:
    """Injected failures: kind -> the event numbers (1-based, from power-on) it hits.
    cmd-*: every command counts; read-*: sectors the card sends; write-*: sectors it
    receives. ``power_cut``: (the Nth write command, bytes of it that reach the file, None for
    half of them, so a one-sector write tears in its middle)."""

    at: dict[str, set[int]] = field(default_factory=dict)
    power_cut: tuple[int, int | None] | None = None

    @classmethod
    def parse(cls, specs: list[str], power_cut: str | None = None) -> Faults:
        """``KIND:N`` strings (the CLI's --card-fault) and ``N[:BYTES]`` (--power-cut-at-write)."""
        faults = cls()
        for spec in specs:
            kind, _, n = spec.partition(":")
            if kind not in FAULT_KINDS or not n.isdigit() or int(n) < 1:
                raise ValueError(f"card fault {spec!r}: KIND:N with KIND one of "
                                 f"{', '.join(FAULT_KINDS)} and N >= 1")
            faults.at.setdefault(kind, set()).add(int(n))
        if power_cut is not None:
            n, _, torn = power_cut.partition(":")
            if not n.isdigit() or int(n) < 1 or (torn and not torn.isdigit()):
                raise ValueError(f"power cut {power_cut!r}: N[:BYTES] with N >= 1")
            faults.power_cut = (int(n), int(torn) if torn else None)
        return faults

    def hits(self, kind: str, count: int) -> bool:
        return count in self.at.get(kind, ())


@dataclass
class Response:
    kind: str                  # "R1", "R1b", "R2", "R3", "R6", "R7"
    index: int                 # what RESPCMD shows: the command, or 63 for R2 and R3
    words: tuple[int, ...]     # RESP1..RESP4 (R2: bits 127:1 of the register, bit 0 = 0)
    crc_ok: bool = True        # False: the interface sees a CRC failure (R3 has no CRC)

    @property
    def long(self) -> bool:
        return self.kind == "R2"


def _field(value: int, high: int, low: int) -> int:
    """``value`` placed at bits high:low of a 128-bit register."""
    assert value < 1 << (high - low + 1)
    return value << low


class SDCard:
    """One card: ``command`` answers the bus, ``send_block`` / ``receive_block`` move data."""

    def __init__(self, path: Path, high_capacity: bool = True, faults: Faults | None = None,
                 capacity_sectors: int | None = None):
        self.path, self.high_capacity = Path(path), high_capacity
        self.faults = faults or Faults()
        self.file = self.path.open("r+b")
        size = self.path.stat().st_size
        self.csd, self.sectors = self._csd(capacity_sectors or max(1, -(-size // SECTOR)))
        self.log: list[tuple[int, int]] = []  # (command, argument), every command received
        self.state = IDLE
        self.commands = self.sent = self.received = self.writes = 0
        self._power_on()

    def _power_on(self) -> None:
        self.state, self.rca, self.status, self.app = IDLE, 0, 0, False
        self.if_cond = self.hcs = False
        self.bus_width, self.polls, self.busy = 1, 0, 0
        self.next_lba, self.multi = 0, False
        self.torn: bytearray | None = None  # the write the power cut tears, as it arrives

    # ---- registers ----------------------------------------------------------------------
    def _csd(self, sectors: int) -> tuple[int, int]:
        """The CSD (5.3) of a card at least ``sectors`` long, and its exact capacity:
        version 2.0 counts 512 KB units, version 1.0 (C_SIZE + 1) * 2^(C_SIZE_MULT + 2)
        blocks of 2^READ_BL_LEN = 512 bytes."""
        common = _field(0x0E, 119, 112) | _field(0x32, 103, 96) | _field(0x5B5, 95, 84) \
            | _field(9, 83, 80) | _field(9, 25, 22) | _field(1, 0, 0)  # TAAC, 25 MHz, CCC,
        if self.high_capacity:                                       # READ/WRITE_BL_LEN 512
            units = -(-sectors // 1024)
            return _field(1, 127, 126) | common | _field(units - 1, 69, 48), units * 1024
        mult = next(m for m in range(8) if -(-sectors >> (m + 2)) <= 4096 or m == 7)
        blocks = -(-sectors // (1 << (mult + 2)))
        if blocks > 4096:
            raise ValueError(f"{sectors} sectors do not fit an SDSC card (1 GB here)")
        return (common | _field(blocks - 1, 73, 62) | _field(mult, 49, 47),
                blocks << (mult + 2))

    def _r2(self, register: int) -> Response:
        register &= ~1  # bit 0 is the end bit: the interface's RESP4 shows it as 0
        return Response("R2", 63, tuple((register >> s) & 0xFFFFFFFF for s in (96, 64, 32, 0)))

    def _r1(self, index: int, kind: str = "R1") -> Response:
        status = self.status | (self.state << 9) | (APP_CMD if self.app else 0)
        status |= READY_FOR_DATA if self.state != PRG else 0
        self.status &= ~ERROR_BITS
        return Response(kind, index, (status, 0, 0, 0))

    # ---- the bus ----------------------------------------------------------------------------
    def command(self, index: int, arg: int) -> Response | None:
        """The card's answer to a command, None when it does not answer (a command not for
        this state, a wrong RCA, no matching voltage, or an injected timeout)."""
        self.commands += 1
        self.log.append((index, arg))
        if self.faults.hits("cmd-timeout", self.commands):
            return None
        app, self.app = self.app, False
        if index == 0:
            self._power_on()
            return None
        answer = self._application(index, arg) if app else self._standard(index, arg)
        if answer is None and index != 8:
            self.status |= ILLEGAL_COMMAND
        if answer is not None and self.faults.hits("cmd-crc", self.commands):
            answer.crc_ok = False
        return answer

    def _addressed(self, arg: int) -> bool:
        return arg >> 16 == self.rca

    def _standard(self, index: int, arg: int) -> Response | None:
        state = self.state
        if index == 8 and state == IDLE:
            if (arg >> 8) & 0xF != 1:  # VHS: only 2.7-3.6 V is defined
                return None
            self.if_cond = True
            return Response("R7", 8, (arg & 0xFFF, 0, 0, 0))
        if index == 55 and (state in (IDLE, READY) or self._addressed(arg)):
            self.app = True
            return self._r1(55)
        if index == 2 and state == READY:
            self.state = IDENT
            return self._r2(_field(0x5A, 127, 120) | _field(0x5A4F, 119, 104) | 1)  # "ZO"
        if index == 3 and state in (IDENT, STBY):
            self.state, self.rca = STBY, 0x4D2B
            status = self._r1(3).words[0]  # R6: bits 23, 22, 19 and 12:0 of the status
            bits = ((status >> 8) & 0xC000) | ((status >> 6) & 0x2000) | (status & 0x1FFF)
            return Response("R6", 3, ((self.rca << 16) | bits, 0, 0, 0))
        if index == 9 and state == STBY and self._addressed(arg):
            return self._r2(self.csd)
        if index == 7:
            if state == STBY and self._addressed(arg):
                answer, self.state = self._r1(7, "R1b"), TRAN
                return answer
            if state in (TRAN, DATA, PRG) and not self._addressed(arg):
                self.state = STBY if state == TRAN else state
            return None
        if index == 13 and state in (STBY, TRAN, DATA, RCV, PRG) and self._addressed(arg):
            answer = self._r1(13)
            if state == PRG:
                self.busy -= 1
                self.state = TRAN if self.busy <= 0 else PRG
            return answer
        if index == 16 and state == TRAN:
            if not self.high_capacity and arg != SECTOR:
                self.status |= BLOCK_LEN_ERROR
            return self._r1(16)
        if index in (17, 18, 24, 25) and state == TRAN:
            return self._transfer(index, arg)
        if index == 12 and state in (DATA, RCV):
            answer = self._r1(12, "R1b")
            self._end_write() if state == RCV else setattr(self, "state", TRAN)
            return answer
        return None

    def _application(self, index: int, arg: int) -> Response | None:
        if index == 41 and self.state in (IDLE, READY):
            if not arg & OCR_WINDOW:
                return None  # no voltage in common: the card stays inactive (4.2.3)
            self.hcs = bool(arg & OCR_CCS)
            self.polls += 1
            ready = self.polls > POWER_UP_POLLS and (
                self.hcs and self.if_cond or not self.high_capacity)  # SDHC needs both (4.2.3)
            if ready:
                self.state = READY
            ocr = OCR_WINDOW | (OCR_BUSY if ready else 0)
            ocr |= OCR_CCS if ready and self.high_capacity else 0
            return Response("R3", 63, (ocr, 0, 0, 0), crc_ok=False)  # R3 carries no CRC
        if index == 6 and self.state == TRAN:
            if arg & 3 not in (0, 2):
                self.status |= ERROR
            self.bus_width = 4 if arg & 3 == 2 else 1
            return self._r1(6)
        return self._standard(index, arg)  # any other ACMD is its standard command

    def _transfer(self, index: int, arg: int) -> Response:
        lba = arg if self.high_capacity else arg // SECTOR
        if not self.high_capacity and arg % SECTOR:
            self.status |= ADDRESS_ERROR
        elif lba >= self.sectors:
            self.status |= OUT_OF_RANGE
        if self.status & (ADDRESS_ERROR | OUT_OF_RANGE):
            return self._r1(index)  # the card stays in tran, sends or takes nothing
        answer = self._r1(index)
        self.next_lba, self.multi = lba, index in (18, 25)
        self.state = DATA if index in (17, 18) else RCV
        if self.state == RCV:
            self.writes += 1
            cut = self.faults.power_cut
            self.torn = bytearray() if cut is not None and cut[0] == self.writes else None
        return answer

    # ---- data -------------------------------------------------------------------------------
    def send_block(self) -> tuple[bytes, bool] | None:
        """The next sector of a read (its bytes, and whether its CRC arrives intact), None
        when the card sends nothing (not in the data state, or an injected timeout)."""
        if self.state != DATA:
            return None
        if self.next_lba >= self.sectors:
            self.status |= OUT_OF_RANGE
            return None
        self.sent += 1
        if self.faults.hits("read-timeout", self.sent):
            return None
        self.file.seek(self.next_lba * SECTOR)
        data = self.file.read(SECTOR).ljust(SECTOR, b"\0")  # beyond the file: never written
        self.next_lba += 1
        if not self.multi:
            self.state = TRAN
        return data, not self.faults.hits("read-crc", self.sent)

    def receive_block(self, data: bytes) -> bool | None:
        """A sector of a write from the host: True when the card's CRC status token is
        positive, False when it is negative (nothing written), None when the card was not
        receiving (no token at all: the interface times out)."""
        if self.state != RCV or self.next_lba >= self.sectors:
            return None
        self.received += 1
        if self.faults.hits("write-crc", self.received):
            if not self.multi:
                self.state = TRAN
            return False
        if self.faults.hits("write-fail", self.received):
            self.status |= ERROR  # programming failed: reported by the next status
        elif self.torn is not None:
            self.torn += data
        else:
            self.file.seek(self.next_lba * SECTOR)
            self.file.write(data)
            self.file.flush()
        self.next_lba += 1
        if not self.multi:
            self._end_write()
        return True

    def _end_write(self) -> None:
        """The write command's data is all in: programming (busy) starts, or the power is
        cut while it runs."""
        self.state, self.busy = PRG, BUSY_POLLS
        if self.torn is None:
            return
        n, torn = self.faults.power_cut
        keep = len(self.torn) // 2 if torn is None else min(torn, len(self.torn))
        first = self.next_lba - len(self.torn) // SECTOR
        self.file.seek(first * SECTOR)
        self.file.write(self.torn[:keep])
        self.file.flush()
        raise PowerCut(f"power cut during write {n} (LBA {first}, {len(self.torn)} bytes): "
                       f"{keep} bytes reached the card")

    def close(self) -> None:
        self.file.close()
