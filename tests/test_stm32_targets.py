"""STM32 board support (targets/stm32f746, targets/stm32h7b3): the templates render, a minimal
harness firmware compiles and links with arm-none-eabi-gcc without a single warning using
platform.mk's flags, and the ELF has the layout docs/firmware.md promises (vector table at the
flash origin, reset vector in flash, stack in DTCM, .zo_arena in the region asked for, every
RAM section inside its region). The generated platformio.ini is checked with PlatformIO's own
config parser (PlatformIO cannot download its platform here), and the H7B3 board JSON is
checked as JSON. The clock trees (board.h clock_init()) are checked twice: the nominal plan's
arithmetic against the manuals' limits, and clock_init() itself, compiled for the host, against
a register model of each chip (sequence, ranges, maxima, flash latency, fallbacks)."""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import jinja2
import pytest

from zocodegen.formats.link import DEFAULT_BAUD
from zocodegen.target import usart_divisor

REPO = Path(__file__).resolve().parents[1]
TARGETS = ("stm32f746", "stm32h7b3")

HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None and shutil.which("make") is not None
needs_arm = pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and make (apt-get "
                               "install gcc-arm-none-eabi libnewlib-arm-none-eabi make)")
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")

FLASH = 0x08000000
STACK_BYTES = 8192
ARENA_BYTES = 4096

# Facts the tests hold the sources to (manual sections are in the sources' comments).
SPEC = {
    "stm32f746": dict(
        irqs=98,  # RM0385 vector table: positions 0..97
        reserved_irqs={79},  # CRYP, STM32F756 only
        usart1_irq=37,
        regions={"DTCM": (0x20000000, 64 << 10), "SRAM1": (0x20010000, 240 << 10),
                 "SRAM2": (0x2004C000, 16 << 10), "RAM": (0x20000000, 304 << 10)},
        default_region="RAM", fpu="fpv5-sp-d16", board="disco_f746ng", flash_bytes=1 << 20),
    "stm32h7b3": dict(
        irqs=155,  # RM0455 vector table: positions 0..154
        reserved_irqs={61, 62, 98, 99, 100, 101, 103, 104, 105, 106, 107, 108, 109, 114, 123,
                       126, 146, 148},
        usart1_irq=37,
        regions={"AXI_SRAM": (0x24000000, 1024 << 10), "DTCM": (0x20000000, 128 << 10)},
        default_region="AXI_SRAM", fpu="fpv5-d16", board="stm32h7b3i_dk", flash_bytes=2 << 20),
}
DTCM = 0x20000000


def target_info(target: str) -> dict:
    return json.loads((REPO / "targets" / target / "target.json").read_text())


def environment() -> jinja2.Environment:
    """The settings zocodegen's project renderer uses (StrictUndefined, trimmed blocks)."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(REPO)),
                              keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                              undefined=jinja2.StrictUndefined, autoescape=False)


def render(name: str, **context) -> str:
    return environment().get_template(name).render(**context)


def render_linker(target: str, arena_region=None, stack_bytes=STACK_BYTES) -> str:
    context = dict(target=target, target_info=target_info(target), stack_bytes=stack_bytes)
    if arena_region is not None:
        context["arena_region"] = arena_region
    return render(f"targets/{target}/{target}.ld.j2", **context)


MAIN_C = r"""
/* Harness stub (docs/firmware.md protocol): banner, then 'I' echoes the input back through
 * the arena with a cycle count, 'Q' exits, anything else answers 'E'. */
#include <stdint.h>
#include <string.h>

#include "platform.h"

#define ARENA_BYTES %(arena)du

static uint8_t arena[ARENA_BYTES] __attribute__((aligned(8), section(".zo_arena")));
uint32_t zo_test_data = 0x5EEDC0DEu;   /* .data: checked in the flash load image */
static uint8_t scratch[256];           /* .bss */

static void put_u32(uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    platform_write(b, 4);
}

int main(void)
{
    static const uint8_t magic[4] = {'Z', 'O', 'C', 'G'};
    platform_init();
    platform_write(magic, sizeof magic);
    put_u32(ARENA_BYTES);
    put_u32(ARENA_BYTES);
    for (;;) {
        uint8_t cmd;
        platform_read(&cmd, 1);
        if (cmd == 'I') {
            platform_read(arena, ARENA_BYTES);
            uint32_t t0 = platform_cycles();
            memcpy(scratch, arena, sizeof scratch);
            memset(arena, 0, sizeof scratch);
            memcpy(arena, scratch, sizeof scratch);
            zo_test_data++;
            uint32_t t1 = platform_cycles();
            platform_write((const uint8_t *)"O", 1);
            platform_write(arena, ARENA_BYTES);
            put_u32(t1 - t0);
        } else if (cmd == 'Q') {
            platform_exit(0);
        } else {
            platform_write((const uint8_t *)"E", 1);
        }
    }
}
"""

MAKEFILE = """\
include src/platform/%(t)s/platform.mk

build/firmware.elf: src/main.c $(FW_SRCS) src/platform/%(t)s/%(t)s.ld
\t@mkdir -p $(@D)
\t$(FW_CC) $(FW_CFLAGS) -Iinclude src/main.c $(FW_SRCS) $(FW_LDFLAGS) -o $@

print:
\t@echo 'FW_CC=$(FW_CC)'
\t@echo 'FW_CFLAGS=$(FW_CFLAGS)'
\t@echo 'FW_LDFLAGS=$(FW_LDFLAGS)'
\t@echo 'FW_SRCS=$(FW_SRCS)'
"""


def PLATFORM_FILES(target: str) -> tuple[str, ...]:  # noqa: N802 (a constant per target)
    """What the generator copies into src/platform/<target>/ besides the linker script."""
    return (f"targets/{target}/startup_{target}.c", f"targets/{target}/board.h",
            "targets/common/platform.mk.j2", "targets/common/platform_stm32.c",
            "targets/common/reset_cortex_m7.c", "targets/common/startup_cortex_m7.h")


def write_project(root: Path, target: str, arena_region=None, arena_bytes=ARENA_BYTES) -> Path:
    """A generated project's layout: include/, src/main.c, src/platform/<target>/, Makefile."""
    platform_dir = root / "src" / "platform" / target
    platform_dir.mkdir(parents=True)
    (root / "include").mkdir()
    shutil.copy(REPO / "templates" / "project" / "platform.h", root / "include" / "platform.h")
    (root / "include" / "firmware.h").write_text(f"#define FIRMWARE_BAUD {DEFAULT_BAUD}u\n")
    for name in PLATFORM_FILES(target):
        (platform_dir / name.rsplit("/", 1)[1].removesuffix(".j2")).write_text(
            render(name, target=target, target_info=target_info(target),
                   platform_dir=f"src/platform/{target}"))
    (platform_dir / f"{target}.ld").write_text(render_linker(target, arena_region))
    (root / "src" / "main.c").write_text(MAIN_C % {"arena": arena_bytes})
    (root / "Makefile").write_text(MAKEFILE % {"t": target})
    return root


