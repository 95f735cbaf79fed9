"""The SD card path (issue 50): the SDMMC1 driver of both boards (targets/common/blockdev_sdmmc.c
with targets/<board>/sdmmc_board.h, docs/sdcard.md "The driver") on the emulated boards' SD card
(host/emulator/sdmmc.py and sdcard.py, docs/emulated.md "The SD card").

The firmware is tests/data/sdcard_main.c, built with the boards' own flags (platform.mk:
-Wall -Wextra, not one warning) and driven by text lines on USART1: what it reads equals the
card's file, what it writes lands in the file, every injected fault ends the call with its
named status and never hangs, an absent card is refused, and a power cut leaves a torn write.
The card and interface models are also tested alone, register by register. Last, the field
trainer (`build --data-source sdcard`, tests/test_field.py) runs on both emulated boards from the image
on the emulated card and ends as `simulate` does, also after power cuts."""
from __future__ import annotations

import random
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from test_field import GUARDED, MODEL, SPARSE, _card, _expected, _pack, area_of
from test_stm32_targets import REPO, build, write_project
from zocodegen.formats import status
from zocodegen.host.emulator.clocks import BoardFault, F7Clocks, H7Clocks
from zocodegen.host.emulator.machine import BOARDS, POWER_CUT_STATUS, Board, Report
from zocodegen.host.emulator.sdcard import (IDENT, OCR_BUSY, OCR_CCS, READY, SECTOR, STBY,
                                            TRAN, Faults, SDCard)
from zocodegen.projects import cached_build
from zocodegen.host.emulator.sdmmc import (ARG, CLKCR, CMD, CMDREND, CTIMEOUT, DCTRL, DLEN, FIFO,
                                           ICR, POWER, STA, SDMMC)
from zocodegen.target import target_data
from zocodegen.training.config import TrainConfig

SECTORS = 40  # the card file: a capacity of 1024 sectors (SDHC) or exactly 40 (SDSC)
LIMIT = 30_000_000  # instructions: a run that needs more has hung


def code(name: str) -> int:
    return status.code(name)


@pytest.fixture(scope="module")
def firmware(tmp_path_factory) -> dict[str, Path]:
    """tests/data/sdcard_main.c with the SD driver, laid out as a `--data-source sdcard` project lays
    the board files out (src/platform/<board>/), compiled with platform.mk's flags."""
    if shutil.which("arm-none-eabi-gcc") is None or shutil.which("make") is None:
        pytest.skip("needs arm-none-eabi-gcc and make")
    elves = {}
    for board in BOARDS:
        root = write_project(tmp_path_factory.mktemp(board), board)
        platform = root / "src" / "platform" / board
        shutil.copy(REPO / "targets" / "common" / "blockdev_sdmmc.c", platform)
        shutil.copy(REPO / "targets" / board / "sdmmc_board.h", platform)
        for header in ("templates/train/zo_blockdev.h", "templates/link/zo_crc32.h"):
            shutil.copy(REPO / header, root / "include")
        (root / "include" / "zo_status.h").write_text(status.c_header(sdcard=True))
        shutil.copy(REPO / "templates" / "link" / "zo_crc32.c", root / "src")
        shutil.copy(REPO / "tests" / "data" / "sdcard_main.c", root / "src" / "main.c")
        makefile = root / "Makefile"
        makefile.write_text(makefile.read_text().replace(
            "src/main.c $(FW_SRCS)",
            f"src/main.c src/zo_crc32.c src/platform/{board}/blockdev_sdmmc.c $(FW_SRCS)"))
        elves[board] = build(root)  # asserts that the compiler said nothing
    return elves


class Script:
    """USART1's far end: the command lines up front, then the host is gone."""

    def __init__(self, lines: list[str]):
        self.pending, self.out = "".join(f"{line}\n" for line in lines).encode(), bytearray()

    def receive(self, seconds: float) -> bytes | None:
        data, self.pending = self.pending, b""
        return data or None

    def send(self, data: bytes) -> None:
        self.out += data


def run(elf: Path, board: str, lines: list[str], card: SDCard | None) -> tuple[Report, list[str]]:
    """The firmware's answers to ``lines`` (after its banner), the run ending with Q 0."""
    script = Script([*lines, "Q 0"])
    report = Board(board, elf, script, card=card).run(max_instructions=LIMIT)
    answers = script.out.decode().splitlines()
    assert answers[0] == "SD", answers
    return report, answers[1:]


