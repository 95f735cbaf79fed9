"""An emulated STM32F746 / STM32H7B3 board: a Cortex-M7 (the Unicorn engine's model), the
board's memory map from its target.json (anything else faults), and register models of what
the firmware touches: the clock tree (clocks.py), GPIO alternate functions, USART1, SDMMC1
with the SD card in its slot (sdmmc.py, sdcard.py), and the core's SCB, DWT and debug
registers (ARMv7-M ARM B3.2, C1.6, C1.8).

The firmware is the ELF a user flashes, booted from its vector table. It runs until it
reaches ``platform_exit`` (which ends in ``bkpt`` when a debugger is attached, as this board
says one is), faults, or waits to read from a host that has closed the line (the end of a
session, status 0: a firmware that serves commands never exits by itself); ``run`` returns
the exit status. USART1 is bridged to a byte
``Line`` (the host link), and DWT_CYCCNT counts executed instructions, as QEMU's -icount
does, plus the time the firmware spends waiting on an empty line.
"""
from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from elftools.elf.elffile import ELFFile
from unicorn import (UC_ARCH_ARM, UC_HOOK_BLOCK, UC_HOOK_CODE, UC_HOOK_INSN_INVALID, UC_HOOK_INTR,
                     UC_HOOK_MEM_UNMAPPED, UC_MODE_MCLASS, UC_MODE_THUMB, UC_PROT_ALL,
                     UC_PROT_EXEC, UC_PROT_READ, Uc, UcError)
from unicorn.arm_const import (UC_ARM_REG_LR, UC_ARM_REG_MSP, UC_ARM_REG_PC, UC_ARM_REG_SP,
                               UC_CPU_ARM_CORTEX_M7)

from zocodegen.files import open_input
from zocodegen.formats.link import DEFAULT_BAUD
from zocodegen.target import BAUD_TOLERANCE, TARGET_NAMES, target_data, usart_divisor

from .clocks import GPIO_PORTS, MHZ, BoardFault, ClockTree, F7Clocks, H7Clocks
from .gpio import require_alternate
from .sdcard import PowerCut, SDCard
from .sdmmc import SDMMC

#: Register models by the family a board's target.json names in its "emulator" section
#: (with its GPIO base, boot address and cache geometry).
FAMILIES: dict[str, type[ClockTree]] = {"stm32f7": F7Clocks, "stm32h7": H7Clocks}
#: The boards that can be emulated: those whose target.json has an "emulator" section.
BOARDS = tuple(name for name in TARGET_NAMES if "emulator" in target_data(name))
USART1 = 0x40011000  # the same on both families (RM0385 / RM0455 memory maps)
USART_CR1, USART_BRR, USART_ISR, USART_ICR, USART_RDR, USART_TDR, USART_PRESC = (
    0x00, 0x0C, 0x1C, 0x20, 0x24, 0x28, 0x2C)
CR1_OVER8 = 1 << 15
ISR_RXNE, ISR_TC, ISR_TXE, ISR_TEACK, ISR_REACK = 1 << 5, 1 << 6, 1 << 7, 1 << 21, 1 << 22
DWT_CYCCNT, DHCSR, SCB_CCSIDR, SCB_CPACR = 0xE0001004, 0xE000EDF0, 0xE000ED80, 0xE000ED88
CPACR_FPU = 0xF << 20  # CP10 and CP11 full access (ARMv7-M ARM B3.2.20)
STACK_PAINT = 0xA5  # the stack below main's frame is filled with it; what changed was used
#: Cortex-M7 identification and cache geometry the startup code reads (M7 TRM).
CORE_RESET = {0xE000ED00: 0x411FC271, 0xE000ED0C: 0xFA050000, 0xE000ED14: 0x00040200,
              0xE000ED78: 0x09000003, 0xE000ED7C: 0x8303C003, 0xE0001000: 0x40000000,
              0xE0001FB4: 0x3, DHCSR: 1}  # DHCSR C_DEBUGEN: "a debugger is attached"
