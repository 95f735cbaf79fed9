"""The device-hours model of the paper-scale grid (benchmarks/scale_device_time.py): every
step, trial and check a run's log shows is counted once, at its cost (issue 32)."""
from __future__ import annotations

import sys

import pytest

from conftest import FIXTURES, REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import scale_device_time as dt  # noqa: E402

LOG = """lr trial 0.003: 18 steps, validation 23/101 correct, loss 2.3859
lr trial 0.01: 18 steps, validation 23/101 correct, loss 2.2948
lr trial 0.03: 18 steps, validation 30/101 correct, loss 2.0808  <- chosen
guard: a check every 8 steps on 101 validation records; before training 24/101 correct
guard: step 48: validation 33.7% fell below the best (40/101 at step 40); rolled back
"""
SPARSE = """block 0: held-out 15 -> 17 of 64 correct (+2)  <- selected
block 1: held-out 15 -> 14 of 64 correct (-1)
block 2: held-out 15 -> 14 of 64 correct (-1)
block 3: held-out 15 -> 14 of 64 correct (-1)
""" + LOG


def test_a_run_is_read_from_its_log():
    assert dt.run_shape(LOG, 900, 1) == dt.RunShape(900, 1, 3, 18, 8, 101, 0, 0)
    assert dt.run_shape(SPARSE, 900, 1) == dt.RunShape(900, 1, 3, 18, 8, 101, 4, 64)
    assert dt.run_shape("", 50, 2) == dt.RunShape(50, 2)  # --no-guard, fixed lr


def test_every_step_check_and_record_is_counted_once():
    costs = dt.Costs(step=10.0, forward=0.5, link=1.0)
    shape = dt.run_shape(LOG, 900, 1)
    # lr trials: 3 x 18 steps and 3 checks of 101; the guard's baseline check
    setup_records = 3 * 101 + 101
    assert dt.setup_seconds(shape, costs) == (54 * 10.0 + setup_records * 0.5,
                                              54 * 1.0 + setup_records * 1.0)
    compute, link = dt.seconds_at(900, shape, costs)
    checks = 900 // 8
    assert compute == 54 * 10.0 + 900 * 10.0 + (setup_records + checks * 101) * 0.5
    assert link == 54 + 900 + setup_records + checks * 101


def test_sparse_block_trials_cost_their_own_blocks():
    costs = dt.Costs(step=2.0, forward=0.5, link=1.0, block_steps=(4.0, 3.0, 2.0, 1.0))
    shape = dt.run_shape(SPARSE, 900, 1)
    no_blocks = dt.setup_seconds(dt.run_shape(LOG, 900, 1), costs)
    compute, link = dt.setup_seconds(shape, costs)
    assert compute - no_blocks[0] == 64 * (4.0 + 3.0 + 2.0 + 1.0) + 5 * 64 * 0.5
    assert link - no_blocks[1] == 4 * 64 + 5 * 64


def test_link_time_of_a_64x64_record():
    """12,296 bytes (image, label, CRC) are 25 sectors: 7 READs of up to 4 sectors at 115200
    baud before (1.14 s), 2 READs of up to 16 at the default 1,228,800 baud now."""
    model = FIXTURES / "scale_model.tflite"
    before = dt.link_seconds_per_record(model, baud=115200, max_sectors=4)
    wire = 7 * 18 + sum(r + r // 254 + 2 for r in [6 + 4 + 512 * n + 4
                                                    for n in (4, 4, 4, 4, 4, 4, 1)])
    assert before == pytest.approx(wire * 10 / 115200)
    assert 1.1 < before < 1.2
    now = dt.link_seconds_per_record(model)
    wire = 2 * 18 + sum(r + r // 254 + 2 for r in [6 + 4 + 512 * n + 4 for n in (16, 9)])
    assert now == pytest.approx(wire * 10 / 1_228_800)
    assert before / now > 10
