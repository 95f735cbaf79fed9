"""`zocodegen flash DIR`: upload a generated STM32 project with PlatformIO (`pio run -t upload`).

PlatformIO's failures are long logs whose useful line is easy to miss. `explain()` turns the
usual ones (platform not downloadable offline, unknown board, no ST-LINK) into one line that
says what to do; it is a pure function of pio's output and exit status, so the tests can feed
it the logs of situations they cannot create (a board, a probe, the internet).
"""
from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError
from .files import read_text
from .target import TARGET_NAMES, target_data

UDEV_RULES = ("PlatformIO's udev rules (99-platformio-udev.rules, "
              "https://docs.platformio.org/en/latest/core/installation/udev-rules.html)")
BUILD_HINT = f"zocodegen build MODEL --target {'|'.join(TARGET_NAMES)} -o DIR"

# pio's output when it could not download what a first build needs: installing a package
# (the platform, a toolchain, the uploader), then a network error or an empty registry answer
_INSTALLING = re.compile(r"(?:Platform|Tool|Package) Manager: Installing (\S+)")
_NETWORK = re.compile(r"HTTPClientError|InternetConnectionError|not connected to the Internet|"
                      r"ConnectionError|Max retries exceeded|NameResolutionError|"
                      r"Temporary failure in name resolution|UnknownPackageError|"
                      r"Could not find the package with")
_UNKNOWN_BOARD = re.compile(r"(?:Unknown board ID|Invalid board JSON manifest) '([^']+)'")
# openocd (PlatformIO's stlink uploader), st-flash and pyOCD when no probe is reachable
_NO_PROBE = re.compile(r"Error: open failed|unable to find a matching CMSIS-DAP device|"
                       r"No ST-?LINK detected|Couldn't find any ST-?Link|"
                       r"unable to open ST-?LINK device|LIBUSB_ERROR_ACCESS|"
                       r"No connected debug probes|No debug probe", re.IGNORECASE)
# the probe answered but the microcontroller did not
_NO_TARGET = re.compile(r"init mode failed|unable to connect to the target|"
                        r"Failed to connect to target|target voltage may be too low",
                        re.IGNORECASE)
# pio's closing summary (separators, [FAILED] banner, environment table): not worth quoting
_SUMMARY = re.compile(r"^[=\-\s]*$|^=+ .* =+$|^Environment\s+Status|"
                      r"\s(?:FAILED|SUCCESS|IGNORED)\s+\d\d:\d\d")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True)
class Project:
    path: Path
    target: str
    env: str              # the platformio.ini environment to upload
    board: str | None     # its `board =`


def explain(output: str, returncode: int) -> str | None:
    """What went wrong in a `pio run -t upload` that printed `output` and exited with
    `returncode`, as one line saying what to do; None when it succeeded."""
    if returncode == 0:
        return None
    text = _ANSI.sub("", output)
    installing = _INSTALLING.findall(text)
    if "InternetConnectionError" in text or (installing and _NETWORK.search(text)):
        what = installing[-1] if installing else "ststm32"
        what = "the ststm32 platform" if what in ("ststm32", "platformio/ststm32") else what
        return (f"PlatformIO could not download {what} (no internet access?): it needs the "
                "internet the first time it builds or flashes for a board. Connect this machine "
                "and run zocodegen flash again, or run `pio pkg install -g -p ststm32` on a "
                "machine with internet access and copy its ~/.platformio folder here")
    board = _UNKNOWN_BOARD.search(text)
    if board:
        return unknown_board(board.group(1), "boards/")
    probe = _NO_PROBE.search(text)
    if probe:
        return (f"no ST-LINK probe answered ('{_line_of(text, probe)}'): connect the board's "
                "ST-LINK USB port (labelled ST-LINK or USB ST-LINK; use a data cable) to this "
                f"computer; on Linux install {UDEV_RULES} and replug the board; close other "
                "programs that use the probe (a debugger, STM32CubeProgrammer); then run "
                "zocodegen flash again")
    target = _NO_TARGET.search(text)
    if target:
        return (f"the ST-LINK probe answered but not the microcontroller "
                f"('{_line_of(text, target)}'): check the board is powered and its jumpers are "
                "in their default positions, then run zocodegen flash again while holding the "
                "board's RESET button and release it when the upload starts")
    lines = [s.strip() for s in text.splitlines() if s.strip() and not _SUMMARY.search(s)]
    last = " | ".join(lines[-3:]) or "no output"
    status = (f"was killed by signal {-returncode}" if returncode < 0
              else f"failed with exit status {returncode}")
    return f"pio run -t upload {status}; its last lines: {last} (full output above)"


