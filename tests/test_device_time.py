"""The device-hours model (host/device_time.py, `zocodegen device-time`): every step, trial
and check a run's log shows is counted once, at its cost (issue 32)."""
from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from conftest import FIXTURES
from zocodegen.cli import main
from zocodegen.datasets import digits_npz
from zocodegen.frontends import load_model
from zocodegen.host import device_time as dt
from zocodegen.training.config import TrainConfig
from zocodegen.training.metrics import MetricsRow, read_metrics, write_metrics

DIGITS = FIXTURES / "digits_cnn.tflite"

LOG = """lr trial 0.003: 18 steps, validation 23/101 correct, loss 2.3859
lr trial 0.01: 18 steps, validation 23/101 correct, loss 2.2948
lr trial 0.03: 18 steps, validation 30/101 correct, loss 2.0808  <- chosen
guard: a check every 8 steps on 101 validation records; before training 24/101 correct
guard: step 48: validation 33.7% fell below the best (40/101 at step 40); rolled back
"""
CONFIRMATION = ("guard: step 900: on the last 128 training records, which no check saw, the "
                "best (step 328) gets 105 right, loss 0.6341, the start 106, loss 0.7579: "
                "the result is the start (the best did not confirm)\n")
LAST_CONFIRMATION = ("guard: step 900: on the last 128 training records, which no check saw, "
                     "and the 101 validation records of its last check, the last parameters "
                     "(step 900) gets 9 record(s) right that the start gets wrong and 2 the "
                     "other way, loss 0.7250 against 0.7530: the result is the last "
                     "parameters\n")
SPARSE = """block 0: 64 trial records; held-out 60 -> 68 of 256 correct, mean loss 2.410 -> 2.106  <- selected
block 1: 64 trial records; held-out 60 -> 56 of 256 correct, mean loss 2.410 -> 2.348
block 2: 64 trial records; held-out 60 -> 59 of 256 correct, mean loss 2.410 -> 2.402
block 3: 64 trial records; held-out 60 -> 59 of 256 correct, mean loss 2.410 -> 2.371
""" + LOG
#: A sparse run logged before the held-out set had its own size H (H was S).
SPARSE_BEFORE_H = """block 0: held-out 15 -> 17 of 64 correct (+2)  <- selected
block 1: held-out 15 -> 14 of 64 correct (-1)
""" + LOG


def test_a_run_is_read_from_its_log():
    assert dt.run_shape(LOG, 900, 1) == dt.RunShape(900, 1, 3, 18, 8, 101, 0, 0)
    assert dt.run_shape(SPARSE, 900, 1) == dt.RunShape(900, 1, 3, 18, 8, 101, 4, 64, 256)
    assert dt.run_shape(SPARSE_BEFORE_H, 900, 1) == dt.RunShape(900, 1, 3, 18, 8, 101, 2, 64, 64)
    assert dt.run_shape("", 50, 2) == dt.RunShape(50, 2)  # --no-guard, fixed lr
    stopped = LOG + ("guard: step 640: no new best in 640 steps (the best: the start, 24/101 "
                     "validation records correct); the run stops here (--patience)\n")
    assert dt.run_shape(stopped, 900, 1) == dt.RunShape(640, 1, 3, 18, 8, 101, 0, 0)


