"""``python -m zocodegen.host.emulator --board stm32f746 FIRMWARE.elf``: run a board
firmware in its emulated board, USART1 on this process's stdin and stdout (raw bytes), the
way the native firmware's line is; the host starts it on a pty (host/devices.py). Exits with
the firmware's platform_exit status; a fault (what the silicon would refuse, a bus or usage
fault) is described on stderr and exits with 131. ``--report`` adds the clocks it ran."""
from __future__ import annotations

import argparse
import os
import select
import sys
from pathlib import Path

from .clocks import MHZ, BoardFault
from .machine import BOARDS, Board


class StdioLine:
    """The line on file descriptors 0 and 1."""

    def receive(self, seconds: float) -> bytes | None:
        ready, _, _ = select.select([0], [], [], seconds)
        if not ready:
            return b""
        data = os.read(0, 4096)
        return data or None

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(1, view):]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zocodegen.host.emulator",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--board", choices=BOARDS, required=True)
    parser.add_argument("--report", action="store_true",
                        help="print the clocks and instructions on stderr at the end")
    parser.add_argument("elf", type=Path)
    args = parser.parse_args(argv)
    try:
        board = Board(args.board, args.elf, StdioLine())
        report = board.run()
    except BoardFault as exc:
        print(f"emulated {args.board}: {exc}", file=sys.stderr)
        return 131
    if report.fault:
        print(f"emulated {args.board}: {report.fault}", file=sys.stderr)
    if args.report:
        print(f"emulated {args.board}: SYSCLK {report.sysclk_hz / MHZ:g} MHz, USART1 "
              f"{report.usart_baud:.0f} baud, {report.instructions} instructions",
              file=sys.stderr)
    return report.status if report.status is not None else 131


if __name__ == "__main__":
    sys.exit(main())
