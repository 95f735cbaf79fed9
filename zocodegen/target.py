"""Target descriptions (``targets/<name>/target.json``, installed as package data). The
boards are the folders of targets/ that hold a target.json: adding one is a new folder, and
every list of boards (command-line choices, messages, suggestions) is read from here."""
from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

from .errors import UserError


def _discover() -> tuple[str, ...]:
    root = resources.files("zocodegen.targets")
    return tuple(sorted(entry.name for entry in root.iterdir()
                        if entry.is_dir() and entry.joinpath("target.json").is_file()))


TARGET_NAMES = _discover()


@dataclass(frozen=True)
class Target:
    name: str
    board: str
    clock_hz: int
    sram_budget_bytes: int
    flash_bytes: int


def target_data(name: str) -> dict:
    """The whole parsed ``target.json`` (memories, linker and board details): the one reader
    of the file, for the planner and the generator as well."""
    if name not in TARGET_NAMES:
        raise UserError(f"unknown target '{name}'; choose one of {', '.join(TARGET_NAMES)}")
    return json.loads(resources.files("zocodegen.targets").joinpath(name, "target.json")
                      .read_text())


def load_target(name: str) -> Target:
    data = target_data(name)
    return Target(name=data["name"], board=data["board"], clock_hz=data["clock_hz"],
                  sram_budget_bytes=data["sram_budget_bytes"],
                  flash_bytes=data["flash"]["bytes"])


def _budget(name: str) -> int:
    return target_data(name)["sram_budget_bytes"]


#: The board with the smallest SRAM budget: what native and QEMU builds stand for unless told
#: otherwise, so a model that passes there fits every board.
DEFAULT_TARGET = min(TARGET_NAMES, key=_budget)


def roomier_targets(name: str | None) -> list[str]:
    """The boards with a larger SRAM budget than ``name``'s (all of them for None)."""
    floor = _budget(name) if name in TARGET_NAMES else -1
    return [t for t in sorted(TARGET_NAMES, key=_budget) if _budget(t) > floor]


def budget_text(name: str) -> str:
    """'1024 KB AXI SRAM': a board's SRAM budget and the memories the planner fills."""
    data = target_data(name)
    names = " + ".join(m["name"].replace("_", " ") for m in data["memories"] if m["planner"])
    return f"{data['sram_budget_bytes'] // 1024} KB {names}"


#: How far the USART's rate may be from the line's (a UART receiver samples each bit in its
#: middle; 2 % leaves margin over ten bits for the other end's error too).
BAUD_TOLERANCE = 0.02


def usart_divisor(kernel_hz: int, baud: int) -> int:
    """m with kernel_hz / m nearest ``baud``: BRR = m oversampling by 16 (m >= 16), by 8 for
    m = 8..15 (platform_stm32.c vcp_usart_init()); 0 when no m is within BAUD_TOLERANCE."""
    if baud < 1:
        return 0
    m = (kernel_hz + baud // 2) // baud
    if m < 8 or m > 0xFFFF or abs(kernel_hz / m - baud) > BAUD_TOLERANCE * baud:
        return 0
    return m


def check_baud(name: str, baud: int) -> None:
    """Refuse a --baud the board's USART1 cannot make at full speed. (On the reset clock,
    where the firmware stays when the crystal does not start, the default still works but
    not every rate does: 921,600 is 2.1 % off at the F746's 16 MHz; docs/link.md.)"""
    hz = target_data(name)["clock"]["usart1_kernel_hz"]
    if usart_divisor(hz, baud) == 0:
        raise UserError(f"--baud {baud}: {name}'s USART1 cannot make it within "
                        f"{BAUD_TOLERANCE:.0%} at its kernel clock of {hz / 1e6:g} MHz "
                        "(kernel / m, m = 8..65535)")