def test_every_step_check_and_record_is_counted_once():
    costs = dt.Costs(step=10.0, forward=0.5, link=1.0)
    shape = dt.run_shape(LOG, 900, 1)
    # lr trials: 3 x 18 steps and 3 checks of 101; the guard's baseline check
    setup_records = 3 * 101 + 101
    assert dt.setup_seconds(shape, costs) == (54 * 10.0 + setup_records * 0.5,
                                              54 * 1.0 + setup_records * 1.0)
    compute, link = dt.seconds_at(900, shape, costs)
    checks = 900 // 8
    assert compute == 54 * 10.0 + 900 * 10.0 + (setup_records + checks * 101) * 0.5
    assert link == 54 + 900 + setup_records + checks * 101
    # the end's confirmation: best and start on 128 training records, once, at the last step
    confirmed = dt.run_shape(LOG + CONFIRMATION, 900, 1)
    assert confirmed.confirm_records == 128
    assert dt.seconds_at(899, confirmed, costs) == dt.seconds_at(899, shape, costs)
    assert dt.seconds_at(900, confirmed, costs) == (compute + 256 * 0.5, link + 256)
    # the last parameters are compared on the validation records too: 2 x (128 + 101)
    last = dt.run_shape(LOG + LAST_CONFIRMATION, 900, 1)
    assert last.confirm_records == 229
    assert dt.seconds_at(900, last, costs) == (compute + 458 * 0.5, link + 458)
    # on an image with held-out records, on those alone: 2 x 20
    held = dt.run_shape(LOG + "guard: step 900: on the image's 20 held-out records, which no "
                        "step trained on and no check saw, the last parameters (step 900) "
                        "gets 3 record(s) right ...\n", 900, 1)
    assert held.confirm_records == 20
    assert dt.seconds_at(900, held, costs) == (compute + 40 * 0.5, link + 40)


def test_sparse_block_trials_cost_their_own_blocks():
    costs = dt.Costs(step=2.0, forward=0.5, link=1.0, block_steps=(4.0, 3.0, 2.0, 1.0))
    shape = dt.run_shape(SPARSE, 900, 1)
    no_blocks = dt.setup_seconds(dt.run_shape(LOG, 900, 1), costs)
    compute, link = dt.setup_seconds(shape, costs)
    assert compute - no_blocks[0] == 64 * (4.0 + 3.0 + 2.0 + 1.0) + 5 * 256 * 0.5
    assert link - no_blocks[1] == 4 * 64 + 5 * 256


