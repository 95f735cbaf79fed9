"""Issue 50, the field trainer (`build --data-source sdcard`, docs/sdcard.md): a board that trains from
the image on its own card with no host ends with the checkpoint `simulate` ends with, on the
native build (full with the guard, sparse with the device's block choice, --lr auto) and under
QEMU; it resumes after a kill and after power cuts at random writes (a torn slot is never
loaded); each fault ends the run with a named status on the UART and in the card's status
record. Also: the card area's layout agrees between C, Python and docs/image.md, the field
build refuses what it cannot be, and a link build's files are those of before issue 50.

The host side (`zocodegen card`, `monitor`) is tests/test_card.py."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, REPO, assert_refused, needs_arm, needs_qemu
from zocodegen import api
from zocodegen.cli import main
from zocodegen.datasets import digits_npz
from zocodegen.formats import field, link, status
from zocodegen.formats.image import SECTOR_BYTES, header_crc32, read_header
from zocodegen.frontends import load_model
from zocodegen.host import card as host_card
from zocodegen.projects import cached_build
from zocodegen.qemu.runner import qemu_command
from zocodegen.training import checkpoint
from zocodegen.training.config import TrainConfig
from zocodegen.training.metrics import read_metrics
from zocodegen.training.plan import training_plans
from zocodegen.training.runner import simulate
from zocodegen.training.simulator import initial_params, validation_score

MODEL = FIXTURES / "digits_cnn.tflite"
HEADER = REPO / "templates" / "field" / "zo_field.h"
CUT_STATUS = 86  # blockdev_stdio.c's power cut
#: a guarded run on validation records the model starts wrong on: new bests and rollbacks,
#: a checkpoint every 2 steps
GUARDED = TrainConfig(steps=20, queries=2, lr=0.5, guard=True, guard_every=1)
LR_AUTO = TrainConfig(steps=30, queries=3, guard=True, lr_auto=True)
SPARSE = TrainConfig(steps=20, queries=3, mode="sparse", lr=0.05, guard=True, guard_every=2)

pytestmark = pytest.mark.usefixtures("module_build_cache")


def _pack(tmp: Path, name: str, wrong_val: bool, **extra) -> Path:
    """Digits packed with --model (pack sizes the area for a field run): 60 train, 24 val, 40
    test records; ``wrong_val``: validation records the model gets wrong, so that a check
    can clear the guard's start margin (as tests/test_guard.py's hard_image)."""
    graph = load_model(MODEL)
    d = digits_npz(tmp / f"{name}.npz", graph.tensor(graph.inputs[0]).quant)
    val = list(range(60, 84))
    if wrong_val:
        plan = training_plans(graph, TrainConfig())[0]
        params = initial_params(graph, plan)
        val = [k for k in range(60, len(d["x"])) if validation_score(
            graph, plan, params, d["x"][k:k + 1], d["y"][k:k + 1]).correct == 0][:24]
    np.savez(tmp / f"{name}.npz", x=d["x"][:60], y=d["y"][:60], x_val=d["x"][val],
             y_val=d["y"][val], x_test=d["x_test"][:40], y_test=d["y_test"][:40])
    api.pack(tmp / f"{name}.npz", tmp / f"{name}.img", model=MODEL, **extra)
    return tmp / f"{name}.img"


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("field")
    return {"plain": _pack(tmp, "plain", False), "hard": _pack(tmp, "hard", True)}


def _expected(config: TrainConfig, image: Path, tmp: Path) -> tuple[bytes, bytes | None, Path]:
    run = tmp / "sim"
    simulate(MODEL, image, run, config, progress=False)
    best = run / "best.bin"
    return (run / "checkpoint.bin").read_bytes(), best.read_bytes() if best.is_file() else None, run


def _card(image: Path, tmp: Path, name: str = "card.img") -> Path:
    card = tmp / name
    shutil.copy(image, card)
    return card


def _boot(exe: Path, card: Path | None, timeout: float = 120, **env: str
          ) -> subprocess.CompletedProcess:
    """One power-up of the native field trainer on ``card``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ZO_CARD")}
    if card is not None:
        environ["ZO_CARD"] = str(card)
    return subprocess.run([str(exe)], env={**environ, **env}, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout, cwd=exe.parent)


def area_of(card: Path) -> field.FieldArea:
    layout = read_header(card)
    raw = card.read_bytes()[layout.checkpoint_lba * SECTOR_BYTES:]
    return field.read_area(raw[:layout.checkpoint_sectors * SECTOR_BYTES])


