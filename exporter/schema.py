"""The one event schema: every signal on the bus, and its wire encoding.

Nothing else in the project touches bytes on the bus. A NATS message carries
exactly one Arrow IPC *stream* holding one record batch (body buffers LZ4
compressed), plus these headers:

=================  ==========================================================
``Aaco-Schema``     signal name, one of :data:`SCHEMAS` (e.g. ``kernel_span``)
``Aaco-Version``    integer schema version (:data:`SCHEMA_VERSION`)
``Aaco-Host``       sanitised source host name
``Nats-Msg-Id``     unique message id; JetStream drops a re-published id
                    inside the stream's duplicate window
=================  ==========================================================

Time is always ``int64`` nanoseconds (``*_ns``) on the collector host's
``CLOCK_REALTIME`` unless a column says otherwise; durations are ``int64``
nanoseconds; ratios are ``float64`` in [0, 1] unless documented otherwise.

Errors: :func:`decode` raises :class:`SchemaError` naming the header or the
field that is wrong; callers count it as a drop with ``reason=err.reason``.

>>> import pyarrow as pa
>>> b = empty_batch("kernel_span")
>>> msg = encode("kernel_span", b, host="node-1", msg_id="m1")
>>> sig, version, host, back = decode(msg.payload, msg.headers)
>>> (sig, version, host, back.num_rows)
('kernel_span', 1, 'node-1', 0)
"""

from __future__ import annotations

import functools
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_T = TypeVar("_T", pa.RecordBatch, pa.Table)

SCHEMA_VERSION = 1
"""Bumped on any incompatible change of a schema below."""

H_SCHEMA = "Aaco-Schema"
H_VERSION = "Aaco-Version"
H_HOST = "Aaco-Host"
H_MSG_ID = "Nats-Msg-Id"
H_SESSION = "Aaco-Session"  # optional: the capture session that produced it

_DICT_STR = pa.dictionary(pa.int32(), pa.string())

KERNEL_SPAN = pa.schema(
    [
        pa.field("start_ns", pa.int64(), nullable=False),
        pa.field("end_ns", pa.int64(), nullable=False),
        pa.field("duration_ns", pa.int64(), nullable=False),
        pa.field("source", _DICT_STR, nullable=False),  # ort, rocprofv3, rocprof, kineto, ...
        pa.field("model", _DICT_STR),  # model name, null for raw GPU traces
        pa.field("pid", pa.int64()),
        pa.field("tid", pa.int64()),
        pa.field("device_type", _DICT_STR),  # "cpu" or "gpu"
        pa.field("agent_id", pa.int64()),  # GPU agent / device index
        pa.field("queue_id", pa.int64()),
        pa.field("stream_id", pa.int64()),
        pa.field("correlation_id", pa.int64()),
        pa.field("dispatch_id", pa.int64()),
        pa.field("kernel_name", _DICT_STR, nullable=False),  # raw name: spans/Parquet only
        pa.field("kernel_family", _DICT_STR, nullable=False),  # bounded label value
        pa.field("op_type", _DICT_STR),  # ONNX op type when known
        pa.field("node_name", _DICT_STR),  # ONNX graph node when known
        pa.field("iteration", pa.int64()),  # inference iteration index, null if unknown
        pa.field("grid_x", pa.int64()),
        pa.field("grid_y", pa.int64()),
        pa.field("grid_z", pa.int64()),
        pa.field("workgroup_x", pa.int64()),
        pa.field("workgroup_y", pa.int64()),
        pa.field("workgroup_z", pa.int64()),
        pa.field("launch_api_ns", pa.int64()),  # HIP launch API duration (joined on corr. id)
        pa.field("launch_delay_ns", pa.int64()),  # kernel start - launch API end (HTA)
    ]
)
"""One row per kernel dispatch (GPU) or per executed graph node (ORT CPU EP)."""

