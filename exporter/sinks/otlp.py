"""OTLP sink: traces and metrics to an OpenTelemetry backend via the OTel SDK.

:class:`OtlpSink` takes bus batches (:meth:`OtlpSink.ingest`) and exports

* **traces** (``kernel_span`` + ``iteration_span``): the span trees the
  :class:`~exporter.sinks.span_assembler.SpanAssembler` releases (one
  readiness rule: an iteration waits until its ``kernel_count`` kernels
  arrived, at most ``hold_s``), built once by
  :func:`exporter.sinks.otlp_proto.traces_request` -- the same spans, with the
  same deterministic ids, that OTLP on the bus publishes -- and handed to the
  SDK's ``BatchSpanProcessor`` and OTLP span exporter as finished spans. One
  ``inference`` span per iteration with its kernel spans as children, chosen
  by :class:`exporter.sinks.otlp_proto.SpanPolicy` (all kernels of 1-in-N
  iterations, the top-K longest of the others; kernels without iteration
  under a synthetic ``kernels`` parent, capped). Start/end times are the
  rows' own ``start_ns``/``end_ns``. One resource per ``(host, model,
  agent_id)`` (at most ``max_resources``; later keys share their host's
  resource without model/GPU attributes).
* **metrics** (``analytics_result`` + ``gauge_sample``): observable gauges /
  counters reporting the latest value per series, one ``MeterProvider`` per
  host, exported every ``export_interval_s``; names from
  :mod:`exporter.catalogue`.
* **LLM metrics** (``generate_span``; :mod:`exporter.sinks.otlp_llm`): folded
  by a :class:`~stream_analytics.llm_metrics.LlmMetrics` (the Prometheus
  sink's fold, buckets and model cap) and exported pre-aggregated at each
  :meth:`OtlpSink.flush` / :meth:`OtlpSink.close` by one ``MetricExporter``
  (all hosts in one request, each under its host's metrics resource):
  ``aaco.llm.time_to_first_token`` / ``aaco.llm.inter_token_latency``
  histograms, ``aaco.llm.output_tokens`` sum, ``aaco.llm.tokens_per_second``
  gauge. Calls over the model cap are counted in :attr:`OtlpSink.drops`
  (``otlp_llm_model_cap``), failed exports under ``otlp_export_error``.
* **Kubernetes / Slurm** (``k8s_attribution``, the ``k8s`` collector's
  snapshot; :mod:`exporter.sinks.otlp_k8s`): a span carrying
  ``process.pid`` (iteration, kernel and synthetic spans) gets a resource with
  ``k8s.pod.name``, ``k8s.namespace.name``, ``k8s.container.name`` and
  ``slurm.job.id`` of its process; analytics points (keyed by pid) and
  ``hw.gpu.*`` points (the GPU's holder) carry the same attributes (a host's
  metrics share one resource). ``k8s.node.name`` is a resource attribute the
  daemon adds to ``resource_attributes`` when the ``k8s`` collector runs.

Attribute names, span names and the span policy are those of
:mod:`exporter.sinks.otlp_proto` (the bus encoding), documented in
``docs/otlp-and-perfetto.md``.

Errors: :class:`ValueError` for a bad :class:`OtlpConfig`; export failures are
handled (retried, then logged and dropped) by the OTel exporters and never
raise from :meth:`OtlpSink.ingest`.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from opentelemetry import trace as trace_api
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from exporter import catalogue
from exporter.sinks import otlp_llm
from exporter.sinks import otlp_proto as op
from exporter.sinks.otlp_k8s import K8sAttributes, attr_value
from exporter.sinks.span_assembler import DEFAULT_HOLD_S, SpanAssembler
from stream_analytics.llm_metrics import DROP_MODEL_CAP as LLM_MODEL_CAP
from stream_analytics.llm_metrics import LlmMetrics

Protocol = Literal["grpc", "http/protobuf"]
_SAMPLED = trace_api.TraceFlags(trace_api.TraceFlags.SAMPLED)
Attrs = tuple[tuple[str, op.AttrValue], ...]


@dataclass(frozen=True)
class OtlpConfig:
    """Where and how to export.

    ``endpoint``: gRPC ``host:port`` or URL (default ``localhost:4317``);
    HTTP base URL (default ``http://localhost:4318``; ``/v1/traces`` and
    ``/v1/metrics`` are appended; a bare ``host:port`` gets ``http://`` when
    ``insecure`` else ``https://``). ``headers`` are sent with every export
    (e.g. auth tokens). TLS: ``insecure`` disables TLS (gRPC plaintext);
    ``ca_file`` verifies the server, ``client_cert_file``/``client_key_file``
    present a client certificate (PEM paths). ``compression``: ``gzip`` or
    ``none``. ``timeout_s`` per export. ``sample_every``/``top_k``/
    ``orphan_cap``: the span policy. ``batch_rows``: buffered kernel rows
    that trigger a trace export without waiting for :meth:`OtlpSink.flush`.
    ``hold_s``: how long an iteration missing kernels (or a kernel missing its
    iteration) waits (:mod:`exporter.sinks.span_assembler`).
    """

    endpoint: str | None = None
    protocol: Protocol = "grpc"
    headers: Mapping[str, str] = field(default_factory=dict)
    insecure: bool = False
    ca_file: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None
    compression: Literal["gzip", "none"] = "none"
    timeout_s: float = 10.0
    service_name: str = op.DEFAULT_SERVICE_NAME
    sample_every: int = 10
    top_k: int = 20
    orphan_cap: int = 256
    batch_rows: int = 50_000
    export_interval_s: float = 10.0
    max_resources: int = 32
    max_queue_size: int = 65_536
    hold_s: float = DEFAULT_HOLD_S  # an incomplete iteration waits this long for its kernels
    resource_attributes: Mapping[str, str] = field(default_factory=dict)  # extra resource attrs
    endpoint_is_signal_url: bool = False  # HTTP: endpoint is the full per-signal URL
    per_signal: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Field values that win for one signal (``traces`` or ``metrics``), from
    ``OTEL_EXPORTER_OTLP_<SIGNAL>_*`` (:mod:`exporter.sinks.otel_env`)."""

    def for_signal(self, signal: str) -> OtlpConfig:
        """This config with ``signal``'s overrides applied (and none left)."""
        return replace(self, **dict(self.per_signal.get(signal, {})), per_signal={})

    def __post_init__(self) -> None:
        if self.protocol not in ("grpc", "http/protobuf"):
            raise ValueError(f"otlp protocol must be grpc or http/protobuf, not {self.protocol!r}")
        if self.compression not in ("gzip", "none"):
            raise ValueError(f"otlp compression must be gzip or none, not {self.compression!r}")
        if (self.client_cert_file is None) != (self.client_key_file is None):
            raise ValueError("otlp client_cert_file and client_key_file go together")
        if self.sample_every < 1 or self.top_k < 0 or self.orphan_cap < 0:
            raise ValueError("otlp sample_every >= 1, top_k >= 0 and orphan_cap >= 0 required")

    @property
    def policy(self) -> op.SpanPolicy:
        """The :class:`~exporter.sinks.otlp_proto.SpanPolicy` of this config."""
        return op.SpanPolicy(self.sample_every, self.top_k, self.orphan_cap)


def _read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


def _http_url(cfg: OtlpConfig, suffix: str) -> str:
    base = cfg.endpoint or "http://localhost:4318"
    if "://" not in base:
        base = ("http://" if cfg.insecure else "https://") + base
    if cfg.endpoint_is_signal_url and cfg.endpoint:
        return base  # a per-signal endpoint is the whole URL (OTLP exporter spec)
    return base.rstrip("/") + suffix


def _grpc_kwargs(cfg: OtlpConfig) -> dict[str, Any]:
    import grpc

    creds = None
    if not cfg.insecure and (cfg.ca_file or cfg.client_cert_file):
        creds = grpc.ssl_channel_credentials(
            root_certificates=_read(cfg.ca_file),
            private_key=_read(cfg.client_key_file),
            certificate_chain=_read(cfg.client_cert_file),
        )
    comp = grpc.Compression.Gzip if cfg.compression == "gzip" else grpc.Compression.NoCompression
    return {
        "endpoint": cfg.endpoint or "localhost:4317",
        "insecure": cfg.insecure,
        "credentials": creds,
        "headers": dict(cfg.headers),
        "timeout": cfg.timeout_s,
        "compression": comp,
    }


def _http_kwargs(cfg: OtlpConfig, suffix: str) -> dict[str, Any]:
    from opentelemetry.exporter.otlp.proto.http import Compression

    return {
        "endpoint": _http_url(cfg, suffix),
        "certificate_file": cfg.ca_file,
        "client_key_file": cfg.client_key_file,
        "client_certificate_file": cfg.client_cert_file,
        "headers": dict(cfg.headers),
        "timeout": cfg.timeout_s,
        "compression": Compression.Gzip if cfg.compression == "gzip" else Compression.NoCompression,
    }


def span_exporter(cfg: OtlpConfig) -> SpanExporter:
    """An ``OTLPSpanExporter`` (gRPC or HTTP/protobuf) configured from ``cfg``
    (its ``traces`` overrides applied)."""
    cfg = cfg.for_signal("traces")
    if cfg.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(**_grpc_kwargs(cfg))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    return HttpSpanExporter(**_http_kwargs(cfg, "/v1/traces"))


def metric_exporter(cfg: OtlpConfig) -> MetricExporter:
    """An ``OTLPMetricExporter`` (gRPC or HTTP/protobuf) configured from ``cfg``
    (its ``metrics`` overrides applied)."""
    cfg = cfg.for_signal("metrics")
    if cfg.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(**_grpc_kwargs(cfg))
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetricExporter,
    )

    return HttpMetricExporter(**_http_kwargs(cfg, "/v1/metrics"))


