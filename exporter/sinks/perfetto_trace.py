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
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    CounterDescriptor,
    DebugAnnotation,
    ProcessDescriptor,
    ThreadDescriptor,
    Trace,
    TracePacket,
    TrackDescriptor,
    TrackEvent,
)

from exporter import catalogue
from exporter.sinks.otlp_proto import match_iterations

SEQ_ID = 1
LAUNCH_RE = re.compile(r"Launch")
SERIES_ATTRS = ("sensor", "clock", "hw.gpu.task", "reason", "type", "bitmap")
"""GAUGE_SAMPLE attributes that split one metric into series (``collectors/gpu``);
the first present names a counter track's series."""

ANALYTICS_COUNTERS: tuple[tuple[str, str], ...] = catalogue.PERFETTO_COUNTERS
"""``ANALYTICS_RESULT`` column -> counter track name prefix (the catalogue's OTel name)."""
SII_SCHED_TRACK = "aaco.scheduler_interference.sched"
"""Per-process SII from ``SCHED_SAMPLE`` (the catalogue's SII name + ``.sched``)."""

Annot = tuple[tuple[str, object], ...]


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


@dataclass
class _Slice:
    track: int
    start: int
    end: int
    name: str
    category: str
    depth: int
    annotations: Annot
    flow_out: int = 0
    flow_in: int = 0


class _Builder:
    def __init__(self) -> None:
        self.trace = Trace()
        self.next_uuid = 1
        self.processes: dict[int, int] = {}
        self.threads: dict[tuple[int, int], int] = {}
        self.named: dict[tuple[object, ...], int] = {}
        self.slices: list[_Slice] = []
        self.counter_tracks = 0
        self.counter_points = 0
        self.first = True
        self.thread_names: dict[tuple[int, int], str] = {}

    def packet(self) -> TracePacket:
        p = self.trace.packet.add()
        p.trusted_packet_sequence_id = SEQ_ID
        if self.first:
            p.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            self.first = False
        return p

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

    def emit_slices(self) -> None:
        """Write begin/end events sorted by time; at equal times ends (deepest first)
        precede begins (shallowest first); zero-length slices come last."""
        n = len(self.slices)
        if n == 0:
            return
        start = np.array([s.start for s in self.slices], dtype=np.int64)
        end = np.array([s.end for s in self.slices], dtype=np.int64)
        depth = np.array([s.depth for s in self.slices], dtype=np.int64)
        zero = end <= start
        idx = np.arange(n)
        # event arrays: ts, phase, tiebreak, slice index, is_end
        ts = np.concatenate([start, end])
        phase = np.concatenate([np.where(zero, 2, 1), np.where(zero, 2, 0)])
        tie = np.concatenate([depth * 2, np.where(zero, depth * 2, -depth)])
        sl = np.concatenate([idx, idx])
        is_end = np.concatenate([np.zeros(n, dtype=bool), np.ones(n, dtype=bool)])
        ts = np.where(is_end & zero[sl], start[sl], ts)
        order = np.lexsort((is_end, sl, tie, phase, ts))
        for k in order.tolist():
            s = self.slices[int(sl[k])]
            p = self.packet()
            p.timestamp = int(ts[k])
            ev = p.track_event
            ev.track_uuid = s.track
            if is_end[k]:
                ev.type = TrackEvent.TYPE_SLICE_END
                continue
            ev.type = TrackEvent.TYPE_SLICE_BEGIN
            ev.name = s.name
            ev.categories.append(s.category)
            ev.debug_annotations.extend(_annotations(s.annotations))
            if s.flow_out:
                ev.flow_ids.append(s.flow_out)
            if s.flow_in:
                ev.terminating_flow_ids.append(s.flow_in)


def _annotations(items: Iterable[tuple[str, object]]) -> list[DebugAnnotation]:
    out = []
    for k, v in items:
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int | float):
            out.append(DebugAnnotation(name=k, string_value=str(v)))
        elif isinstance(v, int):
            out.append(DebugAnnotation(name=k, int_value=v))
        else:
            out.append(DebugAnnotation(name=k, double_value=v))
    return out