ITERATION_SPAN = pa.schema(
    [
        pa.field("start_ns", pa.int64(), nullable=False),
        pa.field("end_ns", pa.int64(), nullable=False),
        pa.field("duration_ns", pa.int64(), nullable=False),
        pa.field("source", _DICT_STR, nullable=False),
        pa.field("model", _DICT_STR, nullable=False),
        pa.field("pid", pa.int64(), nullable=False),
        pa.field("iteration", pa.int64(), nullable=False),
        pa.field("kernel_count", pa.int64(), nullable=False),  # spans published for it
        # Appended, nullable (the ORT profiler leaves them null; "instrument" rows fill them):
        pa.field("tid", pa.int64()),  # native thread id of the caller
        pa.field("model_path", pa.string()),
        pa.field("provider", _DICT_STR),  # first execution provider of the session
        pa.field("batch_size", pa.int64()),  # first dim of the first input, null if unknown
        pa.field("trace_id", pa.string()),  # 32 hex: the caller's OpenTelemetry trace
        pa.field("parent_span_id", pa.string()),  # 16 hex: the caller's current span
    ]
)
"""One row per inference run: an ORT ``model_run`` profiler event (``source``
``ort``) or one ``InferenceSession.run`` call of an instrumented process
(``source`` ``instrument``, ``kernel_count`` 0; see :mod:`exporter.instrument`).
``trace_id``/``parent_span_id`` make the OTLP iteration span a child of that
span."""

GRAPH_INFO = pa.schema(
    [
        pa.field("model", pa.string(), nullable=False),
        pa.field("model_path", pa.string()),
        pa.field("sha256", pa.string()),
        pa.field("node_count", pa.int64(), nullable=False),  # excludes Constant nodes
        pa.field("total_nodes", pa.int64(), nullable=False),  # includes Constant nodes
        pa.field("edge_count", pa.int64(), nullable=False),
        pa.field("op_types", pa.list_(pa.string()), nullable=False),
        pa.field("op_counts", pa.list_(pa.int64()), nullable=False),
        pa.field("pid", pa.int64()),
    ]
)
"""One row per loaded model; ``op_types[i]`` occurs ``op_counts[i]`` times."""

GAUGE_SAMPLE = pa.schema(
    [
        pa.field("ts_ns", pa.int64(), nullable=False),
        pa.field("metric", _DICT_STR, nullable=False),  # e.g. hw.gpu.power (OTel name)
        pa.field("value", pa.float64(), nullable=False),  # base units only
        pa.field("kind", _DICT_STR, nullable=False),  # "gauge" or "counter" (cumulative)
        pa.field("unit", _DICT_STR, nullable=False),  # UCUM: W, Cel, Hz, By, 1, J
        pa.field("source", _DICT_STR, nullable=False),  # amdsmi, amd-smi, rocm-smi, sysfs
        pa.field("gpu_index", pa.int64()),
        pa.field("gpu_uuid", pa.string()),
        pa.field("attributes", pa.map_(pa.string(), pa.string())),  # bounded extra labels
    ]
)
"""One row per (gauge, device) reading, already in base units.

``metric`` is an OpenTelemetry-style name (``hw.gpu.utilization``); the
Prometheus sink derives the exposition name the way OpenTelemetry's
Prometheus exporter does: dots to underscores, then the unit suffix
(``_watts``, ``_celsius``, ``_hertz``, ``_bytes``, ``_joules``, ``_ratio``
for unit ``1``, ``_seconds``) and ``_total`` for ``kind="counter"``.
``attributes`` keys become label names after the same dot translation; they
must be bounded (never a raw kernel name).
"""

SCHED_SAMPLE = pa.schema(
    [
        pa.field("ts_ns", pa.int64(), nullable=False),  # end of the interval
        pa.field("interval_ns", pa.int64(), nullable=False),
        pa.field("source", _DICT_STR, nullable=False),  # proc or ebpf
        pa.field("pid", pa.int64(), nullable=False),
        pa.field("tid", pa.int64(), nullable=False),
        pa.field("comm", pa.string()),
        pa.field("runq_wait_ns", pa.int64(), nullable=False),  # delta over the interval
        pa.field("run_ns", pa.int64(), nullable=False),  # delta on-CPU time
        pa.field("voluntary_switches", pa.int64(), nullable=False),
        pa.field("involuntary_switches", pa.int64(), nullable=False),
        pa.field("migrations", pa.int64()),
        pa.field("minor_faults", pa.int64()),
        pa.field("major_faults", pa.int64()),
        pa.field("runq_hist_log2_ns", pa.list_(pa.int64())),  # bucket i counts [2^i, 2^(i+1)) ns
        pa.field("top_preemptors", pa.list_(pa.string())),  # comms that ran while we waited
    ]
)
"""One row per watched thread per interval; all counts are deltas."""