def _native(config: TrainConfig) -> Path:
    return cached_build(MODEL, "native", train=config, data_source="sdcard")


# ---- training in the field == simulate ------------------------------------------------

@pytest.mark.parametrize("config, kind", [(GUARDED, "hard"), (LR_AUTO, "plain"),
                                          (SPARSE, "plain")],
                         ids=["guarded-rollbacks", "lr-auto", "sparse-block-auto"])
def test_a_native_field_run_ends_as_simulate(config, kind, images, tmp_path):
    ckpt, best, sim = _expected(config, images[kind], tmp_path)
    card = _card(images[kind], tmp_path)
    done = _boot(_native(config), card)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("field: end: complete: "), lines[-1]
    assert all(line.startswith("field: ") for line in lines if line), done.stdout
    area = area_of(card)
    assert area.run == ckpt
    assert area.best == best
    assert area.status.state == "complete" and area.status.step == config.steps
    # the guard decided on the device as in the simulator, check by check
    decisions = [link.Decision(e.decision).name.lower() for e in field.this_run(area.entries)
                 if e.kind == field.GUARD_CHECK and e.decision]
    assert decisions == [r.event for r in read_metrics(sim / "metrics.csv") if r.event]
    if config is GUARDED:
        assert {"best", "rollback"} <= set(decisions), decisions
    if config.selects_block:
        assert any(e.kind == field.BLOCK for e in area.entries)
    again = _boot(_native(config), card)  # a complete run is said, not trained again
    assert again.returncode == 0 and "ZO_FIELD_ERR_DONE" in again.stdout
    assert area_of(card).run == ckpt


def test_the_guards_stop_ends_a_field_run_as_simulate(images, tmp_path):
    """--patience in the field: the run stops at the simulator's step with its checkpoint and
    best slot, says so, logs the STOP (which `card read` records as run.json's end), and a
    boot after it trains nothing."""
    config = TrainConfig(steps=24, queries=3, lr=0.05, guard=True, guard_every=2, patience=3)
    ckpt, best, sim = _expected(config, images["hard"], tmp_path)
    end = json.loads((sim / "run.json").read_text())["end"]
    assert end["reason"] == "patience" and end["step"] < config.steps, end
    card = _card(images["hard"], tmp_path)
    done = _boot(_native(config), card)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith(
        f"field: end: complete: {end['step']} steps (the guard's stop)"), done.stdout
    assert (f"field: guard stop at step {end['step']}: no new best in "
            f"{end['steps_since_best']} steps") in done.stdout
    area = area_of(card)
    assert (area.run, area.best) == (ckpt, best)
    assert area.status.state == "complete" and area.status.step == end["step"]
    out = tmp_path / "read"
    assert main(["card", "read", str(card), "-o", str(out)]) == 0
    assert json.loads((out / "run.json").read_text())["end"] == end


@needs_qemu
def test_a_qemu_field_run_ends_as_simulate(images, tmp_path):
    """The Cortex-M build, its card a file through semihosting (card.img in QEMU's folder)."""
    ckpt, best, _ = _expected(GUARDED, images["hard"], tmp_path)
    elf = cached_build(MODEL, "qemu", train=GUARDED, data_source="sdcard")
    card = _card(images["hard"], tmp_path)
    done = subprocess.run(qemu_command(elf, icount=False), cwd=tmp_path, capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=600)
    out = done.stdout.decode(errors="replace")
    assert done.returncode == 0, out + done.stderr.decode(errors="replace")
    assert "field: end: complete: 20 steps" in out
    area = area_of(card)
    assert (area.run, area.best) == (ckpt, best)


# ---- power cuts and kills ---------------------------------------------------------------

def _newest_step(card: Path) -> int:
    run = area_of(card).run
    return -1 if run is None else checkpoint.decode(run).step


