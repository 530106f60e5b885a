"""Kubernetes / Slurm attributes for OTLP, from ``k8s_attribution`` batches.

:class:`K8sAttributes` keeps each host's latest snapshot (the ``k8s``
collector sends the whole set each time) as OpenTelemetry attributes:
``k8s.namespace.name``, ``k8s.pod.name``, ``k8s.container.name`` (semantic
conventions) and ``slurm.job.id`` (no convention exists; ours). Lookups: by
pid (:meth:`K8sAttributes.pid`) and by GPU index or uuid
(:meth:`K8sAttributes.gpu`). Used by :class:`exporter.sinks.otlp.OtlpSink`
and, through :func:`annotate_metrics` / :func:`annotate_traces`, by the OTLP
copy on the bus (:mod:`exporter.sinks.otlp_bus`). Thread-safe.
"""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa

from exporter.schema import sanitize_token
from exporter.sinks import otlp_proto as op

Attrs = tuple[tuple[str, str], ...]
K8S_ATTRS = (("namespace", "k8s.namespace.name"), ("pod", "k8s.pod.name"),
             ("container", "k8s.container.name"))
"""``k8s_attribution`` column -> OpenTelemetry k8s semantic-convention attribute."""
SLURM_JOB_ATTR = "slurm.job.id"


class K8sAttributes:
    """Each host's pid -> attributes and GPU -> attributes (see the module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hosts: dict[str, tuple[dict[int, Attrs], dict[tuple[str, str], Attrs]]] = {}

    def update(self, table: pa.Table | pa.RecordBatch, host: str) -> None:
        """Replace ``host``'s snapshot with a ``k8s_attribution`` batch."""
        procs: dict[int, Attrs] = {}
        gpus: dict[tuple[str, str], Attrs] = {}
        for r in table.to_pylist():  # one row per process / held GPU
            items: Attrs = tuple((attr, str(r[col])) for col, attr in K8S_ATTRS if r[col])
            if r["kind"] == "process" and r["pid"] is not None:
                job = ((SLURM_JOB_ATTR, str(r["slurm_job_id"])),) if r["slurm_job_id"] else ()
                procs[int(r["pid"])] = items + job
            elif r["kind"] == "gpu" and items:
                if r["gpu_uuid"]:
                    gpus[("uuid", str(r["gpu_uuid"]))] = items
                if r["gpu_index"] is not None:
                    gpus[("index", str(r["gpu_index"]))] = items
        with self._lock:
            self._hosts[sanitize_token(host)] = (procs, gpus)

    def pid(self, host: str, pid: object) -> Attrs:
        """Attributes of process ``pid`` on ``host``; () when unknown."""
        with self._lock:
            entry = self._hosts.get(sanitize_token(host))
        if entry is None or pid is None:
            return ()
        try:
            return entry[0].get(int(str(pid)), ())
        except ValueError:
            return ()

    def gpu(self, host: str, index: object, uuid: object) -> Attrs:
        """Attributes of the holder of GPU ``uuid`` (first) or ``index``; ()."""
        with self._lock:
            entry = self._hosts.get(sanitize_token(host))
        if entry is None:
            return ()
        for key in (("uuid", str(uuid or "")), ("index", "" if index is None else str(index))):
            if key[1] and key in entry[1]:
                return entry[1][key]
        return ()

    def __bool__(self) -> bool:
        with self._lock:
            return bool(self._hosts)


def attr_value(kvs: Any, key: str) -> object:
    """The Python value of attribute ``key`` in a repeated ``KeyValue``; None."""
    for kv in kvs:
        if kv.key == key:
            v = kv.value
            which = v.WhichOneof("value")
            return getattr(v, which) if which else None
    return None


def _extend(kvs: Any, items: Attrs) -> None:
    have = {kv.key for kv in kvs}
    kvs.extend(op.key_values([(k, v) for k, v in items if k not in have]))


def annotate_metrics(req: Any, host: str, attrs: K8sAttributes) -> None:
    """Add pod/Slurm attributes in place to the points of an
    ``ExportMetricsServiceRequest`` built by :func:`otlp_proto.metrics_request`
    (gauge, sum and histogram points alike): points with ``process.pid`` get
    the process's, points with ``aaco.gpu.index`` / ``aaco.gpu.uuid`` their
    GPU holder's."""
    if not attrs:
        return
    for rm in req.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                if kind is None:
                    continue
                for p in getattr(m, kind).data_points:
                    pid = attr_value(p.attributes, op.A_PID)
                    items = (attrs.pid(host, pid) if pid is not None else attrs.gpu(
                        host, attr_value(p.attributes, op.A_GPU_INDEX),
                        attr_value(p.attributes, op.A_GPU_UUID)))
                    if items:
                        _extend(p.attributes, items)


def annotate_traces(req: Any, host: str, attrs: K8sAttributes) -> None:
    """Add pod/Slurm attributes in place to the spans of an
    ``ExportTraceServiceRequest`` that carry ``process.pid`` (iteration,
    kernel and synthetic spans). On the bus copy they are span attributes: its
    resources group spans by model and GPU, not by pod."""
    if not attrs:
        return
    for rs in req.resource_spans:
        for ss in rs.scope_spans:
            for s in ss.spans:
                pid = attr_value(s.attributes, op.A_PID)
                if pid is not None:
                    _extend(s.attributes, attrs.pid(host, pid))
