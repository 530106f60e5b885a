"""Write a Perfetto trace (``trace.pftrace``) from kernel/iteration/gauge tables.

The file is a ``perfetto.protos.perfetto.trace.Trace`` (a sequence of
``TracePacket``) using TrackEvent, readable by ui.perfetto.dev and
trace_processor (see ``perfetto/README.md``). Layout:

* **process** track per ``pid`` (named after its model when known) with a
  **thread** track per ``(pid, tid)`` (named by ``SCHED_SAMPLE.comm`` when
  given, else ``tid <n>``); CPU kernels (``device_type != "gpu"``)
  are slices there (category ``kernel``, name = raw ``kernel_name``);
* **iteration** slices (``ITERATION_SPAN`` rows, name ``inference``, category
  ``iteration``) go on the thread track that ran most of the iteration's CPU
  kernels, so those kernels nest inside them; iterations without CPU kernels
  go on a per-``(pid, model)`` track ``inference <model>``;
* **GPU** kernels go on a track per ``(agent_id, queue_id)`` named
  ``queue <q>`` under a ``GPU agent <a>`` track;
* **HIP API** rows (``hip_api``: ``start_ns, end_ns, pid, tid,
  correlation_id, function``) are slices on their thread track (category
  ``hip_api``); a launch API (function name containing ``Launch``) whose
  ``correlation_id`` matches a GPU kernel's gets a **flow** to that kernel.
  GPU kernels with ``launch_api_ns``/``launch_delay_ns``/``pid``/``tid`` but
  no HIP API row get a synthetic ``launch`` slice ending ``launch_delay_ns``
  before the kernel, with a flow to it;
* **counter** tracks: one per ``GAUGE_SAMPLE`` ``(metric, gpu_index)``,
  per ``(pid, model)`` for ``aaco.sii``/``aaco.kar``/``aaco.launch_tax``/
  ``aaco.gpu.active_ratio`` from ``ANALYTICS_RESULT``, and per pid
  ``aaco.sii.sched`` computed from ``SCHED_SAMPLE`` rows (active rows only,
  as :mod:`stream_analytics.sii`).

Timestamps are the rows' CLOCK_REALTIME nanoseconds written as trace time on
the default (boot-time) clock; no clock snapshot is emitted. Kernels with a
null ``tid`` use their ``pid`` as thread id; a null ``pid`` becomes 0.

**Streaming.** The file is written as it is built, as concatenated
serialized ``Trace`` messages (a concatenation of ``Trace`` messages parses
as one ``Trace``), so memory does not grow with the number of kernels:

1. a header packet (``SEQ_INCREMENTAL_STATE_CLEARED``) interning the slice
   categories and debug annotation names, and the processes named after
   their models from ``iterations``;
2. the GPU kernels, one chunk per record batch of ``kernels``
   (:data:`CHUNK_ROWS` rows at most): the chunk's new track descriptors and
   interned kernel names / annotation strings (``InternedData``), then its
   kernel slices and synthetic launch slices, encoded column-wise
   (:mod:`exporter.sinks.perfetto_slices`, no Python object per slice) and
   sorted by time within the chunk;
3. the iterations, CPU kernels and HIP API slices, sorted together (they
   nest on the same thread tracks): held in memory as one set of numpy slice
   columns (iteration, CPU kernel and HIP API annotations side by side, each
   with a mask; no Python object per slice), their tracks and interned names
   written first, then one global begin/end order
   (:func:`perfetto_slices.event_order`) encoded :data:`WINDOW_EVENTS`
   events at a time, so the encoding buffers do not grow with the capture;
4. the counter tracks.

The column-wise encodings of 2. and 3. run in :data:`ENCODE_THREADS` worker
threads while the next chunk's tracks and interned names are built here;
their bytes are written in the order above (:meth:`_Builder.encode`), by
one more thread ("trace-write"), so that building the next chunk does not
wait for the file: at most :data:`PENDING_WRITES` writes are outstanding.

Every kernel row becomes a slice; nothing is sampled or dropped. Packets are
sorted by time within a chunk, not across chunks: trace_processor (and so
ui.perfetto.dev) sorts all packets by timestamp when it loads a trace.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    CounterDescriptor,
    InternedData,
    ProcessDescriptor,
    ThreadDescriptor,
    Trace,
    TracePacket,
    TrackDescriptor,
    TrackEvent,
)

from exporter import catalogue
from exporter.sinks import perfetto_slices as ps
from exporter.sinks.otlp_proto import match_iterations
from stream_analytics.groups import first_rows, tuple_codes

SEQ_ID = ps.SEQ_ID
ENCODE_THREADS = 2
"""Threads encoding column-wise slices (:meth:`_Builder.encode`)."""
PENDING_ENCODES = 4
"""Encodings submitted and not yet written, at most (bounds the memory they hold)."""
PENDING_WRITES = 4
"""Writes handed to the writer thread and not yet done, at most (about 4 MB
each for GPU kernels: bounds the memory they hold)."""
CHUNK_ROWS = 65_536
"""Kernel rows encoded per chunk (a larger input batch is split): the bundle's
Parquet row group. 16,384 cost a fifth more CPU (per-chunk bookkeeping and
per-part numpy calls) for the same events; each chunk's events are in time
order, so larger chunks also leave fewer out-of-order events at chunk edges."""
WINDOW_EVENTS = 65_536
"""Held begin/end events encoded per window (:func:`_held`)."""
KERNEL_COLUMNS = ("start_ns", "end_ns", "model", "pid", "tid", "device_type", "agent_id",
                  "queue_id", "correlation_id", "dispatch_id", "kernel_name", "kernel_family",
                  "op_type", "iteration", "launch_api_ns", "launch_delay_ns")
"""The ``KERNEL_SPAN`` columns :func:`write_trace` reads: its kernels may be
batches of only these (the bundle reads no others back from its spool)."""
FLUSH_PACKETS = 20_000
"""Packets built with the protobuf classes are written every this many."""
LAUNCH_RE = re.compile(r"Launch")
SERIES_ATTRS = ("sensor", "clock", "hw.gpu.task", "reason", "type", "bitmap")
"""GAUGE_SAMPLE attributes that split one metric into series (``collectors/gpu``);
the first present names a counter track's series."""

