"""OTLP protobuf on the bus: the same spans and metrics as the OTLP exporter.

Every ``flush()`` turns the kernel and iteration spans and the latest
analytics results and gauges received since the previous flush into one
``ExportTraceServiceRequest`` and one ``ExportMetricsServiceRequest``
(:mod:`exporter.sinks.otlp_proto`, same span policy and attributes as
:class:`exporter.sinks.otlp.OtlpSink`) and publishes them on
``aaco.v1.otlp.traces.<host>`` and ``aaco.v1.otlp.metrics.<host>``.
Span trees are released by the same
:class:`~exporter.sinks.span_assembler.SpanAssembler` rule as the SDK
exporter's (an iteration waits for its ``kernel_count`` kernels, at most
``hold_s``), with the same deterministic span ids.
With ``k8s_attribution`` from the host, points and iteration spans carry
the pod / Slurm attributes of :mod:`exporter.sinks.otlp_k8s`.
``generate_span`` batches are folded by a
:class:`~stream_analytics.llm_metrics.LlmMetrics` (the Prometheus sink's
fold and model cap); a host that sent any since the previous flush gets its
cumulative ``aaco.llm.*`` points (:func:`exporter.sinks.otlp_llm.proto_metrics`)
in that flush's metrics request. Calls over the model cap are counted in
:attr:`OtlpBusBridge.drops` (``otlp_llm_model_cap``; ``otlp_span_too_large``: spans
of one iteration whose tree alone exceeds the bus's ``max_payload_bytes``).
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections import Counter, defaultdict

import pyarrow as pa
import pyarrow.compute as pc

from exporter import schema
from exporter.bus import Bus
from exporter.sinks import otlp_llm
from exporter.sinks.otlp_k8s import K8sAttributes, annotate_metrics, annotate_traces
from exporter.sinks.otlp_proto import (
    SpanPolicy,
    metrics_request,
    split_by_row_host,
    traces_request,
)
from exporter.sinks.span_assembler import DEFAULT_HOLD_S, SpanAssembler
from stream_analytics.llm_metrics import DROP_MODEL_CAP as LLM_MODEL_CAP
from stream_analytics.llm_metrics import LlmMetrics


def _empty(signal: str) -> pa.Table:
    return pa.Table.from_batches([], schema=schema.SCHEMAS[signal])


DROP_SPAN_TOO_LARGE = "otlp_span_too_large"
"""Drop reason: spans of a tree that fits no bus message even alone."""


class OtlpBusBridge:
    """Buffers decoded batches per host; :meth:`flush` publishes OTLP requests."""

    def __init__(self, policy: SpanPolicy | None = None, hold_s: float = DEFAULT_HOLD_S,
                 max_waiting_rows: int = 1_000_000) -> None:
        self.policy = policy or SpanPolicy()
        self.spans = SpanAssembler(hold_s=hold_s, max_rows=max_waiting_rows)
        self._buf: dict[str, dict[str, list[pa.Table]]] = defaultdict(lambda: defaultdict(list))
        self._seq = itertools.count()
        self._run = uuid.uuid4().hex[:8]
        self.published = 0
        self.dropped = 0
        self.k8s = K8sAttributes()
        self.llm = LlmMetrics()
        self._llm_hosts: set[str] = set()  # hosts with generate_span since the last flush
        self.drops: Counter[str] = Counter()

    def ingest(self, signal: str, host: str, batch: pa.RecordBatch | pa.Table) -> None:
        if signal == "k8s_attribution":
            self.k8s.update(batch, host)
            return
        t = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        if signal in ("kernel_span", "iteration_span"):
            self.spans.add(host, signal, t, time.monotonic())
        elif signal == "analytics_result":  # rows name their host; the header the worker
            for h, sub in split_by_row_host(t, host):
                self._buf[h][signal].append(sub)
        elif signal == "gauge_sample":
            self._buf[host][signal].append(t)
        elif signal == "generate_span":
            before = self.llm.drops[LLM_MODEL_CAP]
            self.llm.observe_table(host, t)
            self.drops[otlp_llm.DROP_MODEL_CAP] += self.llm.drops[LLM_MODEL_CAP] - before
            self._llm_hosts.add(host)

    def _take(self, host: str, signal: str) -> pa.Table | None:
        parts = self._buf[host].pop(signal, [])
        return pa.concat_tables(parts) if parts else None

    async def _publish_traces(self, bus: Bus, host: str, kernels: pa.Table,
                              iters: pa.Table) -> int:
        """One request, or halves by iterations (kernels follow their iteration)
        until each message fits ``bus.cfg.max_payload_bytes``."""
        req = traces_request(kernels, iters, host, self.policy)
        annotate_traces(req, host, self.k8s)
        msg = schema.encode_otlp("traces", req, host=host,
                                 msg_id=f"otlp-{self._run}-{next(self._seq)}")
        if len(msg.payload) <= bus.cfg.max_payload_bytes:
            await bus.send(msg)
            return 1
        if iters.num_rows > 1:
            half = iters.num_rows // 2
            n = 0
            for part in (iters.slice(0, half), iters.slice(half)):
                mine = pc.fill_null(pc.is_in(kernels.column("iteration"),
                                             value_set=part.column("iteration")), False)
                n += await self._publish_traces(bus, host, kernels.filter(mine), part)
            orphans = kernels.filter(pc.is_null(kernels.column("iteration")))
            if orphans.num_rows:
                n += await self._publish_traces(bus, host, orphans, _empty("iteration_span"))
            return n
        if kernels.num_rows > 1 and iters.num_rows == 0:
            half = kernels.num_rows // 2
            return (await self._publish_traces(bus, host, kernels.slice(0, half), iters)
                    + await self._publish_traces(bus, host, kernels.slice(half), iters))
        # one iteration's span tree (or one kernel) over the bus's payload limit
        self.dropped += kernels.num_rows + iters.num_rows
        self.drops[DROP_SPAN_TOO_LARGE] += kernels.num_rows + iters.num_rows
        return 0

    async def flush(self, bus: Bus, final: bool = False) -> int:
        """Publish the ready span trees and one metrics request per host;
        ``final`` releases every buffered span. Returns messages published."""
        n = 0
        for host, kernels, iters in self.spans.take(time.monotonic(), final):
            n += await self._publish_traces(bus, host, kernels, iters)
        self.llm.expire(otlp_llm.LLM_STALE_S)
        llm_hosts, self._llm_hosts = self._llm_hosts, set()
        now_ns = time.time_ns()
        for host in sorted(set(self._buf) | llm_hosts):
            analytics = self._take(host, "analytics_result")
            gauges = self._take(host, "gauge_sample")
            llm = (otlp_llm.proto_metrics(self.llm.snapshot(host), now_ns)
                   if host in llm_hosts else [])
            if analytics is not None or gauges is not None or llm:
                mreq = metrics_request(analytics, gauges, host)
                mreq.resource_metrics[0].scope_metrics[0].metrics.extend(llm)
                annotate_metrics(mreq, host, self.k8s)
                msg = schema.encode_otlp("metrics", mreq, host=host,
                                         msg_id=f"otlp-{self._run}-{next(self._seq)}")
                await bus.send(msg)
                n += 1
        self.published += n
        return n

    def take_drops(self) -> Counter[str]:
        """The drops counted since the previous call (by reason), reset."""
        out, self.drops = self.drops, Counter()
        return out
