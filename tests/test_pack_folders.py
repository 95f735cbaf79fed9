"""`pack FOLDER` (issue 36): image folders and any files through a hook, in the model's input
quantization. The expected records are computed here from first principles (Pillow's crop
and resize, the preset's formula, TFLite's round-half-away-from-zero), not with the packer's
own functions; every bad input is one line, exit 2, and no image."""
from __future__ import annotations

import json
import wave
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import FIXTURES
from zocodegen.cli import main
from zocodegen.formats.image import read_image
from zocodegen.frontends import load_model
from zocodegen.reference.executor import run
from zocodegen.training.metrics import class_labels

RGB_MODEL = FIXTURES / "scale_model.tflite"  # 64x64x3 int8, scale 1/255, zero point -128
GREY_MODEL = FIXTURES / "digits_cnn.tflite"  # 8x8x1 int8, the same quantization
SCALE, ZERO_POINT = np.float32(1 / 255), -128


def _quantize(values: np.ndarray) -> np.ndarray:
    """TFLite's float -> int8: round half away from zero of x / scale (float32), + zp."""
    scaled = (values.astype(np.float32) / SCALE).astype(np.float64)
    rounded = np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)
    return np.clip(rounded + ZERO_POINT, -128, 127).astype(np.int8)


def _expected_pixels(path: Path, size: int, mode: str) -> np.ndarray:
    """Centre crop to a square, bilinear resize, 0..255 floats."""
    with Image.open(path) as im:
        im = im.convert(mode)
        w, h = im.size
        side = min(w, h)
        im = im.crop(((w - side) // 2, (h - side) // 2, (w - side) // 2 + side,
                      (h - side) // 2 + side))
        im = im.resize((size, size), Image.Resampling.BILINEAR)
        return np.asarray(im, np.float32).reshape(size, size, -1)


def _shuffled(values: np.ndarray) -> np.ndarray:
    """A folder's train split as pack writes it: permuted with default_rng(0)."""
    return values[np.random.default_rng(0).permutation(len(values))]


def _image_folder(root: Path, classes=("cat", "dog"), per_class=5, seed=0) -> list[Path]:
    """Class subfolders of PNG and JPEG files of several sizes, colour and greyscale."""
    rng = np.random.default_rng(seed)
    files = []
    for c in classes:
        (root / c).mkdir(parents=True)
        for k in range(per_class):
            shape = (30 + 7 * k, 41 + 3 * k, 3)
            pixels = rng.integers(0, 256, shape, dtype=np.uint8)
            image = Image.fromarray(pixels) if k % 3 else Image.fromarray(pixels[..., 0], "L")
            path = root / c / f"{k}.{'png' if k % 2 else 'jpg'}"
            image.save(path)
            files.append(path)
    return files


@pytest.mark.parametrize("model, size, mode", [(RGB_MODEL, 64, "RGB"), (GREY_MODEL, 8, "L")])
def test_class_folders_pack_to_the_models_own_preprocessing(model, size, mode, tmp_path,
                                                            capsys):
    files = _image_folder(tmp_path / "data")
    out = tmp_path / "d.img"
    assert main(["pack", str(tmp_path / "data"), "-o", str(out), "--model", str(model),
                 "--val-fraction", "0"]) == 0
    assert "classes: 0 cat, 1 dog" in capsys.readouterr().out
    layout, arrays = read_image(out)
    assert layout.class_names == ("cat", "dog") and layout.preprocess == "0..1 crop"
    expected = np.stack([_quantize(_expected_pixels(f, size, mode) / np.float32(255))
                         for f in files])
    np.testing.assert_array_equal(arrays["x"], _shuffled(expected))
    np.testing.assert_array_equal(arrays["y"], _shuffled(np.array([0] * 5 + [1] * 5)))


def test_presets_and_split_folders(tmp_path):
    """train/val/test subfolders become the splits; --normalize -1..1 is p / 127.5 - 1."""
    for split, count in (("train", 2), ("val", 8), ("test", 2)):  # val: the guard's 16
        _image_folder(tmp_path / "data" / split, per_class=count, seed=len(split))
    out = tmp_path / "d.img"
    assert main(["pack", str(tmp_path / "data"), "-o", str(out), "--model", str(GREY_MODEL),
                 "--normalize=-1..1", "--resize", "stretch"]) == 0
    layout, arrays = read_image(out)
    assert [layout.count(s) for s in ("train", "val", "test")] == [4, 16, 4]
    first = sorted((tmp_path / "data" / "test" / "cat").iterdir())[0]
    with Image.open(first) as im:
        pixels = np.asarray(im.convert("L").resize((8, 8), Image.Resampling.BILINEAR),
                            np.float32)
    np.testing.assert_array_equal(arrays["x_test"][0, ..., 0],
                                  _quantize(pixels / np.float32(127.5) - np.float32(1)))
    assert layout.preprocess == "-1..1 stretch"


@pytest.mark.parametrize("kind", ["csv", "json"])
def test_labels_file_by_name_or_index(kind, tmp_path):
    files = _image_folder(tmp_path / "data", per_class=3)
    rows = [(str(f.relative_to(tmp_path / "data")), f.parent.name) for f in files]
    labels = tmp_path / f"labels.{kind}"
    if kind == "csv":
        labels.write_text("file,label\n" + "".join(f"{f},{c}\n" for f, c in rows))
    else:
        labels.write_text(json.dumps({f: 1 if c == "cat" else 0 for f, c in rows}))
    out = tmp_path / "d.img"
    assert main(["pack", str(tmp_path / "data"), "-o", str(out), "--model", str(GREY_MODEL),
                 "--labels", str(labels), "--val-fraction", "0"]) == 0
    layout, arrays = read_image(out)
    expected = [0] * 3 + [1] * 3 if kind == "csv" else [1] * 3 + [0] * 3
    np.testing.assert_array_equal(arrays["y"], _shuffled(np.array(expected)))


HOOK = '''
import wave
import numpy as np

def features(path):
    """A toy front end: 64 frame log-energies of a 16-bit mono WAV, as 8x8x1."""
    with wave.open(str(path)) as w:
        samples = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32)
    frames = samples[: 64 * (len(samples) // 64)].reshape(64, -1)
    return (np.log1p((frames ** 2).mean(axis=1)) / 20.0).reshape(8, 8, 1)
'''


def _wav_folder_packed(tmp_path: Path, monkeypatch) -> Path:
    """wav/no, wav/yes of 3 recordings each, packed through tmp_path/kws_front.py's hook."""
    rng = np.random.default_rng(3)
    for c in ("no", "yes"):
        (tmp_path / "wav" / c).mkdir(parents=True)
        for k in range(3):
            with wave.open(str(tmp_path / "wav" / c / f"{k}.wav"), "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(16000)
                w.writeframes(rng.normal(0, 3000 * (k + 1), 16000).astype(np.int16).tobytes())
    (tmp_path / "kws_front.py").write_text(HOOK)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "d.img"
    assert main(["pack", str(tmp_path / "wav"), "-o", str(out), "--model", str(GREY_MODEL),
                 "--preprocess", "kws_front:features", "--val-fraction", "0"]) == 0
    return out


def test_wav_folder_through_a_hook(tmp_path, monkeypatch):
    """Any modality: the hook maps a file to the model's float input, pack quantizes it."""
    out = _wav_folder_packed(tmp_path, monkeypatch)
    layout, arrays = read_image(out)
    namespace: dict = {}
    exec(HOOK, namespace)
    files = sorted((tmp_path / "wav").rglob("*.wav"))
    expected = np.stack([_quantize(namespace["features"](f)) for f in files])
    np.testing.assert_array_equal(arrays["x"], _shuffled(expected))
    assert layout.preprocess == "hook kws_front:features"


def test_infer_on_a_folder_packed_through_a_hook(tmp_path, monkeypatch, capsys):
    """The walkthrough's micro_speech: `infer` on the recordings of a hook-packed image
    refused the folder; `--preprocess` passes the hook again and each file is classified
    from exactly the record pack made of it. A hook on photos packed by decoding is refused."""
    out = _wav_folder_packed(tmp_path, monkeypatch)
    capsys.readouterr()
    infer = ["infer", str(GREY_MODEL), "--input", str(tmp_path / "wav"), "--data", str(out)]
    assert main(infer) == 2
    assert "pass the same hook again (--preprocess kws_front:features)" in (
        capsys.readouterr().err)
    assert main([*infer, "--preprocess", "kws_front:features"]) == 0
    shown = capsys.readouterr().out
    layout, _ = read_image(out)
    graph = load_model(GREY_MODEL)
    namespace: dict = {}
    exec(HOOK, namespace)
    files = sorted((tmp_path / "wav").rglob("*.wav"))
    for f in files:
        x = _quantize(namespace["features"](f))[None]
        cls = int(run(graph, {graph.inputs[0]: x})[graph.outputs[0]].argmax())
        line = next(line for line in shown.splitlines() if f.name in line
                    and f.parent.name in line)
        assert class_labels(layout.class_names, 10)[cls] in line, (line, cls)
    photos = tmp_path / "photos"
    _image_folder(photos)
    packed = tmp_path / "p.img"
    assert main(["pack", str(photos), "-o", str(packed), "--model", str(GREY_MODEL),
                 "--val-fraction", "0"]) == 0
    capsys.readouterr()
    assert main(["infer", str(GREY_MODEL), "--input", str(photos), "--data", str(packed),
                 "--preprocess", "kws_front:features"]) == 2
    assert "made by decoding images" in capsys.readouterr().err


def _bad_cases(root: Path) -> dict[str, tuple[list[str], str]]:
    return {
        "unreadable file": (["readme"], "not a readable image"),
        "empty class": (["empty"], "is empty"),
        "label outside the model": (["eleven"], "the model has 10 classes"),
        "wrong shape from a hook": (["--preprocess", f"{root}/hook.py:flat"],
                                    "the model takes [8, 8, 1]"),
        "hook that raises": (["--preprocess", f"{root}/hook.py:boom"], "ValueError: no"),
        "no model": (["--no-model"], "needs --model"),
    }


@pytest.mark.parametrize("case", list(_bad_cases(Path("."))))
def test_bad_folders_are_one_line_and_write_nothing(case, tmp_path, capsys):
    data = tmp_path / "data"
    _image_folder(data, per_class=2)
    (tmp_path / "hook.py").write_text("import numpy as np\ndef flat(p):\n    return "
                                      "np.zeros(64)\ndef boom(p):\n    raise ValueError('no')\n")
    extra, message = _bad_cases(tmp_path)[case]
    if extra == ["readme"]:
        (data / "cat" / "readme.txt").write_text("not an image")
    elif extra == ["empty"]:
        (data / "bird").mkdir()
    elif extra == ["eleven"]:
        for k in range(11):
            (data / f"class{k:02d}").mkdir()
            (data / f"class{k:02d}" / "1.png").write_bytes((data / "cat" / "1.png").read_bytes())
    model = [] if extra == ["--no-model"] else ["--model", str(GREY_MODEL)]
    options = [] if extra[0] in ("readme", "empty", "eleven", "--no-model") else extra
    out = tmp_path / "d.img"
    assert main(["pack", str(data), "-o", str(out), *model, *options]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "Traceback" not in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "hook.py"]


def test_channels_first_float_model(tmp_path):
    """An ONNX model from PyTorch: (3, H, W) float32 input, then its QuantizeLinear. The
    preset comes from that quantizer's range (-1..1 here) and records are float32 NCHW."""
    model = FIXTURES / "onnx_qdq_int8.onnx"
    files = _image_folder(tmp_path / "data", per_class=2)
    out = tmp_path / "d.img"
    assert main(["pack", str(tmp_path / "data"), "-o", str(out), "--model", str(model),
                 "--val-fraction", "0"]) == 0
    layout, arrays = read_image(out)
    assert layout.dtype == "float32" and layout.preprocess == "-1..1 crop"
    expected = np.stack([(_expected_pixels(f, 16, "RGB") / np.float32(127.5)
                          - np.float32(1)).transpose(2, 0, 1) for f in files])
    np.testing.assert_array_equal(arrays["x"], _shuffled(expected))


def test_pack_names_the_quantization_a_float_input_goes_through(tmp_path, capsys):
    """An ONNX model takes float32 and quantizes it in its first QuantizeLinear: pack's line
    names that scale and zero point (the ones --normalize auto read), where it said 'input
    quantization unknown' beside a preset chosen from them."""
    model = FIXTURES / "onnx_qdq_int8.onnx"
    _image_folder(tmp_path / "data", per_class=2)
    assert main(["pack", str(tmp_path / "data"), "-o", str(tmp_path / "d.img"), "--model",
                 str(model), "--val-fraction", "0"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("for "))
    assert "unknown" not in line
    assert "float32 input, quantized by the model with scale 0.00784283 zero point -1" in line


def test_non_utf8_class_folder_packs(tmp_path, capsys):
    """Issue 47 #14: a class folder whose name is not UTF-8 keeps its label; its name is
    shown (and kept in the header) with U+FFFD."""
    data = tmp_path / "data"
    _image_folder(data, classes=("a", "b"), per_class=1)
    (data / "b").rename(data / "b\udcff")  # the bytes b"b\xff" on a POSIX file system
    out = tmp_path / "d.img"
    assert main(["pack", str(data), "-o", str(out), "--model", str(GREY_MODEL),
                 "--val-fraction", "0"]) == 0
    assert "classes: 0 a, 1 b\ufffd" in capsys.readouterr().out
    assert read_image(out)[0].class_names == ("a", "b\ufffd")


def test_labels_are_indices_or_names_never_both(tmp_path, capsys):
    """Issue 47 #5: a labels file of names and indices at once is refused, naming both."""
    files = _image_folder(tmp_path / "data", per_class=1)
    labels = tmp_path / "labels.csv"
    labels.write_text(f"{files[0].relative_to(tmp_path / 'data')},cat\n"
                      f"{files[1].relative_to(tmp_path / 'data')},1\n")
    assert main(["pack", str(tmp_path / "data"), "-o", str(tmp_path / "d.img"), "--model",
                 str(GREY_MODEL), "--labels", str(labels)]) == 2
    err = capsys.readouterr().err
    assert "row 1" in err and "row 2" in err and "not both" in err


def test_hook_interrupted_is_130_and_a_module_in_the_working_directory_is_found(
        tmp_path, monkeypatch, capsys):
    """Ctrl-C in a hook still interrupts (130); `--preprocess hooks:f` finds hooks.py in the
    working directory, as `python -m` would (issue 47 #17, #21)."""
    _image_folder(tmp_path / "data", per_class=1)
    (tmp_path / "cwd_hooks47.py").write_text(
        "import numpy as np\ndef blank(p):\n    return np.zeros((8, 8, 1))\n"
        "def stop(p):\n    raise KeyboardInterrupt\n")
    monkeypatch.chdir(tmp_path)
    base = ["pack", "data", "--model", str(GREY_MODEL), "--val-fraction", "0"]
    assert main(base + ["-o", "a.img", "--preprocess", "cwd_hooks47:stop"]) == 130
    assert main(base + ["-o", "b.img", "--preprocess", "cwd_hooks47:blank"]) == 0
    assert not (tmp_path / "a.img").exists() and (tmp_path / "b.img").is_file()
    capsys.readouterr()


@pytest.mark.parametrize("classes, per_class, argv, words", [
    # 10 classes of 8: 2 of each set aside (16 for the guard): 0.25, not the 0.188 asked
    ([f"c{k}" for k in range(10)], 8, [],
     "val: 20 records set aside from the training images (2 of each class's 8 images, a "
     "share of 0.25, raised from --val-fraction 0.1"),
    (["a", "b"], 20, [], "(8 of each class's 20 images, a share of 0.4, raised from"),
    (["a", "b"], 20, ["--val-fraction", "0"],
     "test: none and val: none, so simulate and train report no accuracy")])
def test_pack_states_the_share_it_set_aside(classes, per_class, argv, words, tmp_path, capsys):
    """Issue 64 item 6: the val split is set aside per class and rounds, so pack prints the
    share it took, and with no val split it does not promise validation accuracy."""
    _image_folder(tmp_path / "photos", classes=classes, per_class=per_class)
    assert main(["pack", str(tmp_path / "photos"), "-o", str(tmp_path / "d.img"), "--model",
                 str(GREY_MODEL), *argv]) == 0
    out = capsys.readouterr().out
    assert words in out, out
    assert "so simulate and train report validation accuracy" not in out or "val: " in out


def test_classes_give_the_models_own_order(tmp_path, capsys):
    """Issue 64 item 7: pack says the alphabetical order may not be a pre-trained model's and
    --classes gives that order; a class folder it does not name is refused in one line."""
    _image_folder(tmp_path / "photos", classes=("cat", "dog"), per_class=20)
    assert main(["pack", str(tmp_path / "photos"), "-o", str(tmp_path / "a.img"), "--model",
                 str(GREY_MODEL)]) == 0
    out = capsys.readouterr().out
    assert "classes: 0 cat, 1 dog" in out and "--classes cat,dog rearranged" in out
    assert main(["pack", str(tmp_path / "photos"), "-o", str(tmp_path / "b.img"), "--model",
                 str(GREY_MODEL), "--classes", "dog,cat"]) == 0
    out = capsys.readouterr().out
    assert "classes: 0 dog, 1 cat (the model's outputs 0..1, by --classes order" in out, out
    (first, a), (second, b) = read_image(tmp_path / "a.img"), read_image(tmp_path / "b.img")
    assert first.class_names == ("cat", "dog") and second.class_names == ("dog", "cat")
    assert sorted(b["y"].tolist()) == sorted((1 - a["y"]).tolist())
    assert main(["pack", str(tmp_path / "photos"), "-o", str(tmp_path / "c.img"), "--model",
                 str(GREY_MODEL), "--classes", "dog,bird"]) == 2
    err = capsys.readouterr().err
    assert "is class 'cat', which --classes does not name (dog, bird)" in err
    assert not (tmp_path / "c.img").exists()


@pytest.mark.parametrize("per_class, argv, held, words", [
    # 10 classes of 8: 20 for validation, then 2 of each class's 6 left held out (0.1 of 6
    # is 1 a class, raised to 2 so that the confirmation has its 16), 40 to train on
    (8, [], 20, "held-out: 20 records set aside from the training images"),
    (8, ["--held-out-fraction", "0"], 0, "held-out: none (--held-out-fraction 0)"),
    # 10 classes of 4: 20 for validation (2 a class is half of each), then 1 of 2 left is
    # 10 < 16, and 2 of 2 would leave nothing to train on: none
    (4, [], 0, "held-out: none (40 records are too few to hold 16 out beside the 20 for "
               "validation and keep half of them to train on)")])
def test_pack_holds_records_out_for_the_end_confirmation(per_class, argv, held, words,
                                                         tmp_path, capsys):
    """Issue 64 item 3: the held-out records sit at the val split's end, counted by the
    header's held_out, chosen per class from the images left after the val split, and are
    what load_dataset hands the guard apart from the checks' validation records."""
    classes = [f"c{k}" for k in range(10)]
    _image_folder(tmp_path / "photos", classes=classes, per_class=per_class)
    assert main(["pack", str(tmp_path / "photos"), "-o", str(tmp_path / "d.img"), "--model",
                 str(GREY_MODEL), *argv]) == 0
    out = capsys.readouterr().out
    assert words in out, out
    layout, arrays = read_image(tmp_path / "d.img")
    assert layout.held_out == held and layout.checked_val == 20
    assert layout.count("train") + layout.count("val") == 10 * per_class
    if held:
        assert "per class: train 4 c0" in out and "; held-out 2 c0, 2 c1" in out, out
        assert sorted(arrays["y_val"][-held:].tolist()) == sorted(list(range(10)) * 2)
        pixels = {a.tobytes() for a in arrays["x"]}
        assert not pixels & {a.tobytes() for a in arrays["x_val"]}  # no record in both
    from zocodegen.frontends import load_model
    from zocodegen.training.data import load_dataset
    assert load_dataset(tmp_path / "d.img", load_model(GREY_MODEL), 10).held_out == held


def test_a_held_out_share_that_cannot_be_had_is_refused(tmp_path, capsys):
    """--held-out-fraction given where the folder cannot spare 16 records and keep half to
    train on: one line naming the option, nothing written (the default says so instead)."""
    _image_folder(tmp_path / "photos", classes=[f"c{k}" for k in range(10)], per_class=4)
    assert main(["pack", str(tmp_path / "photos"), "-o", str(tmp_path / "d.img"), "--model",
                 str(GREY_MODEL), "--held-out-fraction", "0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("zocodegen: error: --held-out-fraction 0.1: 40 records are too few to hold "
                   "16 out beside the 20 for validation and keep half of them to train on: add "
                   "images, or pass --held-out-fraction 0"), err
    assert not (tmp_path / "d.img").exists()


def test_with_a_test_split_pack_does_not_promise_an_unconfirmed_run(tmp_path, capsys):
    """A folder with test/ holds nothing out (the test split measures the result), and the
    run then reports its test accuracy without calling the result unvalidated
    (guard.unvalidated); pack said the run would say it cannot confirm a gain."""
    _image_folder(tmp_path / "photos" / "train", per_class=20)
    _image_folder(tmp_path / "photos" / "test", per_class=3, seed=1)
    assert main(["pack", str(tmp_path / "photos"), "-o", str(tmp_path / "d.img"), "--model",
                 str(GREY_MODEL)]) == 0
    out = capsys.readouterr().out
    assert ("may have trained on, and the test split's accuracy measures the result" in out
            and "cannot confirm" not in out), out
