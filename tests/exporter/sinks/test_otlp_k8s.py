"""The OTLP sink with k8s_attribution, against a real gRPC receiver: iteration
span resources carry the process's k8s.pod.name / k8s.namespace.name /
k8s.container.name / slurm.job.id, analytics points (by pid) and hw.gpu.*
points (by the GPU's holder) carry the same attributes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from exporter.schema import conform
from exporter.sinks.otlp import OtlpConfig, OtlpSink
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


def test_iteration_resources_and_points_carry_pod_attributes() -> None:
    """Spans of the attributed pid: pod resource; GPU 1 points: pod attributes;
    GPU 0 points: none; the pid's analytics points: pod + slurm.job.id."""
    ks, its = data.magika_tables(runs=2)
    pid = its["pid"][0].as_py()
    gauges = conform("gauge_sample", pa.table({
        "ts_ns": [1, 1], "metric": ["hw.gpu.power"] * 2, "value": [100.0, 200.0],
        "kind": ["gauge"] * 2, "unit": ["W"] * 2, "source": ["rocm-smi"] * 2,
        "gpu_index": [0, 1]}))
    result = conform("analytics_result", pa.table({
        "ts_ns": [1], "host": ["node-1"], "model": ["m"], "pid": [pid], "iterations": [1],
        "kernel_count": [0], "kernel_spans_total": [0], "iterations_total": [3], "kar": [2.0]}))
    with rx.GrpcReceiver() as r:
        sink = OtlpSink(OtlpConfig(endpoint=r.endpoint, insecure=True, sample_every=1,
                                   export_interval_s=0.2))
        try:
            sink.ingest("k8s_attribution", _attribution(pid), "node-1")
            sink.ingest("kernel_span", ks, "node-1")
            sink.ingest("iteration_span", its, "node-1")
            sink.ingest("gauge_sample", gauges, "node-1")
            sink.ingest("analytics_result", result, "node-1")
            sink.flush()
            assert r.wait_for(lambda: bool(r.traces) and bool(r.metrics))
        finally:
            sink.close()
        spans = rx.spans_of(r.traces)
        points = rx.metric_points(r.metrics)
    roots = [(res, s) for res, s in spans if not s.parent_span_id]
    assert len(roots) == 2
    for res, _ in roots:
        assert {k: res.get(k) for k in POD} == POD and res["slurm.job.id"] == "77"
    power = {int(a["aaco.gpu.index"]): a for a, _, _ in points["hw.gpu.power"]}
    assert {k: power[1].get(k) for k in POD} == POD
    assert not set(POD) & set(power[0])
    kar = [a for a, _, _ in points["aaco.kernel_amplification"]
           if a.get("process.pid") == pid]
    assert kar and all({k: a.get(k) for k in POD} == POD and a["slurm.job.id"] == "77"
                       for a in kar)


def test_gpu_point_attributed_later_replaces_its_unattributed_point() -> None:
    """A GPU gauge seen before its holder is known is exported once, with the
    pod, after attribution arrives (no stale pod-less duplicate)."""
    gauges = conform("gauge_sample", pa.table({
        "ts_ns": [1], "metric": ["hw.gpu.power"], "value": [100.0], "kind": ["gauge"],
        "unit": ["W"], "source": ["rocm-smi"], "gpu_index": [1]}))
    with rx.GrpcReceiver() as r:
        sink = OtlpSink(OtlpConfig(endpoint=r.endpoint, insecure=True, export_interval_s=60))
        try:
            sink.ingest("gauge_sample", gauges, "node-1")
            sink.ingest("k8s_attribution", _attribution(1), "node-1")
            sink.ingest("gauge_sample", gauges, "node-1")
            sink.flush()
            assert r.wait_for(lambda: bool(r.metrics))
        finally:
            sink.close()
        points = rx.metric_points(r.metrics[-1:])["hw.gpu.power"]
    assert [a.get("k8s.pod.name") for a, _, _ in points] == ["llama-0"]