def make(root: Path, *goals: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "-C", str(root), *goals], capture_output=True,
                          text=True, timeout=120)


def build(root: Path) -> Path:
    """Compile and link; -s silences make's echo, so any output is a compiler diagnostic."""
    result = make(root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (result.stdout + result.stderr).strip() == "", result.stdout + result.stderr
    return root / "build" / "firmware.elf"


def tool(name: str, *args) -> str:
    return subprocess.run([f"arm-none-eabi-{name}", *map(str, args)], capture_output=True,
                          text=True, check=True, timeout=60).stdout


def sections(elf: Path) -> dict[str, tuple[int, int]]:
    """name -> (address, size), from arm-none-eabi-size -A -d."""
    out = {}
    for line in tool("size", "-A", "-d", elf).splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].startswith(".") and parts[1].isdigit():
            out[parts[0]] = (int(parts[2]), int(parts[1]))
    return out


def symbols(elf: Path) -> dict[str, int]:
    out = {}
    for line in tool("nm", elf).splitlines():
        parts = line.split()
        if len(parts) == 3:
            out[parts[2]] = int(parts[0], 16)
    return out


def flash_image(elf: Path, tmp: Path) -> bytes:
    image = tmp / "image.bin"
    tool("objcopy", "-O", "binary", elf, image)
    return image.read_bytes()


def inside(addr: int, size: int, region: tuple[int, int]) -> bool:
    origin, length = region
    return origin <= addr and addr + size <= origin + length


# ---- templates ------------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_sources_pass_through_the_renderer_unchanged(target):
    """zocodegen renders every file of targets/<t>/ through Jinja: the C, make and Python
    sources must contain nothing Jinja would change."""
    for name in (n for n in PLATFORM_FILES(target) if not n.endswith(".j2")):
        raw = (REPO / name).read_text()
        assert render(name, target=target, target_info=target_info(target)) == raw, name


@pytest.mark.parametrize("target", TARGETS)
def test_linker_regions_match_target_json(target):
    script = render_linker(target)
    memory = {m.group(1): (int(m.group(2), 16), int(m.group(3)) * 1024) for m in re.finditer(
        r"^\s*(\w+)\s*\([rwx]+\)\s*:\s*ORIGIN\s*=\s*(0x[0-9A-Fa-f]+),\s*LENGTH\s*=\s*(\d+)K",
        script, re.M)}
    info = target_info(target)
    assert memory["FLASH"] == (int(info["flash"]["origin"], 16), info["flash"]["bytes"])
    for mem in info["memories"]:
        assert memory[mem["name"]] == (int(mem["origin"], 16), mem["bytes"]), mem["name"]
    assert {k: v for k, v in memory.items() if k != "FLASH"} == SPEC[target]["regions"]
    assert set(info["linker"]["arena_regions"]) == set(SPEC[target]["regions"])
    assert info["linker"]["default_arena_region"] == SPEC[target]["default_region"]
    for symbol in ("_sidata", "_sdata", "_edata", "_sbss", "_ebss", "_estack", "ZO_STACK_BYTES"):
        assert symbol in script
    for section in (".isr_vector", ".text", ".rodata", ".data", ".bss", ".zo_arena (NOLOAD)",
                    ".stack (NOLOAD)"):
        assert section in script
    assert f"ZO_STACK_BYTES = {STACK_BYTES};" in script


# ---- firmware -------------------------------------------------------------------------------

BUILDS = [("stm32f746", r) for r in ("DTCM", "SRAM1", "SRAM2", "RAM", "DTCM+SRAM1", None)] + \
         [("stm32h7b3", r) for r in ("AXI_SRAM", "DTCM", None)]


@needs_arm
@pytest.mark.parametrize("target,arena_region", BUILDS,
                         ids=[f"{t}-{r or 'default'}" for t, r in BUILDS])
def test_firmware_links_clean_with_documented_layout(tmp_path, target, arena_region):
    spec = SPEC[target]
    elf = build(write_project(tmp_path, target, arena_region))
    sec, sym = sections(elf), symbols(elf)
    flash = (FLASH, spec["flash_bytes"])
    region_name = {None: spec["default_region"], "DTCM+SRAM1": "RAM"}.get(arena_region,
                                                                          arena_region)
    region = spec["regions"][region_name]

    # Vector table: at the flash origin, 16 core words + one per device interrupt position.
    assert sec[".isr_vector"] == (FLASH, 4 * (16 + spec["irqs"]))
    assert sym["zo_vector_table"] == FLASH
    image = flash_image(elf, tmp_path)
    words = struct.unpack_from(f"<{16 + spec['irqs']}I", image, 0)
    # Initial SP: top of the stack, in DTCM, 8-byte aligned; the stack starts DTCM.
    assert words[0] == sym["_estack"]
    assert sym["_sstack"] == DTCM and sym["_estack"] - sym["_sstack"] == STACK_BYTES
    assert inside(sym["_sstack"], STACK_BYTES, spec["regions"]["DTCM"])
    assert words[0] % 8 == 0
    # Reset vector: Thumb address of Reset_Handler, in flash.
    assert words[1] == sym["Reset_Handler"] | 1
    assert inside(words[1] & ~1, 2, flash)
    reserved = {7, 8, 9, 10, 13} | {16 + n for n in spec["reserved_irqs"]}
    for index, word in enumerate(words[1:], start=1):
        if index in reserved:
            assert word == 0, index
        else:
            assert word & 1 and inside(word & ~1, 2, flash), (index, hex(word))
    # Unclaimed handlers are weak aliases of Default_Handler.
    assert words[16 + spec["usart1_irq"]] == sym["Default_Handler"] | 1
    assert words[3] == sym["Default_Handler"] | 1  # HardFault

    # Code and constants in flash.
    for name in (".text", ".rodata"):
        assert inside(*sec[name], flash), name
    # .data: linked in RAM, loaded from flash right after the constants, and the load image
    # holds the initial value.
    assert inside(sym["_sidata"], sym["_edata"] - sym["_sdata"], flash)
    offset = sym["_sidata"] - FLASH + (sym["zo_test_data"] - sym["_sdata"])
    assert struct.unpack_from("<I", image, offset)[0] == 0x5EEDC0DE

    # The arena: in the region asked for, whole.
    assert sec[".zo_arena"][1] == ARENA_BYTES
    assert inside(*sec[".zo_arena"], region), (region_name, hex(sec[".zo_arena"][0]))
    assert sym["_szo_arena"] == sec[".zo_arena"][0] and sym["_szo_arena"] % 32 == 0
    # RAM sections inside the board's memory and never overlapping.
    ram = sorted(sec[n] for n in (".stack", ".data", ".bss", ".zo_arena"))
    for (a, n), (b, _) in zip(ram, ram[1:]):
        assert a + n <= b, ram
    for addr, size in ram:
        assert any(inside(addr, size, r) for r in spec["regions"].values()), hex(addr)

    # Right FPU and hard-float calling convention in the attributes of the linked image.
    attributes = tool("readelf", "-A", elf)
    assert "Tag_ABI_VFP_args: VFP registers" in attributes
    assert "Tag_CPU_name: \"7E-M\"" in attributes or "Cortex-M7" in attributes
    assert ("Tag_ABI_HardFP_use: SP only" in attributes) == (spec["fpu"] == "fpv5-sp-d16")