ANALYTICS_RESULT = pa.schema(
    [
        pa.field("ts_ns", pa.int64(), nullable=False),
        pa.field("host", pa.string(), nullable=False),
        pa.field("model", pa.string()),
        pa.field("pid", pa.int64()),
        pa.field("window_start_ns", pa.int64()),
        pa.field("window_end_ns", pa.int64()),
        pa.field("iterations", pa.int64(), nullable=False),  # in the window
        pa.field("kernel_count", pa.int64(), nullable=False),  # in the window
        pa.field("graph_node_count", pa.int64()),
        pa.field("kar", pa.float64()),
        pa.field("launch_overhead_ns", pa.int64()),
        pa.field("kernel_time_ns", pa.int64()),
        pa.field("launch_tax", pa.float64()),
        pa.field("runq_wait_ns", pa.int64()),
        pa.field("thread_wall_ns", pa.int64()),
        pa.field("sii", pa.float64()),
        pa.field("busy_ns", pa.int64()),
        pa.field("wall_ns", pa.int64()),
        pa.field("gpu_active_ratio", pa.float64()),
        pa.field("latency_mean_s", pa.float64()),
        pa.field("latency_p50_s", pa.float64()),
        pa.field("latency_p99_s", pa.float64()),
        pa.field("kernel_spans_total", pa.int64(), nullable=False),  # cumulative
        pa.field("iterations_total", pa.int64(), nullable=False),  # cumulative
        pa.field("iteration_ns_total", pa.int64()),  # cumulative sum of iteration durations
        pa.field("family_names", pa.list_(pa.string())),  # cumulative per family
        pa.field("family_spans_total", pa.list_(pa.int64())),
        pa.field("family_time_ns_total", pa.list_(pa.int64())),
        pa.field("micro_kernel_count", pa.int64()),  # kernels < 10 us in the window
        pa.field("involuntary_switches", pa.int64()),  # of the key's threads, in the window
        pa.field("comm", pa.string()),  # the process's comm (sched samples), when known
        pa.field("kernels_per_iteration", pa.float64()),  # KAR's numerator, known without a graph
        pa.field("kar_source", pa.string()),  # ort_profiler, roctx, instrumented_iteration, kineto
        pa.field("latency_attached_mean_s", pa.float64()),  # iterations inside attach windows
        pa.field("latency_detached_mean_s", pa.float64()),  # and outside them (same key)
        pa.field("device_type", pa.string()),  # "gpu": the pid ran a GPU kernel; else "cpu"
    ]
)
"""One row per (host, pid, model) key each time its window is evaluated.
``kar_source`` names where the iterations that KAR counts come from (see
``docs/metrics.md``); null when no iteration holds kernels. ``device_type``
is ``"gpu"`` once the key's process has any kernel span of ``device_type``
``"gpu"`` (KERNEL_SPAN), ``"cpu"`` when all of them ran on the CPU (the ORT CPU
EP's graph nodes), null before any kernel span; it picks the recommendation
of the bottleneck verdict."""

DRIFT_STATUS = pa.schema(
    [
        pa.field("ts_ns", pa.int64(), nullable=False),
        pa.field("host", pa.string(), nullable=False),
        pa.field("stream", pa.string(), nullable=False),  # latency, kar, lts, sii, ...
        pa.field("key", pa.string(), nullable=False),  # model, model/family, gpu/sensor, gpu/clock
        pa.field("detector", pa.string(), nullable=False),  # ewma, cusum, page_hinkley, adwin
        pa.field("drift_detected", pa.bool_(), nullable=False),
        pa.field("drift_events_total", pa.int64(), nullable=False),
        pa.field("last_change_ns", pa.int64()),
        pa.field("samples", pa.int64(), nullable=False),
    ]
)
"""One row per (host, stream, key, detector) each time a result or a gauge batch
of its host updates the host's streams."""

BOTTLENECK = pa.schema(
    [
        pa.field("ts_ns", pa.int64(), nullable=False),
        pa.field("host", pa.string(), nullable=False),
        pa.field("model", pa.string()),
        pa.field("pid", pa.int64()),
        pa.field("label", pa.string(), nullable=False),  # launch_bound, cpu_bound, ...
        pa.field("confidence", pa.float64(), nullable=False),  # [0, 1]
        pa.field("classes", pa.list_(pa.string()), nullable=False),
        pa.field("scores", pa.list_(pa.float64()), nullable=False),  # per class, [0, 1]
        pa.field("evidence_json", pa.string(), nullable=False),  # ranked evidence list
        pa.field("recommendation", pa.string(), nullable=False),
    ]
)
"""The bottleneck classifier's verdict per (host, pid, model) window."""

