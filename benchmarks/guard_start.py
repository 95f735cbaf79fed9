"""An A/B of the guard's keep-the-start rule (issue 48, not a test): `zocodegen simulate` with
``training/guard.new_best`` replaced while the best is still the start, for evidence before the
default changes. Only the simulator is changed: evidence, not a product.

    .venv/bin/python benchmarks/guard_start.py --rule loss -- MODEL --data D.npz -o RUN ...

Rules (what a check must do to replace the start as the run's best; later bests are as now):
  margin  more than fall_margin more correct records (the rule of stop 52)
  none    more correct, or as many with a lower loss sum (the rule before it)
  loss    more correct records AND a lower validation loss sum than the start
  half    more than fall_margin // 2 more correct AND a lower loss sum (guard.new_best now)
benchmarks/guard_start_replay.py reads every rule off traced runs with the same definitions.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zocodegen import cli  # noqa: E402
from zocodegen.training import guard, simulator  # noqa: E402


#: The start rules this script and guard_start_replay.py know.
RULES = ("margin", "none", "loss", "half")


def start_rule(name: str):
    """new_best with the start's rule ``name`` (``half``: the product's own)."""
    def rule(score: guard.Score, state: guard.GuardState, records: int) -> bool:
        best = state.best
        if state.best_step != 0 or name == "half":
            return guard.new_best(score, state, records)
        if name == "margin":
            return score.correct > best.correct + guard.fall_margin(best.correct, records)
        if name == "none":
            return score.better_than(best)
        return score.correct > best.correct and score.loss < best.loss
    return rule


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rule", choices=RULES, required=True)
    parser.add_argument("simulate", nargs=argparse.REMAINDER,
                        help="-- then the arguments of `zocodegen simulate`")
    args = parser.parse_args()
    rest = args.simulate[1:] if args.simulate[:1] == ["--"] else args.simulate
    simulator.new_best = start_rule(args.rule)
    return cli.main(["simulate", *rest[1:]] if rest[:1] == ["simulate"] else ["simulate", *rest])


if __name__ == "__main__":
    sys.exit(main())
