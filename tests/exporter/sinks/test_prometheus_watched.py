"""The Prometheus sink for discovered processes: the watched-process info
family follows each discovery snapshot, and scheduler series carry comm."""

from __future__ import annotations

import pyarrow as pa
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter import schema
from exporter.sinks.prometheus import PromState


def _scrape(state: PromState) -> dict[str, list[dict[str, str]]]:
    reg = CollectorRegistry()
    reg.register(state)
    out: dict[str, list[dict[str, str]]] = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append(dict(s.labels))
    return out


def _procs(rows: list[tuple[int, str, str]]) -> pa.RecordBatch:
    return schema.conform("process_info", pa.table({
        "ts_ns": [1] * len(rows), "pid": [r[0] for r in rows], "comm": [r[1] for r in rows],
        "reason": [r[2] for r in rows], "create_ns": [0] * len(rows)}))


def test_watched_process_info_is_replaced_by_each_snapshot_per_host() -> None:
    """Each process_info batch is its host's whole set: an exited process's
    series is gone at the next scrape; other hosts are untouched."""
    st = PromState()
    st.ingest("process_info", "a", _procs([(10, "vllm", "kfd"), (11, "python", "child")]))
    st.ingest("process_info", "b", _procs([(20, "triton", "render")]))
    got = _scrape(st)["aaco_watched_process_info"]
    assert sorted((d["host"], d["pid"], d["comm"], d["reason"]) for d in got) == [
        ("a", "10", "vllm", "kfd"), ("a", "11", "python", "child"),
        ("b", "20", "triton", "render")]
    st.ingest("process_info", "a", _procs([(10, "vllm", "kfd")]))
    got = _scrape(st)["aaco_watched_process_info"]
    assert sorted((d["host"], d["pid"]) for d in got) == [("a", "10"), ("b", "20")]


def test_sched_series_carry_the_main_threads_comm() -> None:
    """aaco_sched_* series are labelled with the process's comm: its main
    thread's (tid == pid) rather than a worker thread's name."""
    st = PromState()
    st.ingest("sched_sample", "a", schema.conform("sched_sample", pa.table({
        "ts_ns": [1, 1], "interval_ns": [10, 10], "source": ["proc", "proc"],
        "pid": [10, 10], "tid": [11, 10], "comm": ["worker-0", "vllm"],
        "runq_wait_ns": [1, 2], "run_ns": [3, 4], "voluntary_switches": [0, 0],
        "involuntary_switches": [0, 0]})))
    got = _scrape(st)["aaco_sched_runqueue_wait_seconds_total"]
    assert got == [{"host": "a", "pid": "10", "comm": "vllm"}]


def test_a_model_result_replaces_the_pids_sched_only_series() -> None:
    """When a pid first seen by its scheduler samples (model "") gets results
    for a model, its model-less series go at once, so SII is not doubled."""
    st = PromState()

    def result(model: str | None) -> pa.RecordBatch:
        return schema.conform("analytics_result", pa.table({
            "ts_ns": [1], "host": ["a"], "model": [model], "pid": [10], "iterations": [0],
            "kernel_count": [0], "kernel_spans_total": [0], "iterations_total": [0],
            "sii": [0.1], "comm": ["srv"]}))

    st.ingest("analytics_result", "a", result(None))
    st.ingest("analytics_result", "a", result("m"))
    got = _scrape(st)["aaco_scheduler_interference_ratio"]
    assert got == [{"host": "a", "model": "m", "pid": "10", "comm": "srv"}]


def test_kar_source_is_an_info_series_and_kar_keeps_its_labels() -> None:
    """kar_source goes on aaco_kar_source_info (value 1), so the KAR series keep
    their (host, model, pid) identity for dashboards and recording rules;
    kernels per iteration is exported without a graph (KAR null)."""
    st = PromState()
    st.ingest("analytics_result", "a", schema.conform("analytics_result", pa.table({
        "ts_ns": [1, 1], "host": ["a", "a"], "model": ["m", "vecops"], "pid": [10, 11],
        "iterations": [2, 2], "kernel_count": [8, 8], "kernel_spans_total": [8, 8],
        "iterations_total": [2, 2], "kar": [2.0, None], "kernels_per_iteration": [4.0, 4.0],
        "kar_source": ["instrumented_iteration", "roctx"]})))
    got = _scrape(st)
    assert got["aaco_kernel_amplification_ratio"] == [{"host": "a", "model": "m", "pid": "10"}]
    assert got["aaco_kar_source_info"] == [
        {"host": "a", "model": "m", "pid": "10", "kar_source": "instrumented_iteration"},
        {"host": "a", "model": "vecops", "pid": "11", "kar_source": "roctx"}]
    assert len(got["aaco_kernels_per_iteration"]) == 2
