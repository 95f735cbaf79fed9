"""SDMMC1 of the two boards at register level, with the card (sdcard.py) on its bus.

Two versions of the peripheral, one register map (POWER 0x00, CLKCR 0x04, ARG 0x08, CMD 0x0C,
RESPCMD 0x10, RESP1-4 0x14-0x20, DTIMER 0x24, DLEN 0x28, DCTRL 0x2C, DCOUNT 0x30, STA 0x34,
ICR 0x38, MASK 0x3C, FIFO 0x80) with different fields:

* v1, STM32F746 (RM0385 chapter 35, registers 35.8): CLKCR CLKDIV 7:0 (SDMMC_CK = SDMMCCLK /
  (CLKDIV + 2)), CLKEN 8, BYPASS 10, WIDBUS 12:11; CMD WAITRESP 7:6, CPSMEN 10; the data path
  starts with DCTRL DTEN; an R3 response (no CRC) raises CCRCFAIL.
* v2, STM32H7B3 (RM0455 SDMMC chapter): CLKCR CLKDIV 9:0 (SDMMCCLK / (2 * CLKDIV), 0 =
  bypass), no CLKEN, WIDBUS 15:14; CMD CMDTRANS 6 (the command starts the data path), CMDSTOP
  7, WAITRESP 9:8 (10 = short response without CRC check), CPSMEN 12.

STA's static flags (CCRCFAIL 0, DCRCFAIL 1, CTIMEOUT 2, DTIMEOUT 3, CMDREND 6, CMDSENT 7,
DATAEND 8, DBCKEND 10) are set by the command and data state machines and cleared through
ICR; the FIFO flags (TXFIFOHE 14, RXFIFOHF 15, RXFIFOF 17, TXFIFOE 18, RXFIFOE 19) follow
the FIFO. Commands and data complete at once: the card answers in zero time, a read sector
enters the FIFO when the firmware has emptied it (hardware flow control), a written sector
is programmed when its last word is in.

What it refuses, as the silicon would misbehave: a command with the card unpowered, without
SDMMC_CK (v1 CLKEN), with the kernel clock not running (clocks.py), above 400 kHz while the
card identifies or above 25 MHz afterwards (SD Physical Layer Simplified Specification, fOD
and fPP at default speed), before the six pins are on AF12; a data transfer whose block size
is not 512 bytes or whose bus width (WIDBUS) differs from the card's (ACMD6); reading an
empty FIFO or writing it with no write transfer running; reading the card-detect pin unless
it is an input with its pull-up (the switch only pulls to ground).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable

from .clocks import MHZ, BoardFault, ClockTree
from .gpio import pin_setting, port_base, require_alternate
from .sdcard import IDENT, IDLE, READY, SECTOR, SDCard

POWER, CLKCR, ARG, CMD, RESPCMD, RESP1, DLEN, DCTRL, DCOUNT, STA, ICR = (
    0x00, 0x04, 0x08, 0x0C, 0x10, 0x14, 0x28, 0x2C, 0x30, 0x34, 0x38)
FIFO = 0x80
CCRCFAIL, DCRCFAIL, CTIMEOUT, DTIMEOUT = 1 << 0, 1 << 1, 1 << 2, 1 << 3
CMDREND, CMDSENT, DATAEND, DBCKEND = 1 << 6, 1 << 7, 1 << 8, 1 << 10
TXFIFOHE, RXFIFOHF, RXFIFOF, TXFIFOE, RXFIFOE = 1 << 14, 1 << 15, 1 << 17, 1 << 18, 1 << 19
FIFO_WORDS = 32
WORDS = SECTOR // 4
IDENT_MAX_HZ, DATA_MAX_HZ = 400_000, 25 * MHZ


@dataclass(frozen=True)
class Layout:
    """Where one version keeps its fields."""
    manual: str
    waitresp_pos: int
    cpsmen: int
    cmdtrans: int   # 0: none (v1)
    cmdstop: int
    clkdiv_mask: int
    clken: int      # 0: none (v2: the clock runs while powered)
    widbus_pos: int
    icr: int        # the STA flags ICR clears

    def ck_hz(self, kernel_hz: int, clkcr: int) -> float:
        div = clkcr & self.clkdiv_mask
        if self.clken:  # v1: BYPASS (bit 10) passes SDMMCCLK through
            return kernel_hz if clkcr & (1 << 10) else kernel_hz / (div + 2)
        return kernel_hz if div == 0 else kernel_hz / (2 * div)


V1 = Layout("RM0385 35.8", 6, 1 << 10, 0, 0, 0xFF, 1 << 8, 11, 0x004005FF)
V2 = Layout("RM0455 SDMMC", 8, 1 << 12, 1 << 6, 1 << 7, 0x3FF, 0, 14, 0x1FE00FFF)


class SDMMC:
    """The peripheral of one board (target.json "sdmmc": base, version, pins, af, detect) and
    the card in its slot (None: the slot is empty)."""

    def __init__(self, facts: dict, clocks: ClockTree, regs: dict[int, int], gpio_base: int,
                 card: SDCard | None, now: Callable[[], int]):
        self.base, self.layout = int(facts["base"], 16), V1 if facts["version"] == 1 else V2
        self.pins, self.af, self.detect = facts["pins"], facts["af"], facts["detect"]
        self.clocks, self.regs, self.gpio_base, self.card, self.now = (
            clocks, regs, gpio_base, card, now)
        self.detect_idr = port_base(gpio_base, self.detect) + 0x10
        self.r: dict[int, int] = {}
        self.flags = 0
        self.fifo: list[int] = []   # words the firmware has still to read
        self.tx: list[int] = []     # words of the sector being written
        self.dpsm: str | None = None  # "read" / "write" while the data path runs
        self.blocks = 0             # sectors the data path has still to move
        self.pins_checked = False
        self.ck_hz = 0.0            # SDMMC_CK at the last command

    def owns(self, word: int) -> bool:
        return self.base <= word < self.base + 0x400 or word == self.detect_idr

    # ---- reads --------------------------------------------------------------------------------
    def read(self, word: int) -> int:
        if word == self.detect_idr:
            return self._detect()
        offset = word - self.base
        if offset == STA:
            return self._status()
        if FIFO <= offset < FIFO + 0x80:
            self._refill()
            if not self.fifo:
                raise BoardFault("SDMMC1_FIFO read while it is empty (STA RXFIFOE set)")
            return self.fifo.pop(0)
        if offset == DCOUNT:
            return self.blocks * SECTOR
        return self.r.get(offset, 0)

    def _detect(self) -> int:
        mode, pull, _ = pin_setting(self.regs, self.gpio_base, self.detect)
        if mode != 0 or pull != 1:
            raise BoardFault(f"card detect {self.detect} read in GPIO{self.detect[1]} mode "
                             f"{mode}, pull {pull}: it needs an input (mode 0) with its pull-up "
                             "(PUPDR 01); the switch only pulls it to ground with a card in")
        bit = 1 << int(self.detect[2:])
        return (self.regs.get(self.detect_idr, 0) & ~bit) | (0 if self.card else bit)

    def _status(self) -> int:
        self._refill()
        sta = self.flags
        if self.fifo:
            sta |= (RXFIFOHF if len(self.fifo) >= 8 else 0) | (
                RXFIFOF if len(self.fifo) >= FIFO_WORDS else 0)
        else:
            sta |= RXFIFOE
        if self.dpsm == "write":  # the FIFO drains as fast as it is written
            sta |= TXFIFOHE | TXFIFOE
        if self.layout is V1:  # TXACT 12, RXACT 13, RXDAVL 21
            sta |= (1 << 12 if self.dpsm == "write" else 0) | (
                1 << 13 if self.dpsm == "read" else 0) | (1 << 21 if self.fifo else 0)
        elif self.dpsm:  # v2 DPSMACT 12
            sta |= 1 << 12
        return sta

    def _refill(self) -> None:
        """A read's next sector enters the FIFO once the firmware has emptied it."""
        if self.dpsm != "read" or self.fifo or self.blocks == 0:
            return
        got = self.card.send_block() if self.card else None
        if got is None:
            self._data_done(DTIMEOUT)
            return
        data, crc_ok = got
        self.fifo = list(struct.unpack(f"<{WORDS}I", data))
        self.blocks -= 1
        self.flags |= DBCKEND
        if not crc_ok:
            self._data_done(DCRCFAIL)
        elif self.blocks == 0:
            self._data_done(DATAEND)

    def _data_done(self, flag: int) -> None:
        self.flags |= flag
        self.dpsm, self.tx = None, []

    # ---- writes -------------------------------------------------------------------------------
    def write(self, word: int, value: int) -> None:
        offset = word - self.base
        if word == self.detect_idr or offset in (STA, RESPCMD, DCOUNT) or RESP1 <= offset < 0x24:
            return  # read-only
        if offset == ICR:
            self.flags &= ~(value & self.layout.icr)
        elif FIFO <= offset < FIFO + 0x80:
            self._fifo_write(value)
        else:
            self.r[offset] = value
            if offset == CMD and value & self.layout.cpsmen:
                self._command(value)
            elif offset == DCTRL:
                self.dpsm = None
                if value & 1:  # DTEN
                    self._start_data()

    def _fifo_write(self, value: int) -> None:
        if self.dpsm != "write":
            raise BoardFault("SDMMC1_FIFO written with no write transfer running (DCTRL DTEN "
                             "or CMD CMDTRANS with DTDIR = 0 first)")
        self.tx.append(value)
        if len(self.tx) < WORDS:
            return
        data, self.tx = struct.pack(f"<{WORDS}I", *self.tx), []
        accepted = self.card.receive_block(data) if self.card else None  # may cut the power
        self.blocks -= 1
        self.flags |= DBCKEND
        if accepted is None:
            self._data_done(DTIMEOUT)  # nobody answered with a CRC status token
        elif not accepted:
            self._data_done(DCRCFAIL)
        elif self.blocks == 0:
            self._data_done(DATAEND)

    def _command(self, value: int) -> None:
        """The command path: CMD with CPSMEN sends CMD<index> with ARG and takes the answer."""
        layout, index = self.layout, value & 0x3F
        wait = (value >> layout.waitresp_pos) & 3
        self._check_bus(index)
        if index == 12 or value & layout.cmdstop:
            self.dpsm, self.fifo, self.tx = None, [], []
        answer = self.card.command(index, self.r.get(ARG, 0)) if self.card else None
        if wait == 0 or (wait == 2 and layout is V1):
            self.flags |= CMDSENT
        elif answer is None:
            self.flags |= CTIMEOUT
        else:
            if (wait == 3) != answer.long:
                raise BoardFault(f"CMD{index} sent expecting a {'long' if wait == 3 else 'short'}"
                                 f" response (WAITRESP {wait:02b}); the card answers {answer.kind}")
            self.r[RESPCMD] = answer.index
            for i, w in enumerate(answer.words):
                self.r[RESP1 + 4 * i] = w
            checked = not (layout is V2 and wait == 2)
            self.flags |= CCRCFAIL if checked and not answer.crc_ok else CMDREND
        if value & layout.cmdtrans:
            self._start_data()

    def _check_bus(self, index: int) -> None:
        clkcr, power = self.r.get(CLKCR, 0), self.r.get(POWER, 0) & 3
        where = f"SDMMC1 sends CMD{index}"
        if power != 3:
            raise BoardFault(f"{where} with SDMMC_POWER PWRCTRL = {power:02b}: the card is not "
                             f"powered (11 = on; {self.layout.manual})")
        if self.layout.clken and not clkcr & self.layout.clken:
            raise BoardFault(f"{where} with SDMMC_CLKCR CLKEN = 0: SDMMC_CK does not run "
                             f"({self.layout.manual})")
        self.ck_hz = self.layout.ck_hz(self.clocks.sdmmc_kernel(self.now()), clkcr)
        identifying = self.card is None or self.card.state in (IDLE, READY, IDENT)
        limit = IDENT_MAX_HZ if identifying else DATA_MAX_HZ
        if self.ck_hz > limit:
            raise BoardFault(f"{where} at SDMMC_CK {self.ck_hz / 1e3:g} kHz (SDMMC_CLKCR "
                             f"0x{clkcr:08x}): at most {limit / 1e3:g} kHz "
                             f"{'while the card identifies (fOD)' if identifying else '(fPP)'}")
        if not self.pins_checked:
            for pin in self.pins:
                require_alternate(self.regs, self.gpio_base, pin, self.af, where)
            self.pins_checked = True

    def _start_data(self) -> None:
        """The data path: DLEN bytes in 512-byte blocks, in DCTRL's direction."""
        dctrl, dlen = self.r.get(DCTRL, 0), self.r.get(DLEN, 0) & 0x1FFFFFF
        size = (dctrl >> 4) & 0xF
        if size != 9 or dlen == 0 or dlen % SECTOR:
            raise BoardFault(f"SDMMC1 data path with DBLOCKSIZE {size} and DLEN {dlen}: SD memory"
                             f" cards move whole 512-byte blocks (DBLOCKSIZE 9)")
        widbus = (self.r.get(CLKCR, 0) >> self.layout.widbus_pos) & 3
        width = {0: 1, 1: 4}.get(widbus, 8)
        if self.card is not None and width != self.card.bus_width:
            raise BoardFault(f"SDMMC1 moves data on a {width}-bit bus (SDMMC_CLKCR WIDBUS "
                             f"{widbus:02b}) to a card set to {self.card.bus_width} bits "
                             "(ACMD6)")
        self.dpsm = "read" if dctrl & 2 else "write"
        self.blocks, self.fifo, self.tx = dlen // SECTOR, [], []
