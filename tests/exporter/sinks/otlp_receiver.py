"""In-process OTLP receivers for tests: gRPC (opentelemetry-proto stubs) and HTTP.

:class:`GrpcReceiver` serves ``TraceService/Export`` and
``MetricsService/Export`` on ``127.0.0.1:<free port>``; :class:`HttpReceiver`
accepts ``POST /v1/traces`` and ``/v1/metrics`` (``application/x-protobuf``,
optionally gzip) with :mod:`http.server`. Both keep every decoded request
and the request headers, and stop their server on ``__exit__``.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span


def attrs(kvs: Any) -> dict[str, object]:
    """``{key: python value}`` of a repeated ``KeyValue`` field."""
    out: dict[str, object] = {}
    for kv in kvs:
        v: AnyValue = kv.value
        out[kv.key] = getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None
    return out


def spans_of(
    requests: list[trace_service_pb2.ExportTraceServiceRequest],
) -> list[tuple[dict[str, object], Span]]:
    """Every span of ``requests`` with its resource attributes."""
    out = []
    for req in requests:
        for rs in req.resource_spans:
            res = attrs(rs.resource.attributes)
            for ss in rs.scope_spans:
                out.extend((res, s) for s in ss.spans)
    return out


def metric_points(
    requests: list[metrics_service_pb2.ExportMetricsServiceRequest],
) -> dict[str, list[tuple[dict[str, object], float, str]]]:
    """``{metric name: [(point attributes, value, "gauge"|"sum")]}``."""
    out: dict[str, list[tuple[dict[str, object], float, str]]] = {}
    for req in requests:
        for rm in req.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    pts = m.gauge.data_points if kind == "gauge" else m.sum.data_points
                    for p in pts:
                        val = p.as_double if p.WhichOneof("value") == "as_double" else p.as_int
                        out.setdefault(m.name, []).append((attrs(p.attributes), val, kind))
    return out


def metrics_of(
    requests: list[metrics_service_pb2.ExportMetricsServiceRequest], name: str,
) -> list[tuple[dict[str, object], Any]]:
    """Every ``Metric`` message called ``name`` in ``requests``, in order, with
    its resource attributes (histograms included)."""
    return [(attrs(rm.resource.attributes), m)
            for req in requests for rm in req.resource_metrics
            for sm in rm.scope_metrics for m in sm.metrics if m.name == name]


class _Sink:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.traces: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.metrics: list[metrics_service_pb2.ExportMetricsServiceRequest] = []
        self.headers: list[dict[str, str]] = []

    def wait_for(self, pred: Callable[[], bool], timeout_s: float = 10.0) -> bool:
        """Poll ``pred`` until true or ``timeout_s`` passed; return its last value."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if pred():
                    return True
            time.sleep(0.02)
        with self.lock:
            return pred()


class _TraceServicer(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self, sink: _Sink) -> None:
        self.sink = sink

    def Export(self, request: Any, context: Any) -> Any:
        with self.sink.lock:
            self.sink.traces.append(request)
            self.sink.headers.append(dict(context.invocation_metadata()))
        return trace_service_pb2.ExportTraceServiceResponse()


class _MetricsServicer(metrics_service_pb2_grpc.MetricsServiceServicer):  # type: ignore[misc]
    def __init__(self, sink: _Sink) -> None:
        self.sink = sink

    def Export(self, request: Any, context: Any) -> Any:
        with self.sink.lock:
            self.sink.metrics.append(request)
            self.sink.headers.append(dict(context.invocation_metadata()))
        return metrics_service_pb2.ExportMetricsServiceResponse()


class GrpcReceiver(_Sink):
    """OTLP/gRPC receiver on ``127.0.0.1``; ``endpoint`` is ``host:port``.

    ``tls=(server_key_pem, server_cert_pem, client_ca_pem | None)`` serves TLS
    instead of plaintext; with a client CA the client must present a
    certificate signed by it (mutual TLS).
    """

    def __init__(self, tls: tuple[bytes, bytes, bytes | None] | None = None) -> None:
        super().__init__()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceServicer(self), self.server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(
            _MetricsServicer(self), self.server
        )
        if tls is None:
            port = self.server.add_insecure_port("127.0.0.1:0")
        else:
            key, cert, client_ca = tls
            creds = grpc.ssl_server_credentials(
                [(key, cert)],
                root_certificates=client_ca,
                require_client_auth=client_ca is not None,
            )
            port = self.server.add_secure_port("127.0.0.1:0", creds)
        self.endpoint = f"127.0.0.1:{port}"

    def __enter__(self) -> GrpcReceiver:
        self.server.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.server.stop(grace=None).wait()


class HttpReceiver(_Sink):
    """OTLP/HTTP protobuf receiver; ``endpoint`` is ``http://127.0.0.1:port``."""

    def __init__(self) -> None:
        super().__init__()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                with sink.lock:
                    sink.headers.append({k.lower(): v for k, v in self.headers.items()})
                    if self.path == "/v1/traces":
                        sink.traces.append(
                            trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                        )
                    elif self.path == "/v1/metrics":
                        sink.metrics.append(
                            metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
                        )
                    else:
                        self.send_response(404)
                        self.end_headers()
                        return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HttpReceiver:
        self.thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


__all__ = ["GrpcReceiver", "HttpReceiver", "KeyValue", "attrs", "metric_points", "metrics_of",
           "spans_of"]