ANALYTICS_COUNTERS: tuple[tuple[str, str], ...] = catalogue.PERFETTO_COUNTERS
"""``ANALYTICS_RESULT`` column -> counter track name prefix (the catalogue's OTel name)."""
SII_SCHED_TRACK = "aaco.scheduler_interference.sched"
"""Per-process SII from ``SCHED_SAMPLE`` (the catalogue's SII name + ``.sched``)."""

CATEGORIES = {"kernel": 1, "launch": 2, "iteration": 3, "hip_api": 4}
"""Interned ``EventCategory`` ids of the column-wise slices."""
ANNOTATION_NAMES = {"kernel_family": 1, "op_type": 2, "iteration": 3, "correlation_id": 4,
                    "dispatch_id": 5, "synthetic": 6, "model": 7, "kernel_count": 8}
"""Interned ``DebugAnnotationName`` ids of the column-wise slices."""

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class TraceStats:
    """What :func:`write_trace` wrote (slice counts are per category)."""

    path: Path
    bytes: int
    packets: int
    kernel_slices: int
    iteration_slices: int
    api_slices: int
    counter_tracks: int
    counter_points: int
    flows: int
    chunks: int = 0


class _Builder:
    """Track bookkeeping plus a packet buffer written to ``f`` every
    :data:`FLUSH_PACKETS` packets (and before every raw chunk); by ``writer``
    when there is one (a single thread: the writes keep their order), at most
    :data:`PENDING_WRITES` of them outstanding; ``settle()`` (no limit) waits
    for them all and raises their errors.

    Column-wise slices are encoded in ``pool`` (:meth:`encode`: numpy
    releases the GIL, so the encoding of one chunk runs on another core
    while the next chunk's tracks and interned names are built here); what
    is written stays in order: bytes wait in ``pending`` behind the
    encodings submitted before them, at most :data:`PENDING_ENCODES` of them."""

    def __init__(self, f: BinaryIO, pool: Executor | None = None,
                 writer: Executor | None = None) -> None:
        self.f = f
        self.pool = pool
        self.writer = writer
        self.writes: deque[Future[int]] = deque()
        self.pending: deque[tuple[Future[tuple[ps.Wire, int]] | ps.Wire, int]] = deque()
        self.encoding = 0
        self.trace = Trace()
        self.bytes = 0
        self.packets = 0
        self.chunks = 0
        self.next_uuid = 1
        self.processes: dict[int, int] = {}
        self.threads: dict[tuple[int, int], int] = {}
        self.named: dict[tuple[object, ...], int] = {}
        self.counter_tracks = 0
        self.counter_points = 0
        self.api_slices = 0
        self.first = True
        self.thread_names: dict[tuple[int, int], str] = {}
        self.names: dict[str, int] = {}
        self.strings: dict[str, int] = {}
        self.interned: InternedData | None = None

    def flush(self) -> None:
        if len(self.trace.packet):
            packets = len(self.trace.packet)
            data = self.trace.SerializeToString()
            self.trace = Trace()
            self._queue(data, packets)

    def _queue(self, data: ps.Wire, packets: int) -> None:
        """Write ``data`` now, or after the encodings still pending."""
        if self.pending:
            self.pending.append((data, packets))
        else:
            self._write(data, packets)

    def _write(self, data: ps.Wire, packets: int) -> None:
        if self.writer is None:
            self.f.write(data)
        else:
            self.writes.append(self.writer.submit(self.f.write, data))
            while self.writes and (len(self.writes) > PENDING_WRITES or self.writes[0].done()):
                self.writes.popleft().result()
        self.bytes += len(data)
        self.packets += packets
        self.chunks += 1

    def raw(self, data: ps.Wire, packets: int) -> None:
        """Write already serialized ``Trace.packet`` entries after what is buffered."""
        self.flush()
        self._queue(data, packets)

    def encode(self, fn: Callable[..., tuple[ps.Wire, int]], *args: object) -> None:
        """Write ``fn(*args)`` (serialized packets and their count, e.g.
        :func:`perfetto_slices.encode`) after what is buffered: computed in
        ``pool`` when there is one, written in order by :meth:`settle`."""
        if self.pool is None:
            self.raw(*fn(*args))
            return
        self.flush()
        self.pending.append((self.pool.submit(fn, *args), 0))
        self.encoding += 1
        self.settle(PENDING_ENCODES)

    def settle(self, limit: int = 0) -> None:
        """Write what is pending, in order, until at most ``limit`` encodings
        are outstanding (waiting for the oldest; exceptions are raised here)."""
        while self.pending:
            head, packets = self.pending[0]
            if isinstance(head, Future):
                if self.encoding <= limit and not head.done():
                    return
                data, packets = head.result()
                self.encoding -= 1
            else:
                data = head
            self.pending.popleft()
            self._write(data, packets)
        if limit == 0:
            while self.writes:
                self.writes.popleft().result()

    def packet(self) -> TracePacket:
        if len(self.trace.packet) >= FLUSH_PACKETS:
            self.flush()
        p = self.trace.packet.add()
        p.trusted_packet_sequence_id = SEQ_ID
        if self.first:
            p.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            self.first = False
        return p

    def header(self) -> None:
        """First packet: clears incremental state, interns categories and
        annotation names of the column-wise slices."""
        d = self.packet().interned_data
        for name, iid in CATEGORIES.items():
            c = d.event_categories.add()
            c.iid, c.name = iid, name
        for name, iid in ANNOTATION_NAMES.items():
            a = d.debug_annotation_names.add()
            a.iid, a.name = iid, name

    def _pending(self) -> InternedData:
        if self.interned is None:
            p = self.packet()
            p.sequence_flags = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
            self.interned = p.interned_data
        return self.interned

    def name_iids(self, names: Sequence[object]) -> I64:
        """Interned ``EventName`` ids of ``names`` (new ones go into the chunk's
        ``InternedData`` packet)."""
        out = np.empty(len(names), dtype=np.int64)
        for i, v in enumerate(names):
            s = str(v)
            if s not in self.names:
                self.names[s] = len(self.names) + 1
                e = self._pending().event_names.add()
                e.iid, e.name = self.names[s], s
            out[i] = self.names[s]
        return out

    def string_iids(self, values: Sequence[object]) -> I64:
        """Interned ``debug_annotation_string_values`` ids of ``values``."""
        out = np.empty(len(values), dtype=np.int64)
        for i, v in enumerate(values):
            s = str(v)
            if s not in self.strings:
                self.strings[s] = len(self.strings) + 1
                e = self._pending().debug_annotation_string_values.add()
                e.iid, e.str = self.strings[s], s.encode()
            out[i] = self.strings[s]
        return out

    def end_chunk_header(self) -> None:
        """The chunk's descriptors and interned data are complete."""
        self.interned = None
        self.flush()

    def uuid(self) -> int:
        self.next_uuid += 1
        return self.next_uuid

    def process(self, pid: int, name: str | None = None) -> int:
        if pid not in self.processes:
            u = self.uuid()
            d = ProcessDescriptor(pid=pid, process_name=name or f"pid {pid}")
            self.packet().track_descriptor.CopyFrom(TrackDescriptor(uuid=u, process=d))
            self.processes[pid] = u
        return self.processes[pid]

    def thread(self, pid: int, tid: int) -> int:
        key = (pid, tid)
        if key not in self.threads:
            self.process(pid)
            u = self.uuid()
            name = self.thread_names.get(key) or f"tid {tid}"
            d = ThreadDescriptor(pid=pid, tid=tid, thread_name=name)
            self.packet().track_descriptor.CopyFrom(TrackDescriptor(uuid=u, thread=d))
            self.threads[key] = u
        return self.threads[key]

    def named_track(
        self, key: tuple[object, ...], name: str, parent: int = 0, unit: str | None = None
    ) -> int:
        if key not in self.named:
            u = self.uuid()
            td = TrackDescriptor(uuid=u, name=name)
            if parent:
                td.parent_uuid = parent
            if unit is not None:
                td.counter.CopyFrom(CounterDescriptor(unit_name=unit))
                self.counter_tracks += 1
            self.packet().track_descriptor.CopyFrom(td)
            self.named[key] = u
        return self.named[key]

    def counter(self, track: int, ts: Sequence[int], values: Sequence[float]) -> None:
        for t, v in zip(ts, values, strict=True):
            p = self.packet()
            p.timestamp = int(t)
            p.track_event.CopyFrom(
                TrackEvent(type=TrackEvent.TYPE_COUNTER, track_uuid=track, double_counter_value=v)
            )
            self.counter_points += 1