PROCESS_INFO = pa.schema(
    [
        pa.field("ts_ns", pa.int64(), nullable=False),  # scan time
        pa.field("pid", pa.int64(), nullable=False),
        pa.field("comm", pa.string(), nullable=False),  # /proc/PID/comm (<= 15 bytes)
        pa.field("reason", _DICT_STR, nullable=False),  # kfd, render, lib:<name>, comm, ...
        pa.field("create_ns", pa.int64(), nullable=False),  # process start, Unix ns
    ]
)
"""Workload discovery's snapshot: one row per watched process; each batch is
the whole set of its host (an exited process is absent from the next one)."""

K8S_ATTRIBUTION = pa.schema(
    [
        pa.field("ts_ns", pa.int64(), nullable=False),  # snapshot time
        pa.field("kind", _DICT_STR, nullable=False),  # "process" or "gpu"
        pa.field("pid", pa.int64()),  # kind=process
        pa.field("gpu_index", pa.int64()),  # kind=gpu: the gpu collector's index ...
        pa.field("gpu_uuid", pa.string()),  # ... or uuid (NVIDIA GPU-/MIG- ids)
        pa.field("device_id", pa.string()),  # kind=gpu: the device plugin's id
        pa.field("resource", _DICT_STR),  # kind=gpu: amd.com/gpu, nvidia.com/gpu
        pa.field("namespace", pa.string()),
        pa.field("pod", pa.string()),
        pa.field("container", pa.string()),
        pa.field("pod_uid", pa.string()),  # kind=process, from /proc/PID/cgroup
        pa.field("container_id", pa.string()),  # kind=process, 64 hex
        pa.field("slurm_job_id", pa.string()),  # kind=process
        pa.field("node", pa.string()),  # Kubernetes node name (k8s.node.name)
    ]
)
"""The ``k8s`` collector's snapshot: one row per watched process it could
attribute (pod and/or Slurm job) and one per GPU a container holds; each
batch is the whole set of its host."""

GENERATE_SPAN = pa.schema(
    [
        pa.field("generate_id", pa.int64(), nullable=False),  # per process, from 0
        pa.field("model", _DICT_STR, nullable=False),  # generate_span's model label (user's)
        pa.field("pid", pa.int64(), nullable=False),
        pa.field("tid", pa.int64()),
        pa.field("batch_size", pa.int64(), nullable=False),  # sequences, >= 1
        pa.field("start_ns", pa.int64(), nullable=False),  # block entered
        pa.field("end_ns", pa.int64(), nullable=False),  # block left, >= start_ns
        pa.field("step_ns", pa.list_(pa.int64()), nullable=False),  # one per token step
        pa.field("step_tokens", pa.list_(pa.int64()), nullable=False),  # tokens of each step
        pa.field("error", pa.string()),  # exception type when the block raised
    ]
)
"""One row per finished generate call of an instrumented process
(:func:`exporter.instrument.llm.generate_span`): its token steps are the list
columns ``step_ns`` (ns since the epoch) and ``step_tokens``, equal in
length per row. Definitions of TTFT, ITL and tokens/s: docs/llm.md.
:func:`decode` also checks the row invariants (reason ``bad_value``)."""

SCHEMAS: Mapping[str, pa.Schema] = {
    "kernel_span": KERNEL_SPAN,
    "iteration_span": ITERATION_SPAN,
    "graph_info": GRAPH_INFO,
    "gauge_sample": GAUGE_SAMPLE,
    "sched_sample": SCHED_SAMPLE,
    "analytics_result": ANALYTICS_RESULT,
    "drift_status": DRIFT_STATUS,
    "bottleneck": BOTTLENECK,
    "process_info": PROCESS_INFO,
    "k8s_attribution": K8S_ATTRIBUTION,
    "generate_span": GENERATE_SPAN,
}
"""Signal name -> Arrow schema. The signal name is also the subject token."""

SUBJECT_PREFIX = "aaco.v1"
_HOST_BAD = re.compile(r"[^A-Za-z0-9_-]")


