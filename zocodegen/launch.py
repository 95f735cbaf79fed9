"""The ``zocodegen`` command's entry point, kept light: loading the commands' modules (numpy,
the frontends, the trainer) takes a second or more on a busy machine. A Ctrl-C in that time
waits for the loading to end and is then the contract's one line and exit 130
(docs/contract.md), as it is later: raised inside an import, it would leave a traceback, or
a C extension's ImportError (exit 1), instead."""
from __future__ import annotations

import signal

from .errors import interrupted


def main(argv: list[str] | None = None) -> int:
    pressed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        from .cli import main as run_command
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        return interrupted()
    return run_command(argv)
