"""roctx marker ranges around runs give GPU kernels their iteration (KAR from
GPU dispatches). Real kernel rows (testdata/kernel_trace.csv, rocprofv3 doc
sample) with a synthetic marker trace around their timestamps
(testdata/roctx_synthetic/marker_api_trace.csv, see PROVENANCE.md):

==========================  =================================  ===========================
range (file order: by end)  [start, end] - 1550151853000000    kernels (dispatch id, start)
==========================  =================================  ===========================
run:vecops                  [30000, 40000]  nested: dropped    -
inference:vecops            [29000, 76000]  -> iteration 0     1 (29637) 2 (42437)
                                                               3 (52877) 4 (64037)
inference:vecops            [80000, 162000] -> iteration 1     5 (82957) 6 (94357)
                                                               11 (138477) 12 (148397)
iteration (a mark)          [170000, 170000] zero length       -
preprocess                  [162500, 180000] name not matched  13 (164197): no iteration
==========================  =================================  ===========================
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from collectors.rocprof.markers import (
    ITERATION_RE,
    attribute_kernels,
    iteration_ranges,
    read_marker_regions,
)
from collectors.rocprof.rejects import Rejects
from collectors.rocprof.replay import iter_file_spans, load_paths
from stream_analytics.engine import Analytics

DATA = Path(__file__).resolve().parents[3] / "collectors" / "rocprof" / "testdata"
MARKERS = DATA / "roctx_synthetic" / "marker_api_trace.csv"
T0 = 1550151853000000
PID = 834304


def _evaluate(emits: list[Any]) -> tuple[Analytics, dict[str, Any]]:
    """The engine after folding ``emits`` (with a 2-node ``vecops`` graph), and
    its settled result for the run's pid."""
    eng = Analytics(window_s=None)
    eng.ingest("graph_info", "h", pa.table({"model": ["vecops"], "node_count": [2]}))
    for e in emits:
        eng.ingest(e.signal, "h", e.batch)
    eng.settle()
    return eng, eng.evaluate(("h", PID, "vecops"))


@pytest.mark.parametrize(("name", "match"), [
    ("run", True), ("run:bert", True), ("inference 12", True), ("Inference", True),
    ("aaco.iteration:resnet50", True), ("step", True), ("infer-7", True),
    ("ProfilerStep#3", True), ("running", False), ("run_setup", False),
    ("preprocess", False), ("hipLaunchKernel", False), ("my run", False),
])




def test_default_pattern_matches_run_names_as_whole_words(name: str, match: bool) -> None:
    """The default iteration pattern: (aaco.)? + iteration|inference|infer|run|step
    as a whole word (not followed by a letter, digit or _), or ProfilerStep#N."""
    assert (ITERATION_RE.search(name) is not None) is match


def test_marker_trace_gives_iteration_ranges_with_model_suffix() -> None:
    """Two 'inference:vecops' ranges become iterations 0 and 1 of model vecops;
    the nested 'run:vecops' counts overlapping_marker; the zero-length mark and
    'preprocess' are not iterations."""
    rejects = Rejects()
    r = iteration_ranges(read_marker_regions(MARKERS, rejects), rejects)
    assert r.select(["pid", "iteration", "model", "source", "start_ns", "end_ns"]).to_pylist() == [
        {"pid": PID, "iteration": 0, "model": "vecops", "source": "roctx",
         "start_ns": T0 + 29000, "end_ns": T0 + 76000},
        {"pid": PID, "iteration": 1, "model": "vecops", "source": "roctx",
         "start_ns": T0 + 80000, "end_ns": T0 + 162000}]
    assert rejects.counts == {"overlapping_marker": 1}


def test_model_option_and_pattern_are_configurable() -> None:
    """Without a ':' suffix the model option names the model; a custom pattern
    selects other names (here 'preprocess' only)."""
    regions = pa.table({"pid": [1, 1], "tid": [1, 1], "name": ["run", "preprocess"],
                        "start_ns": [0, 20], "end_ns": [10, 30]})
    r = iteration_ranges(regions, model="bert")
    assert r.select(["iteration", "model", "start_ns"]).to_pylist() == [
        {"iteration": 0, "model": "bert", "start_ns": 0}]
    r = iteration_ranges(regions, pattern=re.compile("^preprocess$"), first_index={1: 5})
    assert r.select(["iteration", "model", "start_ns"]).to_pylist() == [
        {"iteration": 5, "model": "", "start_ns": 20}]


