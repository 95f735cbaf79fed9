"""The fleet server's state, apart from Flower (flower_app.py only moves its messages): the
round's model, an instruction per device, the replayed-and-averaged result, and the record
of every round on disk so a restarted server resumes from its last round (docs/fleet.md).

``OUT/model.bin`` is the aggregated checkpoint after the last finished round (CRC-32,
written atomically); ``OUT/fleet.json`` records the build, the rounds, and per round every
participant's seed, upload kind and size, download size, weight and fate.
"""
from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from zocodegen.errors import DataError, UserError
from zocodegen.files import read_text
from zocodegen.limits import TRAIN_INTEGERS
from zocodegen.training import checkpoint
from zocodegen.training.simulator import Params, initial_params, predict
from .updates import (LEVEL, FleetModel, Update, fedavg, fedavg_weights, parameter_delta,
                      reconstruct)

#: Bytes of an instruction besides the parameters and their hash: round, first step, steps,
#: seed (u32 each)
INSTRUCTION_FIELDS = 16
#: Bytes of an update besides its payload: kind (1), records (4), CRC-32 (4), model hash (32)
UPDATE_FIELDS = 41


@dataclass(frozen=True)
class Outcome:
    """One device in one round."""

    node: int
    seed: int
    device: str = ""  # what the device calls itself (its data image's name)
    download: int = 0  # bytes sent to it
    upload: int = 0  # bytes it sent (0: nothing usable arrived)
    kind: str = ""
    samples: int = 0  # the training records it claims
    weight: int = 0  # its FedAvg weight: the claim, capped (fedavg_weights)
    accepted: bool = False
    reason: str = ""  # why it was left out


def device_seed(base: int, round_index: int, node: int) -> int:
    """The device's stream seed for the round (FedSPZO's "different initial seed to each
    client"): the first 4 bytes of SHA-256 over base, round and node; never 0."""
    digest = hashlib.sha256(f"{base}:{round_index}:{node}".encode()).digest()
    return int.from_bytes(digest[:4], "little") or 1


def test_split(path: str | Path | None, model: FleetModel
               ) -> tuple[np.ndarray, np.ndarray] | None:
    """The test split of the --test data (none without), checked against the model (its
    input, its classes): by the command before Flower starts, so bad test data is one line
    and not a traceback of the ServerApp, and again by the ServerApp, which scores on it."""
    if not path:
        return None
    from zocodegen.training.data import load_dataset
    data = load_dataset(Path(path), model.graph, model.plan.num_classes)
    if data.x_test is None:
        raise UserError(f"{path} has no test split to score the fleet's model on")
    return data.x_test, data.y_test


