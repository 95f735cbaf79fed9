"""The ``zocodegen`` command line's options (DESIGN.md section 8): the parser of every
command and the one rule for numbers, kept apart from what the commands do (``cli.py``).
A usage error is one line on stderr and exit 2; ``handler`` names the command to run."""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from .version import __version__
from .errors import UserError
from .frontends import model_format
from .codegen.project import BUILD_TARGETS
from .codegen.project import DATA_MODES, INPUT_QUANTIZE_MODES, PATCH_MODES
from .formats.link import DEFAULT_BAUD
from .host.device_time import GAIN_SHARES
from .limits import BAUD_RANGE, TRAIN_INTEGERS
from .training.folders import NORMALIZE, RESIZE_MODES
from .codegen.training_regions import RECOMPUTE_MODES
from .target import DEFAULT_TARGET, TARGET_NAMES
from .training.config import (COMMAND_LINE_QUERIES, ESTIMATOR_FALLBACK, ESTIMATORS,
                              MODE_AUTO, MODES, SCHEDULES, SCALES_BY_DEFAULT, scales_apply,
                              TrainConfig, parse_blocks, parse_bp_layers, parse_duration,
                              parse_layer_list)
from .training.data import (DEFAULT_CHECKPOINT_BYTES, DEFAULT_HELD_OUT_FRACTION,
                            DEFAULT_VAL_FRACTION, MIN_HELD_OUT)
from .training.estimators import REGISTRY
from .training.perturbation import DISTRIBUTIONS
from .training.plan import FIRST_LAYERS_FORWARDS

ENGINES = ("reference", "native", "qemu", "emulated")
#: `fleet serve`'s devices per round by default (`fleet local` starts one per image)
MIN_DEVICES = 3


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's contract: a usage error is one line on stderr and exit 2 (the
    usage block stays in --help)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"zocodegen: error: {self.prog}: {message} (see {self.prog} --help)\n")


def _integer(minimum: int, maximum: int | None = None):
    """An argparse type: an integer in [minimum, maximum], one shared rule for every option."""
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expects an integer, got '{text}'") from None
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"in {minimum}..{maximum}" if maximum is not None else f"at least {minimum}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value
    return convert


def _real(minimum: float, maximum: float | None = None, open_minimum: bool = False):
    """An argparse type: a finite number above (or from) minimum, up to maximum."""
    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expects a number, got '{text}'") from None
        low_ok = value > minimum if open_minimum else value >= minimum
        if not (np.isfinite(value) and low_ok and (maximum is None or value <= maximum)):
            low = f"{'above' if open_minimum else 'at least'} {minimum:g}"
            high = "" if maximum is None else f" and at most {maximum:g}"
            raise argparse.ArgumentTypeError(f"must be a finite number {low}{high}, got {text}")
        return value
    return convert


def path(text: str) -> Path:
    """An argparse type: a file or folder name; '' is refused (Path('') is '.', the working
    folder, which no one means by an empty name)."""
    if not text:
        raise argparse.ArgumentTypeError("expects a file or folder name, got ''")
    return Path(text)


def _shares(text: str) -> tuple[float, ...]:
    """'50,80,90' -> (0.5, 0.8, 0.9): shares of a gain, each above 0 and at most 100 %."""
    share = _real(0.0, 100.0, open_minimum=True)
    try:
        return tuple(share(part) / 100 for part in text.split(","))
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"expects percentages like 50,80,90: {exc}") from None