FAULT_STATUS = 131  # the exit status of a fault (QEMU's runner uses 128 + 3, HardFault)
POWER_CUT_STATUS = 133  # the exit status of a power cut the SD card model injected
#: Real time a poll of an empty receive line stands for, so that the firmware's timeouts
#: (DWT-based) pass while the host has nothing to say.
IDLE_SECONDS = 0.002


class Line(Protocol):
    """USART1's far end (the host link)."""

    def receive(self, seconds: float) -> bytes | None:
        """The bytes the host sent, waiting up to ``seconds`` (b"": none yet; None: the
        host is gone)."""

    def send(self, data: bytes) -> None:
        """The bytes the firmware wrote."""


@dataclass
class Report:
    status: int | None = None  # platform_exit's status
    fault: str | None = None  # what the silicon would have refused, or the fault
    power_cut: str | None = None  # the injected power cut that ended the run (sdcard.py)
    #: the host closed the line while the firmware waited to read: the end of a session
    #: (commands from a file or a pipe), status 0, every byte it wrote sent before
    closed: bool = False
    received_bytes: int = 0  # what the host sent on USART1
    sent_bytes: int = 0  # what the firmware sent
    sysclk_hz: int = 0
    usart_baud: float = 0.0
    instructions: int = 0
    stack_bytes: int = 0  # reserved by the linker script (_sstack.._estack)
    stack_used_bytes: int = 0  # the deepest the stack went (painted at main's entry)
    arena_bytes: int = 0  # .zo_arena as linked
    #: The most instructions between two reads of USART1_RDR while more bytes were waiting
    #: (inside a frame): a polled receiver that takes longer than a byte lasts overruns.
    rx_gap_instructions: int = 0


def thumb_instructions(code: bytes) -> int:
    """Instructions in a block of Thumb-2 code: a halfword whose top five bits are 11101,
    11110 or 11111 starts a 32-bit instruction (ARMv7-M ARM A5.1)."""
    count = pos = 0
    while pos < len(code) - 1:
        pos += 4 if (code[pos + 1] >> 3) in (0x1D, 0x1E, 0x1F) else 2
        count += 1
    return count


