"""OTLP protobuf requests built directly from Arrow tables (no OpenTelemetry SDK).

:func:`traces_request` and :func:`metrics_request` turn the bus signals into
``ExportTraceServiceRequest`` / ``ExportMetricsServiceRequest`` messages of
``opentelemetry-proto``; their ``SerializeToString()`` bytes are what any
OTLP-aware consumer reads from ``aaco.v1.otlp.traces.<host>`` and
``aaco.v1.otlp.metrics.<host>``. :class:`exporter.sinks.otlp.OtlpSink` uses the
same :class:`SpanPolicy`, :func:`plan_spans` and attribute names, so the
SDK export and the bus encoding describe one trace layout.

Trace layout (see ``docs/otlp-and-perfetto.md``):

* one **root span per inference iteration** (``ITERATION_SPAN`` row), name
  ``inference``, explicit ``start_ns``/``end_ns`` from the row;
* **kernel spans** (``KERNEL_SPAN`` rows with the same ``model``, ``pid`` and
  ``iteration``) are its children, under :class:`SpanPolicy`: every kernel of
  iterations with ``iteration % sample_every == 0``, the ``top_k`` longest
  kernels of the other iterations;
* kernels without a matching iteration (``iteration`` null, e.g. raw
  rocprofv3 GPU traces, or an iteration not in the call) are grouped per
  ``(model, pid, agent_id)`` under one synthetic parent span named
  ``kernels``, keeping the ``orphan_cap`` longest per group.

IDs are deterministic (BLAKE2b of host, model, pid, iteration and start time)
so re-encoding the same rows yields the same trace and span ids.

>>> import pyarrow as pa
>>> from exporter.schema import conform
>>> its = pa.Table.from_batches([conform("iteration_span", pa.table({
...     "start_ns": [0], "end_ns": [100], "duration_ns": [100], "source": ["ort"],
...     "model": ["m"], "pid": [1], "iteration": [0], "kernel_count": [2]}))])
>>> ks = pa.Table.from_batches([conform("kernel_span", pa.table({
...     "start_ns": [10, 50], "end_ns": [40, 90], "duration_ns": [30, 40],
...     "source": ["ort", "ort"], "model": ["m", "m"], "pid": [1, 1],
...     "iteration": [0, 0], "kernel_name": ["a", "b"], "kernel_family": ["x", "x"]}))])
>>> req = traces_request(ks, its, "node-1", SpanPolicy())
>>> spans = req.resource_spans[0].scope_spans[0].spans
>>> [s.name for s in spans], spans[1].parent_span_id == spans[0].span_id
(['inference', 'a', 'b'], True)
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1 import trace_pb2

from exporter import catalogue

SCOPE_NAME = "aaco-exporter"
DEFAULT_SERVICE_NAME = "aaco-exporter"

# Resource attributes.
A_SERVICE = "service.name"
A_HOST = "host.name"
A_MODEL = "aaco.model"
A_GPU_AGENT = "aaco.gpu.agent_id"
# Span attributes (iteration, kernel and synthetic spans).
A_PID = "process.pid"
A_TID = "thread.id"
A_SOURCE = "aaco.source"
A_ITERATION = "aaco.iteration"
A_KERNEL_COUNT = "aaco.kernel_count"
A_SAMPLED = "aaco.sampled"
A_EXPORTED = "aaco.kernels.exported"
A_DROPPED = "aaco.kernels.dropped"
A_SYNTHETIC = "aaco.synthetic"
A_KERNEL_NAME = "aaco.kernel.name"
A_KERNEL_FAMILY = "aaco.kernel.family"
A_OP_TYPE = "aaco.op_type"
A_NODE_NAME = "aaco.node_name"
A_DEVICE = "aaco.device_type"
A_QUEUE = "aaco.gpu.queue_id"
A_STREAM = "aaco.stream_id"
A_CORR = "aaco.correlation_id"
A_DISPATCH = "aaco.dispatch_id"
A_LAUNCH_API = "aaco.launch_api_ns"
A_LAUNCH_DELAY = "aaco.launch_delay_ns"
A_PROVIDER = "aaco.provider"
A_BATCH_SIZE = "aaco.batch_size"
# Metric data point attributes.
A_GPU_INDEX = "aaco.gpu.index"
A_GPU_UUID = "aaco.gpu.uuid"

ITERATION_SPAN_NAME = "inference"
SYNTHETIC_SPAN_NAME = "kernels"

KERNEL_ATTR_COLUMNS: tuple[tuple[str, str], ...] = (
    ("kernel_name", A_KERNEL_NAME),
    ("kernel_family", A_KERNEL_FAMILY),
    ("op_type", A_OP_TYPE),
    ("node_name", A_NODE_NAME),
    ("device_type", A_DEVICE),
    ("source", A_SOURCE),
    ("pid", A_PID),
    ("tid", A_TID),
    ("iteration", A_ITERATION),
    ("agent_id", A_GPU_AGENT),
    ("queue_id", A_QUEUE),
    ("stream_id", A_STREAM),
    ("correlation_id", A_CORR),
    ("dispatch_id", A_DISPATCH),
    ("launch_api_ns", A_LAUNCH_API),
    ("launch_delay_ns", A_LAUNCH_DELAY),
)
"""``KERNEL_SPAN`` column -> kernel span attribute (null values are omitted)."""

AttrValue = str | int | float | bool


def split_by_row_host(t: pa.Table, default: str) -> list[tuple[str, pa.Table]]:
    """``t`` split by its ``host`` column (ANALYTICS_RESULT rows carry the host
    the data came from, while the message's ``Aaco-Host`` header names the
    analytics worker that published them); ``[(default, t)]`` without one.

    >>> t = pa.table({"host": ["a", "b", "a"], "x": [1, 2, 3]})
    >>> [(h, s.column("x").to_pylist()) for h, s in split_by_row_host(t, "worker")]
    [('a', [1, 3]), ('b', [2])]
    """
    if "host" not in t.column_names or t.num_rows == 0:
        return [(default, t)]
    col = t.column("host")
    hosts = [h if h is not None else default for h in pc.unique(col).to_pylist()]
    return [(h, t.filter(pc.fill_null(pc.equal(col, h), False))) for h in hosts]


@dataclass(frozen=True)
class SpanPolicy:
    """Bounded span volume: which kernel rows become spans.

    ``sample_every`` N: iterations with ``iteration % N == 0`` keep all their
    kernels (N <= 1 keeps all kernels of every iteration). ``top_k``: the
    other iterations keep their ``top_k`` longest kernels (0 keeps none).
    ``orphan_cap``: per ``(model, pid, agent_id)`` group of kernels with no
    matching iteration, the ``orphan_cap`` longest are kept per call. So one
    call emits at most ``iterations * max(kernels per sampled iteration,
    top_k) + groups * (orphan_cap + 1)`` spans.
    """

    sample_every: int = 10
    top_k: int = 20
    orphan_cap: int = 256


@dataclass(frozen=True)
class OrphanGroup:
    """A synthetic parent for kernels without a matching iteration."""

    model: str | None
    pid: int | None
    agent_id: int | None
    start_ns: int
    end_ns: int
    kernel_count: int
    kept: int


@dataclass(frozen=True)
class SpanPlan:
    """What :func:`plan_spans` selected.

    ``kernel_rows[j]`` (row index into the kernel table) is exported with
    parent ``kernel_parent[j]``: an iteration row index when
    ``< n_iterations``, else ``n_iterations + g`` for ``groups[g]``.
    ``iter_sampled``/``iter_kept``/``iter_total`` are per iteration row.
    """

    n_iterations: int
    iter_sampled: npt.NDArray[np.bool_]
    iter_kept: npt.NDArray[np.int64]
    iter_total: npt.NDArray[np.int64]
    kernel_rows: npt.NDArray[np.int64]
    kernel_parent: npt.NDArray[np.int64]
    groups: tuple[OrphanGroup, ...]
    kernels_dropped: int


def _ints(col: pa.ChunkedArray | pa.Array, fill: int = -1) -> npt.NDArray[np.int64]:
    arr = pc.fill_null(col, fill) if col.null_count else col
    return np.asarray(arr.to_numpy(), dtype=np.int64)


def _rank_within(
    groups: npt.NDArray[np.int64], dur: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """Rank (0 = longest) of each element by ``dur`` within its group id."""
    n = len(groups)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((-dur, groups))
    sg = groups[order]
    change = np.r_[True, sg[1:] != sg[:-1]]
    starts = np.flatnonzero(change)
    rank_sorted = np.arange(n) - starts[np.cumsum(change) - 1]
    rank = np.empty(n, dtype=np.int64)
    rank[order] = rank_sorted
    return rank


def match_iterations(kernels: pa.Table, iterations: pa.Table) -> npt.NDArray[np.int64]:
    """Iteration row index for each kernel row (``-1`` when none matches)."""
    nk = kernels.num_rows
    if nk == 0 or iterations.num_rows == 0:
        return np.full(nk, -1, dtype=np.int64)
    kt = pa.table(
        {
            "m": pc.cast(kernels.column("model"), pa.string()),
            "p": kernels.column("pid"),
            "i": kernels.column("iteration"),
            "k": pa.array(np.arange(nk, dtype=np.int64)),
        }
    )
    it = pa.table(
        {
            "m": pc.cast(iterations.column("model"), pa.string()),
            "p": iterations.column("pid"),
            "i": iterations.column("iteration"),
            "it": pa.array(np.arange(iterations.num_rows, dtype=np.int64)),
        }
    )
    first = it.group_by(["m", "p", "i"]).aggregate([("it", "min")])
    joined = kt.join(first, keys=["m", "p", "i"], join_type="left outer")
    parent = np.full(nk, -1, dtype=np.int64)
    k = _ints(joined.column("k"))
    parent[k] = _ints(joined.column("it_min"))
    return parent


def plan_spans(kernels: pa.Table, iterations: pa.Table, policy: SpanPolicy) -> SpanPlan:
    """Select kernel rows and their parents under ``policy``.

    ``kernels``/``iterations`` are ``KERNEL_SPAN``/``ITERATION_SPAN`` tables
    (see :func:`exporter.schema.conform`). Pure and columnar; no I/O.
    """
    n_it = iterations.num_rows
    it_no = _ints(iterations.column("iteration"), 0)
    n = max(policy.sample_every, 1)
    sampled = (it_no % n) == 0
    parent = match_iterations(kernels, iterations)
    dur = _ints(kernels.column("duration_ns"), 0)
    matched = parent >= 0
    keep = np.zeros(kernels.num_rows, dtype=bool)
    rank = _rank_within(parent[matched], dur[matched])
    keep[matched] = sampled[parent[matched]] | (rank < policy.top_k)

    groups: list[OrphanGroup] = []
    orphan = np.flatnonzero(~matched)
    if len(orphan):
        model_codes = pc.dictionary_encode(pc.cast(kernels.column("model"), pa.string()))
        mcode = _ints(pa.chunked_array(model_codes.chunks).combine_chunks().indices)
        pid = _ints(kernels.column("pid"))
        agent = _ints(kernels.column("agent_id"))
        key = np.stack([mcode[orphan], pid[orphan], agent[orphan]], axis=1)
        uniq, inv = np.unique(key, axis=0, return_inverse=True)
        inv = inv.reshape(-1).astype(np.int64)
        orank = _rank_within(inv, dur[orphan])
        okeep = orank < policy.orphan_cap
        keep[orphan[okeep]] = True
        parent[orphan] = n_it + inv
        starts = _ints(kernels.column("start_ns"), 0)[orphan]
        ends = _ints(kernels.column("end_ns"), 0)[orphan]
        models = kernels.column("model").to_pylist()
        for g, (mc, p, a) in enumerate(uniq.tolist()):
            sel = inv == g
            first = int(orphan[np.flatnonzero(sel)[0]])
            groups.append(
                OrphanGroup(
                    model=models[first] if mc >= 0 else None,
                    pid=int(p) if kernels.column("pid")[first].is_valid else None,
                    agent_id=int(a) if kernels.column("agent_id")[first].is_valid else None,
                    start_ns=int(starts[sel].min()),
                    end_ns=int(ends[sel].max()),
                    kernel_count=int(sel.sum()),
                    kept=int((sel & okeep).sum()),
                )
            )
    rows = np.flatnonzero(keep).astype(np.int64)
    par = parent[rows]
    it_par = par[par < n_it]
    iter_kept = np.bincount(it_par, minlength=n_it).astype(np.int64)
    iter_total = np.bincount(parent[matched], minlength=n_it).astype(np.int64)
    return SpanPlan(
        n_iterations=n_it,
        iter_sampled=sampled,
        iter_kept=iter_kept[:n_it],
        iter_total=iter_total[:n_it],
        kernel_rows=rows,
        kernel_parent=par,
        groups=tuple(groups),
        kernels_dropped=int(kernels.num_rows - len(rows)),
    )


def _digest(n: int, *parts: object) -> bytes:
    h = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=n).digest()
    return h if any(h) else b"\x01" * n


def trace_id_for(host: str, model: object, pid: object, iteration: object, start_ns: int) -> bytes:
    """Deterministic 16-byte trace id of an iteration (or synthetic group)."""
    return _digest(16, host, model, pid, iteration, start_ns)


def span_id_for(trace_id: bytes, *parts: object) -> bytes:
    """Deterministic non-zero 8-byte span id within ``trace_id``."""
    return _digest(8, trace_id.hex(), *parts)


def any_value(v: AttrValue) -> AnyValue:
    """An ``AnyValue`` for a str/int/float/bool."""
    if isinstance(v, bool):
        return AnyValue(bool_value=v)
    if isinstance(v, int):
        return AnyValue(int_value=v)
    if isinstance(v, float):
        return AnyValue(double_value=v)
    return AnyValue(string_value=str(v))


def from_any_value(v: AnyValue) -> AttrValue:
    """The Python value of an ``AnyValue`` built by :func:`any_value`.

    >>> from_any_value(any_value(3)), from_any_value(any_value("x"))
    (3, 'x')
    """
    kind = v.WhichOneof("value")
    if kind is None:
        return ""
    out: AttrValue = getattr(v, kind)
    return out


def key_values(items: Iterable[tuple[str, AttrValue | None]]) -> list[KeyValue]:
    """``KeyValue`` list of the items whose value is not None."""
    return [KeyValue(key=k, value=any_value(v)) for k, v in items if v is not None]


def resource_items(
    host: str, model: str | None, agent_id: int | None, service_name: str = DEFAULT_SERVICE_NAME
) -> list[tuple[str, AttrValue | None]]:
    """Resource attributes: service.name, host.name, aaco.model, aaco.gpu.agent_id."""
    return [(A_SERVICE, service_name), (A_HOST, host), (A_MODEL, model), (A_GPU_AGENT, agent_id)]


def kernel_columns(kernels: pa.Table) -> list[tuple[str, list[AttrValue | None]]]:
    """``(attribute name, column values)`` for :data:`KERNEL_ATTR_COLUMNS`."""
    return [(attr, kernels.column(col).to_pylist()) for col, attr in KERNEL_ATTR_COLUMNS]


def iteration_items(
    plan: SpanPlan, i: int, source: object, pid: object, iteration: object, count: object
) -> list[tuple[str, AttrValue | None]]:
    """Attributes of iteration span ``i`` of ``plan``."""
    return [
        (A_SOURCE, str(source)),
        (A_PID, int(str(pid))),
        (A_ITERATION, int(str(iteration))),
        (A_KERNEL_COUNT, int(str(count))),
        (A_SAMPLED, bool(plan.iter_sampled[i])),
        (A_EXPORTED, int(plan.iter_kept[i])),
        (A_DROPPED, int(plan.iter_total[i] - plan.iter_kept[i])),
    ]


ITERATION_ATTR_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tid", A_TID),
    ("provider", A_PROVIDER),
    ("batch_size", A_BATCH_SIZE),
)
"""Optional ``ITERATION_SPAN`` column -> iteration span attribute (null: omitted)."""

_HEX = re.compile(r"[0-9a-f]+")


def iteration_columns(
    iterations: pa.Table, names: Sequence[str]
) -> dict[str, list[AttrValue | None]]:
    """``{column: values}``; a column the table lacks (older rows) is all None."""
    n = iterations.num_rows
    return {c: iterations.column(c).to_pylist() if c in iterations.column_names else [None] * n
            for c in names}


def remote_parent(trace_id: object, span_id: object) -> tuple[bytes, bytes] | None:
    """``(trace id, span id)`` bytes of a recorded caller span (``ITERATION_SPAN``
    ``trace_id`` 32 hex, ``parent_span_id`` 16 hex), or None when absent/invalid.

    >>> remote_parent("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")[1].hex()
    'b7ad6b7169203331'
    >>> remote_parent("00000000000000000000000000000000", "b7ad6b7169203331") is None
    True
    """
    if not (isinstance(trace_id, str) and isinstance(span_id, str)):
        return None
    t, s = trace_id.lower(), span_id.lower()
    if len(t) != 32 or len(s) != 16 or not (_HEX.fullmatch(t) and _HEX.fullmatch(s)):
        return None
    tb, sb = bytes.fromhex(t), bytes.fromhex(s)
    return (tb, sb) if any(tb) and any(sb) else None


def group_items(g: OrphanGroup) -> list[tuple[str, AttrValue | None]]:
    """Attributes of a synthetic orphan-group span."""
    return [
        (A_SYNTHETIC, True),
        (A_PID, g.pid),
        (A_GPU_AGENT, g.agent_id),
        (A_KERNEL_COUNT, g.kernel_count),
        (A_EXPORTED, g.kept),
        (A_DROPPED, g.kernel_count - g.kept),
    ]


def kernel_span_name(name: object) -> str:
    """Span name of a kernel: its raw name, cut to 256 characters."""
    return str(name)[:256]


def traces_request(
    kernels: pa.Table,
    iterations: pa.Table,
    host: str,
    policy: SpanPolicy,
    service_name: str = DEFAULT_SERVICE_NAME,
    plan: SpanPlan | None = None,
) -> ExportTraceServiceRequest:
    """Build an ``ExportTraceServiceRequest`` from kernel and iteration tables.

    ``kernels``: ``KERNEL_SPAN`` table; ``iterations``: ``ITERATION_SPAN``
    table (either may have zero rows); ``plan``: :func:`plan_spans` of them
    under ``policy`` when the caller has it already. One ``ResourceSpans``
    per model (iterations) and per ``(model, agent_id)`` (synthetic groups);
    all times are the rows' own ``start_ns``/``end_ns`` (ns since the Unix
    epoch). Span ids are deterministic: a function of the host and the rows'
    own fields, never of batching, so every output names a span alike.
    """
    if plan is None:
        plan = plan_spans(kernels, iterations, policy)
    req = ExportTraceServiceRequest()
    scopes: dict[tuple[object, object], trace_pb2.ScopeSpans] = {}

    def scope_for(model: str | None, agent: int | None) -> trace_pb2.ScopeSpans:
        key = (model, agent)
        if key not in scopes:
            rs = req.resource_spans.add()
            rs.resource.CopyFrom(
                Resource(attributes=key_values(resource_items(host, model, agent, service_name)))
            )
            ss = rs.scope_spans.add()
            ss.scope.CopyFrom(InstrumentationScope(name=SCOPE_NAME))
            scopes[key] = ss
        return scopes[key]

    parent_ids: list[tuple[bytes, bytes, trace_pb2.ScopeSpans]] = []
    icols = {
        c: iterations.column(c).to_pylist()
        for c in ("start_ns", "end_ns", "source", "model", "pid", "iteration", "kernel_count")
    }
    extra = iteration_columns(iterations, [c for c, _ in ITERATION_ATTR_COLUMNS])
    callers = iteration_columns(iterations, ("trace_id", "parent_span_id"))
    for i in range(plan.n_iterations):
        model = icols["model"][i]
        caller = remote_parent(callers["trace_id"][i], callers["parent_span_id"][i])
        if caller is None:
            tid = trace_id_for(
                host, model, icols["pid"][i], icols["iteration"][i], icols["start_ns"][i]
            )
            sid, psid = span_id_for(tid, "iteration"), b""
        else:  # a child of the caller's span, in the caller's trace
            tid, psid = caller
            sid = span_id_for(tid, "iteration", host, model, icols["pid"][i],
                              icols["iteration"][i], icols["start_ns"][i])
        ss = scope_for(model, None)
        items = iteration_items(
            plan,
            i,
            icols["source"][i],
            icols["pid"][i],
            icols["iteration"][i],
            icols["kernel_count"][i],
        ) + [(attr, extra[c][i]) for c, attr in ITERATION_ATTR_COLUMNS]
        ss.spans.append(
            trace_pb2.Span(
                trace_id=tid,
                span_id=sid,
                parent_span_id=psid,
                name=ITERATION_SPAN_NAME,
                kind=trace_pb2.Span.SPAN_KIND_INTERNAL,
                start_time_unix_nano=icols["start_ns"][i],
                end_time_unix_nano=icols["end_ns"][i],
                attributes=key_values(items),
            )
        )
        parent_ids.append((tid, sid, ss))
    for g in plan.groups:
        tid = trace_id_for(host, g.model, g.pid, f"agent{g.agent_id}", g.start_ns)
        sid = span_id_for(tid, "group")
        ss = scope_for(g.model, g.agent_id)
        ss.spans.append(
            trace_pb2.Span(
                trace_id=tid,
                span_id=sid,
                name=SYNTHETIC_SPAN_NAME,
                kind=trace_pb2.Span.SPAN_KIND_INTERNAL,
                start_time_unix_nano=g.start_ns,
                end_time_unix_nano=g.end_ns,
                attributes=key_values(group_items(g)),
            )
        )
        parent_ids.append((tid, sid, ss))
    if len(plan.kernel_rows):
        sel = kernels.take(pa.array(plan.kernel_rows))
        cols = kernel_columns(sel)
        starts = sel.column("start_ns").to_pylist()
        ends = sel.column("end_ns").to_pylist()
        names = sel.column("kernel_name").to_pylist()
        corr = sel.column("correlation_id").to_pylist()
        disp = sel.column("dispatch_id").to_pylist()
        for j, p in enumerate(plan.kernel_parent.tolist()):
            tid, psid, ss = parent_ids[p]
            ss.spans.append(
                trace_pb2.Span(
                    trace_id=tid,
                    span_id=span_id_for(tid, "kernel", starts[j], ends[j], names[j],
                                        corr[j], disp[j]),
                    parent_span_id=psid,
                    name=kernel_span_name(names[j]),
                    kind=trace_pb2.Span.SPAN_KIND_INTERNAL,
                    start_time_unix_nano=starts[j],
                    end_time_unix_nano=ends[j],
                    attributes=key_values((a, vals[j]) for a, vals in cols),
                )
            )
    return req


def analytics_point_items(model: object, pid: object) -> list[tuple[str, AttrValue | None]]:
    """Data point attributes of analytics metrics: aaco.model, process.pid."""
    return [
        (A_MODEL, None if model is None else str(model)),
        (A_PID, None if pid is None else int(str(pid))),
    ]


def gauge_point_items(
    source: object, gpu_index: object, gpu_uuid: object, extra: Sequence[tuple[str, str]] | None
) -> list[tuple[str, AttrValue | None]]:
    """Data point attributes of a ``GAUGE_SAMPLE`` row."""
    items: list[tuple[str, AttrValue | None]] = [
        (A_SOURCE, None if source is None else str(source)),
        (A_GPU_INDEX, None if gpu_index is None else int(str(gpu_index))),
        (A_GPU_UUID, None if gpu_uuid is None else str(gpu_uuid)),
    ]
    items.extend(extra or ())
    return items


def _number_point(
    ts: int, value: float | int, items: list[KeyValue]
) -> metrics_pb2.NumberDataPoint:
    p = metrics_pb2.NumberDataPoint(time_unix_nano=ts, attributes=items)
    if isinstance(value, int):
        p.as_int = value
    else:
        p.as_double = value
    return p


def metrics_request(
    analytics: pa.Table | None,
    gauges: pa.Table | None,
    host: str,
    service_name: str = DEFAULT_SERVICE_NAME,
) -> ExportMetricsServiceRequest:
    """Build an ``ExportMetricsServiceRequest`` from analytics and gauge tables.

    ``analytics`` (``ANALYTICS_RESULT``): one metric per catalogue entry with
    columns (:data:`exporter.catalogue.ANALYTICS_POINTS`), a gauge or a
    cumulative monotonic sum as its kind says, a data point per non-null row
    value (attributes ``aaco.model``, ``process.pid`` plus the column's own,
    such as ``stat``; time ``ts_ns``).
    ``gauges`` (``GAUGE_SAMPLE``): one metric per ``(metric, kind, unit)``,
    a gauge for ``kind="gauge"`` and a cumulative monotonic sum for
    ``kind="counter"``; attributes ``aaco.source``, ``aaco.gpu.index``,
    ``aaco.gpu.uuid`` and the row's ``attributes`` map. Metrics without any
    point are omitted; the request has one ``ResourceMetrics``
    (service.name, host.name).
    """
    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    rm.resource.CopyFrom(
        Resource(attributes=key_values(resource_items(host, None, None, service_name)))
    )
    sm = rm.scope_metrics.add()
    sm.scope.CopyFrom(InstrumentationScope(name=SCOPE_NAME))
    if analytics is not None and analytics.num_rows:
        ts = analytics.column("ts_ns").to_pylist()
        attrs = [
            key_values(analytics_point_items(m, p))
            for m, p in zip(
                analytics.column("model").to_pylist(),
                analytics.column("pid").to_pylist(),
                strict=True,
            )
        ]
        for metric in catalogue.CATALOGUE:
            points = []
            for column in metric.columns:
                extra = key_values(column.attrs)
                for t, v, a in zip(ts, analytics.column(column.name).to_pylist(), attrs,
                                   strict=True):
                    if v is not None:
                        p = _number_point(t, v, a)
                        p.attributes.extend(extra)
                        points.append(p)
            if not points:
                continue
            m = sm.metrics.add(name=metric.otel, unit=metric.unit, description=metric.help)
            if metric.kind == "gauge":
                m.gauge.data_points.extend(points)
            else:
                m.sum.is_monotonic = True
                m.sum.aggregation_temporality = metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
                m.sum.data_points.extend(points)
    if gauges is not None and gauges.num_rows:
        cols = {
            c: gauges.column(c).to_pylist()
            for c in (
                "ts_ns",
                "metric",
                "value",
                "kind",
                "unit",
                "source",
                "gpu_index",
                "gpu_uuid",
                "attributes",
            )
        }
        by_metric: dict[tuple[str, str, str], metrics_pb2.Metric] = {}
        for r in range(gauges.num_rows):
            key = (str(cols["metric"][r]), str(cols["kind"][r]), str(cols["unit"][r]))
            if key not in by_metric:
                m = sm.metrics.add(name=key[0], unit=key[2])
                if key[1] == "counter":
                    m.sum.is_monotonic = True
                    m.sum.aggregation_temporality = metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
                by_metric[key] = m
            items = gauge_point_items(
                cols["source"][r], cols["gpu_index"][r], cols["gpu_uuid"][r], cols["attributes"][r]
            )
            point = _number_point(cols["ts_ns"][r], float(cols["value"][r]), key_values(items))
            target = by_metric[key]
            (target.sum if key[1] == "counter" else target.gauge).data_points.append(point)
    return req
