"""One fleet device, apart from Flower (flower_app.py only moves its messages): takes the
round's instruction, trains K steps on the device with `zocodegen train`'s Trainer (so
resets, retransmissions and CRC-checked checkpoints behave as in a single run), and answers
with the smaller update (updates.py).

``STATE/`` keeps the round's run directory (checkpoint, scalars, metrics) and ``held.bin``,
the last round checkpoint received, so a server that knows the device holds the round's
parameters sends only their hash, and one that knows it holds the last round's sends the
difference.
"""
from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path

from zocodegen.errors import DataError
from zocodegen.training import checkpoint, replay
from zocodegen.formats.image import verify_image
from ..devices import Device
from ..trainer import Trainer
from .updates import Update, apply_delta, inflate, make_update, upload_limit


class DeviceClient:
    """A device (port, native or QEMU firmware), its data image and its build directory."""

    def __init__(self, device: Callable[[], Device], image: Path, build: Path, state: Path,
                 timeout: float = 60.0, log: Callable[[str], None] = print):
        self.device, self.image, self.state = device, Path(image), Path(state)
        self.config, self.model_sha256 = replay.build_config(Path(build))
        self.timeout, self.log = timeout, log
        self.held_path = self.state / "held.bin"
        self.samples = verify_image(self.image).count("train")
        self.state.mkdir(parents=True, exist_ok=True)

    def holds(self) -> str | None:
        """The parameters' hash of the last round checkpoint received, if still here."""
        try:
            blob = checkpoint.read_bytes(self.held_path)
            checkpoint.decode(blob, str(self.held_path))
        except (OSError, DataError):
            return None
        return checkpoint.parameters_sha256(blob)

    def _start(self, message: dict) -> bytes:
        """The round's checkpoint: sent, or the held one with the round's step and seed."""
        if message["model-sha256"] != self.model_sha256:
            raise DataError(f"the server trains model {message['model-sha256'][:12]}..., this "
                            f"device's build is for {self.model_sha256[:12]}...")
        held_hash = self.holds()
        if "checkpoint" in message:
            blob = bytes(message["checkpoint"])
            checkpoint.decode(blob, "the server's checkpoint")
        elif held_hash is not None and held_hash in (message["params-sha256"],
                                                     message.get("delta-from")):
            held = checkpoint.decode(checkpoint.read_bytes(self.held_path))
            if held_hash != message["params-sha256"]:  # the last round's model + the delta
                delta = inflate(bytes(message["delta"]), upload_limit("delta", held, 0, ()),
                                "server's delta")
                held = apply_delta(held, delta, 0)
            blob = checkpoint.encode(dataclasses.replace(
                held, step=message["first-step"], seed=message["seed"]))
        else:
            raise DataError("the server sent the parameters by reference to a model this "
                            "device does not hold")
        if checkpoint.parameters_sha256(blob) != message["params-sha256"]:
            raise DataError("the round's checkpoint does not match its parameters hash")
        checkpoint.save_bytes(self.held_path, blob)
        return blob

    def train(self, message: dict) -> Update:
        """K steps on the device from the round's checkpoint; the update to upload."""
        start = self._start(message)
        run = self.state / f"round-{message['round']:04d}"
        shutil.rmtree(run, ignore_errors=True)
        run.mkdir(parents=True)
        stop = message["first-step"] + message["steps"]
        Trainer(self.device(), self.image, run, steps=stop, checkpoint_every=message["steps"],
                timeout=self.timeout, progress=False, log=self.log, start=start).run()
        end = checkpoint.read_bytes(run / "checkpoint.bin")
        if not self.config.record_scalars:
            return make_update(start, end, None, self.samples)
        return make_update(start, end, replay.read(run / "scalars.bin"), self.samples)