def _ints(col: pa.ChunkedArray | pa.Array, fill: int) -> list[int]:
    return [int(x) for x in pc.fill_null(col, fill).to_pylist()] if len(col) else []


def _np(col: pa.ChunkedArray | pa.Array, fill: int = 0) -> I64:
    """int64 numpy array of ``col`` with nulls as ``fill`` (read-only: a
    column without nulls may be viewed, not copied)."""
    if col.null_count:
        col = pc.fill_null(col, fill)
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int64)


def _valid(col: pa.ChunkedArray | pa.Array) -> npt.NDArray[np.bool_]:
    if not col.null_count:
        return np.ones(len(col), dtype=bool)
    return np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)


def _is_gpu(col: pa.Array) -> npt.NDArray[np.bool_]:
    """Rows whose ``device_type`` is ``"gpu"`` (a null is a CPU kernel); a
    dictionary column is compared once per distinct value."""
    if pa.types.is_dictionary(col.type):
        hit = np.asarray(pc.fill_null(pc.equal(pc.cast(col.dictionary, pa.string()), "gpu"),
                                      False).to_numpy(zero_copy_only=False), dtype=bool)
        if len(hit) == 0:
            return np.zeros(len(col), dtype=bool)
        return hit[_np(col.indices)] & _valid(col)
    return np.asarray(pc.fill_null(pc.equal(pc.cast(col, pa.string()), "gpu"), False)
                      .to_numpy(zero_copy_only=False), dtype=bool)


