"""The clock trees of the two boards as the silicon checks them: which sources are ready,
what the PLL makes of its input, what SYSCLK, the bus clocks and USART1's kernel clock are,
and the refusals a real part would answer with a hang or a crash (issue 34).

Facts: RM0385 (STM32F74x) section 5.3 RCC registers, 3.3.2 table 5 (flash wait states at
2.7-3.6 V), 4.1.4 (over-drive above 180 MHz), DS10916 (maxima HCLK 216, PCLK2 108 MHz);
RM0455 (STM32H7A3/B3) RCC, PWR and FLASH chapters (PLL1 ranges, VOS0 wait states), DS13139
(maxima at VOS0: CPU 280, APB 140 MHz). Each register field is named where it is read.
"""
from __future__ import annotations

from dataclasses import dataclass

MHZ = 1_000_000
#: Instructions a started oscillator or PLL takes before its ready flag sets: software that
#: selects it without waiting for the flag is caught (the datasheets give microseconds).
SETTLE_INSTRUCTIONS = 64
GPIO_PORTS = "ABCDEFGHIJK"


class BoardFault(Exception):
    """What the silicon would refuse or misbehave on, named with the register and value."""


@dataclass
class Clocks:
    sysclk: int
    hclk: int
    pclk2: int
    usart1: int  # USART1's kernel clock


def bits(value: int, low: int, width: int) -> int:
    return (value >> low) & ((1 << width) - 1)


