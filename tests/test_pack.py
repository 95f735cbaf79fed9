"""`zocodegen pack` (DATA.npz -> data image) and `simulate --data IMAGE`: the image holds the
arrays in the order the device trains on them (shuffled only on request), sets a stratified
validation split aside when DATA.npz has none (the records `simulate` sets aside from the same
npz), records the model's hash and input quantization, reserves room for the full-training
checkpoint, refuses bad input without leaving a file behind, and is read, byte for byte, by
the C reader (what `dd` puts on a card is what the firmware sees)."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES
from test_image import BACKENDS, executables, expected_fields, reader  # noqa: F401
from zocodegen.cli import main
from zocodegen.frontends import load_model
from zocodegen.formats import image as zi
from zocodegen.formats.image import pack_image, read_header, read_image
from zocodegen.target import TARGET_NAMES, load_target
from zocodegen.training import checkpoint, simulator
from zocodegen.training.config import TrainConfig
from zocodegen.training.data import (DEFAULT_CHECKPOINT_BYTES, DEFAULT_VAL_FRACTION,
                                     load_dataset, validation_indices, with_validation)
from zocodegen.training.plan import training_plan

DIGITS = FIXTURES / "digits_cnn.tflite"


def _arrays(seed: int = 0) -> dict:
    """All three splits, labels of three integer dtypes."""
    rng = np.random.default_rng(seed)

    def x(n: int) -> np.ndarray:
        return rng.integers(-128, 128, size=(n, 3, 5)).astype(np.int8)

    return dict(x=x(23), y=rng.integers(0, 6, 23), x_val=x(4),
                y_val=rng.integers(0, 6, 4).astype(np.uint8), x_test=x(7),
                y_test=rng.integers(0, 6, 7).astype(np.int32))


def _digits_arrays(count: int = 30, seed: int = 0) -> dict:
    """Random int8 inputs of the digits model's shape (training-tests style)."""
    graph = load_model(DIGITS)
    t = graph.tensor(graph.inputs[0])
    rng = np.random.default_rng(seed)
    shape = (count,) + tuple(t.shape[1:])
    return dict(x=rng.integers(-128, 128, size=shape).astype(np.int8),
                y=rng.integers(0, 10, count),
                x_test=rng.integers(-128, 128, size=(9,) + shape[1:]).astype(np.int8),
                y_test=rng.integers(0, 10, 9))


def _pack(tmp_path: Path, arrays: dict, *options, name: str = "d.img") -> tuple[int, Path]:
    np.savez(tmp_path / "d.npz", **arrays)
    out = tmp_path / name
    return main(["pack", str(tmp_path / "d.npz"), "-o", str(out), *map(str, options)]), out


def test_round_trip_keeps_the_order(tmp_path, capsys):
    arrays = _arrays()
    code, out = _pack(tmp_path, arrays)
    assert code == 0
    layout, back = read_image(out)
    assert set(back) == set(arrays)
    for key, value in arrays.items():
        np.testing.assert_array_equal(back[key], value)
        assert back[key].dtype == (value.dtype if key.startswith("x") else np.int32)
    assert layout.num_classes == max(int(arrays[k].max()) for k in ("y", "y_val", "y_test")) + 1
    assert (layout.input_scale, layout.input_zero_point) == (None, None)
    assert layout.model_sha256 == bytes(32)
    assert layout.checkpoint_sectors * 512 == DEFAULT_CHECKPOINT_BYTES
    assert out.stat().st_size == layout.image_bytes
    text = capsys.readouterr().out
    assert "23 train, 4 val, 7 test records" in text and f"{layout.image_bytes:,} B" in text


def test_default_checkpoint_area_fits_every_board():
    """Trained parameters are model constants, which sit in flash: any checkpoint of a model
    the boards hold is smaller than their flash."""
    largest = max(load_target(name).flash_bytes for name in TARGET_NAMES)
    assert DEFAULT_CHECKPOINT_BYTES >= largest + checkpoint.encoded_size([(0, 0, 0)] * 1000)


