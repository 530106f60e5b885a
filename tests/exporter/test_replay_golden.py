"""`aaco-exporter replay` keeps its outputs bit for bit while it gets faster.

A fixed set of real recorded inputs (the rocprof v1 seismic-stencil and
finite-difference traces, the rocprofv3 kernel trace and the MI250 PyTorch
Kineto trace in ``collectors/rocprof/testdata``, see PROVENANCE.md there) is
replayed through the console script, and every table of the bundle is
reduced to a digest: the rows of ``profiler/kernels.parquet``,
``profiler/kernel_stats.parquet``, ``metrics/inference_iters.parquet``, the
analytics results (``metrics/analytics.parquet`` without its wall-clock
``ts_ns``), ``derived_metrics.json``, the kernel slices in ``trace.pftrace``
a hash of its packets (counter timestamps aside) and of its normalized
events (``tests/exporter/sinks/trace_events.py``: encoding-independent,
recorded at ecb176e). :data:`EXPECTED` was
recorded with the code before the replay speed-up (commit c9988e4; ``python
tests/exporter/test_replay_golden.py BUNDLE`` prints a bundle's digest), so a
change in any output fails here. ``trace_packets`` was re-recorded at the
columnar held slices (interned names/categories for iterations, CPU kernels
and HIP API calls instead of plain strings) after ``trace_events`` showed the
normalized events unchanged. ``analytics``, ``derived_metrics``,
``trace_events`` and ``trace_packets`` were re-recorded at bf0467e, which
made a launch tax without a launch API trace or iterations unknown instead
of 0: replayed at ebc07ac and at bf0467e, the bundles differ in exactly the
rocprofv3 kernel trace's key (``launch_overhead_ns`` 0 -> null,
``launch_tax`` 0.0 -> null, in the results and ``derived_metrics.json``) and
its one ``aaco.launch_tax`` counter point of 0.0, no longer written (4,142 ->
4,141 trace events); every other event and table is unchanged.
``analytics`` was re-recorded when ANALYTICS_RESULT gained ``device_type``:
its rows without that column still hash to the digest before it
(``a14911bd45903740``), and it is ``"gpu"`` in all four.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

from tests.exporter.replayed import ROCPROF, replay  # noqa: E402
from tests.support import load_path  # noqa: E402

trace_events = load_path("aaco_trace_events", ROOT / "tests/exporter/sinks/trace_events.py")

INPUTS = [ROCPROF / "seismic_stencils_results.csv", ROCPROF / "finite_difference_results.csv",
          ROCPROF / "kernel_trace.csv", ROCPROF / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"]
"""Real recordings (PROVENANCE.md in that directory)."""

VOLATILE = {"ts_ns"}
"""Result columns that hold the wall clock of the run, not the data."""


def _sha(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _rows(path: Path, drop: set[str] = frozenset()) -> dict[str, Any]:  # type: ignore[assignment]
    t = pq.read_table(path)
    t = t.drop_columns([c for c in t.column_names if c in drop])
    return {"rows": t.num_rows, "sha": _sha(t.to_pylist())}


def trace_digest(trace: Path) -> tuple[int, str]:
    """``(kernel slice begins, hash of every packet)`` of a ``.pftrace``, read
    with perfetto's ``Trace`` proto; counter packets are hashed without their
    timestamp (the analytics counters are stamped with the wall clock)."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    t = Trace.FromString(trace.read_bytes())
    cats: dict[int, str] = {}
    n = 0
    h = hashlib.sha256()
    for p in t.packet:
        cats |= {c.iid: c.name for c in p.interned_data.event_categories}
        ev = p.track_event
        if p.HasField("track_event") and ev.type == TrackEvent.TYPE_SLICE_BEGIN:
            n += list(ev.categories) + [cats[i] for i in ev.category_iids] == ["kernel"]
        if p.HasField("track_event") and ev.type == TrackEvent.TYPE_COUNTER:
            p.ClearField("timestamp")
        h.update(p.SerializeToString(deterministic=True))
    return n, h.hexdigest()[:16]


def digest(bundle: Path) -> dict[str, Any]:
    """What must not change in a replay bundle: row counts and content hashes."""
    derived = json.loads((bundle / "metrics/derived_metrics.json").read_text())
    slices, packets = trace_digest(bundle / "trace.pftrace")
    return {
        "kernels": _rows(bundle / "profiler/kernels.parquet"),
        "kernel_stats": _rows(bundle / "profiler/kernel_stats.parquet"),
        "inference_iters": _rows(bundle / "metrics/inference_iters.parquet"),
        "analytics": _rows(bundle / "metrics/analytics.parquet", VOLATILE),
        "derived_metrics": _sha(derived),
        "kernel_slices": slices,
        "trace_packets": packets,
        "trace_events": list(trace_events.digest(bundle / "trace.pftrace", counter_ts=False)),
        "drops": json.loads((bundle / "session.json").read_text())["drops"],
    }


EXPECTED: dict[str, Any] = {
    "analytics": {
        "rows": 4,
        "sha": "083997293cdc3441"
    },
    "derived_metrics": "1b0ec4b6bb8934cd",
    "drops": {
        "unattributed_kernel": 2028
    },
    "inference_iters": {
        "rows": 2,
        "sha": "0427abbcdf85da46"
    },
    "kernel_slices": 2051,
    "kernel_stats": {
        "rows": 32,
        "sha": "3a499bd663b0bf64"
    },
    "kernels": {
        "rows": 2051,
        "sha": "dd99a3e13432e148"
    },
    "trace_events": [4141, "4071d15113297e0d"],
    "trace_packets": "2b91b08a43d1a045"
}


@pytest.mark.slow
def test_replay_bundle_of_real_traces_is_unchanged(tmp_path: Path,
                                                   cli_env: dict[str, str]) -> None:
    """Kernel rows, kernel stats, iterations, analytics results, derived
    metrics and the trace (slice count and packets) of the replay of the real
    inputs equal what the code before the speed-up wrote."""
    got = digest(replay(INPUTS, tmp_path, cli_env))
    assert got["kernel_slices"] == got["kernels"]["rows"]
    assert got == EXPECTED


if __name__ == "__main__":
    print(json.dumps(digest(Path(sys.argv[1])), indent=4, sort_keys=True))