def test_link_time_of_a_64x64_record():
    """12,296 bytes (image, label, CRC) are 25 sectors: 7 READs of up to 4 whole sectors at
    115200 baud before (1.14 s), 2 READs of up to 16 at the default 1,228,800 baud now, the
    second without the last sector's zero padding (4,104 bytes, not 9 sectors)."""
    model = FIXTURES / "scale_model.tflite"
    before = dt.record_link_seconds(64 * 64 * 3, baud=115200, max_sectors=4, trimmed=False)
    assert dt.link_seconds_per_record(load_model(model), baud=115200, max_sectors=4) < before
    wire = 7 * 18 + sum(r + r // 254 + 2 for r in [6 + 4 + 512 * n + 4
                                                    for n in (4, 4, 4, 4, 4, 4, 1)])
    assert before == pytest.approx(wire * 10 / 115200)
    assert 1.1 < before < 1.2
    now = dt.link_seconds_per_record(load_model(model))
    wire = 2 * 18 + sum(r + r // 254 + 2 for r in [6 + 4 + n + 4 for n in (16 * 512, 4104)])
    assert now == pytest.approx(wire * 10 / 1_228_800)
    assert before / now > 10


def _synthetic_run(tmp_path, split="test"):
    """A run folder whose metrics.csv has known crossings: accuracy 0.20 before training,
    then 0.30 / 0.45 / 0.50 / 0.56 / 0.60 at steps 10..50 (gain 0.40: 50 % = 0.40 first at
    step 20 (0.45), 80 % = 0.52 at step 40, 90 % = 0.56 at step 40)."""
    run = tmp_path / "run"
    run.mkdir()
    rows = [MetricsRow(0, float("nan"), 0.0, 0.2)]
    for step in range(1, 51):
        acc = {10: 0.3, 20: 0.45, 30: 0.5, 40: 0.56, 50: 0.6}.get(step)
        rows.append(MetricsRow(step, 1.0, 0.01, acc, None, ""))
    write_metrics(run / "metrics.csv", rows)
    (run / "run.json").write_text(json.dumps({
        "model": str(DIGITS), "config": TrainConfig(steps=50, lr_auto=True).as_dict(),
        "lr": 0.01, "accuracy_split": split}))
    return run


def test_time_to_accuracy_of_a_synthetic_run(tmp_path):
    """Device hours to 50 / 80 / 90 % of the run's gain and of a ceiling's, at the first
    evaluation at or above each level, the split named; curves.png gains its hours panel."""
    run = _synthetic_run(tmp_path)
    shape = dt.RunShape(50, 1)  # no trials, no guard: step k is done after k steps
    costs = dt.Costs(step=36.0, forward=0.5, link=0.0)  # 100 steps an hour
    evaluations = dt.timed_evaluations(read_metrics(run / "metrics.csv"), shape, costs)
    assert [e[2] for e in evaluations] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    t = dt.DeviceTime("stm32h7b3", 1_228_800, costs, shape, 1800.0, 0.0, evaluations, "test",
                      ceiling=0.7)
    own = t.crossings(0.6)
    assert [c.hours for c in own] == [0.2, 0.4, 0.4]
    assert [round(c.accuracy, 6) for c in own] == [0.4, 0.52, 0.56]
    ceiling = t.crossings(0.7)  # 0.45, 0.60, 0.65: the last never reached
    assert [c.hours for c in ceiling] == [0.2, 0.5, None]
    lines = dt.time_to_accuracy(t)
    assert lines[0] == "  test accuracy 20.0% -> 60.0% (+40.0 points) in 30.0 min"
    assert lines[1] == ("  device time to 50 / 80 / 90 % of the run's gain (40.0 / 52.0 / "
                        "56.0 % test): 12.0 min / 24.0 min / 24.0 min")
    assert lines[2] == ("  device time to 50 / 80 / 90 % of the gain to 70.0% (--ceiling) "
                        "(45.0 / 60.0 / 65.0 % test): 12.0 min / 30.0 min / never")
    # a shifted level moves the crossing: nothing in this test holds by construction
    assert dt.DeviceTime("b", 1, costs, shape, 0, 0, evaluations, "test",
                         shares=(0.25,)).crossings(0.6)[0].hours == 0.1
    before = (run / "metrics.csv").read_bytes()
    dt.draw_hours(run, t)
    from PIL import Image
    assert Image.open(run / "curves.png").size == (800, 800)  # two panels (one: 800 x 450)
    assert (run / "metrics.csv").read_bytes() == before
    valid = dt.DeviceTime("b", 1, costs, shape, 0, 0, evaluations, "validation")
    assert dt.time_to_accuracy(valid)[0].startswith("  validation accuracy 20.0%")
    flat = dt.DeviceTime("b", 1, costs, shape, 0, 0, evaluations[:1] * 2, "test")
    assert "none (the test split did not rise above the start)" in dt.time_to_accuracy(flat)[1]


@pytest.mark.skipif(not (shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")),
                    reason="needs gcc-arm-none-eabi and qemu-system-arm")
def test_device_time_of_a_simulated_run(tmp_path, capsys):
    """`zocodegen device-time RUN --target stm32f746` adds up what the run recorded it did
    (run.json agrees with the lines the simulator printed, which are what the device logs)
    at the instructions measured under QEMU -icount; a step's a + b Q holds from Q = 2."""
    data = tmp_path / "d.npz"
    graph = load_model(DIGITS)
    digits_npz(data, graph.tensor(graph.inputs[0]).quant)
    run = tmp_path / "run"
    assert main(["simulate", str(DIGITS), "--data", str(data), "-o", str(run), "--steps",
                 "80", "--queries", "3", "--seed", "2"]) == 0  # 66.4 -> 66.7 % test accuracy
    printed = capsys.readouterr().out
    record = json.loads((run / "run.json").read_text())
    shape = dt.recorded_shape(record)
    assert shape == dt.run_shape(printed, 80, 1)
    assert shape.lr_trials == 3 and shape.val_records > 0 and shape.guard_every > 0
    drawn = (run / "curves.png").read_bytes()
    assert main(["device-time", str(run), "--target", "stm32f746", "--ceiling", "99"]) == 0
    out = capsys.readouterr().out
    assert f"{shape.lr_trials} lr trials of {shape.lr_trial_steps} steps" in out, out
    assert "of device time" in out and "test accuracy" in out, out
    # the time-to-accuracy lines, at the hours the run's own evaluations were done
    assert "% of the run's gain (" in out and "% of the gain to 99.0% (--ceiling)" in out, out
    assert (run / "curves.png").read_bytes() != drawn
    config = TrainConfig(queries=3)
    counts = [dt.step_instructions(DIGITS, "stm32f746", replace(config, queries=q), tmp_path)
              for q in (2, 3, 5)]
    # a + b Q from Q = 2, within 1 % (a step's instructions depend a little on its data)
    assert abs(counts[0] + 3 * (counts[1] - counts[0]) - counts[2]) < 0.01 * counts[2], counts


def test_device_time_refuses_what_is_not_a_run(tmp_path, capsys):
    assert main(["device-time", str(tmp_path), "--target", "stm32f746"]) == 2
    assert "run.json not found" in capsys.readouterr().err
    for text in ("{not json", '{"config": {}}', "[]"):
        (tmp_path / "run.json").write_text(text)
        assert main(["device-time", str(tmp_path), "--target", "stm32f746"]) == 2
        assert "is not a run's record" in capsys.readouterr().err


@pytest.mark.parametrize("split, words", [
    ("test", "  test accuracy 10.0% -> 15.0% (+5.0 points)"),
    ("validation", "  validation accuracy 10.0% -> 15.0% (+5.0 points), the split the guard "
                   "selects on"),
    (None, "  accuracy (on the test split, or validation without one) 10.0% -> 15.0%")])
def test_device_time_names_the_split_of_its_accuracy(split, words, tmp_path):
    """Issue 64 item 6: an image without a test split measures validation accuracy, and
    device-time says so (run.json's accuracy_split), as simulate and train do."""
    t = dt.DeviceTime("stm32f746", 115200, dt.Costs(1.0, 0.1, 0.01), dt.RunShape(10, 1), 10.0,
                      1.0, ((0, 0.10, 0.0), (10, 0.15, 0.003)), split)
    lines = dt.describe(tmp_path, t)
    assert any(line.startswith(words) for line in lines), lines


@pytest.mark.skipif(not (shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")),
                    reason="needs arm-none-eabi-gcc and qemu-system-arm")
def test_a_float_input_models_step_is_measured(tmp_path):
    """Issue 64: device-time measures the step of a model whose float input the device
    quantizes (an ONNX export, mcunet_tiny): its records are packed as float32, as `pack`
    packs them; they were int8 and the firmware refused them."""
    model = FIXTURES / "onnx_qdq_int8.onnx"
    assert load_model(model).tensor(load_model(model).inputs[0]).dtype == "float32"
    counts = [dt.step_instructions(model, "stm32f746", TrainConfig(queries=q), tmp_path)
              for q in (2, 3)]
    assert 0 < counts[0] < counts[1]


def test_device_time_says_which_validation_records_it_counts(tmp_path):
    """With held-out records in the val split, the accuracy is not all "the split the guard
    selects on": device-time prints run.json's accuracy_note instead, as simulate does."""
    from zocodegen.training.guard import validation_note
    note = validation_note(40, 20)
    t = dt.DeviceTime("stm32f746", 115200, dt.Costs(1.0, 0.1, 0.01), dt.RunShape(10, 1), 10.0,
                      1.0, ((0, 0.10, 0.0), (10, 0.15, 0.003)), "validation",
                      accuracy_note=note)
    lines = dt.describe(tmp_path, t)
    assert f"  {note}" in lines and not any("the split the guard selects on" in line
                                            for line in lines), lines