@needs_arm
@pytest.mark.parametrize("target,region,arena_bytes,fits", [
    ("stm32f746", "SRAM1", 240 << 10, True),
    ("stm32f746", "SRAM1", (240 << 10) + 32, False),
    ("stm32f746", "RAM", 256 << 10, True),   # the whole budget, past SRAM1: the combined span
    ("stm32h7b3", "AXI_SRAM", 1024 << 10, True),
    ("stm32h7b3", "AXI_SRAM", (1024 << 10) + 32, False),
])
def test_region_lengths_are_enforced(tmp_path, target, region, arena_bytes, fits):
    result = make(write_project(tmp_path, target, region, arena_bytes))
    output = result.stdout + result.stderr
    if fits:
        assert result.returncode == 0 and output.strip() == "", output
        addr, size = sections(tmp_path / "build" / "firmware.elf")[".zo_arena"]
        assert size == arena_bytes and inside(addr, size, SPEC[target]["regions"][region])
    else:
        assert result.returncode != 0
        assert f"region `{region}' overflowed" in output or "will not fit" in output, output


@needs_arm
@pytest.mark.parametrize("target", TARGETS)
def test_unknown_arena_region_fails_the_link(tmp_path, target):
    result = make(write_project(tmp_path, target, "ITCM"))
    assert result.returncode != 0
    assert "ITCM" in result.stdout + result.stderr


# ---- PlatformIO -----------------------------------------------------------------------------


def platformio_config(tmp_path: Path, target: str):
    pytest.importorskip("platformio", reason="the platformio package is a test dependency")
    from platformio.project.config import ProjectConfig
    path = tmp_path / "platformio.ini"
    path.write_text(render("templates/project/platformio.ini.j2", target=target,
                           target_info=target_info(target), baud=DEFAULT_BAUD))
    return path, ProjectConfig(str(path))


def make_variables(tmp_path: Path, target: str) -> dict[str, str]:
    root = write_project(tmp_path / "mk", target)
    result = make(root, "print")
    assert result.returncode == 0, result.stderr
    return dict(line.split("=", 1) for line in result.stdout.splitlines())


@needs_make
@pytest.mark.parametrize("target", TARGETS)
def test_platformio_ini(tmp_path, target):
    path, config = platformio_config(tmp_path, target)
    from platformio.project.config import ProjectConfig
    spec = SPEC[target]
    env = f"env:{target}"
    assert config.envs() == [target] and config.default_envs() == [target]
    assert config.get(env, "platform") == "ststm32"
    assert config.get(env, "board") == spec["board"]
    assert not config.has_option(env, "framework")  # bare metal
    assert config.get(env, "board_build.ldscript") == f"src/platform/{target}/{target}.ld"
    assert config.get(env, "build_src_filter") == [
        "+<*> -<platform/> +<platform/%s/>" % target]
    assert config.get(env, "upload_protocol") == "stlink"
    assert config.get(env, "monitor_speed") == DEFAULT_BAUD
    assert config.get(env, "extra_scripts") == [
        "post:pio_link_flags.py"]
    flags = config.get(env, "build_flags")
    for flag in ("-mcpu=cortex-m7", "-mthumb", "-mfloat-abi=hard", f"-mfpu={spec['fpu']}",
                 "-std=c99", "-Wall", "-Wextra", "-ffp-contract=off", "-Iinclude", "-O2"):
        assert flag in flags, flag
    # The same compiler flags as `make firmware` (platform.mk), and the same linker script.
    variables = make_variables(tmp_path, target)
    assert set(variables["FW_CFLAGS"].split()) - {"-g"} <= set(flags)
    assert f"-T src/platform/{target}/{target}.ld" in variables["FW_LDFLAGS"]
    assert variables["FW_SRCS"].split() == [f"src/platform/{target}/startup_{target}.c",
                                            f"src/platform/{target}/reset_cortex_m7.c",
                                            f"src/platform/{target}/platform_stm32.c"]
    lint = ProjectConfig.lint(str(path))
    assert lint == {"errors": [], "warnings": []}


@pytest.mark.parametrize("target", TARGETS)
def test_pio_link_flags_script_forwards_machine_flags(tmp_path, target):
    """Run the extra script against a stand-in SCons environment: the hard-float flags must
    reach the link, or PlatformIO links the soft-float newlib."""
    path, config = platformio_config(tmp_path, target)

    class FakeEnv:
        def __init__(self, build_flags):
            self.build_flags, self.appended = build_flags, {}

        def GetProjectOption(self, name, default=None):  # noqa: N802 (SCons API name)
            assert name == "build_flags"
            return self.build_flags

        def Append(self, **scopes):  # noqa: N802
            for key, values in scopes.items():
                self.appended.setdefault(key, []).extend(values)

    env = FakeEnv(config.get(f"env:{target}", "build_flags"))
    script = REPO / "templates" / "project" / "pio_link_flags.py"
    exec(compile(script.read_text(), str(script), "exec"), {"Import": lambda _: None, "env": env})
    link = env.appended["LINKFLAGS"]
    for flag in ("-mcpu=cortex-m7", "-mthumb", "-mfloat-abi=hard", f"-mfpu={SPEC[target]['fpu']}",
                 "-nostartfiles", "--specs=nosys.specs"):
        assert flag in link, flag
    assert "-O2" not in link and "-Iinclude" not in link


