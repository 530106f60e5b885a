"""The online engine's definitions, checked against hand computations."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from stream_analytics.engine import Analytics


def _kernels(rows: list[tuple[int, int, int, str]], model: str = "m", pid: int = 7,
             **extra: list[object]) -> pa.Table:
    it, s, e, fam = zip(*rows, strict=True)
    cols: dict[str, object] = {"model": [model] * len(rows), "pid": [pid] * len(rows),
                               "iteration": list(it), "start_ns": list(s), "end_ns": list(e),
                               "duration_ns": [b - a for a, b in zip(s, e, strict=True)],
                               "kernel_family": list(fam)}
    cols.update(extra)
    return pa.table(cols)


def _iters(rows: list[tuple[int, int, int]], model: str = "m", pid: int = 7) -> pa.Table:
    it, s, e = zip(*rows, strict=True)
    return pa.table({"model": [model] * len(rows), "pid": [pid] * len(rows),
                     "iteration": list(it), "start_ns": list(s), "end_ns": list(e),
                     "duration_ns": [b - a for a, b in zip(s, e, strict=True)]})


def _two_iterations(eng: Analytics) -> None:
    eng.ingest("graph_info", "h", pa.table({"model": ["m"], "node_count": [4], "pid": [7]}))
    # iteration 0: [0, 100]; kernels [10,40] [30,60] (overlap) [70,80] -> busy 50+10 = 60
    # iteration 1: [200, 300]; kernels [200,250] [260,300] -> busy 90
    eng.ingest("kernel_span", "h", _kernels([(0, 10, 40, "gemm"), (0, 30, 60, "gemm"),
                                             (0, 70, 80, "copy"), (1, 200, 250, "gemm"),
                                             (1, 260, 300, "copy")]))
    eng.ingest("iteration_span", "h", _iters([(0, 0, 100), (1, 200, 300)]))


def test_kar_lts_active_ratio_and_latency_match_hand_computation() -> None:
    eng = Analytics(window_s=None)
    _two_iterations(eng)
    r = eng.evaluate(("h", 7, "m"))
    # KAR = 5 kernels / 2 iterations / 4 nodes
    assert r["kar"] == pytest.approx(5 / 2 / 4)
    # kernel time = 30+30+10+50+40 = 160; gaps = (100-60) + (100-90) = 50
    assert (r["kernel_time_ns"], r["launch_overhead_ns"]) == (160, 50)
    assert r["launch_tax"] == pytest.approx(50 / 160)
    # active = busy (60 + 90) / sum of iteration spans (200)
    assert r["gpu_active_ratio"] == pytest.approx(150 / 200)
    assert r["latency_mean_s"] == pytest.approx(100e-9)
    assert r["kernel_spans_total"] == 5 and r["iterations_total"] == 2
    assert r["iteration_ns_total"] == 200  # cumulative, for non-overlapping latency means
    assert dict(zip(r["family_names"], r["family_spans_total"], strict=True)) == {
        "copy": 2, "gemm": 3}


def test_launch_columns_take_precedence_over_gaps_for_gpu_traces() -> None:
    """With a HIP join, overhead = sum(launch_api_ns + launch_delay_ns)."""
    eng = Analytics(window_s=None)
    eng.ingest("kernel_span", "h", _kernels(
        [(-1, 1000, 1100, "gemm"), (-1, 1200, 1500, "copy")], model="", pid=3,
        launch_api_ns=[20, 30], launch_delay_ns=[5, None]))
    eng.settle()  # no iteration span will come: the end of the session resolves held kernels
    r = eng.evaluate(("h", 3, ""))
    assert r["kernel_time_ns"] == 400 and r["launch_overhead_ns"] == 55
    assert r["launch_tax"] == pytest.approx(55 / 400)
    assert r["gpu_active_ratio"] == pytest.approx(400 / 500)  # no iterations: first->last
    assert r.get("kar") is None and r["iterations"] == 0


def test_launch_tax_is_unknown_without_a_launch_trace_or_iterations() -> None:
    """A GPU kernel trace alone (no HIP launch join, no iteration spans) says
    nothing about launch overhead: LTS is None (reported n/a), not 0, so it
    neither shows 0 on ``aaco_launch_tax_ratio`` nor counts as compute-bound
    evidence. One launch-joined kernel makes it known again."""
    eng = Analytics(window_s=None)
    eng.ingest("kernel_span", "h", _kernels(
        [(-1, 1000, 1100, "gemm"), (-1, 1200, 1500, "copy")], model="", pid=3))
    eng.settle()
    r = eng.evaluate(("h", 3, ""))
    assert r["kernel_time_ns"] == 400 and r["kernel_count"] == 2
    assert r["launch_overhead_ns"] is None and r["launch_tax"] is None
    eng.ingest("kernel_span", "h", _kernels(
        [(-1, 1600, 1700, "gemm")], model="", pid=3, launch_api_ns=[10], launch_delay_ns=[4]))
    eng.settle()
    r = eng.evaluate(("h", 3, ""))
    assert r["launch_overhead_ns"] == 14 and r["launch_tax"] == pytest.approx(14 / 500)


def test_sii_joins_scheduler_samples_by_pid() -> None:
    eng = Analytics(window_s=None)
    _two_iterations(eng)
    eng.ingest("sched_sample", "h", pa.table({
        "ts_ns": [400, 400, 400], "pid": [7, 7, 8], "runq_wait_ns": [30, 0, 999],
        "run_ns": [70, 0, 1], "interval_ns": [100, 100, 100], "involuntary_switches": [2, 0, 5]}))
    r = eng.evaluate(("h", 7, "m"))
    assert r["sii"] == pytest.approx(30 / 100)  # the idle thread does not dilute it


def test_kernels_split_across_messages_give_the_same_busy_union() -> None:
    whole, split = Analytics(window_s=None), Analytics(window_s=None)
    _two_iterations(whole)
    split.ingest("graph_info", "h", pa.table({"model": ["m"], "node_count": [4], "pid": [7]}))
    split.ingest("kernel_span", "h", _kernels([(0, 10, 40, "gemm")]))
    split.ingest("kernel_span", "h", _kernels([(0, 30, 60, "gemm"), (0, 70, 80, "copy")]))
    split.ingest("kernel_span", "h", _kernels([(1, 200, 250, "gemm"), (1, 260, 300, "copy")]))
    split.ingest("iteration_span", "h", _iters([(0, 0, 100), (1, 200, 300)]))
    a, b = whole.evaluate(("h", 7, "m")), split.evaluate(("h", 7, "m"))
    assert (a["busy_ns"], a["launch_tax"]) == (b["busy_ns"], b["launch_tax"])


def test_rolling_window_keeps_only_recent_iterations_but_totals_are_cumulative() -> None:
    eng = Analytics(window_s=1e-7)  # 100 ns
    _two_iterations(eng)
    r = eng.evaluate(("h", 7, "m"))
    assert r["iterations"] == 1 and r["kernel_count"] == 2
    assert r["kernel_spans_total"] == 5


def test_checkpoint_round_trip_restores_identical_results() -> None:
    eng = Analytics(window_s=None)
    _two_iterations(eng)
    back = Analytics.from_dict(json.loads(json.dumps(eng.to_dict())))
    assert back.evaluate(("h", 7, "m")) == eng.evaluate(("h", 7, "m"))


def test_vectorised_segmented_union_equals_the_per_group_union() -> None:
    """The one-pass segmented union equals a per-group loop, carries included."""
    import numpy as np

    from stream_analytics.engine import _busy_union, _segmented_union

    rng = np.random.default_rng(7)
    for _ in range(200):
        groups = int(rng.integers(1, 8))
        counts = rng.integers(1, 12, groups)
        starts, ends, g_start, carry = [], [], [], []
        for c in counts:
            base = int(rng.integers(0, 10**12))
            s = np.sort(base + rng.integers(0, 10_000, c))
            e = s + rng.integers(0, 3_000, c)
            starts.append(s)
            ends.append(e)
            g_start.append(s[0])
            carry.append(s[0] + int(rng.integers(-500, 4_000)) if rng.random() < 0.5 else s[0])
        start, end = np.concatenate(starts), np.concatenate(ends)
        idx = np.concatenate([[0], np.cumsum(counts)[:-1]])
        busy, new = _segmented_union(start, end, idx, counts, np.array(g_start),
                                     np.array(carry, dtype=np.int64))
        for j, (a, c) in enumerate(zip(idx, counts, strict=True)):
            want_busy, want_max = _busy_union(start[a:a + c], end[a:a + c], int(carry[j]))
            assert (int(busy[j]), int(new[j])) == (want_busy, max(want_max, int(carry[j])))


def test_device_type_is_cpu_until_the_pid_runs_a_gpu_kernel_and_survives_a_checkpoint() -> None:
    """ANALYTICS_RESULT ``device_type``: null for a key with no kernel span,
    ``"cpu"`` while every kernel of its pid ran on the CPU (ORT CPU EP nodes;
    a null ``device_type`` counts as CPU), ``"gpu"`` from the pid's first
    GPU kernel on, whichever of its keys that kernel went to; a checkpoint
    round trip keeps it, and another pid is not affected."""
    eng = Analytics(window_s=None)
    eng.ingest("iteration_span", "h", _iters([(0, 0, 100)]))
    assert eng.evaluate(("h", 7, "m"))["device_type"] is None
    eng.ingest("kernel_span", "h", _kernels([(0, 10, 40, "gemm"), (0, 50, 60, "copy")],
                                            device_type=["cpu", None]))
    eng.ingest("kernel_span", "h", _kernels([(0, 10, 20, "gemm")], pid=8,
                                            device_type=["cpu"]))
    assert eng.evaluate(("h", 7, "m"))["device_type"] == "cpu"
    eng.ingest("kernel_span", "h", _kernels([(1, 200, 250, "gemm")], model="other",
                                            device_type=["gpu"]))
    back = Analytics.from_dict(json.loads(json.dumps(eng.to_dict())))
    for e in (eng, back):
        assert e.evaluate(("h", 7, "m"))["device_type"] == "gpu"
        assert e.evaluate(("h", 7, "other"))["device_type"] == "gpu"
        assert e.evaluate(("h", 8, "m"))["device_type"] == "cpu"
