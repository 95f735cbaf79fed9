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


def load_target(name: str) -> Target:
    if name not in TARGET_NAMES:
        raise UserError(f"unknown target '{name}'; choose one of {', '.join(TARGET_NAMES)}")
    text = resources.files("zocodegen.targets").joinpath(name, "target.json").read_text()
    data = json.loads(text)
    return Target(name=data["name"], board=data["board"], clock_hz=data["clock_hz"],
                  sram_budget_bytes=data["sram_budget_bytes"],
                  flash_bytes=data["flash"]["bytes"])
