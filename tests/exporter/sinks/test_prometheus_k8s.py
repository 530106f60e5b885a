"""The Prometheus sink with k8s_attribution: hw_gpu_* series carry the GPU
holder's pod/namespace/container, pid-keyed series carry their process's pod
and Slurm job, and without attribution no label is added."""

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


def _gauges() -> pa.RecordBatch:
    return schema.conform("gauge_sample", pa.table({
        "ts_ns": [1, 1, 1], "metric": ["hw.gpu.power"] * 3, "value": [100.0, 200.0, 50.0],
        "kind": ["gauge"] * 3, "unit": ["W"] * 3, "source": ["rocm-smi"] * 3,
        "gpu_index": [0, 1, None], "gpu_uuid": [None, None, "GPU-x"],
        "attributes": pa.array([[], [], []], pa.map_(pa.string(), pa.string()))}))


def _attr() -> pa.RecordBatch:
    return schema.conform("k8s_attribution", pa.table({
        "ts_ns": [1, 1, 1, 1], "kind": ["process", "process", "gpu", "gpu"],
        "pid": [10, 11, None, None], "gpu_index": [None, None, 1, None],
        "gpu_uuid": [None, None, None, "GPU-x"],
        "namespace": ["ml", None, "ml", "batch"], "pod": ["llama-0", None, "llama-0", "t-1"],
        "container": ["server", None, "server", "main"],
        "slurm_job_id": [None, "77", None, None]}))


def _sched(pid: int) -> pa.RecordBatch:
    return schema.conform("sched_sample", pa.table({
        "ts_ns": [1], "interval_ns": [1], "source": ["proc"], "pid": [pid], "tid": [pid],
        "comm": ["srv"], "runq_wait_ns": [5], "run_ns": [10], "voluntary_switches": [1],
        "involuntary_switches": [0]}))


def _result(pid: int) -> pa.RecordBatch:
    return schema.conform("analytics_result", pa.table({
        "ts_ns": [1], "host": ["a"], "model": ["m"], "pid": [pid], "iterations": [1],
        "kernel_count": [0], "kernel_spans_total": [0], "iterations_total": [3], "kar": [2.0]}))


def test_without_attribution_no_pod_labels() -> None:
    """No k8s_attribution: label sets are exactly as before."""
    st = PromState()
    st.ingest("gauge_sample", "a", _gauges())
    st.ingest("sched_sample", "a", _sched(10))
    got = _scrape(st)
    assert {k for s in got["hw_gpu_power_watts"] for k in s} == {"host", "gpu_index", "gpu_uuid"}
    assert got["aaco_sched_cpu_seconds_total"] == [{"host": "a", "pid": "10", "comm": "srv"}]


def test_gpu_series_carry_their_holder_by_index_or_uuid() -> None:
    """GPU 1 (by index) and GPU-x (by uuid) carry their holders; free GPU 0 has
    empty pod labels; another host's GPUs are not attributed."""
    st = PromState()
    st.ingest("gauge_sample", "a", _gauges())
    st.ingest("gauge_sample", "b", _gauges())
    st.ingest("k8s_attribution", "a", _attr())
    got = {(s["host"], s["gpu_index"] or s["gpu_uuid"]): (s["pod"], s["namespace"], s["container"])
           for s in _scrape(st)["hw_gpu_power_watts"]}
    assert got == {("a", "0"): ("", "", ""), ("a", "1"): ("llama-0", "ml", "server"),
                   ("a", "GPU-x"): ("t-1", "batch", "main"), ("b", "0"): ("", "", ""),
                   ("b", "1"): ("", "", ""), ("b", "GPU-x"): ("", "", "")}


def test_pid_series_carry_pod_and_slurm_job() -> None:
    """Sched, analytics and bottleneck-free families gain pod, namespace,
    container and slurm_job_id for the process."""
    st = PromState()
    st.ingest("k8s_attribution", "a", _attr())
    for pid in (10, 11, 12):
        st.ingest("sched_sample", "a", _sched(pid))
    st.ingest("analytics_result", "a", _result(10))
    got = _scrape(st)
    cpu = {s["pid"]: (s["pod"], s["namespace"], s["container"], s["slurm_job_id"])
           for s in got["aaco_sched_cpu_seconds_total"]}
    assert cpu == {"10": ("llama-0", "ml", "server", ""), "11": ("", "", "", "77"),
                   "12": ("", "", "", "")}
    (kar,) = got["aaco_kernel_amplification_ratio"]
    assert (kar["pod"], kar["namespace"], kar["container"]) == ("llama-0", "ml", "server")


def test_each_snapshot_replaces_the_previous() -> None:
    """A GPU released in the next snapshot loses its holder at once."""
    st = PromState()
    st.ingest("gauge_sample", "a", _gauges())
    st.ingest("k8s_attribution", "a", _attr())
    st.ingest("k8s_attribution", "a", schema.conform("k8s_attribution", pa.table({
        "ts_ns": pa.array([], pa.int64()), "kind": pa.array([], pa.string())})))
    assert {s["pod"] for s in _scrape(st)["hw_gpu_power_watts"]} == {""}


def test_analytics_rows_naming_a_raw_dotted_host_find_its_attribution() -> None:
    """Message hosts arrive sanitised (node_a), analytics rows name the raw host
    (node.a): the row still gets its process's pod."""
    st = PromState()
    st.ingest("k8s_attribution", "node_a", _attr())
    st.ingest("analytics_result", "node_a", schema.conform("analytics_result", pa.table({
        "ts_ns": [1], "host": ["node.a"], "model": ["m"], "pid": [10], "iterations": [1],
        "kernel_count": [0], "kernel_spans_total": [0], "iterations_total": [3],
        "kar": [2.0]})))
    (kar,) = _scrape(st)["aaco_kernel_amplification_ratio"]
    assert (kar["host"], kar["pod"]) == ("node.a", "llama-0")
