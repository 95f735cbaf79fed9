"""`zocodegen flash DIR`: the project checks, finding PlatformIO, the arguments given to
`pio run -t upload`, and the one-line message for each way an upload fails (exit status 2,
no traceback). No test needs a board, a probe or the internet: `explain()` is fed the logs
PlatformIO and openocd print in those situations, and a real PlatformIO run is made to fail
the way it does on a machine without internet."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES
from zocodegen import cli
from zocodegen.errors import UserError
from zocodegen.flash import explain, find_pio, load_project

MODEL = FIXTURES / "digits_cnn.tflite"
PYTHON = sys.executable  # before the tests point it at a fake venv

OFFLINE = """\
Processing stm32f746 (platform: ststm32; board: disco_f746ng)
--------------------------------------------------------------------------------
Platform Manager: Installing ststm32
HTTPClientError: 
"""
OFFLINE_OLD = """\
Processing stm32f746 (platform: ststm32; board: disco_f746ng)
Platform Manager: Installing ststm32
InternetConnectionError: You are not connected to the Internet.
PlatformIO needs the Internet connection to download dependent packages or to work with \
PlatformIO Account.
"""
OFFLINE_TOOL = """\
Processing stm32f746 (platform: ststm32; board: disco_f746ng)
Tool Manager: Installing platformio/tool-openocd @ ~3.1200.0
HTTPClientError: HTTPSConnectionPool(host='api.registry.platformio.org', port=443): Max \
retries exceeded with url: /v3/packages (Caused by NameResolutionError("Failed to resolve"))
"""
UNKNOWN_BOARD = """\
Processing stm32h7b3 (platform: ststm32; board: stm32h7b3i_dk)
--------------------------------------------------------------------------------
UnknownBoard: Unknown board ID 'stm32h7b3i_dk'
"""
UPLOAD_HEAD = """\
Checking size .pio/build/stm32f746/firmware.elf
Configuring upload protocol...
AVAILABLE: blackmagic, cmsis-dap, jlink, stlink
CURRENT: upload_protocol = stlink
Uploading .pio/build/stm32f746/firmware.elf
xPack Open On-Chip Debugger 0.12.0-01004-g9ea7f3d64-dirty (2023-01-30-15:04)
Licensed under GNU GPL v2
debug_level: 1

"""
UPLOAD_TAIL = """\
*** [upload] Error 1
========================= [FAILED] Took 1.52 seconds =========================

