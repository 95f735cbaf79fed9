"""An A/B of the training guard's fall test (not a test): `zocodegen simulate` with the fall
test of training/guard.py replaced, for evidence before any default changes.

    .venv/bin/python benchmarks/guard_margin.py --sigmas 2 -- MODEL --data D.npz -o RUN ...
    .venv/bin/python benchmarks/guard_margin.py --never -- MODEL --data D.npz -o RUN ...

``--sigmas K`` makes the count margin K standard deviations of a difference of two counts
(the default is 2); ``--never`` rolls nothing back,
so the run follows the trajectory of an unguarded run while the guard still measures it (and
still ends on the best validated parameters). Every check (step, correct, loss sum, records)
is written to RUN/guard_trace.jsonl, so other fall rules can be judged offline on it: a rule
that never fires on a trace would have left that run exactly as it is. Only the simulator is
changed, so such a run has no firmware twin: evidence, not a product.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zocodegen import cli  # noqa: E402
from zocodegen.training import guard, simulator  # noqa: E402


def traced_check(out: Path):
    """Guard.check, also appending each measured check to ``out``."""
    check = simulator.Guard.check

    def traced(self, graph, plan, params, done):
        params, score, event = check(self, graph, plan, params, done)
        if score is not None:
            with out.open("a") as f:
                f.write(json.dumps(dict(step=done, correct=score.correct, loss=score.loss,
                                        records=len(self.y_val), event=event)) + "\n")
        return params, score, event
    return traced


def traced_baseline(out: Path):
    """Guard.baseline, also writing the start's check (step 0) to ``out``."""
    baseline = simulator.Guard.baseline

    def traced(self, graph, plan, params):
        score = baseline(self, graph, plan, params)
        with out.open("a") as f:
            f.write(json.dumps(dict(step=0, correct=score.correct, loss=score.loss,
                                    records=len(self.y_val), event="")) + "\n")
        return score
    return traced


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    rule = parser.add_mutually_exclusive_group(required=True)
    rule.add_argument("--sigmas", type=float,
                      help="the count margin in standard deviations (default rule: 2)")
    rule.add_argument("--never", action="store_true", help="never roll back")
    parser.add_argument("simulate", nargs=argparse.REMAINDER,
                        help="-- then the arguments of `zocodegen simulate`")
    args = parser.parse_args()
    rest = args.simulate[1:] if args.simulate[:1] == ["--"] else args.simulate
    if args.never:
        guard.Score.falls_below = lambda self, best, records: False
    else:
        default = guard.fall_margin
        guard.fall_margin = lambda best, records: max(2, round(args.sigmas / 2
                                                               * default(best, records)))
    out = Path(rest[rest.index("-o") + 1]) / "guard_trace.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    simulator.Guard.check = traced_check(out)
    simulator.Guard.baseline = traced_baseline(out)
    return cli.main(["simulate", *rest])


if __name__ == "__main__":
    sys.exit(main())
