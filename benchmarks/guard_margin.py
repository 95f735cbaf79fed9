"""An A/B of the training guard's fall margin (not a test): `zocodegen simulate` with the
margin of training/guard.py replaced, for evidence before any default changes.

    .venv/bin/python benchmarks/guard_margin.py --sigmas 2 -- MODEL --data D.npz -o RUN ...

The guard calls a check a fall when it is more than fall_margin(V) correct records below the
best check (or its loss sum 1/8 above). The default margin is about one binomial standard
deviation at 50 % (isqrt(V) / 2, at least 2); ``--sigmas K`` makes it K of them. Only the
simulator is changed, so a run with K != 1 has no firmware twin: evidence, not a product.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zocodegen import cli  # noqa: E402
from zocodegen.training import guard  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sigmas", type=float, required=True,
                        help="the margin in binomial standard deviations at 50 %%")
    parser.add_argument("simulate", nargs=argparse.REMAINDER,
                        help="-- then the arguments of `zocodegen simulate`")
    args = parser.parse_args()
    rest = args.simulate[1:] if args.simulate[:1] == ["--"] else args.simulate
    guard.fall_margin = lambda records: max(2, round(args.sigmas * math.isqrt(records) / 2))
    return cli.main(["simulate", *rest])


if __name__ == "__main__":
    sys.exit(main())