class SchemaError(ValueError):
    """A message or a table does not match its schema.

    ``reason`` is a short, bounded token used as the ``reason`` label of
    ``aaco_exporter_events_dropped_total``; the message names the field.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def sanitize_token(name: str, max_len: int = 64) -> str:
    """Return ``name`` made safe as one NATS subject token.

    Anything but ``[A-Za-z0-9_-]`` (notably ``.``, ``*``, ``>`` and spaces)
    becomes ``_``; the result is never empty and at most ``max_len`` long.

    >>> sanitize_token("gpu-node.7.example.com")
    'gpu-node_7_example_com'
    >>> sanitize_token("a>b*c d")
    'a_b_c_d'
    >>> sanitize_token("")
    'unknown'
    """
    out = _HOST_BAD.sub("_", name)[:max_len]
    return out or "unknown"


def subject(signal: str, host: str) -> str:
    """Subject ``aaco.v1.<signal>.<host>`` with ``host`` sanitised.

    >>> subject("kernel_span", "node.1")
    'aaco.v1.kernel_span.node_1'
    """
    if signal not in SCHEMAS and not signal.startswith("otlp."):
        raise SchemaError("unknown_schema", f"unknown signal {signal!r}")
    return f"{SUBJECT_PREFIX}.{signal}.{sanitize_token(host)}"


@dataclass(frozen=True)
class Message:
    """An encoded bus message: payload bytes plus NATS headers."""

    subject: str
    payload: bytes
    headers: dict[str, str] = field(default_factory=dict)


def conform(signal: str, table: pa.Table | pa.RecordBatch) -> pa.RecordBatch:
    """Return ``table`` as one record batch in exactly ``signal``'s schema.

    Columns are reordered, missing nullable columns are filled with nulls,
    and types are cast (strings to dictionaries, ints to int64).

    Raises :class:`SchemaError` (``reason="missing_field"``) naming the first
    required field that is absent, or (``reason="bad_type"``) a field whose
    values cannot be cast.
    """
    schema = SCHEMAS[signal]
    if table.schema.equals(schema):  # built in the schema: only the null check remains
        for i in _REQUIRED[signal]:
            if table.column(i).null_count:
                raise SchemaError("null_field", f"{signal}: required field "
                                                f"{schema.field(i).name!r} has nulls")
        if isinstance(table, pa.RecordBatch):
            return table
        batches = table.combine_chunks().to_batches()
        if len(batches) == 1:
            return batches[0]
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    n = table.num_rows
    cols = []
    for f in schema:
        if f.name in table.column_names:
            col = table.column(f.name)
            if not col.type.equals(f.type):
                try:
                    col = col.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise SchemaError(
                        "bad_type", f"{signal}: field {f.name!r} has type {col.type}: {e}"
                    ) from e
            if not f.nullable and col.null_count:
                raise SchemaError("null_field", f"{signal}: required field {f.name!r} has nulls")
            cols.append(one_array(col) if isinstance(col, pa.ChunkedArray) else col)
        elif f.nullable:
            cols.append(pa.nulls(n, f.type))
        else:
            raise SchemaError("missing_field", f"{signal}: required field {f.name!r} is missing")
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def one_array(col: pa.ChunkedArray) -> pa.Array:
    """``col`` as one array: its only chunk as it is, not copied
    (``combine_chunks`` copies even a single chunk: 3 ms per 2M int64), else
    its chunks combined.

    >>> c = pa.chunked_array([[1, 2]])
    >>> one_array(c).buffers()[1].address == c.chunk(0).buffers()[1].address
    True
    >>> one_array(pa.chunked_array([[1], [2]])).to_pylist()
    [1, 2]
    """
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def plain(data: _T) -> _T:
    """``data`` (a record batch or table) with its dictionary-encoded columns
    decoded to their value type: the same values, no dictionary.

    pyarrow's ``to_pylist`` / ``to_pydict`` build one scalar object per
    element of a dictionary column, ~45x slower than for a plain string
    column (0.33 vs 0.007 ms for a 280-row ``metric`` column); call this
    before turning a wire batch into Python values.

    >>> b = pa.record_batch({"m": pa.array(["a", "b", "a"]).dictionary_encode()})
    >>> plain(b).schema.field("m").type, plain(b).column("m").to_pylist()
    (DataType(string), ['a', 'b', 'a'])
    """
    fields = list(data.schema)
    idx = [i for i, f in enumerate(fields) if pa.types.is_dictionary(f.type)]
    if not idx:
        return data
    cols = list(data.columns)
    for i in idx:
        value_type = fields[i].type.value_type
        cols[i] = cols[i].cast(value_type)
        fields[i] = fields[i].with_type(value_type)
    out_schema = pa.schema(fields, metadata=data.schema.metadata)
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(cols, schema=out_schema)
    return pa.Table.from_arrays(cols, schema=out_schema)


def empty_batch(signal: str) -> pa.RecordBatch:
    """A zero-row batch of ``signal``'s schema."""
    return pa.RecordBatch.from_pylist([], schema=SCHEMAS[signal])


