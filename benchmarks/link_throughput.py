"""Host-link throughput benchmark (not a test): what a READ-bound job costs on the wire before
and after the faster link (docs/link.md), per board line rate, and what the native and QEMU
firmware actually reach when a test split is evaluated over the link.

    .venv/bin/python benchmarks/link_throughput.py            # prints the markdown tables
    .venv/bin/python benchmarks/link_throughput.py --write    # also updates docs/benchmarks.md

Wire model (host/device_time.record_link_seconds): a record's sectors go in READs of up to
`max_sectors`, each a request frame and a response frame (COBS: 6 B header, 4 B CRC, 1 B per
254, the zero), 10 bits a byte (8N1), plus a turnaround per READ (the host answering and, on
a board, the ST-LINK's USB frames: 1 ms polling each way, so 2 ms is assumed; 0 is the line
alone). Before: 4 sectors at 115,200
baud; now: zocodegen.formats.link.MAX_SECTORS at DEFAULT_BAUD.

Measured: the firmware of the 64x64 model (tests/fixtures/scale_model.tflite) built natively
and for QEMU (no -icount), an image of RECORDS random test records, and the accuracy command
`A` over them, timed on the host: native shows what the Python host serves (a pty has no line
rate), QEMU adds the emulated UART. `--baseline REV` measures commit REV the same way, with its
own code (a git worktree, benchmarks/revisions.py): 2ca096d is the link before 16-sector READs.
Runtime: about a minute, three with --baseline.

    .venv/bin/python benchmarks/link_throughput.py --baseline 2ca096d --write
"""
from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
import time
from pathlib import Path

import json

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from zocodegen.formats import link  # noqa: E402
import revisions  # noqa: E402
from doc_sections import replace_section  # noqa: E402

MODELS = {"digits 8x8x1": 64, "scale 64x64x3": 64 * 64 * 3, "scale_128 128x128x3": 128 * 128 * 3}
BEFORE = (4, 115_200)
TURNAROUND = 0.002  # seconds per READ on a board (assumed: USB full-speed polling both ways)
RECORDS = 300
MARK = "<!-- link-throughput -->"


def model_table() -> str:
    # imported here: a --worker runs an older tree's zocodegen, whose host tools differ
    from zocodegen.host import device_time as dt
    now_link = (link.MAX_SECTORS, link.DEFAULT_BAUD)
    rows = ["| record | before: 4 sectors, 115,200 baud | now: "
            f"{now_link[0]} sectors, {now_link[1]:,} baud | speed-up | 1000-record evaluation, "
            "before -> now |", "|---|---:|---:|---:|---:|"]
    for name, size in MODELS.items():
        for turnaround in (0.0, TURNAROUND):
            before = dt.record_link_seconds(size, BEFORE[1], BEFORE[0], turnaround, trimmed=False)
            now = dt.record_link_seconds(size, now_link[1], now_link[0], turnaround)
            kb = (size + 8) / 1024
            rows.append(f"| {name}, {turnaround * 1000:g} ms turnaround | {kb / before:.1f} "
                        f"KB/s | {kb / now:.1f} KB/s | {before / now:.1f}x | "
                        f"{_duration(1000 * before)} -> {_duration(1000 * now)} |")
    return "\n".join(rows)


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.1f} s"


def measured(engine: str, records: int) -> tuple[float, int]:
    """(seconds, correct) of `A` over ``records`` test records on ``engine`` firmware: the
    fastest of three natively (a shared machine's noise), of one under QEMU."""
    runs = [_measured_once(engine, records) for _ in range(3 if engine == "native" else 1)]
    return min(runs)


def _measured_once(engine: str, records: int) -> tuple[float, int]:
    from zocodegen.formats.link import Split, accuracy, command, Command
    from zocodegen.host.blocks import ImageBlocks
    from zocodegen.host.devices import Firmware
    from zocodegen.host.link.server import DeviceSession, HostLink
    from zocodegen.projects import cached_build
    from zocodegen.training.config import TrainConfig
    from zocodegen.training.data import pack
    model = REPO / "tests" / "fixtures" / "scale_model.tflite"
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        data, image = Path(tmp) / "data.npz", Path(tmp) / "image.img"
        x = rng.integers(-128, 128, (records, 64, 64, 3), dtype=np.int8)
        y = rng.integers(0, 10, records)
        np.savez(data, x=x[:8], y=y[:8], x_test=x, y_test=y)
        pack(data, image, model, progress=False)
        elf = cached_build(model, engine, emulate="stm32h7b3",
                           train=TrainConfig(steps=1, queries=1))
        firmware = Firmware(engine, elf, icount=False)
        try:
            session = DeviceSession(HostLink(firmware.start()), ImageBlocks(image))
            session.hello()
            session.run(command(Command.OPEN))
            start = time.perf_counter()
            done = session.run(accuracy(Split.TEST)).done
            seconds = time.perf_counter() - start
            session.run(command(Command.QUIT))
        finally:
            firmware.close()
    return seconds, done.value


def measured_table(records: int, baseline: str | None) -> str:
    size = 64 * 64 * 3 + 8
    rows = [f"| firmware | code | {records} records | KB/s | 1000-record evaluation |",
            "|---|---|---:|---:|---:|"]
    labels = ([baseline] if baseline else []) + ["now"]
    for engine in ("native", "qemu"):
        for label in labels:
            if label == "now":
                seconds, _ = measured(engine, records)
            else:
                with revisions.checkout(baseline) as tree:
                    seconds = revisions.run_worker(Path(__file__), tree, {
                        "engine": engine, "records": records})["seconds"]
            rows.append(f"| {engine} | {label} | {seconds:.2f} s | "
                        f"{records * size / 1024 / seconds:.0f} | "
                        f"{_duration(seconds * 1000 / records)} |")
    return "\n".join(rows)


def worker(job_file: str, answer: str) -> None:
    """Measure with the code of the tree this process was started for (revisions.py)."""
    revisions.check_worker_code()
    job = json.loads(Path(job_file).read_text())
    seconds, correct = measured(job["engine"], job["records"])
    Path(answer).write_text(json.dumps({"seconds": seconds, "correct": correct}))


def report(records: int, baseline: str | None = None) -> str:
    return "\n".join([
        "", f"Measured {datetime.date.today()} by `benchmarks/link_throughput.py`.", "",
        "Board lines (wire model: frames and COBS exactly, 8N1, and the turnaround per READ):",
        "", model_table(), "",
        "Measured over the link (the 64x64 model's firmware, `A` over random test records; "
        "compute included):", "", measured_table(records, baseline), ""])


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=RECORDS)
    parser.add_argument("--baseline", metavar="REV",
                        help="also measure commit REV (e.g. 2ca096d, the link before)")
    parser.add_argument("--write", action="store_true",
                        help="replace the section between the marks in docs/benchmarks.md")
    args = parser.parse_args()
    text = report(args.records, args.baseline)
    print(text)
    if args.write:
        replace_section(REPO / "docs" / "benchmarks.md", MARK, MARK, text, "## Link")


if __name__ == "__main__":
    main()
