"""Whether a packed image fits what trains on it, one rule for two callers: `train` checks it
against the firmware's HELLO before the first sector is served, `fleet local` checks every
device's image against the fleet's model before Flower starts (a device whose image does not
fit would only be left out of the rounds)."""
from __future__ import annotations

import math
from pathlib import Path

from zocodegen.errors import UserError
from zocodegen.formats import link as p
from zocodegen.formats.image import CHECKPOINT_SLOTS, ImageLayout, checkpoint_slot_bytes
from zocodegen.training.data import check_packed_for
from zocodegen.training.guard import MIN_VAL_RECORDS


def check_image_model(layout: ImageLayout, image: Path, model_sha256: bytes,
                      input_bytes: int, classes: int, input_scale: float,
                      input_zero_point: int, whose: str) -> None:
    """Refuse an image whose records do not fit a model (its input size, classes, the model it
    was packed for, its input quantization; ``input_scale`` 0: not quantized), naming the
    field; ``whose`` says which model ("the firmware's model")."""
    if layout.input_bytes != input_bytes:
        raise UserError(f"{image}: records hold {layout.input_bytes} input bytes "
                        f"({layout.dtype} {layout.input_shape}), {whose} takes "
                        f"{input_bytes}: pack the data for this model")
    if layout.num_classes > classes:
        raise UserError(f"{image}: {layout.num_classes} classes, {whose} has {classes} "
                        "outputs")
    check_packed_for(layout, image, model_sha256, whose)
    if layout.input_scale is not None and input_scale != 0 and (
            not math.isclose(layout.input_scale, input_scale, rel_tol=1e-6)
            or layout.input_zero_point != input_zero_point):
        raise UserError(f"{image}: inputs quantized with scale {layout.input_scale:g}, zero "
                        f"point {layout.input_zero_point}; {whose} input has scale "
                        f"{input_scale:g}, zero point {input_zero_point}")


def check_image(identity: p.Identity, layout: ImageLayout, image: Path) -> None:
    """Refuse an image this firmware cannot train on, naming the field."""
    if not identity.training or identity.checkpoint_bytes == 0:
        raise UserError("the firmware was built without training: rebuild it with "
                        "`zocodegen build MODEL --train full|sparse`")
    check_image_model(layout, image, identity.model_sha256, identity.input_bytes,
                      identity.classes, identity.input_scale, identity.input_zero_point,
                      "the firmware's model")
    capacity = layout.checkpoint_sectors * 512
    slots = CHECKPOINT_SLOTS if identity.guard else 1  # the guard's best: the second slot
    need = slots * checkpoint_slot_bytes(identity.checkpoint_bytes)
    if capacity < need:
        raise UserError(f"{image}: checkpoint area of {capacity} bytes, the firmware's "
                        f"{'two checkpoints (run and best) need' if slots == 2 else 'checkpoint needs'}"
                        f" {need}: pack again with --model MODEL (or a larger --checkpoint-kb)")
    if (identity.guard or identity.lr_auto) and layout.checked_val < MIN_VAL_RECORDS:
        what = "training guard" if identity.guard else "--lr auto"
        raise UserError(f"{image} has {layout.checked_val} validation records; the firmware's "
                        f"{what} needs at least {MIN_VAL_RECORDS} to measure: pack with a "
                        f"larger --val-fraction (or x_val), or build with --no-guard and a "
                        f"fixed --lr")
    if layout.count("train") == 0:
        raise UserError(f"{image} has no train records")
    if identity.selects_block and layout.count("train") < 2:
        raise UserError(f"{image} has 1 train record: the firmware selects its sparse block "
                        "by trials, which need a trial and a held-out record (pack at least 2, "
                        "or build with --block K)")