def unknown_board(board: str, boards_dir: str) -> str:
    # the boards PlatformIO has no id for: their projects carry a board JSON (target.json)
    own = [t for t in TARGET_NAMES if target_data(t)["platformio_board"] is None]
    return (f"PlatformIO does not know the board '{board}': a {' or '.join(own)} project "
            f"describes it in {boards_dir}{board}.json, which is missing or invalid; build the "
            f"project again (zocodegen build MODEL --target {own[0]} -o DIR); any other board "
            "needs a PlatformIO board id (`pio boards ststm32`)")


def _line_of(text: str, match: re.Match) -> str:
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    return text[start:end if end >= 0 else len(text)].strip()


def load_project(path: Path) -> Project:
    """Check that `path` is a project `zocodegen build` made for a board, before PlatformIO
    gets a chance to fail on it with a message about something else."""
    if not path.is_dir():
        what = "not a directory" if path.exists() else "no such directory"
        raise UserError(f"{path}: {what}; give the project directory that `{BUILD_HINT}` wrote")
    manifest = path / "manifest.json"
    if not manifest.is_file():
        raise UserError(f"{path} is not a project made by `zocodegen build` (no manifest.json); "
                        f"make one with `{BUILD_HINT}`")
    try:
        target = json.loads(read_text(manifest, "manifest"))["target"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{manifest} is unreadable ({exc}); build the project again "
                        f"({BUILD_HINT})") from None
    if target not in TARGET_NAMES:
        raise UserError(f"{path} was built for --target {target}, which has no board to flash; "
                        f"only {' and '.join(TARGET_NAMES)} projects (with a platformio.ini) "
                        f"can be flashed: {BUILD_HINT}")
    ini = path / "platformio.ini"
    if not ini.is_file():
        raise UserError(f"{path} was built for {target} but has no platformio.ini; build it "
                        f"again: zocodegen build MODEL --target {target} -o {path}")
    config = configparser.ConfigParser(inline_comment_prefixes=(";",), interpolation=None)
    try:
        config.read(ini, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError) as exc:
        raise UserError(f"{ini} is not a valid PlatformIO file ({exc})") from None
    envs = [s[4:] for s in config.sections() if s.startswith("env:")]
    default = config.get("platformio", "default_envs", fallback="").replace(",", " ").split()
    env = default[0] if default else target if target in envs else (envs + [""])[0]
    if env not in envs:
        raise UserError(f"{ini} has no [env:{env or target}] section to upload; build the "
                        f"project again: zocodegen build MODEL --target {target} -o {path}")
    board = config.get(f"env:{env}", "board", fallback=None)
    info = target_data(target)
    if (board == info["platformio_board_id"] and info["platformio_board"] is None
            and not (path / "boards" / f"{board}.json").is_file()):
        raise UserError(unknown_board(board, f"{path / 'boards'}{os.sep}"))
    return Project(path, target, env, board)


def find_pio() -> Path | None:
    """PlatformIO of this Python environment first (a venv's bin/ need not be on PATH), then
    whichever is on PATH."""
    for where in (str(Path(sys.executable).parent), None):
        for name in ("pio", "platformio"):
            found = shutil.which(name, path=where)
            if found:
                return Path(found)
    return None


def pio_command(pio: Path, project: Project, port: str | None, verbose: bool) -> list[str]:
    cmd = [str(pio), "run", "-d", str(project.path), "-e", project.env, "-t", "upload"]
    if port:
        cmd += ["--upload-port", port]
    return cmd + (["-v"] if verbose else [])


def run_streaming(cmd: list[str]) -> tuple[int, str]:
    """Run `cmd`, copying its output (stdout and stderr, in order) to our stdout as it comes,
    and return its exit status and the whole output for `explain()`."""
    env = dict(os.environ, PLATFORMIO_FORCE_ANSI="true") if sys.stdout.isatty() else None
    lines = []
    try:
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                              text=True, encoding="utf-8", errors="replace") as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                lines.append(line)
    except OSError as exc:
        raise UserError(f"cannot run {cmd[0]}: {exc}; reinstall PlatformIO "
                        f"({sys.executable} -m pip install --force-reinstall platformio)") from None
    return proc.returncode, "".join(lines)


def flash_project(path: Path, port: str | None = None, verbose: bool = False) -> Project:
    """Upload project `path` to its board; raise UserError saying what to do when it fails."""
    project = load_project(path)
    pio = find_pio()
    if pio is None:
        raise UserError(f"PlatformIO is not installed (no pio or platformio next to "
                        f"{sys.executable} or on PATH); install it into this environment: "
                        f"{sys.executable} -m pip install platformio")
    returncode, output = run_streaming(pio_command(pio, project, port, verbose))
    problem = explain(output, returncode)
    if problem:
        raise UserError(problem)
    return project
