"""QEMU mps2-an500 board support (qemu/board/) and the runner (zocodegen.qemu.runner).

Builds tests/data/qemu_board_main.c, a fake model behind the harness protocol of
docs/firmware.md, with the board's platform.mk, startup, platform and rendered linker
script laid out as in a generated project, then runs it under QEMU: banner, binary round
trips with every byte value, cycle counts, exit status, faults, and RAM overflow at link.
"""
from __future__ import annotations

import random
import re
import shutil
import struct
import subprocess
from pathlib import Path

import jinja2
import pytest

from zocodegen.errors import UserError
from zocodegen.qemu import runner

REPO = Path(__file__).resolve().parents[1]
MAIN_C = REPO / "tests" / "data" / "qemu_board_main.c"
BOARD = runner.BOARD_DIR

FLASH_BYTES = 1048576
RAM_BYTES = 262144            # stm32f746's budget
STACK_BYTES = 8192
IO_BYTES = 300                # ZO_TEST_IO_BYTES in the test firmware
FAULT_STATUS = runner.FAULT_EXIT_BASE + 3   # HardFault
TIMEOUT = 30.0                # generous: the CI machine has 2 shared cores

needs_gcc = pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None or shutil.which("make") is None,
    reason="arm-none-eabi-gcc or make is missing "
           "(sudo apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi make)")
needs_qemu = pytest.mark.skipif(
    runner.find_qemu() is None,
    reason=f"qemu-system-arm is missing ({runner.APT_INSTALL})")

PROJECT_MAKEFILE = """\
include src/platform/qemu/platform.mk
ELF ?= build/firmware.elf
SRCS := src/main.c $(QEMU_SRCS)
$(ELF): $(SRCS) $(QEMU_LDSCRIPT)
\t@mkdir -p $(dir $@)
\t$(QEMU_CC) $(QEMU_CFLAGS) $(EXTRA_CFLAGS) $(QEMU_LDFLAGS) $(SRCS) $(QEMU_LDLIBS) -o $@
"""


def render_ld(**variables) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(BOARD)),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.get_template("mps2_an500.ld.j2").render(**variables)


def make_project(root: Path, ram_bytes: int = RAM_BYTES) -> Path:
    """The generated-project layout: include/platform.h, src/platform/qemu/*, src/main.c."""
    qdir = root / "src" / "platform" / "qemu"
    qdir.mkdir(parents=True)
    (root / "include").mkdir()
    shutil.copy(BOARD.parents[1] / "templates" / "project" / "platform.h",
                root / "include" / "platform.h")
    shutil.copy(BOARD.parents[1] / "templates" / "link" / "zo_bytes.h",
                root / "include" / "zo_bytes.h")
    for name in ("startup_mps2.c", "platform_mps2.c", "platform.mk"):
        shutil.copy(BOARD / name, qdir / name)
    (qdir / "mps2_an500.ld").write_text(render_ld(flash_bytes=FLASH_BYTES, ram_bytes=ram_bytes,
                                                  stack_bytes=STACK_BYTES))
    shutil.copy(MAIN_C, root / "src" / "main.c")
    (root / "Makefile").write_text(PROJECT_MAKEFILE)
    return root


