"""Defaults on the frontier (issue 63): which queries per step, learning rate and run length
reach 65 % of the FP32 ceiling's gain in the fewest device hours, on the H7B3 (full training)
and the F746 (sparse), and what each ends on. Every run is `zocodegen simulate --target BOARD`
(the board's own build choices) on the scale task of docs/scale.md; its test accuracy at
each evaluation is put on the board's clock by host/device_time.py (what `zocodegen
device-time RUN` adds up), so a curve is test accuracy against device hours.

    .venv/bin/python benchmarks/frontier.py run --settings q5-lr0.1 --cells contrast --seeds 1
    .venv/bin/python benchmarks/frontier.py run --settings q5 --steps 3 --runs /tmp/f  # smoke
    .venv/bin/python benchmarks/frontier.py report [--write]  # every run: a table, the curves

Runs live in build/frontier/runs/BOARD-SETTING-CELL-SEED (the command in its .meta/cmd, the
printed log in .meta/log.txt); a finished run (its run.json has the result) is not run again.
A run stopped by hand (to spend the core on a better candidate) is reported with its curve
so far. The target is start + 0.65 (ceiling - start), the start being the run's own test accuracy
before training; "first reached" is at the first test evaluation at or above it (every
``EVAL_EVERY`` steps), so it is late by up to that many steps.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(HERE), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import scale_experiment as grid  # noqa: E402
from doc_sections import replace_section  # noqa: E402
from zocodegen.frontends import load_model  # noqa: E402
from zocodegen.host import device_time as dt  # noqa: E402
from zocodegen.training.config import TrainConfig  # noqa: E402
from zocodegen.training.metrics import read_metrics  # noqa: E402

RUNS = ROOT / "build" / "frontier"
DOC = ROOT / "docs" / "experiment.md"
#: the share of the FP32 ceiling's gain whose first crossing is timed (issue 63's acceptance)
TARGET_SHARE = 0.65
#: steps between test evaluations: the resolution of "first reached" (0.05 H7B3 hours at Q = 5)
EVAL_EVERY = 25
BOARDS = {"h7": "stm32h7b3", "f7": "stm32f746"}
#: a setting's name is its options, one token each, joined by "-": q20 (--queries 20),
#: lr0.03 / lrauto (--lr), s200 (--steps 200), e1 (--epochs 1), n4 (--batch 4), l0to5
#: (--layers 0-5), g50 (--guard-every 50), p10 (--patience 10), bp1 (--bp-layers 1), const
#: (--schedule constant),
#: sparse4b0 (--train sparse --blocks 4 --block 0), defaults (nothing); what a name leaves out
#: is the default
TOKENS = (("lr", "--lr"), ("q", "--queries"), ("s", "--steps"), ("e", "--epochs"),
          ("n", "--batch"), ("g", "--guard-every"), ("p", "--patience"), ("bp", "--bp-layers"))


def setting_options(setting: str) -> tuple[str, ...]:
    """The options a setting's name stands for (see TOKENS)."""
    options: list[str] = []
    for token in setting.split("-"):
        if token == "defaults":  # the command's defaults, nothing added
            continue
        if token == "const":
            options += ["--schedule", "constant"]
        elif token.startswith("sparse") and "b" in token[6:]:
            blocks, block = token[6:].split("b")
            options += ["--train", "sparse", "--blocks", blocks, "--block", block]
        elif token[:1] == "l" and token[1:2].isdigit() and "to" in token:
            options += ["--layers", token[1:].replace("to", "-")]
        else:
            flag = next((f for p, f in TOKENS if token.startswith(p)
                         and token[len(p):].replace(".", "").isalnum()), None)
            if flag is None:
                raise SystemExit(f"frontier.py: setting {setting!r}: unknown token {token!r}")
            options += [flag, token[len(next(p for p, f in TOKENS if f == flag)):]]
    return tuple(options)


def run_name(board: str, setting: str, cell: str, seed: int) -> str:
    return f"{board}-{setting}-{cell}-{seed}"