def _codes(col: pa.Array, ids: object) -> tuple[I64, npt.NDArray[np.bool_]]:
    """Per row, the interned id of a string/dictionary column's value (``ids``:
    a ``_Builder`` id function) and whether it is present."""
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    valid = _valid(col)
    lut = ids(col.dictionary.to_pylist())  # type: ignore[operator]
    idx = _np(col.indices, 0)
    out = lut[idx] if len(lut) else np.zeros(len(idx), dtype=np.int64)
    return out, valid


def _iteration_threads(kernels: pa.Table, iterations: pa.Table) -> I64:
    """Thread id that ran most CPU kernels (``kernels``) of each iteration (-1 if
    none; ties go to the smallest tid). Columnar: one group-by of (iteration, tid)."""
    out = np.full(iterations.num_rows, -1, dtype=np.int64)
    if kernels.num_rows == 0:
        return out
    parent = match_iterations(kernels, iterations)
    tid = _np(kernels.column("tid"), -1)
    sel = (parent >= 0) & (tid >= 0)
    if not sel.any():
        return out
    g = pa.table({"it": parent[sel], "tid": tid[sel]}).group_by(["it", "tid"]).aggregate(
        [("tid", "count")])
    it, t = _np(g.column("it")), _np(g.column("tid"))
    order = np.lexsort((t, -_np(g.column("tid_count")), it))
    it, t = it[order], t[order]
    first = np.concatenate([[True], it[1:] != it[:-1]])
    out[it[first]] = t[first]
    return out


class _Flows:
    """Flow ids: HIP launch API -> GPU kernel by correlation id, and synthetic
    launch -> kernel. ``cand`` are the launch APIs' correlation ids (sorted);
    the first GPU kernel seen with one claims it."""

    def __init__(self, hip_api: pa.Table | None) -> None:
        self.count = 0
        cand = np.zeros(0, dtype=np.int64)
        if hip_api is not None and hip_api.num_rows:
            launch = pc.and_(pc.match_substring_regex(pc.cast(hip_api.column("function"),
                                                              pa.string()), LAUNCH_RE.pattern),
                             pc.greater(hip_api.column("correlation_id"), 0))
            corr = hip_api.column("correlation_id").filter(pc.fill_null(launch, False))
            cand = np.unique(_np(corr))
        self.cand = cand
        self.flow = np.zeros(len(cand), dtype=np.int64)  # 0 = not claimed

    def new(self, n: int) -> I64:
        ids = np.arange(self.count + 1, self.count + 1 + n, dtype=np.int64)
        self.count += n
        return ids

    def claim(self, corr: I64, ok: npt.NDArray[np.bool_]) -> tuple[I64, npt.NDArray[np.bool_]]:
        """Flow ids for the kernels (rows of ``corr`` where ``ok``) that claim a
        launch API (0 elsewhere), and which rows' correlation id is claimed."""
        flow_in = np.zeros(len(corr), dtype=np.int64)
        if len(self.cand) == 0:
            return flow_in, np.zeros(len(corr), dtype=bool)
        idx = np.minimum(np.searchsorted(self.cand, corr), len(self.cand) - 1)
        hit = ok & (self.cand[idx] == corr)
        fresh = hit & (self.flow[idx] == 0)
        rows = np.flatnonzero(fresh)
        _, first = np.unique(corr[rows], return_index=True)
        rows = np.sort(rows[first])
        ids = self.new(len(rows))
        self.flow[idx[rows]] = ids
        flow_in[rows] = ids
        return flow_in, hit

    def api_flows(self, corr: I64, ok: npt.NDArray[np.bool_]) -> I64:
        """Per row the flow id a launch API with correlation id ``corr`` (where
        ``ok``) starts: 0 if no kernel claimed it."""
        out = np.zeros(len(corr), dtype=np.int64)
        if len(self.cand) == 0:
            return out
        idx = np.minimum(np.searchsorted(self.cand, corr), len(self.cand) - 1)
        hit = ok & (self.cand[idx] == corr)
        out[hit] = self.flow[idx[hit]]
        return out