_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4", use_threads=False)
"""Arrow IPC body buffers are LZ4-frame compressed (9x smaller for rocprof kernel spans, 19x for ORT
ones; readers decompress transparently). One thread: Arrow's per-buffer
thread pool costs more CPU than it saves on batches this size (LZ4 encode
0.074 vs 0.126 CPU-s per 1M kernel spans, decode 0.070 vs 0.113; see
benchmarks/README.md)."""
_IPC_READ = pa.ipc.IpcReadOptions(use_threads=False)


def _serialize(batch: pa.RecordBatch,
               options: pa.ipc.IpcWriteOptions = _IPC_OPTIONS) -> bytes:
    """One Arrow IPC stream holding ``batch`` (``options``: the bus's own unless
    a benchmark compares others)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=options) as w:
        w.write_batch(batch)
    return bytes(sink.getvalue())


def encode(
    signal: str,
    batch: pa.RecordBatch | pa.Table,
    *,
    host: str,
    msg_id: str | None = None,
    session: str | None = None,
) -> Message:
    """Encode one batch of ``signal`` as a :class:`Message`.

    ``msg_id`` should be deterministic for a given piece of data (for example
    ``f"{run_id}:{chunk}"``) so that a re-publish after a crash is dropped by
    JetStream's duplicate window; a random UUID is used when omitted.
    """
    return _message(signal, conform(signal, batch), host, msg_id, session)


def _message(signal: str, rb: pa.RecordBatch, host: str, msg_id: str | None,
             session: str | None) -> Message:
    """A message from a batch already in ``signal``'s schema."""
    headers = {
        H_SCHEMA: signal,
        H_VERSION: str(SCHEMA_VERSION),
        H_HOST: sanitize_token(host),
        H_MSG_ID: msg_id or uuid.uuid4().hex,
    }
    if session:
        headers[H_SESSION] = sanitize_token(session)
    return Message(subject(signal, host), _serialize(rb), headers)


