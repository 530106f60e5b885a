"""LLM generate-loop metrics for OTLP: the catalogue's ``aaco.llm.*`` from ``generate_span``.

Both OTLP outputs (:class:`exporter.sinks.otlp.OtlpSink`, the SDK exporter,
and :class:`exporter.sinks.otlp_bus.OtlpBusBridge`, OTLP on the bus) fold
``generate_span`` batches with their own
:class:`stream_analytics.llm_metrics.LlmMetrics` -- the fold, bucket bounds,
model-label cap and drop reason of the Prometheus sink, so for the same input
the points equal the ``aaco_llm_*`` series of ``/metrics`` -- and export its
cumulative state (:meth:`LlmMetrics.snapshot`). Each metric of
:data:`exporter.catalogue.LLM_POINTS` (name, unit, description from the
catalogue) gets one point per (host, model, pid) key:

* ``llm="ttft"`` / ``"itl"``: an explicit-bucket histogram, cumulative,
  unit ``s``, bounds :data:`~stream_analytics.llm_metrics.TTFT_BUCKETS_S` /
  :data:`~stream_analytics.llm_metrics.ITL_BUCKETS_S` (the Prometheus ``le``
  bounds), with count, sum, min and max (min/max unset while empty);
* ``llm="tokens"``: a monotonic cumulative sum of output tokens;
* ``llm="tps"``: a gauge of the latest timed call's tokens/s (absent before one).

Points carry ``aaco.model`` and ``process.pid`` (int) plus the process's
k8s/Slurm attributes (:mod:`exporter.sinks.otlp_k8s`); ``host.name`` is on
the resource, as for the analytics metrics. Cumulative points start at the
key's ``start_ns``. Pre-aggregated: no SDK ``record`` call per call or
step; an export costs one point per key and metric (at most
``max_models_per_pid`` keys per pid, keys expire after :data:`LLM_STALE_S`).

:func:`sdk_metrics` builds OpenTelemetry SDK ``Metric`` objects (handed to a
``MetricExporter``); :func:`proto_metrics` the ``opentelemetry-proto``
messages of the bus copy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, cast

from opentelemetry.proto.metrics.v1 import metrics_pb2

from exporter import catalogue
from exporter.sinks import otlp_proto as op
from stream_analytics.llm_metrics import HistSnapshot, LlmSeries

if TYPE_CHECKING:  # the SDK is imported by sdk_metrics only: the bus copy needs the proto alone
    from opentelemetry.sdk.metrics.export import Gauge, Histogram, Metric, Sum

LLM_STALE_S = 300.0
"""Seconds without a ``generate_span`` after which an OTLP output forgets a
key (the Prometheus sink's default ``stale_s``)."""
DROP_MODEL_CAP = "otlp_llm_model_cap"
"""Drop reason of generate calls an OTLP output does not export (the pid's model cap)."""

Attrs = tuple[tuple[str, op.AttrValue], ...]
ExtraAttrs = Callable[[str, str], tuple[tuple[str, str], ...]]
"""``(host, pid) -> k8s/Slurm attributes`` (:meth:`K8sAttributes.pid`)."""


def _none(host: str, pid: str) -> tuple[tuple[str, str], ...]:
    return ()


def point_attrs(s: LlmSeries, extra: ExtraAttrs = _none) -> Attrs:
    """Data point attributes of key ``s``: ``aaco.model``, ``process.pid`` and ``extra``'s."""
    items = tuple((k, v) for k, v in op.analytics_point_items(s.model, s.pid) if v is not None)
    return items + extra(s.host, s.pid)


def _points(series: Sequence[LlmSeries], metric: catalogue.MetricDef,
            extra: ExtraAttrs) -> Iterator[tuple[LlmSeries, Attrs, object]]:
    for s in series:
        v = getattr(s, metric.llm)
        if v is not None:
            yield s, point_attrs(s, extra), v


def sdk_metrics(series: Sequence[LlmSeries], now_ns: int,
                extra: ExtraAttrs = _none) -> list[Metric]:
    """SDK ``Metric`` objects for the keys ``series`` (one host's), at ``now_ns``
    (Unix ns); metrics without a point are left out."""
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        Gauge,
        Histogram,
        HistogramDataPoint,
        Metric,
        NumberDataPoint,
        Sum,
    )

    out: list[Metric] = []
    for m in catalogue.LLM_POINTS:
        hist: list[HistogramDataPoint] = []
        nums: list[NumberDataPoint] = []
        for s, a, v in _points(series, m, extra):
            if isinstance(v, HistSnapshot):
                hist.append(HistogramDataPoint(
                    attributes=dict(a), start_time_unix_nano=s.start_ns, time_unix_nano=now_ns,
                    count=v.count, sum=v.total, bucket_counts=list(v.counts),
                    explicit_bounds=list(v.bounds),
                    # None leaves the optional protobuf field unset (empty histogram)
                    min=cast(float, v.lo), max=cast(float, v.hi)))
            else:
                nums.append(NumberDataPoint(attributes=dict(a), start_time_unix_nano=s.start_ns,
                                            time_unix_nano=now_ns, value=cast(int | float, v)))
        if hist:
            data: Histogram | Sum | Gauge = Histogram(
                data_points=hist, aggregation_temporality=AggregationTemporality.CUMULATIVE)
        elif nums and m.kind == "counter":
            data = Sum(data_points=nums, is_monotonic=True,
                       aggregation_temporality=AggregationTemporality.CUMULATIVE)
        elif nums:
            data = Gauge(data_points=nums)
        else:
            continue
        out.append(Metric(name=m.otel, description=m.help, unit=m.unit, data=data))
    return out


def proto_metrics(series: Sequence[LlmSeries], now_ns: int,
                  extra: ExtraAttrs = _none) -> list[metrics_pb2.Metric]:
    """The same metrics as :func:`sdk_metrics`, as ``opentelemetry-proto`` messages."""
    out: list[metrics_pb2.Metric] = []
    for m in catalogue.LLM_POINTS:
        pm = metrics_pb2.Metric(name=m.otel, unit=m.unit, description=m.help)
        n = 0
        for s, a, v in _points(series, m, extra):
            attrs = op.key_values(a)
            n += 1
            if isinstance(v, HistSnapshot):
                pm.histogram.aggregation_temporality = \
                    metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
                pm.histogram.data_points.append(metrics_pb2.HistogramDataPoint(
                    attributes=attrs, start_time_unix_nano=s.start_ns, time_unix_nano=now_ns,
                    count=v.count, sum=v.total, bucket_counts=v.counts,
                    explicit_bounds=v.bounds, min=v.lo, max=v.hi))
                continue
            p = metrics_pb2.NumberDataPoint(attributes=attrs, start_time_unix_nano=s.start_ns,
                                            time_unix_nano=now_ns)
            if isinstance(v, int):
                p.as_int = v
            else:
                p.as_double = cast(float, v)
            if m.kind == "counter":
                pm.sum.is_monotonic = True
                pm.sum.aggregation_temporality = metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
                pm.sum.data_points.append(p)
            else:
                pm.gauge.data_points.append(p)
        if n:
            out.append(pm)
    return out
