"""Issue 64 acceptance: the newcomer's walkthrough on a model whose only training that fits
the STM32F746 is one late block of a finer partition than the default 4 blocks
(tests/one_block_model.py's deeper sibling): `inspect` names the options, `build` and
`simulate` take exactly those on the first try, a generated photo folder is packed, and the
native firmware built with the same options trains on it to the simulator's bytes."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from zocodegen.cli import main
from zocodegen.training.config import DEFAULT_BLOCKS

#: What keeps the two runs short: the options inspect names come first, unchanged.
SHORT_RUN = ["--steps", "2", "--queries", "2", "--no-guard", "--lr", "0.01"]


@pytest.fixture(scope="module")
def late_block(tmp_path_factory):
    pytest.importorskip("onnxruntime.quantization")
    from one_block_model import LATE_CHANNELS, LATE_STRIDES, one_block_model
    return one_block_model(tmp_path_factory.mktemp("late_block") / "late_block.onnx",
                           LATE_CHANNELS, LATE_STRIDES)


def _photos(folder, classes=("cat", "dog"), count=20):
    """Class subfolders of PNG and JPEG photos of mixed sizes, some greyscale."""
    from PIL import Image
    rng = np.random.default_rng(1)
    for name in classes:
        (folder / name).mkdir(parents=True)
        for i in range(count):
            shape = (70 + 3 * i, 90, 3) if i % 3 else (80, 64 + 2 * i)
            Image.fromarray(rng.integers(0, 255, shape, dtype=np.uint8)).save(
                folder / name / (f"{i}.png" if i % 2 else f"{i}.jpg"))
    return folder


def test_the_walkthrough_on_a_model_that_fits_only_as_a_late_block(late_block, tmp_path,
                                                                   capsys):
    model = str(late_block)
    assert main(["inspect", model, "--target", "stm32f746"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    named = re.search(r"`build --target stm32f746 ([^`]+)` \(([\d.]+) KB", first)
    assert named, first
    options, kb = named.group(1).split(), named.group(2)
    # the only fit: a late block of more blocks than the default, which must be given
    assert options[:4] == ["--train", "sparse", "--blocks", "5"], options
    assert options[4:] == ["--block", "4"] and int(options[3]) > DEFAULT_BLOCKS, options

    # build for the board with exactly those options: the SRAM inspect printed
    assert main(["build", model, "--target", "stm32f746", *options, "-o",
                 str(tmp_path / "board")]) == 0
    headline = next(line for line in capsys.readouterr().out.splitlines()
                    if line.startswith("SRAM "))
    assert headline.startswith(f"SRAM {kb} KB of the stm32f746 budget 256.0 KB;"), headline

    photos = _photos(tmp_path / "photos")
    image = tmp_path / "photos.img"
    assert main(["pack", str(photos), "-o", str(image), "--model", model]) == 0
    assert "24 train, 16 val records" in capsys.readouterr().out

    # simulate the board's run with the same options, then the native firmware's
    sim = tmp_path / "sim"
    assert main(["simulate", model, "--data", str(image), "-o", str(sim), "--target",
                 "stm32f746", *options, *SHORT_RUN]) == 0
    config = json.loads((sim / "run.json").read_text())["config"]
    assert (config["mode"], config["blocks"], config["block"]) == ("sparse", 5, 4)
    assert main(["build", model, "--target", "native", "--emulate", "stm32f746", *options,
                 *SHORT_RUN, "-o", str(tmp_path / "fw")]) == 0
    run = tmp_path / "run"
    assert main(["train", "--native", str(tmp_path / "fw"), "--image", str(image), "-o",
                 str(run)]) == 0
    capsys.readouterr()
    assert (run / "checkpoint.bin").read_bytes() == (sim / "checkpoint.bin").read_bytes()