_SECONDS = _real(0.0, open_minimum=True)
_SEED = _integer(*TRAIN_INTEGERS["seed"])
#: Every training option's default, from the one definition of a run (training/config.py)
_RUN = TrainConfig()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="zocodegen",
        description="Turn an INT8 TFLite/ONNX model into Cortex-M7 firmware that runs and "
                    "trains it without back-propagation.")
    parser.add_argument("--version", action="version", version=f"zocodegen {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_Parser)

    p = sub.add_parser("inspect", help="per-layer shapes, quantization, parameters, MACs")
    p.add_argument("model", type=path, metavar="MODEL")
    p.add_argument("--target", choices=TARGET_NAMES,
                   help="first answer whether it trains on this board: inference, full and "
                        "sparse training against its SRAM and flash, the mode --train auto "
                        "picks, and estimated device seconds per step and epoch")
    p.add_argument("--layers", metavar="LIST|first|all",
                   help="with --target: the answer for these trainable layers (as build and "
                        "simulate take them; default first)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler="inspect")

    p = sub.add_parser("infer", help="run the model on a batch of inputs, or classify photos")
    p.add_argument("model", type=path, metavar="MODEL")
    p.add_argument("--input", type=path, required=True, metavar="X.npy|PHOTO|FOLDER",
                   help="inputs with a leading batch axis (.npz keyed by input name when "
                        "the model has several inputs); or an image file, or a folder of "
                        "them, made into inputs exactly as `pack` makes them and printed "
                        "with their class names")
    p.add_argument("--output", type=path, metavar="Y.npy",
                   help="where to write outputs: .npy for one output, .npz keyed by output "
                        "name (required for X.npy/.npz inputs, and .npz when the model has "
                        "several outputs)")
    p.add_argument("--data", type=path, metavar="IMAGE",
                   help="photos: take the class names and preprocessing from this image "
                        "`pack` made (default: MODEL.labels.json, which `export` writes; "
                        "else pack's defaults and output numbers)")
    p.add_argument("--preprocess", metavar="MODULE:FUNCTION",
                   help="photos: make each file's input with the hook `pack --preprocess` "
                        "made the model's data with (audio features, sensor files)")
    p.add_argument("--engine", choices=ENGINES, default="reference",
                   help="reference: the bit-exact numpy golden model; native: the generated C "
                        "built with the host compiler; qemu: the generated C on QEMU's "
                        "Cortex-M (mps2-an500); emulated: the --target board's own firmware "
                        "ELF on its emulated board (docs/emulated.md). Builds are cached by "
                        "content hash")
    p.add_argument("--target", choices=TARGET_NAMES, default=DEFAULT_TARGET,
                   help="the board whose memory budget native/qemu builds stand for, and the "
                        f"board --engine emulated runs (default {DEFAULT_TARGET})")
    _add_memory_options(p)
    _add_force(p, "replace an --output that is not a .npy/.npz of the model's outputs")
    p.set_defaults(handler="infer")

    p = sub.add_parser("build", help="generate the firmware project (C sources, Makefile, "
                                     "PlatformIO project, memory report)")
    p.add_argument("model", type=path, metavar="MODEL")
    p.add_argument("--target", choices=BUILD_TARGETS, required=True,
                   help="native (host gcc), qemu (mps2-an500), or a board")
    p.add_argument("-o", "--output", type=path, metavar="DIR",
                   help="project directory (default: <model name>_<target>)")
    p.add_argument("--force", action="store_true",
                   help="build into a DIR that is not a project zocodegen built, or replace "
                        "generated files changed since (files of other names are kept)")
    p.add_argument("--emulate", choices=TARGET_NAMES,
                   help="for native/qemu: the board whose SRAM budget applies (default "
                        f"{DEFAULT_TARGET}); a board --target is its own")
    p.add_argument("--as-library", action="store_true",
                   help="a board: the model (and training engine) as sources and one header, "
                        "include/zo_library.h, for your own firmware (no main, startup or "
                        "clocks), plus example/ that links it (docs/firmware.md)")
    p.add_argument("--train", choices=("none", *MODES, MODE_AUTO), default="none",
                   help="also generate the on-device zeroth-order training engine: full "
                        "(every selected layer), sparse (one block of them), or auto (full "
                        "when it fits the board, else sparse); none (default): inference "
                        "only")
    p.add_argument("--data-source", choices=DATA_MODES, default="link",
                   help="where a training firmware's image lives: link (default), served by "
                        "`zocodegen train` over the serial line; sdcard, a field trainer that "
                        "reads it from the board's own card and trains to the end with no "
                        "host, keeping its checkpoints there (docs/sdcard.md)")
    p.add_argument("--recompute", choices=RECOMPUTE_MODES, default="auto",
                   help="training: let WP layers restart their queries from an earlier "
                        "layer's saved activations, recomputing the layers between, instead "
                        "of saving their own (docs/memory.md): auto when that costs under "
                        "1 %% of a step's MACs or the build does not fit otherwise "
                        "(default), on for the least SRAM, off")
    _add_memory_options(p)
    _add_baud(p, "the host link's baud rate on the board's ST-LINK VCP (native and QEMU "
                 "have no baud rate)")
    _add_train_options(p)
    p.set_defaults(handler="build")

    p = sub.add_parser("simulate", help="zeroth-order training in the bit-exact numpy "
                                        "simulator (what the device computes)")
    p.add_argument("model", type=path, metavar="MODEL")
    p.add_argument("--data", type=path, required=True, metavar="DATA.npz|IMAGE",
                   help="x (N, *input shape) in the input dtype, y (N,) labels; optional "
                        "x_test/y_test for accuracy; without x_val/y_val, the val split "
                        "`pack` sets aside by default is taken out of x; or the image `pack` "
                        "made of them (the device's samples in the device's order)")
    p.add_argument("-o", "--output", type=path, default=Path("run"), metavar="RUN",
                   help="run directory: checkpoint.bin, metrics.csv, curves.png (default run)")
    p.add_argument("--target", choices=TARGET_NAMES,
                   help="the board: train exactly the run `build --target T --train MODE` "
                        "puts on it (its fit search picks the mode, blocks and every auto "
                        "choice; refused when nothing fits); default: no board's budget")
    p.add_argument("--train", choices=(*MODES, MODE_AUTO), default=MODE_AUTO,
                   help="full, sparse (one block of the selected layers), or auto "
                        "(default): full when it fits the --target board, else sparse; "
                        "full without --target")
    p.add_argument("--mode", help=argparse.SUPPRESS)  # the old spelling, refused by name
    _add_train_options(p)
    p.add_argument("--eval-every", type=_integer(1), metavar="K",
                   help="test accuracy every K steps (default: 20 times per run)")
    p.add_argument("--resume", action="store_true",
                   help="continue from RUN/checkpoint.bin (the model, data and options must "
                        "be the run's, as RUN/run.json records them)")
    p.add_argument("--force", action="store_true",
                   help="start anew in a RUN that holds a run, deleting its files")
    p.set_defaults(handler="simulate")

    p = sub.add_parser("pack", help="write DATA.npz or a folder of files as the data image "
                                    "the device trains from (SD-card-style, docs/image.md)")
    p.add_argument("data", type=path, metavar="DATA.npz|FOLDER",
                   help="arrays already in the model's input quantization, or a folder: "
                        "FOLDER/<class>/<file>, FOLDER/{train,val,test}/<class>/<file>, or "
                        "any files named by --labels (docs/your-model.md)")
    p.add_argument("-o", "--output", type=path, required=True, metavar="IMAGE")
    p.add_argument("--model", type=path, metavar="MODEL",
                   help="required for a FOLDER (the model says the input's shape, colour "
                        "and quantization); optional for DATA.npz: check the data against "
                        "MODEL, record its sha256 and input quantization, and size the "
                        "checkpoint area for its full training, link or field (docs/image.md)")
    p.add_argument("--shuffle", type=_SEED, metavar="SEED",
                   help="permute the train split with numpy's default_rng(SEED) (default: "
                        "the order of DATA.npz; a folder's, grouped by class, with seed 0; "
                        "val/test always keep theirs)")
    p.add_argument("--checkpoint-kb", type=_integer(0), metavar="K",
                   help="checkpoint area of K KiB (default: full training of MODEL, without "
                        f"--model {DEFAULT_CHECKPOINT_BYTES // 1024} KiB)")
    p.add_argument("--val-fraction", type=_real(0.0), default=DEFAULT_VAL_FRACTION, metavar="F",
                   help="without x_val in DATA.npz: set aside this share of each class's "
                        "train records as the val split, chosen with a fixed seed as "
                        f"simulate does (default {DEFAULT_VAL_FRACTION}; 0: none)")
    p.add_argument("--held-out-fraction", type=_real(0.0), metavar="F",
                   help="hold this share of each class's train records out for the training "
                        "guard's end confirmation, which alone measures them (raised to "
                        f"{MIN_HELD_OUT} records while half the records stay to train on; "
                        f"default: {DEFAULT_HELD_OUT_FRACTION} for a folder without test/, "
                        "else 0; 0: none)")
    g = p.add_argument_group("a folder of files (with --model)")
    g.add_argument("--labels", type=path, metavar="FILE",
                   help="a CSV (file,label rows) or JSON ({\"file\": label}) naming the files "
                        "under FOLDER; a label is a class index or name")
    g.add_argument("--classes", metavar="NAME,NAME,...",
                   help="the class names in the order of the model's outputs (default: "
                        "alphabetical); a pre-trained model's own order, so that class "
                        "folder k is output k")
    g.add_argument("--normalize", choices=("auto", *NORMALIZE), default="auto",
                   help="the float range the model was trained on, from 8-bit pixels: 0..1, "
                        "-1..1 (written --normalize=-1..1), 0..255, or imagenet mean/std; auto "
                        "(default): the one nearest the range the model's input quantization "
                        "covers")
    g.add_argument("--resize", choices=RESIZE_MODES, default="crop",
                   help="crop (default): the centre region of the model's aspect ratio, then "
                        "resized; stretch: resized as it is")
    g.add_argument("--preprocess", metavar="MODULE:FUNCTION",
                   help="make each file's float input with your function (path -> array of "
                        "the model's input shape), e.g. audio features; also file.py:function")
    _add_force(p, "replace an -o IMAGE that is not a data image, or a card copy holding a "
                  "field run (read it first: `zocodegen card read`)")
    p.set_defaults(handler="pack")

    p = sub.add_parser("train", help="train on a device (a board, or firmware the host "
                                     "starts) from a packed image, with a live monitor")
    _add_device_options(p)
    p.add_argument("-o", "--output", type=path, default=Path("run"), metavar="RUN",
                   help="run directory: checkpoint.bin, metrics.csv, curves.png; an existing "
                        "run is resumed from its checkpoint (default run)")
    p.add_argument("--steps", type=_integer(1), metavar="T",
                   help="train until step T (default: the T the firmware was built with)")
    p.add_argument("--checkpoint-every", type=_integer(1), metavar="K",
                   help="pull a checkpoint and measure accuracy every K steps (default T/10)")
    p.add_argument("--timeout", type=_real(1.0), default=60.0, metavar="S",
                   help="give up when the device sends nothing for S seconds (at least 1: "
                        "one step of a board can take that long; default 60)")
    p.add_argument("--force", action="store_true",
                   help="start anew: delete the run already in RUN (it is resumed otherwise)")
    p.add_argument("--model", type=path, metavar="MODEL",
                   help="the firmware's model file: at each test evaluation the host predicts "
                        "the test split from the pulled checkpoint (checked against the "
                        "device's count) and shows the confusion matrix with class names")
    p.set_defaults(handler="train")

    p = sub.add_parser("monitor", help="watch a device's identity, telemetry and logs")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", metavar="URL", help="the board's serial port (any pyserial URL)")
    where.add_argument("--emulated", type=path, metavar="DIR",
                       help="start board project DIR's firmware on its emulated board and "
                            "watch it (docs/emulated.md)")
    p.add_argument("--duration", type=_SECONDS, metavar="S", help="stop after S seconds")
    _add_baud(p)
    p.set_defaults(handler="monitor")

    p = sub.add_parser("export", help="write trained parameters into a copy of the model")
    p.add_argument("model", type=path, metavar="MODEL")
    p.add_argument("checkpoint", type=path, metavar="CHECKPOINT")
    p.add_argument("-o", "--output", type=path, required=True, metavar="OUT.tflite|OUT.onnx")
    _add_force(p, "replace an OUT that is not a model of MODEL's format, or an "
                  "OUT.labels.json that is not one export wrote")
    p.set_defaults(handler="export")

    p = sub.add_parser("replay", help="rebuild a --record-scalars run's parameters from the "
                       "model, the build's options and the device's query sums")
    p.add_argument("model", type=path, metavar="MODEL")
    p.add_argument("--build", type=path, required=True, metavar="DIR",
                   help="the project `zocodegen build --record-scalars` wrote")
    p.add_argument("--scalars", type=path, required=True, metavar="RUN/scalars.bin")
    p.add_argument("-o", "--output", type=path, required=True, metavar="CHECKPOINT")
    p.add_argument("--check", type=path, metavar="CHECKPOINT",
                   help="the device's checkpoint: replay as many steps and compare bytes")
    _add_force(p, "replace an -o CHECKPOINT that is not a checkpoint")
    p.set_defaults(handler="replay")

    p = sub.add_parser("device-time", help="how long a simulated run takes on a board: its "
                       "steps, trials and checks at the instructions measured under QEMU "
                       "-icount, plus the link's time for its records")
    p.add_argument("run", type=path, metavar="RUN",
                   help="the folder `zocodegen simulate -o RUN` wrote")
    p.add_argument("--target", choices=TARGET_NAMES,
                   help="the board, at its clock (default: the one `simulate --target` "
                        "trained the run for)")
    _add_baud(p, "the link's baud rate")
    p.add_argument("--ceiling", type=_real(0.0, 100.0, open_minimum=True), metavar="PCT",
                   help="an accuracy in percent on the run's accuracy split (the FP32 "
                        "ceiling, or a target): also report the device hours to the shares of "
                        "the gain from the start to it, and mark them in curves.png")
    p.add_argument("--shares", type=_shares, default=GAIN_SHARES, metavar="P,P,...",
                   help="the shares of a gain, in percent, whose first crossing is reported "
                        f"(default {','.join(f'{100 * s:g}' for s in GAIN_SHARES)})")
    p.set_defaults(handler="device_time")

    p = sub.add_parser("flash", help=f"upload a {'/'.join(TARGET_NAMES)} project to its board "
                                     "through the ST-LINK (PlatformIO's pio run -t upload)")
    p.add_argument("project", type=path, metavar="DIR",
                   help=f"the project directory `build --target {'|'.join(TARGET_NAMES)}` wrote")
    p.add_argument("--port", "--upload-port", dest="port", metavar="PORT",
                   help="PlatformIO's --upload-port (default: PlatformIO finds the probe)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="pio run -v: show every command PlatformIO runs")
    p.set_defaults(handler="flash")

    _add_fleet_parser(sub)
    _add_card_parser(sub)
    return parser


def _add_force(p: argparse.ArgumentParser, what: str) -> None:
    """--force of a command whose output replaces only its own earlier output of the same
    kind (files.check_output)."""
    p.add_argument("--force", action="store_true", help=what)


def _add_card_parser(sub) -> None:
    card = sub.add_parser("card", help="put a packed image on a card for a `build "
                                       "--data-source sdcard` board, or read its field run back "
                                       "(docs/sdcard.md)").add_subparsers(
        dest="card_command", required=True, metavar="ACTION", parser_class=_Parser)
    p = card.add_parser("write", help="write IMAGE to a card (a whole removable disk nothing "
                                      "has mounted, after showing what it holds) or a file")
    p.add_argument("image", type=path, metavar="IMAGE")
    p.add_argument("target", type=path, metavar="DEVICE|FILE",
                   help="the card's disk (/dev/sdX, /dev/mmcblkN) or a file")
    p.add_argument("--yes", action="store_true",
                   help="write without asking (what the card holds is still shown)")
    _add_force(p, "replace a FILE that is not a data image, or a card copy holding a field "
                  "run (read it first: `zocodegen card read`)")
    p.set_defaults(handler="card_write")
    p = card.add_parser("read", help="read a card's field run into RUN as `train` writes it: "
                                     "checkpoint.bin, best.bin, metrics.csv, run.json")
    p.add_argument("source", type=path, metavar="DEVICE|FILE")
    p.add_argument("-o", "--output", type=path, required=True, metavar="RUN")
    p.add_argument("--force", action="store_true",
                   help="read into a RUN that holds files, replacing the whole folder")
    p.set_defaults(handler="card_read")


def _add_device_options(p: argparse.ArgumentParser, emulated: bool = True) -> None:
    """Where the device is (train, fleet join) and its data image."""
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", metavar="URL",
                       help="the board's serial port (/dev/ttyACM0, socket://HOST:PORT, any "
                            "pyserial URL)")
    where.add_argument("--native", type=path, metavar="DIR",
                       help="start the native firmware of project DIR (built if needed)")
    where.add_argument("--qemu", type=path, metavar="DIR",
                       help="start the QEMU firmware of project DIR (built if needed)")
    if emulated:  # (a fleet's SuperNode starts native or QEMU firmware only)
        where.add_argument("--emulated", type=path, metavar="DIR",
                           help="start board project DIR's firmware (make firmware) on its "
                                "emulated board (docs/emulated.md)")
    p.add_argument("--image", type=path, required=True, metavar="IMAGE",
                   help="the data image made by `zocodegen pack` (never modified)")
    _add_baud(p)


def _add_baud(p: argparse.ArgumentParser,
              what: str = "the board's baud rate: the one its firmware was built with "
                          "(--port, --emulated)") -> None:
    p.add_argument("--baud", type=_integer(*BAUD_RANGE), default=DEFAULT_BAUD, metavar="BAUD",
                   help=f"{what} (default {DEFAULT_BAUD}; docs/link.md \"Baud rate\")")


def _add_fleet_parser(sub) -> None:
    fleet = sub.add_parser("fleet", help="train one model on many devices with Flower: "
                           "devices upload seeds' scalars, the server replays and averages "
                           "(docs/fleet.md)").add_subparsers(dest="fleet_command",
                                                             required=True)

    def server_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("model", type=path, metavar="MODEL")
        p.add_argument("--build", type=path, required=True, metavar="DIR",
                       help="the training project every device runs (`zocodegen build "
                            "--train ... --no-guard --lr ETA`, --record-scalars to upload "
                            "scalars)")
        p.add_argument("-o", "--output", type=path, default=Path("fleet"), metavar="OUT",
                       help="fleet.json, model.bin (the averaged model), flower/ (logs); an "
                            "existing run is resumed from its last round (default fleet)")
        p.add_argument("--rounds", type=_integer(1), default=5, metavar="R")
        p.add_argument("--steps-per-round", type=_integer(1), default=20, metavar="K",
                       help="local steps of each device per round (default 20)")
        p.add_argument("--min-devices", type=_integer(1), metavar="N",
                       help=f"start a round once N devices are connected (default "
                            f"{MIN_DEVICES}; fleet local: one per --images file, and at most "
                            "that many)")
        p.add_argument("--wait", type=_real(0.0), default=120.0, metavar="S",
                       help="...or after S seconds with the devices there are (default 120)")
        p.add_argument("--deadline", type=_SECONDS, default=600.0, metavar="S",
                       help="a device that has not answered S seconds into a round is left "
                            "out of it (default 600)")
        p.add_argument("--test", type=path, metavar="DATA.npz",
                       help="score the averaged model on this test split after every round")

    p = fleet.add_parser("serve", help="start a SuperLink and run the server; devices join "
                                       "with `zocodegen fleet join`")
    server_options(p)
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default all)")
    p.add_argument("--listen-port", type=_integer(1, 65535), default=8000, metavar="PORT",
                   help="the SuperLink's port (default 8000)")
    _add_fleet_trust(p, "TLS and enrolled devices only (default when --host is not "
                        "loopback)", "no TLS and anyone who reaches the port may join")
    p.add_argument("--devices", type=path, metavar="DIR",
                   help="the enrolled devices: a folder of their public keys (*.pub, each a "
                        "device's STATE/keys/device.pub); keys added while the fleet runs "
                        "are enrolled too")
    p.add_argument("--advertise", action="append", default=[], metavar="HOST",
                   help="a name or address devices reach this server by, for its TLS "
                        "certificate (repeatable; this machine's name and loopback are in)")
    p.set_defaults(handler="fleet_serve")

    p = fleet.add_parser("join", help="connect one device to a fleet server (a Flower "
                                      "SuperNode; runs until interrupted)")
    p.add_argument("--superlink", required=True, metavar="HOST:PORT",
                   help="the address `fleet serve` printed")
    _add_device_options(p, emulated=False)
    p.add_argument("--build", type=path, required=True, metavar="DIR",
                   help="the project the device runs (its manifest names the model)")
    p.add_argument("--state", type=path, default=Path("fleet-device"), metavar="DIR",
                   help="per-round runs, the last model received and this device's key pair "
                        "keys/device[.pub] (default fleet-device)")
    p.add_argument("--ca", type=path, metavar="FILE",
                   help="the fleet server's CA certificate (its OUT/keys/ca.crt): TLS")
    _add_fleet_trust(p, "TLS with --ca and this device's key (default when the server is "
                        "not on this machine)", "for a server started with --insecure")
    p.set_defaults(handler="fleet_join")

    p = fleet.add_parser("local", help="try a fleet on one machine: a server and one "
                                       "emulated device per image")
    server_options(p)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--native", type=path, metavar="DIR",
                       help="every device runs the native firmware of project DIR")
    where.add_argument("--qemu", type=path, metavar="DIR",
                       help="every device runs the QEMU firmware of project DIR")
    p.add_argument("--images", type=path, nargs="+", required=True, metavar="IMAGE",
                   help="one data image per device")
    p.add_argument("--secure", action="store_true",
                   help="TLS and enrolled devices, as a fleet beyond this machine runs "
                        "(keys in OUT/keys and OUT/device-K/keys)")
    p.set_defaults(handler="fleet_local")


