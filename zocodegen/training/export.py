"""Checkpoint -> the trained model as a normal model file (`zocodegen export`)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DataError
from ..model_export import export_model
from ..files import file_sha256
from ..ir import Graph
from ..ops.table import TRAINABLE_OP_TYPES
from . import checkpoint


def checkpoint_tensors(graph: Graph, ckpt: checkpoint.Checkpoint) -> dict[str, np.ndarray]:
    """IR tensor name -> trained value, for every tensor the checkpoint changes. Tensors equal
    to the model's own values are left out (an ONNX FC's implicit zero bias has no initializer
    to write, and needs none while it is untouched)."""
    updated: dict[str, np.ndarray] = {}
    for lp in ckpt.layers:
        if lp.op_index >= len(graph.ops) or graph.ops[lp.op_index].type not in TRAINABLE_OP_TYPES:
            raise DataError(f"checkpoint layer {lp.op_index} is not a trainable layer of this "
                            "model")
        op = graph.ops[lp.op_index]
        pairs = [(op.inputs[1], lp.weights)]
        if lp.bias.size:
            pairs.append((op.inputs[2], lp.bias))
        for name, values in pairs:
            t = graph.tensor(name)
            if values.size != t.size:
                raise DataError(f"checkpoint layer {lp.op_index}: {values.size} values for "
                                f"'{name}', the model has {t.size}")
            value = values.reshape(t.shape).astype(t.dtype)
            if not np.array_equal(value, t.data):
                updated[name] = value
    return updated


def checkpoint_scales(graph: Graph, ckpt: checkpoint.Checkpoint) -> dict[str, np.ndarray]:
    """A filter's IR name -> its trained per-channel scales (--scales), where they differ
    from the model's."""
    scales = {}
    for lp in ckpt.layers:
        if lp.scales.size:
            name = graph.ops[lp.op_index].inputs[1]
            model = np.broadcast_to(graph.tensor(name).quant.scale, lp.scales.shape)
            if not np.array_equal(lp.scales, model):
                scales[name] = lp.scales
    return scales


def checkpoint_params(graph: Graph, ckpt: checkpoint.Checkpoint) -> dict[str, np.ndarray]:
    """The forward's parameters of a checkpoint without its plan: the trained tensors and
    (--scales) the filter scales under their parameter names (training/scales.py)."""
    from . import scales
    params = checkpoint_tensors(graph, ckpt)
    params.update({scales.key(name): value
                   for name, value in checkpoint_scales(graph, ckpt).items()})
    return params


def export_checkpoint(model_path: Path, graph: Graph, ckpt_path: Path, out_path: Path,
                      force: bool = False) -> int:
    """Write the model with the checkpoint's parameters to ``out_path``; returns how many
    tensors changed. Refuses a checkpoint of another model (sha256 of the model file), and
    (unless ``force``) an ``out_path`` that is not a model of the same format."""
    ckpt = checkpoint.load(ckpt_path)
    if ckpt.model_sha256 != file_sha256(Path(model_path), "model"):
        raise DataError(f"{ckpt_path} was trained from a different model file than "
                        f"{model_path}")
    updated = checkpoint_tensors(graph, ckpt)
    scales = checkpoint_scales(graph, ckpt)
    export_model(Path(model_path), graph, updated, Path(out_path), scales, force)
    return len(updated) + len(scales)
