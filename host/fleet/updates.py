"""What a fleet device uploads after its K local steps and how the server gets the device's
parameters back from it (FedSPZO Alg. 1, "Reconstruct"; docs/fleet.md).

A device uploads one of two encodings, whichever is smaller:

* ``scalars``: the query sums of the round's steps (training/replay.py), step by step and
  layer by layer in the plan's order, each a zigzag LEB128 varint (the sums are mostly
  small: 1-3 bytes instead of 4), zlib-compressed. Steps, layers and Q are known to both
  sides, so nothing else is sent. The server replays them from the round's parameters with
  the device's seed: no data and no forward pass. Only for --record-scalars builds (every
  trained layer WP).
* ``delta``: new minus old parameters, per layer in checkpoint order (weights int16, biases
  int64, little-endian; a --scales layer's new float32 filter scales as they are),
  zlib-compressed. Any build; for tiny models the scalars of K steps can outweigh the model
  itself.

Either way the server rebuilds the device's checkpoint and accepts it only when its CRC-32
equals the one the device reported: a device that returns garbage contributes nothing.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zocodegen.errors import DataError, UserError
from zocodegen.formats.image import verify_image
from zocodegen.frontends import load_model
from zocodegen.ir import Graph
from zocodegen.training import checkpoint, replay
from zocodegen.training.config import TrainConfig
from zocodegen.training.estimators import REGISTRY
from zocodegen.training.plan import training_plan
from zocodegen.training.plan_types import TrainingPlan
from zocodegen.training.simulator import Params, from_checkpoint, to_checkpoint
from ..image_fit import check_image_model

KINDS = ("scalars", "delta")
#: zlib level for uploads: the slowest and smallest; a round's payload is a few KB
LEVEL = 9


@dataclass(frozen=True)
class FleetModel:
    """The model a fleet trains and the build every device runs (its manifest's options)."""

    graph: Graph
    plan: TrainingPlan
    sha256: bytes

    @classmethod
    def load(cls, model_path: Path, build: Path) -> FleetModel:
        config, sha = replay.model_build(model_path, build)
        if config.guard or config.lr_auto:
            raise UserError(f"{build} was built with the training guard or --lr auto, whose "
                            "decisions the server cannot rebuild; rebuild with --no-guard and "
                            "a fixed --lr")
        if config.mode == "sparse" and config.block is None:
            raise UserError(f"{build} selects its sparse block on the device; a fleet trains "
                            "one set of layers everywhere: rebuild with --block N")
        graph = load_model(model_path)
        return cls(graph, training_plan(graph, config), sha)

    @property
    def replayable(self) -> bool:
        """Devices can upload scalars: the build records them (every trained layer WP)."""
        return self.plan.config.record_scalars

    @property
    def trainable_bytes(self) -> int:
        return self.plan.parameter_bytes

    def checkpoint(self, params: Params, step: int, seed: int) -> bytes:
        """The checkpoint a device starts a round from: its own stream seed, eta as built."""
        return checkpoint.encode(to_checkpoint(self.with_seed(seed), params, step, self.sha256))

    def with_seed(self, seed: int) -> TrainingPlan:
        return dataclasses.replace(self.plan, run_seed=seed)

    def params(self, blob: bytes, where: str) -> Params:
        return from_checkpoint(self.graph, self.plan, checkpoint.decode(blob, where), self.sha256)

    def check_image(self, image: Path) -> None:
        """Refuse, before Flower starts, an image whose data does not fit this model (the
        rule `train` applies to the firmware's HELLO): a device given it would only be left
        out of every round."""
        x = self.graph.tensor(self.graph.inputs[0])
        quantized = x.quant is not None and np.dtype(x.dtype).kind in "iu"
        check_image_model(verify_image(image), image, self.sha256, x.nbytes,
                          self.plan.num_classes, x.quant.scalar_scale if quantized else 0.0,
                          x.quant.scalar_zero_point if quantized else 0, "the fleet's model")


@dataclass(frozen=True)
class Update:
    """One device's contribution to a round."""

    kind: str
    payload: bytes
    samples: int  # training records the device holds: its FedAvg weight
    checkpoint_crc: int  # CRC-32 of the device's checkpoint after the round
    model_sha256: str  # hex


def _varints(values: np.ndarray) -> bytes:
    out = bytearray()
    for v in values.astype(np.int64).tolist():
        u = (v << 1) ^ (v >> 63)  # zigzag: small magnitudes -> small codes
        while u >= 0x80:
            out.append(0x80 | (u & 0x7F))
            u >>= 7
        out.append(u)
    return bytes(out)


def _from_varints(data: bytes, count: int) -> np.ndarray:
    values, u, shift = [], 0, 0
    for byte in data:
        u |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            values.append((u >> 1) ^ -(u & 1))
            u, shift = 0, 0
        elif shift > 35:
            raise DataError("the scalars hold a varint longer than 5 bytes")
    if len(values) != count or shift:
        raise DataError(f"the scalars hold {len(values)} query sums, the round needs {count}")
    return np.array(values, dtype=np.int64)


Layout = tuple[tuple[int, int], ...]  # (record key, values) per step: plan.scalar_layout


def pack_scalars(scalars: replay.Scalars, steps: range, layout: Layout) -> bytes:
    """The query sums of ``steps`` x ``layout`` as varints (a missing record raises)."""
    rows = []
    for t in steps:
        for key, count in layout:
            row = scalars.get((t, key))
            if row is None or len(row) != count:
                raise DataError(f"the device's scalars lack step {t}, layer {key} "
                                f"({count} values)")
            rows.append(np.asarray(row))
    return _varints(np.concatenate(rows)) if rows else b""


def unpack_scalars(data: bytes, steps: range, layout: Layout) -> replay.Scalars:
    per_step = sum(count for _, count in layout)
    values = _from_varints(data, len(steps) * per_step)
    if np.abs(values).max(initial=0) >= 1 << 31:
        raise DataError("the scalars hold a query sum beyond int32")
    out, pos = {}, 0
    for t in steps:
        for key, count in layout:
            out[(t, key)] = values[pos:pos + count].astype(np.int32)
            pos += count
    return out


def recorded_layout(scalars: replay.Scalars) -> Layout:
    """The layout a device's own records show (its first step's keys and sizes)."""
    first = min((t for t, _ in scalars), default=0)
    return tuple((key, len(v)) for (t, key), v in sorted(scalars.items()) if t == first)


def parameter_delta(start: checkpoint.Checkpoint, end: checkpoint.Checkpoint) -> bytes:
    """New minus old parameters, layer by layer (weights int16, biases int64, little-endian),
    then a --scales layer's new filter scales as they are (float32: a difference of floats
    would not rebuild them exactly): a device's upload, and the server's download of a
    round's model to a device that holds the previous round's."""
    parts = []
    for a, b in zip(start.layers, end.layers):
        parts.append((b.weights.astype("<i2") - a.weights.astype("<i2")).tobytes())
        parts.append((b.bias.astype("<i8") - a.bias.astype("<i8")).tobytes())
        parts.append(b.scales.astype("<f4").tobytes())
    return b"".join(parts)


def make_update(start: bytes, end: bytes, scalars: replay.Scalars | None, samples: int
                ) -> Update:
    """The smaller encoding of the round from checkpoint ``start`` to ``end`` (bytes as
    the device saved them); ``scalars`` None: the build records none."""
    a = checkpoint.decode(start, "the round's checkpoint")
    b = checkpoint.decode(end, "the device's checkpoint")
    crc = int.from_bytes(end[-4:], "little")
    options = [("delta", zlib.compress(parameter_delta(a, b), LEVEL))]
    if scalars is not None:
        packed = pack_scalars(scalars, range(a.step, b.step), recorded_layout(scalars))
        options.append(("scalars", zlib.compress(packed, LEVEL)))
    kind, payload = min(options, key=lambda option: len(option[1]))
    return Update(kind, payload, samples, crc, a.model_sha256.hex())


def apply_delta(start: checkpoint.Checkpoint, data: bytes, steps: int) -> checkpoint.Checkpoint:
    """``start`` moved by a parameter_delta and ``steps`` steps on; DataError when the delta
    does not fit the checkpoint's layers or leaves int8 / int32."""
    layers, pos = [], 0
    for lp in start.layers:
        w_end = pos + 2 * lp.weights.size
        b_end = w_end + 8 * lp.bias.size
        s_end = b_end + 4 * lp.scales.size
        if s_end > len(data):
            raise DataError("the delta is shorter than the model's parameters")
        dw = np.frombuffer(data, "<i2", lp.weights.size, pos).astype(np.int64)
        db = np.frombuffer(data, "<i8", lp.bias.size, w_end)
        scales = np.frombuffer(data, "<f4", lp.scales.size, b_end).astype(np.float32)
        weights, bias = lp.weights.astype(np.int64) + dw, lp.bias.astype(np.int64) + db
        if (weights.min(initial=0) < -128 or weights.max(initial=0) > 127
                or bias.min(initial=0) < -(1 << 31) or bias.max(initial=0) >= 1 << 31):
            raise DataError("the delta takes parameters out of their int8 / int32 range")
        if not np.all(np.isfinite(scales)) or np.any(scales <= 0):
            raise DataError("the delta's filter scales are not positive numbers")
        layers.append(dataclasses.replace(lp, weights=weights.astype(np.int8),
                                          bias=bias.astype(np.int32), scales=scales))
        pos = s_end
    if pos != len(data):
        raise DataError("the delta is longer than the model's parameters")
    return dataclasses.replace(start, step=start.step + steps, layers=tuple(layers))


def upload_limit(kind: str, start: checkpoint.Checkpoint, steps: int, layout: Layout) -> int:
    """The most bytes an honest upload inflates to: the delta's exact size, or 5 bytes (the
    longest varint) per query sum of the round."""
    if kind == "delta":
        return sum(2 * lp.weights.size + 8 * lp.bias.size + 4 * lp.scales.size
                   for lp in start.layers)
    return 5 * steps * sum(count for _, count in layout)


def inflate(payload: bytes, limit: int, what: str) -> bytes:
    """zlib-decompresses at most ``limit`` bytes: a payload that inflates beyond what the
    round can need (a "zip bomb" from a faulty or hostile device) is refused, not unpacked."""
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(payload, limit + 1)
    except zlib.error as exc:
        raise DataError(f"the {what} payload does not decompress ({exc})") from None
    if len(data) > limit or inflater.unconsumed_tail:
        raise DataError(f"the {what} payload inflates beyond the {limit:,} bytes a round "
                        "can need")
    if not inflater.eof:
        raise DataError(f"the {what} payload is cut short")
    return data


def step_bound(config: TrainConfig) -> int:
    """The most LSB update clipping lets a weight move in one step (the step is rounded half
    away from zero), or 0 when no such bound holds: clipping off, an integer-only estimator
    (its own rounding) or layers trained by back-propagation."""
    if REGISTRY[config.estimator].integer_only or config.bp_layers:
        return 0
    return math.floor(config.max_step + 0.5)


def _check_moves(start: checkpoint.Checkpoint, end: checkpoint.Checkpoint, bound: int) -> None:
    """A delta upload moves no weight further than the round's steps of update clipping
    could: one device's pull on the average is bounded even when it lies (scalars uploads
    are replayed, so they need no such check)."""
    if bound <= 0:
        return
    for a, b in zip(start.layers, end.layers):
        moved = int(np.abs(b.weights.astype(np.int16) - a.weights.astype(np.int16)).max(
            initial=0))
        if moved > bound:
            raise DataError(f"the delta moves a weight of layer {a.op_index} by {moved} LSB, "
                            f"more than the round's steps of update clipping allow ({bound})")


def reconstruct(model: FleetModel, start: bytes, steps: int, update: Update) -> Params:
    """The device's parameters after the round, rebuilt from the round's checkpoint and the
    update; DataError (one line, naming what is wrong) when the update is unusable or its
    result is not what the device reported."""
    if update.model_sha256 != model.sha256.hex():
        raise DataError(f"the update is for model {update.model_sha256[:12]}..., the fleet "
                        f"trains {model.sha256.hex()[:12]}...")
    if update.kind not in KINDS:
        raise DataError(f"unknown update kind {update.kind!r}")
    first = checkpoint.decode(start, "the round's checkpoint")
    data = inflate(update.payload, upload_limit(update.kind, first, steps,
                                                model.plan.scalar_layout), update.kind)
    if update.kind == "delta":
        moved = apply_delta(first, data, steps)
        _check_moves(first, moved, steps * step_bound(model.plan.config))
        blob = checkpoint.encode(moved)
    else:
        if not model.replayable:
            raise DataError("scalars from a build that does not record them")
        plan = model.with_seed(first.seed)
        scalars = unpack_scalars(data, range(first.step, first.step + steps),
                                 plan.scalar_layout)
        params = replay.replay(plan, model.params(start, "the round's checkpoint"), scalars,
                               first.step + steps, first.step)
        blob = checkpoint.encode(to_checkpoint(plan, params, first.step + steps, model.sha256))
    crc = int.from_bytes(blob[-4:], "little")
    if crc != update.checkpoint_crc:
        raise DataError(f"the rebuilt checkpoint's CRC-32 {crc:08x} is not the device's "
                        f"{update.checkpoint_crc:08x}")
    return model.params(blob, "the rebuilt checkpoint")


#: A device weighs at most this many times the round's lower median claim of training
#: records: one that claims far more records than the others cannot dominate the average,
#: and an honest device with up to 4x the typical data keeps its full weight.
WEIGHT_CAP = 4


def fedavg_weights(claims: list[int]) -> list[int]:
    """The FedAvg weight of each device: the training records it claims, at most WEIGHT_CAP
    times the round's lower median claim (with two devices, the smaller one's)."""
    cap = WEIGHT_CAP * statistics.median_low(claims)
    return [min(claim, cap) for claim in claims]


def fedavg(contributions: list[tuple[Params, int]]) -> Params:
    """FedAvg (weighted by fedavg_weights) of integer parameters: the weighted mean in
    float64, summed in the order given, rounded half away from zero, saturated to the
    tensor's integer type; float32 filter scales (--scales) take the mean rounded to
    float32."""
    total = sum(weight for _, weight in contributions)
    out: Params = {}
    for name, first in contributions[0][0].items():
        acc = np.zeros(first.shape, dtype=np.float64)
        for params, weight in contributions:
            acc += params[name].astype(np.float64) * weight
        mean = acc / total
        if np.issubdtype(first.dtype, np.floating):
            out[name] = mean.astype(first.dtype)
            continue
        rounded = np.sign(mean) * np.floor(np.abs(mean) + 0.5)
        info = np.iinfo(first.dtype)
        out[name] = np.clip(rounded, info.min, info.max).astype(first.dtype)
    return out