def _ints(col: pa.ChunkedArray, fill: int) -> list[int]:
    return [int(x) for x in pc.fill_null(col, fill).to_pylist()] if len(col) else []


def _iteration_threads(kernels: pa.Table, iterations: pa.Table, cpu: np.ndarray) -> list[int]:
    """Thread id that ran most CPU kernels of each iteration (-1 if none)."""
    parent = match_iterations(kernels, iterations)
    out = [-1] * iterations.num_rows
    if kernels.num_rows == 0:
        return out
    tid = np.array(_ints(kernels.column("tid"), -1), dtype=np.int64)
    sel = (parent >= 0) & cpu & (tid >= 0)
    best: dict[int, dict[int, int]] = {}
    for it, t in zip(parent[sel].tolist(), tid[sel].tolist(), strict=True):
        c = best.setdefault(it, {})
        c[t] = c.get(t, 0) + 1
    for it, c in best.items():
        out[it] = max(c.items(), key=lambda kv: (kv[1], -kv[0]))[0]
    return out


def write_trace(
    path: Path,
    kernels: pa.Table,
    iterations: pa.Table,
    sched: pa.Table | None = None,
    gauges: pa.Table | None = None,
    analytics: pa.Table | None = None,
    hip_api: pa.Table | None = None,
) -> TraceStats:
    """Write ``path`` (Perfetto protobuf trace); return what was written.

    ``kernels``: ``KERNEL_SPAN`` table; ``iterations``: ``ITERATION_SPAN``;
    ``sched``: ``SCHED_SAMPLE``; ``gauges``: ``GAUGE_SAMPLE``; ``analytics``:
    ``ANALYTICS_RESULT``; ``hip_api``: columns ``start_ns, end_ns, pid, tid,
    correlation_id`` (int64) and ``function`` (string). All times int64 ns.
    Raises ``OSError`` if ``path`` cannot be written; ``KeyError`` for a
    missing column.
    """
    b = _Builder()
    if sched is not None and sched.num_rows:
        comms = zip(
            sched.column("pid").to_pylist(),
            sched.column("tid").to_pylist(),
            sched.column("comm").to_pylist(),
            strict=True,
        )
        b.thread_names = {(int(p), int(t)): str(c) for p, t, c in comms if c}
    nk = kernels.num_rows
    dev = pc.fill_null(pc.cast(kernels.column("device_type"), pa.string()), "cpu")
    gpu = np.asarray(pc.equal(dev, "gpu").to_numpy(zero_copy_only=False), dtype=bool)
    cpu = ~gpu
    k_pid = _ints(kernels.column("pid"), 0)
    k_tid = [
        t if t >= 0 else p for t, p in zip(_ints(kernels.column("tid"), -1), k_pid, strict=True)
    ]
    k_start = kernels.column("start_ns").to_pylist()
    k_end = kernels.column("end_ns").to_pylist()
    k_name = kernels.column("kernel_name").to_pylist()
    k_model = kernels.column("model").to_pylist()
    k_fam = kernels.column("kernel_family").to_pylist()
    k_op = kernels.column("op_type").to_pylist()
    k_it = kernels.column("iteration").to_pylist()
    k_corr = kernels.column("correlation_id").to_pylist()
    k_disp = kernels.column("dispatch_id").to_pylist()
    k_agent = _ints(kernels.column("agent_id"), -1)
    k_queue = _ints(kernels.column("queue_id"), -1)

    # processes named after their model
    i_pid = _ints(iterations.column("pid"), 0)
    i_model = iterations.column("model").to_pylist()
    for pid, model in zip(i_pid + k_pid, i_model + k_model, strict=True):
        if model is not None and pid not in b.processes:
            b.process(pid, f"{model} (pid {pid})")

    # iterations
    it_tid = _iteration_threads(kernels, iterations, cpu)
    i_start = iterations.column("start_ns").to_pylist()
    i_end = iterations.column("end_ns").to_pylist()
    i_no = iterations.column("iteration").to_pylist()
    i_cnt = iterations.column("kernel_count").to_pylist()
    for i in range(iterations.num_rows):
        pid, model = i_pid[i], i_model[i]
        if it_tid[i] >= 0:
            track = b.thread(pid, it_tid[i])
        else:
            track = b.named_track(("it", pid, model), f"inference {model}", b.process(pid))
        annot: Annot = (("model", model), ("iteration", i_no[i]), ("kernel_count", i_cnt[i]))
        b.slices.append(_Slice(track, i_start[i], i_end[i], "inference", "iteration", 0, annot))

    # kernels
    gpu_slice: dict[int, _Slice] = {}
    for r in range(nk):
        if gpu[r]:
            agent = b.named_track(("agent", k_agent[r]), f"GPU agent {k_agent[r]}")
            track = b.named_track(("queue", k_agent[r], k_queue[r]), f"queue {k_queue[r]}", agent)
            depth = 0
        else:
            track = b.thread(k_pid[r], k_tid[r])
            depth = 1
        annot = (
            ("kernel_family", k_fam[r]),
            ("op_type", k_op[r]),
            ("iteration", k_it[r]),
            ("correlation_id", k_corr[r]),
            ("dispatch_id", k_disp[r]),
        )
        s = _Slice(track, k_start[r], k_end[r], str(k_name[r]), "kernel", depth, annot)
        b.slices.append(s)
        if gpu[r] and k_corr[r] is not None and k_corr[r] > 0:
            gpu_slice.setdefault(int(k_corr[r]), s)
    kernel_slices = nk

    # HIP API slices and flows
    flows = 0
    api_slices = 0
    linked: set[int] = set()
    if hip_api is not None and hip_api.num_rows:
        a_pid = _ints(hip_api.column("pid"), 0)
        a_tid = _ints(hip_api.column("tid"), -1)
        a_corr = hip_api.column("correlation_id").to_pylist()
        a_fn = hip_api.column("function").to_pylist()
        a_start = hip_api.column("start_ns").to_pylist()
        a_end = hip_api.column("end_ns").to_pylist()
        for r in range(hip_api.num_rows):
            tid = a_tid[r] if a_tid[r] >= 0 else a_pid[r]
            annot = (("correlation_id", a_corr[r]),)
            s = _Slice(
                b.thread(a_pid[r], tid), a_start[r], a_end[r], str(a_fn[r]), "hip_api", 1, annot
            )
            corr = a_corr[r]
            target = gpu_slice.get(int(corr)) if corr is not None else None
            if target is not None and LAUNCH_RE.search(str(a_fn[r])) and corr not in linked:
                flows += 1
                s.flow_out = target.flow_in = flows
                linked.add(int(corr))
            b.slices.append(s)
            api_slices += 1
    # synthetic launch slices from launch_api_ns / launch_delay_ns
    api_ns = kernels.column("launch_api_ns").to_pylist()
    delay_ns = kernels.column("launch_delay_ns").to_pylist()
    raw_pid = kernels.column("pid").to_pylist()
    raw_tid = kernels.column("tid").to_pylist()
    for r in np.flatnonzero(gpu).tolist():
        if None in (api_ns[r], delay_ns[r], raw_pid[r], raw_tid[r]):
            continue
        if k_corr[r] is not None and k_corr[r] in linked:
            continue
        end = k_start[r] - delay_ns[r]
        annot = (("correlation_id", k_corr[r]), ("synthetic", True))
        s = _Slice(
            b.thread(raw_pid[r], raw_tid[r]), end - api_ns[r], end, "launch", "launch", 1, annot
        )
        flows += 1
        s.flow_out = flows
        target = b.slices[iterations.num_rows + r]
        target.flow_in = flows
        b.slices.append(s)
        api_slices += 1
    b.emit_slices()

    # counters
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

    data = b.trace.SerializeToString()
    path = Path(path)
    path.write_bytes(data)
    return TraceStats(
        path=path,
        bytes=len(data),
        packets=len(b.trace.packet),
        kernel_slices=kernel_slices,
        iteration_slices=iterations.num_rows,
        api_slices=api_slices,
        counter_tracks=b.counter_tracks,
        counter_points=b.counter_points,
        flows=flows,
    )
