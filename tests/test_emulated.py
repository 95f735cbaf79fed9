"""The emulated boards (host/emulator, docs/emulated.md): the STM32F746 and STM32H7B3
firmware ELFs a user flashes boot, set their clocks, talk over USART1, infer bit-exactly and
train to the simulator's checkpoint; the register models refuse what the silicon would."""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, random_inputs, reference_interpreter, resolve
from test_training import NEEDS_ARM, _data, _image, _simulated
from zocodegen.projects import cached_build
from zocodegen.codegen.host_inputs import host_side_inputs
from zocodegen.codegen.fit import device_graph
from zocodegen.codegen.project import BuildOptions
from zocodegen.formats.link import DEFAULT_BAUD
from zocodegen.frontends import load_model
from zocodegen.host.emulator.clocks import SETTLE_INSTRUCTIONS, BoardFault, F7Clocks, H7Clocks
from zocodegen.host.emulator.machine import (BOARDS, CPACR_FPU, SCB_CPACR, USART1, USART_BRR,
                                             USART_CR1, USART_ISR, USART_TDR, Board)
from zocodegen.host.engines import FirmwareSession, run_samples
from zocodegen.target import target_data
from zocodegen.training.config import TrainConfig
from zocodegen.training.plan import training_plan

pytestmark = [NEEDS_ARM, pytest.mark.usefixtures("module_build_cache")]


def _firmware(model: str, board: str, **build) -> Path:
    return cached_build(FIXTURES / model, "emulated", emulate=board, **build)


