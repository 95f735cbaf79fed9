"""Progress of a long command: tqdm's bar on a terminal; where the output is not one (a log
file, CI, nohup) a plain line every LINE_SECONDS instead, as pip and tqdm's own file mode
do, so that block trials or a simulation are never silent for minutes (issue 64 item 4)."""
from __future__ import annotations

import sys
from typing import Any

from tqdm import tqdm

#: How often a line is printed when the output is not a terminal; a run shorter than this
#: prints none.
LINE_SECONDS = 10.0


class _Lines:
    """tqdm's file where the output is not a terminal: each refresh as one line of stdout
    (a run's progress lines go there; stderr is for errors, one line each)."""

    def write(self, text: str) -> None:
        text = text.strip("\r\n")
        if text.strip():
            sys.stdout.write(text + "\n")

    def flush(self) -> None:
        sys.stdout.flush()


class _LineBar(tqdm):
    """A bar that prints lines (its file is _Lines). Closing it does not print its last line
    again when that line already showed the end: a run's closing lines (the guard's) come
    between its last step and the close, and two identical "100%" lines read as two runs."""

    _shown: tuple[float, str | None] | None = None

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if msg is None:
            self._shown = (self.n, self.postfix)  # set_postfix keeps it as a string
        return super().display(msg, pos)

    def close(self) -> None:
        if not self.disable and self._shown == (self.n, self.postfix):
            self.leave = False  # the end is on screen: close without a line
        super().close()


def progress_bar(progress: bool | None, **options: Any) -> tqdm:
    """``progress`` None (the command line): a bar on a terminal, a line every LINE_SECONDS
    elsewhere; True: a bar; False: nothing."""
    if progress is None and not sys.stderr.isatty():
        return _LineBar(file=_Lines(), delay=LINE_SECONDS, mininterval=LINE_SECONDS,
                        ncols=100, **options)
    return tqdm(disable=None if progress is None else not progress, dynamic_ncols=True,
                **options)


def in_lines(bar: tqdm) -> bool:
    """Whether ``bar`` prints lines: its caller then prints its own lines directly (tqdm's
    write would repeat the progress line after each of them)."""
    return bar.disable or isinstance(bar, _LineBar)