def _add_fleet_trust(p: argparse.ArgumentParser, secure: str, insecure: str) -> None:
    trust = p.add_mutually_exclusive_group()
    trust.add_argument("--secure", action="store_true", help=secure)
    trust.add_argument("--insecure", action="store_true", help=insecure)


def _add_train_options(p: argparse.ArgumentParser) -> None:
    """The TRAIN options, the same names and defaults (TrainConfig's) on every command."""
    g = p.add_argument_group("training options (DESIGN.md section 4)")
    first = len(p._actions)
    g.add_argument("--steps", type=_integer(1, TRAIN_INTEGERS["steps"][1]), metavar="T",
                   help="optimisation steps; the cosine schedule decays over them (default: "
                        "one epoch of the training records, counted where the data is: the "
                        "simulator's, the device's image; the guard's stop may end it "
                        "earlier)")
    g.add_argument("--epochs", type=_integer(1), metavar="E",
                   help="simulate, instead of --steps: T = E passes over x")
    g.add_argument("--budget", metavar="DURATION",
                   help="device time on the board (e.g. 1h, 90min): the run's steps are as "
                        "many as fit, by the step `inspect` estimates with the trials and "
                        "checks (at most --steps); computed at build time, so the simulator "
                        "and the board stop at the same step")
    g.add_argument("--queries", type=_integer(*TRAIN_INTEGERS["queries"]),
                   default=COMMAND_LINE_QUERIES, metavar="Q",
                   help=f"perturbations per layer and step (default {COMMAND_LINE_QUERIES}, "
                        "the device's and the simulator's)")
    g.add_argument("--batch", type=_integer(*TRAIN_INTEGERS["batch"]), default=_RUN.batch,
                   metavar="N",
                   help="samples per step (gradient accumulation)")
    g.add_argument("--lr", default="auto", metavar="ETA|auto",
                   help="learning rate, or auto (default): short trials of 0.003, 0.01, "
                        "0.03 scored on the validation split pick it")
    g.add_argument("--no-guard", action="store_true",
                   help="no training guard (default on: validation checks keep the best "
                        "parameters; when two checks in a row fall below the best beyond "
                        "noise, roll back and halve eta until the next best)")
    g.add_argument("--guard-every", type=_integer(*TRAIN_INTEGERS["guard_every"]),
                   default=_RUN.guard_every, metavar="K",
                   help="steps between the guard's checks (default: about 2%% of the run's "
                        "forward passes)")
    g.add_argument("--guard-samples", type=_integer(*TRAIN_INTEGERS["guard_samples"]),
                   default=_RUN.guard_samples, metavar="V",
                   help=f"validation records per check (default {_RUN.guard_samples})")
    g.add_argument("--patience", type=_integer(*TRAIN_INTEGERS["patience"]),
                   default=_RUN.patience, metavar="C",
                   help="the guard ends the run after C checks in a row without a new best "
                        f"(default {_RUN.patience}; 0: never; docs/training.md)")
    g.add_argument("--schedule", choices=SCHEDULES, default=_RUN.schedule)
    g.add_argument("--seed", type=_SEED, default=_RUN.seed, metavar="S")
    g.add_argument("--estimator", choices=ESTIMATORS,
                   help=f"default {_RUN.estimator} ({ESTIMATOR_FALLBACK} when only that fits "
                        f"the board); " + "; ".join(
                       f"{name}: {REGISTRY[name].summary}" for name in ESTIMATORS))
    g.add_argument("--cutoff", type=_integer(0), metavar="I",
                   help="split: the trainable layer where block 2 starts (default: the last "
                        "trained layer, the paper's f_2)")
    g.add_argument("--inner-queries", type=_integer(1, 64), default=_RUN.inner_queries,
                   metavar="P_S",
                   help="split: block-2 perturbations per block-1 direction and side "
                        "(FedSPZO's P_s, default 2; P_2 = 2 Q P_s)")
    g.add_argument("--r-max", type=_integer(1, 127), default=_RUN.r_max, metavar="R",
                   help="int8: perturbations uniform on [-R, R] (default 7)")
    g.add_argument("--p-zero", default="schedule", metavar="P|schedule",
                   help="int8: share of zeros in a perturbation, or the paper's schedule "
                        "0.33, 0.5, 0.9 from 0, 20 %%, 50 %% of the run (default)")
    g.add_argument("--b-zo", type=_integer(1, 8), default=_RUN.b_zo, metavar="BITS",
                   help="int8: the ZO update rounded to BITS bits (its step size, default 1)")
    g.add_argument("--b-bp", type=_integer(1, 8), default=_RUN.b_bp, metavar="BITS",
                   help="int8 with --bp-layers: the BP update rounded to BITS bits (default 1)")
    g.add_argument("--perturbation", default=_RUN.perturbation,
                   metavar="xorshift|pool:N|rotating:n",
                   help="where perturbations come from (PeZO): a fresh XORShift32 draw per "
                        "value (default), a pool of N = 2^k - 1 values drawn at build time "
                        "and kept in flash, or n rotating 8-bit LFSRs")
    g.add_argument("--distribution", choices=DISTRIBUTIONS, default=_RUN.distribution,
                   help="perturbation values: +-1 (default), or uniform int8 values scaled "
                        "to a same-dimension Gaussian's norm (PeZO Eq. 3-5)")
    g.add_argument("--scales", action=argparse.BooleanOptionalAction, default=None,
                   help="the layers trained channel-wise (np-channel, channel) also train "
                        "their per-channel filter scales, in the same queries (docs/training"
                        ".md \"Channel scales\"; default: "
                        + ("on where the estimator has such layers, except in an ONNX model, "
                           "which export cannot write them into)" if SCALES_BY_DEFAULT
                           else "off)"))
    g.add_argument("--two-sided", action="store_true",
                   help="WP / NP queries evaluate theta + z and theta - z (P-RGE's inner "
                        "loop): two forwards per query")
    g.add_argument("--query-batch", type=_integer(1), default=_RUN.query_batch, metavar="B",
                   help="device: evaluate B query forwards together, layer by layer, so "
                        "each weight load serves B inputs (P-RGE's outer loop; B-wide "
                        "activations; default 1)")
    g.add_argument("--record-scalars", action="store_true",
                   help="build: the device sends each WP layer's query sums, from which "
                        "`zocodegen replay` rebuilds its parameters exactly (needs "
                        "--estimator wp, --no-guard and a fixed --lr)")
    g.add_argument("--max-step", type=_real(0.0, 127.0), default=_RUN.max_step, metavar="U",
                   help="update clipping: a step moves no weight by more than U LSB, the "
                        "layer's update scaled down as a whole (default 2; 0 turns it off)")
    g.add_argument("--no-scaling", action="store_true",
                   help="neither learning-rate scaling (both switches below)")
    g.add_argument("--no-gnorm-scaling", action="store_true",
                   help="no gradient-norm scaling NQ/(NQ+d-1) (paper Eq. 8, Fig. 7 ablation)")
    g.add_argument("--no-quant-scaling", action="store_true",
                   help="no quantization-aware scaling 1/s^2 (paper Eq. 8, Fig. 7 ablation)")
    g.add_argument("--bp-layers", default="0", metavar="C|auto",
                   help="train the model's last C trainable layers by exact "
                        "back-propagation, the rest by zeroth-order (ElasticZO's hybrid; "
                        "default 0). auto: the largest C whose buffers fit the board")
    g.add_argument("--layers", metavar="LIST|first|all", default="first",
                   help="trainable-layer indices, e.g. 0,2,5-7; all: every layer; first "
                        "(default): the leading layers whose queries cost at most "
                        f"{FIRST_LAYERS_FORWARDS:g} forwards a step each (every layer of a small "
                        "model; docs/decisions/first-layers.md)")
    g.add_argument("--blocks", metavar="N|auto",
                   help="sparse mode: number of blocks (default 4, or as auto when 4 do not "
                        "fit the board); auto: the fewest blocks whose build fits the board "
                        "(most layers trained at once)")
    g.add_argument("--block", metavar="K|auto", default="auto",
                   help="sparse mode: the block to train, or auto (default): a one-epoch "
                        "trial of each block, then the one with the lowest held-out loss")
    g.add_argument("--trial-samples", type=_integer(*TRAIN_INTEGERS["trial_samples"]),
                   default=_RUN.trial_samples, metavar="S",
                   help="sparse --block auto: train each trial on the first S training "
                        "samples (default 64)")
    g.add_argument("--trial-held-out", type=_integer(*TRAIN_INTEGERS["trial_held_out"]),
                   default=_RUN.trial_held_out, metavar="H",
                   help="sparse --block auto: score each trial on the last H training samples "
                        "(at most all but the first S; default 256); the lowest mean loss wins")
    # what `build --train none` refuses when set: options it would silently ignore
    p.set_defaults(train_option_defaults={a.dest: (a.option_strings[0], a.default)
                                          for a in p._actions[first:]})


