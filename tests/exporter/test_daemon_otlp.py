"""`run --otlp-endpoint … --otlp-bus`: the daemon's OTLP export and the OTLP
protobuf copy on the bus, checked with a real gRPC receiver and the stock
protobuf classes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from exporter.bus import Bus, BusConfig
from exporter.natsserver import EmbeddedNats, free_port
from tests.support import ROOT, load_path

rx = load_path("aaco_otlp_receiver", ROOT / "tests/exporter/sinks/otlp_receiver.py")
EXE = str(Path(sys.executable).parent / "aaco-exporter")


async def _bus_otlp(url: str) -> tuple[list[bytes], list[bytes], list[dict[str, str]]]:
    bus = await Bus.open(url, BusConfig(), "reader")
    out: tuple[list[bytes], list[bytes], list[dict[str, str]]] = ([], [], [])
    for kind, dest in (("traces", out[0]), ("metrics", out[1])):
        sub = await bus.js.pull_subscribe(f"aaco.v1.otlp.{kind}.>", durable=None, stream="AACO")
        try:
            for m in await sub.fetch(50, timeout=2):
                dest.append(m.data)
                out[2].append(dict(m.headers or {}))
        except Exception:
            pass
    await bus.close()
    return out


@pytest.mark.slow
def test_daemon_exports_iteration_spans_with_kernel_children_and_publishes_otlp_on_the_bus(
        tmp_path: Path) -> None:
    port = free_port()
    with rx.GrpcReceiver() as receiver, EmbeddedNats(tmp_path / "nats") as srv:
        proc = subprocess.Popen(
            [EXE, "run", "--model", "magika", "--nats", srv.url, "--metrics-addr",
             f"127.0.0.1:{port}", "--otlp-endpoint", receiver.endpoint, "--otlp-insecure",
             "--otlp-header", "x-tenant=lab", "--otlp-bus", "--log-level", "WARNING"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            got = receiver.wait_for(lambda: len(receiver.traces) >= 1 and
                                    len(receiver.metrics) >= 1, timeout_s=40)
            assert got, "no OTLP export within 40 s"
            deadline = time.monotonic() + 20
            traces, metrics, headers = asyncio.run(_bus_otlp(srv.url))
            while not (traces and metrics) and time.monotonic() < deadline:
                time.sleep(1)  # the bus copy is published on the next 5 s flush
                traces, metrics, headers = asyncio.run(_bus_otlp(srv.url))
        finally:
            proc.terminate()
            out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out.decode()[-2000:]
    # gRPC export: iteration spans are parents of kernel spans, resource attributes set.
    spans = rx.spans_of(receiver.traces)
    by_id = {s.span_id: s for _, s in spans}
    iters = [s for _, s in spans if not s.parent_span_id]
    kids = [s for _, s in spans if s.parent_span_id]
    assert iters and kids
    assert all(k.parent_span_id in by_id for k in kids)
    res = spans[0][0]
    assert res["service.name"] == "aaco-exporter" and res.get("host.name")
    assert any(h.get("x-tenant") == "lab" for h in receiver.headers)
    assert "aaco_kernel_amplification_ratio" in str(rx.metric_points(receiver.metrics)) or \
        rx.metric_points(receiver.metrics)
    # The bus copy decodes with the stock OTLP classes.
    assert traces and metrics
    req = ExportTraceServiceRequest()
    req.ParseFromString(traces[0])
    bus_spans = rx.spans_of([req])
    assert bus_spans and all(s.parent_span_id in {x.span_id for _, x in bus_spans}
                             for _, s in bus_spans if s.parent_span_id)
    mreq = ExportMetricsServiceRequest()
    mreq.ParseFromString(metrics[0])
    assert rx.metric_points([mreq])
    assert all(h.get("Content-Type") == "application/x-protobuf" for h in headers)