def _name_processes(b: _Builder, pid: I64, model: pa.Array) -> None:
    """Name each new pid's process after the first model seen with it."""
    has = _valid(model)
    if not has.any():
        return
    rows = np.flatnonzero(has)
    _, first = np.unique(pid[rows], return_index=True)
    rows = np.sort(rows[first])
    for r, m in zip(rows.tolist(), model.take(pa.array(rows)).to_pylist(), strict=True):
        p = int(pid[r])
        if p not in b.processes:
            b.process(p, f"{m} (pid {p})")


def _track_ids(keys: I64, make: object) -> I64:
    """Per row the track uuid of its key tuple (``keys``: [n, k] int64), made
    once per distinct key with ``make(*key)``, in the keys' sorted order.

    Columnar and without a sort of the rows
    (:func:`stream_analytics.groups.tuple_codes`)."""
    n, k = keys.shape
    if n == 0:
        return np.empty(0, np.int64)
    row, distinct = tuple_codes([keys[:, i] for i in range(k)])
    first = first_rows(row, distinct)
    lut = np.array([make(*map(int, keys[r])) for r in first.tolist()],  # type: ignore[operator]
                   dtype=np.int64)
    out: I64 = lut[row]
    return out


def _gpu_chunk(b: _Builder, k: pa.RecordBatch, flows: _Flows) -> None:
    """Encode one batch of GPU kernel rows (and their synthetic launches) column-wise."""
    n = k.num_rows
    col = k.column
    agent, queue = _np(col("agent_id"), -1), _np(col("queue_id"), -1)

    def queue_track(a: int, q: int) -> int:
        parent = b.named_track(("agent", a), f"GPU agent {a}")
        return b.named_track(("queue", a, q), f"queue {q}", parent)

    track = _track_ids(np.stack([agent, queue], axis=1), queue_track)
    name_iid, _ = _codes(col("kernel_name"), b.name_iids)
    fam, fam_ok = _codes(col("kernel_family"), b.string_iids)
    op, op_ok = _codes(col("op_type"), b.string_iids)
    corr, corr_ok = _np(col("correlation_id")), _valid(col("correlation_id"))
    flow_in, claimed = flows.claim(corr, corr_ok & (corr > 0))
    A = ps.Annotation
    kern = ps.SliceCols(
        start=_np(col("start_ns")), end=_np(col("end_ns")), track=track, name_iid=name_iid,
        cat_iid=np.full(n, CATEGORIES["kernel"], dtype=np.int64),
        depth=np.zeros(n, dtype=np.int64),
        annotations=[A(ANNOTATION_NAMES["kernel_family"], "str", fam, fam_ok),
                     A(ANNOTATION_NAMES["op_type"], "str", op, op_ok),
                     A(ANNOTATION_NAMES["iteration"], "int", _np(col("iteration")),
                       _valid(col("iteration"))),
                     A(ANNOTATION_NAMES["correlation_id"], "int", corr, corr_ok),
                     A(ANNOTATION_NAMES["dispatch_id"], "int", _np(col("dispatch_id")),
                       _valid(col("dispatch_id")))],
        flow_in=flow_in)
    # synthetic launch slices: launch_api_ns/launch_delay_ns/pid/tid known, no HIP API flow
    syn = _valid(col("launch_api_ns")) & _valid(col("launch_delay_ns")) & _valid(col("pid")) \
        & _valid(col("tid")) & ~claimed
    rows = np.flatnonzero(syn)
    parts = [kern]
    if len(rows):
        m = len(rows)
        pid, tid = _np(col("pid"))[rows], _np(col("tid"))[rows]
        end = kern.start[rows] - _np(col("launch_delay_ns"))[rows]
        ids = flows.new(m)
        kern.flow_in[rows] = ids  # type: ignore[index]
        b.api_slices += m
        true_iid = b.string_iids(["True"])[0]
        parts.append(ps.SliceCols(
            start=end - _np(col("launch_api_ns"))[rows], end=end,
            track=_track_ids(np.stack([pid, tid], axis=1), b.thread),
            name_iid=np.full(m, b.name_iids(["launch"])[0], dtype=np.int64),
            cat_iid=np.full(m, CATEGORIES["launch"], dtype=np.int64),
            depth=np.ones(m, dtype=np.int64),
            annotations=[A(ANNOTATION_NAMES["correlation_id"], "int", corr[rows], corr_ok[rows]),
                         A(ANNOTATION_NAMES["synthetic"], "str", np.full(m, true_iid),
                           np.ones(m, dtype=bool))],
            flow_out=ids))
    b.end_chunk_header()
    for s in parts:
        b.encode(ps.encode, s)


