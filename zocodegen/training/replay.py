"""Replayable training (issue 18, part 1): a run whose trained layers are all WP, with no
guard and a fixed eta, is determined by its starting parameters, its options and, per step
and layer, the Q query sums D_q the device computed (--record-scalars). ``replay`` rebuilds
the parameters from those alone, bit for bit: the server of a fleet can reproduce a device's
model from a few scalars per step (docs/training.md "Replay").

The scalar file (``RUN/scalars.bin``, written by ``zocodegen train``): the magic
``ZOSCAL02``; the run it belongs to, ``32 B model SHA-256, u32 seed, u32 steps, u16 queries,
u16 0, f32 lr, u32 CRC-32``, so a replay refuses another run's scalars; then per (step,
layer) a record ``u32 step, u16 layer, u16 count, count x int32, u32 CRC-32`` (zlib's CRC-32
of the record's bytes before it), little-endian. A record sent again (a device that
restarted from a checkpoint repeats steps) replaces the earlier one. ``ZOSCAL01`` files
(before the owner) are read, without the owner check.
"""
from __future__ import annotations

import dataclasses
import json
import struct
import zlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..files import file_sha256, read_input, read_text, write_atomic
from ..errors import DataError, UserError
from ..ir import Graph
from . import checkpoint
from .config import TrainConfig
from .plan import training_plan
from .plan_types import TrainingPlan
from .simulator import Params, initial_params, replay_step, to_checkpoint

MAGIC = b"ZOSCAL02"
LEGACY_MAGIC = b"ZOSCAL01"
_OWNER = struct.Struct("<32sIIHHf")
_HEAD = struct.Struct("<IHH")
_CRC = struct.Struct("<I")

Scalars = dict[tuple[int, int], np.ndarray]  # (step, trainable layer) -> int32 (Q,)


@dataclasses.dataclass(frozen=True)
class ScalarOwner:
    """The run a scalar file belongs to: what the device's HELLO and the build's manifest
    both say, so either side can name it."""
    model_sha256: bytes
    seed: int
    steps: int
    queries: int
    lr: float

    def encode(self) -> bytes:
        body = _OWNER.pack(self.model_sha256, self.seed, self.steps, self.queries, 0, self.lr)
        return body + _CRC.pack(zlib.crc32(body))

    @classmethod
    def of_build(cls, config: TrainConfig, model_sha256: bytes) -> "ScalarOwner":
        lr = float(np.float32(config.lr))  # the firmware's eta, as HELLO reports it
        return cls(model_sha256, config.seed, config.steps, config.queries, lr)

    def describe(self) -> str:
        return (f"model {self.model_sha256.hex()[:12]}..., seed {self.seed}, {self.steps} "
                f"steps, Q={self.queries}, lr {self.lr:g}")


def assemble(pieces: Iterable) -> Scalars:
    """The device's SCALARS pieces (formats.link.Scalars) as whole records."""
    parts: dict[tuple[int, int], np.ndarray] = {}
    for piece in pieces:
        key = (piece.step, piece.layer)
        values = parts.get(key)
        if values is None or len(values) != piece.total or piece.first == 0:
            values = parts[key] = np.zeros(piece.total, dtype=np.int32)
        values[piece.first:piece.first + len(piece.values)] = piece.values
    return parts


def encode_record(step: int, layer: int, values: np.ndarray) -> bytes:
    body = _HEAD.pack(step, layer, len(values)) + np.asarray(values, "<i4").tobytes()
    return body + _CRC.pack(zlib.crc32(body))


def write(path: Path, scalars: Scalars, owner: ScalarOwner) -> None:
    write_atomic(path, encode(scalars, owner), sync=True)


def read(path: Path) -> Scalars:
    """Every record of a scalar file, refusing a damaged one by position."""
    return decode(_read(path), str(path))[1]


def read_owner(path: Path) -> ScalarOwner | None:
    """The run a scalar file belongs to (None for a ``ZOSCAL01`` file, which does not say)."""
    return decode(_read(path), str(path))[0]


def _read(path: Path) -> bytes:
    return read_input(path, "scalars")


def encode(scalars: Scalars, owner: ScalarOwner) -> bytes:
    """A scalar file's bytes (what ``write`` stores and a fleet device uploads)."""
    return MAGIC + owner.encode() + b"".join(
        encode_record(s, l, v) for (s, l), v in sorted(scalars.items()))