def test_shuffle_is_a_deterministic_permutation_of_train(tmp_path):
    arrays = _arrays(1)
    _, first = _pack(tmp_path, arrays, "--shuffle", 7, name="a.img")
    _, again = _pack(tmp_path, arrays, "--shuffle", 7, name="b.img")
    _, other = _pack(tmp_path, arrays, "--shuffle", 8, name="c.img")
    assert first.read_bytes() == again.read_bytes() != other.read_bytes()
    _, back = read_image(first)
    order = np.random.default_rng(7).permutation(len(arrays["x"]))
    assert sorted(order) == list(range(len(arrays["x"])))
    np.testing.assert_array_equal(back["x"], arrays["x"][order])
    np.testing.assert_array_equal(back["y"], arrays["y"][order])
    assert not np.array_equal(back["x"], arrays["x"])
    for key in ("x_val", "y_val", "x_test", "y_test"):
        np.testing.assert_array_equal(back[key], arrays[key])


def test_model_hash_quantization_and_checkpoint_area(tmp_path, capsys):
    graph = load_model(DIGITS)
    code, out = _pack(tmp_path, _digits_arrays(), "--model", DIGITS)
    assert code == 0
    layout = read_header(out)
    sha = hashlib.sha256(DIGITS.read_bytes()).digest()
    assert layout.model_sha256 == sha
    quant = graph.tensor(graph.inputs[0]).quant
    assert layout.input_scale == np.float32(quant.scalar_scale)
    assert layout.input_zero_point == quant.scalar_zero_point
    assert layout.num_classes == 10
    # the checkpoint the simulator and the device write for full training (the same hash)
    plan = training_plan(graph, TrainConfig(scales=True))  # --scales: the largest
    assert len(plan.layers) == len(plan.all_trainable)
    full = checkpoint.encode(simulator.to_checkpoint(
        plan, simulator.initial_params(graph, plan), 0, sha))
    assert checkpoint.encoded_size((l.weight_count, l.bias_count, l.scale_count)
                                   for l in plan.layers) \
        == len(full)
    area = layout.checkpoint_sectors * 512
    # the run's slot and the guard's best, their copies, a field run's log and status
    # (formats/field.py): an image any build of the model trains from, link or field
    assert area == (4 * -(-len(full) // 512) + 128 + 2) * 512
    assert "sha256 " + sha.hex()[:16] in capsys.readouterr().out
    # --checkpoint-kb overrides; too small for full training is a warning, not an error
    assert _pack(tmp_path, _digits_arrays(), "--model", DIGITS, "--checkpoint-kb", 64,
                 name="k.img")[0] == 0
    assert read_header(tmp_path / "k.img").checkpoint_sectors == 128
    assert _pack(tmp_path, _digits_arrays(), "--model", DIGITS, "--checkpoint-kb", 1,
                 name="s.img")[0] == 0
    assert read_header(tmp_path / "s.img").checkpoint_sectors == 2
    assert "warning" in capsys.readouterr().err


def _with(**changes):
    def change(arrays):
        for key, value in changes.items():
            if value is None:
                arrays.pop(key)
            else:
                arrays[key] = value(arrays)
    return change


@pytest.mark.parametrize("change, options, message", [
    (_with(x=lambda a: a["x"].astype(np.float64)), (), "float64"),
    (_with(y=lambda a: a["y"][:5]), (), "samples"),
    (_with(y=None), (), "'x' and 'y'"),
    (_with(y_test=None), (), "come together"),
    (_with(x=lambda a: a["x"][:0], y=lambda a: a["y"][:0]), (), "empty"),
    (_with(y=lambda a: a["y"] - 3), (), "outside"),
    (_with(y=lambda a: a["y"].astype(np.float32)), (), "integer"),
    (_with(x_test=lambda a: a["x_test"][:, :2]), (), "x_test has samples of shape"),
    (_with(), ("--shuffle", -1), "--shuffle"),
    (_with(), ("--checkpoint-kb", -1), "--checkpoint-kb"),
    (_with(), ("--val-fraction", 1), "--val-fraction must be in [0, 1), got 1.0"),
    (_with(), ("--val-fraction", -0.1), "--val-fraction: must be a finite number at least 0"),
    (_with(), ("--val-fraction", "nan"), "--val-fraction: must be a finite number at least 0"),
    (_with(x=lambda a: a["x"][:, :4]), ("--model", DIGITS), "'x' has shape"),
    (_with(x=lambda a: a["x"].view(np.uint8)), ("--model", DIGITS), "'x' is uint8"),
    (_with(y_test=lambda a: a["y_test"] + 10), ("--model", DIGITS), "outside 0..9"),
    (_with(), ("--model", FIXTURES / "mcunet_tiny.tflite"), "the model's input is float32"),
    (_with(), ("--model", FIXTURES / "none.tflite"), "no such model file"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_input_is_one_line_and_writes_nothing(change, options, message, tmp_path, capsys):
    arrays = _digits_arrays()
    change(arrays)
    np.savez(tmp_path / "d.npz", **arrays)
    out = tmp_path / "d.img"
    code = main(["pack", str(tmp_path / "d.npz"), "-o", str(out), *map(str, options)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npz"]


def test_bad_files_leave_an_existing_image_alone(tmp_path, capsys):
    out = tmp_path / "d.img"
    np.savez(tmp_path / "d.npz", **_digits_arrays())
    assert main(["pack", str(tmp_path / "d.npz"), "-o", str(out)]) == 0
    old = out.read_bytes()
    capsys.readouterr()
    (tmp_path / "text.npz").write_text("not a zip")
    np.save(tmp_path / "one.npy", np.zeros(3))
    for data, message in [(tmp_path / "missing.npz", "does not exist"),
                          (tmp_path / "text.npz", "not a readable .npz"),
                          (tmp_path / "one.npy", "not a readable .npz")]:
        assert main(["pack", str(data), "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert main(["pack", str(tmp_path / "d.npz"), "-o", str(tmp_path / "d.npz")]) == 2
    assert "overwrite" in capsys.readouterr().err
    (tmp_path / "one.npy").rename(tmp_path / "no")  # a file where the folder should be
    assert main(["pack", str(tmp_path / "d.npz"), "-o", str(tmp_path / "no" / "d.img")]) == 2
    assert "cannot write" in capsys.readouterr().err
    (tmp_path / "no").rename(tmp_path / "one.npy")
    assert out.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.img", "d.npz", "one.npy",
                                                          "text.npz"]
    # packing an image again is refused (pack reads DATA.npz)
    assert main(["pack", str(tmp_path / "d.npz"), "-o", str(out)]) == 0
    assert main(["pack", str(out), "-o", str(tmp_path / "again.img")]) == 2
    assert "already a data image" in capsys.readouterr().err


def _simulate(data: Path, run: Path) -> tuple[bytes, str]:
    """checkpoint.bin and metrics.csv of a short run (batch 2: the sample order matters)."""
    assert main(["simulate", str(DIGITS), "--data", str(data), "-o", str(run), "--steps", "4",
                 "--queries", "4", "--batch", "2", "--lr", "0.01", "--no-guard"]) == 0
    return (run / "checkpoint.bin").read_bytes(), (run / "metrics.csv").read_text()


def test_simulate_on_the_image_equals_simulate_on_the_npz(tmp_path, capsys):
    """The digits data: the packed image trains exactly like DATA.npz (the same val split
    set aside), and --shuffle S like DATA.npz whose remaining train records are permuted by
    default_rng(S)."""
    pytest.importorskip("sklearn")
    from zocodegen.datasets import digits_npz
    graph = load_model(DIGITS)
    arrays = digits_npz(tmp_path / "d.npz", graph.tensor(graph.inputs[0]).quant)
    assert main(["pack", str(tmp_path / "d.npz"), "-o", str(tmp_path / "plain.img")]) == 0
    assert "ignored arrays: x_clean_test, y_clean_test" in capsys.readouterr().out
    assert main(["pack", str(tmp_path / "d.npz"), "-o", str(tmp_path / "d.img"), "--model",
                 str(DIGITS), "--shuffle", "5"]) == 0
    npz = _simulate(tmp_path / "d.npz", tmp_path / "r1")
    assert _simulate(tmp_path / "plain.img", tmp_path / "r2") == npz
    split = with_validation({k: arrays[k] for k in ("x", "y")})
    order = np.random.default_rng(5).permutation(len(split["x"]))
    np.savez(tmp_path / "p.npz", x=split["x"][order], y=split["y"][order],
             x_val=split["x_val"], y_val=split["y_val"], x_test=arrays["x_test"],
             y_test=arrays["y_test"])
    shuffled = _simulate(tmp_path / "p.npz", tmp_path / "r3")
    assert shuffled != npz, "the order must matter, or the comparison proves nothing"
    assert _simulate(tmp_path / "d.img", tmp_path / "r4") == shuffled


@pytest.mark.parametrize("arrays, extra, message", [
    (dict(x=np.zeros((3, 8, 8, 1), np.uint8)), {}, "'x' is uint8, the model's input is int8"),
    (dict(x=np.zeros((3, 8, 4, 2), np.int8)), {}, "'x' has shape [3, 8, 4, 2]"),
    (dict(x=np.zeros((3, 8, 8, 1), np.int8), y=np.array([0, 10, 1])), {},
     "the image's num_classes is 11, the model has 10 classes"),
    (dict(x=np.zeros((3, 8, 8, 1), np.int8)), dict(num_classes=12), "num_classes is 12"),
    # the ONNX walkthrough: simulate ran on an image packed for the model's QOperator twin,
    # which `train` then refused ("packed for another model") on the device
    (dict(x=np.zeros((3, 8, 8, 1), np.int8)), dict(model_sha256=bytes(range(32))),
     "d.img was packed for another model (sha256 000102030405..., the model "),
], ids=["dtype", "shape", "label", "classes", "model"])
def test_simulate_refuses_a_mismatched_image(arrays, extra, message, tmp_path, capsys):
    y = arrays.pop("y", np.array([0, 1, 2]))
    pack_image(tmp_path / "d.img", arrays.pop("x"), y, **extra)
    code = main(["simulate", str(DIGITS), "--data", str(tmp_path / "d.img"), "-o",
                 str(tmp_path / "run"), "--steps", "2", "--lr", "0.01", "--no-guard"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run" / "checkpoint.bin").exists()


@pytest.mark.parametrize("reader", BACKENDS, indirect=True)
def test_c_reader_reads_the_packed_image_byte_for_byte(reader, tmp_path):
    """The C reader over the image file (the native stdio and QEMU semihosting block devices)
    returns every record in the packed order, and every sector equals the file's bytes at
    LBA x 512: what `dd` writes to block n of a card."""
    arrays = _digits_arrays(count=21)
    code, out = _pack(tmp_path, arrays, "--model", DIGITS, "--shuffle", 3)
    assert code == 0
    layout = read_header(out)
    attach_rc, open_rc, fields, sha = reader.attach(out)
    assert (attach_rc, open_rc) == (0, 0)
    assert fields == expected_fields(layout) and sha == layout.model_sha256
    split = with_validation(arrays)
    order = np.random.default_rng(3).permutation(len(split["x"]))
    want = ([(int(split["y"][k]), split["x"][k].tobytes()) for k in order]
            + [(int(y), x.tobytes()) for x, y in zip(split["x_val"], split["y_val"])]
            + [(int(y), x.tobytes()) for x, y in zip(arrays["x_test"], arrays["y_test"])])
    records = reader.dump([layout.count(name) for name in zi.SPLITS])
    assert [(label, data) for _, label, data in records] == want
    assert all(rc == 0 for rc, _, _ in records)
    assert reader.verify(0) == reader.verify(1) == reader.verify(2) == 0
    raw = out.read_bytes()
    for lba in range(0, layout.image_sectors, 8):
        count = min(8, layout.image_sectors - lba)
        assert reader.read_sectors(lba, count) == (0, raw[lba * 512:(lba + count) * 512])
    assert raw[layout.checkpoint_lba * 512:] == bytes(layout.checkpoint_sectors * 512)
    reader.quit()


# ---- the validation split --------------------------------------------------------------

def test_validation_indices_rule():
    """Per class min(n - 1, max(1, floor(F n + 1/2))) records, ascending, the same every
    time; the first records of default_rng(0).permutation(n) of each class in label order."""
    y = np.array([3] * 31 + [0] * 20 + [7] + [5] * 2 + [1] * 6)
    y = y[np.random.default_rng(9).permutation(len(y))]
    val = validation_indices(y, 0.1)
    assert list(val) == sorted(val) and len(set(val)) == len(val)
    assert validation_indices(y, 0.1).tolist() == val.tolist()
    per_class = {int(c): int((y[val] == c).sum()) for c in np.unique(y)}
    assert per_class == {0: 2, 1: 1, 3: 3, 5: 1, 7: 0}
    rng = np.random.default_rng(0)
    want = []
    for c, take in sorted(per_class.items()):
        members = np.flatnonzero(y == c)
        want += list(members[rng.permutation(len(members))[:take]])
    assert val.tolist() == sorted(want)
    assert {int(c): int((y[validation_indices(y, 0.5)] == c).sum()) for c in (0, 5, 7)} == \
        {0: 10, 5: 1, 7: 0}
    assert len(validation_indices(y, 0.0)) == 0


def test_pack_sets_aside_the_val_split_simulate_derives(tmp_path, capsys):
    """DATA.npz without x_val: the image's val split, its train records (in their order)
    and its test split are exactly what load_dataset (simulate) makes of the npz."""
    graph = load_model(DIGITS)
    arrays = _digits_arrays(count=60, seed=4)
    code, out = _pack(tmp_path, arrays, "--model", DIGITS)
    assert code == 0
    assert "val: " in capsys.readouterr().out
    layout, image = read_image(out)
    npz = load_dataset(tmp_path / "d.npz", graph, 10)
    assert layout.count("val") == len(npz.x_val) > 0
    assert layout.count("train") + layout.count("val") == 60
    for key in ("x", "y", "x_val", "y_val", "x_test", "y_test"):
        np.testing.assert_array_equal(image[key], getattr(npz, key), err_msg=key)
    val = validation_indices(arrays["y"], DEFAULT_VAL_FRACTION)
    np.testing.assert_array_equal(image["x_val"], arrays["x"][val])
    train = np.setdiff1d(np.arange(60), val)
    np.testing.assert_array_equal(image["x"], arrays["x"][train])
    # simulating on the image equals simulating on the npz (same train, val and test)
    assert _simulate(out, tmp_path / "r1") == _simulate(tmp_path / "d.npz", tmp_path / "r2")


def test_val_fraction_zero_and_a_given_val_split(tmp_path):
    arrays = _digits_arrays(count=40, seed=5)
    code, out = _pack(tmp_path, arrays, "--val-fraction", 0, name="none.img")
    assert code == 0
    layout, image = read_image(out)
    assert layout.splits["val"] == (0, 0) and "x_val" not in image
    np.testing.assert_array_equal(image["x"], arrays["x"])
    code, out = _pack(tmp_path, arrays, "--val-fraction", 0.5, name="half.img")
    assert read_header(out).count("val") >= 20
    # x_val in DATA.npz is the val split, whatever --val-fraction says
    given = dict(arrays, x_val=arrays["x"][:3], y_val=arrays["y"][:3])
    code, out = _pack(tmp_path, given, "--val-fraction", 0.5, name="given.img")
    layout, image = read_image(out)
    assert layout.count("val") == 3 and layout.count("train") == 40
    np.testing.assert_array_equal(image["x"], arrays["x"])


def test_a_npz_holds_records_out_only_when_asked(tmp_path, capsys):
    """DATA.npz: simulate holds none out, so pack holds none out by default (the image and
    the npz simulate alike); --held-out-fraction holds them out after the val split."""
    arrays = _digits_arrays(count=120, seed=6)
    code, out = _pack(tmp_path, arrays, "--model", DIGITS)
    assert code == 0 and read_header(out).held_out == 0
    assert "held-out: none (DATA.npz: only with --held-out-fraction)" in capsys.readouterr().out
    code, out = _pack(tmp_path, arrays, "--model", DIGITS, "--held-out-fraction", 0.2,
                      name="held.img")
    layout = read_header(out)
    assert code == 0 and layout.held_out >= 16 and layout.checked_val == len(
        validation_indices(arrays["y"], DEFAULT_VAL_FRACTION))
    assert layout.count("train") + layout.count("val") == 120