def set_train_options(args: argparse.Namespace) -> list[str]:
    return [option for dest, (option, default) in args.train_option_defaults.items()
            if getattr(args, dest) != default]


def _number(text: str, keyword: str, convert, message: str):
    """An option that is a number or a keyword: None for the keyword."""
    if text == keyword:
        return None
    try:
        return convert(text)
    except ValueError:
        raise UserError(f"{message}, got '{text}'") from None


def train_config(args: argparse.Namespace) -> TrainConfig:
    """The run the options describe (``--train`` its mode), as build and simulate share it."""
    if getattr(args, "mode", None) is not None:
        raise UserError(f"--mode is now --train, as for build: --train {args.mode}")
    mode = args.train
    block = _number(args.block, "auto", int, "--block expects a block index or auto")
    for option, value, default in (("--block", args.block, "auto"),
                                   ("--blocks", args.blocks, None),
                                   ("--trial-samples", args.trial_samples, _RUN.trial_samples),
                                   ("--trial-held-out", args.trial_held_out,
                                    _RUN.trial_held_out)):
        if mode == "full" and value != default:  # auto: checked against the resolved run
            raise UserError(f"{option} chooses among sparse mode's blocks; add --train sparse "
                            f"or drop {option}")
    estimator = args.estimator or _RUN.estimator
    if args.lr != "auto" and not REGISTRY[estimator].has_learning_rate:
        raise UserError(f"--lr {args.lr}: --estimator {estimator} has no learning rate (its "
                        "update is --b-zo bits): drop --lr")
    layers = parse_layer_list(args.layers)
    if args.layers not in (None, "all") and not layers:
        raise UserError(f"--layers '{args.layers}' names no layer: give indices like "
                        "0,2,5-7, or drop --layers to train every layer")
    lr_auto = args.lr == "auto" and REGISTRY[estimator].has_learning_rate
    # on by default where it applies and `export` can write the scales back: not into ONNX
    scales = (scales_apply(estimator, args.distribution, args.query_batch) and SCALES_BY_DEFAULT
              and model_format(Path(args.model)) != "onnx"
              if args.scales is None else args.scales)
    p_zero = _number(args.p_zero, "schedule", float, "--p-zero expects a number or schedule")
    lr = _number(args.lr, "auto", float, "--lr expects a number or auto")
    lr = _RUN.lr if lr is None else lr
    budget = 0.0 if args.budget is None else parse_duration(args.budget)
    # --budget without --steps: the budget alone bounds the run (the build resolves T)
    steps = (args.steps if args.steps is not None else
             TRAIN_INTEGERS["steps"][1] if budget else _RUN.steps)
    return TrainConfig(steps=steps, queries=args.queries, batch=args.batch, lr=lr,
                       lr_auto=lr_auto, guard=not args.no_guard, guard_every=args.guard_every,
                       max_step=args.max_step,
                       guard_samples=args.guard_samples, patience=args.patience,
                       budget=budget,
                       schedule=args.schedule, seed=args.seed, estimator=estimator,
                       gnorm_scaling=not (args.no_scaling or args.no_gnorm_scaling),
                       quant_scaling=not (args.no_scaling or args.no_quant_scaling),
                       layers=layers,
                       bp_layers=parse_bp_layers(args.bp_layers),
                       r_max=args.r_max, p_zero=p_zero, b_zo=args.b_zo, b_bp=args.b_bp,
                       perturbation=args.perturbation, distribution=args.distribution,
                       two_sided=args.two_sided, scales=scales,
                       query_batch=args.query_batch, record_scalars=args.record_scalars, cutoff=args.cutoff,
                       inner_queries=args.inner_queries, mode=mode,
                       blocks=parse_blocks(args.blocks), block=block,
                       trial_samples=args.trial_samples, trial_held_out=args.trial_held_out)


def _add_memory_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--patches", choices=PATCH_MODES, default="auto",
                   help="patch-based inference of the first stage (MCUNetV2; docs/memory.md): "
                        "auto when the build would not fit the board otherwise (default), on "
                        "whenever it lowers the arena, off; inference builds only")
    p.add_argument("--input-quantize", choices=INPUT_QUANTIZE_MODES, default="auto",
                   help="host: the host runs the model's leading float32 -> int8 QUANTIZE "
                        "and the device takes the int8 input (a quarter of the bytes); "
                        "device: the device quantizes; auto (default): device, or host when "
                        "only that fits the board")
