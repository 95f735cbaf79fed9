"""A faulty serial line for tests: sits between the host and a firmware and corrupts, drops,
duplicates and delays bytes and whole frames at stated rates, in both directions.

The host side is a pty (the host opens ``proxy.url`` with pyserial like any serial port); the
firmware side is the firmware's own port. Faults are drawn from a seeded generator, one per
direction, so a run's fault pattern depends only on the traffic.
"""
from __future__ import annotations

import os
import random
import select
import threading
import time
import tty
from dataclasses import dataclass, field

from zocodegen.host.link.server import Port, read_some


@dataclass
class FaultRates:
    """Probabilities per frame (frame_*) and per byte (byte_*)."""
    frame_corrupt: float = 0.0
    frame_drop: float = 0.0
    frame_duplicate: float = 0.0
    frame_delay: float = 0.0
    delay_seconds: float = 0.02
    byte_corrupt: float = 0.0
    byte_drop: float = 0.0


@dataclass
class FaultCounts:
    frames: int = 0
    corrupted: int = 0
    dropped: int = 0
    duplicated: int = 0
    delayed: int = 0
    bytes_corrupted: int = 0
    bytes_dropped: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def total(self) -> int:
        return (self.corrupted + self.dropped + self.duplicated + self.delayed
                + self.bytes_corrupted + self.bytes_dropped)


class FaultyProxy:
    def __init__(self, device: Port, rates: FaultRates, seed: int = 0):
        self.device = device
        self.rates = rates
        self.counts = FaultCounts()
        self._master, slave = os.openpty()
        tty.setraw(slave)
        self.url = os.ttyname(slave)
        self._slave = slave  # kept open until the host has opened its side
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._pump, args=(self._from_host, self._to_device,
                                                      random.Random(seed)), daemon=True),
            threading.Thread(target=self._pump, args=(self._from_device, self._to_host,
                                                      random.Random(seed + 1)), daemon=True)]
        for thread in self._threads:
            thread.start()

    # -- the two ends ------------------------------------------------------------------
    def _from_host(self) -> bytes:
        ready, _, _ = select.select([self._master], [], [], 0.05)
        if not ready:
            return b""
        try:
            return os.read(self._master, 4096)
        except OSError:  # the host closed its side
            time.sleep(0.05)
            return b""

    def _to_host(self, data: bytes) -> None:
        os.write(self._master, data)

    def _from_device(self) -> bytes:
        try:  # not read(4096): it would hold every response for the port's whole timeout
            return read_some(self.device)
        except Exception:  # noqa: BLE001 - the firmware went away; the test notices
            time.sleep(0.05)
            return b""

    def _to_device(self, data: bytes) -> None:
        try:
            self.device.write(data)
        except Exception:  # noqa: BLE001
            pass

    # -- faults ------------------------------------------------------------------------
    def _pump(self, read, write, rng: random.Random) -> None:
        pending = bytearray()
        while not self._stop.is_set():
            data = read()
            if not data:
                continue
            pending += data
            while b"\0" in pending:
                end = pending.index(0) + 1
                frame, pending = bytes(pending[:end]), pending[end:]
                self._forward(frame, write, rng)

    def _forward(self, frame: bytes, write, rng: random.Random) -> None:
        r, c = self.rates, self.counts
        with c.lock:
            c.frames += 1
        if rng.random() < r.frame_drop:
            with c.lock:
                c.dropped += 1
            return
        out = bytearray()
        for byte in frame:
            if rng.random() < r.byte_drop:
                with c.lock:
                    c.bytes_dropped += 1
                continue
            if rng.random() < r.byte_corrupt:
                byte ^= 1 << rng.randrange(8)
                with c.lock:
                    c.bytes_corrupted += 1
            out.append(byte)
        if rng.random() < r.frame_corrupt and len(out) > 1:
            out[rng.randrange(len(out) - 1)] ^= rng.randrange(1, 256)
            with c.lock:
                c.corrupted += 1
        if rng.random() < r.frame_delay:
            with c.lock:
                c.delayed += 1
            time.sleep(r.delay_seconds)
        copies = 2 if rng.random() < r.frame_duplicate else 1
        if copies == 2:
            with c.lock:
                c.duplicated += 1
        for _ in range(copies):
            write(bytes(out))

    def inject_to_host(self, data: bytes) -> None:
        """Raw bytes on the host's line, outside any fault model (garbage tests)."""
        os.write(self._master, data)

    def host_connected(self) -> None:
        """Call once the host has opened ``url``: the proxy stops holding the slave open."""
        if self._slave is not None:
            os.close(self._slave)
            self._slave = None

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=2)
        self.host_connected()
        os.close(self._master)
