"""`train --model MODEL`: the confusion matrix of each test evaluation, computed on the host.

The device reports how many test records it classified right (the A command); which classes
it confuses needs every prediction, which the link does not carry. With the model file the
host has what it needs instead: the checkpoint it just pulled and the image's test records.
The bit-exact reference then predicts exactly what the device did, and the host checks that
claim at every evaluation: its matrix's diagonal must equal the device's count.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from zocodegen.errors import UserError
from zocodegen.files import file_sha256
from zocodegen.formats.image import read_image
from zocodegen.frontends import load_model
from zocodegen.training import checkpoint
from zocodegen.training.export import checkpoint_params
from zocodegen.training.metrics import confusion_matrix
from zocodegen.training.simulator import predict


class TestConfusion:
    """The test split of ``image`` and the model the device trains."""

    def __init__(self, model: Path, image: Path, model_sha256: bytes):
        if file_sha256(Path(model), "model") != model_sha256:
            raise UserError(f"--model {model} is not the firmware's model (sha256 differs)")
        self.graph = load_model(model)
        layout, arrays = read_image(image)
        self.x, self.y = arrays.get("x_test"), arrays.get("y_test")
        self.classes = layout.num_classes
        self.names = layout.class_names

    @property
    def available(self) -> bool:
        return self.x is not None

    def matrix(self, ckpt_path: Path, device_correct: int) -> np.ndarray:
        """counts[true, predicted] with the checkpoint's parameters; refuses a matrix that
        disagrees with what the device measured (it would be a bug, never noise)."""
        params = checkpoint_params(self.graph, checkpoint.load(ckpt_path))
        counts = confusion_matrix(self.y, predict(self.graph, params, self.x), self.classes)
        if int(np.trace(counts)) != device_correct:
            raise UserError(f"the host's prediction of the test split ({int(np.trace(counts))} "
                            f"correct) differs from the device's ({device_correct}): please "
                            "report this with RUN/checkpoint.bin and the image")
        return counts