def test_h7b3_board_json(tmp_path):
    info = target_info("stm32h7b3")
    board = json.loads(render("targets/stm32h7b3/board_stm32h7b3i_dk.json.j2",
                              target="stm32h7b3", target_info=info))
    assert info["platformio_board"] is None and info["platformio_board_id"] == "stm32h7b3i_dk"
    assert board["build"]["mcu"] == "stm32h7b3lih6q"
    assert board["build"]["cpu"] == "cortex-m7"
    assert board["build"]["f_cpu"] == "280000000L"
    assert board["upload"]["maximum_size"] == 2 << 20
    assert board["upload"]["maximum_ram_size"] == (1024 + 128) << 10  # AXI SRAM + DTCM
    assert board["upload"]["protocol"] == "stlink" and "stlink" in board["upload"]["protocols"]
    assert board["debug"]["openocd_target"] == "stm32h7x"
    assert board["debug"]["jlink_device"]  # PlatformIO requires it when jlink is listed
    _, config = platformio_config(tmp_path, "stm32h7b3")
    assert config.get("env:stm32h7b3", "board") == info["platformio_board_id"]


def test_f746_uses_platformio_board_id():
    info = target_info("stm32f746")
    assert info["platformio_board"] == info["platformio_board_id"] == "disco_f746ng"
    ini = render("templates/project/platformio.ini.j2", target="stm32f746", target_info=info,
                 baud=DEFAULT_BAUD)
    assert "boards/" not in ini


# ---- clock tree (board.h clock_init / clock_measure) ----------------------------------------
#
# The boards cannot run here (QEMU has no model of them), so the clock code is held to the
# manuals twice: the nominal plan in board.h's #defines is recomputed from the limits below,
# and clock_init() itself runs on the host against a small register model of each chip that
# states the same facts independently (raw addresses and bit numbers, ready flags that follow
# their enable bits, the constraints the reference manuals put on each step) and records a
# violation whenever the code breaks one.

# Limits, from the manuals (section numbers as cited in board.h and the READMEs).
F746_LIMITS = dict(
    hsi=16_000_000, hse=25_000_000,                      # RM0385 5.2.2; UM1907 (25 MHz crystal)
    pll_m=(2, 63), vco_in=(1_000_000, 2_000_000),        # RM0385 5.3.2 RCC_PLLCFGR
    pll_n=(50, 432), vco=(100_000_000, 432_000_000), pll_p=(2, 4, 6, 8), pll_q=(2, 15),
    pll48_max=48_000_000,
    sysclk_max=216_000_000, pclk1_max=54_000_000, pclk2_max=108_000_000,  # DS10916
    # RM0385 3.3.2 table 5, 2.7-3.6 V: HCLK upper bound of 0, 1, ... 7 wait states
    flash_bands=(30, 60, 90, 120, 150, 180, 210, 216),
)
H7B3_LIMITS = dict(
    hsi=64_000_000, hse=24_000_000,                      # RM0455 RCC; UM2569 (24 MHz crystal)
    pll_m=(1, 63), ref_ranges={0: (1_000_000, 2_000_000), 1: (2_000_000, 4_000_000),
                               2: (4_000_000, 8_000_000), 3: (8_000_000, 16_000_000)},
    pll_n=(8, 420), vco_wide=(128_000_000, 560_000_000), pll_p=(1, 128),
    cpu_max=280_000_000, hclk_max=280_000_000, pclk_max=140_000_000,  # DS13139, VOS0
    # RM0455 table "FLASH recommended number of wait states and programming delay" (table 16
    # in rev 10), VOS0: AXI clock upper bound of 0..6 wait states, and WRHIGHFREQ for each
    flash_bands=(42, 84, 126, 168, 210, 252, 280), wrhighfreq=(0, 0, 1, 1, 2, 2, 3),
)
BAUD = DEFAULT_BAUD  # the host link's default, zocodegen/formats/link.py


def board_defines(target: str) -> dict[str, int]:
    """The integer #defines of targets/<target>/board.h, evaluated (C unsigned integer
    arithmetic: literals lose their u suffix, / truncates)."""
    text = (REPO / "targets" / target / "board.h").read_text()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    values: dict[str, int] = {}
    for name, expr in re.findall(r"^[ \t]*#define[ \t]+(ZO_\w+)[ \t]+([^\n]+?)[ \t]*$", text, re.M):
        expr = re.sub(r"\b(0x[0-9A-Fa-f]+|\d+)[uU][lL]*\b", r"\1", expr)
        if not re.fullmatch(r"[\w\s()+\-*/%]+", expr):
            continue  # strings, function-like macros
        expr = re.sub(r"(?<![/])/(?![/])", "//", expr)
        try:
            values[name] = int(eval(expr, {"__builtins__": {}}, dict(values)))  # noqa: S307
        except (NameError, SyntaxError, TypeError):
            continue
    return values


def wait_states(hclk: int, bands_mhz) -> int:
    return next(ws for ws, top in enumerate(bands_mhz) if hclk <= top * 1_000_000)


