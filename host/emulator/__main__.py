"""``python -m zocodegen.host.emulator --board stm32f746 FIRMWARE.elf``: run a board
firmware in its emulated board, USART1 on this process's stdin and stdout (raw bytes), the
way the native firmware's line is; the host starts it on a pty (host/devices.py). Exits with
the firmware's platform_exit status, or 0 when stdin ends while the firmware waits to read
(commands from a file: everything it wrote is on stdout by then); a fault (what the silicon would refuse, a bus or usage
fault) is described on stderr and exits with 131. ``--report`` adds the clocks it ran and
the memory it used; ``--report-json`` writes them to a file (the host asks for it when
ZOCODEGEN_EMULATOR_REPORT names one, host/devices.py). ``--card FILE`` puts an SD card backed
by FILE in the board's slot (sdcard.py; docs/emulated.md "The SD card"), with faults to inject;
a power cut it injects exits with 133 and says so on stderr; bad input (an ELF or card file
that is not there) exits with 2 and one line."""
from __future__ import annotations

import argparse
import json
import os
import select
import sys
from dataclasses import asdict
from pathlib import Path

from zocodegen.errors import UserError
from zocodegen.files import write_atomic
from zocodegen.formats.link import DEFAULT_BAUD
from .clocks import MHZ, BoardFault
from .machine import BOARDS, Board
from .sdcard import FAULT_KINDS, Faults, SDCard


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


class NoHost(StdioLine):
    """A line no host is on (a field trainer's run): nothing ever arrives, and the line is
    never "closed", so the run ends only at platform_exit, a fault or a power cut."""

    def receive(self, seconds: float) -> bytes | None:
        return b""


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
    parser.add_argument("--card", type=Path, metavar="FILE",
                        help="an SD card in the slot whose sectors are FILE's (the packed "
                             "image); without it the slot is empty")
    parser.add_argument("--card-absent", action="store_true",
                        help="leave the card out of the slot (the firmware sees no card)")
    parser.add_argument("--card-fault", action="append", default=[], metavar="KIND:N",
                        help=f"inject a card fault, KIND one of {', '.join(FAULT_KINDS)}: at the "
                             "Nth command (cmd-*), sector sent (read-*) or sector received "
                             "(write-*) since power-on; repeatable")
    parser.add_argument("--power-cut-at-write", metavar="N[:BYTES]",
                        help="cut the power during the Nth write command: BYTES of it (default "
                             "half) reach FILE, then the run ends with status 133")
    parser.add_argument("--no-host", action="store_true",
                        help="no host on USART1: it receives nothing and stdin is not read (a "
                             "field trainer, docs/sdcard.md); what the firmware sends still "
                             "goes to stdout")
    parser.add_argument("elf", type=Path)
    args = parser.parse_args(argv)
    card = None
    try:
        if args.card is not None and not args.card_absent:
            if not args.card.is_file():
                raise UserError(f"card file {args.card} is not a file: give a copy of the "
                                "image `zocodegen pack` wrote (the run writes to it)")
            card = SDCard(args.card, faults=Faults.parse(args.card_fault,
                                                         args.power_cut_at_write))
        line = NoHost() if args.no_host else StdioLine()
        board = Board(args.board, args.elf, line, args.baud, card=card)
        report = board.run()
    except UserError as exc:  # bad input (an ELF that is not there): one line, as the CLI
        print(f"emulated {args.board}: {exc}", file=sys.stderr)
        return 2
    except (BoardFault, ValueError, OSError) as exc:
        print(f"emulated {args.board}: {exc}", file=sys.stderr)
        return 131
    finally:
        if card is not None:
            card.close()
    if report.fault:
        print(f"emulated {args.board}: {report.fault}", file=sys.stderr)
    if report.power_cut:
        print(f"emulated {args.board}: {report.power_cut}", file=sys.stderr)
    if report.closed:
        print(f"emulated {args.board}: the host closed the line while the firmware waited to "
              f"read: the session ends ({report.received_bytes} bytes received, "
              f"{report.sent_bytes} sent)", file=sys.stderr)
    if args.report_json:
        write_atomic(args.report_json, (json.dumps(asdict(report), indent=2) + "\n").encode())
    if args.report:
        print(f"emulated {args.board}: SYSCLK {report.sysclk_hz / MHZ:g} MHz, USART1 "
              f"{report.usart_baud:.0f} baud, {report.instructions} instructions, stack "
              f"{report.stack_used_bytes} of {report.stack_bytes} bytes used, arena "
              f"{report.arena_bytes} bytes", file=sys.stderr)
    return report.status if report.status is not None else 131


if __name__ == "__main__":
    sys.exit(main())