class _Series:
    """Latest value per attribute set of one observable instrument (thread-safe)."""

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock
        self.values: dict[Attrs, float] = {}
        self.full: dict[Attrs, Attrs] = {}  # base attributes -> with k8s attributes

    def set(self, base: Attrs, extra: tuple[tuple[str, str], ...], value: float) -> None:
        """Latest ``value`` of series ``base``; its k8s ``extra`` attributes
        replace earlier ones (a process or GPU has one holder at a time).
        Call with :attr:`lock` held."""
        full = base + extra
        prev = self.full.get(base)
        if prev is not None and prev != full:
            self.values.pop(prev, None)
        self.full[base] = full
        self.values[full] = value

    def callback(self, options: CallbackOptions) -> Iterable[Observation]:
        with self.lock:
            items = list(self.values.items())
        return [Observation(v, dict(a)) for a, v in items]


class OtlpSink:
    """Export bus signals to an OTLP backend (see the module docstring)."""

    def __init__(self, config: OtlpConfig) -> None:
        self.config = config
        self._lock = threading.Lock()  # metric values (read by the reader threads)
        # processor, resources, providers and counters: ingest runs on the event
        # loop, flush/close on a worker thread (asyncio.to_thread)
        self._state = threading.Lock()
        self._assembler = SpanAssembler(hold_s=config.hold_s, max_rows=config.max_queue_size)
        self._processor: BatchSpanProcessor | None = None
        self._resources: dict[tuple[tuple[str, op.AttrValue], ...], Resource] = {}
        self._k8s = K8sAttributes()  # the k8s collector's snapshots, as OTel attributes
        self._meters: dict[str, MeterProvider] = {}
        self._series: dict[tuple[str, str, str, str], _Series] = {}
        self.spans_exported = 0
        self.kernels_dropped = 0
        self.llm = LlmMetrics()  # generate_span folds (host from each batch)
        self._llm_exporter: MetricExporter | None = None
        self._llm_export = threading.Lock()  # one LLM export at a time
        self.llm_exports = 0  # LLM metric requests the exporter accepted
        self.drops: Counter[str] = Counter()  # by reason (module docstring)

    # ---- ingest ---------------------------------------------------------
    def ingest(self, signal: str, batch: pa.RecordBatch | pa.Table, host: str) -> None:
        """Take one bus batch of ``signal`` from ``host``.

        ``kernel_span``/``iteration_span`` are buffered for traces;
        ``analytics_result``/``gauge_sample`` update the latest metric
        values; ``generate_span`` is folded into :attr:`llm`; other signals
        are ignored.
        """
        t = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        if signal in ("kernel_span", "iteration_span"):
            waiting = self._assembler.add(host, signal, t, time.monotonic())
            if signal == "kernel_span" and waiting >= self.config.batch_rows:
                self._emit_traces(final=False)
        elif signal == "analytics_result":  # rows name their host; the header the worker
            for h, sub in op.split_by_row_host(t, host):
                self._update_analytics(sub, h)
        elif signal == "gauge_sample":
            self._update_gauges(t, host)
        elif signal == "k8s_attribution":
            self._k8s.update(t, host)
        elif signal == "generate_span":
            before = self.llm.drops[LLM_MODEL_CAP]
            self.llm.observe_table(host, t)
            after = self.llm.drops[LLM_MODEL_CAP]
            if after != before:
                with self._state:
                    self.drops[otlp_llm.DROP_MODEL_CAP] += after - before

    def flush(self) -> None:
        """Export the span trees that are ready
        (:class:`~exporter.sinks.span_assembler.SpanAssembler`'s rule) and
        force-flush both pipelines; blocks up to about ``timeout_s``.

        Thread-safe against :meth:`ingest`: each span row is exported exactly once.
        Then exports the LLM metrics (:meth:`export_llm`)."""
        self._emit_traces(final=False)
        self._force_flush()
        self.export_llm()

    def close(self) -> None:
        """Export everything still buffered, flush and shut the providers down."""
        self._emit_traces(final=True)
        self._force_flush()
        self.export_llm()
        with self._state:
            processor, self._processor = self._processor, None
            meters = list(self._meters.values())
            self._meters.clear()
            llm_exporter, self._llm_exporter = self._llm_exporter, None
        if llm_exporter is not None:
            llm_exporter.shutdown()
        if processor is not None:
            processor.shutdown()  # type: ignore[no-untyped-call]
        for mp in meters:
            mp.shutdown()

    def _force_flush(self) -> None:
        ms = int(self.config.timeout_s * 1000)
        with self._state:
            processor, meters = self._processor, list(self._meters.values())
        if processor is not None:
            processor.force_flush(ms)
        for mp in meters:
            mp.force_flush(ms)

    # ---- traces ---------------------------------------------------------
    def _span_processor(self) -> BatchSpanProcessor:
        with self._state:
            if self._processor is None:
                self._processor = BatchSpanProcessor(
                    span_exporter(self.config),
                    max_queue_size=self.config.max_queue_size,
                    max_export_batch_size=512,
                    export_timeout_millis=self.config.timeout_s * 1000,
                )
            return self._processor

    def _resource(self, host: str, items: tuple[tuple[str, op.AttrValue], ...]) -> Resource:
        """The SDK resource of a ``ResourceSpans`` (at most ``max_resources``;
        later ones share their host's resource without model/GPU attributes)."""
        with self._state:
            if items not in self._resources and len(self._resources) >= self.config.max_resources:
                items = tuple((k, v) for k, v in op.resource_items(
                    host, None, None, self.config.service_name) if v is not None)
            res = self._resources.get(items)
            if res is None:
                res = Resource.create({**self.config.resource_attributes, **dict(items)})
                self._resources[items] = res
            return res

    def _emit_traces(self, final: bool) -> None:
        for host, ks, its in self._assembler.take(time.monotonic(), final):
            self._export_spans(host, ks, its)

    def _export_spans(self, host: str, ks: pa.Table, its: pa.Table) -> None:
        """The released tree as the bus encoding builds it (same span ids),
        handed to the SDK's batch processor as finished spans."""
        plan = op.plan_spans(ks, its, self.config.policy)
        req = op.traces_request(ks, its, host, self.config.policy, self.config.service_name,
                                plan=plan)
        processor = self._span_processor()
        n = 0
        for rs in req.resource_spans:
            base = tuple((kv.key, op.from_any_value(kv.value)) for kv in rs.resource.attributes)
            for ss in rs.scope_spans:
                scope = InstrumentationScope(ss.scope.name)
                for sp in ss.spans:
                    pod = self._k8s.pid(host, attr_value(sp.attributes, op.A_PID))
                    res = self._resource(host, base + pod)
                    tid = int.from_bytes(sp.trace_id, "big")
                    ctx = trace_api.SpanContext(tid, int.from_bytes(sp.span_id, "big"),
                                                is_remote=False, trace_flags=_SAMPLED)
                    parent = (trace_api.SpanContext(tid, int.from_bytes(sp.parent_span_id, "big"),
                                                    is_remote=True, trace_flags=_SAMPLED)
                              if sp.parent_span_id else None)
                    processor.on_end(ReadableSpan(
                        sp.name, context=ctx, parent=parent, resource=res,
                        attributes={kv.key: op.from_any_value(kv.value) for kv in sp.attributes},
                        kind=trace_api.SpanKind.INTERNAL, instrumentation_scope=scope,
                        start_time=sp.start_time_unix_nano, end_time=sp.end_time_unix_nano))
                    n += 1
        with self._state:
            self.kernels_dropped += plan.kernels_dropped
            self.spans_exported += n

    # ---- LLM metrics ----------------------------------------------------
    def export_llm(self, now_ns: int | None = None) -> int:
        """Export the cumulative LLM metrics of every key not stale
        (:data:`exporter.sinks.otlp_llm.LLM_STALE_S`) in one request; returns
        the points sent (0 when there are none). Blocks up to ``timeout_s``;
        a failed export is counted under ``otlp_export_error``, never raised."""
        self.llm.expire(otlp_llm.LLM_STALE_S)
        series = self.llm.snapshot()
        if not series:
            return 0
        now_ns = time.time_ns() if now_ns is None else now_ns
        scope = InstrumentationScope(op.SCOPE_NAME)
        rms = []
        npoints = 0
        for host in sorted({s.host for s in series}):
            mine = [s for s in series if s.host == host]
            metrics = otlp_llm.sdk_metrics(mine, now_ns, self._k8s.pid)
            npoints += sum(len(m.data.data_points) for m in metrics)
            rms.append(ResourceMetrics(self._metric_resource(host),
                                       [ScopeMetrics(scope, metrics, "")], ""))
        with self._llm_export:
            with self._state:
                if self._llm_exporter is None:
                    self._llm_exporter = metric_exporter(self.config)
                exporter = self._llm_exporter
            result = exporter.export(MetricsData(rms),
                                     timeout_millis=self.config.timeout_s * 1000)
        with self._state:
            if result is MetricExportResult.SUCCESS:
                self.llm_exports += 1
            else:
                self.drops["otlp_export_error"] += 1
        return npoints

    def take_drops(self) -> Counter[str]:
        """The drops counted since the previous call (by reason), reset."""
        with self._state:
            out, self.drops = self.drops, Counter()
        return out

    # ---- metrics --------------------------------------------------------
    def _metric_resource(self, host: str) -> Resource:
        """The resource of ``host``'s metrics (service.name, host.name and the
        configured resource attributes)."""
        items = op.resource_items(host, None, None, self.config.service_name)
        return Resource.create({**self.config.resource_attributes,
                                **{k: v for k, v in items if v is not None}})

    def _series_for(self, host: str, name: str, kind: str, unit: str) -> _Series | None:
        with self._state:
            return self._series_for_locked(host, name, kind, unit)

    def _series_for_locked(self, host: str, name: str, kind: str, unit: str) -> _Series | None:
        key = (host, name, kind, unit)
        s = self._series.get(key)
        if s is not None:
            return s
        mp = self._meters.get(host)
        if mp is None:
            if len(self._meters) >= self.config.max_resources:
                return None
            reader = PeriodicExportingMetricReader(
                metric_exporter(self.config),
                export_interval_millis=self.config.export_interval_s * 1000,
                export_timeout_millis=self.config.timeout_s * 1000,
            )
            mp = MeterProvider(
                metric_readers=[reader],
                resource=self._metric_resource(host),
                shutdown_on_exit=False,
            )
            self._meters[host] = mp
        meter = mp.get_meter(op.SCOPE_NAME)
        s = _Series(self._lock)
        make: Callable[..., Any] = (
            meter.create_observable_counter if kind == "counter" else meter.create_observable_gauge
        )
        make(name, callbacks=[s.callback], unit=unit)
        self._series[key] = s
        return s

    def _update_analytics(self, t: pa.Table, host: str) -> None:
        if t.num_rows == 0:
            return
        order = pc.sort_indices(t, [("ts_ns", "ascending")])
        t = t.take(order)
        attrs = [
            (tuple((k, v) for k, v in op.analytics_point_items(m, p) if v is not None),
             self._k8s.pid(host, p))
            for m, p in zip(t.column("model").to_pylist(), t.column("pid").to_pylist(), strict=True)
        ]
        for metric, column in catalogue.ANALYTICS_POINTS:
            s = self._series_for(host, metric.otel, metric.kind, metric.unit)
            if s is None:
                continue
            with self._lock:
                for (a, pod), v in zip(attrs, t.column(column.name).to_pylist(), strict=True):
                    if v is not None:
                        s.set(a + column.attrs, pod, float(v))

    def _update_gauges(self, t: pa.Table, host: str) -> None:
        if t.num_rows == 0:
            return
        t = t.take(pc.sort_indices(t, [("ts_ns", "ascending")]))
        cols = {
            c: t.column(c).to_pylist()
            for c in ("metric", "value", "kind", "unit", "source", "gpu_index", "gpu_uuid")
        }
        extra = t.column("attributes").to_pylist()
        for r in range(t.num_rows):
            kind = "counter" if cols["kind"][r] == "counter" else "gauge"
            s = self._series_for(host, str(cols["metric"][r]), kind, str(cols["unit"][r]))
            if s is None:
                continue
            items = op.gauge_point_items(
                cols["source"][r], cols["gpu_index"][r], cols["gpu_uuid"][r], extra[r]
            )
            a = tuple((k, v) for k, v in items if v is not None)
            holder = self._k8s.gpu(host, cols["gpu_index"][r], cols["gpu_uuid"][r])
            with self._lock:
                s.set(a, holder, float(cols["value"][r]))