def card_file(tmp_path: Path, seed: int = 1) -> Path:
    path = tmp_path / "card.img"
    path.write_bytes(random.Random(seed).randbytes(SECTORS * SECTOR))
    return path


def crc(data: bytes, lba: int, count: int) -> str:
    chunk = data[lba * SECTOR:(lba + count) * SECTOR]
    return f"{zlib.crc32(chunk.ljust(count * SECTOR, bytes(1))):08x}"


def pattern(seed: int, count: int) -> bytes:
    """What sdcard_main.c writes for W ... seed."""
    return bytes((seed + 7 * i + i // SECTOR) & 0xFF for i in range(count * SECTOR))


# ---- the firmware on the emulated boards -------------------------------------------------

@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("high_capacity", [True, False], ids=["sdhc", "sdsc"])
def test_reads_equal_the_file_and_writes_land_in_it(firmware, board, high_capacity, tmp_path):
    """SDHC (block addresses) and SDSC (byte addresses, CMD16): single and multiple sectors,
    the file's last sector, sectors past the file (a blank card reads zeros), a write read back,
    and sectors past the card refused with ZO_BLOCKDEV_ERR_RANGE before any command."""
    path = card_file(tmp_path)
    before = path.read_bytes()
    card = SDCard(path, high_capacity=high_capacity)
    end = card.sectors
    report, answers = run(firmware[board], board, [
        "A", "R 0 1", "R 3 8", f"R {SECTORS - 1} 1", "W 10 3 77", "R 10 3", f"R {end - 1} 1",
        f"R {end} 1", f"R {end - 2} 3", f"W {end} 1 5"], card)
    after = path.read_bytes()
    rng = code("ZO_BLOCKDEV_ERR_RANGE")
    assert report.status == 0, report.fault
    assert answers[:3] == ["A 0", f"R 0 {crc(before, 0, 1)}", f"R 0 {crc(before, 3, 8)}"]
    assert answers[3:6] == [f"R 0 {crc(before, SECTORS - 1, 1)}", "W 0",
                            f"R 0 {crc(pattern(77, 3), 0, 3)}"]
    assert answers[6] == f"R 0 {crc(after, end - 1, 1)}"
    assert [a.split()[:2] for a in answers[7:]] == [["R", str(rng)], ["R", str(rng)],
                                                    ["W", str(rng)]]
    assert after[10 * SECTOR:13 * SECTOR] == pattern(77, 3)
    assert after[:10 * SECTOR] + after[13 * SECTOR:] == before[:10 * SECTOR] + before[13 * SECTOR:]
    assert (16, SECTOR) in card.log if not high_capacity else 16 not in dict(card.log)
    assert (17, 3 * SECTOR if not high_capacity else 3) not in card.log  # R 3 8 is one CMD18
    assert (18, 3 * SECTOR if not high_capacity else 3) in card.log


def _first(card_log: list[tuple[int, int]], command: int) -> int:
    """The 1-based number of the first ``command`` in a clean run's log."""
    return next(i for i, (index, _) in enumerate(card_log, 1) if index == command)


LINES = ["A", "R 2 1", "R 4 3", "W 8 2 3", "R 8 2"]


@pytest.fixture(scope="module")
def clean_log(firmware, tmp_path_factory) -> list[tuple[int, int]]:
    """The commands LINES send to the card when nothing fails (the same on both boards)."""
    card = SDCard(card_file(tmp_path_factory.mktemp("clean")))
    report, answers = run(firmware["stm32f746"], "stm32f746", LINES, card)
    assert report.status == 0 and [a.split()[1] for a in answers] == ["0"] * len(LINES)
    return card.log


# (fault, the line that fails, its status); "first:N" = the first command N of a clean run
FAULTS = [("cmd-timeout:first:17", 1, "ZO_BLOCKDEV_ERR_TIMEOUT"),
          ("cmd-crc:first:18", 2, "ZO_BLOCKDEV_ERR_CRC"),
          ("cmd-timeout:first:8", 0, "ZO_BLOCKDEV_ERR_CARD"),   # no CMD8 answer: SD 1.x
          ("cmd-timeout:first:41", 0, "ZO_BLOCKDEV_ERR_TIMEOUT"),
          ("read-crc:1", 1, "ZO_BLOCKDEV_ERR_CRC"),
          ("read-crc:3", 2, "ZO_BLOCKDEV_ERR_CRC"),                # the middle of R 4 3
          ("read-timeout:4", 2, "ZO_BLOCKDEV_ERR_TIMEOUT"),
          ("write-crc:2", 3, "ZO_BLOCKDEV_ERR_CRC"),
          ("write-fail:1", 3, "ZO_BLOCKDEV_ERR_WRITE")]


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("fault, failing, name", FAULTS, ids=[f[0] for f in FAULTS])
def test_each_fault_gives_its_named_status(firmware, clean_log, board, fault, failing, name,
                                           tmp_path):
    """The call the fault hits returns its status; the run goes on (no hang), and a fault in a
    transfer leaves the card usable: the next lines succeed."""
    kind, _, where = fault.partition(":")
    if where.startswith("first:"):
        where = str(_first(clean_log, int(where.split(":")[1])))
    path = card_file(tmp_path)
    before = path.read_bytes()
    card = SDCard(path, faults=Faults.parse([f"{kind}:{where}"]))
    report, answers = run(firmware[board], board, LINES, card)
    assert report.status == 0, report.fault
    assert answers[failing].split()[1] == str(code(name)), answers
    later = answers[failing + 1:] if failing else []
    assert all(a.split()[1] == "0" for a in later), answers
    written = path.read_bytes()[8 * SECTOR:10 * SECTOR] == pattern(3, 2)
    if failing == 0:  # not attached: nothing was written
        assert path.read_bytes() == before
    else:  # a failed write did not reach the card whole; after a failed read it did
        assert written != kind.startswith("write")


@pytest.mark.parametrize("board", BOARDS)
def test_an_absent_card_is_refused_by_its_detect_switch(firmware, board):
    report, answers = run(firmware[board], board, ["A", "R 0 1", "W 0 1 1"], None)
    assert report.status == 0, report.fault
    assert [a.split()[:2] for a in answers] == [
        ["A", str(code("ZO_BLOCKDEV_ERR_NO_CARD"))],
        ["R", str(code("ZO_BLOCKDEV_ERR_NOT_ATTACHED"))],
        ["W", str(code("ZO_BLOCKDEV_ERR_NOT_ATTACHED"))]]


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("count, torn", [(1, None), (3, 700)], ids=["half-sector", "700-bytes"])
def test_a_power_cut_leaves_a_torn_write(firmware, board, count, torn, tmp_path):
    """The second write command is cut: its first bytes (by default half of it: the middle of
    a one-sector write) are on the card, the rest is what was there, the first write is whole,
    and the run stops with status 133."""
    path = card_file(tmp_path)
    before = path.read_bytes()
    card = SDCard(path, faults=Faults.parse([], f"2:{torn}" if torn else "2"))
    script = Script(["A", "W 1 1 4", f"W 20 {count} 9", "Q 0"])
    report = Board(board, firmware[board], script, card=card).run(max_instructions=LIMIT)
    card.close()
    after, keep = path.read_bytes(), torn or count * SECTOR // 2
    assert report.status == POWER_CUT_STATUS and "power cut during write 2" in report.power_cut
    assert script.out.decode().splitlines() == ["SD", "A 0", "W 0"]
    assert after[SECTOR:2 * SECTOR] == pattern(4, 1)
    new = pattern(9, count)
    assert after[20 * SECTOR:20 * SECTOR + keep] == new[:keep]
    assert after[20 * SECTOR + keep:] == before[20 * SECTOR + keep:]


def test_the_command_line_runs_a_card_with_faults(firmware, tmp_path):
    """python -m zocodegen.host.emulator --card FILE [--card-absent] [--card-fault]
    [--power-cut-at-write]: the CLI the field tests use."""
    path, elf = card_file(tmp_path), str(firmware["stm32f746"])
    base = [sys.executable, "-m", "zocodegen.host.emulator", "--board", "stm32f746"]

    def cli(*options: str) -> subprocess.CompletedProcess:
        return subprocess.run([*base, *options, elf], input=b"A\nR 0 1\nW 2 1 1\nQ 3\n",
                              capture_output=True, timeout=120)

    done = cli("--card", str(path), "--card-fault", "read-crc:1")
    lines = done.stdout.decode().splitlines()
    assert done.returncode == 3, done.stderr
    assert lines[1] == "A 0" and lines[2].startswith(f"R {code('ZO_BLOCKDEV_ERR_CRC')} ")
    done = cli("--card", str(path), "--card-absent")
    assert done.stdout.decode().splitlines()[1] == f"A {code('ZO_BLOCKDEV_ERR_NO_CARD')}"
    done = cli("--card", str(path), "--power-cut-at-write", "1:100")
    assert done.returncode == POWER_CUT_STATUS
    assert b"power cut during write 1 (LBA 2, 512 bytes): 100 bytes reached the card" in \
        done.stderr
    assert path.read_bytes()[2 * SECTOR:2 * SECTOR + 100] == pattern(1, 1)[:100]
    done = cli("--card", str(path), "--card-fault", "write-crc")
    assert done.returncode == 131 and b"KIND:N" in done.stderr


# ---- the card alone ------------------------------------------------------------------------

def _identified(tmp_path: Path, **options) -> tuple[SDCard, int]:
    """A card taken through CMD0, CMD8, ACMD41 (until ready), CMD2, CMD3, CMD7 and ACMD6, and
    the argument that addresses it (its RCA << 16)."""
    card = SDCard(card_file(tmp_path), **options)
    assert card.command(0, 0) is None
    assert card.command(8, 0x1AA).words[0] == 0x1AA  # R7 echoes the voltage and pattern
    for _ in range(3):
        assert card.command(55, 0).kind == "R1"
        ocr = card.command(41, 0x40FF8000)
    assert ocr.words[0] & OCR_BUSY and ocr.kind == "R3" and not ocr.crc_ok
    assert bool(ocr.words[0] & OCR_CCS) == options.get("high_capacity", True)
    assert card.state == READY and card.command(2, 0).long and card.state == IDENT
    rca = card.command(3, 0).words[0] >> 16
    assert card.state == STBY and card.command(7, rca << 16).kind == "R1b"
    card.command(55, rca << 16)
    assert card.command(6, 2).words[0] >> 9 & 0xF == TRAN and card.bus_width == 4
    return card, rca << 16


def test_the_card_identifies_as_the_specification_orders(tmp_path):
    card = SDCard(card_file(tmp_path))
    card.command(0, 0)
    card.command(55, 0)
    assert card.command(41, 0x40FF8000).words[0] & OCR_BUSY == 0  # still powering up
    assert card.command(2, 0) is None  # not ready yet: no answer ...
    assert card.command(55, 0).words[0] & (1 << 22)  # ... and ILLEGAL_COMMAND next
    assert card.command(55, 0).words[0] & (1 << 22) == 0  # reported once, then cleared
    sdhc = SDCard(card_file(tmp_path, 2))  # without CMD8 an SDHC card never powers up
    for _ in range(5):
        sdhc.command(55, 0)
        assert sdhc.command(41, 0x40FF8000).words[0] & OCR_BUSY == 0
    card, address = _identified(tmp_path)
    assert card.command(9, address) is None  # CSD only in stby


@pytest.mark.parametrize("high_capacity, sectors", [(True, 1024), (False, SECTORS)])
def test_the_csd_gives_the_capacity(tmp_path, high_capacity, sectors):
    card = SDCard(card_file(tmp_path), high_capacity=high_capacity)
    csd = card.csd
    if high_capacity:
        assert csd >> 126 == 1 and ((csd >> 48) & 0x3FFFFF) + 1 == sectors // 1024
    else:
        size, mult, bl_len = (csd >> 62) & 0xFFF, (csd >> 47) & 7, (csd >> 80) & 0xF
        assert csd >> 126 == 0 and (size + 1) << (mult + 2 + bl_len - 9) == sectors
    assert card.sectors == sectors


def test_busy_after_a_write_and_out_of_range(tmp_path):
    card, address = _identified(tmp_path)
    assert card.command(24, 3).kind == "R1" and card.receive_block(bytes(SECTOR)) is True
    states = [card.command(13, address).words[0] >> 9 & 0xF for _ in range(3)]
    assert states == [7, 7, TRAN]  # programming (prg, not READY_FOR_DATA), then tran
    assert card.command(17, card.sectors).words[0] & (1 << 31)  # OUT_OF_RANGE
    assert card.send_block() is None and card.state == TRAN


# ---- the interface model alone ------------------------------------------------------------

def _f7_sdmmc(card: SDCard | None, pll: bool = True) -> tuple[SDMMC, dict[int, int]]:
    """SDMMC1 of the F746 with the main PLL locked (PLL48CLK 48 MHz) and the pins on AF12."""
    clocks = F7Clocks(25_000_000)
    if pll:
        clocks.write(F7Clocks.PLLCFGR, 25 | 432 << 6 | 1 << 22 | 9 << 24, 0)
        clocks.write(F7Clocks.CR, (1 << 16) | (1 << 24), 0)
    regs: dict[int, int] = {}
    facts = target_data("stm32f746")["sdmmc"]
    sdmmc = SDMMC(facts, clocks, regs, 0x40020000, card, lambda: 1000)
    for port, pins in ((0x40020800, range(8, 13)), (0x40020C00, [2])):
        for pin in pins:
            regs[port] = regs.get(port, 0) | 2 << (2 * pin)
            afr = port + (0x24 if pin >= 8 else 0x20)
            regs[afr] = regs.get(afr, 0) | 12 << (4 * (pin % 8))
    return sdmmc, regs


def _send(sdmmc: SDMMC, index: int, wait: int = 1, arg: int = 0) -> int:
    base = sdmmc.base
    sdmmc.write(base + ICR, 0xFFFFFFFF)
    sdmmc.write(base + ARG, arg)
    sdmmc.write(base + CMD, index | wait << 6 | 1 << 10)
    return sdmmc.read(base + STA)


def test_the_interface_refuses_what_the_silicon_would(tmp_path):
    sdmmc, regs = _f7_sdmmc(SDCard(card_file(tmp_path)))
    base = sdmmc.base
    with pytest.raises(BoardFault, match="not powered"):
        _send(sdmmc, 0, 0)
    sdmmc.write(base + POWER, 3)
    with pytest.raises(BoardFault, match="CLKEN = 0"):
        _send(sdmmc, 0, 0)
    sdmmc.write(base + CLKCR, 1 << 8)  # CLKDIV 0: 24 MHz while identifying
    with pytest.raises(BoardFault, match="24000 kHz .* at most 400 kHz while the card identif"):
        _send(sdmmc, 0, 0)
    sdmmc.write(base + CLKCR, 1 << 8 | 118)  # 48 MHz / 120 = 400 kHz
    regs[0x40020C20] = 0  # PD2 on AF0
    with pytest.raises(BoardFault, match="PD2 in GPIOD_MODER mode 2 .* AF0 \\(needs AF12\\)"):
        _send(sdmmc, 0, 0)
    regs[0x40020C20] = 12 << 8
    assert _send(sdmmc, 8, arg=0x1AA) & CMDREND and _send(sdmmc, 2) & CTIMEOUT  # CMD2 not in idle
    with pytest.raises(BoardFault, match="RXFIFOE"):
        sdmmc.read(base + FIFO)
    sdmmc.write(base + DLEN, 100)
    with pytest.raises(BoardFault, match="whole 512-byte blocks"):
        sdmmc.write(base + DCTRL, 1 | 2 | 9 << 4)
    with pytest.raises(BoardFault, match="no write transfer"):
        sdmmc.write(base + FIFO, 0)
    with pytest.raises(BoardFault, match="needs an input .* pull-up"):
        sdmmc.read(sdmmc.detect_idr)
    regs[0x4002080C] = 1 << 26  # PC13 input, pulled up: low with a card in
    assert sdmmc.read(sdmmc.detect_idr) & 1 << 13 == 0


def test_the_bus_width_must_be_the_cards(tmp_path):
    sdmmc, _ = _f7_sdmmc(_identified(tmp_path)[0])
    base = sdmmc.base
    sdmmc.write(base + POWER, 3)
    sdmmc.write(base + CLKCR, 1 << 8)  # 1-bit bus, the card is on 4
    sdmmc.write(base + DLEN, SECTOR)
    with pytest.raises(BoardFault, match="1-bit bus .* card set to 4 bits"):
        sdmmc.write(base + DCTRL, 1 | 2 | 9 << 4)


def test_the_kernel_clocks_of_both_boards():
    """F746: PLL48CLK needs the PLL locked; H7B3: pll2_r_ck needs PLL2 in range and locked."""
    sdmmc, _ = _f7_sdmmc(None, pll=False)
    with pytest.raises(BoardFault, match="PLL48CLK .* not ready"):
        sdmmc.clocks.sdmmc_kernel(1000)
    h7 = H7Clocks(24_000_000)
    h7.write(H7Clocks.CDCCIPR, 1 << 16, 0)
    with pytest.raises(BoardFault, match="pll2_r_ck .* PLL2 not ready"):
        h7.sdmmc_kernel(1000)
    h7.write(H7Clocks.PLLCKSELR, 2 | 12 << 12, 0)  # HSE / 12 = 2 MHz
    h7.write(H7Clocks.PLLCFGR, 0x01FF0000 | 1 << 6, 0)
    h7.write(H7Clocks.PLL1DIVR + 8, 450 - 1 | 3 << 24, 0)  # x450: VCO 900 MHz
    with pytest.raises(BoardFault, match="DIVN2 450 / VCO 900 MHz outside"):
        h7.write(H7Clocks.CR, 1 << 26, 0)
    h7.write(H7Clocks.PLL1DIVR + 8, 200 - 1 | 3 << 24, 0)
    h7.write(H7Clocks.CR, 1 << 26, 0)
    assert h7.sdmmc_kernel(1000) == 100_000_000  # VCO 400 MHz / DIVR2 4


# ---- the field trainer from the emulated card ------------------------------------------

class NoHost:
    """USART1 with no host on it: nothing arrives, what the trainer says is kept."""

    def __init__(self):
        self.out = bytearray()

    def receive(self, seconds: float) -> bytes:
        return b""

    def send(self, data: bytes) -> None:
        self.out += data


@pytest.fixture(scope="module")
def field_image(tmp_path_factory) -> tuple[Path, bytes, bytes | None]:
    """test_field.py's guarded image (new bests and rollbacks) and simulate's run and best."""
    tmp = tmp_path_factory.mktemp("field")
    image = _pack(tmp, "hard", True)
    run, best, _ = _expected(GUARDED, image, tmp)
    return image, run, best


@pytest.fixture(scope="module")
def sparse_field_image(tmp_path_factory) -> tuple[Path, bytes, bytes | None]:
    """test_field.py's sparse run (the block chosen on the device, the guard on) and
    simulate's run and best."""
    tmp = tmp_path_factory.mktemp("sparse")
    image = _pack(tmp, "plain", False)
    run, best, _ = _expected(SPARSE, image, tmp)
    return image, run, best


def _field_boot(board: str, card_path: Path, faults: Faults | None = None,
                config: TrainConfig = GUARDED) -> tuple[Report, str]:
    """One power-up of the board's field trainer on the emulated card, no host attached."""
    elf = cached_build(MODEL, "emulated", emulate=board, train=config, data_source="sdcard")
    card, line = SDCard(card_path, faults=faults), NoHost()
    try:
        report = Board(board, elf, line, card=card).run(max_instructions=400_000_000)
    finally:
        card.close()
    return report, line.out.decode(errors="replace")


@pytest.mark.slow
@pytest.mark.usefixtures("module_build_cache")
@pytest.mark.parametrize("board, mode", [(b, m) for b in BOARDS for m in ("full", "sparse")])
def test_a_field_run_from_the_emulated_card_ends_as_simulate(board, mode, request, tmp_path):
    """The board's own `--data-source sdcard` firmware, its image on the emulated card through
    the SDMMC1 driver, no host: 20 guarded steps (full: new bests and rollbacks; sparse: the
    block chosen on the board) end with simulate's checkpoint and best, byte for byte (about
    156 M instructions, 30 s a board)."""
    config = SPARSE if mode == "sparse" else GUARDED
    image, run, best = request.getfixturevalue("sparse_field_image" if mode == "sparse"
                                               else "field_image")
    card = _card(image, tmp_path)
    report, out = _field_boot(board, card, config=config)
    assert report.status == 0, (report.fault, out[-2000:])
    assert out.splitlines()[-1].startswith("field: end: complete: 20 steps"), out[-500:]
    area = area_of(card)
    assert (area.run, area.best) == (run, best)


@pytest.mark.slow
@pytest.mark.usefixtures("module_build_cache")
def test_power_cuts_on_the_emulated_card_resume_to_the_same_end(field_image, tmp_path):
    """Power cut during random writes (a torn prefix of each on the card), then power up
    again: each boot resumes from the last good slot and the run ends as simulate's."""
    image, run, best = field_image
    card, rng, cuts = _card(image, tmp_path), random.Random(50), 0
    for _ in range(8):
        at = rng.randint(1, 40)
        report, out = _field_boot("stm32f746", card, Faults.parse(
            [], f"{at}:{rng.randint(0, SECTOR)}"))
        if report.status != POWER_CUT_STATUS:
            break
        cuts += 1
    else:
        report, out = _field_boot("stm32f746", card)
    assert cuts >= 3 and report.status == 0, (cuts, report.fault, out[-2000:])
    assert "field: end: complete: 20 steps" in out
    area = area_of(card)
    assert (area.run, area.best) == (run, best)
