"""Mutated model bytes either load (and then run) or fail with the clean ModelError: no
other outcome (no traceback, no crash inside a kernel); and every mutated TFLite file the
reference runtime rejects as an invalid flatbuffer is refused."""
from __future__ import annotations

import time

import numpy as np
import pytest
import tflite
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import FIXTURES, REPO, SHARED_MODELS
from zocodegen.errors import ModelError
from zocodegen.frontends import load_model
from zocodegen.frontends.flatbuffer_verify import (SCHEMA, UNIONS, InvalidFlatbuffer,
                                                   verify_tflite)
from zocodegen.reference.executor import run

SOURCES = [FIXTURES / "multi_op.tflite", FIXTURES / "mcunet_tiny.tflite",
           FIXTURES / "onnx_qdq_int8.onnx"]
SOURCES += [p for p in (SHARED_MODELS / "kws_ref_model.tflite",) if p.is_file()]
MODELS = [(p.suffix, p.read_bytes()) for p in SOURCES]


@st.composite
def mutated_model(draw):
    suffix, original = MODELS[draw(st.integers(0, len(MODELS) - 1))]
    data = bytearray(original)
    kind = draw(st.sampled_from(["flip", "overwrite", "truncate", "splice"]))
    if kind == "truncate":
        return suffix, bytes(data[: draw(st.integers(0, len(data) - 1))])
    for _ in range(draw(st.integers(1, 8))):
        pos = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "overwrite":
            data[pos] = draw(st.integers(0, 255))
        else:
            chunk = draw(st.binary(min_size=1, max_size=16))
            data[pos:pos + len(chunk)] = chunk
    return suffix, bytes(data)


