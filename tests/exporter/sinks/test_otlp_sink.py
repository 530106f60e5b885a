"""exporter.sinks.otlp.OtlpSink against real in-process OTLP receivers."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from exporter.schema import conform
from exporter.sinks.otlp import OtlpConfig, OtlpSink
from tests.support import load_path as _load

HERE = Path(__file__).parent


data = _load("aaco_sink_testdata", HERE / "testdata" / "sinkdata.py")
rx = _load("aaco_otlp_receiver", HERE / "otlp_receiver.py")


def _batches(t: pa.Table, n: int) -> list[pa.RecordBatch]:
    size = -(-t.num_rows // n)
    return list(t.to_batches(max_chunksize=size))


def test_grpc_export_span_counts_parentage_and_resource() -> None:
    """Over gRPC: 6 iteration roots, policy-selected kernel children with correct parents."""
    ks, its = data.magika_tables()
    with rx.GrpcReceiver() as r:
        sink = OtlpSink(
            OtlpConfig(
                endpoint=r.endpoint,
                insecure=True,
                sample_every=3,
                top_k=5,
                headers={"x-aaco-token": "t0k"},
                compression="gzip",
            )
        )
        try:
            for b in _batches(ks, 3):
                sink.ingest("kernel_span", b, "node-1")
            sink.ingest("iteration_span", its.to_batches()[0], "node-1")
            sink.flush()
            assert r.wait_for(lambda: len(rx.spans_of(r.traces)) >= 218)
        finally:
            sink.close()
        spans = rx.spans_of(r.traces)
        headers = r.headers
    assert len(spans) == 6 + 2 * 96 + 4 * 5 == sink.spans_exported
    roots = {s.span_id: s for _, s in spans if not s.parent_span_id}
    assert len(roots) == 6 and {s.name for s in roots.values()} == {"inference"}
    kids = [s for _, s in spans if s.parent_span_id]
    for k in kids:
        p = roots[k.parent_span_id]
        assert k.trace_id == p.trace_id
        ka, pa_ = rx.attrs(k.attributes), rx.attrs(p.attributes)
        assert ka["aaco.iteration"] == pa_["aaco.iteration"]
        assert p.start_time_unix_nano <= k.start_time_unix_nano <= k.end_time_unix_nano
        assert k.end_time_unix_nano <= p.end_time_unix_nano
    assert sorted(s.start_time_unix_nano for s in roots.values()) == its["start_ns"].to_pylist()
    res = spans[0][0]
    assert res["service.name"] == "aaco-exporter" and res["host.name"] == "node-1"
    assert res["aaco.model"] == data.MAGIKA_MODEL
    assert any(h.get("x-aaco-token") == "t0k" for h in headers)
    assert sink.kernels_dropped == 576 - 212


def test_kernels_wait_for_their_iteration_then_are_parented() -> None:
    """Kernels whose iteration has not arrived are held through any number of
    flushes (within hold_s), then parented under it."""
    ks, its = data.magika_tables()
    with rx.GrpcReceiver() as r:
        sink = OtlpSink(OtlpConfig(endpoint=r.endpoint, insecure=True, sample_every=1,
                                   hold_s=3600.0))
        try:
            sink.ingest("kernel_span", ks, "node-1")
            sink.flush()
            sink.flush()
            held = len(rx.spans_of(r.traces))
            sink.ingest("iteration_span", its, "node-1")
            sink.flush()
            assert r.wait_for(lambda: len(rx.spans_of(r.traces)) >= 582)
        finally:
            sink.close()
        spans = rx.spans_of(r.traces)
    assert held == 0
    roots = {s.span_id for _, s in spans if not s.parent_span_id}
    assert len(roots) == 6 and all(s.parent_span_id in roots for _, s in spans if s.parent_span_id)


def test_sdk_export_and_otlp_on_the_bus_name_every_span_alike() -> None:
    """One assembler, one encoding: the SDK exporter sends exactly the spans (ids,
    parents, names, times) that traces_request puts on the bus."""
    from exporter.sinks.otlp_proto import SpanPolicy, traces_request

    ks, its = data.magika_tables()
    with rx.GrpcReceiver() as r:
        sink = OtlpSink(OtlpConfig(endpoint=r.endpoint, insecure=True))
        try:
            sink.ingest("kernel_span", ks, "node-1")
            sink.ingest("iteration_span", its, "node-1")
            sink.flush()
            n = sink.spans_exported
            assert r.wait_for(lambda: len(rx.spans_of(r.traces)) >= n)
        finally:
            sink.close()
        got = {(s.trace_id, s.span_id, s.parent_span_id, s.name, s.start_time_unix_nano)
               for _, s in rx.spans_of(r.traces)}
    bus = traces_request(ks, its, "node-1", SpanPolicy())
    want = {(s.trace_id, s.span_id, s.parent_span_id, s.name, s.start_time_unix_nano)
            for rs in bus.resource_spans for ss in rs.scope_spans for s in ss.spans}
    assert n == len(want) > 6
    assert got == want


def test_grpc_gpu_kernels_without_iteration_are_capped_under_synthetic_parent() -> None:
    """rocprofv3 kernels: one 'kernels' parent with aaco.gpu.agent_id on the resource."""
    with rx.GrpcReceiver() as r:
        sink = OtlpSink(OtlpConfig(endpoint=r.endpoint, insecure=True, orphan_cap=3))
        try:
            sink.ingest("kernel_span", data.rocprof_kernels(), "gpu-node")
            sink.flush()
            assert r.wait_for(lambda: len(rx.spans_of(r.traces)) >= 4)
        finally:
            sink.close()
        spans = rx.spans_of(r.traces)
    assert len(spans) == 4
    (root,) = [s for _, s in spans if not s.parent_span_id]
    assert root.name == "kernels" and rx.attrs(root.attributes)["aaco.kernels.dropped"] == 6
    assert spans[0][0]["aaco.gpu.agent_id"] == 4
    names = {s.name for _, s in spans if s.parent_span_id}
    assert all("kernel" in n and "(" in n for n in names)  # raw names only on spans


def test_grpc_metrics_latest_values_as_gauges_and_counters() -> None:
    """Analytics and GAUGE_SAMPLE rows reach the receiver as OTLP gauges/sums, latest value."""
    an = pa.Table.from_batches(
        [
            conform(
                "analytics_result",
                pa.table(
                    {
                        "ts_ns": [1, 2],
                        "host": ["node-1"] * 2,
                        "model": [data.MAGIKA_MODEL] * 2,
                        "pid": [7, 7],
                        "iterations": [3, 3],
                        "kernel_count": [288, 288],
                        "kar": [0.5, 0.75],
                        "sii": [0.1, 0.2],
                        "kernel_spans_total": [288, 576],
                        "iterations_total": [3, 6],
                    }
                ),
            )
        ]
    )
    ga = pa.Table.from_batches(
        [
            conform(
                "gauge_sample",
                pa.table(
                    {
                        "ts_ns": [1, 2],
                        "metric": ["hw.gpu.power"] * 2,
                        "value": [200.0, 210.0],
                        "kind": ["gauge"] * 2,
                        "unit": ["W"] * 2,
                        "source": ["amdsmi"] * 2,
                        "gpu_index": [0, 0],
                    }
                ),
            )
        ]
    )
    with rx.GrpcReceiver() as r:
        sink = OtlpSink(OtlpConfig(endpoint=r.endpoint, insecure=True, export_interval_s=3600))
        try:
            sink.ingest("analytics_result", an.to_batches()[0], "node-1")
            sink.ingest("gauge_sample", ga.to_batches()[0], "node-1")
            sink.flush()
            assert r.wait_for(lambda: "hw.gpu.power" in rx.metric_points(r.metrics))
        finally:
            sink.close()
        pts = rx.metric_points(r.metrics)
        res = rx.attrs(r.metrics[0].resource_metrics[0].resource.attributes)
    assert pts["aaco.kernel_amplification"][0][1:] == (0.75, "gauge")
    assert pts["aaco.kernel_amplification"][0][0] == {
        "aaco.model": data.MAGIKA_MODEL, "process.pid": 7}
    assert pts["aaco.kernel_spans"][0][1:] == (576, "sum")
    assert pts["hw.gpu.power"][0][1] == 210.0
    assert pts["hw.gpu.power"][0][0] == {"aaco.source": "amdsmi", "aaco.gpu.index": 0}
    assert res["host.name"] == "node-1" and res["service.name"] == "aaco-exporter"


def test_http_protobuf_gzip_export_parses_as_export_trace_service_request() -> None:
    """http/protobuf with gzip: the receiver decodes ExportTraceServiceRequest at /v1/traces."""
    ks, its = data.magika_tables()
    with rx.HttpReceiver() as r:
        sink = OtlpSink(
            OtlpConfig(
                endpoint=r.endpoint,
                protocol="http/protobuf",
                compression="gzip",
                sample_every=100,
                top_k=2,
                service_name="magika-svc",
            )
        )
        try:
            sink.ingest("kernel_span", ks, "node-2")
            sink.ingest("iteration_span", its, "node-2")
            sink.flush()
            assert r.wait_for(lambda: len(rx.spans_of(r.traces)) >= 6 + 96 + 5 * 2)
        finally:
            sink.close()
        spans = rx.spans_of(r.traces)
        headers = r.headers
    assert len(spans) == 6 + 96 + 5 * 2
    assert spans[0][0]["service.name"] == "magika-svc" and spans[0][0]["host.name"] == "node-2"
    assert any(h.get("content-encoding") == "gzip" for h in headers)
    assert all(h.get("content-type") == "application/x-protobuf" for h in headers)


def test_config_rejects_bad_protocol_and_half_client_cert() -> None:
    """OtlpConfig validates protocol and client cert/key pairing."""
    with pytest.raises(ValueError, match="protocol"):
        OtlpConfig(protocol="thrift")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="client_cert_file"):
        OtlpConfig(client_cert_file="c.pem")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _pki(d: Path) -> None:
    """CA, server cert for 127.0.0.1 and a client cert, all signed by the CA."""
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=aaco-test-ca",
        cwd=d,
    )
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for who in ("server", "client"):
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{who}.key",
            "-out",
            f"{who}.csr",
            "-subj",
            f"/CN=aaco-{who}",
            cwd=d,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{who}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{who}.pem",
            "-days",
            "1",
            "-extfile",
            "san.ext",
            cwd=d,
        )


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_grpc_mutual_tls_with_ca_and_client_certificate(tmp_path: Path) -> None:
    """ca_file + client_cert_file/client_key_file: spans arrive over mTLS; without the
    client certificate the receiver gets nothing."""
    _pki(tmp_path)
    tls = (
        (tmp_path / "server.key").read_bytes(),
        (tmp_path / "server.pem").read_bytes(),
        (tmp_path / "ca.pem").read_bytes(),
    )
    ks, its = data.magika_tables()
    with rx.GrpcReceiver(tls=tls) as r:
        base = OtlpConfig(
            endpoint=r.endpoint,
            ca_file=str(tmp_path / "ca.pem"),
            sample_every=1000,
            top_k=1,
            timeout_s=2.0,
        )
        no_client = OtlpSink(base)
        try:
            no_client.ingest("iteration_span", its, "node-1")
            no_client.flush()
        finally:
            no_client.close()
        rejected = len(rx.spans_of(r.traces))
        sink = OtlpSink(
            replace(
                base,
                client_cert_file=str(tmp_path / "client.pem"),
                client_key_file=str(tmp_path / "client.key"),
            )
        )
        try:
            sink.ingest("kernel_span", ks, "node-1")
            sink.ingest("iteration_span", its, "node-1")
            sink.flush()
            assert r.wait_for(lambda: len(rx.spans_of(r.traces)) >= 6 + 96 + 5)
        finally:
            sink.close()
        spans = rx.spans_of(r.traces)
    assert rejected == 0
    assert len(spans) == 6 + 96 + 5


def test_analytics_rows_export_under_the_host_they_describe_not_the_worker() -> None:
    """A standalone analytics worker publishes results of many hosts under its own
    Aaco-Host header; each OTLP metric resource takes host.name from the rows."""
    an = pa.Table.from_batches([conform("analytics_result", pa.table({
        "ts_ns": [1, 1], "host": ["node-a", "node-b"], "model": [data.MAGIKA_MODEL] * 2,
        "pid": [7, 8], "iterations": [3, 3], "kernel_count": [288, 288], "kar": [0.5, 0.75],
        "kernel_spans_total": [288, 288], "iterations_total": [3, 3]}))])  # fmt: skip
    with rx.GrpcReceiver() as r:
        sink = OtlpSink(OtlpConfig(endpoint=r.endpoint, insecure=True, export_interval_s=3600))
        try:
            sink.ingest("analytics_result", an.to_batches()[0], "analytics-worker")
            sink.flush()
            assert r.wait_for(lambda: "aaco.kernel_amplification" in rx.metric_points(r.metrics))
        finally:
            sink.close()
        kar = {rx.attrs(rm.resource.attributes)["host.name"]: m.gauge.data_points[0].as_double
               for req in r.metrics for rm in req.resource_metrics
               for sm in rm.scope_metrics for m in sm.metrics
               if m.name == "aaco.kernel_amplification"}  # fmt: skip
    assert kar == {"node-a": 0.5, "node-b": 0.75}


def test_a_batch_ingested_while_a_flush_holds_back_spans_is_not_lost(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon ingests on its event loop while flush() runs in a worker
    thread. Reproduced deterministically: an iteration batch arrives in the
    middle of a flush that is holding kernels back (between taking the host's
    buffer and putting the held part back); it must be exported, not
    overwritten by the held buffer."""
    import exporter.sinks.span_assembler as otlp_mod

    ks, its = data.magika_tables()
    first, second = its.slice(0, 3), its.slice(3)
    with rx.GrpcReceiver() as r:
        sink = OtlpSink(OtlpConfig(endpoint=r.endpoint, insecure=True, sample_every=1,
                                   hold_s=3600.0))
        real_concat = otlp_mod._concat
        calls = {"n": 0}

        def concat_then_ingest(*a: object, **k: object) -> object:
            calls["n"] += 1
            if calls["n"] == 1:  # inside the first flush: the loop thread ingests
                sink.ingest("iteration_span", second, "node-1")
            return real_concat(*a, **k)  # type: ignore[arg-type]

        try:
            sink.ingest("kernel_span", ks, "node-1")
            sink.ingest("iteration_span", first, "node-1")
            monkeypatch.setattr(otlp_mod, "_concat", concat_then_ingest)
            sink.flush()  # holds the kernels of iterations 3..5 back
            monkeypatch.setattr(otlp_mod, "_concat", real_concat)
            sink.flush()
        finally:
            sink.close()
        r.wait_for(lambda: len(rx.spans_of(r.traces)) >= 582)
        spans = rx.spans_of(r.traces)
    roots = [s for _, s in spans if not s.parent_span_id]
    assert len(roots) == its.num_rows == 6, "an iteration span ingested mid-flush was lost"
    assert len(spans) == ks.num_rows + its.num_rows
