"""Seed corpora from real traffic (``python tests/fuzz/run.py seeds``): the fuzz project's own
native firmware is driven through a whole session by the host (HELLO, inference, opening a
packed digits image, block selection, accuracy, training, saving and loading the
checkpoint, QUIT) while a wrapper records both directions of the line. From the recording:

* link_frames: the bytes each side sent, as they were on the line;
* session: the host's frames, in order, as the harness's "answer" records: replayed, they
  drive the firmware through the same session;
* image: the packed image itself (with and without the CRC fix-up flag);
* checkpoint: the checkpoint the device saved, in slot 0 and in both slots;
* host_*: the device's frames as records, its checkpoint, and a scalar file and fleet
  uploads made by the host's own encoders (host_targets.seeds).
"""
from __future__ import annotations

import shutil
import stat
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TRAIN = 40  # half of them the validation split: the guard needs 16 validation records
TEST = 8


def _image(model: Path, where: Path, train: int = TRAIN, test: int = TEST,
           extra: tuple[str, ...] = ()) -> Path:
    from zocodegen import datasets
    from zocodegen.frontends import load_model
    graph = load_model(model)
    arrays = datasets.digits_npz(where / "full.npz", graph.tensor(graph.inputs[0]).quant)
    small = {k: v[:train] if k in ("x", "y") else v[:test] for k, v in arrays.items()}
    data = where / f"small-{train}.npz"
    np.savez(data, **small)
    image = data.with_suffix(".img")
    subprocess.run([sys.executable, "-m", "zocodegen", "pack", str(data),
                    "--model", str(model), "--val-fraction", "0.5", "-o", str(image), *extra],
                   check=True, stdout=subprocess.DEVNULL)
    return image


RECORDER = """import os, subprocess, sys, threading
firmware = subprocess.Popen([{firmware!r}], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
def pump(src, dst, record):
    with open(record, "wb") as log:
        while True:
            data = os.read(src, 4096)
            if not data:
                break
            log.write(data)
            os.write(dst, data)
threading.Thread(target=pump, args=(0, firmware.stdin.fileno(), {to_device!r}),
                 daemon=True).start()
try:
    pump(firmware.stdout.fileno(), 1, {from_device!r})
except OSError:
    pass
sys.exit(firmware.wait())
"""


def _recording_wrapper(firmware: Path, where: Path) -> Path:
    """An executable that runs `firmware` with both directions of its line copied to files."""
    wrapper = where / "recorded-firmware"
    wrapper.write_text(f"#!{sys.executable}\n" + RECORDER.format(
        firmware=str(firmware), to_device=str(where / "to_device.bin"),
        from_device=str(where / "from_device.bin")))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return wrapper


def _session(model: Path, firmware: Path, image: Path) -> bytes:
    """Drives one whole session; returns the checkpoint the device saved."""
    from zocodegen.formats import link as p
    from zocodegen.frontends import load_model
    from zocodegen.host.engines import FirmwareSession
    graph = load_model(model)
    sample = {graph.tensor(graph.inputs[0]).name: np.zeros(
        graph.tensor(graph.inputs[0]).shape, np.int8)}
    with FirmwareSession(graph, "native", firmware) as device:
        device.infer(sample)
        device.attach_image(image)
        device.session.run(p.Command.SELECT.value)
        device.accuracy(p.Split.TEST)
        device.train(3)
        blob = device.save_checkpoint()
        device.load_checkpoint(blob)
        device.accuracy(p.Split.VAL)
        device.session.run(p.Command.RESET.value)
    return blob


def _answers(to_device: bytes) -> bytes:
    """The host's frames as the session harness's records: [0][u16 length][payload]."""
    from zocodegen.host.link.framing import FrameDecoder
    records = b""
    for frame in FrameDecoder().feed(to_device):
        if frame is not None:
            records += struct.pack("<BH", 0, len(frame.payload)) + frame.payload
    return records


def _slots(blob: bytes, slot_sectors: int, both: bool) -> bytes:
    slot = blob + bytes(slot_sectors * 512 - len(blob))
    return slot + (blob if both else b"")


def write_seeds(corpus: Path, names: list[str]) -> None:
    import host_targets
    from run import MODEL, WORK, project
    proj = project()
    subprocess.run(["make", "-s", "native"], cwd=proj, check=True)
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        image = _image(MODEL, where)
        # the image harness's seeds: 4 KB, not 32
        tiny = _image(MODEL, where, 4, 2, ("--checkpoint-kb", "1"))
        blob = _session(MODEL, _recording_wrapper(proj / "build" / "native" / "model", where),
                        image)
        to_device = (where / "to_device.bin").read_bytes()
        from_device = (where / "from_device.bin").read_bytes()
        seeds = {
            "link_frames": {"host-to-device": to_device, "device-to-host": from_device},
            "session": {"whole-session": _answers(to_device)},
            "image": {"packed-digits": b"\x00" + tiny.read_bytes(),
                      "packed-digits-fixup": b"\x03" + tiny.read_bytes()},
            "checkpoint": {"slot0": b"\x00" + _slots(blob, _slot_sectors(proj), False),
                           "both-slots": b"\x01" + _slots(blob, _slot_sectors(proj), True)},
            **host_targets.seeds(blob, from_device),
        }
    for name in names:
        folder = corpus / name
        folder.mkdir(parents=True, exist_ok=True)
        for label, data in seeds[name].items():
            (folder / f"seed-{label}").write_bytes(data)
        print(f"{name}: {', '.join(f'{k} ({len(v):,} B)' for k, v in seeds[name].items())}")
    shutil.rmtree(WORK / "corpus", ignore_errors=True)  # work corpora restart from the seeds


def _slot_sectors(proj: Path) -> int:
    import re
    text = (proj / "src" / "training.c").read_text()
    return int(re.search(r"\.slot_sectors = (\d+)", text).group(1))
