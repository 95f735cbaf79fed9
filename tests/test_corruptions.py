"""The corruption families of the grid experiment (``zocodegen.datasets.corrupt_family``).

The experiment compares methods across kinds of shift, so each family must be a real shift
(the pre-trained model gets worse, more so at severity 2) that stays learnable (far from
chance), and every cell must be reproducible from its seed. The accuracy checks run the numpy
reference of digits_cnn on a slice of the test split, which keeps this file fast.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import FIXTURES
from zocodegen.frontends import load_model
from zocodegen.reference.executor import run

pytest.importorskip("sklearn", reason="the digits data comes from scikit-learn's bundled copy "
                                      "(pip install scikit-learn)")

from zocodegen import datasets  # noqa: E402

#: Test images the accuracy checks use (of 360).
SLICE = 150


@pytest.fixture(scope="module")
def split():
    return datasets.load_digits_split(0)


@pytest.fixture(scope="module")
def accuracy():
    """accuracy(images, labels) of digits_cnn (int8, numpy reference)."""
    graph = load_model(FIXTURES / "digits_cnn.tflite")
    q = graph.tensor(graph.inputs[0]).quant

    def score(images: np.ndarray, labels: np.ndarray) -> float:
        x = datasets.quantize_images(images, q.scalar_scale, q.scalar_zero_point)
        hits = [int(run(graph, {graph.inputs[0]: xi[None]})[graph.outputs[0]].argmax()) == yi
                for xi, yi in zip(x, labels)]
        return float(np.mean(hits))

    return score


@pytest.mark.parametrize("family", datasets.FAMILIES)
def test_deterministic_shapes_and_range(split, family):
    clean = split["x_clean_test"][:40]
    for severity in datasets.SEVERITIES:
        a = datasets.corrupt_family(clean, family, severity, 5)
        np.testing.assert_array_equal(a, datasets.corrupt_family(clean, family, severity, 5))
        assert a.dtype == np.float32 and a.shape == clean.shape
        assert a.min() >= 0.0 and a.max() <= datasets.PIXEL_MAX
        assert np.abs(a - clean).mean() > 0.3, (family, severity)
    # The random families draw from the seed; the deterministic ones ignore it.
    other = datasets.corrupt_family(clean, family, 1, 6)
    same = np.array_equal(other, datasets.corrupt_family(clean, family, 1, 5))
    assert same == (family in ("blur", "digital"))
    # Severity 2 moves the images further from the clean ones than severity 1.
    distance = [np.abs(datasets.corrupt_family(clean, family, s, 5) - clean).mean()
                for s in datasets.SEVERITIES]
    assert distance[1] > distance[0]


@pytest.mark.parametrize("family", datasets.FAMILIES)
def test_each_family_lowers_accuracy_but_stays_learnable(split, accuracy, family,
                                                         record_property):
    images, labels = split["x_clean_test"][:SLICE], split["y_clean_test"][:SLICE]
    clean = accuracy(images, labels)
    shifted = [accuracy(datasets.corrupt_family(images, family, s, 3), labels)
               for s in datasets.SEVERITIES]
    record_property("accuracy", {"clean": clean, "severities": shifted})
    assert clean >= 0.95
    assert shifted[0] <= clean - 0.05, (family, clean, shifted)
    assert shifted[1] <= shifted[0] - 0.05, (family, clean, shifted)
    assert shifted[1] >= 0.4, (family, shifted)  # chance is 0.1


def test_cell_split_and_npz(split, tmp_path):
    cell = datasets.load_family_split("noise", 2, 0)
    assert set(cell) == set(split)
    for key in ("x_pretrain", "y_pretrain", "y_adapt", "y_test", "x_clean_test",
                "y_clean_test"):
        np.testing.assert_array_equal(cell[key], split[key])
    assert not np.array_equal(cell["x_test"], split["x_test"])  # another shift, same images
    arrays = datasets.family_npz(tmp_path / "cell.npz", (1 / 255, -128), "noise", 2)
    with np.load(tmp_path / "cell.npz") as data:
        assert sorted(data.files) == ["x", "x_clean_test", "x_test", "y", "y_clean_test",
                                      "y_test"]
        for key in data.files:
            np.testing.assert_array_equal(data[key], arrays[key])
        assert data["x"].dtype == np.int8 and data["x"].shape == (539, 8, 8, 1)
        assert data["x_test"].shape == (360, 8, 8, 1) and data["y"].dtype == np.int64
        np.testing.assert_array_equal(
            data["x_test"], datasets.quantize_images(cell["x_test"], 1 / 255, -128))
    with pytest.raises(ValueError, match="family"):
        datasets.load_family_split("snow", 1)
    with pytest.raises(ValueError, match="severity"):
        datasets.corrupt_family(split["x_test"][:2], "blur", 3, 0)


def test_building_blocks():
    img = np.zeros((1, 8, 8), np.float32)
    img[0, 3:5, 3:5] = 16.0
    # Blur keeps a centred blob's mass (nothing reaches the zero border) and spreads it.
    blurred = datasets.gaussian_blur(img, 0.8)
    assert blurred.sum() == pytest.approx(img.sum(), rel=1e-4)
    assert blurred.max() < 16.0 and (blurred > 0).sum() > 4
    # The DCT is orthonormal; a tiny quantisation step is the identity.
    d = datasets.dct_matrix(8)
    np.testing.assert_allclose(d @ d.T, np.eye(8), atol=1e-12)
    np.testing.assert_allclose(datasets.jpeg_like(img, 1e-6), img, atol=1e-4)
    # Fog at share 0 is the identity, at share 1 pure haze between half and full white.
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(datasets.fog(img, 0.0, rng), img)
    haze = datasets.fog(img, 1.0, np.random.default_rng(0))
    assert haze.min() >= 8.0 - 1e-5 and haze.max() <= 16.0
    field = datasets.smooth_field(3, 8, 8, np.random.default_rng(1))
    assert field.shape == (3, 8, 8) and field.min() == 0.0 and field.max() == 1.0
