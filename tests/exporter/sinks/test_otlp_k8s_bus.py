"""Pod / Slurm attributes on the OTLP copy on the bus: the requests the bridge
builds (the stock otlp_proto encoders) gain k8s attributes on pid points,
GPU-holder points and iteration spans; nothing changes without attribution."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from exporter.schema import conform
from exporter.sinks.otlp_bus import OtlpBusBridge
from exporter.sinks.otlp_k8s import K8sAttributes, annotate_metrics, annotate_traces
from exporter.sinks.otlp_proto import SpanPolicy, metrics_request, traces_request
from tests.support import load_path as _load

HERE = Path(__file__).parent
data = _load("aaco_sink_testdata", HERE / "testdata" / "sinkdata.py")
rx = _load("aaco_otlp_receiver", HERE / "otlp_receiver.py")
POD = {"k8s.namespace.name": "ml", "k8s.pod.name": "llama-0", "k8s.container.name": "server"}


def _attribution(pid: int) -> pa.RecordBatch:
    return conform("k8s_attribution", pa.table({
        "ts_ns": [1, 1], "kind": ["process", "gpu"], "pid": [pid, None],
        "gpu_index": [None, 1], "namespace": ["ml", "ml"], "pod": ["llama-0", "llama-0"],
        "container": ["server", "server"], "slurm_job_id": ["77", None]}))


def _tables(pid: int) -> tuple[pa.Table, pa.Table]:
    gauges = pa.Table.from_batches([conform("gauge_sample", pa.table({
        "ts_ns": [1, 1], "metric": ["hw.gpu.power"] * 2, "value": [100.0, 200.0],
        "kind": ["gauge"] * 2, "unit": ["W"] * 2, "source": ["rocm-smi"] * 2,
        "gpu_index": [0, 1]}))])
    result = pa.Table.from_batches([conform("analytics_result", pa.table({
        "ts_ns": [1], "host": ["n"], "model": ["m"], "pid": [pid], "iterations": [1],
        "kernel_count": [0], "kernel_spans_total": [0], "iterations_total": [3],
        "kar": [2.0]}))])
    return result, gauges


def test_metrics_points_gain_pod_attributes_by_pid_and_gpu() -> None:
    """The pid's points and GPU 1's get the pod (and the pid's slurm.job.id);
    GPU 0's do not."""
    attrs = K8sAttributes()
    attrs.update(_attribution(42), "n")
    req = metrics_request(*_tables(42), "n")
    annotate_metrics(req, "n", attrs)
    pts = rx.metric_points([req])
    (kar,) = [a for a, _, _ in pts["aaco.kernel_amplification"]]
    assert {k: kar.get(k) for k in POD} == POD and kar["slurm.job.id"] == "77"
    power = {a["aaco.gpu.index"]: a for a, _, _ in pts["hw.gpu.power"]}
    assert {k: power[1].get(k) for k in POD} == POD
    assert not set(POD) & set(power[0])


def test_iteration_spans_gain_pod_attributes_once() -> None:
    """Iteration spans of the pid carry the pod; annotating twice adds nothing."""
    ks, its = data.magika_tables(runs=2)
    pid = its["pid"][0].as_py()
    bridge = OtlpBusBridge()
    bridge.ingest("k8s_attribution", "n", _attribution(pid))
    req = traces_request(ks, its, "n", SpanPolicy())
    annotate_traces(req, "n", bridge.k8s)
    annotate_traces(req, "n", bridge.k8s)
    roots = [s for _, s in rx.spans_of([req]) if not s.parent_span_id]
    assert len(roots) == 2
    for s in roots:
        keys = [kv.key for kv in s.attributes]
        assert len(keys) == len(set(keys))
        a = rx.attrs(s.attributes)
        assert {k: a.get(k) for k in POD} == POD and a["slurm.job.id"] == "77"


def test_without_attribution_requests_are_unchanged() -> None:
    """No k8s_attribution: annotate leaves the request byte-identical."""
    req = metrics_request(*_tables(42), "n")
    before = req.SerializeToString()
    annotate_metrics(req, "n", K8sAttributes())
    assert req.SerializeToString() == before
