"""The paper-scale benchmark task (docs/scale.md): ``benchmarks/scale.py`` writes DATA.npz
that training accepts, reproducibly, with test images that share no glyph with the adapt or
pretraining images; every CIFAR-10-C corruption of ``benchmarks/corruptions.py`` really
changes the images; the two pre-trained fixtures run bit-exact in the numpy reference."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from conftest import FIXTURES, REPO
from zocodegen.frontends import load_model
from zocodegen.training.data import load_dataset

pytest.importorskip("sklearn", reason="the glyphs come from scikit-learn's bundled digits")
pytest.importorskip("scipy", reason="the rendering and the corruptions need scipy")
pytest.importorskip("PIL", reason="the photos and JPEG need Pillow")
pytest.importorskip("matplotlib", reason="one photo ships with matplotlib")

MODEL_64 = FIXTURES / "scale_model.tflite"
MODEL_128 = FIXTURES / "scale_model_128.tflite"


sys.path.insert(0, str(REPO / "benchmarks"))
import corruptions  # noqa: E402
import scale  # noqa: E402
import scale_data  # noqa: E402


def _write(tmp_path, name: str, *options: str) -> dict[str, np.ndarray]:
    path = tmp_path / name
    assert scale.main(["data", *options, "-o", str(path)]) == 0
    with np.load(path) as npz:
        return {k: npz[k] for k in npz.files} | {"_bytes": path.read_bytes()}


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
    """DATA.npz of gaussian_noise severity 5, seed 0, for the 64x64 fixture."""
    if not MODEL_64.is_file():
        pytest.skip(f"{MODEL_64} is missing (tests/fixtures/scale_models.py writes it)")
    return _write(tmp_path_factory.mktemp("scale"), "noise.npz", "--corruption",
                  "gaussian_noise", "--severity", "5", "--seed", "0")


def test_list_names_every_corruption(capsys):
    assert scale.main(["list"]) == 0
    names = capsys.readouterr().out.split()
    assert names == list(corruptions.NAMES)
    for required in ("gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "fog",
                     "snow", "brightness", "contrast", "elastic_transform",
                     "jpeg_compression", "pixelate"):
        assert required in names


def test_data_is_what_training_takes(noisy, tmp_path):
    assert set(k for k in noisy if not k.startswith("_")) == {"x", "y", "x_test", "y_test"}
    assert noisy["x"].shape == (1000, 64, 64, 3) and noisy["x"].dtype == np.int8
    assert noisy["x_test"].shape == (1000, 64, 64, 3) and noisy["x_test"].dtype == np.int8
    assert noisy["y"].dtype == np.int64 and noisy["y_test"].dtype == np.int64
    for y in (noisy["y"], noisy["y_test"]):  # every class, roughly balanced
        assert np.bincount(y, minlength=10).min() >= 80
    path = tmp_path / "data.npz"
    path.write_bytes(noisy["_bytes"])
    data = load_dataset(path, load_model(MODEL_64), 10)
    assert len(data.x) + len(data.x_val) == 1000 and len(data.x_test) == 1000


def test_int8_is_the_model_quantization_of_the_float_images(noisy, tmp_path):
    """The model takes [0, 1] as scale 1/255, zero point -128 (docs/scale.md)."""
    quant = load_model(MODEL_64).tensor(load_model(MODEL_64).inputs[0]).quant
    assert abs(quant.scalar_scale * 255 - 1) < 1e-6 and quant.scalar_zero_point == -128
    floats = _write(tmp_path, "f.npz", "--corruption", "gaussian_noise", "--severity", "5",
                    "--float")
    assert floats["x"].dtype == np.float32 and 0 <= floats["x"].min() <= floats["x"].max() <= 1
    q = scale_data.quantize(floats["x"], quant.scalar_scale, quant.scalar_zero_point)
    np.testing.assert_array_equal(q, noisy["x"])


def test_same_seed_same_bytes_other_seed_other_noise(noisy, tmp_path):
    again = _write(tmp_path, "again.npz", "--corruption", "gaussian_noise", "--severity", "5",
                   "--seed", "0")
    assert again["_bytes"] == noisy["_bytes"]
    other = _write(tmp_path, "other.npz", "--corruption", "gaussian_noise", "--severity", "5",
                   "--seed", "1")
    np.testing.assert_array_equal(other["y"], noisy["y"])  # the same clean images
    assert (other["x"] != noisy["x"]).mean() > 0.5
    assert (other["x_test"] != noisy["x_test"]).mean() > 0.5
    clean = _write(tmp_path, "clean.npz", "--corruption", "none")
    assert np.abs(clean["x"].astype(int) - noisy["x"]).mean() > 5


def test_splits_share_no_glyph_and_no_photo_tile():
    glyphs = scale_data.glyph_split()
    sets = {s: set(glyphs[s].tolist()) for s in scale_data.SPLITS}
    assert sum(len(s) for s in sets.values()) == 1797 == len(set.union(*sets.values()))
    for split in scale_data.SPLITS:
        used = set(scale_data.scene_params(split).glyph.tolist())
        assert used == sets[split], split  # every glyph of the split is drawn, no other
    assert scale_data.split_count("pretrain") >= 10_000
    tiles = {s: set(scale_data.tiles()[s]) for s in scale_data.SPLITS}
    assert not (tiles["adapt"] & tiles["test"] or tiles["pretrain"] & tiles["test"]
                or tiles["pretrain"] & tiles["adapt"])
    _, labels, drawn = scale_data.render("test", 64, np.arange(5))
    assert set(drawn.tolist()) <= sets["test"]
    np.testing.assert_array_equal(labels, scale_data.glyphs()[1][drawn])


def test_64_and_128_renders_show_the_same_scene():
    small, _, _ = scale_data.render("adapt", 64, np.arange(3))
    big, _, _ = scale_data.render("adapt", 128, np.arange(3))
    pooled = big.reshape(3, 64, 2, 64, 2, 3).mean(axis=(2, 4))
    assert np.abs(pooled - small).mean() < 0.05


@pytest.fixture(scope="module")
def sample():
    return scale_data.render("test", 64, np.arange(4))[0]


@pytest.mark.parametrize("severity", [3, 5])
@pytest.mark.parametrize("name", corruptions.NAMES)
def test_every_corruption_changes_images_within_range(sample, name, severity):
    rng = np.random.default_rng(7)
    out = corruptions.corrupt(sample, name, severity, rng)
    assert out.shape == sample.shape and out.dtype == np.float32
    assert out.min() >= 0.0 and out.max() <= 1.0
    assert np.abs(out - sample).mean() > 0.01, name
    again = corruptions.corrupt(sample, name, severity, np.random.default_rng(7))
    np.testing.assert_array_equal(out, again)  # deterministic given the generator


def test_noise_grain_is_a_cifar_pixel():
    """At 64x64 (f = 2) one noise value covers a 2x2 block, as CIFAR-10-C's noise does in the
    paper's upsampled images."""
    x = np.full((2, 64, 64, 3), 0.5, np.float32)
    noise = corruptions.corrupt(x, "gaussian_noise", 3, np.random.default_rng(0)) - x
    blocks = noise.reshape(2, 32, 2, 32, 2, 3)
    assert np.ptp(blocks, axis=(2, 4)).max() < 1e-6
    assert np.ptp(noise[:, ::2, ::2]) > 0.1


