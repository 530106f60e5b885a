"""exporter.sinks.otlp_proto: OTLP requests decode with stock protobuf classes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from exporter.schema import ITERATION_SPAN, conform
from exporter.sinks.otlp_proto import SpanPolicy, metrics_request, plan_spans, traces_request
from tests.support import load_path as _load

HERE = Path(__file__).parent


data = _load("aaco_sink_testdata", HERE / "testdata" / "sinkdata.py")
rx = _load("aaco_otlp_receiver", HERE / "otlp_receiver.py")


def _roundtrip_traces(req: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest.FromString(req.SerializeToString())


def test_policy_keeps_all_kernels_of_sampled_iterations_and_top_k_of_others() -> None:
    """1-in-3 iterations keep all 96 magika kernels, the others their 5 longest."""
    ks, its = data.magika_tables()
    plan = plan_spans(ks, its, SpanPolicy(sample_every=3, top_k=5))
    assert plan.iter_sampled.tolist() == [True, False, False, True, False, False]
    assert plan.iter_kept.tolist() == [96, 5, 5, 96, 5, 5]
    assert len(plan.kernel_rows) == 212 and plan.kernels_dropped == 576 - 212
    dur = ks.column("duration_ns").to_numpy()
    it = ks.column("iteration").to_numpy()
    for i in (1, 2, 4, 5):  # the kept ones are the longest of their iteration
        kept = plan.kernel_rows[it[plan.kernel_rows] == i]
        others = [d for r, d in enumerate(dur) if it[r] == i and r not in set(kept)]
        assert dur[kept].min() >= max(others)


def test_trace_request_roundtrip_has_iteration_roots_and_kernel_children() -> None:
    """Serialized request decodes; kernels' parent_span_id is their iteration's span_id."""
    ks, its = data.magika_tables()
    req = _roundtrip_traces(traces_request(ks, its, "node-1", SpanPolicy(3, 5)))
    spans = rx.spans_of([req])
    roots = [s for _, s in spans if not s.parent_span_id]
    kids = [s for _, s in spans if s.parent_span_id]
    assert len(roots) == 6 and len(kids) == 212
    by_id = {s.span_id: s for s in roots}
    starts = its.column("start_ns").to_pylist()
    for k in kids:
        parent = by_id[k.parent_span_id]
        assert k.trace_id == parent.trace_id
        assert parent.start_time_unix_nano <= k.start_time_unix_nano
        assert k.end_time_unix_nano <= parent.end_time_unix_nano
        a = rx.attrs(k.attributes)
        assert a["aaco.iteration"] == rx.attrs(parent.attributes)["aaco.iteration"]
        assert a["aaco.device_type"] == "cpu" and a["aaco.kernel.name"] == k.name
    assert sorted(r.start_time_unix_nano for r in roots) == sorted(starts)
    res = spans[0][0]
    assert res["service.name"] == "aaco-exporter" and res["host.name"] == "node-1"
    assert res["aaco.model"] == data.MAGIKA_MODEL
    first = rx.attrs(roots[0].attributes)
    assert first["aaco.kernels.exported"] + first["aaco.kernels.dropped"] == 96


def test_ids_are_deterministic_across_encodings() -> None:
    """Encoding the same rows twice gives byte-identical requests (replay-safe ids)."""
    ks, its = data.magika_tables()
    a = traces_request(ks, its, "h", SpanPolicy(2, 3)).SerializeToString()
    b = traces_request(ks, its, "h", SpanPolicy(2, 3)).SerializeToString()
    assert a == b


def test_gpu_kernels_without_iteration_go_under_capped_synthetic_parent() -> None:
    """rocprofv3 kernels (no iteration) get one synthetic 'kernels' parent per agent, capped."""
    ks = data.rocprof_kernels()
    empty = pa.Table.from_batches([conform("iteration_span", ITERATION_SPAN.empty_table())])
    req = _roundtrip_traces(traces_request(ks, empty, "gpu-1", SpanPolicy(orphan_cap=4)))
    spans = rx.spans_of([req])
    roots = [s for _, s in spans if not s.parent_span_id]
    assert [r.name for r in roots] == ["kernels"]
    ra = rx.attrs(roots[0].attributes)
    assert ra["aaco.synthetic"] is True and ra["aaco.kernel_count"] == 9
    assert ra["aaco.kernels.exported"] == 4 and ra["aaco.kernels.dropped"] == 5
    kids = [s for _, s in spans if s.parent_span_id == roots[0].span_id]
    assert len(kids) == 4
    longest = sorted(pc.subtract(ks["end_ns"], ks["start_ns"]).to_pylist())[-4:]
    assert sorted(k.end_time_unix_nano - k.start_time_unix_nano for k in kids) == longest
    assert spans[0][0]["aaco.gpu.agent_id"] == 4
    assert {rx.attrs(k.attributes)["aaco.gpu.queue_id"] for k in kids} <= {1, 2, 3, 4}


def _analytics() -> pa.Table:
    ks, its = data.magika_tables()
    kt = pc.sum(ks["duration_ns"]).as_py()
    wall = pc.sum(its["duration_ns"]).as_py()
    b = conform(
        "analytics_result",
        pa.table(
            {
                "ts_ns": [its["end_ns"][-1].as_py()],
                "host": ["node-1"],
                "model": [data.MAGIKA_MODEL],
                "pid": [its["pid"][0].as_py()],
                "iterations": [its.num_rows],
                "kernel_count": [ks.num_rows],
                "kar": [kt / wall],
                "sii": [0.125],
                "latency_p99_s": [pc.max(its["duration_ns"]).as_py() / 1e9],
                "kernel_spans_total": [ks.num_rows],
                "iterations_total": [its.num_rows],
            }
        ),
    )
    return pa.Table.from_batches([b])


def _gauges() -> pa.Table:
    b = conform(
        "gauge_sample",
        pa.table(
            {
                "ts_ns": [1, 1, 2],
                "metric": ["hw.gpu.power", "hw.gpu.power", "hw.gpu.energy"],
                "value": [212.0, 98.5, 5000.0],
                "kind": ["gauge", "gauge", "counter"],
                "unit": ["W", "W", "J"],
                "source": ["amdsmi"] * 3,
                "gpu_index": [0, 1, 0],
                "attributes": pa.array(
                    [[("hw.type", "gpu")], None, None], pa.map_(pa.string(), pa.string())
                ),
            }
        ),
    )
    return pa.Table.from_batches([b])


def test_metrics_request_roundtrip_has_gauges_and_cumulative_counters() -> None:
    """Analytics become aaco.* gauges/sums, GAUGE_SAMPLE rows keep name, unit and kind."""
    an = _analytics()
    req = ExportMetricsServiceRequest.FromString(
        metrics_request(an, _gauges(), "node-1").SerializeToString()
    )
    pts = rx.metric_points([req])
    (kar,) = pts["aaco.kernel_amplification"]
    assert kar[2] == "gauge" and abs(kar[1] - an["kar"][0].as_py()) < 1e-12
    assert kar[0] == {"aaco.model": data.MAGIKA_MODEL, "process.pid": an["pid"][0].as_py()}
    assert pts["aaco.kernel_spans"][0][1:] == (576, "sum")
    assert "aaco.launch_tax" not in pts  # null everywhere: no metric
    power = sorted(pts["hw.gpu.power"], key=lambda p: p[1])
    assert [p[1] for p in power] == [98.5, 212.0]
    assert power[1][0] == {"aaco.source": "amdsmi", "aaco.gpu.index": 0, "hw.type": "gpu"}
    assert pts["hw.gpu.energy"][0][2] == "sum"
    res = rx.attrs(req.resource_metrics[0].resource.attributes)
    assert res == {"service.name": "aaco-exporter", "host.name": "node-1"}
    units = {m.name: m.unit for m in req.resource_metrics[0].scope_metrics[0].metrics}
    assert units["hw.gpu.power"] == "W" and units["aaco.iteration.latency"] == "s"