def shown(path: Path) -> str:
    """A path as a command line shows it: relative to the repository when it is inside."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def command(runs: Path, board: str, setting: str, cell: str, seed: int,
            steps: int | None) -> list[str]:
    """The run's `zocodegen simulate` command; ``steps`` replaces the setting's run length
    (a smoke run)."""
    options = list(setting_options(setting))
    if steps is not None:
        for flag in ("--epochs", "--steps"):
            if flag in options:
                del options[options.index(flag):options.index(flag) + 2]
        options += ["--steps", str(steps)]
    out = runs / "runs" / run_name(board, setting, cell, seed)
    return ["zocodegen", "simulate", shown(grid.MODEL), "--data",
            shown(grid.data_path(runs, cell)), "-o", shown(out), "--force", "--seed",
            str(seed), "--target", BOARDS[board], "--eval-every", str(EVAL_EVERY), *options]


def finished(run: Path) -> bool:
    facts = run / "run.json"
    return facts.is_file() and "accuracy_after" in json.loads(facts.read_text())


def execute(runs: Path, board: str, setting: str, cell: str, seed: int,
            steps: int | None) -> None:
    run = runs / "runs" / run_name(board, setting, cell, seed)
    if finished(run):
        return
    cmd = command(runs, board, setting, cell, seed, steps)
    meta = run.with_name(run.name + ".meta")
    meta.mkdir(parents=True, exist_ok=True)
    (meta / "cmd").write_text(" ".join(cmd) + "\n")
    start = time.perf_counter()
    with (meta / "log.txt").open("w") as log:
        code = subprocess.run([sys.executable, "-m", *cmd], cwd=ROOT, stdout=log,
                              stderr=subprocess.STDOUT).returncode
        log.write(f"exit {code} wall {time.perf_counter() - start:.0f} s\n")
    if code != 0:
        raise SystemExit(f"{shown(run)}: exit {code}, see {shown(meta / 'log.txt')}")


# ------------------------------------------------------------------------- device time
def costs(record: dict, board: str, cache: dict) -> dt.Costs:
    """The run's step, inference and link costs on ``board`` (as `device-time` measures
    them), each measured once under QEMU and kept in ``cache``."""
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    config = TrainConfig(**{k: tuple(v) if isinstance(v, list) else v
                            for k, v in record["config"].items() if k in fields})
    sparse = config.mode == "sparse"
    measured = dataclasses.replace(config, lr_auto=False, guard=False, steps=1,
                                   block=(config.block or 0) if sparse else None)
    model = ROOT / record["model"]

    def step(cfg: TrainConfig) -> float:
        key = f"{board}:{json.dumps(dataclasses.asdict(cfg), sort_keys=True)}"
        if key not in cache:
            cache[key] = dt.step_seconds(model, board, cfg)
        return cache[key]
    blocks = tuple(step(dataclasses.replace(measured, block=b))
                   for b in range(config.blocks)) if sparse else ()
    chosen = step(dataclasses.replace(measured, block=record["block"])) if sparse \
        else step(measured)
    if f"forward:{board}" not in cache:
        x = load_model(model).tensor(load_model(model).inputs[0])
        images = np.random.default_rng(1).integers(-128, 128, size=(3,) + tuple(x.shape[1:]))
        cache[f"forward:{board}"] = dt.forward_seconds(model, board, images.astype(np.int8))
    return dt.Costs(chosen, cache[f"forward:{board}"],
                    dt.link_seconds_per_record(load_model(model)), blocks)


@dataclasses.dataclass(frozen=True)
class Outcome:
    name: str
    board: str
    setting: str
    cell: str
    seed: int
    eta: float
    steps: int
    start: float
    final: float | None  # None: stopped before its end (its curve so far)
    last_step: int  # the last evaluated step
    ceiling: float | None  # None: a control (clean data), which has no ceiling
    hours: float  # the whole run: compute + link
    to_target: float | None  # device hours to the first evaluation at the target
    curve: tuple[tuple[float, float], ...]  # (device hours, test accuracy)

    @property
    def capture(self) -> float | None:
        if self.final is None or self.ceiling is None:
            return None
        return (self.final - self.start) / (self.ceiling - self.start)


def outcome(run: Path, cache: dict, ceilings: dict, on: str | None = None) -> Outcome:
    """A run's table row and curve; ``on``: another board's clock for the same run (when
    that board trains the identical run, e.g. both boards fit --layers first fully)."""
    board, rest = run.name.split("-", 1)
    board = on or board
    setting, cell, seed = rest.rsplit("-", 2)
    record = json.loads((run / "run.json").read_text())
    shape = dt.recorded_shape(record)
    cost = costs(record, BOARDS[board], cache)
    rows = [r for r in read_metrics(run / "metrics.csv") if r.accuracy is not None]
    curve = tuple((sum(dt.seconds_at(r.step, shape, cost)) / 3600, r.accuracy) for r in rows)
    start, ceiling = rows[0].accuracy, ceilings.get(cell)  # none: a control, no ceiling
    to_target = None if ceiling is None else next(
        (h for h, a in curve if a >= start + TARGET_SHARE * (ceiling - start) - 1e-9), None)
    return Outcome(f"{board}-{rest}", board, setting, cell, int(seed), record["lr"],
                   record["config"]["steps"], start, record.get("accuracy_after"),
                   rows[-1].step, ceiling,
                   sum(dt.seconds_at(shape.steps, shape, cost)) / 3600, to_target, curve)


def report(outcomes: list[Outcome]) -> list[str]:
    """The table of every run, then each run's curve: device hours:test accuracy %."""
    lines = ["| board | setting | cell, seed | eta | steps | start | end | capture | "
             f"hours to {TARGET_SHARE:.0%} of the FP32 gain | whole run, hours |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for o in sorted(outcomes, key=lambda o: (o.board, o.setting, o.cell, o.seed)):
        reached = f"{o.to_target:.2f}" if o.to_target is not None else "not reached"
        end = (f"{100 * o.final:.1f}" if o.final is not None
               else f"stopped at step {o.last_step}")
        share = f"{100 * o.capture:.0f} %" if o.capture is not None else "-"
        lines.append(f"| {BOARDS[o.board]} | {o.setting} | {o.cell} {o.seed} | {o.eta:g} | "
                     f"{o.steps} | {100 * o.start:.1f} | {end} | {share} | {reached} | "
                     f"{o.hours:.2f} |")
    lines += ["", *summary(outcomes)]
    lines += ["", "The curves (device hours: test accuracy %, at each test evaluation):", ""]
    lines += [f"- {o.name}: " + ", ".join(f"{h:.2f}: {100 * a:.1f}" for h, a in o.curve)
              for o in sorted(outcomes, key=lambda o: (o.board, o.setting, o.cell, o.seed))]
    return lines


def summary(outcomes: list[Outcome]) -> list[str]:
    """Per board and setting, the acceptance's figures over the finished runs: the latest
    first crossing of 65 %, the longest whole run, the mean capture and the worst end."""
    lines = []
    groups: dict[tuple[str, str], list[Outcome]] = {}
    for o in outcomes:
        if o.final is not None:
            groups.setdefault((o.board, o.setting), []).append(o)
    for (board, setting), group in sorted(groups.items()):
        with_ceiling = [o for o in group if o.ceiling is not None]
        reached = [o.to_target for o in with_ceiling if o.to_target is not None]
        captures = [o.capture for o in with_ceiling]
        worst = min(o.final - o.start for o in group)
        lines.append(
            f"- {BOARDS[board]} {setting}: {len(group)} finished run(s); 65 % of the FP32 gain "
            f"reached in {len(reached)} of {len(with_ceiling)}"
            + (f", at the latest after {max(reached):.2f} h" if reached else "")
            + f"; whole runs at most {max(o.hours for o in group):.2f} h"
            + (f"; mean capture {100 * sum(captures) / len(captures):.0f} %" if captures else "")
            + f"; worst end {100 * worst:+.1f} points from its start")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    run = sub.add_parser("run", help="run settings x cells x seeds one after another, then "
                         "report every run")
    run.add_argument("--boards", default="h7", help=f"comma-separated: {', '.join(BOARDS)}")
    run.add_argument("--settings", required=True, help="comma-separated setting names (see TOKENS)")
    run.add_argument("--cells", default="contrast")
    run.add_argument("--seeds", default="1")
    run.add_argument("--steps", type=int, help="every run this many steps (a smoke test)")
    rep = sub.add_parser("report", help="a table of every run and its curve")
    rep.add_argument("--settings", type=lambda text: text.split(","),
                     help="only these settings' runs")
    rep.add_argument("--section", default="frontier",
                     help="write between <!-- SECTION:begin --> and <!-- SECTION:end -->")
    rep.add_argument("--also-on", type=lambda text: text.split(","), metavar="BOARDS",
                     help="every run also on these boards' clocks, where no run of theirs "
                          "exists (for runs both boards train identically)")
    rep.add_argument("--write", action="store_true",
                     help=f"put the table and the curves into {shown(DOC)}")
    for command_parser in (run, rep):
        command_parser.add_argument("--runs", type=Path, default=RUNS,
                                    help=f"where the runs are kept (default {shown(RUNS)})")
    args = parser.parse_args(argv)
    if args.what == "run":
        for board in args.boards.split(","):
            for cell in args.cells.split(","):
                for seed in map(int, args.seeds.split(",")):
                    for setting in args.settings.split(","):
                        execute(args.runs, board, setting, cell, seed, args.steps)
    cache_path = args.runs / "device_time.json"
    cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    ceilings = json.loads(grid.CEILINGS.read_text())
    runs = sorted(p for p in (args.runs / "runs").iterdir() if (p / "run.json").is_file()
                  and (not getattr(args, "settings", None) or args.what == "run"
                       or p.name.split("-", 1)[1].rsplit("-", 2)[0] in args.settings))
    outcomes = [outcome(p, cache, ceilings) for p in runs]
    for board in getattr(args, "also_on", None) or ():
        have = {o.name for o in outcomes}
        outcomes += [outcome(p, cache, ceilings, board) for p in runs
                     if p.name.split("-", 1)[0] != board
                     and f"{board}-{p.name.split('-', 1)[1]}" not in have]
    cache_path.write_text(json.dumps(cache, indent=1) + "\n")
    lines = report(outcomes)
    print("\n".join(lines))
    if getattr(args, "write", False):
        replace_section(DOC, f"<!-- {args.section}:begin -->", f"<!-- {args.section}:end -->",
                        "\n".join(["", *lines, ""]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