def test_kernels_without_a_pid_take_the_single_marker_pid() -> None:
    """testdata/kernel_trace.csv has no pid (no <pid>/ directory): its kernels
    held by a range take the ranges' only pid; kernel 13 stays without one."""
    rejects = Rejects()
    ranges = iteration_ranges(read_marker_regions(MARKERS, rejects), rejects)
    k = pa.Table.from_batches(list(iter_file_spans(DATA / "kernel_trace.csv", rejects)))
    out, counts = attribute_kernels(k, ranges)
    got = sorted(zip(out["dispatch_id"].to_pylist(), out["iteration"].to_pylist(),
                     out["pid"].to_pylist(), out["model"].to_pylist(), strict=True))
    assert got == [(1, 0, PID, "vecops"), (2, 0, PID, "vecops"), (3, 0, PID, "vecops"),
                   (4, 0, PID, "vecops"), (5, 1, PID, "vecops"), (6, 1, PID, "vecops"),
                   (11, 1, PID, "vecops"), (12, 1, PID, "vecops"), (13, None, None, None)]
    assert counts.tolist() == [4, 4]


def test_replay_with_marker_trace_gives_exact_kar_from_gpu_kernels(tmp_path: Path) -> None:
    """rocprofv3 layout <pid>/kernel_trace.csv + marker_api_trace.csv: replay
    emits the kernels with iterations and the roctx iteration spans; the engine
    (graph of 2 nodes) gives kernels/iteration = 8 / 2 = 4, KAR = 4 / 2 = 2,
    kar_source roctx; kernel 13 (outside every range) counts in kernel_count
    (9) and as unattributed_kernel, not in KAR. Latency: (47 + 82) / 2 us."""
    run = tmp_path / str(PID)
    run.mkdir()
    shutil.copy(DATA / "kernel_trace.csv", run / "kernel_trace.csv")
    shutil.copy(MARKERS, run / "marker_api_trace.csv")
    rejects = Rejects()
    emits = list(load_paths([tmp_path], rejects))
    assert [e.signal for e in emits] == ["kernel_span", "iteration_span"]
    spans = emits[1].batch.to_pylist()
    assert [(s["iteration"], s["kernel_count"], s["duration_ns"], s["source"]) for s in spans] \
        == [(0, 4, 47000, "roctx"), (1, 4, 82000, "roctx")]
    assert emits[1].key == f"rocprof:{run / 'marker_api_trace.csv'}:roctx"
    assert rejects.counts == {"overlapping_marker": 1}
    eng, r = _evaluate(emits)
    assert (r["iterations"], r["kernel_count"], r["kernels_per_iteration"], r["kar"],
            r["kar_source"]) == (2, 9, 4.0, 2.0, "roctx")
    assert r["latency_mean_s"] == pytest.approx(64.5e-6)
    assert eng.drops["unattributed_kernel"] == 1
    assert list(eng.keys) == [("h", PID, "vecops")]


def test_follower_emits_roctx_ranges_and_the_engine_joins_later_kernels(
        tmp_path: Path) -> None:
    """Live follow: the first poll sees the marker trace up to iteration 0 and
    the whole kernel trace, so kernels 1-4 get iteration 0 in the parser and
    5, 6, 11, 12 none; the second poll reads iteration 1 (numbering continues)
    and the engine joins those kernels online: the same KAR as replay."""
    from collectors.rocprof.follow import DirFollower

    run = tmp_path / "host" / str(PID)
    run.mkdir(parents=True)
    lines = MARKERS.read_bytes().splitlines(keepends=True)
    (run / "marker_api_trace.csv").write_bytes(b"".join(lines[:3]))
    shutil.copy(DATA / "kernel_trace.csv", run / "kernel_trace.csv")
    f = DirFollower(tmp_path)
    first = f.poll()
    assert [e.signal for e in first] == ["iteration_span", "kernel_span"]
    assert first[0].batch.to_pylist()[0]["iteration"] == 0
    k = first[1].batch
    assert sorted(zip(k["dispatch_id"].to_pylist(), k["iteration"].to_pylist(),
                      strict=True)) == [(1, 0), (2, 0), (3, 0), (4, 0), (5, None), (6, None),
                                        (11, None), (12, None), (13, None)]
    with (run / "marker_api_trace.csv").open("ab") as fh:
        fh.write(b"".join(lines[3:]))
    second = f.poll()
    assert [(e.signal, e.batch.column("iteration").to_pylist()) for e in second] == [
        ("iteration_span", [1])]
    assert f.rejects.counts == {"overlapping_marker": 1}
    eng = Analytics(window_s=60.0)
    eng.ingest("graph_info", "h", pa.table({"model": ["vecops"], "node_count": [2]}))
    for e in first + second:
        eng.ingest(e.signal, "h", e.batch)
    eng.settle()
    r = eng.evaluate(("h", PID, "vecops"))
    assert (r["iterations"], r["kernel_count"], r["kernels_per_iteration"], r["kar"],
            r["kar_source"]) == (2, 9, 4.0, 2.0, "roctx")