def decode(data: bytes, where: str) -> tuple[ScalarOwner | None, Scalars]:
    """The owner and records of a scalar file's bytes; ``where`` names them in errors."""
    owner, pos = None, len(MAGIC)
    if data.startswith(MAGIC):
        end = pos + _OWNER.size
        if end + _CRC.size > len(data) or _CRC.unpack_from(data, end)[0] != zlib.crc32(
                data[pos:end]):
            raise DataError(f"{where}: the header naming its run is cut short or fails its "
                            "CRC-32")
        sha, seed, steps, queries, _, lr = _OWNER.unpack_from(data, pos)
        owner, pos = ScalarOwner(sha, seed, steps, queries, lr), end + _CRC.size
    elif not data.startswith(LEGACY_MAGIC):
        raise DataError(f"{where} is not a scalar file of `zocodegen train` (no {MAGIC!r})")
    out: Scalars = {}
    index = 0
    while pos < len(data):
        if pos + _HEAD.size > len(data):
            raise DataError(f"{where}: record {index} is cut short")
        step, layer, count = _HEAD.unpack_from(data, pos)
        end = pos + _HEAD.size + 4 * count
        if end + _CRC.size > len(data):
            raise DataError(f"{where}: record {index} (step {step}, layer {layer}) is cut short")
        (crc,) = _CRC.unpack_from(data, end)
        if crc != zlib.crc32(data[pos:end]):
            raise DataError(f"{where}: record {index} (step {step}, layer {layer}) fails its "
                            "CRC-32")
        out[(step, layer)] = np.frombuffer(data, "<i4", count, pos + _HEAD.size).astype(np.int32)
        pos, index = end + _CRC.size, index + 1
    return owner, out


def replay(plan: TrainingPlan, params: Params, scalars: Scalars, stop: int, first: int = 0
           ) -> Params:
    """Steps first..stop-1 rebuilt from the scalars, from the parameters before step
    ``first`` (with the stream seed ``plan.seed``); refuses a plan that is not replayable and
    a missing or wrongly sized record, naming it."""
    cfg = plan.config
    if cfg.guard or cfg.lr_auto or any(layer.mode != "WP" for layer in plan.layers):
        raise DataError("only runs built with --record-scalars (WP layers, no guard, fixed "
                        "--lr) can be replayed")
    for t in range(first, stop):
        sums = {}
        for key, count in plan.scalar_layout:
            values = scalars.get((t, key))
            if values is None or len(values) != count:
                found = "none" if values is None else f"{len(values)} values"
                raise DataError(f"no query sums for step {t}, trainable layer {key} "
                                f"(expected {count}, found {found}): the run's scalars "
                                "are incomplete")
            sums[key] = values
        params = replay_step(plan, params, t, sums)
    return params


def build_config(build: Path) -> tuple[TrainConfig, str]:
    """The training options and the model's SHA-256 (hex) a build recorded in its manifest."""
    try:
        manifest = json.loads(read_text(build / "manifest.json", "manifest"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{build} has no readable manifest.json ({exc}); pass the project "
                        "directory `zocodegen build` wrote") from None
    if not isinstance(manifest, dict) or not manifest.get("training"):
        raise UserError(f"{build} is not a training build (its manifest has no training)")
    try:  # an edited manifest may hold anything where the build wrote its records
        names = {f.name for f in dataclasses.fields(TrainConfig)}
        options = {k: v for k, v in manifest["training"].items() if k in names}
        options["layers"] = tuple(options.get("layers", ()))
        sha_hex = manifest["model"]["sha256"]
    except (AttributeError, KeyError, TypeError) as exc:
        raise UserError(f"{build}/manifest.json is damaged ({type(exc).__name__}: {exc}); "
                        "build the project again") from None
    return TrainConfig(**options), sha_hex


def model_build(model_path: Path, build: Path) -> tuple[TrainConfig, bytes]:
    """The build's training options and the model file's SHA-256, refusing a model file that
    is not the one the build was made from."""
    config, sha_hex = build_config(build)
    model_sha = file_sha256(Path(model_path), "model")
    if model_sha.hex() != sha_hex:
        raise UserError(f"{model_path} is another model than the one {build} was built from "
                        f"(sha256 {model_sha.hex()[:12]}... against {sha_hex[:12]}...)")
    return config, model_sha


def replay_build(model_path: Path, graph: Graph, build: Path, scalars_path: Path,
                 steps: int | None) -> bytes:
    """The checkpoint of the build's run after ``steps`` steps (all the scalars have, when
    None), rebuilt from the model file, the build's options and the scalars."""
    config, model_sha = model_build(model_path, build)
    if not config.record_scalars:
        raise UserError(f"{build} was built without --record-scalars: its device sends no "
                        "scalars to replay")
    plan = training_plan(graph, config)
    owner, scalars = decode(_read(scalars_path), str(scalars_path))
    expected = ScalarOwner.of_build(config, model_sha)
    if owner is not None and owner != expected:
        raise UserError(f"{scalars_path} belongs to another run ({owner.describe()}) than "
                        f"{build} ({expected.describe()}): pass the run's own scalars.bin")
    if steps is None:
        steps = 1 + max((step for step, _ in scalars), default=-1)
    params = replay(plan, initial_params(graph, plan), scalars, steps)
    return checkpoint.encode(to_checkpoint(plan, params, steps, model_sha))