def _batches(kernels: pa.Table | Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    if isinstance(kernels, pa.Table):
        yield from kernels.to_batches(max_chunksize=CHUNK_ROWS)
        return
    for batch in kernels:
        for off in range(0, batch.num_rows, CHUNK_ROWS):
            yield batch.slice(off, CHUNK_ROWS)


def write_trace(
    path: Path,
    kernels: pa.Table | Iterable[pa.RecordBatch],
    iterations: pa.Table,
    sched: pa.Table | None = None,
    gauges: pa.Table | None = None,
    analytics: pa.Table | Callable[[], pa.Table | None] | None = None,
    hip_api: pa.Table | None = None,
    progress: Callable[[int], None] | None = None,
) -> TraceStats:
    """Write ``path`` (Perfetto protobuf trace) as it goes; return what was written.

    ``kernels``: a ``KERNEL_SPAN`` table or record batches of it, or of its
    :data:`KERNEL_COLUMNS` (read once, in order; e.g.
    ``ParquetFile.iter_batches``); ``iterations``:
    ``ITERATION_SPAN``; ``sched``: ``SCHED_SAMPLE``; ``gauges``:
    ``GAUGE_SAMPLE``; ``analytics``: ``ANALYTICS_RESULT``, or a function
    returning it, called once the kernels are written (their counters come
    last, so results still being computed may be waited for); ``hip_api``:
    columns ``start_ns, end_ns, pid, tid, correlation_id`` (int64) and
    ``function`` (string). All times int64 ns. Memory grows (as numpy columns) with the
    iterations, CPU kernels, HIP API rows and samples, not with the GPU
    kernels. ``progress(rows)`` is called after each chunk with the kernel
    rows written so far. Raises ``OSError`` if ``path`` cannot be written; ``KeyError``
    for a missing column.
    """
    path = Path(path)
    with path.open("wb") as f, ThreadPoolExecutor(ENCODE_THREADS, "trace-encode") as pool, \
            ThreadPoolExecutor(1, "trace-write") as writer:
        b = _Builder(f, pool, writer)
        b.header()
        if sched is not None and sched.num_rows:
            comms = zip(
                sched.column("pid").to_pylist(),
                sched.column("tid").to_pylist(),
                sched.column("comm").to_pylist(),
                strict=True,
            )
            b.thread_names = {(int(p), int(t)): str(c) for p, t, c in comms if c}
        _name_processes(b, _np(iterations.column("pid")),
                        iterations.column("model").combine_chunks())
        flows = _Flows(hip_api)
        nk = 0
        cpu_parts: list[pa.RecordBatch] = []
        for k in _batches(kernels):
            nk += k.num_rows
            _name_processes(b, _np(k.column("pid")), k.column("model"))
            gpu = _is_gpu(k.column("device_type"))
            if not gpu.any():
                cpu_parts.append(k)  # all CPU (ORT captures): kept without a copy
            elif gpu.all():
                _gpu_chunk(b, k, flows)  # all GPU (GPU traces): encoded without a copy
            else:
                cpu_parts.append(k.filter(pa.array(~gpu)))
                _gpu_chunk(b, k.filter(pa.array(gpu)), flows)
            if progress is not None:
                progress(nk)
        _held(b, iterations, cpu_parts, hip_api, flows)
        _counters(b, sched, gauges, analytics() if callable(analytics) else analytics)
        b.flush()
        b.settle()
    return TraceStats(
        path=path,
        bytes=b.bytes,
        packets=b.packets,
        kernel_slices=nk,
        iteration_slices=iterations.num_rows,
        api_slices=b.api_slices,
        counter_tracks=b.counter_tracks,
        counter_points=b.counter_points,
        flows=flows.count,
        chunks=b.chunks,
    )


HELD_ANNOTATIONS = [(ANNOTATION_NAMES[k], kind) for k, kind in (
    ("model", "str"), ("kernel_family", "str"), ("op_type", "str"), ("iteration", "int"),
    ("kernel_count", "int"), ("correlation_id", "int"), ("dispatch_id", "int"))]
"""Annotation columns of the held slices: the union of iterations' (model,
iteration, kernel_count), CPU kernels' (kernel_family, op_type, iteration,
correlation_id, dispatch_id) and HIP API calls' (correlation_id)."""


def _arr(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    """One array (dictionaries unified) of a column."""
    if isinstance(col, pa.ChunkedArray):
        return col.unify_dictionaries().combine_chunks() if col.num_chunks else \
            pa.array([], col.type)
    return col


def _names(b: _Builder, col: pa.ChunkedArray | pa.Array) -> I64:
    """Interned event name ids of a string column (a null reads ``None``)."""
    iid, ok = _codes(_arr(col), b.name_iids)
    if not ok.all():
        iid[~ok] = b.name_iids(["None"])[0]
    return iid


def _str_ann(b: _Builder, name: str, col: pa.ChunkedArray | pa.Array) -> ps.Annotation:
    iid, ok = _codes(_arr(col), b.string_iids)
    return ps.Annotation(ANNOTATION_NAMES[name], "str", iid, ok)


def _int_ann(name: str, col: pa.ChunkedArray | pa.Array) -> ps.Annotation:
    return ps.Annotation(ANNOTATION_NAMES[name], "int", _np(col), _valid(col))


def _thread_tracks(b: _Builder, pid: I64, tid: I64) -> I64:
    """Thread track per row; a negative tid is the pid (the main thread)."""
    return _track_ids(np.stack([pid, np.where(tid >= 0, tid, pid)], axis=1), b.thread)


def _iteration_cols(b: _Builder, iterations: pa.Table, cpu: pa.Table) -> ps.SliceCols:
    """Iteration slices: on the thread that ran most of their CPU kernels, else on
    a per-(pid, model) ``inference <model>`` track."""
    n = iterations.num_rows
    it_tid = _iteration_threads(cpu, iterations)
    pid = _np(iterations.column("pid"), 0)
    track = np.zeros(n, dtype=np.int64)
    on = np.flatnonzero(it_tid >= 0)
    track[on] = _track_ids(np.stack([pid[on], it_tid[on]], axis=1), b.thread)
    off = np.flatnonzero(it_tid < 0)
    if len(off):
        model = pc.fill_null(pc.cast(_arr(iterations.column("model")), pa.string()), "None")
        enc = pc.dictionary_encode(model.take(pa.array(off)))
        names = enc.dictionary.to_pylist()

        def own(p: int, m: int) -> int:
            return b.named_track(("it", p, names[m]), f"inference {names[m]}", b.process(p))

        track[off] = _track_ids(np.stack([pid[off], _np(enc.indices)], axis=1), own)
    return ps.SliceCols(
        start=_np(iterations.column("start_ns")), end=_np(iterations.column("end_ns")),
        track=track, name_iid=np.full(n, b.name_iids(["inference"])[0], dtype=np.int64),
        cat_iid=np.full(n, CATEGORIES["iteration"], dtype=np.int64),
        depth=np.zeros(n, dtype=np.int64),
        annotations=[_str_ann(b, "model", iterations.column("model")),
                     _int_ann("iteration", iterations.column("iteration")),
                     _int_ann("kernel_count", iterations.column("kernel_count"))])


def _cpu_cols(b: _Builder, cpu: pa.Table) -> ps.SliceCols:
    """CPU kernel slices (category ``kernel``, depth 1) on their thread tracks."""
    n = cpu.num_rows
    col = cpu.column
    return ps.SliceCols(
        start=_np(col("start_ns")), end=_np(col("end_ns")),
        track=_thread_tracks(b, _np(col("pid"), 0), _np(col("tid"), -1)),
        name_iid=_names(b, col("kernel_name")),
        cat_iid=np.full(n, CATEGORIES["kernel"], dtype=np.int64),
        depth=np.ones(n, dtype=np.int64),
        annotations=[_str_ann(b, "kernel_family", col("kernel_family")),
                     _str_ann(b, "op_type", col("op_type")),
                     *(_int_ann(c, col(c)) for c in ("iteration", "correlation_id",
                                                     "dispatch_id"))])


def _api_cols(b: _Builder, api: pa.Table, flows: _Flows) -> ps.SliceCols:
    """HIP API slices (category ``hip_api``, depth 1); the first launch API
    (``LAUNCH_RE``) per correlation id whose kernel claimed it starts that flow."""
    n = api.num_rows
    col = api.column
    corr, ok = _np(col("correlation_id")), _valid(col("correlation_id"))
    launch = np.asarray(pc.fill_null(pc.match_substring_regex(
        pc.cast(_arr(col("function")), pa.string()), LAUNCH_RE.pattern), False)
        .to_numpy(zero_copy_only=False), dtype=bool)
    flow = flows.api_flows(corr, ok & launch)
    rows = np.flatnonzero(flow > 0)
    _, first = np.unique(corr[rows], return_index=True)
    flow_out = np.zeros(n, dtype=np.int64)
    flow_out[rows[first]] = flow[rows[first]]
    b.api_slices += n
    return ps.SliceCols(
        start=_np(col("start_ns")), end=_np(col("end_ns")),
        track=_thread_tracks(b, _np(col("pid"), 0), _np(col("tid"), -1)),
        name_iid=_names(b, col("function")),
        cat_iid=np.full(n, CATEGORIES["hip_api"], dtype=np.int64),
        depth=np.ones(n, dtype=np.int64),
        annotations=[ps.Annotation(ANNOTATION_NAMES["correlation_id"], "int", corr, ok)],
        flow_out=flow_out)


def _held(b: _Builder, iterations: pa.Table, cpu_parts: list[pa.RecordBatch],
          hip_api: pa.Table | None, flows: _Flows) -> None:
    """Iterations, CPU kernels and HIP API calls as one set of slice columns
    (their tracks and interned strings emitted first), sorted together once
    (:func:`perfetto_slices.event_order`: they nest on shared thread tracks)
    and encoded :data:`WINDOW_EVENTS` events at a time."""
    from exporter.schema import KERNEL_SPAN

    cpu = pa.Table.from_batches(cpu_parts) if cpu_parts else KERNEL_SPAN.empty_table()
    parts = []
    if iterations.num_rows:
        parts.append(_iteration_cols(b, iterations, cpu))
    if cpu.num_rows:
        parts.append(_cpu_cols(b, cpu))
    if hip_api is not None and hip_api.num_rows:
        parts.append(_api_cols(b, hip_api, flows))
    if not parts:
        return
    held = ps.concat(parts, HELD_ANNOTATIONS)
    del parts, cpu
    b.end_chunk_header()
    for ts, ev in ps.event_windows(held, WINDOW_EVENTS):
        b.encode(ps.encode_window, held, ts, ev)


def _counters(b: _Builder, sched: pa.Table | None, gauges: pa.Table | None,
              analytics: pa.Table | None) -> None:
    if gauges is not None and gauges.num_rows:
        g = gauges.sort_by([("ts_ns", "ascending")])
        metric = g.column("metric").to_pylist()
        unit = g.column("unit").to_pylist()
        gi = g.column("gpu_index").to_pylist()
        ts = g.column("ts_ns").to_pylist()
        val = g.column("value").to_pylist()
        # one track per series: the attribute that splits a metric (sensor, clock,
        # hw.gpu.task, reason, type, bitmap) is part of the track's key and name
        sub: list[str | None] = [None] * g.num_rows
        if "attributes" in g.column_names:
            for key in SERIES_ATTRS:
                got = pc.map_lookup(g.column("attributes"), pa.scalar(key), "first").to_pylist()
                sub = [a if a is not None else v for a, v in zip(sub, got, strict=True)]
        for r in range(g.num_rows):
            name = f"{metric[r]} gpu{gi[r]}" if gi[r] is not None else str(metric[r])
            if sub[r] is not None:
                name += f" {sub[r]}"
            track = b.named_track(("gauge", metric[r], gi[r], sub[r]), name, unit=str(unit[r]))
            b.counter(track, [ts[r]], [float(val[r])])
    if analytics is not None and analytics.num_rows:
        a = analytics.sort_by([("ts_ns", "ascending")])
        a_pid = _ints(a.column("pid"), 0)
        a_model = a.column("model").to_pylist()
        ts = a.column("ts_ns").to_pylist()
        for col, prefix in ANALYTICS_COUNTERS:
            vals = a.column(col).to_pylist()
            for r in range(a.num_rows):
                if vals[r] is None:
                    continue
                proc = b.process(a_pid[r])
                track = b.named_track(
                    ("an", prefix, a_pid[r], a_model[r]), f"{prefix} {a_model[r]}", proc, unit="1"
                )
                b.counter(track, [ts[r]], [float(vals[r])])
    if sched is not None and sched.num_rows:
        active = pc.greater(pc.add(sched.column("run_ns"), sched.column("runq_wait_ns")), 0)
        s_t = sched.filter(active)
        agg = s_t.group_by(["pid", "ts_ns"]).aggregate(
            [("runq_wait_ns", "sum"), ("interval_ns", "sum")]
        )
        agg = agg.sort_by([("pid", "ascending"), ("ts_ns", "ascending")])
        pids = agg.column("pid").to_pylist()
        ts = agg.column("ts_ns").to_pylist()
        wait = agg.column("runq_wait_ns_sum").to_pylist()
        wall = agg.column("interval_ns_sum").to_pylist()
        for r in range(agg.num_rows):
            if not wall[r]:
                continue
            proc = b.process(int(pids[r]))
            track = b.named_track(("sched", pids[r]), SII_SCHED_TRACK, proc, unit="1")
            b.counter(track, [ts[r]], [wait[r] / wall[r]])
