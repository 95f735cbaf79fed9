"""``python -m zocodegen.host.emulator --board stm32f746 FIRMWARE.elf``: run a board
firmware in its emulated board, USART1 on this process's stdin and stdout (raw bytes), the
way the native firmware's line is; the host starts it on a pty (host/devices.py). Exits with
the firmware's platform_exit status; a fault (what the silicon would refuse, a bus or usage
fault) is described on stderr and exits with 131. ``--report`` adds the clocks it ran and
the memory it used; ``--report-json`` writes them to a file (the host asks for it when
ZOCODEGEN_EMULATOR_REPORT names one, host/devices.py)."""
from __future__ import annotations

import argparse
import json
import os
import select
import sys
from dataclasses import asdict
from pathlib import Path

from zocodegen.formats.link import DEFAULT_BAUD
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
    parser.add_argument("--baud", type=int, default=DEFAULT_BAUD,
                        help="the host's baud rate, which the firmware's USART1 must make "
                             f"(default {DEFAULT_BAUD})")
    parser.add_argument("--report", action="store_true",
                        help="print the clocks and instructions on stderr at the end")
    parser.add_argument("--report-json", type=Path, metavar="FILE",
                        help="write the report (clocks, instructions, stack and arena use) "
                             "as JSON at the end")
    parser.add_argument("elf", type=Path)
    args = parser.parse_args(argv)
    try:
        board = Board(args.board, args.elf, StdioLine(), args.baud)
        report = board.run()
    except BoardFault as exc:
        print(f"emulated {args.board}: {exc}", file=sys.stderr)
        return 131
    if report.fault:
        print(f"emulated {args.board}: {report.fault}", file=sys.stderr)
    if args.report_json:
        args.report_json.write_text(json.dumps(asdict(report), indent=2) + "\n")
    if args.report:
        print(f"emulated {args.board}: SYSCLK {report.sysclk_hz / MHZ:g} MHz, USART1 "
              f"{report.usart_baud:.0f} baud, {report.instructions} instructions, stack "
              f"{report.stack_used_bytes} of {report.stack_bytes} bytes used, arena "
              f"{report.arena_bytes} bytes", file=sys.stderr)
    return report.status if report.status is not None else 131


if __name__ == "__main__":
    sys.exit(main())
