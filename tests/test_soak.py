"""The soak, short (tests/soak.py; docs/reliability.md has the long run's figures): a guarded
training run through a faulty line, with device resets, host kills, checkpoint saves cut
short on the device and power lost while the host writes its files, ends byte-identical to the
simulator, every kind of fault having happened."""
from __future__ import annotations

import pytest

import soak

pytestmark = pytest.mark.usefixtures("module_build_cache")


def test_short_soak_ends_as_the_simulator(tmp_path):
    faults = soak.Faults(device_reset=0.1, host_kill=0.04, torn_slot=0.3, torn_file=0.15)
    report = soak.soak(40, tmp_path / "soak", seed=1, faults=faults, checkpoint_every=5,
                       log=lambda text: None)
    assert report.identical, report
    assert not report.stale_temporaries, report
    assert min(report.device_resets, report.host_kills, report.torn_slots,
               report.torn_files) > 0, report
    assert min(report.line.values()) > 0, report.line