def build(root: Path, name: str, *cflags: str) -> subprocess.CompletedProcess:
    cflags = ("-Werror", "-Wpedantic") + cflags
    return subprocess.run(["make", "-s", "-C", str(root), f"ELF=build/{name}.elf",
                           "EXTRA_CFLAGS=" + " ".join(cflags)],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return make_project(tmp_path_factory.mktemp("qemu_board"))


@pytest.fixture(scope="module")
def firmware(project) -> Path:
    done = build(project, "firmware")
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", f"the build must be warning-free:\n{done.stderr}"
    return project / "build" / "firmware.elf"


def u32(data: bytes) -> int:
    return struct.unpack("<I", data)[0]


def round_trip(session: runner.QemuSession, payload: bytes) -> tuple[bytes, int]:
    session.write(b"I" + payload)
    reply = session.read(1 + IO_BYTES + 4)
    assert reply[:1] == b"O"
    return reply[1:1 + IO_BYTES], u32(reply[-4:])


def expected(payload: bytes) -> bytes:
    return bytes(b ^ 0x5A for b in payload)


def open_session(elf: Path, icount: bool = True) -> runner.QemuSession:
    session = runner.QemuSession(elf, icount=icount, timeout=TIMEOUT)
    banner = session.read(12)
    assert banner == b"ZOCG" + struct.pack("<II", IO_BYTES, IO_BYTES), banner
    return session


# ---- no toolchain needed --------------------------------------------------------------

def test_linker_script_renders_the_target_budget():
    text = render_ld(flash_bytes=2097152, ram_bytes=1048576, stack_bytes=4096)
    assert re.search(r"FLASH \(rx\)\s*: ORIGIN = 0x00000000, LENGTH = 2097152", text)
    assert re.search(r"RAM\s+\(rwx\)\s*: ORIGIN = 0x20000000, LENGTH = 1048576", text)
    assert "ZO_STACK_BYTES = 4096;" in text
    for section in (".isr_vector", ".text", ".rodata", ".data", ".bss",
                    ".zo_arena (NOLOAD)", ".stack (NOLOAD)"):
        assert section in text
    for symbol in ("_sidata", "_sdata", "_edata", "_sbss", "_ebss", "_estack"):
        assert re.search(rf"\b{symbol} = ", text), symbol
    with pytest.raises(jinja2.UndefinedError):
        render_ld(flash_bytes=1, ram_bytes=1)


def test_qemu_command_and_platform_mk_agree():
    elf = Path("/tmp/fw.elf")
    cmd = runner.qemu_command(elf)
    assert cmd[0] == "qemu-system-arm" and cmd[-2:] == ["-kernel", str(elf)]
    assert ["-M", "mps2-an500"] == cmd[1:3] and ["-cpu", "cortex-m7"] == cmd[3:5]
    assert "-icount" in cmd and "shift=0" in cmd
    assert "-icount" not in runner.qemu_command(elf, icount=False)
    chardev = cmd[cmd.index("-chardev") + 1]
    assert chardev.startswith("stdio,") and "mux=off" in chardev and "signal=off" in chardev
    assert "-nographic" not in cmd          # it would mux a monitor (Ctrl-A) onto stdio
    mk = (BOARD / "platform.mk").read_text().replace("\\\n", " ")
    flags = re.search(r"^QEMU_RUN_FLAGS\s*:=(.*)$", mk, re.M).group(1).split()
    assert flags == cmd[1:-2]


def test_require_qemu_says_how_to_install(monkeypatch):
    monkeypatch.setattr(runner.shutil, "which", lambda name: None)
    with pytest.raises(UserError, match="apt-get install qemu-system-arm"):
        runner.require_qemu()


# ---- toolchain ------------------------------------------------------------------------

@needs_gcc
def test_vector_table_at_flash_origin(firmware, tmp_path):
    image = tmp_path / "fw.bin"
    subprocess.run(["arm-none-eabi-objcopy", "-O", "binary", "-j", ".isr_vector",
                    str(firmware), str(image)], check=True)
    initial_sp, reset = struct.unpack("<II", image.read_bytes()[:8])
    assert 0x20000000 < initial_sp <= 0x20000000 + RAM_BYTES and initial_sp % 8 == 0
    assert reset & 1 and reset < FLASH_BYTES            # a Thumb address in flash


@needs_gcc
@pytest.mark.parametrize("define", ["-DZO_TEST_BIG_BSS=300000u",
                                    f"-DZO_TEST_ARENA_BYTES={RAM_BYTES}u"],
                         ids=["bss", "arena"])
def test_ram_overflow_does_not_link(project, define):
    done = build(project, "overflow", define)
    assert done.returncode != 0
    assert "region `RAM' overflowed" in done.stderr, done.stderr


@needs_gcc
def test_ram_budget_beyond_the_board_does_not_link(tmp_path):
    root = make_project(tmp_path, ram_bytes=8 * 1048576)
    done = build(root, "toobig")
    assert done.returncode != 0
    assert "ram_bytes exceeds the 4 MiB SRAM of mps2-an500" in done.stderr, done.stderr


# ---- toolchain + QEMU ---------------------------------------------------------------

@needs_gcc
@needs_qemu
def test_banner_and_binary_round_trips(firmware):
    rng = random.Random(1234)
    every_byte = bytes(range(256))
    payloads = [every_byte + bytes(rng.randrange(256) for _ in range(IO_BYTES - 256)),
                bytes(reversed(every_byte)) + bytes(IO_BYTES - 256),
                bytes(IO_BYTES), bytes([0xFF]) * IO_BYTES,
                bytes([0x01, 0x03, 0x04, 0x0A, 0x0D, 0x11, 0x13, 0x1A, 0x1C, 0x7F]) * 30]
    payloads += [bytes(rng.randrange(256) for _ in range(IO_BYTES))
                 for _ in range(20 - len(payloads))]
    with open_session(firmware) as session:
        for payload in payloads:
            payload = bytes([payload[0] & 0x07]) + payload[1:]   # keep the work small
            out, _ = round_trip(session, payload)
            assert out == expected(payload)
        # unknown commands, including terminal control characters, answer 'E'
        controls = bytes([0x00, 0x01, 0x03, 0x04, 0x0A, 0x0D, 0x1A, 0x1C, 0x7F, 0xFF])
        session.write(controls)
        assert session.read(len(controls)) == b"E" * len(controls)
        session.write(b"Q")
        assert session.wait() == 0


@needs_gcc
@needs_qemu
def test_run_elf_whole_stream_at_once(firmware):
    rng = random.Random(7)
    payloads = [bytes([3]) + bytes(range(1, 256)) + bytes(rng.randrange(256) for _ in range(44))
                for _ in range(3)]
    stream = b"".join(b"I" + p for p in payloads) + b"?Q"
    returncode, out = runner.run_elf(firmware, stream, timeout=TIMEOUT)
    assert returncode == 0
    frame = 1 + IO_BYTES + 4
    assert len(out) == 12 + 3 * frame + 1
    for i, payload in enumerate(payloads):
        reply = out[12 + i * frame: 12 + (i + 1) * frame]
        assert reply[:1] == b"O" and reply[1:1 + IO_BYTES] == expected(payload)
    assert out[-1:] == b"E"


@needs_gcc
@needs_qemu
def test_cycles_count_instructions(firmware):
    with open_session(firmware) as session:
        cycles = {}
        for first in (0, 9, 99):                    # the fake model does first+1 passes
            payload = bytes([first]) + bytes(range(IO_BYTES - 1 - 256)) + bytes(range(256))
            out, cycles[first + 1] = round_trip(session, payload)
            assert out == expected(payload)
            _, again = round_trip(session, payload)
            # same instructions; only the phase of the 40-instruction timer tick may differ
            # (host idle time advances virtual time under -icount sleep=on)
            assert abs(again - cycles[first + 1]) <= 40
        assert 0 < cycles[1] < cycles[10] < cycles[100]
        per_pass_small = (cycles[10] - cycles[1]) / 9
        per_pass_large = (cycles[100] - cycles[10]) / 90
        assert abs(per_pass_large - per_pass_small) <= 2 * 40 / 9   # timer resolution
        # a loop of exactly 2*n instructions reads 2*n, to the 40-instruction resolution
        for n in (1000, 1_000_000):
            session.write(b"L" + struct.pack("<I", n))
            reply = session.read(5)
            assert reply[:1] == b"L"
            assert abs(u32(reply[1:]) - 2 * n) <= 40, (n, u32(reply[1:]))
        session.write(b"Q")
        assert session.wait() == 0


@needs_gcc
@needs_qemu
def test_round_trips_without_icount(firmware):
    """Without -icount QEMU runs multi-threaded TCG and needs the other RX wake-up path."""
    rng = random.Random(99)
    with open_session(firmware, icount=False) as session:
        for _ in range(3):
            payload = bytes([0]) + bytes(rng.randrange(256) for _ in range(IO_BYTES - 1))
            out, _ = round_trip(session, payload)
            assert out == expected(payload)
        session.write(b"Q")
        assert session.wait() == 0


@needs_gcc
@needs_qemu
def test_platform_exit_status(firmware):
    returncode, out = runner.run_elf(firmware, b"X", timeout=TIMEOUT)
    assert returncode == 3
    assert out[:4] == b"ZOCG"


@needs_gcc
@needs_qemu
@pytest.mark.parametrize("command, register", [(b"F", "cfsr=0x00010000"),     # UNDEFINSTR
                                               (b"B", "bfar=0x30000000")],    # precise bus
                         ids=["undefined-instruction", "bus-error"])
def test_fault_exits_instead_of_hanging(firmware, command, register):
    done = subprocess.run(runner.qemu_command(firmware), input=command, capture_output=True,
                          timeout=TIMEOUT)
    assert done.returncode == FAULT_STATUS
    report = done.stderr.decode()
    assert "fatal exception 3 (HardFault)" in report and register in report, report
    assert done.stdout[:4] == b"ZOCG" and len(done.stdout) == 12   # nothing else on UART0
    assert "HardFault" in runner.describe_exit(done.returncode)
