"""Coverage-guided fuzzing of what the device parses (docs/reliability.md): builds every
harness of this folder with clang's libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer
against a generated training project, then runs, replays or reseeds them.

    python tests/fuzz/run.py fuzz --seconds 60       # each harness 60 s; non-zero on a finding
    python tests/fuzz/run.py replay                  # every committed input once (the tests)
    python tests/fuzz/run.py seeds                   # rewrite the seed corpora from real traffic
    python tests/fuzz/run.py merge                   # fold new coverage into the committed corpus

``scripts/fuzz.sh SECONDS`` is ``fuzz --seconds SECONDS``. The committed corpus
(tests/fuzz/corpus/HARNESS/) holds the seeds (real frames, packed images, checkpoints) and
inputs the fuzzer found that reach new code, all crash-free: the suite replays it. Findings
go to build/fuzz/findings/ (reproduce one with ``build/fuzz/bin/HARNESS FILE``).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CORPUS = HERE / "corpus"
WORK = Path(os.environ.get("ZOCODEGEN_FUZZ_WORK", ROOT / "build" / "fuzz"))
MODEL = ROOT / "tests" / "fixtures" / "digits_cnn.tflite"
#: The firmware under test: a training build whose block is chosen on the device, so the
#: project has several training models (the checkpoint loader tries each) and the B command;
#: small trials and guard checks, so a seed session of a dozen records reaches all of them.
BUILD_OPTIONS = ("--target", "native", "--train", "sparse", "--block", "auto", "--queries", "2",
                 "--trial-samples", "4", "--guard-samples", "16", "--guard-every", "2",
                 "--lr", "0.01")
CLANG_NAMES = ("clang", "clang-14", "clang-15", "clang-16", "clang-17", "clang-18", "clang-19")
FLAGS = ("-std=c99", "-O1", "-g", "-fno-omit-frame-pointer", "-ffp-contract=off",
         "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=all")


@dataclass(frozen=True)
class Harness:
    """A C harness fuzz_NAME.c built against the project's `sources`, or (sources empty) a
    Python target of host_targets.py run by atheris."""
    name: str
    sources: tuple[str, ...] = ()  # project files (src/...) beside the harness's own C file
    defines: tuple[str, ...] = ()
    max_len: int = 8192

    def source(self) -> Path:
        return HERE / f"fuzz_{self.name}.c"

    @property
    def on_device(self) -> bool:
        return bool(self.sources)


_KERNELS = ("src/model.c", "src/weights.c", "src/training.c", "src/kernels/*.c")
HARNESSES = (
    Harness("link_frames", ("src/link/zo_link.c", "src/link/zo_crc32.c"),
            ("-DZO_LINK_DECODER_ONLY",), 2 * 2083 + 16),
    Harness("session", (*_KERNELS, "src/train/*.c", "src/link/*.c"), (), 1 << 17),
    Harness("image", ("src/train/zo_image.c", "src/link/zo_crc32.c", "@fuzz_blockdev.c"),
            (), 8 * 512),
    Harness("checkpoint", (*_KERNELS, "src/train/*.c", "src/link/zo_crc32.c",
                           "@fuzz_blockdev.c"), (), 12 * 512),
    # the host's parsers of what comes from a device or the network (host_targets.py)
    Harness("host_link", max_len=4096),
    Harness("host_checkpoint", max_len=4096),
    Harness("host_scalars", max_len=4096),
    Harness("host_fleet", max_len=4096),
)
BY_NAME = {h.name: h for h in HARNESSES}


def clang() -> str:
    for name in CLANG_NAMES:
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit("fuzz: clang not found: apt-get install clang (Debian's clang ships "
                     "libFuzzer), or run scripts/setup.sh")


def project() -> Path:
    """The generated firmware the harnesses compile (rebuilt on every call: a few seconds)."""
    out = WORK / "project"
    subprocess.run([sys.executable, "-m", "zocodegen", "build", str(MODEL), *BUILD_OPTIONS,
                    "-o", str(out)], check=True, stdout=subprocess.DEVNULL)
    return out


def _files(proj: Path, patterns: tuple[str, ...]) -> list[str]:
    files: list[str] = []
    for pattern in patterns:
        if pattern.startswith("@"):
            files.append(str(HERE / pattern[1:]))
        else:
            files += sorted(str(p) for p in proj.glob(pattern))
    return files


def build(harness: Harness, proj: Path) -> list[str]:
    """The command that runs the harness (libFuzzer's options and inputs follow it)."""
    if not harness.on_device:
        return [sys.executable, str(HERE / "host_targets.py"), harness.name]
    out = WORK / "bin" / harness.name
    out.parent.mkdir(parents=True, exist_ok=True)
    sources = [s for s in _files(proj, harness.sources) if not s.endswith("/main.c")]
    cmd = [clang(), *FLAGS, *harness.defines, f"-I{proj / 'include'}", f"-I{proj / 'src'}",
           f"-I{HERE}", str(harness.source()), *sources, "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"fuzz: building {harness.name} failed:\n{done.stderr}")
    return [str(out)]


def build_all(names: list[str]) -> dict[str, list[str]]:
    """Every harness's command; the C ones built two at a time."""
    proj = project() if any(BY_NAME[n].on_device for n in names) else ROOT
    with ThreadPoolExecutor(2) as pool:
        commands = pool.map(lambda name: build(BY_NAME[name], proj), names)
    return dict(zip(names, commands))


def prebuilt(names: list[str]) -> dict[str, list[str]]:
    return {name: build(BY_NAME[name], ROOT) if not BY_NAME[name].on_device
            else [str(WORK / "bin" / name)] for name in names}


def _stats(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"stat::(\w+):\s+(\d+)", text)}


def fuzz(name: str, command: list[str], seconds: int, jobs: int, runs: int = -1) -> dict:
    """One harness for `seconds` (or `runs` executions, whichever comes first); the work
    corpus starts from the committed one."""
    work = WORK / "corpus" / name
    work.mkdir(parents=True, exist_ok=True)
    findings = WORK / "findings"
    findings.mkdir(parents=True, exist_ok=True)
    cmd = [*command, f"-max_total_time={seconds}", f"-runs={runs}", "-print_final_stats=1",
           f"-max_len={BY_NAME[name].max_len}", "-timeout=10", "-rss_limit_mb=2048",
           f"-artifact_prefix={findings}/{name}-", str(work), str(CORPUS / name)]
    if jobs > 1:
        cmd.insert(len(command), f"-fork={jobs}")
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True)
    log = WORK / f"{name}.log"
    log.write_text(done.stderr)
    stats = _stats(done.stderr)
    return {"harness": name, "seconds": time.monotonic() - started, "exit": done.returncode,
            "executions": stats.get("number_of_executed_units", 0),
            "coverage": _last_int(r"cov: (\d+)", done.stderr),
            "corpus": len(list(work.iterdir())), "log": str(log)}