class FleetServer:
    """Rounds of K local steps: ``instruction`` per device, then ``finish`` with what came
    back. Resumes from ``out`` when it holds an earlier run of the same model and build."""

    def __init__(self, model: FleetModel, out: Path, steps: int, rounds: int,
                 test: tuple[np.ndarray, np.ndarray] | None = None):
        if steps < 1 or rounds < 1:
            raise UserError("--steps-per-round and --rounds must be at least 1")
        cfg = model.plan.config
        if not cfg.steps and cfg.schedule == "cosine":
            raise UserError("the fleet's build leaves its cosine schedule's T to each "
                            "device's data (no --steps): rebuild with --steps T, which every "
                            "device then shares, or --schedule constant")
        most = TRAIN_INTEGERS["steps"][1]
        if rounds * steps > most:  # a device counts its steps in 32 bits
            raise UserError(f"{rounds} rounds of {steps} steps are {rounds * steps} steps, "
                            f"beyond the {most} a device counts (--steps at most {most}): "
                            "fewer --rounds or --steps-per-round")
        if cfg.schedule == "cosine" and rounds * steps > cfg.steps:
            raise UserError(f"{rounds} rounds of {steps} steps run past the build's cosine "
                            f"schedule (--steps {cfg.steps}): rebuild with --steps "
                            f"{rounds * steps} or more, or --schedule constant")
        self.model, self.out, self.steps = model, Path(out), steps
        self.rounds, self.test = rounds, test
        self.out.mkdir(parents=True, exist_ok=True)
        self.record_path, self.model_path = self.out / "fleet.json", self.out / "model.bin"
        self.record = self._load_record()
        self._set_params(self._load_params())
        self.previous: tuple[str, checkpoint.Checkpoint] | None = None  # last round's model
        self.begin()

    # ---- state -------------------------------------------------------------------------
    def _identity(self) -> dict:
        return {"model_sha256": self.model.sha256.hex(),
                "config": self.model.plan.config.as_dict(), "steps_per_round": self.steps}

    def _load_record(self) -> dict:
        if not self.record_path.is_file():
            return {**self._identity(), "upload": self.upload_rule(),
                    "trainable_bytes": self.model.trainable_bytes, "rounds": []}
        try:
            record = json.loads(read_text(self.record_path, "run record"))
        except ValueError as exc:
            raise UserError(f"{self.record_path} is damaged ({exc}); move it away to start "
                            "a new fleet run") from None
        mine = self._identity()
        if {k: record.get(k) for k in mine} != json.loads(json.dumps(mine)):
            raise UserError(f"{self.out} holds a fleet run of another model, build or "
                            "--steps-per-round; choose another output directory")
        return record

    def _load_params(self) -> Params:
        if not self.record["rounds"]:
            return initial_params(self.model.graph, self.model.plan)
        try:
            return self.model.params(checkpoint.read_bytes(self.model_path),
                                     str(self.model_path))
        except (OSError, DataError) as exc:
            raise UserError(f"cannot resume from {self.model_path}: {exc}") from None

    def upload_rule(self) -> str:
        """What devices upload (the manifest says it): replayable builds send whichever of
        scalars and delta is smaller; others (NP, BP or INT8 layers) send deltas."""
        if self.model.replayable:
            return "scalars or delta, whichever is smaller"
        modes = sorted({layer.mode for layer in self.model.plan.layers} - {"WP"})
        return (f"delta: {', '.join(modes) or 'these'} layers are not replayable from "
                "scalars (build without --record-scalars)")

    @property
    def round(self) -> int:
        """The round to run next (0-based)."""
        return len(self.record["rounds"])

    @property
    def done(self) -> bool:
        return self.round >= self.rounds

    def _set_params(self, params: Params) -> None:
        self.params = params
        blob = self.model.checkpoint(params, 0, 1)
        # the round's parameters by hash (checkpoint.parameters_sha256): what a device
        # compares with the last checkpoint it received
        self.params_sha256 = checkpoint.parameters_sha256(blob)
        self._layers = checkpoint.decode(blob)
        self._download_delta: bytes | None = None

    # ---- a round -----------------------------------------------------------------------
    def instruction(self, node: int, holds: str | None = None) -> dict:
        """What device ``node`` gets this round: its seed, the parameters' hash, and the
        parameters unless ``holds`` says it has them: as a delta from the last round's model
        when it holds that one and the delta is smaller, else the round's checkpoint."""
        seed = device_seed(self.model.plan.config.seed, self.round, node)
        first = self.round * self.steps
        start = self.model.checkpoint(self.params, first, seed)
        self._starts[node] = start
        message = {"round": self.round, "first-step": first, "steps": self.steps,
                   "seed": seed, "model-sha256": self.model.sha256.hex(),
                   "params-sha256": self.params_sha256}
        sent = 32  # the hash
        if holds != self.params_sha256:
            delta = self._delta_from(holds)
            if delta is not None and len(delta) < len(start):
                message["delta"], message["delta-from"] = delta, holds
                sent += len(delta) + 32
            else:
                message["checkpoint"] = start
                sent = len(start)
        self._outcomes[node] = Outcome(node, seed, download=INSTRUCTION_FIELDS + sent)
        return message

    def _delta_from(self, holds: str | None) -> bytes | None:
        """The round's parameters as a compressed delta from the last round's, when that is
        what the device holds (computed once per round)."""
        if self.previous is None or holds != self.previous[0]:
            return None
        if self._download_delta is None:
            self._download_delta = zlib.compress(
                parameter_delta(self.previous[1], self._layers), LEVEL)
        return self._download_delta

    def left_out(self, node: int, reason: str, device: str = "") -> None:
        self._outcomes[node] = replace(self._outcomes[node], reason=reason, device=device)

    def receive(self, node: int, update: Update, device: str = "") -> None:
        """Replays (or applies) a device's update; a bad one is left out with its reason."""
        outcome = replace(self._outcomes[node], device=device, kind=update.kind,
                          upload=len(update.payload) + UPDATE_FIELDS, samples=update.samples)
        try:
            if update.samples < 1:
                raise DataError(f"it reports {update.samples} training records")
            params = reconstruct(self.model, self._starts[node], self.steps, update)
        except DataError as exc:
            self._outcomes[node] = replace(outcome, reason=str(exc))
            return
        self._outcomes[node] = replace(outcome, accepted=True)
        self._accepted[node] = params

    def begin(self) -> None:
        """Forgets the last round's devices: call before the round's instructions."""
        self._starts: dict[int, bytes] = {}
        self._outcomes: dict[int, Outcome] = {}
        self._accepted: dict[int, Params] = {}

    def finish(self) -> dict:
        """FedAvg over the accepted devices (in node order), saved with the round's record;
        a round nobody finished keeps the model."""
        nodes = sorted(self._accepted)
        if nodes:
            weights = fedavg_weights([self._outcomes[n].samples for n in nodes])
            for n, weight in zip(nodes, weights):
                self._outcomes[n] = replace(self._outcomes[n], weight=weight)
            self.previous = (self.params_sha256, self._layers)
            self._set_params(fedavg([(self._accepted[n], weight)
                                     for n, weight in zip(nodes, weights)]))
        outcomes = [self._outcomes[n] for n in sorted(self._outcomes)]
        answered = sum(1 for o in outcomes if o.upload)
        entry = {"round": self.round, "first_step": self.round * self.steps,
                 "params_sha256": self.params_sha256,
                 "upload_bytes": sum(o.upload for o in outcomes),
                 "download_bytes": sum(o.download for o in outcomes),
                 # FedAvg moving full parameters both ways, for the same devices
                 "fedavg_upload_bytes": answered * self.model.trainable_bytes,
                 "fedavg_download_bytes": len(outcomes) * self.model.trainable_bytes,
                 "participants": [asdict(o) for o in outcomes]}
        if self.test is not None:
            entry["accuracy"] = self._accuracy(self.params)
        step = (self.round + 1) * self.steps
        checkpoint.save_bytes(self.model_path, self.model.checkpoint(
            self.params, step, self.model.plan.config.seed))
        self.record["rounds"].append(entry)
        checkpoint.save_bytes(self.record_path, (json.dumps(self.record, indent=1) + "\n").encode())
        return entry

    def _accuracy(self, params: Params) -> float:
        x, y = self.test
        return float((predict(self.model.graph, params, x) == y).mean())

    def accuracy_before(self) -> float | None:
        if self.test is None:
            return None
        return self._accuracy(initial_params(self.model.graph, self.model.plan))