def test_a_run_killed_mid_chunk_resumes_to_the_same_end(images, tmp_path):
    """SIGKILL once the card holds a checkpoint (no write in flight is assumed)."""
    config = TrainConfig(steps=60, queries=20, guard=True, lr_auto=True)
    ckpt, best, _ = _expected(config, images["plain"], tmp_path)
    exe = _native(config)
    card = _card(images["plain"], tmp_path)
    proc = subprocess.Popen([str(exe)], env={**os.environ, "ZO_CARD": str(card)},
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while proc.poll() is None and _newest_step(card) < 6 and time.monotonic() < deadline:
        time.sleep(0.002)
    killed = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = _boot(exe, card)
    assert done.returncode == 0, done.stdout
    if killed:
        resumed = re.search(r"resuming from step (\d+)", done.stdout)
        assert resumed and int(resumed.group(1)) >= 6, done.stdout
    assert (area_of(card).run, area_of(card).best) == (ckpt, best)


def test_power_cuts_at_random_writes_lose_nothing(images, tmp_path):
    """At least 50 power cuts, each a torn prefix of a random write (0..511 bytes of the
    sector reached the card): every boot resumes from exactly the newest checkpoint that
    verifies, a saved checkpoint is never lost, and each run ends as simulate."""
    ckpt, best, _ = _expected(GUARDED, images["hard"], tmp_path)
    exe = _native(GUARDED)
    rng = np.random.default_rng(50)
    cuts = runs = 0
    while cuts < 50:
        card = _card(images["hard"], tmp_path)
        durable = -1
        for _ in range(400):
            before = max((e.sequence for e in area_of(card).entries), default=-1)
            done = _boot(exe, card, ZO_CARD_CUT_AT_WRITE=str(rng.integers(1, 60)),
                         ZO_CARD_CUT_BYTES=str(rng.integers(0, SECTOR_BYTES)))
            area = area_of(card)
            starts = [e for e in area.entries if e.kind == field.START and e.sequence > before]
            if starts:  # the boot said where it resumed: the newest checkpoint that verified
                assert starts[0].step == max(durable, 0), (starts[0], durable)
            if done.returncode == 0:
                break
            assert done.returncode == CUT_STATUS, done.stdout + done.stderr
            cuts += 1
            step = _newest_step(card)
            assert step >= durable, "a saved checkpoint was lost"
            durable = step
            if area.run is not None:  # the best its guard names is there too
                assert area.best is not None
        else:
            pytest.fail("the run made no progress in 400 boots")
        assert (area_of(card).run, area_of(card).best) == (ckpt, best)
        runs += 1
    assert runs >= 1 and cuts >= 50


# ---- faults: a named status, on the UART and on the card --------------------------------

def _stopped(done: subprocess.CompletedProcess, name: str) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.startswith("field: end: stopped: ") and name in last, done.stdout
    return last


def test_faults_end_with_a_named_status(images, tmp_path):
    exe = _native(LR_AUTO)
    # no card (no $ZO_CARD, no card.img beside the executable)
    _stopped(_boot(exe, None), "ZO_BLOCKDEV_ERR_OPEN")
    # a record corrupted on the card: its CRC-32 refuses it, named with its index
    card = _card(images["plain"], tmp_path)
    layout = read_header(card)
    raw = bytearray(card.read_bytes())
    raw[layout.record_lba("train", 5) * SECTOR_BYTES] ^= 0xFF
    card.write_bytes(bytes(raw))
    line = _stopped(_boot(exe, card), "ZO_IMAGE_ERR_RECORD_CRC")
    assert "at record 5" in line
    found = area_of(card).status
    assert (found.state, found.status, found.value) == (
        "stopped", status.code("ZO_IMAGE_ERR_RECORD_CRC"), 5)
    said = host_card.describe(card, tmp_path / "r1", host_card.read_card(card, tmp_path / "r1"))
    assert "ZO_IMAGE_ERR_RECORD_CRC" in said[0] and "at record 5" in said[0], said
    # an area too small for a field run: refused, and said in the status record it has room for
    small = _pack(tmp_path, "small", False, checkpoint_kb=16)
    records = small.read_bytes()[:read_header(small).checkpoint_lba * SECTOR_BYTES]
    _stopped(_boot(exe, small), "ZO_FIELD_ERR_AREA")
    assert area_of(small).status.status == status.code("ZO_FIELD_ERR_AREA")
    found = host_card.read_card(small, tmp_path / "r2")
    assert found.step is None and "ZO_FIELD_ERR_AREA" in host_card.describe(
        small, tmp_path / "r2", found)[0]
    assert small.read_bytes().startswith(records)  # nothing written outside the area
    # an image packed for another model
    other = tmp_path / "other.img"
    raw = bytearray(images["plain"].read_bytes())
    raw[144:176] = bytes(range(32))
    raw[12:16] = header_crc32(bytes(raw[:SECTOR_BYTES])).to_bytes(4, "little")
    other.write_bytes(bytes(raw))
    _stopped(_boot(exe, other), "ZO_FIELD_ERR_IMAGE")


def test_a_failing_card_is_tried_again_then_named(images, tmp_path):
    """A read the card fails once: the chunk is trained again from the last checkpoint, to
    the same end; a card that keeps failing: three attempts, then its own status."""
    ckpt, best, _ = _expected(LR_AUTO, images["plain"], tmp_path)
    exe = _native(LR_AUTO)
    card = _card(images["plain"], tmp_path)
    done = _boot(exe, card, ZO_CARD_FAIL_READS="300")
    assert done.returncode == 0 and "again from the last checkpoint, attempt 2 of 3" in \
        done.stdout, done.stdout
    assert (area_of(card).run, area_of(card).best) == (ckpt, best)
    card = _card(images["plain"], tmp_path)
    done = _boot(exe, card, ZO_CARD_FAIL_READS="300:1000000")
    _stopped(done, "ZO_BLOCKDEV_ERR_IO")
    assert "attempt 3 of 3" in done.stdout
    assert area_of(card).status.status == status.code("ZO_BLOCKDEV_ERR_IO")


def test_a_card_of_another_build_is_left_alone(images, tmp_path):
    card = _card(images["plain"], tmp_path)
    assert _boot(_native(GUARDED), card).returncode == 0
    before = card.read_bytes()
    _stopped(_boot(_native(LR_AUTO), card), "ZO_FIELD_ERR_OTHER_RUN")
    assert card.read_bytes() == before


# ---- the build ----------------------------------------------------------------------------

@pytest.mark.parametrize("extra, words", [
    ([], ("--data-source sdcard", "--train")),
    (["--train", "full", "--as-library", "--target", "stm32f746"], ("--as-library",)),
    (["--train", "full", "--estimator", "wp", "--no-guard", "--lr", "0.01",
      "--record-scalars"], ("--record-scalars",))])
def test_a_field_build_refuses_what_it_cannot_be(tmp_path, capsys, extra, words):
    argv = ["build", str(MODEL), "--data-source", "sdcard", "-o", str(tmp_path / "fw")]
    if "--target" not in extra:
        argv += ["--target", "native"]
    code = main(argv + extra)
    assert_refused(code, capsys.readouterr().err, words)
    assert not (tmp_path / "fw").exists()


@needs_arm
@pytest.mark.parametrize("board", ["stm32f746", "stm32h7b3"])
def test_board_field_firmware_builds_clean_and_as_planned(board, tmp_path):
    """Zero warnings, the SD driver linked, and .bss as the memory plan says."""
    result = api.build(MODEL, target=board, train="full", data_source="sdcard", steps=20,
                       output=tmp_path / "fw")
    items = {i.name: i.bytes for i in result.plan.placement.items}
    assert "field trainer" in items and "host link buffers" not in items
    done = subprocess.run(["make", "-C", str(result.project), "firmware"], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and "warning" not in done.stdout + done.stderr, done.stderr
    size = subprocess.run(["arm-none-eabi-size", "-A", str(result.project / "build" / board /
                                                          "firmware.elf")],
                          capture_output=True, text=True, check=True).stdout
    bss = int(re.search(r"^\.bss\s+(\d+)", size, re.M).group(1))
    assert bss <= items["field trainer"] + items["firmware statics"], (bss, items)
    manifest = json.loads((result.project / "manifest.json").read_text())
    assert manifest["data_source"] == "sdcard"
    assert "blockdev_sdmmc.c" in (result.project / "Makefile").read_text()


# ---- one layout, three places; a link build unchanged ------------------------------------

def test_the_area_layout_agrees_between_c_python_and_the_docs():
    c = {k: int(v) for k, v in re.findall(r"#define\s+ZO_FIELD_(\w+)\s+(\d+)u",
                                          HEADER.read_text())}
    assert (c["SLOTS"], c["LOG_SECTORS"], c["STATUS_SECTORS"], c["ENTRY_BYTES"]) == (
        field.SLOTS, field.LOG_SECTORS, field.STATUS_SECTORS, field.ENTRY_BYTES)
    assert (c["RUN"], c["BEST"], c["RUN_COPY"], c["BEST_COPY"]) == (
        field.RUN, field.BEST, field.RUN_COPY, field.BEST_COPY)
    assert c["VERSION"] == field.VERSION and f'"{field.MAGIC.decode()}"' in HEADER.read_text()
    for name, (offset, _) in field.STATUS_FIELDS.items():
        if name != "version" and name != "sequence":
            key = {"log": "LOG", "slot": "SLOT"}.get(name, name.upper())
            assert c[f"OFF_{key}"] == offset, name
    assert (c["OFF_IDENTITY"], c["OFF_CRC"]) == (field.OFF_IDENTITY, field.OFF_STATUS_CRC)
    assert (c["RUN_FIRST"], c["RUN_END"]) == field.RUN_IDENTITY
    for name, (offset, _) in field.ENTRY_FIELDS.items():
        if name not in ("halvings", "eta_ppm", "value", "loss_q16", "lr", "decision"):
            assert c[f"ENTRY_{name.upper()}"] == offset, name
    assert (c["ENTRY_HALVINGS"], c["ENTRY_ETA_PPM"], c["ENTRY_VALUE"], c["ENTRY_LOSS"],
            c["ENTRY_LR"], c["ENTRY_DECISION"], c["ENTRY_CRC"]) == (
        20, 24, 28, 32, 40, 5, field.OFF_ENTRY_CRC)
    assert (c["STATE_TRAINING"], c["STATE_COMPLETE"], c["STATE_STOPPED"]) == (1, 2, 3)
    assert [c[f"LOG_{k}"] for k in ("START", "BLOCK", "EVALUATION", "CHECKPOINT", "END",
                                     "FAULT")] == [field.START, field.BLOCK, field.EVALUATION,
                                                   field.CHECKPOINT, field.END, field.FAULT]
    assert [field.GUARD_CHECK, field.LR_TRIAL, field.LR_CHOSEN, field.CONFIRM] == [
        int(k) for k in (link.EventKind.GUARD_CHECK, link.EventKind.LR_TRIAL,
                         link.EventKind.LR_CHOSEN, link.EventKind.CONFIRM)]
    doc = (REPO / "docs" / "image.md").read_text()
    for name, (offset, _) in {**field.STATUS_FIELDS, "identity": (field.OFF_IDENTITY, ""),
                              "crc": (field.OFF_STATUS_CRC, "")}.items():
        assert re.search(rf"\| {offset} \| [^|]+ \| [^|]+ \| `{name}` \|", doc), name
    for name, (offset, _) in field.ENTRY_FIELDS.items():
        assert re.search(rf"\| {offset} \| [^|]+ \| [^|]+ \| `{name}` \|", doc), name


def _files(**given) -> dict[str, bytes]:
    """Every file of a build of the digits CNN, by its path in the project."""
    with tempfile.TemporaryDirectory() as tmp:
        project = api.build(MODEL, output=Path(tmp) / "fw", **given).project
        return {f.relative_to(project).as_posix(): f.read_bytes()
                for f in sorted(project.rglob("*")) if f.is_file()}


@pytest.mark.parametrize("target", ["native", "stm32f746"])
def test_a_link_build_is_the_field_build_without_the_field(target):
    """Issue 50's promise to link builds: --data-source sdcard adds the field trainer and its
    card (and drops the link and its block device) and changes nothing else: the model, the
    training engine and every board file are byte-identical; the link build carries no field
    file, no SD card status and nothing of the field in its Makefile."""
    linked = _files(target=target, train="full")
    fielded = _files(target=target, train="full", data_source="sdcard")
    field_files = {f for f in fielded if f.startswith("src/field/")
                   or f.rsplit("/", 1)[-1].startswith(("blockdev_s", "sdmmc_", "zo_field",
                                                       "field", "zo_status_names"))}
    assert sorted(set(linked) - set(fielded)) == ["src/link/blockdev_link.c",
                                                  "src/link/zo_link.c"]
    assert set(fielded) - set(linked) == field_files
    assert not field_files & set(linked)
    differ = {f for f in set(linked) & set(fielded) if linked[f] != fielded[f]}
    assert differ == {"Makefile", "include/zo_status.h", "manifest.json", "memory_report.json",
                      "memory_report.txt"}
    statuses = linked["include/zo_status.h"].decode()
    makefile = linked["Makefile"].decode()
    assert statuses == status.c_header() != status.c_header(sdcard=True)  # no SD card rows
    assert "ZO_FIELD" not in statuses
    assert "src/field" not in makefile and "src/link/zo_link.c" in makefile
