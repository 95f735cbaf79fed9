"""The soak (docs/reliability.md): one long training run, guard on, through a faulty line
(corrupted, dropped, duplicated and delayed frames and bytes, both ways), with random device
resets, host kills and restarts, devices that lose power in the middle of saving their
checkpoint (their slot torn after a random sector) and hosts that lose power in the middle of
writing theirs (the file torn at a random byte). Nothing may be lost: every restart resumes
from the last good checkpoint and the run ends byte-identical to the simulator's.

    .venv/bin/python tests/soak.py --steps 20000 -o build/soak     # hours
    .venv/bin/python tests/soak.py --steps 150                     # minutes (the test suite)

The firmware is the sanitized native build (ASan + UBSan), so a stray write on a path that
only faults reach ends the soak too.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _path in (str(HERE), str(ROOT)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from conftest import ended_pid  # noqa: E402
from link_proxy import FaultRates, FaultyProxy  # noqa: E402
from zocodegen.projects import cached_build  # noqa: E402
from zocodegen.cli import main as cli  # noqa: E402
from zocodegen.formats import link as p  # noqa: E402
from zocodegen.formats.image import pack_image  # noqa: E402
from zocodegen.frontends import load_model  # noqa: E402
from zocodegen.host.devices import Firmware, LaunchedDevice, open_port  # noqa: E402
from zocodegen.host.link.server import Port  # noqa: E402
from zocodegen.host.trainer import Trainer  # noqa: E402
from zocodegen.training import checkpoint  # noqa: E402
from zocodegen.training.config import TrainConfig  # noqa: E402

MODEL = ROOT / "tests" / "fixtures" / "digits_cnn.tflite"
LINE = FaultRates(frame_corrupt=0.01, frame_drop=0.01, frame_duplicate=0.01, frame_delay=0.01,
                  delay_seconds=0.05, byte_corrupt=0.0002, byte_drop=0.0002)


@dataclass
class Faults:
    """How often each kind of fault is injected: per training step, or per checkpoint save."""
    device_reset: float = 0.1  # per step: the firmware is killed and started again
    host_kill: float = 0.01  # per step: the host process dies; a new one resumes the run
    torn_slot: float = 0.15  # per save: the device loses power after some sectors of it
    torn_file: float = 0.1  # per host checkpoint write: power lost at a random byte


@dataclass
class Report:
    steps: int = 0
    seconds: float = 0.0
    device_resets: int = 0
    host_kills: int = 0
    torn_slots: int = 0
    torn_files: int = 0
    host_lives: int = 0
    line: dict = field(default_factory=dict)  # faults of the line, by kind
    identical: bool = False
    #: temporaries of checkpoint.bin still in the run folder at the end (a torn write's is
    #: removed by the next host life's write of the file)
    stale_temporaries: list = field(default_factory=list)


class PowerCut(BaseException):
    """The host process dies here (not an Exception: nothing in the host may catch it)."""


class SoakDevice(LaunchedDevice):
    """Native firmware behind a faulty line; restarting it is a reset."""

    def __init__(self, artefact: Path, seed: int, report: Report):
        super().__init__(Firmware("native", artefact, icount=False))
        self.artefact, self.seed, self.report = artefact, seed, report
        self.proxy: FaultyProxy | None = None
        self.starts = 0

    def connect(self) -> Port:
        self._stop()
        self.firmware = Firmware("native", self.artefact, icount=False)
        self.proxy = FaultyProxy(self.firmware.start(), LINE, self.seed * 1000 + self.starts)
        self.starts += 1
        self.port = open_port(self.proxy.url)
        self.proxy.host_connected()
        return self.port

    def kill(self) -> None:
        self.firmware.kill()

    def close(self) -> None:
        self._stop()

    def _stop(self) -> None:
        if self.proxy is not None:
            c = self.proxy.counts
            for name in ("corrupted", "dropped", "duplicated", "delayed", "bytes_corrupted",
                         "bytes_dropped"):
                self.report.line[name] = self.report.line.get(name, 0) + getattr(c, name)
            self.proxy.close()
            self.proxy = None
        if self.port is not None:
            self.port.close()
            self.port = None
        self.firmware.close()


def _config(steps: int) -> TrainConfig:
    return TrainConfig(steps=steps, queries=4, batch=1, lr=0.03, guard=True, guard_every=10)


def _options(config: TrainConfig) -> list[str]:
    return ["--steps", str(config.steps), "--queries", str(config.queries), "--batch",
            str(config.batch), "--lr", str(config.lr), "--guard-every", str(config.guard_every),
            "--scales" if config.scales else "--no-scales"]


def _image(where: Path) -> Path:
    from zocodegen import datasets
    graph = load_model(MODEL)
    d = datasets.load_digits_split(0)
    quant = graph.tensor(graph.inputs[0]).quant
    scale, zp = quant.scalar_scale, quant.scalar_zero_point
    x = datasets.quantize_images(d["x_adapt"], scale, zp)
    xt = datasets.quantize_images(d["x_test"], scale, zp)
    path = where / "soak.img"
    pack_image(path, x[:200], d["y_adapt"][:200], x_val=x[200:232], y_val=d["y_adapt"][200:232],
               x_test=xt[:32], y_test=d["y_test"][:32], num_classes=10,
               checkpoint_bytes=1 << 16)
    return path


def soak(steps: int, out: Path, seed: int = 0, faults: Faults = Faults(),
         checkpoint_every: int = 10, log=print) -> Report:
    """The run; ``Report.identical`` says whether it ended as the simulator's did."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    config = _config(steps)
    image = _image(out)
    simulated = out / "simulated"
    assert cli(["simulate", str(MODEL), "--data", str(image), "-o", str(simulated),
                *_options(config)]) == 0
    artefact = cached_build(MODEL, "native", graph=load_model(MODEL), train=config,
                            sanitize=True)
    rng = random.Random(seed)
    report = Report()
    started = time.monotonic()
    run = out / "run"
    real_write = checkpoint.write_atomic
    dead = ended_pid()

    def write(path: Path, data: bytes, sync: bool = False) -> None:
        """The host's checkpoint writes (checkpoint.bin, best.bin); power is lost in some at
        a random byte: the file being written keeps what reached the disk."""
        if rng.random() < faults.torn_file:
            report.torn_files += 1
            # named as files.atomic_writer names it, by a host process that has since died
            path.with_name(f".{path.stem}.{dead}-{rng.getrandbits(48):012x}.tmp{path.suffix}"
                           ).write_bytes(data[:rng.randrange(len(data))])
            raise PowerCut
        real_write(path, data, sync)

    def on_step(t: p.Telemetry) -> None:
        if rng.random() < faults.device_reset:
            report.device_resets += 1
            device.kill()
        elif rng.random() < faults.host_kill:
            report.host_kills += 1
            raise PowerCut

    while True:
        device = SoakDevice(artefact, seed + report.host_lives, report)
        trainer = Trainer(device, image, run, checkpoint_every=checkpoint_every, timeout=20,
                          max_resets=1 << 30,
                          progress=False, on_step=on_step, log=lambda text: None)
        _tear_slots(trainer, device, rng, faults, report)
        report.host_lives += 1
        checkpoint.write_atomic = write
        try:
            trainer.run()
        except PowerCut:
            log(f"host life {report.host_lives} lost power at step {_step(run)}")
            continue
        finally:
            checkpoint.write_atomic = real_write
            device.close()
        break
    report.steps = steps
    report.seconds = time.monotonic() - started
    report.stale_temporaries = sorted(p.name for p in run.glob(".checkpoint.*.tmp*"))
    report.identical = ((run / "checkpoint.bin").read_bytes()
                        == (simulated / "checkpoint.bin").read_bytes())
    (out / "report.json").write_text(json.dumps(asdict(report), indent=1) + "\n")
    return report


def _tear_slots(trainer: Trainer, device: SoakDevice, rng: random.Random, faults: Faults,
                report: Report) -> None:
    """Some checkpoint saves lose power after a random number of the slot's sectors: the
    device dies with its slot half old, half new."""
    blocks_write = trainer.blocks.write

    def write(lba: int, count: int, data: bytes) -> int:
        status = blocks_write(lba, count, data)
        if rng.random() < faults.torn_slot / 4:  # a save is several WRITEs: about 1 in 4
            report.torn_slots += 1
            device.kill()
        return status
    trainer.blocks.write = write


def _step(run: Path) -> int:
    try:
        return checkpoint.load(run / "checkpoint.bin").step
    except Exception:  # noqa: BLE001 - only for the log line
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "build" / "soak")
    args = parser.parse_args()
    report = soak(args.steps, args.output, args.seed)
    print(json.dumps(asdict(report), indent=1))
    return 0 if report.identical else 1


if __name__ == "__main__":
    sys.exit(main())