class Board:
    """One emulated board running one firmware ELF."""

    def __init__(self, name: str, elf: Path, line: Line, baud: int = DEFAULT_BAUD,
                 card: SDCard | None = None):
        if name not in BOARDS:
            raise ValueError(f"no emulated board {name}; there are {', '.join(BOARDS)}")
        facts = target_data(name)
        emulator = facts["emulator"]
        self.gpio_base, self.boot = int(emulator["gpio_base"], 16), int(
            emulator["boot_address"], 16)
        self.ccsidr, self.usart_presc = int(emulator["dcache_ccsidr"], 16), emulator[
            "usart_presc"]
        self.name, self.line, self.facts = name, line, facts
        self.clocks = FAMILIES[emulator["family"]](facts["clock"]["hse_hz"])
        self.vcp, self.baud = facts["vcp"], baud  # baud: the host's end of the line
        self.regs = dict(CORE_RESET)  # the other peripherals' plain registers
        self.sdmmc = SDMMC(facts["sdmmc"], self.clocks, self.regs, self.gpio_base, card,
                           lambda: self.instructions)  # card None: the slot is empty
        self.report = Report()
        self.instructions = self.cycle_base = self.idle_cycles = 0
        self.rx = bytearray()
        self._rx_mark: int | None = None  # instructions at the last RDR read with bytes left
        #: ISR reads with nothing to receive since the firmware last sent a byte or the host's
        #: last bytes arrived: the first is a transmitter's wait for TXE, a second one a
        #: receiver's wait for the host.
        self._empty_polls = 0
        self.pins_checked = False
        self._fpu_watch = None
        self.tx = bytearray()
        self.uc = Uc(UC_ARCH_ARM, UC_MODE_THUMB | UC_MODE_MCLASS)
        self.uc.ctl_set_cpu_model(UC_CPU_ARM_CORTEX_M7)
        self._blocks: dict[int, int] = {}
        self._map(facts)
        self.symbols = self._load(Path(elf))
        self._hooks()

    # ---- memory and the ELF -------------------------------------------------------------
    def _map(self, facts: dict) -> None:
        flash, size = int(facts["flash"]["origin"], 16), facts["flash"]["bytes"]
        self.flash = (flash, size)
        self._flash = ctypes.create_string_buffer(b"\xff" * size, size)
        self.uc.mem_map_ptr(flash, size, UC_PROT_READ | UC_PROT_EXEC, self._flash)
        if self.boot != flash:  # the F746 boots from flash's ITCM alias (RM0385 2.4)
            self.uc.mem_map_ptr(self.boot, size, UC_PROT_READ | UC_PROT_EXEC, self._flash)
        self.rams = [(int(m["origin"], 16), m["bytes"]) for m in facts["memories"]]
        for base, length in self.rams:
            self.uc.mem_map(base, length, UC_PROT_ALL)
        for base, length in ((0x40000000, 0x20000000), (0xE0000000, 0x100000)):
            self.uc.mmio_map(base, length, self._read, base, self._write, base)

    def in_ram(self, address: int, length: int = 1) -> bool:
        """Inside RAM, adjacent memories counting as one (the F746's DTCM and SRAM1 are
        contiguous: its linker script's RAM region spans both)."""
        spans: list[list[int]] = []
        for base, size in sorted(self.rams):
            if spans and spans[-1][1] == base:
                spans[-1][1] = base + size
            else:
                spans.append([base, base + size])
        return any(lo <= address and address + length <= hi for lo, hi in spans)

    def _load(self, elf: Path) -> dict[str, int]:
        flash, size = self.flash
        with open_input(elf, "firmware") as f:
            image = ELFFile(f)
            for section in image.iter_sections():  # SHF_ALLOC: where it lives when running
                at, length = section["sh_addr"], section["sh_size"]
                if section["sh_flags"] & 2 and length and not (
                        self.in_ram(at, length) or flash <= at and at + length <= flash + size):
                    raise BoardFault(f"{elf.name}: section {section.name} ({length} bytes at "
                                     f"0x{at:08x}) is outside {self.name}'s memories")
            for segment in image.iter_segments():
                if segment["p_type"] != "PT_LOAD" or segment["p_filesz"] == 0:
                    continue
                data, at = segment.data(), segment["p_paddr"]  # load address: .data in flash
                if flash <= at and at + len(data) <= flash + size:
                    ctypes.memmove(ctypes.addressof(self._flash) + at - flash, data, len(data))
                elif self.in_ram(at, len(data)):
                    self.uc.mem_write(at, data)
                else:
                    raise BoardFault(f"{elf.name}: a segment of {len(data)} bytes at "
                                     f"0x{at:08x} is outside {self.name}'s memories")
            table = image.get_section_by_name(".symtab")
            return {s.name: s["st_value"] & ~1 for s in table.iter_symbols() if s.name} \
                if table is not None else {}

    # ---- running --------------------------------------------------------------------------
    def run(self, max_instructions: int | None = None) -> Report:
        """Boot from the vector table and run until platform_exit, a fault, or the limit."""
        msp, pc = struct.unpack("<II", self.uc.mem_read(self.boot, 8))
        if not self.in_ram(msp - 4, 4):
            raise BoardFault(f"initial stack pointer 0x{msp:08x} is outside RAM")
        self.uc.reg_write(UC_ARM_REG_MSP, msp)
        self.uc.reg_write(UC_ARM_REG_SP, msp)
        self.uc.reg_write(UC_ARM_REG_LR, 0xFFFFFFFF)
        self.limit = max_instructions
        try:
            self.uc.emu_start(pc | 1, 0xFFFFFFFF)
        except UcError as exc:
            if self.report.fault is None and self.report.status is None:
                where = self.uc.reg_read(UC_ARM_REG_PC)
                self.report.fault = f"{exc} at pc 0x{where:08x} ({self.symbol_at(where)})"
        except BoardFault as exc:
            self.report.fault = str(exc)
        self.report.instructions = self.instructions
        self._measure_memory()
        self._flush()
        if self.report.fault is not None:
            self.report.status = FAULT_STATUS
        elif self.report.power_cut is not None:
            self.report.status = POWER_CUT_STATUS
        elif self.report.closed and self.report.status is None:
            self.report.status = 0
        return self.report

    def stop(self, fault: str | None = None) -> None:
        if fault is not None and self.report.fault is None:
            self.report.fault = fault
        self.uc.emu_stop()

    def symbol_at(self, address: int) -> str:
        best = max(((a, n) for n, a in self.symbols.items() if a <= address), default=None)
        return f"{best[1]}+0x{address - best[0]:x}" if best else "?"

    def _hooks(self) -> None:
        self.uc.hook_add(UC_HOOK_BLOCK, self._on_block)
        self.uc.hook_add(UC_HOOK_MEM_UNMAPPED, self._on_unmapped)
        self.uc.hook_add(UC_HOOK_INTR, self._on_exception)
        self.uc.hook_add(UC_HOOK_INSN_INVALID, self._on_invalid)
        self._fpu_watch = self.uc.hook_add(UC_HOOK_CODE, self._on_instruction)
        if "main" in self.symbols:
            self.uc.hook_add(UC_HOOK_BLOCK, self._on_main, None, self.symbols["main"],
                             self.symbols["main"])
        for handler in ("Default_Handler", "HardFault_Handler"):
            if handler in self.symbols:
                self.uc.hook_add(UC_HOOK_BLOCK, self._on_handler, handler,
                                 self.symbols[handler], self.symbols[handler])

    def _on_block(self, uc, address, size, _):
        count = self._blocks.get(address)
        if count is None:
            count = self._blocks[address] = thumb_instructions(bytes(uc.mem_read(address, size)))
        self.instructions += count
        if self.limit is not None and self.instructions >= self.limit:
            self.stop(f"no exit after {self.limit} instructions")

    def _on_instruction(self, uc, address, size, _):
        """Until CPACR enables CP10/CP11: a floating-point instruction (a coprocessor
        encoding, ARMv7-M ARM A5.3.18, on coprocessor 10 or 11) is a NOCP usage fault."""
        if size != 4:
            return
        first, second = struct.unpack("<HH", uc.mem_read(address, 4))
        if (first >> 8) in (0xEC, 0xED, 0xEE, 0xFC, 0xFD, 0xFE) and (second >> 9) & 7 == 5:
            cpacr = self.regs.get(SCB_CPACR, 0)
            self.stop(f"usage fault (NOCP): floating-point instruction at pc 0x{address:08x} "
                      f"({self.symbol_at(address)}) with SCB_CPACR = 0x{cpacr:08x}; CP10/CP11 "
                      f"need 0x{cpacr | CPACR_FPU:08x} first")

    def _on_main(self, uc, address, size, _):
        """Paint the stack below main's frame, to find how deep it goes (_measure_memory)."""
        if "_sstack" in self.symbols:
            low = self.symbols["_sstack"]
            high = uc.reg_read(UC_ARM_REG_SP) - 64
            if high > low:
                uc.mem_write(low, bytes([STACK_PAINT]) * (high - low))

    def _measure_memory(self) -> None:
        sym = self.symbols
        if "_sstack" in sym and "_estack" in sym:
            low, high = sym["_sstack"], sym["_estack"]
            painted = bytes(self.uc.mem_read(low, high - low))
            untouched = len(painted) - len(painted.lstrip(bytes([STACK_PAINT])))
            self.report.stack_bytes, self.report.stack_used_bytes = high - low, \
                high - low - untouched
        if "_szo_arena" in sym and "_ezo_arena" in sym:
            self.report.arena_bytes = sym["_ezo_arena"] - sym["_szo_arena"]

    def _on_handler(self, uc, address, size, name):
        self.stop(f"{name} entered from the vector table (an unexpected exception)")

    def _on_unmapped(self, uc, access, address, size, value, _):
        pc = uc.reg_read(UC_ARM_REG_PC)
        self.stop(f"bus fault: access to unmapped 0x{address:08x} at pc 0x{pc:08x} "
                  f"({self.symbol_at(pc)})")
        return False

    def _on_invalid(self, uc, _):
        pc = uc.reg_read(UC_ARM_REG_PC)
        self.stop(f"usage fault: undefined instruction at pc 0x{pc:08x} ({self.symbol_at(pc)})")
        return False

    def _on_exception(self, uc, number, _):
        """Unicorn reports exceptions instead of taking them: BKPT (7) is platform_exit's
        stop for the debugger, anything else is a fault on this firmware (it uses none)."""
        pc = uc.reg_read(UC_ARM_REG_PC)
        if number == 7 and "zo_exit_status" in self.symbols:
            raw = bytes(uc.mem_read(self.symbols["zo_exit_status"], 4))
            self.report.status = struct.unpack("<i", raw)[0]
            self.stop()
        else:
            self.stop(f"exception {number} at pc 0x{pc:08x} ({self.symbol_at(pc)})")

    # ---- peripherals ----------------------------------------------------------------------
    def _peripheral(self, address: int) -> str | None:
        if USART1 <= address < USART1 + 0x400:
            return "USART1"
        if self.sdmmc.base <= address < self.sdmmc.base + 0x400:
            return "SDMMC1"
        port = (address - self.gpio_base) // 0x400
        if 0 <= port < 11 and address >= self.gpio_base:
            return "GPIO" + GPIO_PORTS[port]
        return None

    def _check_clocked(self, address: int) -> None:
        peripheral = self._peripheral(address)
        if peripheral is not None and not self.clocks.clocked(peripheral):
            pc = self.uc.reg_read(UC_ARM_REG_PC)
            self.stop(f"{peripheral} accessed at 0x{address:08x} with its RCC clock off "
                      f"(pc 0x{pc:08x}, {self.symbol_at(pc)})")

    def _read(self, uc, offset, size, base):
        address = base + offset
        word = address & ~3
        try:
            value = self._read_word(word)
        except BoardFault as exc:
            pc = uc.reg_read(UC_ARM_REG_PC)
            self.stop(f"{exc} (pc 0x{pc:08x}, {self.symbol_at(pc)})")
            return 0
        return (value >> (8 * (address & 3))) & ((1 << (8 * size)) - 1)

    def _read_word(self, word: int) -> int:
        if word == DWT_CYCCNT:
            return (self.instructions + self.idle_cycles - self.cycle_base) & 0xFFFFFFFF
        if word == SCB_CCSIDR:  # the L1 D-cache's geometry (target.json "emulator")
            return self.ccsidr
        if self.clocks.owns(word):
            return self.clocks.read(word, self.instructions)
        self._check_clocked(word)
        if self.sdmmc.owns(word):
            return self.sdmmc.read(word)
        if word == USART1 + USART_ISR:
            return self._usart_status()
        if word == USART1 + USART_RDR:
            if not self.rx:
                return 0
            if self._rx_mark is not None:
                self.report.rx_gap_instructions = max(self.report.rx_gap_instructions,
                                                      self.instructions - self._rx_mark)
            byte = self.rx.pop(0)
            self._rx_mark = self.instructions if self.rx else None
            return byte
        return self.regs.get(word, 0)

    def _write(self, uc, offset, size, value, base):
        address = base + offset
        word = address & ~3
        if size != 4:  # a narrow store merges into its register
            shift, mask = 8 * (address & 3), ((1 << (8 * size)) - 1) << (8 * (address & 3))
            value = (self._read_word(word) & ~mask) | ((value << shift) & mask)
        try:
            self._write_word(word, value)
        except BoardFault as exc:
            pc = uc.reg_read(UC_ARM_REG_PC)
            self.stop(f"{exc} (pc 0x{pc:08x}, {self.symbol_at(pc)})")
        except PowerCut as exc:
            self.report.power_cut = str(exc)
            self.stop()

    def _write_word(self, word: int, value: int) -> None:
        if word == DWT_CYCCNT:
            self.cycle_base = (self.instructions + self.idle_cycles - value) & 0xFFFFFFFF
            return
        if word == SCB_CPACR and value & CPACR_FPU == CPACR_FPU and self._fpu_watch:
            self.uc.hook_del(self._fpu_watch)  # the FPU is on: stop watching for it
            self._fpu_watch = None
        if self.clocks.owns(word):
            self.clocks.write(word, value, self.instructions)
            return
        self._check_clocked(word)
        if self.sdmmc.owns(word):
            self.sdmmc.write(word, value)
            return
        if word == USART1 + USART_TDR:
            if not self.pins_checked:
                self._check_pins()
            self._empty_polls = 0
            self.tx.append(value & 0xFF)
            if len(self.tx) >= 4096:
                self._flush()
            return
        if word == USART1 + USART_CR1 and value & 1 and not self.regs.get(word, 0) & 1:
            self.regs[word] = value
            self._check_usart()
            return
        self.regs[word] = value

    def _usart_status(self) -> int:
        cr1 = self.regs.get(USART1 + USART_CR1, 0)
        status = ISR_TXE | ISR_TC | (ISR_TEACK if cr1 & 8 else 0) | (ISR_REACK if cr1 & 4 else 0)
        if not self.rx:
            self._empty_polls += 1
            if self._empty_polls == 1:  # sending: the line is not waited on per byte
                return status
            self._flush()  # the firmware waits for an answer: what it said must be out
            got = self.line.receive(IDLE_SECONDS)
            if got is None:
                self.report.closed = True
                self.stop()
                return status
            self.rx += got
            self.report.received_bytes += len(got)
            if got:  # the count starts again: the next empty read may be a TXE wait
                self._empty_polls = 0
            else:
                self.idle_cycles += int(IDLE_SECONDS * self.clocks.clocks().sysclk)
        return status | (ISR_RXNE if self.rx else 0)

    def _flush(self) -> None:
        if self.tx:
            self.line.send(bytes(self.tx))
            self.report.sent_bytes += len(self.tx)
            self.tx.clear()

    def _check_usart(self) -> None:
        """At USART enable: the divider gives the host's baud rate within 2 % of the kernel
        clock the RCC model runs (BRR, and OVER8: USARTDIV = BRR[15:4] and BRR[2:0] << 1,
        rate 2 f_ck / USARTDIV; RM0385 31.5.4)."""
        clocks = self.clocks.clocks()
        brr = self.regs.get(USART1 + USART_BRR, 0)
        over8 = bool(self.regs.get(USART1 + USART_CR1, 0) & CR1_OVER8)
        presc = self.regs.get(USART1 + USART_PRESC, 0) if self.usart_presc else 0
        kernel = clocks.usart1 // [1, 2, 4, 6, 8, 10, 12, 16, 32, 64, 128, 256][min(presc, 11)]
        divider = ((brr & ~0xF) | ((brr & 0x7) << 1)) / 2 if over8 else brr
        baud = kernel / divider if divider >= (8 if over8 else 16) else 0.0
        want = self.baud
        if abs(baud - want) > BAUD_TOLERANCE * want:
            raise BoardFault(f"USART1_BRR = {brr}{' with OVER8' if over8 else ''} at a "
                             f"{kernel / MHZ:g} MHz kernel clock gives {baud:.0f} baud: the "
                             f"host's {want} within 2 % needs f_ck / "
                             f"{usart_divisor(kernel, want) or 'no divider'} (the firmware's "
                             "--baud and the host's must be the same)")
        self.report.sysclk_hz, self.report.usart_baud = clocks.sysclk, baud

    def _check_pins(self) -> None:
        """At the first byte sent: the board's TX and RX pins are on USART1's alternate
        function (the firmware hands them over after enabling the USART)."""
        self.pins_checked = True
        for pin in (self.vcp["tx"], self.vcp["rx"]):
            require_alternate(self.regs, self.gpio_base, pin, self.vcp["af"], "USART1 sends")
