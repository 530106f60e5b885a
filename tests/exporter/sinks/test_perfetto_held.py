"""The held slices of ``trace.pftrace`` (iterations, CPU kernels, HIP API calls)
keep their meaning event for event.

Each case writes a trace of real recorded inputs (the magika ORT CPU profile
and the rocprofv3 kernel and HIP API traces in ``testdata``) and reduces it
to the digest of its normalized event sequence (:mod:`trace_events`: times,
types, track paths, resolved names/categories/annotations, flow ordinals, in
file order). :data:`EXPECTED` was recorded with the writer that built one
Python object per held slice (commit ecb176e; the ``edges`` case added later
and recorded with that code's tree, 79d4bf8), before the columnar rewrite;
``python tests/exporter/sinks/test_perfetto_held.py`` prints the digests.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

from exporter.schema import ITERATION_SPAN, conform  # noqa: E402
from exporter.sinks import perfetto_trace as pt  # noqa: E402
from tests.support import load_path  # noqa: E402

HERE = Path(__file__).parent
te = load_path("aaco_trace_events", HERE / "trace_events.py")
data = load_path("aaco_sink_testdata", HERE / "testdata" / "sinkdata.py")


def _analytics(its: pa.Table) -> pa.Table:
    return pa.Table.from_batches([conform("analytics_result", pa.table({
        "ts_ns": its["end_ns"], "host": ["h"] * its.num_rows, "model": its["model"],
        "pid": its["pid"], "iterations": [1] * its.num_rows,
        "kernel_count": its["kernel_count"], "sii": [0.1] * its.num_rows,
        "kar": pc.divide(pc.cast(its["duration_ns"], pa.float64()), 1e9),
        "kernel_spans_total": [96] * its.num_rows,
        "iterations_total": list(range(1, its.num_rows + 1))}))])


def case_magika(out: Path) -> pt.TraceStats:
    """CPU kernels nested in their iterations, plus analytics counters."""
    ks, its = data.magika_recorded()
    return pt.write_trace(out, ks, its, analytics=_analytics(its))


def case_hip(out: Path) -> pt.TraceStats:
    """GPU kernels, HIP API slices and a launch flow."""
    empty = pa.Table.from_batches([conform("iteration_span", ITERATION_SPAN.empty_table())])
    return pt.write_trace(out, data.rocprof_kernels(), empty, hip_api=data.rocprof_hip_api())


def case_mixed(out: Path) -> pt.TraceStats:
    """Everything held at once, kernels fed in 100-row batches: CPU kernels,
    iterations (the first without CPU kernels, so on its own track), GPU
    kernels and HIP API calls (one tid null) sorted together."""
    ks, its = data.magika_recorded()
    ks = ks.filter(pc.not_equal(ks["iteration"], 0))
    gpu = data.rocprof_kernels()
    api = data.rocprof_hip_api()
    tid = api["tid"].to_pylist()
    api = api.set_column(api.schema.get_field_index("tid"), "tid",
                         pa.array([None, *tid[1:]], pa.int64()))
    both = pa.concat_tables([ks, gpu.cast(ks.schema)])
    return pt.write_trace(out, iter(both.to_batches(max_chunksize=100)), its, hip_api=api)


def case_edges(out: Path) -> pt.TraceStats:
    """Null and repeated values: CPU kernels with op_type null on every 5th row,
    zero length on every 7th, tid -1 on every 11th; the HIP API rows twice (the
    second hipLaunchKernel with the same correlation id starts no flow), one
    with a null correlation id, one with a null function name."""
    ks, its = data.magika_recorded()
    ks = ks.slice(0, 200)

    def every(k: int) -> pa.Array:
        return pa.array(np.arange(ks.num_rows) % k == 0)

    op = ks.schema.get_field_index("op_type")
    ks = ks.set_column(op, "op_type", pc.if_else(every(5), pa.scalar(None, ks["op_type"].type),
                                                 ks["op_type"]))
    ks = ks.set_column(ks.schema.get_field_index("end_ns"), "end_ns",
                       pc.if_else(every(7), ks["start_ns"], ks["end_ns"]))
    ks = ks.set_column(ks.schema.get_field_index("tid"), "tid",
                       pc.if_else(every(11), pa.scalar(-1, pa.int64()), ks["tid"]))
    api = pa.concat_tables([data.rocprof_hip_api()] * 2)
    corr = api["correlation_id"].to_pylist()
    fn = api["function"].to_pylist()
    corr[0], fn[1] = None, None
    api = api.set_column(4, "correlation_id", pa.array(corr, pa.int64()))
    api = api.set_column(5, "function", pa.array(fn, pa.string()))
    both = pa.concat_tables([ks, data.rocprof_kernels().cast(ks.schema)])
    return pt.write_trace(out, both, its, hip_api=api)


CASES = {"magika": case_magika, "hip": case_hip, "mixed": case_mixed, "edges": case_edges}

EXPECTED: dict[str, object] = {
    "edges": {
        "events": 462,
        "sha": "89155052f37d0326",
        "kernel_slices": 209,
        "iteration_slices": 6,
        "api_slices": 16,
        "flows": 1,
        "counter_tracks": 0,
        "counter_points": 0
    },
    "hip": {
        "events": 34,
        "sha": "4117275c60672e56",
        "kernel_slices": 9,
        "iteration_slices": 0,
        "api_slices": 8,
        "flows": 1,
        "counter_tracks": 0,
        "counter_points": 0
    },
    "magika": {
        "events": 1176,
        "sha": "6a6b028b0a5df6d8",
        "kernel_slices": 576,
        "iteration_slices": 6,
        "api_slices": 0,
        "flows": 0,
        "counter_tracks": 2,
        "counter_points": 12
    },
    "mixed": {
        "events": 1006,
        "sha": "53c8570a34c9aee9",
        "kernel_slices": 489,
        "iteration_slices": 6,
        "api_slices": 8,
        "flows": 1,
        "counter_tracks": 0,
        "counter_points": 0
    }
}


def _result(name: str, tmp: Path) -> dict[str, object]:
    s = CASES[name](tmp / f"{name}.pftrace")
    n, sha = te.digest(s.path)
    return {"events": n, "sha": sha, "kernel_slices": s.kernel_slices,
            "iteration_slices": s.iteration_slices, "api_slices": s.api_slices,
            "flows": s.flows, "counter_tracks": s.counter_tracks,
            "counter_points": s.counter_points}


@pytest.mark.parametrize("name", sorted(CASES))
def test_held_slices_keep_normalized_events_and_stats(name: str, tmp_path: Path) -> None:
    """The normalized event sequence (order included) and the TraceStats counts
    of each real-input case equal those recorded before the columnar rewrite."""
    assert _result(name, tmp_path) == EXPECTED[name]


@pytest.mark.parametrize("window", [1, 7, 64])
def test_small_encoding_windows_keep_the_same_events(window: int, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Held events encoded a few at a time (windows that split begins from their
    ends and cross track boundaries) give the recorded event sequence."""
    monkeypatch.setattr(pt, "WINDOW_EVENTS", window)
    assert _result("mixed", tmp_path) == EXPECTED["mixed"]


if __name__ == "__main__":
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        print(json.dumps({k: _result(k, Path(d)) for k in sorted(CASES)}, indent=4))