def test_clipped_zoom_is_scipy_zoom():
    from scipy.ndimage import zoom
    img = np.random.default_rng(0).random((64, 64, 3))
    for z in (1.0, 1.07, 1.25, 2.5):
        side = int(np.ceil(64 / z))
        top = (64 - side) // 2
        ref = zoom(img[top:top + side, top:top + side], (z, z, 1), order=1)
        trim = (ref.shape[0] - 64) // 2
        np.testing.assert_allclose(corruptions.clipped_zoom(img, z),
                                   ref[trim:trim + 64, trim:trim + 64], atol=1e-12)


@pytest.mark.parametrize("args, message", [
    (["--corruption", "fgo", "--severity", "5"], "unknown 'fgo'"),
    (["--corruption", "fog", "--severity", "6"], "must be in 1..5"),
    (["--corruption", "fog", "--severity", "0"], "must be in 1..5"),
    (["--corruption", "fog"], "--severity: required"),
])
def test_bad_arguments_are_one_line_and_exit_2(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        scale.main(["data", *args, "-o", str(tmp_path / "d.npz")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert not (tmp_path / "d.npz").exists()


def test_cli_process_error_is_one_line(tmp_path):
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "scale.py"), "data",
                             "--corruption", "frost", "--severity", "3", "-o",
                             str(tmp_path / "d.npz")], capture_output=True, text=True)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "unknown 'frost'" in result.stderr


@pytest.mark.parametrize("model, size", [(MODEL_64, 64), (MODEL_128, 128)],
                         ids=["scale_model", "scale_model_128"])
def test_fixture_bit_exact_on_real_images(model, size):
    """numpy reference == TFLite reference interpreter on every layer, on clean and
    corrupted renders (the fixtures are not in conftest.FIXTURE_TFLITE, whose chains build
    native C for every model)."""
    pytest.importorskip("ai_edge_litert", reason="needs the TFLite interpreter")
    from conftest import reference_interpreter
    from zocodegen.reference.executor import run_all
    if not model.is_file():
        pytest.skip(f"{model} is missing")
    graph = load_model(model)
    quant = graph.tensor(graph.inputs[0]).quant
    clean = scale_data.render("test", size, np.arange(2))[0]
    noisy = corruptions.corrupt(clean, "impulse_noise", 5, np.random.default_rng(0))
    images = scale_data.quantize(np.concatenate([clean, noisy]), quant.scalar_scale,
                                 quant.scalar_zero_point)
    it = reference_interpreter(model, preserve=True)
    index = {d["name"]: d["index"] for d in it.get_tensor_details()}
    for x in images:
        it.set_tensor(it.get_input_details()[0]["index"], x[None])
        it.invoke()
        env = run_all(graph, {graph.inputs[0]: x[None]})
        for op in graph.ops:
            name = op.outputs[0]
            expected = it.get_tensor(index[name]).reshape(env[name].shape)
            np.testing.assert_array_equal(env[name], expected, err_msg=f"{op.name}")


def test_pretrained_model_is_good_and_hurt_by_noise(noisy):
    """The 64x64 fixture classifies the clean test images well but not the noisy ones."""
    pytest.importorskip("ai_edge_litert", reason="needs the TFLite interpreter")
    from ai_edge_litert.interpreter import Interpreter
    it = Interpreter(model_path=str(MODEL_64), num_threads=1)
    it.allocate_tensors()
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    clean_x, clean_y = scale.clean_split("test", 64)
    quant = load_model(MODEL_64).tensor(load_model(MODEL_64).inputs[0]).quant
    clean_q = scale_data.quantize(clean_x[:200], quant.scalar_scale, quant.scalar_zero_point)

    def accuracy(x: np.ndarray, y: np.ndarray) -> float:
        hits = 0
        for xi, yi in zip(x, y):
            it.set_tensor(inp["index"], xi[None])
            it.invoke()
            hits += int(it.get_tensor(out["index"]).argmax() == yi)
        return hits / len(y)
    clean = accuracy(clean_q, clean_y[:200])
    assert clean >= 0.8
    assert accuracy(noisy["x_test"][:200], noisy["y_test"][:200]) < clean - 0.1