@pytest.mark.parametrize("board", BOARDS)
def test_the_board_boots_to_full_speed_and_reports_its_clocks(board):
    done = subprocess.run([sys.executable, "-m", "zocodegen.host.emulator", "--board", board,
                           "--report", str(_firmware("digits_cnn.tflite", board))],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    mhz = target_data(board)["clock_hz"] // 1_000_000  # what the board promises
    assert f"SYSCLK {mhz} MHz" in done.stderr, done.stderr
    baud = float(done.stderr.split("USART1 ")[1].split(" baud")[0])
    assert abs(baud - DEFAULT_BAUD) < 0.02 * DEFAULT_BAUD
    assert "the host closed the line" in done.stderr  # it waited for HELLO's answer
    assert done.returncode == 0, done.stderr  # the end of the session, not a fault


MODELS = [pytest.param(("fixture", "digits_cnn.tflite"), id="digits_cnn"),
          pytest.param(("fixture", "mcunet_tiny.tflite"), id="mcunet_tiny"),
          pytest.param(("shared", "kws_ref_model.tflite"), id="kws"),
          pytest.param(("shared", "pretrainedResnet_quant.tflite"), id="resnet"),
          pytest.param(("shared", "mcunet_det.tflite"), id="mcunet_det")]
#: Every model on every board, except the detector on the H7B3: its 53 M instructions take
#: about 40 s of the suite per board, and the F746 (host-quantized input, the tight budget)
#: is the case that matters; its on-device QUANTIZE is the same kernel every float model
#: runs.
BOARD_MODELS = [pytest.param(board, m.values[0], id=f"{m.id}-{board}") for m in MODELS
                for board in BOARDS
                if not (m.id == "mcunet_det" and board == "stm32h7b3")]


@pytest.mark.parametrize("board, spec", BOARD_MODELS)
def test_inference_on_the_emulated_board_equals_the_tflite_interpreter(board, spec):
    """The board image's outputs equal the TFLite reference interpreter's (BUILTIN_REF),
    extreme inputs included. The detector's float input is quantized on the host on the
    F746 (what `build` chooses there by default: 181 KB instead of 283 KB)."""
    path = resolve(spec)
    graph = load_model(path)
    interpreter = reference_interpreter(path)
    detail = interpreter.get_input_details()[0]
    count = 1 if path.name == "mcunet_det.tflite" else 3
    inputs = random_inputs(tuple(detail["shape"]), detail["dtype"], count, seed=5)
    quantize = ("host" if path.name == "mcunet_det.tflite" and board == "stm32f746"
                else "device")
    options = BuildOptions(target=board, emulate=board, input_quantize=quantize)
    device = device_graph(graph, options)
    elf = cached_build(path, "emulated", emulate=board, graph=graph, input_quantize=quantize)
    samples = [host_side_inputs(graph, device, {graph.inputs[0]: x}) for x in inputs]
    for x, result in zip(inputs, run_samples(device, "emulated", elf, samples)):
        interpreter.set_tensor(detail["index"], x)
        interpreter.invoke()
        for out in interpreter.get_output_details():
            assert np.array_equal(result.outputs[out["name"]],
                                  interpreter.get_tensor(out["index"])), (board, out["name"])
        assert result.cycles > 10_000  # DWT_CYCCNT counted the inference's instructions


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("mode", ["full", "sparse", "scales"])
def test_training_on_the_emulated_board_equals_the_simulator(board, mode, tmp_path):
    """--train full, sparse (block 1 of 2), and full with --scales (the filter scales'
    double arithmetic: soft-float on the F746, the H7B3's FPU): the board image's checkpoint
    after three steps is the simulator's, byte for byte."""
    model = FIXTURES / "digits_cnn.tflite"
    graph = load_model(model)
    config = TrainConfig(steps=10, queries=3, lr=0.003,
                         **({"mode": "sparse", "blocks": 2, "block": 1} if mode == "sparse"
                            else {"scales": True} if mode == "scales" else {}))
    plan = training_plan(graph, config)
    x, y = _data(graph, plan.num_classes, count=6)
    image = _image(tmp_path, x, y, plan.num_classes)
    steps = 3
    expected = _simulated(graph, plan, x, y, steps, hashlib.sha256(model.read_bytes()).digest())
    elf = cached_build(model, "emulated", emulate=board, graph=graph, train=config)
    with FirmwareSession(graph, "emulated", elf, icount=False) as session:
        session.attach_image(image)
        records = session.train(steps)
        assert session.save_checkpoint() == expected
    assert [r.step for r in records] == [1, 2, 3]


# ---- what the silicon refuses ----------------------------------------------------------

def _f7_at_pll() -> F7Clocks:
    """The F746's clock tree with HSE and the PLL (the board's 216 MHz setting) running."""
    clocks = F7Clocks(25_000_000)
    clocks.write(F7Clocks.PLLCFGR, (25 | 432 << 6 | 0 << 16 | 1 << 22 | 9 << 24), 0)
    clocks.write(F7Clocks.CR, (1 << 16) | (1 << 24), 0)
    return clocks


def test_the_f7_refuses_a_pll_outside_its_ranges():
    clocks = F7Clocks(25_000_000)
    clocks.write(F7Clocks.PLLCFGR, 12 | 432 << 6 | 1 << 22, 0)  # VCO input 2.08 MHz
    with pytest.raises(BoardFault, match="VCO input"):
        clocks.write(F7Clocks.CR, 1 << 24, 0)


def test_the_f7_refuses_the_pll_before_it_is_ready_or_without_wait_states():
    clocks = _f7_at_pll()
    with pytest.raises(BoardFault, match="before its ready flag"):
        clocks.write(F7Clocks.CFGR, 2 | 0x9400, 10)
    clocks = _f7_at_pll()
    with pytest.raises(BoardFault, match="needs 7 wait states"):
        clocks.write(F7Clocks.CFGR, 2 | 0x9400, SETTLE_INSTRUCTIONS)
    clocks = _f7_at_pll()
    clocks.write(F7Clocks.FLASH_ACR, 7, 0)
    with pytest.raises(BoardFault, match="over-drive"):
        clocks.write(F7Clocks.CFGR, 2 | 0x9400, SETTLE_INSTRUCTIONS)
    clocks = _f7_at_pll()
    clocks.write(F7Clocks.FLASH_ACR, 7, 0)
    clocks.write(F7Clocks.PWR_CR1, 0x3C000, 0)  # ODEN, ODSWEN
    clocks.write(F7Clocks.CFGR, 2 | 0x9400, SETTLE_INSTRUCTIONS)
    assert clocks.clocks().sysclk == 216_000_000 and clocks.clocks().pclk2 == 108_000_000


def test_the_h7_refuses_a_vco_outside_the_wide_range():
    clocks = H7Clocks(24_000_000)
    clocks.write(H7Clocks.PLLCKSELR, 2 | 12 << 4, 0)  # HSE / 12 = 2 MHz
    clocks.write(H7Clocks.PLLCFGR, 1 << 2, 0)  # PLL1RGE 2-4 MHz
    clocks.write(H7Clocks.PLL1DIVR, 299 | 1 << 9, 0)  # DIVN1 300: VCO 600 MHz
    with pytest.raises(BoardFault, match="VCO 600 MHz"):
        clocks.write(H7Clocks.CR, 1 << 24, 0)


@pytest.mark.parametrize("board", BOARDS)
def test_the_usart_is_checked_against_the_clock_it_runs_and_its_pins(board):
    class Silent:
        def receive(self, seconds):
            return None

        def send(self, data):
            pass

    emulated = Board(board, _firmware("digits_cnn.tflite", board), Silent())
    emulated._read_word(USART1 + USART_CR1)  # before RCC enables USART1: refused
    assert "clock off" in emulated.report.fault
    emulated.report.fault = None
    apb2 = emulated.clocks.APB2ENR
    emulated.clocks.write(apb2, 1 << 4, 0)
    emulated._write_word(USART1 + USART_BRR, 88)  # the 108 MHz divider, on the reset clock
    with pytest.raises(BoardFault, match="baud"):
        emulated._write_word(USART1 + USART_CR1, 0x0D)
    emulated.regs[USART1 + USART_CR1] = 0
    hsi = emulated.clocks.hsi_hz
    emulated._write_word(USART1 + USART_BRR, hsi // 115200)  # 115200 baud: not the host's
    with pytest.raises(BoardFault, match="the host's 1228800"):
        emulated._write_word(USART1 + USART_CR1, 0x0D)
    emulated.regs[USART1 + USART_CR1] = 0
    m = hsi // DEFAULT_BAUD  # 13 on the F746's 16 MHz HSI: oversampling by 8
    emulated._write_word(USART1 + USART_BRR, (2 * m & ~0xF) | ((2 * m & 0xF) >> 1))
    emulated._write_word(USART1 + USART_CR1, 0x800D)
    with pytest.raises(BoardFault, match="alternate function"):
        emulated._write_word(USART1 + USART_TDR, 0)  # the pins were never handed over


def test_sending_does_not_wait_on_the_line_per_byte():
    """The firmware reads USART1_ISR once before each byte it sends (TXE): that is not a
    wait for the host, so the line is neither flushed nor waited on (it was: 2 ms of real
    time a byte, 222 s of the suite for the detector's outputs). A second read with nothing
    sent in between is a receiver's wait: what was sent goes out, and the line is asked."""
    class Counting:
        def __init__(self):
            self.waits, self.sent = 0, []

        def receive(self, seconds):
            self.waits += 1
            return b""

        def send(self, data):
            self.sent.append(data)

    line = Counting()
    emulated = Board("stm32f746", _firmware("digits_cnn.tflite", "stm32f746"), line)
    emulated.clocks.write(emulated.clocks.APB2ENR, 1 << 4, 0)
    emulated.regs[USART1 + USART_CR1] = 0x0D
    emulated.pins_checked = True
    for byte in range(200):
        emulated._read_word(USART1 + USART_ISR)
        emulated._write_word(USART1 + USART_TDR, byte)
    assert line.waits == 0 and line.sent == []
    emulated._read_word(USART1 + USART_ISR)
    assert line.waits == 0  # the transmitter's last TXE read, or the receiver's first poll
    emulated._read_word(USART1 + USART_ISR)
    assert line.waits == 1 and line.sent == [bytes(range(200))]

def test_train_emulated_runs_the_board_project(tmp_path):
    """`zocodegen train --emulated DIR`: the board project's firmware (make firmware) on its
    emulated board, served by the same host tool as a real board (a short run: the chain
    test above checks the arithmetic)."""
    from test_contract_device import _pack
    from zocodegen.cli import main
    project = tmp_path / "fw"
    assert main(["build", str(FIXTURES / "digits_cnn.tflite"), "--target", "stm32f746",
                 "--train", "full", "--steps", "2", "--queries", "1", "--lr", "0.01",
                 "--no-guard", "-o", str(project)]) == 0
    image = _pack(tmp_path / "a.img", 1)
    run_dir = tmp_path / "run"
    assert main(["train", "--emulated", str(project), "--image", str(image),
                 "-o", str(run_dir)]) == 0
    assert (run_dir / "checkpoint.bin").is_file() and (run_dir / "metrics.csv").is_file()


class _UnansweredHost:
    """A host that never answers (the firmware keeps waiting for WELCOME), then leaves."""

    def __init__(self):
        self.polls, self.sent = 0, b""

    def receive(self, seconds):
        self.polls += 1
        return b"" if self.polls < 2000 else None

    def send(self, data):
        self.sent += data


class _Tampered(Board):
    """The real firmware with one register write changed, as a firmware bug would."""

    def __init__(self, board, elf, tamper):
        self.tamper = tamper
        super().__init__(board, elf, _UnansweredHost())

    def _write_word(self, word, value):
        return super()._write_word(word, self.tamper(self, word, value))


def _lose_wait_states(board, word, value):
    if word == board.clocks.CFGR:  # the FLASH_ACR write never happened
        board.clocks.regs[board.clocks.FLASH_ACR] = 3
    return value


TAMPERS = {
    "brr": (lambda b, w, v: v + v // 10 if w == USART1 + USART_BRR else v,
            r"USART1_BRR = \d+ .* needs f_ck / (88|114)"),
    "wait_states": (_lose_wait_states, r"FLASH_ACR LATENCY 3: needs [67] wait states"),
    "af": (lambda b, w, v: v + (1 << 4) if w == b.gpio_base + 0x24 else v,
           r"PA9 .* GPIOA_AFRH AF\d+ \(needs AF7\)"),
    "cpacr": (lambda b, w, v: v & ~CPACR_FPU if w == SCB_CPACR else v,
              r"NOCP.*SCB_CPACR = 0x00000000; CP10/CP11 need 0x00f00000"),
}


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("tamper", list(TAMPERS))
def test_a_wrong_register_write_fails_the_boot_naming_it(board, tamper):
    change, message = TAMPERS[tamper]
    clean = Board(board, _firmware("digits_cnn.tflite", board), _UnansweredHost())
    ended = clean.run()  # it sent HELLO and waited for the answer: the session's end
    assert ended.closed and ended.fault is None and ended.status == 0
    assert clean.line.sent.startswith(b"\x00")
    report = _Tampered(board, _firmware("digits_cnn.tflite", board), change).run()
    assert report.status == 131
    assert re.search(message, report.fault), report.fault


@NEEDS_ARM
def test_the_build_baud_is_what_the_board_runs_and_the_host_must_match(tmp_path, capsys):
    """`build --baud 921600`: firmware.h and platformio.ini carry it, the emulated board's
    USART1 makes it, and a host at the default rate is told the two ends differ."""
    from zocodegen.cli import main
    from zocodegen.projects import make
    board, out = "stm32f746", tmp_path / "fw"
    model = str(FIXTURES / "digits_cnn.tflite")
    assert main(["build", model, "--target", board, "--baud", "921600", "-o", str(out)]) == 0
    assert "#define FIRMWARE_BAUD 921600u" in (out / "include" / "firmware.h").read_text()
    assert "monitor_speed = 921600" in (out / "platformio.ini").read_text()
    elf = make(out, "firmware")
    assert Board(board, elf, _UnansweredHost(), baud=921600).run().closed
    report = Board(board, elf, _UnansweredHost()).run()
    assert report.status == 131 and "the host's 1228800" in report.fault, report.fault
    capsys.readouterr()
    assert main(["build", model, "--target", board, "--baud", "20000000",
                 "-o", str(tmp_path / "no")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "USART1 cannot make it" in err and "108 MHz" in err


@pytest.mark.parametrize("board", BOARDS)
def test_the_memory_the_board_uses_agrees_with_the_memory_report(board, tmp_path,
                                                                 monkeypatch):
    """The arena as linked is the plan's; the stack the firmware really used (painted at
    main's entry, measured after an inference) fits the stack the report reserves."""
    from zocodegen.cli import main
    project = tmp_path / "fw"
    assert main(["build", str(FIXTURES / "mcunet_tiny.tflite"), "--target", board,
                 "-o", str(project)]) == 0
    planned = {item["name"]: item["bytes"] for item in
               json.loads((project / "memory_report.json").read_text())["sram"]["items"]}
    graph = load_model(FIXTURES / "mcunet_tiny.tflite")
    elf = cached_build(FIXTURES / "mcunet_tiny.tflite", "emulated", emulate=board, graph=graph)
    report = tmp_path / "report.json"
    monkeypatch.setenv("ZOCODEGEN_EMULATOR_REPORT", str(report))
    x = random_inputs(tuple(graph.tensor(graph.inputs[0]).shape), np.float32, 1)[0]
    list(run_samples(graph, "emulated", elf, [{graph.inputs[0]: x}]))
    used = json.loads(report.read_text())
    assert used["status"] == 0 and used["fault"] is None  # it quit when told to
    assert used["arena_bytes"] == planned["arena"]
    assert used["stack_bytes"] == planned["stack"]
    assert 0 < used["stack_used_bytes"] <= planned["stack"], used
    # The polled USART keeps up at the default baud rate: within a frame, the firmware reads
    # each byte in under half the core cycles a byte lasts (at 1 instruction a cycle; the
    # M7 issues up to 2), so it does not overrun unless its CPI exceeds 2.
    cycles_per_byte = target_data(board)["clock_hz"] * 10 / DEFAULT_BAUD
    assert 0 < used["rx_gap_instructions"] < cycles_per_byte / 2, used


def test_monitor_emulated_watches_the_board(tmp_path, capsys):
    """`zocodegen monitor --emulated DIR`: the board project's firmware starts on its
    emulated board and the monitor shows its HELLO (target, model, sizes) and its log line."""
    from zocodegen.cli import main
    project = tmp_path / "fw"
    assert main(["build", str(FIXTURES / "digits_cnn.tflite"), "--target", "stm32h7b3",
                 "-o", str(project)]) == 0
    capsys.readouterr()
    assert main(["monitor", "--emulated", str(project), "--duration", "3"]) == 0
    out = capsys.readouterr().out
    assert "device: stm32h7b3, model sha256" in out, out
    assert "digits_cnn.tflite, arena 1608 B, inference only" in out, out


def test_a_missing_elf_or_card_is_one_line_not_a_traceback(tmp_path, capsys):
    """docs/emulated.md's `--report DIR/build/B/firmware.elf` before `make firmware` printed
    a traceback; it is bad input: one line and exit status 2."""
    from zocodegen.host.emulator.__main__ import main as emulator

    missing = tmp_path / "build" / "stm32f746" / "firmware.elf"
    assert emulator(["--board", "stm32f746", "--report", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"emulated stm32f746: firmware file {missing} does not exist", err
    card = tmp_path / "card.img"
    assert emulator(["--board", "stm32f746", "--card", str(card), str(missing)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"emulated stm32f746: card file {card} is not a file: give a copy of the image "
        "`zocodegen pack` wrote (the run writes to it)")
