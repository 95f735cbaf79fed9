"""Draws a run's curves while `zocodegen train` serves the device, in a child Python that
imports zocodegen and nothing of the caller's.

A thread of the host's own process held Python's lock long enough during a drawing
(0.3-1.5 s) for the device to retransmit after 100 ms of silence (docs/link.md "Pacing
under QEMU"); a multiprocessing "spawn" pool avoided that but re-ran the caller's script in
its worker, so a plain script calling ``zocodegen.train()`` without an
``if __name__ == "__main__":`` guard died with BrokenProcessPool. This child is started as
``python -m zocodegen.host.curve_drawer`` instead: it reads pickled (rows, run directory,
title, accuracy split) jobs on its stdin and answers each with the drawing's exception or None.
"""
from __future__ import annotations

import os
import pickle
import select
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from zocodegen import errors
from zocodegen.training.metrics import MetricsRow, write_curves


class CurveDrawer:
    """One child for a run: matplotlib is imported once. ``submit`` returns at once;
    ``wait`` raises what the last drawing raised (a full disk: the writer's UserError, one
    line)."""

    def __init__(self) -> None:
        # -P: the caller's working directory is not on the child's path (a "numpy.py" there
        # is not imported); zocodegen's own folder is, whichever way it was found here
        root = str(Path(errors.__file__).resolve().parents[1])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [root, *filter(None, [os.environ.get("PYTHONPATH")])]))
        # its own session: Ctrl-C reaches the terminal's foreground process group, where
        # this child printed a KeyboardInterrupt traceback under "zocodegen: interrupted";
        # it ends when the parent, which handles the interruption, closes its stdin
        self._child = subprocess.Popen(
            [sys.executable, "-P", "-m", "zocodegen.host.curve_drawer"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True)
        self._busy = False  # a job was sent and its answer not read
        self._failure: BaseException | None = None

    def submit(self, rows: Sequence[MetricsRow], run_dir: Path, title: str,
               split: str = "test") -> None:
        """Draw ``rows`` (their accuracy column measured on ``split``) into ``run_dir``."""
        self.wait()
        try:
            pickle.dump((list(rows), Path(run_dir), title, split), self._child.stdin)
            self._child.stdin.flush()
        except BrokenPipeError:
            raise self._died() from None
        self._busy = True

    def idle(self) -> bool:
        """Whether a job can be submitted without waiting: none is under way, or its answer
        is in (collected here; its failure raised). Never blocks: a host that waited here
        for a drawing (0.1-1 s) left the device silent long enough to retransmit at every
        checkpoint of a fast model (docs/link.md)."""
        if self._busy and not select.select([self._child.stdout], [], [], 0)[0]:
            return False
        self.wait()
        return True

    def wait(self) -> None:
        self._collect()
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def close(self) -> None:
        """The drawing under way finishes first (what it raised, ``wait`` raises); then the
        child ends on its closed stdin."""
        self._collect()
        self._child.stdin.close()
        try:
            self._child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait()
        self._child.stdout.close()

    def _collect(self) -> None:
        if not self._busy:
            return
        self._busy = False
        try:
            self._failure = pickle.load(self._child.stdout)
        except EOFError:
            self._failure = self._died()

    def _died(self) -> errors.UserError:
        code = self._child.wait()
        return errors.UserError(f"the process drawing curves.png exited (code {code})")


def serve(jobs, answers) -> None:
    """The child: draw each job, answer with None or the exception it raised."""
    while True:
        try:
            rows, run_dir, title, split = pickle.load(jobs)
        except EOFError:
            return
        try:
            write_curves(rows, run_dir, title, split)
            failure = None
        except Exception as exc:  # noqa: BLE001 - handed to the parent, which raises it
            failure = exc
        try:
            answer = pickle.dumps(failure)
        except Exception:  # noqa: BLE001 - an exception that does not pickle: its text
            answer = pickle.dumps(RuntimeError(f"drawing curves.png: {failure}"))
        answers.write(answer)
        answers.flush()


if __name__ == "__main__":
    # the answers keep the pipe; anything printed while drawing goes to stderr
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, answers)