def encode_chunks(
    signal: str,
    table: pa.Table | pa.RecordBatch,
    *,
    host: str,
    msg_id_prefix: str,
    max_bytes: int = 900_000,
    max_rows: int = 65_536,
    session: str | None = None,
) -> Iterator[Message]:
    """Split ``table`` into messages of at most ``max_bytes`` payload each.

    Message ids are ``f"{msg_id_prefix}:{i}"`` for chunk ``i``, so a replay of
    the same table is deduplicated chunk by chunk. A single row larger than
    ``max_bytes`` raises :class:`SchemaError` (``reason="oversize"``).
    """
    rb = conform(signal, table)  # once: slices below are zero-copy views
    start, i, rows = 0, 0, max(1, min(max_rows, rb.num_rows or 1))
    if rb.num_rows == 0:
        yield _message(signal, rb, host, f"{msg_id_prefix}:0", session)
        return
    while start < rb.num_rows:
        part = rb.slice(start, rows)
        msg = _message(signal, part, host, f"{msg_id_prefix}:{i}", session)
        if len(msg.payload) > max_bytes and rows > 1:
            rows = max(1, rows // 2)
            continue
        if len(msg.payload) > max_bytes:
            raise SchemaError("oversize", f"{signal}: one row encodes to {len(msg.payload)} bytes")
        yield msg
        start += part.num_rows
        i += 1


OTLP_SIGNALS = ("otlp.traces", "otlp.metrics")
"""OTLP protobuf messages on ``aaco.v1.otlp.traces.<host>`` / ``...metrics.<host>``."""


def encode_otlp(kind: str, request: object, *, host: str, msg_id: str) -> Message:
    """Encode an ``ExportTraceServiceRequest`` (``kind="traces"``) or
    ``ExportMetricsServiceRequest`` (``"metrics"``) for the bus.

    The payload is the stock OTLP protobuf (``SerializeToString()``), so any
    OpenTelemetry-aware consumer reads it without this module; the headers
    say ``Aaco-Schema: otlp.<kind>`` and ``Content-Type: application/x-protobuf``.
    """
    signal = f"otlp.{kind}"
    if signal not in OTLP_SIGNALS:
        raise SchemaError("unknown_schema", f"unknown OTLP kind {kind!r}")
    payload = request.SerializeToString()  # type: ignore[attr-defined]
    headers = {H_SCHEMA: signal, H_VERSION: str(SCHEMA_VERSION), H_HOST: sanitize_token(host),
               H_MSG_ID: msg_id, "Content-Type": "application/x-protobuf"}
    return Message(subject(signal, host), bytes(payload), headers)


Decoded = tuple[str, int, str, pa.RecordBatch]
"""What :func:`decode` returns: ``(signal, version, host, batch)``."""


def decode(payload: bytes, headers: Mapping[str, str] | None) -> Decoded:
    """Decode one bus message into ``(signal, version, host, batch)``.

    Raises :class:`SchemaError` with ``reason`` one of ``missing_header``,
    ``unknown_schema``, ``bad_version``, ``bad_payload`` (not one Arrow IPC record
    batch, or one whose buffers fail ``validate(full=True)``: offsets, UTF-8,
    dictionary indexes), ``schema_mismatch`` or ``null_field`` (a null in a
    non-nullable field). A returned batch is safe to index without further checks.
    """
    headers = headers or {}
    signal = headers.get(H_SCHEMA)
    if signal is None:
        raise SchemaError("missing_header", f"message has no {H_SCHEMA} header")
    if signal not in SCHEMAS:
        raise SchemaError("unknown_schema", f"{H_SCHEMA}={signal!r} is not a known signal")
    try:
        version = int(headers.get(H_VERSION, ""))
    except ValueError:
        raise SchemaError("bad_version", f"{H_VERSION} header is not an integer") from None
    if version != SCHEMA_VERSION:
        raise SchemaError("bad_version", f"{signal}: version {version} != {SCHEMA_VERSION}")
    host = sanitize_token(headers.get(H_HOST, "unknown"))
    try:
        with pa.ipc.open_stream(pa.py_buffer(payload), options=_IPC_READ) as r:
            batches = list(r)
        names = batches[0].schema.names if len(batches) == 1 else []
    # every Arrow error (a corrupt length asks for a huge allocation: ArrowMemoryError;
    # an unknown type id: ArrowNotImplementedError), and field names that are not UTF-8
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        raise SchemaError("bad_payload", f"{signal}: payload is not Arrow IPC: "
                                         f"{str(e)[:200]}") from e
    expected = SCHEMAS[signal]
    if len(batches) != 1:
        raise SchemaError("bad_payload", f"{signal}: expected 1 record batch, got {len(batches)}")
    batch = batches[0]
    if not batch.schema.equals(expected):
        missing = [f.name for f in expected if f.name not in names]
        detail = f"missing field {missing[0]!r}" if missing else "field types differ"
        raise SchemaError("schema_mismatch", f"{signal}: {detail}")
    try:
        batch.validate(full=True)
    except pa.ArrowException as e:
        raise SchemaError("bad_payload", f"{signal}: invalid record batch: "
                                         f"{str(e)[:200]}") from e
    for i in _REQUIRED[signal]:
        if batch.column(i).null_count:
            raise SchemaError("null_field", f"{signal}: required field "
                                            f"{expected.field(i).name!r} has nulls")
    check_values(signal, batch)
    return signal, version, host, batch


class SharedDecode:
    """:func:`decode` once per bus message for the in-process readers of one
    stream (a ``capture`` or ``replay`` session's bundle sink and analytics
    consumer, which fetch every message of its stream each).

    Each reader takes a handle (:meth:`reader`) and asks for messages by
    stream sequence, in increasing order. The first reader to ask for a
    message decodes it and leaves the result, ``(signal, version, host,
    batch)`` or the :class:`SchemaError`, for the readers that have not yet
    reached that sequence; each of them gets the same batch (Arrow batches
    are immutable) or the same error raised again, and the entry goes when
    the last has taken it. At most ``max_entries`` entries wait, the oldest
    dropped first: a reader that never asks for a message (one it filters
    out before decoding), or one far behind, decodes for itself, so memory
    stays bounded and nothing is lost. Thread-safe (the readers decode in
    worker threads); two readers asking at once may both decode. ``hits``
    and ``misses`` count answers from an entry and decodes.

    >>> sd = SharedDecode()
    >>> sink, analytics = sd.reader(), sd.reader()
    >>> m = encode("gauge_sample", empty_batch("gauge_sample"), host="h1")
    >>> a = sink(1, m.payload, m.headers)
    >>> b = analytics(1, m.payload, m.headers)
    >>> a is b, a[0], a[2], sd.hits, sd.misses, len(sd)
    (True, 'gauge_sample', 'h1', 1, 1, 0)
    """

    def __init__(self, max_entries: int = 32) -> None:
        if max_entries < 0:
            raise ValueError("max_entries must be >= 0")
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._seen: list[int] = []  # per reader: the highest sequence it asked for
        # sequence -> (readers still to take it, the result or the error)
        self._entries: OrderedDict[int, tuple[set[int], Decoded | SchemaError]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def reader(self) -> Callable[[int, bytes, Mapping[str, str] | None], Decoded]:
        """A new reader's ``decode(seq, payload, headers)``: :func:`decode` of
        stream message ``seq``, shared with the other readers; raises
        :class:`SchemaError` as :func:`decode` does."""
        with self._lock:
            me = len(self._seen)
            self._seen.append(0)
        return functools.partial(self._decode, me)

    def _take(self, me: int, seq: int) -> Decoded | SchemaError | None:
        """The entry of ``seq`` if it waits for reader ``me`` (lock held)."""
        got = self._entries.get(seq)
        if got is None or me not in got[0]:
            return None
        got[0].discard(me)
        if not got[0]:
            del self._entries[seq]
        return got[1]

    def _decode(self, me: int, seq: int, payload: bytes,
                headers: Mapping[str, str] | None) -> Decoded:
        with self._lock:
            self._seen[me] = max(self._seen[me], seq)
            out = self._take(me, seq)
            if out is not None:
                self.hits += 1
        if out is None:
            try:
                out = decode(payload, headers)
            except SchemaError as e:
                out = e
            with self._lock:
                self.misses += 1
                # another reader may have left it meanwhile: then this one took it;
                # else it waits for the readers that have not reached seq yet
                waiting = {r for r, s in enumerate(self._seen) if s < seq}
                if self._take(me, seq) is None and waiting and self.max_entries:
                    self._entries[seq] = (waiting, out)
                    while len(self._entries) > self.max_entries:
                        self._entries.popitem(last=False)
        if isinstance(out, SchemaError):
            raise out
        return out


def check_values(signal: str, batch: pa.RecordBatch) -> None:
    """Row invariants beyond types and nulls; raises :class:`SchemaError`
    (``reason="bad_value"``) naming the field and the first bad row.

    ``generate_span``: ``batch_size`` >= 1, ``end_ns`` >= ``start_ns``,
    ``step_ns`` and ``step_tokens`` of equal length without null elements,
    steps non-decreasing and not before ``start_ns``, tokens >= 0.
    Other signals: nothing beyond :func:`decode`'s checks.
    """
    if signal != "generate_span" or batch.num_rows == 0:
        return
    steps, toks = batch.column("step_ns"), batch.column("step_tokens")
    bad: list[tuple[str, pa.Array]] = [
        ("batch_size", pc.less(batch.column("batch_size"), 1)),
        ("end_ns", pc.less(batch.column("end_ns"), batch.column("start_ns"))),
        ("step_tokens", pc.not_equal(pc.list_value_length(steps), pc.list_value_length(toks))),
    ]
    for name, mask in bad:
        if pc.any(mask).as_py():
            row = pc.index(mask, True).as_py()
            raise SchemaError("bad_value", f"{signal}: field {name!r} is invalid in row {row}")
    flat_t, flat_k = steps.values, toks.values  # offsets start at 0 after validate(full=True)
    flat_t = flat_t.slice(steps.offsets[0].as_py(), steps.offsets[-1].as_py()
                          - steps.offsets[0].as_py())
    flat_k = flat_k.slice(toks.offsets[0].as_py(), toks.offsets[-1].as_py()
                          - toks.offsets[0].as_py())
    if flat_t.null_count or flat_k.null_count:
        name = "step_ns" if flat_t.null_count else "step_tokens"
        raise SchemaError("bad_value", f"{signal}: field {name!r} has null elements")
    if len(flat_k) and pc.min(flat_k).as_py() < 0:
        raise SchemaError("bad_value", f"{signal}: field 'step_tokens' has a negative count")
    t = flat_t.to_numpy(zero_copy_only=False)
    if len(t):
        off = steps.offsets.to_numpy() - steps.offsets[0].as_py()
        n = np.diff(off)
        prev = np.empty_like(t)  # each step's predecessor: the previous step or the start
        prev[1:] = t[:-1]
        first = off[:-1][n > 0]
        prev[first] = batch.column("start_ns").to_numpy()[n > 0]
        if (t < prev).any():
            row = int(np.searchsorted(off, int(np.argmax(t < prev)), side="right") - 1)
            raise SchemaError("bad_value", f"{signal}: field 'step_ns' goes back in time "
                                           f"in row {row}")


_REQUIRED: Mapping[str, tuple[int, ...]] = {
    s: tuple(i for i, f in enumerate(sc) if not f.nullable) for s, sc in SCHEMAS.items()}
"""Signal -> indexes of its non-nullable fields (checked by :func:`decode`)."""
