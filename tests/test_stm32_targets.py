"""STM32 board support (targets/stm32f746, targets/stm32h7b3): the templates render, a minimal
harness firmware compiles and links with arm-none-eabi-gcc without a single warning using
platform.mk's flags, and the ELF has the layout docs/firmware.md promises (vector table at the
flash origin, reset vector in flash, stack in DTCM, .zo_arena in the region asked for, every
RAM section inside its region). The generated platformio.ini is checked with PlatformIO's own
config parser (PlatformIO cannot download its platform here), and the H7B3 board JSON is
checked as JSON."""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import jinja2
import pytest

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
    for name in PLATFORM_FILES(target):
        (platform_dir / name.rsplit("/", 1)[1].removesuffix(".j2")).write_text(
            render(name, target=target, target_info=target_info(target)))
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
                           target_info=target_info(target)))
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
    assert config.get(env, "monitor_speed") == 115200
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
    ini = render("templates/project/platformio.ini.j2", target="stm32f746", target_info=info)
    assert "boards/" not in ini