def _last_int(pattern: str, text: str) -> int:
    found = re.findall(pattern, text)
    return int(found[-1]) if found else 0


def replay(name: str, command: list[str]) -> subprocess.CompletedProcess:
    """Every committed input of `name` once (libFuzzer runs the files it is given)."""
    inputs = sorted(str(p) for p in (CORPUS / name).iterdir())
    return subprocess.run([*command, "-runs=1", *inputs], capture_output=True, text=True)


def merge(name: str, command: list[str]) -> None:
    """Adds to the committed corpus the inputs of the work corpus that reach new code."""
    work = WORK / "corpus" / name
    subprocess.run([*command, "-merge=1", f"-max_len={BY_NAME[name].max_len}",
                    str(CORPUS / name), str(work)], check=True, capture_output=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("fuzz", "replay", "seeds", "merge", "build"))
    parser.add_argument("--seconds", type=int, default=60, help="per harness (fuzz)")
    parser.add_argument("--harness", action="append", choices=sorted(BY_NAME),
                        help="only these (default: all)")
    parser.add_argument("--runs", type=int, default=-1,
                        help="stop a harness after this many executions (default: time only)")
    parser.add_argument("--jobs", type=int, default=1, help="libFuzzer -fork processes")
    parser.add_argument("--prebuilt", action="store_true",
                        help="use the harnesses the last build made (for runs side by side)")
    args = parser.parse_args(argv)
    names = args.harness or [h.name for h in HARNESSES]
    if args.action == "seeds":
        from seeds import write_seeds
        write_seeds(CORPUS, names)
        return 0
    binaries = prebuilt(names) if args.prebuilt else build_all(names)
    if args.action == "build":
        return 0
    if args.action == "replay":
        failed = 0
        for name, command in binaries.items():
            done = replay(name, command)
            print(f"{name}: {len(list((CORPUS / name).iterdir()))} inputs, exit "
                  f"{done.returncode}")
            if done.returncode != 0:
                print(done.stderr[-4000:], file=sys.stderr)
                failed += 1
        return 1 if failed else 0
    if args.action == "merge":
        for name, command in binaries.items():
            merge(name, command)
        return 0
    results = []
    for name, command in binaries.items():
        result = fuzz(name, command, args.seconds, args.jobs, args.runs)
        results.append(result)
        verdict = "ok" if result["exit"] == 0 else f"FINDING (see {result['log']})"
        print(f"{name}: {result['executions']:,} executions in {result['seconds']:.0f} s, "
              f"coverage {result['coverage']}, corpus {result['corpus']}: {verdict}",
              flush=True)
    for result in results:
        (WORK / f"stats-{result['harness']}.json").write_text(json.dumps(result, indent=1))
    return 0 if all(r["exit"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    os.chdir(ROOT)
    sys.exit(main())