def brr_error(kernel_hz: int) -> tuple[int, float]:
    brr = (kernel_hz + BAUD // 2) // BAUD
    return brr, abs(kernel_hz / brr - BAUD) / BAUD


def test_f746_clock_plan_arithmetic():
    d, lim, info = board_defines("stm32f746"), F746_LIMITS, target_info("stm32f746")
    assert d["ZO_HSI_HZ"] == lim["hsi"] == info["reset_clock_hz"]
    assert d["ZO_HSE_HZ"] == lim["hse"]
    m, n, p, q = d["ZO_PLL_M"], d["ZO_PLL_N"], d["ZO_PLL_P"], d["ZO_PLL_Q"]
    assert lim["pll_m"][0] <= m <= lim["pll_m"][1] and d["ZO_HSE_HZ"] % m == 0
    vco_in = d["ZO_HSE_HZ"] // m
    assert lim["vco_in"][0] <= vco_in <= lim["vco_in"][1]
    assert lim["pll_n"][0] <= n <= lim["pll_n"][1]
    vco = vco_in * n
    assert lim["vco"][0] <= vco <= lim["vco"][1]
    assert p in lim["pll_p"] and lim["pll_q"][0] <= q <= lim["pll_q"][1]
    assert vco // q <= lim["pll48_max"] and vco % q == 0 and vco // q == 48_000_000
    sysclk = vco // p
    assert sysclk == d["ZO_SYSCLK_HZ"] == 216_000_000 == info["clock_hz"]
    core = sysclk // d["ZO_AHB_DIV"]
    assert core == d["ZO_CORE_HZ"] == info["clock_hz"] <= lim["sysclk_max"]
    assert core // d["ZO_APB1_DIV"] == d["ZO_PCLK1_HZ"] <= lim["pclk1_max"]
    assert core // d["ZO_APB2_DIV"] == d["ZO_PCLK2_HZ"] == 108_000_000 <= lim["pclk2_max"]
    assert d["ZO_FLASH_WS"] == wait_states(core, lim["flash_bands"]) == 7
    brr, error = brr_error(d["ZO_PCLK2_HZ"])
    assert brr == usart_divisor(d["ZO_PCLK2_HZ"], BAUD) == 88 and error < 0.02
    assert brr_error(lim["hsi"]) == (13, pytest.approx(0.0016, abs=1e-4))  # fallback, OVER8
    clock = info["clock"]
    assert (clock["hse_hz"], clock["pll"]["m"], clock["pll"]["n"], clock["pll"]["p"],
            clock["pll"]["q"]) == (lim["hse"], m, n, p, q)
    assert (clock["ahb_div"], clock["apb1_div"], clock["apb2_div"], clock["flash_wait_states"]) \
        == (d["ZO_AHB_DIV"], d["ZO_APB1_DIV"], d["ZO_APB2_DIV"], d["ZO_FLASH_WS"])
    assert clock["usart1_kernel_hz"] == d["ZO_PCLK2_HZ"] and clock["usart1_brr"] == brr
    assert "BRR 88" in info["vcp"]["notes"] and "PCLK2" in info["vcp"]["notes"]


def test_h7b3_clock_plan_arithmetic():
    d, lim, info = board_defines("stm32h7b3"), H7B3_LIMITS, target_info("stm32h7b3")
    assert d["ZO_HSI_HZ"] == lim["hsi"] == info["reset_clock_hz"]
    assert d["ZO_HSE_HZ"] == lim["hse"]
    m, n, p = d["ZO_PLL1_M"], d["ZO_PLL1_N"], d["ZO_PLL1_P"]
    assert lim["pll_m"][0] <= m <= lim["pll_m"][1] and d["ZO_HSE_HZ"] % m == 0
    ref = d["ZO_HSE_HZ"] // m
    low, high = lim["ref_ranges"][d["ZO_PLL1_RGE"]]
    assert low <= ref <= high
    assert d["ZO_PLL1_VCOSEL"] == 0 and d["ZO_PLL1_RGE"] != 0  # wide VCO needs ref >= 2 MHz
    assert lim["pll_n"][0] <= n <= lim["pll_n"][1]
    vco = ref * n
    assert lim["vco_wide"][0] <= vco <= lim["vco_wide"][1]
    assert lim["pll_p"][0] <= p <= lim["pll_p"][1] and vco % p == 0
    sysclk = vco // p
    assert sysclk == d["ZO_SYSCLK_HZ"] == 280_000_000 == info["clock_hz"]
    cpu = sysclk // d["ZO_CDCPRE_DIV"]
    hclk = cpu // d["ZO_HPRE_DIV"]
    assert cpu == d["ZO_CORE_HZ"] == info["clock_hz"] <= lim["cpu_max"]
    assert hclk == d["ZO_HCLK_HZ"] <= lim["hclk_max"]
    assert hclk // d["ZO_APB_DIV"] == d["ZO_PCLK2_HZ"] == 140_000_000 <= lim["pclk_max"]
    ws = wait_states(hclk, lim["flash_bands"])
    assert d["ZO_FLASH_WS"] == ws == 6
    assert d["ZO_FLASH_WRHIGHFREQ"] == lim["wrhighfreq"][ws] == 3
    brr, error = brr_error(d["ZO_PCLK2_HZ"])
    assert brr == usart_divisor(d["ZO_PCLK2_HZ"], BAUD) == 114 and error < 0.02
    assert brr_error(lim["hsi"])[0] == 52  # the fallback clock
    clock = info["clock"]
    assert (clock["hse_hz"], clock["pll1"]["m"], clock["pll1"]["n"], clock["pll1"]["p"]) \
        == (lim["hse"], m, n, p)
    assert clock["supply"] == "direct SMPS" and clock["voltage_scale"] == "VOS0"
    assert (clock["flash_wait_states"], clock["flash_wrhighfreq"]) == (ws, 3)
    assert clock["usart1_kernel_hz"] == d["ZO_PCLK2_HZ"] and clock["usart1_brr"] == brr
    assert "BRR 114" in info["vcp"]["notes"] and "pclk2" in info["vcp"]["notes"]


HARNESS_COMMON = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Register file: one word per address the code touches. */
#define MAXREG 64
static uint32_t reg_addr[MAXREG];
static volatile uint32_t reg_val[MAXREG];
static int nreg;
static volatile uint32_t *zo_reg(uint32_t addr)
{
    for (int i = 0; i < nreg; i++) {
        if (reg_addr[i] == addr) {
            return &reg_val[i];
        }
    }
    if (nreg == MAXREG) {
        abort();
    }
    reg_addr[nreg] = addr;
    reg_val[nreg] = 0u;
    return &reg_val[nreg++];
}
#define R(addr) (*zo_reg(addr))
#define BIT(v, n) ((int)(((v) >> (n)) & 1u))
#define FIELD(v, pos, width) (((v) >> (pos)) & ((1u << (width)) - 1u))
#define SETBIT(addr, n, on) (R(addr) = (on) ? (R(addr) | (1u << (n))) : (R(addr) & ~(1u << (n))))

static int violations;
static void violation(const char *what)
{
    violations++;
    printf("VIOLATION %s\n", what);
}
static const char *scenario;
static int is(const char *name) { return strcmp(scenario, name) == 0; }

static uint32_t ahb_div(uint32_t f) /* independent of the code under test */
{
    static const uint32_t d[8] = {2, 4, 8, 16, 64, 128, 256, 512};
    return (f & 8u) ? d[f & 7u] : 1u;
}
static uint32_t apb_div(uint32_t f) { return (f & 4u) ? (2u << (f & 3u)) : 1u; }

static uint32_t now;
static void hw_step(void);
static uint32_t hw_tick(void)
{
    now++;
    hw_step();
    return now;
}

#define ZO_REG32(addr) (*zo_reg((uint32_t)(addr)))
#define DWT_CYCCNT (hw_tick())
static inline void zo_dsb_isb(void) {}
"""

HARNESS_MAIN = r"""
int main(int argc, char **argv)
{
    scenario = argc > 1 ? argv[1] : "ok";
    hw_reset();
    hw_step();
    zo_clocks.status = clock_init();
    hw_step();
    clock_measure(&zo_clocks);
    board_serial_clocks();
    printf("status=%d sysclk=%lu core=%lu usart=%lu brr=%lu violations=%d\n",
           (int)zo_clocks.status, (unsigned long)zo_clocks.sysclk_hz,
           (unsigned long)zo_clocks.core_hz, (unsigned long)zo_clocks.usart_hz,
           (unsigned long)((zo_clocks.usart_hz + 614400u) / 1228800u), violations);
    for (int i = 0; i < nreg; i++) {
        printf("reg %08lx=%08lx\n", (unsigned long)reg_addr[i], (unsigned long)reg_val[i]);
    }
    return 0;
}
"""

# RM0385: RCC 0x40023800 (CR +0, PLLCFGR +4, CFGR +8, APB1ENR +0x40), PWR 0x40007000
# (CR1 +0, CSR1 +4), FLASH_ACR 0x40023C00; reset values from the register descriptions.
F746_MODEL = r"""
#define M_CR 0x40023800u
#define M_PLLCFGR 0x40023804u
#define M_CFGR 0x40023808u
#define M_APB1ENR 0x40023840u
#define M_PWR_CR1 0x40007000u
#define M_PWR_CSR1 0x40007004u
#define M_ACR 0x40023C00u

static void hw_reset(void)
{
    R(M_CR) = 0x00000083u;       /* HSION, HSIRDY, HSITRIM 16 */
    R(M_PLLCFGR) = 0x24003010u;
    R(M_CFGR) = 0u;
    R(M_APB1ENR) = 0u;
    R(M_PWR_CR1) = 0x0000C000u;  /* VOS = scale 1 */
    R(M_PWR_CSR1) = 0u;
    R(M_ACR) = 0u;
}

static int pll_was_on;
static uint32_t pll_snapshot;

static uint32_t pll_out(uint32_t cfg, int check)
{
    uint32_t src = BIT(cfg, 22) ? 25000000u : 16000000u;
    uint32_t m = FIELD(cfg, 0, 6), n = FIELD(cfg, 6, 9), p = 2u * (FIELD(cfg, 16, 2) + 1u);
    uint32_t q = FIELD(cfg, 24, 4);
    if (m < 2u || n < 50u || n > 432u) {
        if (check) violation("PLLM 2..63 / PLLN 50..432");
        return 0u;
    }
    uint32_t in = src / m, vco = in * n;
    if (check) {
        if (src % m != 0u || in < 1000000u || in > 2000000u) violation("VCO input 1..2 MHz");
        if (vco < 100000000u || vco > 432000000u) violation("VCO output 100..432 MHz");
        if (q < 2u || vco / q > 48000000u) violation("PLLQ 2..15, 48 MHz clock <= 48 MHz");
        if (FIELD(cfg, 28, 4) != 2u) violation("PLLCFGR reserved bits changed");
    }
    return vco / p;
}

static void hw_step(void)
{
    uint32_t cr = R(M_CR), cfgr = R(M_CFGR);
    int pwr_clock = BIT(R(M_APB1ENR), 28);
    int hse_ready = BIT(cr, 16) && !BIT(cr, 18) && !is("no_hse"); /* a crystal: no bypass */
    SETBIT(M_CR, 17, hse_ready);
    int pll_on = BIT(cr, 24);
    uint32_t cfg = R(M_PLLCFGR);
    if (pll_on && !pll_was_on) {
        pll_snapshot = cfg;
        (void)pll_out(cfg, 1);
        if (FIELD(R(M_PWR_CR1), 14, 2) != 3u) violation("VOS scale 1 set before the PLL starts");
    } else if (pll_on && cfg != pll_snapshot) {
        violation("PLLCFGR written while the PLL runs");
    }
    pll_was_on = pll_on;
    int src_ready = BIT(cfg, 22) ? hse_ready : 1;
    SETBIT(M_CR, 25, pll_on && src_ready && !is("no_pll_lock"));

    uint32_t cr1 = R(M_PWR_CR1);
    if ((BIT(cr1, 16) || BIT(cr1, 17)) && !pwr_clock) violation("PWR written without its clock");
    if (BIT(cr1, 16) && !BIT(R(M_PWR_CSR1), 16) && FIELD(cfgr, 2, 2) == 2u)
        violation("over-drive entered with SYSCLK on the PLL");
    int odrdy = BIT(cr1, 16) && pwr_clock && !is("no_overdrive");
    SETBIT(M_PWR_CSR1, 16, odrdy);
    SETBIT(M_PWR_CSR1, 17, BIT(cr1, 17) && odrdy);

    uint32_t sw = FIELD(cfgr, 0, 2), sws = FIELD(cfgr, 2, 2);
    int ready = sw == 0u ? 1 : sw == 1u ? hse_ready : sw == 2u ? BIT(R(M_CR), 25) : 0;
    if (sw != sws && ready && !is("no_switch")) {
        R(M_CFGR) = (cfgr & ~(3u << 2)) | (sw << 2);
        sws = sw;
    }
    uint32_t sysclk = sws == 0u ? 16000000u : sws == 1u ? 25000000u : pll_out(cfg, 0);
    uint32_t hclk = sysclk / ahb_div(FIELD(cfgr, 4, 4));
    if (hclk > 216000000u) violation("HCLK <= 216 MHz");
    if (hclk > 180000000u && !BIT(R(M_PWR_CSR1), 17)) violation("over-drive above 180 MHz");
    if (hclk / apb_div(FIELD(cfgr, 10, 3)) > 54000000u) violation("PCLK1 <= 54 MHz");
    if (hclk / apb_div(FIELD(cfgr, 13, 3)) > 108000000u) violation("PCLK2 <= 108 MHz");
    static const uint32_t band[8] = {30, 60, 90, 120, 150, 180, 210, 216};
    uint32_t ws = 0u;
    while (ws < 7u && hclk > band[ws] * 1000000u) ws++;
    if (FIELD(R(M_ACR), 0, 4) < ws) violation("flash wait states for HCLK (table 5)");
}
"""

# RM0455: RCC 0x58024400 (M_CR +0, M_CFGR +0x10, M_CDCFGR1 +0x18, M_CDCFGR2 +0x1C, M_SRDCFGR +0x20,
# M_PLLCKSELR +0x28, M_PLLCFGR +0x2C, M_PLL1DIVR +0x30, M_PLL1FRACR +0x34), PWR 0x58024800 (M_CSR1 +4,
# M_CR3 +0xC, M_SRDCR +0x18), FLASH_ACR 0x52002000; reset values from the register descriptions.
H7B3_MODEL = r"""
#define M_CR 0x58024400u
#define M_CFGR 0x58024410u
#define M_CDCFGR1 0x58024418u
#define M_CDCFGR2 0x5802441Cu
#define M_SRDCFGR 0x58024420u
#define M_PLLCKSELR 0x58024428u
#define M_PLLCFGR 0x5802442Cu
#define M_PLL1DIVR 0x58024430u
#define M_PLL1FRACR 0x58024434u
#define M_CSR1 0x58024804u
#define M_CR3 0x5802480Cu
#define M_SRDCR 0x58024818u
#define M_ACR 0x52002000u
#define M_SUPPLY_MASK 0x3Fu   /* SMPSLEVEL, SMPSEXTHP, SMPSEN, LDOEN, BYPASS */
#define M_SUPPLY_RESET 0x06u  /* SMPSEN | LDOEN */
#define M_DIRECT_SMPS 0x04u   /* SMPSEN: how the kit is wired */

static int cr3_locked;
static uint32_t cr3_value, vos_reset;

static void hw_reset(void)
{
    R(M_CR) = 0x00000025u;       /* HSION, HSIRDY, HSIDIVF; HSIDIV /1 */
    R(M_CFGR) = 0u;
    R(M_CDCFGR1) = 0u;
    R(M_CDCFGR2) = 0u;
    R(M_SRDCFGR) = 0u;
    R(M_PLLCKSELR) = 0x02020200u;
    R(M_PLLCFGR) = 0x01FF0000u;
    R(M_PLL1DIVR) = 0x01010280u;
    R(M_PLL1FRACR) = 0u;
    R(M_CSR1) = 0u;
    R(M_CR3) = M_SUPPLY_RESET;
    R(M_SRDCR) = 0x00004000u;
    R(M_ACR) = 0x00000013u;
    vos_reset = 1u;
    if (is("cr3_locked_ldo")) { R(M_CR3) = 0x02u; cr3_locked = 1; cr3_value = 0x02u; }
    if (is("cr3_locked_smps")) { R(M_CR3) = M_DIRECT_SMPS; cr3_locked = 1; cr3_value = M_DIRECT_SMPS; }
}

static int pll_was_on;
static uint32_t snap_cksel, snap_cfg, snap_divr;

static uint32_t hsi(void) { return 64000000u >> FIELD(R(M_CR), 3, 2); }

static uint32_t pll1_out(int check)
{
    uint32_t cksel = R(M_PLLCKSELR), cfg = R(M_PLLCFGR), divr = R(M_PLL1DIVR);
    uint32_t srcsel = FIELD(cksel, 0, 2);
    uint32_t src = srcsel == 0u ? hsi() : srcsel == 1u ? 4000000u : srcsel == 2u ? 24000000u : 0u;
    uint32_t m = FIELD(cksel, 4, 6), n = FIELD(divr, 0, 9) + 1u, p = FIELD(divr, 9, 7) + 1u;
    if (m == 0u || src == 0u) {
        if (check) violation("PLL1 has an input");
        return 0u;
    }
    uint32_t ref = src / m, rge = FIELD(cfg, 2, 2);
    uint64_t vco = (uint64_t)ref * n;
    if (check) {
        static const uint32_t lo[4] = {1000000u, 2000000u, 4000000u, 8000000u};
        if (src % m != 0u || ref < lo[rge] || ref > 2u * lo[rge]) violation("PLL1RGE range");
        if (BIT(cfg, 1) == 0 && (rge == 0u || vco < 128000000u || vco > 560000000u))
            violation("wide VCO 128..560 MHz, input >= 2 MHz");
        if (BIT(cfg, 1) == 1 && (vco < 150000000u || vco > 420000000u))
            violation("medium VCO 150..420 MHz");
        if (n < 8u || n > 420u) violation("DIVN1 8..420");
        if (BIT(cfg, 0)) violation("integer mode (PLL1FRACEN = 0)");
        if (!BIT(cfg, 16)) violation("DIVP1EN");
    }
    return (uint32_t)(vco / p);
}

static void hw_step(void)
{
    uint32_t supply = R(M_CR3) & M_SUPPLY_MASK;
    if (!cr3_locked && supply != M_SUPPLY_RESET) {
        cr3_locked = 1;
        cr3_value = supply;
        if (supply != M_DIRECT_SMPS) violation("supply configuration the kit is not wired for");
    } else if (cr3_locked && supply != cr3_value) {
        violation("PWR_CR3 supply configuration written after it locked");
        R(M_CR3) = (R(M_CR3) & ~M_SUPPLY_MASK) | cr3_value;
    }
    int supply_ok = cr3_locked ? cr3_value == M_DIRECT_SMPS : 1;
    SETBIT(M_CSR1, 13, supply_ok);  /* ACTVOSRDY */
    uint32_t vos = FIELD(R(M_SRDCR), 14, 2);
    if (vos != vos_reset && !cr3_locked) violation("VOS changed before the supply configuration");
    SETBIT(M_SRDCR, 13, supply_ok && !is("no_vos"));  /* VOSRDY */

    uint32_t cr = R(M_CR), cfgr = R(M_CFGR);
    int hse_ready = BIT(cr, 16) && !BIT(cr, 18) && !is("no_hse"); /* a crystal: no bypass */
    SETBIT(M_CR, 17, hse_ready);
    int pll_on = BIT(cr, 24);
    uint32_t cksel = R(M_PLLCKSELR), cfg = R(M_PLLCFGR) & 0x0001000Fu, divr = R(M_PLL1DIVR);
    if (pll_on && !pll_was_on) {
        snap_cksel = cksel; snap_cfg = cfg; snap_divr = divr;
        (void)pll1_out(1);
    } else if (pll_on && (cksel != snap_cksel || cfg != snap_cfg || divr != snap_divr)) {
        violation("PLL1 configuration written while PLL1 runs");
    }
    pll_was_on = pll_on;
    uint32_t srcsel = FIELD(cksel, 0, 2);
    int src_ready = srcsel == 2u ? hse_ready : srcsel != 3u;
    SETBIT(M_CR, 25, pll_on && src_ready && !is("no_pll_lock"));

    uint32_t sw = FIELD(cfgr, 0, 3), sws = FIELD(cfgr, 3, 3);
    int ready = sw == 0u ? 1 : sw == 2u ? hse_ready : sw == 3u ? BIT(R(M_CR), 25) : 0;
    if (sw != sws && ready && !is("no_switch")) {
        R(M_CFGR) = (cfgr & ~(7u << 3)) | (sw << 3);
        sws = sw;
    }
    uint32_t sys = sws == 0u ? hsi() : sws == 1u ? 4000000u : sws == 2u ? 24000000u : pll1_out(0);
    uint32_t cd1 = R(M_CDCFGR1), cd2 = R(M_CDCFGR2);
    uint32_t cpu = sys / ahb_div(FIELD(cd1, 8, 4));
    uint32_t hclk = cpu / ahb_div(FIELD(cd1, 0, 4));
    if (cpu > 280000000u || hclk > 280000000u) violation("CPU, AXI/AHB <= 280 MHz");
    if (cpu > 225000000u && !(vos == 3u && BIT(R(M_SRDCR), 13))) violation("VOS0 above 225 MHz");
    if (hclk / apb_div(FIELD(cd1, 4, 3)) > 140000000u || hclk / apb_div(FIELD(cd2, 4, 3)) > 140000000u
        || hclk / apb_div(FIELD(cd2, 8, 3)) > 140000000u
        || hclk / apb_div(FIELD(R(M_SRDCFGR), 4, 3)) > 140000000u)
        violation("APB clocks <= 140 MHz");
    static const uint32_t band[7] = {42, 84, 126, 168, 210, 252, 280};
    static const uint32_t wrhf[7] = {0, 0, 1, 1, 2, 2, 3};
    uint32_t ws = 0u;
    while (ws < 6u && hclk > band[ws] * 1000000u) ws++;
    if (sws == 3u && (FIELD(R(M_ACR), 0, 4) < ws || FIELD(R(M_ACR), 4, 2) != wrhf[ws]))
        violation("flash LATENCY and WRHIGHFREQ for the AXI clock at VOS0");
}
"""

CLOCK_STATUS = re.findall(r"^\s*(ZO_CLOCK_\w+)", (REPO / "targets" / "common" /
                                                   "platform_stm32.c").read_text(), re.M)

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a host C compiler")


@pytest.fixture(scope="module")
def clock_model(tmp_path_factory):
    """Builds, per target, board.h + the clock section of platform_stm32.c + the register
    model into a host program; returns run(target, scenario) -> (status name, values, regs)."""
    common = (REPO / "targets" / "common" / "platform_stm32.c").read_text()
    shared = common[common.index("/* ---- clock state shared with board.h"):
                    common.index('#include "board.h"')]
    built = {}

    def run(target: str, scenario: str):
        if target not in built:
            src = tmp_path_factory.mktemp(target) / "model.c"
            model = F746_MODEL if target == "stm32f746" else H7B3_MODEL
            src.write_text(HARNESS_COMMON + shared
                           + (REPO / "targets" / target / "board.h").read_text()
                           + model + HARNESS_MAIN)
            exe = src.with_suffix("")
            result = subprocess.run(["cc", "-std=c99", "-O1", "-Wall", "-Wextra", "-Werror",
                                     "-I", str(REPO / "targets" / target), str(src), "-o",
                                     str(exe)], capture_output=True, text=True, timeout=120)
            assert result.returncode == 0, result.stderr
            built[target] = exe
        out = subprocess.run([str(built[target]), scenario], capture_output=True, text=True,
                             timeout=120, check=True).stdout
        summary = dict(kv.split("=") for kv in
                       next(line for line in out.splitlines() if line.startswith("status=")
                            ).split())
        regs = {int(a, 16): int(v, 16) for a, v in re.findall(r"^reg (\w+)=(\w+)$", out, re.M)}
        violations = re.findall(r"^VIOLATION (.*)$", out, re.M)
        return CLOCK_STATUS[int(summary.pop("status"))], \
            {k: int(v) for k, v in summary.items()}, regs, violations

    return run


@needs_cc
@pytest.mark.parametrize("target,scenario,status,core,usart,brr", [
    ("stm32f746", "ok", "ZO_CLOCK_OK", 216_000_000, 108_000_000, 88),
    ("stm32f746", "no_hse", "ZO_CLOCK_FAIL_HSE", 16_000_000, 16_000_000, 13),
    ("stm32f746", "no_overdrive", "ZO_CLOCK_FAIL_OVERDRIVE", 16_000_000, 16_000_000, 13),
    ("stm32f746", "no_pll_lock", "ZO_CLOCK_FAIL_PLL", 16_000_000, 16_000_000, 13),
    ("stm32f746", "no_switch", "ZO_CLOCK_FAIL_SWITCH", 16_000_000, 16_000_000, 13),
    ("stm32h7b3", "ok", "ZO_CLOCK_OK", 280_000_000, 140_000_000, 114),
    ("stm32h7b3", "cr3_locked_smps", "ZO_CLOCK_OK", 280_000_000, 140_000_000, 114),
    ("stm32h7b3", "cr3_locked_ldo", "ZO_CLOCK_FAIL_SUPPLY", 64_000_000, 64_000_000, 52),
    ("stm32h7b3", "no_vos", "ZO_CLOCK_FAIL_VOLTAGE", 64_000_000, 64_000_000, 52),
    ("stm32h7b3", "no_hse", "ZO_CLOCK_FAIL_HSE", 64_000_000, 64_000_000, 52),
    ("stm32h7b3", "no_pll_lock", "ZO_CLOCK_FAIL_PLL", 64_000_000, 64_000_000, 52),
    ("stm32h7b3", "no_switch", "ZO_CLOCK_FAIL_SWITCH", 64_000_000, 64_000_000, 52),
])
def test_clock_init_on_register_model(clock_model, target, scenario, status, core, usart, brr):
    """clock_init() follows the manuals' sequence on a register model of the chip (no
    violation), reaches full speed when every oscillator comes up, and otherwise stops at the
    step that failed with a clock that is measured, not assumed: the baud-rate divider
    follows the USART kernel clock actually running."""
    got, values, regs, violations = clock_model(target, scenario)
    assert violations == [], violations
    assert got == status
    assert (values["core"], values["usart"], values["brr"]) == (core, usart, brr)
    if target == "stm32f746":
        hse_on, pll_on = regs[0x40023800] >> 16 & 1, regs[0x40023800] >> 24 & 1
        assert regs[0x40023C00] & 0xF == (7 if status == "ZO_CLOCK_OK" else 0)
    else:
        hse_on, pll_on = regs[0x58024400] >> 16 & 1, regs[0x58024400] >> 24 & 1
        flash = regs[0x52002000] & 0x3F
        assert flash == (0x36 if status == "ZO_CLOCK_OK" else 0x13)  # LATENCY 6 + WRHIGHFREQ 3
        supply = regs[0x5802480C] & 0x3F
        assert supply == (0x02 if scenario == "cr3_locked_ldo" else 0x04)  # never rewritten
    # On any failure the PLL and the HSE are off again and the bus prescalers are back to
    # their reset values: the reset clock runs, as after reset.
    assert (hse_on, pll_on) == ((1, 1) if status == "ZO_CLOCK_OK" else (0, 0))
    if status != "ZO_CLOCK_OK":
        prescaler_regs = (0x40023808,) if target == "stm32f746" else \
            (0x58024418, 0x5802441C, 0x58024420)
        for addr in prescaler_regs:
            assert regs[addr] & 0xFFF0 == 0, hex(addr)