def _rocpd_with_markers(path: Path) -> Path:
    from tests.collectors.rocprof.rocpd_synthetic import build_synthetic_rocpd

    return build_synthetic_rocpd(path, markers=MARKERS)


def test_rocpd_marker_regions_give_exact_kar(tmp_path: Path) -> None:
    """A (synthetic) rocpd database of the same kernels, with the synthetic
    marker ranges as MARKER_CORE_API regions, goes through the same join and
    gives what the CSV replay gives. Its assembly also puts
    api/hip_runtime_trace.csv (another recorded run, 4.1 days apart) in the
    process: the hipLaunchKernel of correlation id 5 is not taken as dispatch
    5's launch (``launch_mismatch``), so dispatch 5 joins by its start.
    Iteration 0 = 1-4, iteration 1 = 5, 6, 11, 12; kernels/iteration = 8/2 =
    4, KAR = 4/2 = 2; dispatch 13 counts as unattributed_kernel."""
    db = _rocpd_with_markers(tmp_path / "run_results.db")
    rejects = Rejects()
    emits = list(load_paths([db], rejects))
    assert [e.signal for e in emits] == ["kernel_span", "iteration_span"]
    assert emits[1].key == f"rocprof:{db}:roctx"
    assert [(s["iteration"], s["kernel_count"], s["source"])
            for s in emits[1].batch.to_pylist()] == [(0, 4, "roctx"), (1, 4, "roctx")]
    k = emits[0].batch
    assert sorted(zip(k["dispatch_id"].to_pylist(), k["iteration"].to_pylist(),
                      strict=True)) == [(1, 0), (2, 0), (3, 0), (4, 0), (5, 1), (6, 1),
                                        (11, 1), (12, 1), (13, None)]
    assert rejects.counts == {"overlapping_marker": 1}
    assert rejects.notes == {"launch_mismatch": 1}
    eng, r = _evaluate(emits)
    assert (r["iterations"], r["kernel_count"], r["kernels_per_iteration"], r["kar"],
            r["kar_source"]) == (2, 9, 4.0, 2.0, "roctx")
    assert eng.drops["unattributed_kernel"] == 1


def test_follower_reads_rocpd_marker_regions_with_the_database(tmp_path: Path) -> None:
    """The follower emits a complete database's kernels with their iterations
    and its roctx iteration spans (same join as replay)."""
    from collectors.rocprof.follow import DirFollower

    _rocpd_with_markers(tmp_path / "run_results.db")
    now = [0.0]
    f = DirFollower(tmp_path, settle_s=1.0, clock=lambda: now[0])
    assert f.poll() == []  # first sight: not settled yet
    now[0] = 2.0
    out = f.poll()
    assert [e.signal for e in out] == ["kernel_span", "iteration_span"]
    assert out[1].batch.column("kernel_count").to_pylist() == [4, 4]


def test_regions_without_an_iteration_name_give_no_ranges() -> None:
    """Marker regions none of which matches (the real api/marker_api_trace.csv:
    'hipMemcpy', 'before hipLaunchKernel'...) give an empty ranges table."""
    rejects = Rejects()
    r = iteration_ranges(read_marker_regions(DATA / "api" / "marker_api_trace.csv", rejects),
                         rejects)
    assert r.num_rows == 0 and rejects.total == 0
