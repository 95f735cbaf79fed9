"""GPIO pins as the other register models see them (RM0385 6.4 / RM0455 GPIO: MODER 2 bits a
pin, PUPDR 2 bits, AFRL / AFRH 4 bits): which mode, pull and alternate function a pin is in,
read from the board's plain registers."""
from __future__ import annotations

from .clocks import GPIO_PORTS, BoardFault


def port_base(gpio_base: int, pin: str) -> int:
    """The register base of a pin's port ("PC13" -> GPIOC)."""
    return gpio_base + 0x400 * GPIO_PORTS.index(pin[1])


def pin_setting(regs: dict[int, int], gpio_base: int, pin: str) -> tuple[int, int, int]:
    """(MODER mode, PUPDR pull, AFR function) of a pin such as "PA9"."""
    base, number = port_base(gpio_base, pin), int(pin[2:])
    mode = (regs.get(base, 0) >> (2 * number)) & 3
    pull = (regs.get(base + 0x0C, 0) >> (2 * number)) & 3
    afr = regs.get(base + (0x24 if number >= 8 else 0x20), 0)
    return mode, pull, (afr >> (4 * (number % 8))) & 0xF


def require_alternate(regs: dict[int, int], gpio_base: int, pin: str, af: int, who: str) -> None:
    """Refuses unless the pin is in alternate-function mode with function ``af``."""
    mode, _, function = pin_setting(regs, gpio_base, pin)
    if mode != 2 or function != af:
        port, number = pin[1], int(pin[2:])
        afr = f"GPIO{port}_AFR{'H' if number >= 8 else 'L'}"
        raise BoardFault(f"{who} with {pin} in GPIO{port}_MODER mode {mode} (needs 2, "
                         f"alternate function) and {afr} AF{function} (needs AF{af})")
