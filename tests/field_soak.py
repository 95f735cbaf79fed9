"""The field trainer's power-cut soak on an emulated board (issue 50, docs/sdcard.md): the
board's own `--data-source sdcard` firmware trains from the emulated SD card with no host, and
loses power during a random write again and again (a random prefix of the sector reaches the
card). After each cut it boots again; every boot must resume from the newest checkpoint that
verifies (a torn slot is never loaded, a saved one never lost), and every run must end with
simulate's checkpoint and best, byte for byte. Runs follow each other until the cuts are in.

    .venv/bin/python tests/field_soak.py --cuts 50 --board stm32f746   # about 30 min here

The test suite runs 3 cuts on the emulated board (tests/test_sdcard.py) and 50 on the native
build of the same sources (tests/test_field.py); this is the 50 on the board's own firmware.
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
for _path in (str(HERE), str(HERE.parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from test_field import GUARDED, _card, _expected, _newest_step, _pack, area_of  # noqa: E402
from test_sdcard import _field_boot  # noqa: E402
from zocodegen.formats import field  # noqa: E402
from zocodegen.host.emulator.machine import BOARDS, POWER_CUT_STATUS  # noqa: E402
from zocodegen.host.emulator.sdcard import SECTOR, Faults  # noqa: E402

#: Boots one run may take before the soak calls it stuck.
MAX_BOOTS = 200


def soak(board: str, cuts_wanted: int, seed: int, tmp: Path) -> dict[str, int]:
    """Runs until ``cuts_wanted`` power cuts; raises AssertionError at the first loss."""
    image = _pack(tmp, "hard", True)
    run, best, _ = _expected(GUARDED, image, tmp)
    rng = random.Random(seed)
    cuts = runs = boots = 0
    while cuts < cuts_wanted:
        card = _card(image, tmp, f"card-{runs}.img")
        durable = -1
        for _ in range(MAX_BOOTS):
            before = max((e.sequence for e in area_of(card).entries), default=-1)
            cut = f"{rng.randint(1, 40)}:{rng.randint(0, SECTOR)}"
            report, out = _field_boot(board, card, Faults.parse([], cut))
            boots += 1
            area = area_of(card)
            starts = [e for e in area.entries if e.kind == field.START and e.sequence > before]
            assert not starts or starts[0].step == max(durable, 0), (
                f"boot {boots} resumed at step {starts[0].step}, the newest good "
                f"checkpoint is step {durable}")
            if report.status == 0:
                break
            assert report.status == POWER_CUT_STATUS, (report.fault, out[-2000:])
            cuts += 1
            step = _newest_step(card)
            assert step >= durable, f"a saved checkpoint was lost (step {durable} -> {step})"
            durable = step
            print(f"cut {cuts} at write {cut} (run {runs + 1}): newest checkpoint step "
                  f"{durable}", flush=True)
        else:
            raise AssertionError(f"run {runs + 1} made no progress in {MAX_BOOTS} boots")
        assert "field: end: complete: 20 steps" in out, out[-500:]
        assert (area_of(card).run, area_of(card).best) == (run, best), \
            f"run {runs + 1} did not end as simulate"
        runs += 1
    return {"cuts": cuts, "runs": runs, "boots": boots}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cuts", type=int, default=50)
    parser.add_argument("--board", choices=BOARDS, default=BOARDS[0])
    parser.add_argument("--seed", type=int, default=50)
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        result = soak(args.board, args.cuts, args.seed, Path(tmp))
    print(f"{args.board}: {result['cuts']} power cuts in {result['runs']} runs "
          f"({result['boots']} boots): every boot resumed from the newest good checkpoint, "
          f"every run ended as simulate ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
