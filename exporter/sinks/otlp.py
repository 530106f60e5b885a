"""OTLP sink: traces and metrics to an OpenTelemetry backend via the OTel SDK.

:class:`OtlpSink` takes bus batches (:meth:`OtlpSink.ingest`) and exports

* **traces** (``kernel_span`` + ``iteration_span``): one ``inference`` span
  per iteration with its kernel spans as children, chosen by
  :class:`exporter.sinks.otlp_proto.SpanPolicy` (all kernels of 1-in-N
  iterations, the top-K longest of the others; kernels without iteration
  under a synthetic ``kernels`` parent, capped). Start/end times are the
  rows' own ``start_ns``/``end_ns``. One ``TracerProvider`` per
  ``(host, model, agent_id)`` resource (at most ``max_resources``; later keys
  share the last resource of their host without model/GPU attributes).
* **metrics** (``analytics_result`` + ``gauge_sample``): observable gauges /
  counters reporting the latest value per series, one ``MeterProvider`` per
  host, exported every ``export_interval_s``.
* **Kubernetes / Slurm** (``k8s_attribution``, the ``k8s`` collector's
  snapshot): an iteration span's resource gains ``k8s.pod.name``,
  ``k8s.namespace.name``, ``k8s.container.name`` and ``slurm.job.id`` of
  its process; analytics points (keyed by pid) and ``hw.gpu.*`` points (the
  GPU's holder) carry the same attributes (a host's metrics share one
  resource). ``k8s.node.name`` is a resource attribute the daemon adds to
  ``resource_attributes`` when the ``k8s`` collector runs.

Attribute names, span names and the span policy are those of
:mod:`exporter.sinks.otlp_proto` (the bus encoding), documented in
``docs/otlp-and-perfetto.md``.

Kernels and their iteration may arrive in different batches: a kernel whose
iteration is not buffered yet, and an iteration with fewer buffered kernels
than its ``kernel_count``, wait for one more :meth:`OtlpSink.flush`; after
that (or on :meth:`OtlpSink.close`) they are exported as they are.

Errors: :class:`ValueError` for a bad :class:`OtlpConfig`; export failures are
handled (retried, then logged and dropped) by the OTel exporters and never
raise from :meth:`OtlpSink.ingest`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON

from exporter.sinks import otlp_proto as op
from exporter.sinks.otlp_k8s import K8sAttributes

Protocol = Literal["grpc", "http/protobuf"]
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


@dataclass
class _Pending:
    kernels: list[pa.Table] = field(default_factory=list)
    kernel_carried: list[npt.NDArray[np.bool_]] = field(default_factory=list)
    iterations: list[pa.Table] = field(default_factory=list)
    iteration_carried: list[npt.NDArray[np.bool_]] = field(default_factory=list)

    def kernel_rows(self) -> int:
        return sum(t.num_rows for t in self.kernels)


def _concat(
    tables: list[pa.Table], flags: list[npt.NDArray[np.bool_]], schema: pa.Schema
) -> tuple[pa.Table, npt.NDArray[np.bool_]]:
    if not tables:
        return schema.empty_table(), np.zeros(0, dtype=bool)
    t = pa.concat_tables(tables).unify_dictionaries().combine_chunks()
    return t, np.concatenate(flags)


class _Series:
    """Latest value per attribute set of one observable instrument (thread-safe)."""

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock
        self.values: dict[Attrs, float] = {}
        self.full: dict[Attrs, Attrs] = {}  # base attributes -> with k8s attributes

    def set(self, base: Attrs, extra: Attrs, value: float) -> None:
        """Latest ``value`` of series ``base``; its k8s ``extra`` attributes
        replace earlier ones (a pod's GPU or process has one holder at a
        time). Call with :attr:`lock` held."""
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


def _caller_context(trace_id: object, span_id: object) -> Context | None:
    """A context whose (remote) span is the recorded caller span, so the
    iteration span becomes its child; None (the current context) without one."""
    caller = op.remote_parent(trace_id, span_id)
    if caller is None:
        return None
    sc = trace_api.SpanContext(int.from_bytes(caller[0], "big"), int.from_bytes(caller[1], "big"),
                               is_remote=True, trace_flags=trace_api.TraceFlags(1))
    return trace_api.set_span_in_context(trace_api.NonRecordingSpan(sc))


class OtlpSink:
    """Export bus signals to an OTLP backend (see the module docstring)."""

    def __init__(self, config: OtlpConfig) -> None:
        self.config = config
        self._lock = threading.Lock()  # metric values (read by the reader threads)
        # pending spans, providers and counters: ingest runs on the event loop,
        # flush/close on a worker thread (asyncio.to_thread)
        self._state = threading.Lock()
        self._pending: dict[str, _Pending] = {}
        self._tracers: dict[tuple[str, str | None, int | None, Attrs], TracerProvider] = {}
        self._k8s = K8sAttributes()  # the k8s collector's snapshots, as OTel attributes
        self._meters: dict[str, MeterProvider] = {}
        self._series: dict[tuple[str, str, str, str], _Series] = {}
        self.spans_exported = 0
        self.kernels_dropped = 0

    # ---- ingest ---------------------------------------------------------
    def ingest(self, signal: str, batch: pa.RecordBatch | pa.Table, host: str) -> None:
        """Take one bus batch of ``signal`` from ``host``.

        ``kernel_span``/``iteration_span`` are buffered for traces;
        ``analytics_result``/``gauge_sample`` update the latest metric
        values; other signals are ignored.
        """
        t = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        if signal == "kernel_span":
            with self._state:
                p = self._pending.setdefault(host, _Pending())
                p.kernels.append(t)
                p.kernel_carried.append(np.zeros(t.num_rows, dtype=bool))
                full = p.kernel_rows() >= self.config.batch_rows
            if full:
                self._emit_traces(host, final=False)
        elif signal == "iteration_span":
            with self._state:
                p = self._pending.setdefault(host, _Pending())
                p.iterations.append(t)
                p.iteration_carried.append(np.zeros(t.num_rows, dtype=bool))
        elif signal == "analytics_result":  # rows name their host; the header the worker
            for h, sub in op.split_by_row_host(t, host):
                self._update_analytics(sub, h)
        elif signal == "gauge_sample":
            self._update_gauges(t, host)
        elif signal == "k8s_attribution":
            self._k8s.update(t, host)

    def flush(self) -> None:
        """Export buffered traces (holding incomplete ones once) and force-flush
        both pipelines; blocks up to about ``timeout_s`` per provider.

        Thread-safe against :meth:`ingest`: every access to the pending spans,
        the providers and the counters holds one lock, and each span row is
        exported exactly once."""
        with self._state:
            hosts = list(self._pending)
        for host in hosts:
            self._emit_traces(host, final=False)
        self._force_flush()

    def close(self) -> None:
        """Export everything still buffered, flush and shut the providers down."""
        with self._state:
            hosts = list(self._pending)
        for host in hosts:
            self._emit_traces(host, final=True)
        self._force_flush()
        with self._state:
            tracers, meters = list(self._tracers.values()), list(self._meters.values())
            self._tracers.clear()
            self._meters.clear()
        for tp in tracers:
            tp.shutdown()
        for mp in meters:
            mp.shutdown()

    def _force_flush(self) -> None:
        ms = int(self.config.timeout_s * 1000)
        with self._state:
            tracers, meters = list(self._tracers.values()), list(self._meters.values())
        for tp in tracers:
            tp.force_flush(ms)
        for mp in meters:
            mp.force_flush(ms)

    # ---- traces ---------------------------------------------------------
    def _tracer_provider(self, host: str, model: str | None, agent: int | None,
                         extra: Attrs = ()) -> TracerProvider:
        with self._state:
            return self._tracer_provider_locked(host, model, agent, extra)

    def _tracer_provider_locked(self, host: str, model: str | None,
                                agent: int | None, extra: Attrs = ()) -> TracerProvider:
        key = (host, model, agent, extra)
        if key not in self._tracers and len(self._tracers) >= self.config.max_resources:
            key = (host, None, None, ())
            model = agent = None
            extra = ()
        if key not in self._tracers:
            items = op.resource_items(host, model, agent, self.config.service_name)
            resource = Resource.create({**self.config.resource_attributes,
                                        **{k: v for k, v in items if v is not None},
                                        **dict(extra)})
            tp = TracerProvider(sampler=ALWAYS_ON, resource=resource, shutdown_on_exit=False)
            tp.add_span_processor(
                BatchSpanProcessor(
                    span_exporter(self.config),
                    max_queue_size=self.config.max_queue_size,
                    max_export_batch_size=512,
                    export_timeout_millis=self.config.timeout_s * 1000,
                )
            )
            self._tracers[key] = tp
        return self._tracers[key]

    def _emit_traces(self, host: str, final: bool) -> None:
        from exporter.schema import ITERATION_SPAN, KERNEL_SPAN

        with self._state:  # take the host's buffer; ingest starts a new one
            p = self._pending.pop(host, None)
        if p is None:
            return
        ks, k_carried = _concat(p.kernels, p.kernel_carried, KERNEL_SPAN)
        its, i_carried = _concat(p.iterations, p.iteration_carried, ITERATION_SPAN)
        parent = op.match_iterations(ks, its)
        matched = parent >= 0
        have = np.bincount(parent[matched], minlength=its.num_rows)[: its.num_rows]
        want = np.asarray(its.column("kernel_count").to_numpy(), dtype=np.int64)
        it_ready = final | i_carried | (have >= want)
        no_iter = np.asarray(ks.column("iteration").is_null().to_numpy(zero_copy_only=False))
        k_ready = final | k_carried | no_iter
        k_ready[matched] = it_ready[parent[matched]]
        if not (final or k_ready.all()) or not (final or it_ready.all()):
            keep = _Pending()
            if (~k_ready).any():
                keep.kernels.append(ks.filter(pa.array(~k_ready)))
                keep.kernel_carried.append(np.ones(int((~k_ready).sum()), dtype=bool))
            if (~it_ready).any():
                keep.iterations.append(its.filter(pa.array(~it_ready)))
                keep.iteration_carried.append(np.ones(int((~it_ready).sum()), dtype=bool))
            with self._state:  # held rows first, then what arrived meanwhile
                cur = self._pending.get(host)
                if cur is not None:
                    keep.kernels += cur.kernels
                    keep.kernel_carried += cur.kernel_carried
                    keep.iterations += cur.iterations
                    keep.iteration_carried += cur.iteration_carried
                self._pending[host] = keep
        self._export_spans(host, ks.filter(pa.array(k_ready)), its.filter(pa.array(it_ready)))

    def _export_spans(self, host: str, ks: pa.Table, its: pa.Table) -> None:
        if ks.num_rows == 0 and its.num_rows == 0:
            return
        plan = op.plan_spans(ks, its, self.config.policy)
        with self._state:
            self.kernels_dropped += plan.kernels_dropped
        parents: list[tuple[Any, Any]] = []  # (tracer, span) by plan parent index
        ic = {
            c: its.column(c).to_pylist()
            for c in ("start_ns", "end_ns", "source", "model", "pid", "iteration", "kernel_count")
        }
        extra = op.iteration_columns(its, [c for c, _ in op.ITERATION_ATTR_COLUMNS])
        callers = op.iteration_columns(its, ("trace_id", "parent_span_id"))
        ends: list[int] = []
        for i in range(plan.n_iterations):
            model = ic["model"][i]
            tracer = self._tracer_provider(host, model, None, self._k8s.pid(
                host, ic["pid"][i])).get_tracer(op.SCOPE_NAME)
            items = op.iteration_items(
                plan, i, ic["source"][i], ic["pid"][i], ic["iteration"][i], ic["kernel_count"][i]
            ) + [(attr, extra[c][i]) for c, attr in op.ITERATION_ATTR_COLUMNS]
            span = tracer.start_span(
                op.ITERATION_SPAN_NAME,
                context=_caller_context(callers["trace_id"][i], callers["parent_span_id"][i]),
                kind=trace_api.SpanKind.INTERNAL,
                start_time=ic["start_ns"][i],
                attributes={k: v for k, v in items if v is not None},
            )
            parents.append((tracer, span))
            ends.append(ic["end_ns"][i])
        for g in plan.groups:
            tracer = self._tracer_provider(host, g.model, g.agent_id).get_tracer(op.SCOPE_NAME)
            span = tracer.start_span(
                op.SYNTHETIC_SPAN_NAME,
                kind=trace_api.SpanKind.INTERNAL,
                start_time=g.start_ns,
                attributes={k: v for k, v in op.group_items(g) if v is not None},
            )
            parents.append((tracer, span))
            ends.append(g.end_ns)
        if len(plan.kernel_rows):
            sel = ks.take(pa.array(plan.kernel_rows))
            cols = op.kernel_columns(sel)
            starts = sel.column("start_ns").to_pylist()
            kends = sel.column("end_ns").to_pylist()
            names = sel.column("kernel_name").to_pylist()
            for j, pidx in enumerate(plan.kernel_parent.tolist()):
                tracer, pspan = parents[pidx]
                child = tracer.start_span(
                    op.kernel_span_name(names[j]),
                    context=trace_api.set_span_in_context(pspan),
                    kind=trace_api.SpanKind.INTERNAL,
                    start_time=starts[j],
                    attributes={a: vals[j] for a, vals in cols if vals[j] is not None},
                )
                child.end(end_time=kends[j])
        for (_, span), end in zip(parents, ends, strict=True):
            span.end(end_time=end)
        with self._state:
            self.spans_exported += len(parents) + len(plan.kernel_rows)

    # ---- metrics --------------------------------------------------------
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
            items = op.resource_items(host, None, None, self.config.service_name)
            reader = PeriodicExportingMetricReader(
                metric_exporter(self.config),
                export_interval_millis=self.config.export_interval_s * 1000,
                export_timeout_millis=self.config.timeout_s * 1000,
            )
            mp = MeterProvider(
                metric_readers=[reader],
                resource=Resource.create({**self.config.resource_attributes,
                                          **{k: v for k, v in items if v is not None}}),
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
        for col, name, unit in op.ANALYTICS_GAUGES + op.ANALYTICS_COUNTERS:
            kind = "gauge" if (col, name, unit) in op.ANALYTICS_GAUGES else "counter"
            s = self._series_for(host, name, kind, unit)
            if s is None:
                continue
            with self._lock:
                for (a, extra), v in zip(attrs, t.column(col).to_pylist(), strict=True):
                    if v is not None:
                        s.set(a, extra, float(v))

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
