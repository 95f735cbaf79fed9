"""Kernel profile (not a test): exact instruction counts per function, and per instruction of
one function, of a firmware that runs by itself and exits under QEMU.

    .venv/bin/python benchmarks/kernel_profile.py                        # kws's depthwise layer
    .venv/bin/python benchmarks/kernel_profile.py -D KB_H=2 -D KB_W=2 -D KB_C=480 -D KB_K=5
    .venv/bin/python benchmarks/kernel_profile.py -D KB_1X1 --annotate matmul_rows
    .venv/bin/python benchmarks/kernel_profile.py --source my_main.c     # any main() of yours

The default source, benchmarks/data/kernel_bench.c, calls one fast convolution kernel once
on random data (geometry set with -D, see the file). It is built with the QEMU board's
platform files and run with `-icount shift=0 -singlestep -d exec,nochain`: QEMU then logs
every executed instruction's address, which this script counts and maps to functions with
arm-none-eabi-nm (inlined code counts in its caller). --annotate prints that function's
disassembly with each instruction's count, which shows the loops' costs and the compiler's
spills. The log is one line per instruction: keep runs to a few million instructions.
The inference and training benchmarks measure whole models through the host link; this is
the microscope for one kernel (issue 15: how the depthwise border path was found).
"""
from __future__ import annotations

import argparse
import bisect
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))
SOURCE = REPO / "benchmarks" / "data" / "kernel_bench.c"
KERNELS = REPO / "templates" / "kernels"


def build(source: Path, defines: list[str], root: Path) -> Path:
    """The QEMU ELF of `source` as main.c of a board project (tests/test_qemu_board.py)."""
    from test_qemu_board import build as make, make_project
    project = make_project(root / "project")
    (project / "src" / "main.c").write_text(source.read_text())
    done = make(project, "profile", f"-I{KERNELS}", *(f"-D{d}" for d in defines))
    if done.returncode != 0:
        sys.exit(f"build failed:\n{done.stderr}")
    return project / "build" / "profile.elf"


def trace(elf: Path, log: Path) -> collections.Counter:
    """How many times each instruction address executed."""
    from qemu.runner import qemu_command
    command = qemu_command(elf) + ["-singlestep", "-d", "exec,nochain", "-D", str(log)]
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"the firmware exited with status {done.returncode}")
    counts: collections.Counter = collections.Counter()
    with log.open() as lines:
        for line in lines:
            if line.startswith("Trace"):  # Trace 0: host [cpu/pc/flags/cflags] symbol
                counts[int(line.split("[", 1)[1].split("/")[1], 16)] += 1
    return counts


def functions(elf: Path) -> list[tuple[int, int, str]]:
    """(start, size, name) of the ELF's functions, by address."""
    out = subprocess.run(["arm-none-eabi-nm", "-S", "--defined-only", str(elf)],
                         capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 4 and fields[2] in "tTwW":
            found.append((int(fields[0], 16) & ~1, int(fields[1], 16), fields[3]))
    return sorted(found)


def by_function(counts: collections.Counter, table: list[tuple[int, int, str]]
                ) -> collections.Counter:
    starts = [start for start, _, _ in table]
    totals: collections.Counter = collections.Counter()
    for address, n in counts.items():
        i = bisect.bisect_right(starts, address) - 1
        inside = i >= 0 and address < table[i][0] + table[i][1]
        totals[table[i][2] if inside else "?"] += n
    return totals


def annotate(elf: Path, name: str, counts: collections.Counter) -> str:
    """The function's disassembly, each instruction prefixed by its count."""
    out = subprocess.run(["arm-none-eabi-objdump", "-d", "--no-show-raw-insn",
                          f"--disassemble={name}", str(elf)],
                         capture_output=True, text=True, check=True).stdout
    lines = []
    for line in out.splitlines():
        match = re.match(r"\s*([0-9a-f]+):\s*(.*)", line)
        if match:
            lines.append(f"{counts.get(int(match.group(1), 16), 0):>10,}  {match.group(1)}: "
                         f"{match.group(2)}")
    return "\n".join(lines) or f"no function {name} in {elf}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=SOURCE,
                        help="a main() for the QEMU board that exits (default: kernel_bench.c)")
    parser.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME[=V]",
                        help="a macro for the build (repeatable), e.g. KB_C=128")
    parser.add_argument("--annotate", metavar="FUNCTION",
                        help="also print FUNCTION's disassembly with per-instruction counts")
    parser.add_argument("--top", type=int, default=12, help="functions listed (default 12)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        elf = build(args.source.resolve(), args.defines, Path(tmp))
        counts = trace(elf, Path(tmp) / "exec.log")
        totals = by_function(counts, functions(elf))
        total = sum(totals.values())
        print(f"{total:,} instructions ({args.source.name} {' '.join(args.defines)})")
        for name, n in totals.most_common(args.top):
            print(f"{n:>12,}  {100 * n / total:5.1f} %  {name}")
        if args.annotate:
            print(annotate(elf, args.annotate, counts))


if __name__ == "__main__":
    main()