@settings(max_examples=1000, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(model=mutated_model())
def test_mutated_models_fail_cleanly_or_run(tmp_path, model):
    suffix, blob = model
    path = tmp_path / f"mutant{suffix}"
    path.write_bytes(blob)
    try:
        graph = load_model(path)
    except ModelError as exc:
        assert "\n" not in str(exc)
        return
    inputs = {}
    for name in graph.inputs:
        t = graph.tensor(name)
        inputs[name] = np.zeros(t.shape, t.dtype)
    with np.errstate(all="ignore"):
        run(graph, inputs)


# -- the flatbuffer verifier against the reference runtime's ------------------------------
# The hypothesis test above only asks for a clean failure. A corrupted flatbuffer can also
# *read* without error (an offset that lands on other bytes) and be built into firmware;
# the runtime refuses those as "not a valid Flatbuffer buffer", and so must zocodegen.

def _mutants(data: bytes, count: int, seed: int):
    """``count`` copies of ``data``, each with 1-4 overwritten bytes, flipped bits or
    overwritten aligned words (offsets, lengths and vtable entries are 4- or 2-byte)."""
    rng = np.random.default_rng(seed)
    for k in range(count):
        blob = bytearray(data)
        for _ in range(int(rng.integers(1, 5))):
            pos = int(rng.integers(0, len(blob)))
            if k % 3 == 0:
                blob[pos] = int(rng.integers(0, 256))
            elif k % 3 == 1:
                blob[pos] ^= 1 << int(rng.integers(0, 8))
            else:
                pos -= pos % 4
                blob[pos:pos + 4] = rng.integers(0, 256, 4, np.uint8).tobytes()
        yield bytes(blob[:len(data)])


def _runtime_rejects_flatbuffer(blob: bytes) -> bool:
    from ai_edge_litert.interpreter import Interpreter
    try:
        Interpreter(model_content=blob)
    except ValueError as exc:
        return "not a valid Flatbuffer" in str(exc)
    return False


def test_runtime_rejected_flatbuffers_are_refused(tmp_path, capsys):
    """200 byte-mutated copies of a small CNN: every copy the TFLite runtime rejects as not
    a valid flatbuffer is refused by `zocodegen inspect` with exit 2 and one line (main()
    in-process, so the 200 runs take a second; test_cli covers the subprocess contract)."""
    from zocodegen.cli import main
    rejected = []
    for k, blob in enumerate(_mutants((FIXTURES / "digits_cnn.tflite").read_bytes(), 200, 15)):
        if not _runtime_rejects_flatbuffer(blob):
            continue
        path = tmp_path / f"mutant{k}.tflite"
        path.write_bytes(blob)
        capsys.readouterr()
        rc = main(["inspect", str(path)])
        err = capsys.readouterr().err
        assert rc == 2, (k, rc, err)
        assert len(err.strip().splitlines()) == 1, (k, err)
        # refused as a file (a mutated identifier is "not a TFLite model"), not later on
        assert (f"mutant{k}.tflite: not a valid TFLite flatbuffer: " in err
                or f"mutant{k}.tflite: not a TFLite" in err), (k, err)
        rejected.append(k)
    assert len(rejected) >= 50, rejected  # the mutations reach the structure, not just data


def _untouched_models() -> list:
    params = [pytest.param(p, id=p.name) for p in sorted(FIXTURES.glob("*.tflite"))]
    shared = sorted(SHARED_MODELS.glob("*.tflite"))
    params += [pytest.param(p, id=f"shared/{p.name}") for p in shared]
    if not shared:
        params.append(pytest.param(None, id="shared", marks=pytest.mark.skip(
            reason=f"{SHARED_MODELS} is absent (the MLPerf Tiny models live in ../shared, "
                   "which only CI and developer checkouts have)")))
    return params


@pytest.mark.parametrize("path", _untouched_models())
def test_untouched_models_pass_the_verifier(path):
    data = path.read_bytes()
    start = time.perf_counter()
    verify_tflite(data)
    assert time.perf_counter() - start < 0.25  # ~5 ms for the 300 KB mcunet_det


def test_verifier_names_table_field_and_bounds(tmp_path):
    """A shape vector whose length runs past the file: the message names where."""
    data = bytearray((FIXTURES / "digits_cnn.tflite").read_bytes())
    tensor = tflite.Model.GetRootAs(bytes(data), 0).Subgraphs(0).Tensors(3)
    length_at = tensor._tab.Vector(tensor._tab.Offset(4)) - 4
    data[length_at:length_at + 4] = (1000).to_bytes(4, "little")
    with pytest.raises(InvalidFlatbuffer) as err:
        verify_tflite(bytes(data))
    assert str(err.value) == (f"SubGraph 0 Tensor 3 field 'shape': vector runs past the end "
                              f"of the file (offset {length_at}, 4004 bytes of {len(data)})")
    path = tmp_path / "bad_shape.tflite"
    path.write_bytes(data)
    with pytest.raises(ModelError, match="bad_shape.tflite: not a valid TFLite flatbuffer: "
                                         "SubGraph 0 Tensor 3 field 'shape'"):
        load_model(path)


def _tensor3(data: bytes):
    return tflite.Model.GetRootAs(bytes(data), 0).Subgraphs(0).Tensors(3)._tab


def _unterminated_name(data: bytearray) -> None:
    tab = _tensor3(data)
    name_at = tab.Indirect(tab.Pos + tab.Offset(10))
    data[name_at + 4 + int.from_bytes(data[name_at:name_at + 4], "little")] = ord("x")


def _odd_vtable(data: bytearray) -> None:
    tab = _tensor3(data)
    vtable = tab.Pos - int.from_bytes(data[tab.Pos:tab.Pos + 4], "little", signed=True)
    data[vtable] |= 1


def _misaligned_root(data: bytearray) -> None:
    data[0] += 2


@pytest.mark.parametrize("corrupt, problem", [
    (_unterminated_name, r"^SubGraph 0 Tensor 3 field 'name': string at offset \d+ "
                         r"\(\d+ bytes\) is not NUL-terminated$"),
    # vtables are shared by tables of one layout: the first tensor using it is named
    (_odd_vtable, r"^SubGraph 0 Tensor \d+: vtable at \d+ declares an impossible size of "
                  r"\d*[13579] bytes$"),
    (_misaligned_root, r"^Model: table at offset \d+ is not 4-byte aligned$"),
])
def test_verifier_rules(corrupt, problem):
    """One corruption per rule, each one the runtime also rejects."""
    data = bytearray((FIXTURES / "digits_cnn.tflite").read_bytes())
    corrupt(data)
    assert _runtime_rejects_flatbuffer(bytes(data))
    with pytest.raises(InvalidFlatbuffer, match=problem):
        verify_tflite(bytes(data))


def test_verifier_schema_is_the_runtime_schema():
    """zocodegen/frontends/tflite_schema.py is what scripts/gen_tflite_schema.py derives from
    the reference runtime's generated schema classes, and the tables zocodegen reads agree
    with the `tflite` package's classes (a second, independently generated source)."""
    import importlib.util
    import inspect
    import re
    spec = importlib.util.spec_from_file_location(
        "gen_tflite_schema", REPO / "scripts" / "gen_tflite_schema.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (REPO / "zocodegen" / "frontends" / "tflite_schema.py").read_text() == \
        gen.generated(), "rerun scripts/gen_tflite_schema.py"
    read = ("Model", "SubGraph", "Tensor", "Buffer", "Operator", "OperatorCode",
            "QuantizationParameters", "Metadata", "Conv2DOptions", "DepthwiseConv2DOptions",
            "FullyConnectedOptions", "AddOptions", "MulOptions", "Pool2DOptions",
            "ReducerOptions", "ReshapeOptions", "ConcatenationOptions", "SoftmaxOptions",
            "ResizeNearestNeighborOptions")
    for table in read:
        module = getattr(tflite, table).__module__
        known = {f.name.replace("_", ""): f for f in SCHEMA[table]}
        for fn_name, fn in inspect.getmembers(__import__(module, fromlist=["x"]),
                                              inspect.isfunction):
            if not fn_name.startswith(f"{table}Add"):
                continue
            kind, slot = re.search(r"Prepend(\w+)Slot\((\d+),", inspect.getsource(fn)).groups()
            f = known[fn_name[len(table) + 3:].lower()]
            assert f.slot == int(slot), (table, f)
            assert (f.kind == "scalar") == (kind != "UOffsetTRelative"), (table, f)
            if f.kind == "scalar":
                assert f.arg == gen.SCALAR_SIZES[kind], (table, f)
    assert UNIONS["BuiltinOptions"][tflite.BuiltinOptions.Conv2DOptions] == "Conv2DOptions"
