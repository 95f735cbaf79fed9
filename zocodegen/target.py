"""Target descriptions (``targets/<name>/target.json``, installed as package data)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

from .errors import UserError

TARGET_NAMES = ("stm32f746", "stm32h7b3")


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
