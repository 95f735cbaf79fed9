"""The command line: inspect, infer, and the clean-error contract for bad input
(one line on stderr naming the problem, exit status 2, no traceback)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import FIXTURES, random_inputs, reference_interpreter, shared_model


def zocodegen(*args, check_rc=None):
    proc = subprocess.run([sys.executable, "-m", "zocodegen", *map(str, args)],
                          capture_output=True, text=True, timeout=300)
    if check_rc is not None:
        assert proc.returncode == check_rc, proc.stderr
    return proc


def assert_clean_error(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_inspect_text_and_json():
    model = FIXTURES / "mcunet_tiny.tflite"
    text = zocodegen("inspect", model, "--target", "stm32f746", check_rc=0).stdout
    assert "DEPTHWISE_CONV_2D" in text and "MACs" in text and "stm32f746" in text
    data = json.loads(zocodegen("inspect", model, "--json", check_rc=0).stdout)
    ops = [layer["op"] for layer in data["layers"]]
    for op in ("QUANTIZE", "PAD", "MEAN", "TRANSPOSE", "ADD", "SOFTMAX", "DEQUANTIZE"):
        assert op in ops
    for layer in data["layers"]:
        if layer["trainable"]:
            # the default estimator (np-channel): channel-wise biases where fewer weights
            # than outputs, else node perturbation
            assert layer["mode"] == ("CH" if layer["d_w"] < layer["d_a"] else "NP")


@pytest.mark.parametrize("model", ["mcunet_tiny.tflite", "multi_op.tflite"])
def test_infer_reference_matches_interpreter(tmp_path, model):
    path = FIXTURES / model
    it = reference_interpreter(path)
    (inp,) = it.get_input_details()
    xs = np.concatenate(random_inputs(inp["shape"], inp["dtype"], 5, seed=7))
    np.save(tmp_path / "x.npy", xs)
    out = tmp_path / ("y.npz" if len(it.get_output_details()) > 1 else "y.npy")
    zocodegen("infer", path, "--input", tmp_path / "x.npy", "--output", out,
              "--engine", "reference", check_rc=0)
    got = np.load(out)
    for k, x in enumerate(xs):
        it.set_tensor(inp["index"], x[None])
        it.invoke()
        for d in it.get_output_details():
            y = got if isinstance(got, np.ndarray) else got[d["name"]]
            np.testing.assert_array_equal(y[k], it.get_tensor(d["index"])[0])


def test_garbage_bytes(tmp_path):
    bad = tmp_path / "garbage.tflite"
    bad.write_bytes(np.random.default_rng(0).bytes(4096))
    assert_clean_error(zocodegen("inspect", bad), "garbage.tflite")


def test_truncated_file(tmp_path):
    data = (FIXTURES / "multi_op.tflite").read_bytes()
    for cut in (7, 100, len(data) // 2, len(data) - 10):
        bad = tmp_path / f"cut{cut}.tflite"
        bad.write_bytes(data[:cut])
        assert_clean_error(zocodegen("inspect", bad), bad.name)


def test_truncated_shared_model(tmp_path):
    data = shared_model("kws_ref_model.tflite").read_bytes()
    bad = tmp_path / "kws_cut.tflite"
    bad.write_bytes(data[: len(data) // 3])
    assert_clean_error(zocodegen("inspect", bad), "kws_cut.tflite")


def test_float_model():
    assert_clean_error(zocodegen("inspect", FIXTURES / "float_model.tflite"),
                       "float32", "CONV_2D", "quantiz")


def test_unsupported_op():
    assert_clean_error(zocodegen("inspect", FIXTURES / "unsupported_op.tflite"),
                       "LOGISTIC", "not supported")


def test_several_subgraphs():
    assert_clean_error(zocodegen("inspect", FIXTURES / "two_subgraphs.tflite"),
                       "2 subgraphs")


def test_missing_model(tmp_path):
    assert_clean_error(zocodegen("inspect", tmp_path / "nope.tflite"), "no such model")


def test_wrong_input_shape(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((2, 16, 15, 3), np.int8))
    proc = zocodegen("infer", FIXTURES / "multi_op.tflite", "--input", tmp_path / "x.npy",
                     "--output", tmp_path / "y.npz")
    assert_clean_error(proc, "(N, 16, 16, 3)", "(2, 16, 15, 3)")
    assert not (tmp_path / "y.npz").exists()


def test_wrong_input_dtype(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((2, 16, 16, 3), np.float32))
    proc = zocodegen("infer", FIXTURES / "multi_op.tflite", "--input", tmp_path / "x.npy",
                     "--output", tmp_path / "y.npz")
    assert_clean_error(proc, "int8", "float32")


def test_unreadable_input(tmp_path):
    (tmp_path / "x.npy").write_bytes(b"not numpy")
    proc = zocodegen("infer", FIXTURES / "multi_op.tflite", "--input", tmp_path / "x.npy",
                     "--output", tmp_path / "y.npz")
    assert_clean_error(proc, "x.npy")


def test_unknown_target():
    proc = zocodegen("inspect", FIXTURES / "multi_op.tflite", "--target", "esp32")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_infer_output_path_is_the_file_written(tmp_path):
    """--output names exactly the file written (numpy would append .npy/.npz), and a path
    the outputs cannot be written to as named is refused before anything runs."""
    np.save(tmp_path / "x.npy", np.zeros((2, 16, 16, 3), np.int8))
    for name in ("y.npy", "y.out"):  # multi_op has two outputs
        proc = zocodegen("infer", FIXTURES / "multi_op.tflite", "--input", tmp_path / "x.npy",
                         "--output", tmp_path / name)
        assert_clean_error(proc, name, "2 outputs", f"pass --output {tmp_path / 'y.npz'} ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npy"]

    np.save(tmp_path / "d.npy", np.zeros((2, 8, 8, 1), np.int8))  # digits_cnn: one output
    proc = zocodegen("infer", FIXTURES / "digits_cnn.tflite", "--input", tmp_path / "d.npy",
                     "--output", tmp_path / "y.bin")
    assert_clean_error(proc, "y.bin", f"pass --output {tmp_path / 'y.npy'} ")
    for name in ("y.npy", "y.npz"):
        proc = zocodegen("infer", FIXTURES / "digits_cnn.tflite", "--input", tmp_path / "d.npy",
                         "--output", tmp_path / name, check_rc=0)
        assert proc.stderr.strip().endswith(f"-> {tmp_path / name}"), proc.stderr
        got = np.load(tmp_path / name)
        y = got if name.endswith(".npy") else got["StatefulPartitionedCall:0"]
        assert y.shape == (2, 10)
    proc = zocodegen("infer", FIXTURES / "multi_op.tflite", "--input", tmp_path / "x.npy",
                     "--output", tmp_path / "m.npz", check_rc=0)
    assert proc.stderr.strip().endswith(f"-> {tmp_path / 'm.npz'}"), proc.stderr
    assert len(np.load(tmp_path / "m.npz").files) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npy", "m.npz", "x.npy", "y.npy",
                                                         "y.npz"]


def test_corrupted_flatbuffer(tmp_path):
    """A flatbuffer offset that points past the end: refused before the reader follows it."""
    data = bytearray((FIXTURES / "multi_op.tflite").read_bytes())
    data[0:4] = (len(data) + 64).to_bytes(4, "little")  # the root table offset
    bad = tmp_path / "bad_root.tflite"
    bad.write_bytes(data)
    assert_clean_error(zocodegen("inspect", bad), "bad_root.tflite: not a valid TFLite "
                       "flatbuffer", "points past the end of the file")


def test_a_loss_at_the_cap_says_so():
    """Issue 64 item 6: the int8 cross-entropy saturates at INT32_MAX in Q5.26, 32 nats; a
    mean of 32.000 is that cap, and simulate's summary says so."""
    from zocodegen.cli import _loss
    from zocodegen.numerics import INT32_MAX
    from zocodegen.reference.softmax import LOSS_CAP_NATS
    assert LOSS_CAP_NATS == pytest.approx(32.0, abs=1e-6)
    assert (INT32_MAX >> 10) / 65536 == pytest.approx(LOSS_CAP_NATS, abs=1e-3)  # as Q16
    assert _loss(8.08) == "8.080"
    assert _loss(32.0) == "32.000 (the cap: every record's loss saturates at 32 nats)"


