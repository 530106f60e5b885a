"""Drift detectors and DriftMonitor: detection, false alarms, checkpoints."""

from __future__ import annotations

import json
import random

import pytest

from stream_analytics.drift import ADWIN, CUSUM, DriftMonitor, EWMAChart, PageHinkley

DETS = [EWMAChart, CUSUM, PageHinkley, ADWIN]


def _series(seed: int, n: int, mu: float = 10.0, sd: float = 0.2) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(mu, sd) for _ in range(n)]


@pytest.mark.parametrize("cls", DETS)
def test_detector_flags_a_large_step_after_grace_period(cls: type) -> None:
    """A +3 sigma step after an in-control stretch is detected within 60 samples."""
    det = cls(grace_period=100)
    xs = _series(1, 400) + _series(2, 200, mu=10.6)
    hits = []
    for i, x in enumerate(xs):
        det.update(x)
        if det.drift_detected:
            hits.append(i)
    after = [h for h in hits if h >= 400]
    assert after and after[0] - 400 < 60


@pytest.mark.parametrize("cls", DETS)
def test_detector_quiet_on_in_control_gaussian(cls: type) -> None:
    """No alarm on 5,000 i.i.d. in-control samples with default thresholds."""
    det = cls()
    n = 0
    for x in _series(3, 5000):
        det.update(x)
        n += det.drift_detected
    assert n == 0


@pytest.mark.parametrize("cls", DETS)
def test_detector_checkpoint_roundtrip_continues_identically(cls: type) -> None:
    """from_dict(to_dict()) through JSON yields the same future detections."""
    a = cls(grace_period=50)
    for x in _series(4, 120):
        a.update(x)
    b = type(a).from_dict(json.loads(json.dumps(a.to_dict())))
    tail = _series(5, 100, mu=11.0)
    ra, rb = [], []
    for x in tail:
        a.update(x)
        b.update(x)
        ra.append(a.drift_detected)
        rb.append(b.drift_detected)
    assert ra == rb and any(ra)


def test_hyperparameters_stored_verbatim() -> None:
    """Constructor arguments are readable back as attributes."""
    e = EWMAChart(lambda_=0.3, L=2.5, grace_period=33, clip=3.0, mode="up")
    assert (e.lambda_, e.L, e.grace_period, e.clip, e.mode) == (0.3, 2.5, 33, 3.0, "up")
    c = CUSUM(k=0.25, h=7.0)
    assert (c.k, c.h) == (0.25, 7.0)
    with pytest.raises(ValueError):
        EWMAChart(lambda_=0.0)


def test_monitor_counts_events_and_change_point_time() -> None:
    """DriftMonitor records drift count and last change-point ns per detector."""
    m = DriftMonitor(detectors={"cusum": {"kind": "cusum", "params": {"grace_period": 50}}})
    ts = 0
    for x in _series(6, 200) + _series(7, 100, mu=12.0):
        ts += 1_000_000
        m.update("latency", "magika", x, ts)
    (row,) = m.status()
    assert row["drift_count"] >= 1
    assert row["last_change_ns"] is not None and row["last_change_ns"] > 200 * 1_000_000


def test_monitor_rejects_unknown_stream_and_bounds_keys() -> None:
    """Unknown streams raise; keys beyond max_keys_per_stream are dropped."""
    m = DriftMonitor(max_keys_per_stream=2)
    with pytest.raises(ValueError):
        m.update("kernel_name", "gemm_kernel_123", 1.0, 0)
    for k in ("a", "b", "c"):
        m.update("kar", k, 1.0, 0)
    assert m.dropped == 1
    assert {r["key"] for r in m.status()} == {"a", "b"}


def test_monitor_bytes_roundtrip_with_family_state() -> None:
    """to_bytes/from_bytes keeps detectors and cumulative family totals."""
    m = DriftMonitor()
    for i in range(3):
        m.update_result({
            "ts_ns": i, "model": "m", "latency_mean_s": 0.01, "kar": 1.0, "launch_tax": 0.2,
            "sii": 0.01, "family_names": ["gemm"], "family_spans_total": [10 * (i + 1)],
            "family_time_ns_total": [1000 * (i + 1)],
        })  # fmt: skip
    m2 = DriftMonitor.from_bytes(m.to_bytes())
    assert m2.status() == m.status()
    streams = {(r["stream"], r["key"]) for r in m2.status()}
    assert ("family_duration", "m/gemm") in streams and ("lts", "m") in streams
