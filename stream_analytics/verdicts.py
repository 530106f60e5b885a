"""Online drift status and bottleneck verdicts from analytics results.

:class:`OnlineVerdicts` is fed every ANALYTICS_RESULT row the engine emits
(and the host's recent GAUGE_SAMPLE batches) and returns DRIFT_STATUS and
BOTTLENECK tables (:mod:`exporter.schema`). Detectors are those of
:mod:`stream_analytics.drift`; the classifier and its thresholds are those of
:mod:`stream_analytics.bottleneck` / :mod:`stream_analytics.thresholds`.
Features come from the result row, so no kernel rows are kept:

* ``kernel_rate_hz`` = kernel_count / (window_end - window_start)
* ``mean_kernel_ns`` = kernel_time_ns / kernel_count
* ``micro_kernel_share`` = micro_kernel_count / kernel_count
* ``invol_switch_rate_hz`` = involuntary_switches / thread_wall_ns (per active thread)
* KAR, LTS, SII, active ratio as computed by the engine
* GPU activity, throttle residency, power and clock signals from gauges
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exporter.schema import BOTTLENECK, DRIFT_STATUS, plain
from stream_analytics.bottleneck import (
    CLASSES,
    Features,
    PartPicks,
    classify,
    features_from_parts,
    gauge_features,
    gauge_parts_split,
)
from stream_analytics.drift import DriftMonitor


def features_from_result(row: dict[str, Any], gauges: pa.Table | None = None,
                         gauge_vals: Mapping[str, float] | None = None) -> Features:
    """Classifier features of one ANALYTICS_RESULT row (see module doc).

    ``gauge_vals`` are :func:`~stream_analytics.bottleneck.gauge_features` of
    the host's recent gauges, computed once for every row of that host; when
    it is ``None`` they are computed here from ``gauges``."""
    vals: dict[str, float] = {}
    k = row.get("kernel_count") or 0
    if k:
        if row.get("kernel_time_ns") is not None:
            vals["mean_kernel_ns"] = row["kernel_time_ns"] / k
        if row.get("micro_kernel_count") is not None:
            vals["micro_kernel_share"] = row["micro_kernel_count"] / k
        w0, w1 = row.get("window_start_ns"), row.get("window_end_ns")
        if w0 is not None and w1 is not None and w1 > w0:
            vals["kernel_rate_hz"] = k / ((w1 - w0) / 1e9)
    if row.get("thread_wall_ns") and row.get("involuntary_switches") is not None:
        vals["invol_switch_rate_hz"] = row["involuntary_switches"] / (row["thread_wall_ns"] / 1e9)
    for col, name in (("kar", "kar"), ("launch_tax", "launch_tax"), ("sii", "sii"),
                      ("gpu_active_ratio", "active_ratio")):
        if row.get(col) is not None:
            vals[name] = float(row[col])
    if gauge_vals is not None:
        vals.update(gauge_vals)
    elif gauges is not None and gauges.num_rows:
        vals.update(gauge_features(gauges))
    return Features(**vals)


def _sample_bounds(table: pa.Table) -> list[int]:
    """Row offsets cutting ``table`` into its runs of equal ``ts_ns`` (its
    samples, in order): ``[0, ..., num_rows]``; ``[0, num_rows]`` when it holds
    at most one (an empty batch included, which takes a window place as before)."""
    n = table.num_rows
    if n < 2:
        return [0, n]
    ts = table.column("ts_ns").to_numpy()
    cuts = np.flatnonzero(ts[1:] != ts[:-1]) + 1
    return [0, *cuts.tolist(), n]


class OnlineVerdicts:
    """Drift monitors plus the classifier, per analytics key; checkpointable."""

    def __init__(self, gauge_batches: int = 30) -> None:
        self.drift = DriftMonitor()
        self.gauge_batches = gauge_batches
        # host -> gauge_parts of its last gauge_batches samples (not the rows)
        self._gauges: dict[str, deque[dict[str, pa.Table]]] = {}
        self._gauge_ts: dict[str, int] = {}  # hosts whose GPU drift streams moved
        self._picks: dict[str, PartPicks] = {}  # host -> its gauge rows' part picks

    def ingest_gauges(self, host: str, table: pa.Table) -> None:
        """Remember the host's last ``gauge_batches`` GAUGE_SAMPLE samples (classifier
        features) and feed its GPU power and clock readings to the drift monitor.

        A sample is a run of rows with the same ``ts_ns`` (one ``collect()`` of
        the gpu collector): a batch holding k samples (``run
        --publish-interval``) takes k places of the window, as k batches of one
        sample would, so the window stays 30 samples whatever the publish
        cadence."""
        window = self._gauges.setdefault(host, deque(maxlen=self.gauge_batches))
        picks = self._picks.setdefault(host, PartPicks())
        window.extend(gauge_parts_split(table, _sample_bounds(table), picks))  # once a batch
        self.drift.update_gauges(table, host)
        if table.num_rows:
            ts = int(pc.max(table.column("ts_ns")).as_py())
            self._gauge_ts[host] = max(ts, self._gauge_ts.get(host, ts))

    @property
    def pending(self) -> bool:
        """True when gauges moved drift streams since the last :meth:`update`
        (a host with GPU gauges but no analytics results still gets its status)."""
        return bool(self._gauge_ts)

    def _host_gauge_features(self, host: str) -> dict[str, float]:
        """Classifier features of ``host``'s last ``gauge_batches`` gauge samples."""
        dq = self._gauges.get(host)
        return features_from_parts(list(dq)) if dq else {}

    def update(self, results: pa.Table) -> tuple[pa.Table, pa.Table]:
        """DRIFT_STATUS rows of every stream of the hosts these results (or gauges
        ingested since the last call) touched, and one BOTTLENECK row per result."""
        touched: dict[str, int] = dict(self._gauge_ts)
        self._gauge_ts = {}
        verdicts = []
        host_gauges: dict[str, dict[str, float]] = {}  # once per host, not per row
        for row in plain(results).to_pylist():  # one row per key, not per kernel
            self.drift.update_result(row)
            touched[row["host"]] = max(int(row["ts_ns"]), touched.get(row["host"], 0))
            if row["host"] not in host_gauges:
                host_gauges[row["host"]] = self._host_gauge_features(row["host"])
            v = classify(features_from_result(row, gauge_vals=host_gauges[row["host"]]),
                         row.get("device_type"))
            verdicts.append({
                "ts_ns": row["ts_ns"], "host": row["host"], "model": row.get("model"),
                "pid": row.get("pid"), "label": v.label, "confidence": float(v.confidence),
                "classes": list(CLASSES), "scores": [float(v.scores.get(c, 0.0)) for c in CLASSES],
                "evidence_json": json.dumps(v.to_json()["evidence"]),
                "recommendation": v.recommendation,
            })
        status = [{"ts_ns": touched[s["host"]], "host": s["host"], "stream": s["stream"],
                   "key": s["key"], "detector": s["detector"],
                   "drift_detected": bool(s["drift_detected"]),
                   "drift_events_total": int(s["drift_count"]),
                   "last_change_ns": s["last_change_ns"], "samples": int(s["samples"])}
                  for s in self.drift.status(set(touched))]  # fmt: skip
        return (pa.Table.from_pylist(status, schema=DRIFT_STATUS),
                pa.Table.from_pylist(verdicts, schema=BOTTLENECK))

    def to_dict(self) -> dict[str, Any]:
        return {"drift": self.drift.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OnlineVerdicts:
        ov = cls()
        ov.drift = DriftMonitor.from_dict(d["drift"])
        return ov
