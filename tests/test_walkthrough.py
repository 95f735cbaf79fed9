"""Issue 49's newcomer walkthrough on a generated folder: two classes, 60 small PNG and JPEG
photos of mixed sizes (a quarter greyscale), no val/ or test/ folder, on a fixture model
with more outputs than classes. pack, simulate, export and infer each succeed on the first
try, every accuracy printed names its split, a run that kept its start says so, and the API
prints nothing unless asked."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import zocodegen
from conftest import FIXTURES, shared_model
from zocodegen.cli import main
from zocodegen.training.guard import MIN_VAL_RECORDS

MODEL = FIXTURES / "digits_cnn.tflite"  # 8x8x1 int8, 10 outputs


def _photos(root: Path, per_class: int = 30) -> Path:
    """person/ (a bright centre) and no_person/ (noise), 40x30 to 100x80 pixels."""
    rng = np.random.default_rng(49)
    for name in ("person", "no_person"):
        (root / name).mkdir(parents=True)
        for k in range(per_class):
            w, h = int(rng.integers(40, 100)), int(rng.integers(30, 80))
            pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            if name == "person":
                pixels[h // 4:3 * h // 4, w // 4:3 * w // 4] = 255
            image = Image.fromarray(pixels) if k % 4 else Image.fromarray(pixels[..., 0], "L")
            image.save(root / name / f"{k}.{'png' if k % 2 else 'jpg'}")
    return root


def _accuracies_name_their_split(text: str) -> None:
    for line in text.splitlines():
        if "accuracy" in line and "%" in line:
            assert re.search(r"(validation|test) accuracy", line), line


def test_walkthrough_small_folder(tmp_path, capsys):
    photos = _photos(tmp_path / "photos")
    image, run, tuned = tmp_path / "d.img", tmp_path / "run", tmp_path / "tuned.tflite"
    assert main(["pack", str(photos), "-o", str(image), "--model", str(MODEL)]) == 0
    out = capsys.readouterr().out
    assert f"{MIN_VAL_RECORDS} val records" in out  # raised from 10 % of 60 = 6
    assert "classes: 0 no_person, 1 person (the model's outputs 0..1" in out
    assert "outputs 2..9 of the model's 10 have no class" in out
    assert "per class: train 22 no_person, 22 person; val 8 no_person, 8 person" in out
    assert "test: none" in out
    assert main(["simulate", str(MODEL), "--data", str(image), "-o", str(run),
                 "--steps", "20"]) == 0
    captured = capsys.readouterr()
    err = captured.err + captured.out  # the summary and the progress lines
    _accuracies_name_their_split(err)
    assert "validation accuracy" in err and "mean of the first / last 10 step(s)" in err
    header, row = (run / "confusion.csv").read_text().splitlines()[:2]
    names = header.split("classes: ")[1].split(", ")
    assert names[:3] == ["no_person", "person", "output 2"] and len(names) == 10
    assert len(row.split(",")) == len(names)
    assert main(["export", str(MODEL), str(run / "checkpoint.bin"), "-o", str(tuned)]) == 0
    capsys.readouterr()
    assert main(["infer", str(tuned), "--input", str(photos / "person" / "1.png")]) == 0
    assert re.search(r": person \((0\.\d\d|1\.00)\)$", capsys.readouterr().out.strip())
    # a folder of class subfolders: each photo's class and probability, then the accuracy
    # against the folder names (issue 64 item 7)
    assert main(["infer", str(tuned), "--input", str(photos)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 61 and all(re.search(r": (\S+|output \d) \((0\.\d\d|1\.00)\)$",
                                              line) for line in lines[:60])  # a spare output
    right = sum(Path(line.split(": ")[0]).parent.name == line.split(": ")[1].split(" (")[0]
                for line in lines[:60])
    assert lines[60] == f"accuracy against the class folders: {right}/60 ({100 * right / 60:.1f} %)"


def test_photos_through_a_model_without_class_scores_need_an_output_file(tmp_path, capsys):
    """`infer` prints classes where output 0 is one score per class; a detector's feature
    maps (mcunet_det, [1, 4, 5, 18]) are refused without --output in one line, and written
    with it (before: an internal IndexError after the whole folder had run)."""
    model = shared_model("mcunet_det.tflite")
    photos = _photos(tmp_path / "photos", per_class=2)
    assert main(["infer", str(model), "--input", str(photos)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"zocodegen: error: --input {photos}: pass --output Y.npy for its outputs (output 0 "
        "of mcunet_det.tflite is [1, 4, 5, 18], not one score per class)")
    assert main(["infer", str(model), "--input", str(photos), "--output",
                 str(tmp_path / "y.npz")]) == 0
    printed = capsys.readouterr()
    assert printed.out == "" and f"4 sample(s) -> {tmp_path / 'y.npz'}" in printed.err
    with np.load(tmp_path / "y.npz") as outputs:
        assert sorted(outputs[k].shape for k in outputs.files) == [
            (4, 4, 5, 18), (4, 8, 10, 18), (4, 16, 20, 18)]


def test_a_run_that_kept_its_start_says_so(tmp_path, capsys):
    photos = _photos(tmp_path / "photos")
    image, run, same = tmp_path / "d.img", tmp_path / "run", tmp_path / "same.tflite"
    assert main(["pack", str(photos), "-o", str(image), "--model", str(MODEL)]) == 0
    assert main(["simulate", str(MODEL), "--data", str(image), "-o", str(run),
                 "--steps", "4", "--lr", "0.00001"]) == 0
    # the last parameters barely move at this eta: they do not confirm against the start,
    # and the line says the least net gain that would have, not "1.28 sqrt(0)" alone
    captured = capsys.readouterr()
    err = captured.err + captured.out  # the summary and the guard's lines
    assert "no validated improvement: the result equals the starting model: the result " \
           "(step 4) did not confirm against the start" in err
    assert "gets 0 record(s) right that the start gets wrong and 0 the other way" in err
    assert "did not confirm: a net gain of at least 1 record(s) (more than none, and 1.28 " \
           "sqrt(0)) and a lower loss needed)" in err
    assert main(["export", str(MODEL), str(run / "checkpoint.bin"), "-o", str(same)]) == 0
    assert "the file equals the input model" in capsys.readouterr().err
    assert same.read_bytes() == MODEL.read_bytes()
    # the device's run says the same reason, not "no check beat the start"
    fw, device = tmp_path / "fw", tmp_path / "device"
    assert main(["build", str(MODEL), "--target", "native", "--train", "full", "--steps", "4",
                 "--lr", "0.00001", "-o", str(fw)]) == 0
    assert main(["train", "--native", str(fw), "--image", str(image), "-o", str(device)]) == 0
    out = capsys.readouterr().out
    assert "the result is the start (the last parameters did not confirm)" in out
    assert "no validated improvement: the result equals the starting model: the result " \
           "(step 4) did not confirm against the start on the last 44 training records" in out
    assert zocodegen.train(image, tmp_path / "api", native=fw).unchanged.startswith(
        "the result (step 4) did not confirm against the start")


def test_small_folders_refused_at_pack_with_the_folder_fix(tmp_path, capsys):
    photos = _photos(tmp_path / "photos", per_class=10)
    assert main(["pack", str(photos), "-o", str(tmp_path / "d.img"), "--model",
                 str(MODEL)]) == 2
    assert "add images" in capsys.readouterr().err and not (tmp_path / "d.img").exists()


def test_the_api_prints_nothing_unless_asked(tmp_path, capsys):
    photos = _photos(tmp_path / "photos")
    image = tmp_path / "d.img"
    zocodegen.pack(photos, image, model=MODEL, preprocess=lambda p: np.zeros((8, 8, 1)))
    run = zocodegen.simulate(MODEL, image, tmp_path / "run", steps=4)
    assert capsys.readouterr() == ("", "") and run.accuracy_split == "validation"
    lines: list[str] = []
    zocodegen.simulate(MODEL, image, tmp_path / "run2", steps=4, progress=lines.append)
    assert any(line.startswith("guard:") for line in lines)


@pytest.mark.parametrize("given", ["--output"])
def test_infer_npy_still_needs_output(given, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((1, 8, 8, 1), np.int8))
    assert main(["infer", str(MODEL), "--input", str(tmp_path / "x.npy")]) == 2
    assert given in capsys.readouterr().err


def test_validation_accuracy_says_which_records_beside_held_out_ones(tmp_path, capsys):
    """Ten classes of 8 photos: pack holds 20 out at the val split's end. The run's accuracy
    is on all 40 (the device's count), the guard's checks on 20: simulate and train say so
    instead of "the validation split, which the guard also selects on" (a newcomer saw
    "validation 2/20" beside "validation accuracy 10.0%" of 4/40)."""
    rng = np.random.default_rng(64)
    photos = tmp_path / "photos"
    for c in range(10):
        (photos / f"c{c}").mkdir(parents=True)
        for k in range(8):
            Image.fromarray(rng.integers(0, 256, (20 + k, 30, 3), dtype=np.uint8)).save(
                photos / f"c{c}" / f"{k}.png")
    image, fw = tmp_path / "d.img", tmp_path / "fw"
    assert main(["pack", str(photos), "-o", str(image), "--model", str(MODEL)]) == 0
    assert "40 val (20 of them held out)" in capsys.readouterr().out
    note = ("(no test split: accuracy is measured on the validation split's 40 records: the "
            "guard's checks select on 20 of them, and 20 are the held-out records of the "
            "end's confirmation)")
    assert main(["simulate", str(MODEL), "--data", str(image), "-o", str(tmp_path / "run"),
                 "--steps", "2"]) == 0
    assert note in capsys.readouterr().err.splitlines()
    assert main(["build", str(MODEL), "--target", "native", "--train", "full", "--steps", "2",
                 "-o", str(fw)]) == 0
    assert main(["train", "--native", str(fw), "--image", str(image), "-o",
                 str(tmp_path / "device")]) == 0
    assert note in capsys.readouterr().out.splitlines()
