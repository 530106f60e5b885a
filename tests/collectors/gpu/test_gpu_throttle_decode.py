"""Throttle bitmask decoding and violation-residency ratios."""

from __future__ import annotations

import pytest

from collectors.gpu import rows as R
from collectors.gpu.nvml import decode_nvml_throttle
from collectors.gpu.throttle import REASONS, ResidencyTracker, decode_indep


@pytest.mark.parametrize(
    ("bit", "reason"),
    [(0, "power"), (7, "power"), (16, "current"), (23, "current"), (32, "thermal"),
     (36, "thermal"), (45, "thermal"), (46, "prochot"), (47, "prochot"), (56, "other"),
     (57, "other"), (10, "other")],  # bit 10 is not in the table -> other
)
def test_indep_bits_map_to_documented_reason(bit: int, reason: str) -> None:
    """Each SMU_THROTTLER_* bit range sets exactly its documented reason."""
    got = decode_indep(1 << bit)
    assert [k for k, v in got.items() if v] == [reason]
    assert set(got) == set(REASONS)


def test_nvml_idle_is_not_throttling() -> None:
    """NVML GpuIdle (0x1) sets nothing; HW thermal (0x40) sets thermal."""
    assert not any(decode_nvml_throttle(0x1).values())
    assert [k for k, v in decode_nvml_throttle(0x40).items() if v] == ["thermal"]


def _poll(dev: R.Device, samples: float, ppt: float, hbm: float) -> list[R.Row]:
    return [
        dev.row(R.VIOLATION_SAMPLES, samples, "1", R.COUNTER),
        dev.row(R.VIOLATION_TICKS, ppt, "1", R.COUNTER, reason="ppt"),
        dev.row(R.VIOLATION_TICKS, hbm, "1", R.COUNTER, reason="hbm_thermal"),
    ]


def test_residency_ratio_is_delta_ticks_over_delta_samples_per_gpu() -> None:
    """Ratios come from deltas between polls, per GPU; first poll and resets give none."""
    t = ResidencyTracker()
    g0, g1 = R.Device(0), R.Device(1)
    assert t.ratios(_poll(g0, 1000, 250, 0) + _poll(g1, 50, 0, 0)) == []
    got = t.ratios(_poll(g0, 1400, 350, 40) + _poll(g1, 50, 0, 0))
    # gpu0: (350-250)/(1400-1000) = 0.25, (40-0)/400 = 0.1; gpu1: Δsamples 0 -> none
    assert {(r.gpu_index, r.attr("reason")): r.value for r in got} == {
        (0, "ppt"): 0.25, (0, "hbm_thermal"): 0.1}
    assert all(r.metric == R.VIOLATION_RATIO and r.kind == R.GAUGE for r in got)
    # counter reset (ppt goes down) -> no ppt ratio this poll
    got = t.ratios(_poll(g0, 1800, 10, 240))
    assert {r.attr("reason"): r.value for r in got} == {"hbm_thermal": 0.5}  # 200/400