def test_progress_is_lines_where_the_output_is_not_a_terminal(monkeypatch, capsys):
    """Issue 64 item 4: under a log, CI or nohup the command line's bars become a line every
    LINE_SECONDS on stdout (none for a shorter run), never silence and never a bar's
    carriage returns; the API's progress=False stays silent."""
    import time
    from zocodegen import progress
    monkeypatch.setattr(progress, "LINE_SECONDS", 0.2)
    bar = progress.progress_bar(None, total=6, desc="simulate", unit="step")
    assert progress.in_lines(bar)
    for _ in range(6):
        time.sleep(0.1)
        bar.update(1)
    bar.close()
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert len(lines) >= 2 and all(line.startswith("simulate: ") for line in lines), lines
    assert lines[-1].startswith("simulate: 100%") and "\r" not in out.out and not out.err
    quiet = progress.progress_bar(None, total=3, desc="simulate", unit="step")
    quiet.update(3)
    quiet.close()  # shorter than LINE_SECONDS: nothing
    silent = progress.progress_bar(False, total=3, desc="simulate")
    silent.update(3)
    silent.close()
    assert capsys.readouterr().out == ""


def test_a_line_bar_does_not_print_its_end_twice(monkeypatch, capsys):
    """The example's train printed "train: 100% ..." twice around the guard's line: the
    close repeats the last line only when it says something new (an accuracy that came
    after it)."""
    import time
    from zocodegen import progress
    monkeypatch.setattr(progress, "LINE_SECONDS", 0.05)
    for late_accuracy in (False, True):
        bar = progress.progress_bar(None, total=3, desc="train", unit="step")
        for _ in range(3):
            time.sleep(0.1)
            bar.set_postfix({"loss": "1.000"}, refresh=False)
            bar.update(1)
        print("guard: the closing lines")
        if late_accuracy:
            bar.set_postfix({"loss": "1.000", "acc": "77.5%"}, refresh=False)
        bar.close()
        lines = capsys.readouterr().out.splitlines()
        ends = [line for line in lines if line.startswith("train: 100%")]
        assert len(ends) == 1 + late_accuracy, lines
        assert lines[-1].endswith("acc=77.5%]") if late_accuracy else lines[-1].startswith(
            "guard:"), lines
