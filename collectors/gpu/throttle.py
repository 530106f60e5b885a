"""Throttling: decode ``indep_throttle_status`` and MI300 violation residency.

Bit table (ASIC-independent ``SMU_THROTTLER_*_BIT`` of Linux
``drivers/gpu/drm/amd/include/kgd_pp_interface.h``, used for the
``indep_throttle_status`` field of ``gpu_metrics`` v1.3+ and by amdsmi):

======  =====================================================  ===========
bits    throttlers                                             ``reason``
======  =====================================================  ===========
0-7     PPT0-3, SPL, FPPT, SPPT, SPPT_APU                      ``power``
16-23   TDC_GFX/SOC/MEM/VDD/CVIP, EDC_CPU/GFX, APCC            ``current``
32-45   TEMP_GPU/CORE/MEM/EDGE/HOTSPOT/SOC/VR_*/LIQUID*, VRHOT ``thermal``
46-47   PROCHOT_CPU, PROCHOT_GFX                               ``prochot``
56-57   PPM, FIT                                               ``other``
======  =====================================================  ===========

The legacy ``throttle_status`` (rocm-smi, gpu_metrics < 1.3) is
ASIC-specific, so it is exported raw (``hw.gpu.throttle.status``) with only
``hw.gpu.throttled{reason="any"}``.

MI300-class violation accumulators (amdsmi ``amdsmi_get_violation_status`` /
gpu_metrics 1.6 ``*_residency_acc``, amd-smi ``metric --throttle``) are
firmware tick counts: ``accumulation_counter`` ticks every sample, each
``*_accumulated`` ticks while that limiter is active. The share of the
interval spent throttled is ``Δacc_reason / Δaccumulation_counter``.

>>> decode_indep(0)
{'power': False, 'current': False, 'thermal': False, 'prochot': False, 'other': False}
>>> sorted(k for k, v in decode_indep((1 << 0) | (1 << 36)).items() if v)
['power', 'thermal']
"""

from __future__ import annotations

from collections.abc import Iterable

from collectors.gpu import rows as R

REASONS: tuple[str, ...] = ("power", "current", "thermal", "prochot", "other")
"""Bounded ``reason`` values of ``hw.gpu.throttled`` (plus ``any``)."""

VIOLATIONS: tuple[str, ...] = ("ppt", "socket_thermal", "vr_thermal", "hbm_thermal", "prochot")
"""Bounded ``reason`` values of the MI300 violation residency metrics."""

VIOLATION_REASON: dict[str, str] = {
    "ppt": "power",
    "socket_thermal": "thermal",
    "vr_thermal": "thermal",
    "hbm_thermal": "thermal",
    "prochot": "prochot",
}
"""Violation -> coarse ``hw.gpu.throttled`` reason."""


def _indep_reason(bit: int) -> str | None:
    if 0 <= bit <= 7:
        return "power"
    if 16 <= bit <= 23:
        return "current"
    if 32 <= bit <= 45:
        return "thermal"
    if bit in (46, 47):
        return "prochot"
    if bit in (56, 57):
        return "other"
    return None


def decode_indep(mask: int) -> dict[str, bool]:
    """``indep_throttle_status`` bitmask -> ``{reason: active}`` over :data:`REASONS`.

    Bits outside the table count as ``other``.
    """
    out = dict.fromkeys(REASONS, False)
    for bit in range(64):
        if mask >> bit & 1:
            out[_indep_reason(bit) or "other"] = True
    return out


def throttled_rows(dev: R.Device, active: dict[str, bool]) -> list[R.Row]:
    """``hw.gpu.throttled`` rows: one per reason in ``active`` plus ``any``."""
    out = [dev.row(R.THROTTLED, 1.0 if v else 0.0, "1", reason=k) for k, v in active.items()]
    out.append(dev.row(R.THROTTLED, 1.0 if any(active.values()) else 0.0, "1", reason="any"))
    return out


class ResidencyTracker:
    """Turns violation accumulators into per-interval ratios (stateful).

    Feed every sample's rows to :meth:`ratios`; it returns
    ``hw.gpu.throttle.ratio`` rows = Δ``hw.gpu.throttle.residency{reason}`` /
    Δ``hw.gpu.throttle.samples`` since the previous sample of the same GPU.
    The first sample, a counter reset (negative delta) or Δsamples == 0 yields
    no ratio for that GPU.

    >>> d = R.Device(0)
    >>> t = ResidencyTracker()
    >>> def s(n, p): return [d.row(R.VIOLATION_SAMPLES, n, "1", R.COUNTER),
    ...                      d.row(R.VIOLATION_TICKS, p, "1", R.COUNTER, reason="ppt")]
    >>> t.ratios(s(100, 10))
    []
    >>> [(r.attr("reason"), r.value) for r in t.ratios(s(300, 60))]
    [('ppt', 0.25)]
    """

    def __init__(self) -> None:
        self._prev: dict[tuple[int | None, str | None], float] = {}

    def ratios(self, rows: Iterable[R.Row]) -> list[R.Row]:
        """Ratio rows for the accumulators found in ``rows``."""
        samples: dict[int | None, R.Row] = {}
        ticks: list[R.Row] = []
        for r in rows:
            if r.metric == R.VIOLATION_SAMPLES:
                samples[r.gpu_index] = r
            elif r.metric == R.VIOLATION_TICKS:
                ticks.append(r)
        out: list[R.Row] = []
        deltas: dict[int | None, float] = {}
        for gpu, r in samples.items():
            prev = self._prev.get((gpu, None))
            self._prev[(gpu, None)] = r.value
            if prev is not None and r.value - prev > 0:
                deltas[gpu] = r.value - prev
        for r in ticks:
            key = (r.gpu_index, r.attr("reason"))
            prev = self._prev.get(key)
            self._prev[key] = r.value
            d = deltas.get(r.gpu_index)
            if prev is None or d is None or r.value < prev:
                continue
            ratio = min(1.0, (r.value - prev) / d)
            out.append(
                R.Row(R.VIOLATION_RATIO, ratio, "1", r.gpu_index, r.gpu_uuid, R.GAUGE, r.attributes)
            )
        return out