class ClockTree:
    """One family's RCC / PWR / FLASH registers: ``read`` and ``write`` by address, with the
    instruction count ``now`` for ready flags that take time."""

    WINDOWS: tuple[tuple[int, int], ...] = ()  # (base, bytes) of its RCC, PWR, FLASH blocks
    CFGR = FLASH_ACR = WAIT_STATE_MHZ = 0  # each family's addresses and flash table
    MAXIMA = (0, 0, "")  # the datasheet's CPU / AHB and APB2 maxima, and which datasheet

    def __init__(self, hse_hz: int, hsi_hz: int):
        self.hse_hz, self.hsi_hz = hse_hz, hsi_hz
        self.regs: dict[int, int] = {}
        self.started: dict[str, int] = {}  # oscillator / PLL -> instruction it was enabled at

    def owns(self, address: int) -> bool:
        return any(base <= address < base + size for base, size in self.WINDOWS)

    def ready(self, what: str, now: int) -> bool:
        return what in self.started and now - self.started[what] >= SETTLE_INSTRUCTIONS

    def switched(self, sw: int, sources: dict[int, str], manual: str, now: int) -> Clocks:
        """The checks of a clock switch (RCC_CFGR SW = ``sw``) both families make: the source
        is ready, and the flash wait states cover the new HCLK (one more per
        WAIT_STATE_MHZ). Returns the clocks that now run."""
        source = sources.get(sw)
        if source is None or not self.ready(source, now):
            raise BoardFault(f"RCC_CFGR SW = {sw}: {source or 'an unmodelled source'} "
                             f"selected before its ready flag is set ({manual})")
        clocks = self.clocks()
        latency = bits(self.regs.get(self.FLASH_ACR, 0), 0, 4)
        need = max(0, -(-clocks.hclk // (self.WAIT_STATE_MHZ * MHZ)) - 1)
        if latency < need:
            raise BoardFault(f"SYSCLK {clocks.sysclk / MHZ:g} MHz with FLASH_ACR LATENCY "
                             f"{latency}: needs {need} wait states ({manual})")
        cpu_max, apb_max, datasheet = self.MAXIMA
        if max(clocks.sysclk, clocks.hclk) > cpu_max or clocks.pclk2 > apb_max:
            raise BoardFault(f"SYSCLK {clocks.sysclk / MHZ:g} / HCLK {clocks.hclk / MHZ:g} / "
                             f"PCLK2 {clocks.pclk2 / MHZ:g} MHz above {cpu_max / MHZ:g} / "
                             f"{apb_max / MHZ:g} ({datasheet})")
        return clocks

    def enable(self, what: str, on: bool, now: int) -> None:
        if on:
            self.started.setdefault(what, now)
        else:
            self.started.pop(what, None)


class F7Clocks(ClockTree):
    """STM32F746 (RM0385): HSE 25 MHz crystal -> main PLL -> 216 MHz with over-drive."""

    RCC = 0x40023800
    CR, PLLCFGR, CFGR = RCC + 0x00, RCC + 0x04, RCC + 0x08
    AHB1ENR, APB1ENR, APB2ENR, DCKCFGR2 = RCC + 0x30, RCC + 0x40, RCC + 0x44, RCC + 0x90
    PWR_CR1, PWR_CSR1 = 0x40007000, 0x40007004
    FLASH_ACR = 0x40023C00
    RESET = {CR: 0x00000083, PLLCFGR: 0x24003010, PWR_CR1: 0x0000C000}
    WINDOWS = ((RCC, 0x400), (PWR_CR1, 0x400), (FLASH_ACR, 0x400))
    WAIT_STATE_MHZ = 30  # table 5, 2.7-3.6 V: one more wait state per 30 MHz of HCLK
    MAXIMA = (216 * MHZ, 108 * MHZ, "DS10916")

    def __init__(self, hse_hz: int):
        super().__init__(hse_hz, 16 * MHZ)
        self.regs.update(self.RESET)
        self.started["HSI"] = -SETTLE_INSTRUCTIONS

    def read(self, addr: int, now: int) -> int:
        v = self.regs.get(addr, 0)
        if addr == self.CR:  # HSIRDY b1, HSERDY b17, PLLRDY b25
            v &= ~((1 << 1) | (1 << 17) | (1 << 25))
            for name, flag in (("HSI", 1), ("HSE", 17), ("PLL", 25)):
                v |= (1 << flag) if self.ready(name, now) else 0
        elif addr == self.CFGR:  # SWS (3:2) mirrors the switch once it happened
            v = (v & ~(3 << 2)) | (bits(v, 0, 2) << 2)
        elif addr == self.PWR_CSR1:  # ODRDY b16, ODSWRDY b17; VOSRDY b14
            cr1 = self.regs[self.PWR_CR1]
            v = (1 << 14) | (cr1 & (1 << 16)) | (cr1 & (1 << 17))
        return v

    def write(self, addr: int, value: int, now: int) -> None:
        if addr == self.CR:
            self.enable("HSE", bool(value & (1 << 16)), now)
            if value & (1 << 24) and not self.regs.get(addr, 0) & (1 << 24):
                self.pll_output()  # refuses a configuration outside the ranges
            self.enable("PLL", bool(value & (1 << 24)), now)
        elif addr == self.CFGR:
            self.regs[addr] = value
            self._check_switch(now)
            return
        self.regs[addr] = value

    def pll_output(self) -> int:
        """The main PLL's P output (RCC_PLLCFGR PLLP 17:16)."""
        return int(self.vco() // (2 * (bits(self.regs[self.PLLCFGR], 16, 2) + 1)))

    def vco(self) -> float:
        """The main PLL's VCO (RCC_PLLCFGR: PLLM 5:0, PLLN 14:6, PLLSRC 22); RM0385 5.3.2: VCO
        input 1-2 MHz, VCO output 100-432 MHz, N 50-432."""
        cfg = self.regs[self.PLLCFGR]
        m, n = bits(cfg, 0, 6), bits(cfg, 6, 9)
        source = self.hse_hz if cfg & (1 << 22) else self.hsi_hz
        if m < 2 or not 50 <= n <= 432:
            raise BoardFault(f"RCC_PLLCFGR 0x{cfg:08x}: PLLM {m} / PLLN {n} outside 2..63 / "
                             "50..432 (RM0385 5.3.2)")
        vco_in, vco = source / m, source / m * n
        if not 1 * MHZ <= vco_in <= 2 * MHZ or not 100 * MHZ <= vco <= 432 * MHZ:
            raise BoardFault(f"RCC_PLLCFGR 0x{cfg:08x}: VCO input {vco_in / MHZ:g} MHz (1-2) "
                             f"or output {vco / MHZ:g} MHz (100-432) out of range (RM0385 "
                             "5.3.2)")
        return vco

    def sdmmc_kernel(self, now: int) -> int:
        """SDMMC1's kernel clock SDMMCCLK (RM0385 5.3.26 RCC_DCKCFGR2: SDMMC1SEL bit 28 = 1
        SYSCLK; 0 the 48 MHz clock, which CK48MSEL bit 27 = 0 makes PLL48CLK = VCO / PLLQ,
        RCC_PLLCFGR 27:24, at most 48 MHz: DS10916)."""
        dck, cfg = self.regs.get(self.DCKCFGR2, 0), self.regs[self.PLLCFGR]
        if dck & (1 << 28):
            return self.clocks().sysclk
        if dck & (1 << 27):
            raise BoardFault("SDMMC1 clocked from PLLSAI's P output (RCC_DCKCFGR2 CK48MSEL = "
                             "1), which this model does not run")
        q = bits(cfg, 24, 4)
        if not self.ready("PLL", now) or q < 2:
            raise BoardFault(f"SDMMC1 clocked from PLL48CLK (RCC_DCKCFGR2 SDMMC1SEL = 0) with "
                             f"the main PLL not ready or PLLQ {q} (RM0385 5.3.2, 5.3.26)")
        hz = int(self.vco() // q)
        if hz > 48 * MHZ:
            raise BoardFault(f"PLL48CLK {hz / MHZ:g} MHz (PLLQ {q}) above 48 MHz (DS10916)")
        return hz

    def _check_switch(self, now: int) -> None:
        clocks = self.switched(bits(self.regs[self.CFGR], 0, 2), {0: "HSI", 1: "HSE", 2: "PLL"},
                               "RM0385 5.3.3, 3.3.2 table 5", now)
        csr = self.read(self.PWR_CSR1, now)
        if clocks.hclk > 180 * MHZ and (csr & 0x30000) != 0x30000:
            raise BoardFault(f"HCLK {clocks.hclk / MHZ:g} MHz without over-drive ready "
                             "(PWR_CSR1 ODRDY/ODSWRDY; RM0385 4.1.4)")

    def clocks(self) -> Clocks:
        cfg = self.regs.get(self.CFGR, 0)
        sysclk = {0: self.hsi_hz, 1: self.hse_hz}.get(bits(cfg, 0, 2)) or self.pll_output()
        hpre = bits(cfg, 4, 4)
        hclk = sysclk >> (0 if hpre < 8 else [1, 2, 3, 4, 6, 7, 8, 9][hpre - 8])
        ppre2 = bits(cfg, 13, 3)
        pclk2 = hclk >> (0 if ppre2 < 4 else ppre2 - 3)
        usart_sel = bits(self.regs.get(self.DCKCFGR2, 0), 0, 2)  # USART1SEL
        usart = {0: pclk2, 1: sysclk, 2: self.hsi_hz, 3: 32768}[usart_sel]
        return Clocks(sysclk, hclk, pclk2, usart)

    def clocked(self, peripheral: str) -> bool:
        """RCC enable bits of the peripherals the firmware uses (RM0385 5.3.10 GPIOxEN bits
        0-10, 5.3.13, 5.3.14)."""
        where = (self.AHB1ENR, GPIO_PORTS.index(peripheral[4])) if peripheral.startswith(
            "GPIO") else {"USART1": (self.APB2ENR, 4), "SDMMC1": (self.APB2ENR, 11),
                          "PWR": (self.APB1ENR, 28)}[peripheral]
        return bool(self.regs.get(where[0], 0) & (1 << where[1]))


class H7Clocks(ClockTree):
    """STM32H7B3 (RM0455): direct SMPS, VOS0, HSE 24 MHz -> PLL1 -> 280 MHz."""

    RCC = 0x58024400
    CR, CFGR, CDCFGR1, CDCFGR2 = RCC + 0x000, RCC + 0x010, RCC + 0x018, RCC + 0x01C
    PLLCKSELR, PLLCFGR, PLL1DIVR = RCC + 0x028, RCC + 0x02C, RCC + 0x030
    CDCCIPR, CDCCIP2R, AHB3ENR, AHB4ENR, APB2ENR = (RCC + 0x04C, RCC + 0x054, RCC + 0x0D4,
                                                     RCC + 0x0E0, RCC + 0x0F0)
    PWR_CSR1, PWR_CR3, PWR_SRDCR = 0x58024804, 0x5802480C, 0x58024818
    FLASH_ACR = 0x52002000
    RESET = {CR: 0x00000025, PLLCKSELR: 0x02020200, PLLCFGR: 0x01FF0000,
             PLL1DIVR: 0x01010280, PLL1DIVR + 8: 0x01010280, PWR_CR3: 0x00000006,
             PWR_SRDCR: 0x00004000, FLASH_ACR: 0x00000013}  # PLL1DIVR + 8: RCC_PLL2DIVR
    WINDOWS = ((RCC, 0x400), (0x58024800, 0x400), (FLASH_ACR, 0x1000))
    WAIT_STATE_MHZ = 42  # VOS0: 0 wait states up to 42 MHz, ..., 6 up to 280 MHz
    MAXIMA = (280 * MHZ, 140 * MHZ, "DS13139")

    def __init__(self, hse_hz: int):
        super().__init__(hse_hz, 64 * MHZ)
        self.regs.update(self.RESET)
        self.started["HSI"] = -SETTLE_INSTRUCTIONS
        self.cr3_written = False

    def read(self, addr: int, now: int) -> int:
        v = self.regs.get(addr, 0)
        if addr == self.CR:  # HSIRDY b2, HSERDY b17, PLL1RDY b25, PLL2RDY b27
            v &= ~((1 << 2) | (1 << 17) | (1 << 25) | (1 << 27))
            for name, flag in (("HSI", 2), ("HSE", 17), ("PLL", 25), ("PLL2", 27)):
                v |= (1 << flag) if self.ready(name, now) else 0
        elif addr == self.CFGR:  # SWS (5:3) mirrors SW (2:0)
            v = (v & ~(7 << 3)) | (bits(v, 0, 3) << 3)
        elif addr in (self.PWR_CSR1, self.PWR_SRDCR):  # ACTVOSRDY / VOSRDY (b13)
            v |= 1 << 13
        return v

    def write(self, addr: int, value: int, now: int) -> None:
        if addr == self.PWR_CR3:
            if self.cr3_written and value != self.regs[addr]:
                return  # write-once per power-on (RM0455 PWR_CR3): later writes are ignored
            self.cr3_written = True
        if addr == self.CR:
            self.enable("HSE", bool(value & (1 << 16)), now)
            for n, on in ((1, 24), (2, 26)):  # PLL1ON, PLL2ON: refuse a bad configuration
                if value & (1 << on) and not self.regs.get(addr, 0) & (1 << on):
                    self.vco(n)
                self.enable("PLL" if n == 1 else "PLL2", bool(value & (1 << on)), now)
        self.regs[addr] = value
        if addr == self.CFGR:
            self._check_switch(now)

    def pll_output(self) -> int:
        """PLL1's P output (RCC_PLL1DIVR DIVP1 15:9)."""
        return int(self.vco(1) // (bits(self.regs[self.PLL1DIVR], 9, 7) + 1))

    def vco(self, n: int) -> float:
        """PLLn's VCO (RCC_PLLCKSELR PLLSRC 1:0, DIVMn at 4 + 8 (n - 1); RCC_PLLnDIVR DIVNn
        8:0, at 0x30 + 8 (n - 1); RCC_PLLCFGR PLLnRGE at 2 + 4 (n - 1)): RM0455, wide VCO
        128-560 MHz, DIVNn 8..420 (+1), reference within PLLnRGE's range."""
        sel, cfg = self.regs[self.PLLCKSELR], self.regs[self.PLLCFGR]
        div = self.regs[self.PLL1DIVR + 8 * (n - 1)]
        source = {0: self.hsi_hz, 1: 4 * MHZ, 2: self.hse_hz}.get(bits(sel, 0, 2), 0)
        m, dn = bits(sel, 4 + 8 * (n - 1), 6), bits(div, 0, 9) + 1
        if m == 0 or source == 0:
            raise BoardFault(f"RCC_PLLCKSELR 0x{sel:08x}: PLL{n} has no reference (DIVM{n} 0 "
                             "or no source)")
        ref, rge = source / m, bits(cfg, 2 + 4 * (n - 1), 2)
        low, high = [(1, 2), (2, 4), (4, 8), (8, 16)][rge]
        if not low * MHZ <= ref <= high * MHZ:
            raise BoardFault(f"PLL{n} reference {ref / MHZ:g} MHz outside PLL{n}RGE {rge}'s "
                             f"{low}-{high} MHz (RM0455 RCC_PLLCFGR)")
        vco = ref * dn
        if not 8 <= dn <= 420 or not 128 * MHZ <= vco <= 560 * MHZ:
            raise BoardFault(f"RCC_PLL{n}DIVR 0x{div:08x}: DIVN{n} {dn} / VCO {vco / MHZ:g} MHz "
                             f"outside 8..420 / 128-560 MHz (RM0455 RCC PLL{n})")
        return vco

    def sdmmc_kernel(self, now: int) -> int:
        """SDMMC1's kernel clock (RM0455 RCC_CDCCIPR SDMMCSEL bit 16: 0 pll1_q_ck, DIVQ1 22:16
        enabled by DIVQ1EN 17; 1 pll2_r_ck, DIVR2 30:24 enabled by DIVR2EN 21)."""
        n = 2 if self.regs.get(self.CDCCIPR, 0) & (1 << 16) else 1
        output, enable, shift = ("pll2_r_ck", 21, 24) if n == 2 else ("pll1_q_ck", 17, 16)
        if not self.ready("PLL2" if n == 2 else "PLL", now) or not self.regs[
                self.PLLCFGR] & (1 << enable):
            raise BoardFault(f"SDMMC1 clocked from {output} (RCC_CDCCIPR SDMMCSEL {n - 1}) with "
                             f"PLL{n} not ready or its output not enabled (RCC_PLLCFGR bit "
                             f"{enable}; RM0455 RCC)")
        return int(self.vco(n) // (bits(self.regs[self.PLL1DIVR + 8 * (n - 1)], shift, 7) + 1))

    def _check_switch(self, now: int) -> None:
        clocks = self.switched(bits(self.regs[self.CFGR], 0, 3), {0: "HSI", 2: "HSE", 3: "PLL"},
                               "RM0455 RCC_CFGR, FLASH at VOS0", now)
        if clocks.sysclk > 225 * MHZ and bits(self.regs[self.PWR_SRDCR], 14, 2) != 3:
            raise BoardFault(f"sys_ck {clocks.sysclk / MHZ:g} MHz needs VOS0 (PWR_SRDCR VOS "
                             "= 11; DS13139)")

    def clocks(self) -> Clocks:
        sw = bits(self.regs.get(self.CFGR, 0), 0, 3)
        sysclk = {0: self.hsi_hz, 2: self.hse_hz}.get(sw) or self.pll_output()
        cdpre, hpre = bits(self.regs.get(self.CDCFGR1, 0), 8, 4), bits(
            self.regs.get(self.CDCFGR1, 0), 0, 4)
        shift = [0] * 8 + [1, 2, 3, 4, 6, 7, 8, 9]
        hclk = sysclk >> shift[cdpre] >> shift[hpre]
        ppre2 = bits(self.regs.get(self.CDCFGR2, 0), 8, 3)
        pclk2 = hclk >> (0 if ppre2 < 4 else ppre2 - 3)
        usart_sel = bits(self.regs.get(self.CDCCIP2R, 0), 3, 3)  # USART16910SEL
        usart = {0: pclk2, 3: self.hsi_hz}.get(usart_sel, 0)
        return Clocks(sysclk, hclk, pclk2, usart)

    def clocked(self, peripheral: str) -> bool:
        """RCC enable bits (RM0455: RCC_AHB4ENR GPIOxEN bits 0-10, RCC_AHB3ENR SDMMC1EN 16,
        RCC_APB2ENR USART1EN 4)."""
        where = (self.AHB4ENR, GPIO_PORTS.index(peripheral[4])) if peripheral.startswith(
            "GPIO") else {"USART1": (self.APB2ENR, 4), "SDMMC1": (self.AHB3ENR, 16)}.get(
            peripheral)
        return where is None or bool(self.regs.get(where[0], 0) & (1 << where[1]))