Environment    Status    Duration
-------------  --------  ------------
stm32f746      FAILED    00:00:01.523
==================== 1 failed, 0 succeeded in 00:00:01.523 ====================
"""
NO_PROBE = {
    "openocd": "hla_swd\nError: open failed\nin procedure 'program'\n** OpenOCD init failed **\n"
               "shutdown command invoked\n",
    "cmsis-dap": "Error: unable to find a matching CMSIS-DAP device\n",
    "st-flash": "st-flash 1.5.1\nNo ST-LINK detected\n",
    "permissions": "Error: libusb_open() failed with LIBUSB_ERROR_ACCESS\nError: open failed\n",
}
NO_TARGET = "Info : STLINK V2J40M27 (API v2) VID:PID 0483:374B\nInfo : Target voltage: 3.2\n" \
            "Error: init mode failed (unable to connect to the target)\n"
COMPILE_ERROR = """\
Compiling .pio/build/stm32f746/src/model.o
src/model.c:12:1: error: expected ';' before '}' token
*** [.pio/build/stm32f746/src/model.o] Error 1
""" + UPLOAD_TAIL.split("\n", 1)[1]


# explain(): pio's output and exit status -> one line saying what to do

def test_explain_success_is_none():
    assert explain(UPLOAD_HEAD + "** Programming Finished **\n[SUCCESS]\n", 0) is None


@pytest.mark.parametrize("log", [OFFLINE, OFFLINE_OLD, "\x1b[31m" + OFFLINE + "\x1b[0m"],
                         ids=["http", "internet", "ansi"])
def test_explain_platform_offline(log):
    message = explain(log, 1)
    assert "could not download the ststm32 platform" in message
    assert "pio pkg install -g -p ststm32" in message and "internet" in message


def test_explain_tool_offline_names_the_package():
    message = explain(OFFLINE_TOOL, 1)
    assert "could not download platformio/tool-openocd" in message
    assert "pio pkg install -g -p ststm32" in message


def test_explain_unknown_board():
    message = explain(UNKNOWN_BOARD, 1)
    assert "does not know the board 'stm32h7b3i_dk'" in message
    assert "boards/stm32h7b3i_dk.json" in message and "--target stm32h7b3" in message


@pytest.mark.parametrize("kind", sorted(NO_PROBE))
def test_explain_no_probe(kind):
    message = explain(UPLOAD_HEAD + NO_PROBE[kind] + UPLOAD_TAIL, 1)
    assert message.startswith("no ST-LINK probe answered")
    assert "ST-LINK USB port" in message and "99-platformio-udev.rules" in message


def test_explain_probe_without_target():
    message = explain(UPLOAD_HEAD + NO_TARGET + UPLOAD_TAIL, 1)
    assert "probe answered but not the microcontroller" in message
    assert "init mode failed" in message and "RESET" in message


def test_explain_other_failure_quotes_the_last_lines():
    message = explain(COMPILE_ERROR, 1)
    assert "exit status 1" in message
    assert "src/model.c:12:1: error: expected ';'" in message
    assert "[upload]" not in message and "succeeded" not in message  # not the summary table
    assert "\n" not in message
    assert "killed by signal 9" in explain("", -9)


# the project checks, before PlatformIO is looked for

@pytest.fixture(scope="module")
def projects(tmp_path_factory) -> dict[str, Path]:
    """Projects `zocodegen build` writes, as a user would get them."""
    root = tmp_path_factory.mktemp("projects")
    for target in ("stm32f746", "stm32h7b3", "native"):
        subprocess.run([PYTHON, "-m", "zocodegen", "build", str(MODEL), "--target",
                        target, "-o", str(root / target)], check=True, capture_output=True)
    return {p.name: p for p in root.iterdir()}


def test_load_project(projects):
    f7 = load_project(projects["stm32f746"])
    assert (f7.target, f7.env, f7.board) == ("stm32f746", "stm32f746", "disco_f746ng")
    h7 = load_project(projects["stm32h7b3"])
    assert (h7.target, h7.env, h7.board) == ("stm32h7b3", "stm32h7b3", "stm32h7b3i_dk")


def _error(path: Path) -> str:
    with pytest.raises(UserError) as info:
        load_project(path)
    return str(info.value)


def test_load_project_refusals(projects, tmp_path):
    assert "no such directory" in _error(tmp_path / "nope")
    assert "not a directory" in _error(projects["stm32f746"] / "Makefile")
    assert "not a project made by `zocodegen build`" in _error(tmp_path)
    message = _error(projects["native"])
    assert "built for --target native" in message and "stm32f746 and stm32h7b3" in message
    for target in ("qemu", "stm32f746"):
        project = tmp_path / target
        shutil.copytree(projects["stm32f746"], project)
        manifest = json.loads((project / "manifest.json").read_text())
        (project / "manifest.json").write_text(json.dumps({**manifest, "target": target}))
        if target == "stm32f746":
            (project / "platformio.ini").unlink()
    assert "built for --target qemu" in _error(tmp_path / "qemu")
    assert "has no platformio.ini" in _error(tmp_path / "stm32f746")
    h7 = tmp_path / "h7"
    shutil.copytree(projects["stm32h7b3"], h7)
    shutil.rmtree(h7 / "boards")
    assert f"{h7 / 'boards' / 'stm32h7b3i_dk.json'}" in _error(h7)
    (h7 / "manifest.json").write_text("{")
    assert "manifest.json is unreadable" in _error(h7)


# finding PlatformIO, and what it is given: a fake pio records its arguments

FAKE_PIO = """#!/bin/sh
printf '%s\\n' "$@" > "$0.args"
echo "fake pio: uploading"
printf "$FAKE_PIO_SAYS"
exit ${FAKE_PIO_RC:-0}
"""


def _fake_pio(folder: Path, name: str = "pio") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    pio = folder / name
    pio.write_text(FAKE_PIO)
    pio.chmod(0o755)
    return pio


@pytest.fixture
def bins(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """An empty 'venv bin' (where sys.executable lives) and an empty PATH."""
    venv_bin, path_bin = tmp_path / "venv" / "bin", tmp_path / "path"
    venv_bin.mkdir(parents=True)
    path_bin.mkdir()
    monkeypatch.setattr(sys, "executable", str(venv_bin / "python"))
    monkeypatch.setenv("PATH", str(path_bin))
    return venv_bin, path_bin


def test_find_pio_prefers_the_venv(bins):
    venv_bin, path_bin = bins
    assert find_pio() is None
    on_path = _fake_pio(path_bin, "platformio")
    assert find_pio() == on_path
    in_venv = _fake_pio(venv_bin)
    assert find_pio() == in_venv


def test_flash_passes_the_arguments_and_streams(projects, bins, capsys):
    pio = _fake_pio(bins[1])
    project = projects["stm32f746"]
    assert cli.main(["flash", str(project), "--upload-port", "/dev/ttyACM7", "-v"]) == 0
    args = (bins[1] / "pio.args").read_text().split("\n")[:-1]
    assert args == ["run", "-d", str(project), "-e", "stm32f746", "-t", "upload",
                    "--upload-port", "/dev/ttyACM7", "-v"]
    out = capsys.readouterr().out
    assert "fake pio: uploading" in out and "flashed to the stm32f746 board" in out
    assert cli.main(["flash", str(projects["stm32h7b3"]), "--port", "COM3"]) == 0
    assert (pio.parent / "pio.args").read_text().split("\n")[:-1] == [
        "run", "-d", str(projects["stm32h7b3"]), "-e", "stm32h7b3", "-t", "upload",
        "--upload-port", "COM3"]


def test_flash_failure_is_one_line(projects, bins, capsys, monkeypatch):
    _fake_pio(bins[0])
    monkeypatch.setenv("FAKE_PIO_SAYS", UPLOAD_HEAD + NO_PROBE["openocd"] + UPLOAD_TAIL)
    monkeypatch.setenv("FAKE_PIO_RC", "1")
    assert cli.main(["flash", str(projects["stm32f746"])]) == 2
    captured = capsys.readouterr()
    assert "Error: open failed" in captured.out  # streamed as it came
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("zocodegen: error: no ST-LINK probe answered ('Error: open failed')")


def test_flash_without_platformio(projects, bins, capsys):
    assert cli.main(["flash", str(projects["stm32f746"])]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "PlatformIO is not installed" in line
    assert f"{bins[0] / 'python'} -m pip install platformio" in line


def test_flash_native_project_cli(projects):
    proc = subprocess.run([PYTHON, "-m", "zocodegen", "flash", str(projects["native"])],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "built for --target native" in line


# the real PlatformIO on a real project, offline

# PlatformIO itself, minus urllib3's retry back-off (0 + 2 + 4 + 8 + 16 s per registry mirror,
# a minute in all, before it gives up)
QUICK_PIO = """#!/bin/sh
exec "{python}" -c '
import sys
from urllib3.util.retry import Retry
Retry.get_backoff_time = lambda self: 0.0
from platformio.__main__ import main
sys.exit(main())' "$@"
"""


def test_flash_offline_with_real_platformio(projects, bins, tmp_path, monkeypatch, capsys):
    pytest.importorskip("platformio", reason="PlatformIO is not installed (pip install "
                                             "platformio, or the test extra)")
    pio = bins[0] / "pio"
    pio.write_text(QUICK_PIO.format(python=PYTHON))
    pio.chmod(0o755)
    # a PlatformIO of its own (no platform installed, whatever ~/.platformio holds) and no
    # internet, even on a machine that has it: every request goes to a closed local port
    monkeypatch.setenv("PLATFORMIO_CORE_DIR", str(tmp_path / "platformio-core"))
    monkeypatch.setenv("PLATFORMIO_SETTING_ENABLE_TELEMETRY", "no")
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    for var in ("NO_PROXY", "no_proxy", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    project = tmp_path / "f7"
    shutil.copytree(projects["stm32f746"], project)
    assert cli.main(["flash", str(project)]) == 2
    captured = capsys.readouterr()
    assert "Platform Manager: Installing ststm32" in captured.out
    (line,) = captured.err.strip().splitlines()
    assert "could not download the ststm32 platform" in line
    assert "pio pkg install -g -p ststm32" in line
