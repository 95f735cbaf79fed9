"""Judges training-guard fall rules offline (not a test) on the checks that
`benchmarks/guard_margin.py --never` traced: for each run and rule, the first check at which
the rule would have rolled back. A rule that never fires on a run would have left it exactly
as it is (the trace is that run's trajectory); one that fires early on a run that diverges
(e.g. a fixed eta 10x too large) catches what the guard is for.

    .venv/bin/python benchmarks/guard_rules.py benchmarks/data/guard_traces/*/guard_trace.jsonl

The four traces there are the unguarded full-training runs of docs/scale.md (contrast and
fog, seeds 1 and 2, --epochs 1 --queries 20, `guard_margin.py --never`).
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Callable

# (correct, loss, best correct, best loss, records) -> a fall?
Rule = Callable[[int, int, int, int, int], bool]


def binomial_margin(best: int, records: int) -> int:
    """Two standard deviations of the difference of two independent counts of V records at
    the best's accuracy: 2 sqrt(2 V p (1 - p)) = isqrt(8 c (V - c) / V), at least 2."""
    return max(2, math.isqrt(8 * best * (records - best) // records))


RULES: dict[str, Rule] = {
    "the rule before 2026-11-27: count by isqrt(V)/2, or loss +1/8":
        lambda c, l, bc, bl, v: c + max(2, math.isqrt(v) // 2) < bc or l > bl + bl // 8,
    "count by 2 sd of a difference, or loss +1/8":
        lambda c, l, bc, bl, v: c + binomial_margin(bc, v) < bc or l > bl + bl // 8,
    "count by 2 sd and loss above, or loss +1/8":
        lambda c, l, bc, bl, v: (c + binomial_margin(bc, v) < bc and l > bl)
        or l > bl + bl // 8,
    "count by 2 sd and loss above, or loss +1/4 (the rule now, with 2 in a row)":
        lambda c, l, bc, bl, v: (c + binomial_margin(bc, v) < bc and l > bl)
        or l > bl + bl // 4,
    "count by 2 sd, or loss +1/4":
        lambda c, l, bc, bl, v: c + binomial_margin(bc, v) < bc or l > bl + bl // 4,
}


def first_rollback(trace: list[dict], rule: Rule, in_a_row: int) -> int | None:
    """The step of the first check at which the rule, needing ``in_a_row`` falling checks,
    rolls back (the best kept as the guard does: more correct, or as many with a lower
    loss sum)."""
    best, falling = None, 0
    for check in trace:
        c, loss, v = check["correct"], check["loss"], check["records"]
        if best is None or c > best[0] or (c == best[0] and loss < best[1]):
            best, falling = (c, loss), 0
        elif not rule(c, loss, best[0], best[1], v):
            falling = 0
        elif (falling := falling + 1) >= in_a_row:
            return check["step"]
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", type=Path)
    args = parser.parse_args()
    names = [t.parent.name for t in args.traces]
    print("| rule | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for label, rule in RULES.items():
        for in_a_row in (1, 2):
            cells = []
            for path in args.traces:
                trace = [json.loads(line) for line in path.read_text().splitlines()]
                step = first_rollback(trace, rule, in_a_row)
                cells.append("-" if step is None else f"step {step}")
            print(f"| {label}; {in_a_row} in a row | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
