"""Online KAR, LTS, SII, active ratio and latency per (host, pid, model).

The engine folds decoded bus batches into small per-key state and evaluates
a window on demand. It never keeps kernel rows: each kernel batch is reduced
at once, columnar, to per-iteration aggregates (count, kernel time, busy
union, launch overhead). Definitions (see ``docs/metrics.md``):

* **KAR** = kernel spans per iteration / graph ``node_count`` (non-Constant
  nodes, from ``graph_info``).
* **LTS** = launch overhead / kernel time, where kernel time is the sum of
  kernel durations and launch overhead is, per kernel, ``launch_api_ns +
  max(launch_delay_ns, 0)`` when a GPU trace joined them (HTA's kernel-launch
  statistics), else per iteration the host-side gap time ``iteration
  duration - busy union of its kernels`` (CPU execution providers).
* **SII** = run-queue wait / wall time of the workload's active threads
  (:mod:`stream_analytics.sii`).
* **GPU active ratio** = union of kernel busy intervals / wall time, where
  wall time is the sum of the window's iteration spans when the source has
  iterations (time the workload spent inside runs; gaps between runs, such as
  ORT session re-creation between profiling chunks, are not counted), else
  the window's first kernel start to last kernel end (raw GPU traces).
* **Latency** mean, p50, p99 of iteration durations (numpy ``percentile``,
  linear interpolation), in seconds.

Kernels without an iteration (raw GPU traces) are reduced per batch into
time buckets that count toward kernel totals, busy time and LTS, but not
toward KAR or latency.

>>> import pyarrow as pa
>>> eng = Analytics(window_s=None)
>>> eng.ingest("graph_info", "h", pa.table({"model": ["m"], "node_count": [2], "pid": [1]}))
>>> eng.ingest("kernel_span", "h", pa.table({
...     "model": ["m", "m"], "pid": [1, 1], "iteration": [0, 0],
...     "start_ns": [0, 60], "end_ns": [50, 100], "duration_ns": [50, 40],
...     "kernel_family": ["gemm", "copy"]}))
>>> eng.ingest("iteration_span", "h", pa.table({
...     "model": ["m"], "pid": [1], "iteration": [0],
...     "start_ns": [0], "end_ns": [100], "duration_ns": [100]}))
>>> r = eng.results(now_ns=200).to_pylist()[0]
>>> r["kar"], r["launch_tax"], r["gpu_active_ratio"]
(1.0, 0.1111111111111111, 0.9)
"""

from __future__ import annotations

import base64
import itertools
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exporter.ranges import join_ranges, kernel_join_time
from exporter.schema import one_array
from stream_analytics.groups import group_reduce

MICRO_KERNEL_NS = 10_000
"""Kernels shorter than this (10 us) count as micro-kernels (launch-bound evidence)."""

Key = tuple[str, int, str]
"""(host, pid, model); pid -1 and model "" when unknown."""

KAR_SOURCES: dict[str, str] = {"ort": "ort_profiler", "instrument": "instrumented_iteration",
                               "roctx": "roctx", "kineto": "kineto"}
"""ITERATION_SPAN ``source`` -> ANALYTICS_RESULT ``kar_source`` (a bounded label
value): which iterations KAR and ``kernels_per_iteration`` count. Other span
sources give a null ``kar_source``."""

_DICT = pa.dictionary(pa.int32(), pa.string())
_HELD = pa.schema([
    pa.field("start_ns", pa.int64()), pa.field("end_ns", pa.int64()),
    pa.field("pid", pa.int64()), pa.field("model", _DICT),
    pa.field("kernel_family", _DICT), pa.field("launch_api_ns", pa.int64()),
    pa.field("launch_delay_ns", pa.int64()), pa.field("t_ns", pa.int64()),
    pa.field("arrived_ns", pa.int64()),
])
"""Columns of a held (not yet attributed) kernel: ``t_ns`` is the join time
(launch call start, else kernel start), ``arrived_ns`` the wall clock when the
engine received it; ``model`` and ``kernel_family`` stay dictionary-encoded
(no string per held kernel)."""


@dataclass
class PidJoin:
    """Online join state of one (host, pid): recent iteration spans and the
    kernels without an iteration that wait for one.

    ``s``/``e``/``it``/``mc``: int64 arrays, one entry per indexed span (start,
    end ns, iteration index, code into ``models``), sorted by start, at most
    ``Analytics.max_spans``; ``held``: the waiting kernels (:data:`_HELD`
    columns), at most ``Analytics.max_held`` rows; ``watermark``: the newest
    iteration span end (ns) seen for the pid: spans are what held kernels wait
    for, so only their progress makes a kernel late."""

    s: np.ndarray[Any, Any] = field(default_factory=lambda: np.empty(0, np.int64))
    e: np.ndarray[Any, Any] = field(default_factory=lambda: np.empty(0, np.int64))
    it: np.ndarray[Any, Any] = field(default_factory=lambda: np.empty(0, np.int64))
    mc: np.ndarray[Any, Any] = field(default_factory=lambda: np.empty(0, np.int64))
    models: list[str] = field(default_factory=list)
    held: pa.Table | None = None
    watermark: int = 0
    seen_ns: int = 0
    held_mins: deque[list[int]] | None = field(default=None, repr=False, compare=False)
    """``[rows, min t_ns, min arrived_ns]`` per part of ``held``, in order
    (None: not known, recomputed as one part by :meth:`held_min`)."""

    def hold(self, part: pa.Table, now: int) -> None:
        """Append ``part`` (:data:`_HELD` rows that arrived at ``now``) to ``held``."""
        if self.held is None or self.held.num_rows == 0:
            self.held, self.held_mins = part, None
            return
        if self.held_mins is not None:
            self.held_mins.append([part.num_rows, _min(part["t_ns"]), now])
        self.held = pa.concat_tables([self.held, part])

    def held_min(self) -> tuple[int, int]:
        """``(min t_ns, min arrived_ns)`` of the held kernels (some are held),
        from the minima per part: no pass over every held row per batch."""
        assert self.held is not None and self.held.num_rows
        mins = self.held_mins
        if mins is None or sum(m[0] for m in mins) != self.held.num_rows:
            mins = self.held_mins = deque([[self.held.num_rows, _min(self.held["t_ns"]),
                                            _min(self.held["arrived_ns"])]])
        return min(m[1] for m in mins), min(m[2] for m in mins)

    def released(self, rows: int, prefix: bool) -> None:
        """``rows`` held kernels left ``held`` (already the rest): its first
        ``rows`` when ``prefix``, else any (the minima are then recomputed)."""
        mins = self.held_mins
        if mins is None:
            return
        if not prefix or self.held is None:
            self.held_mins = None
            return
        while rows and mins:
            if mins[0][0] <= rows:
                rows -= mins.popleft()[0]
                continue
            first = mins[0]  # partly released: the minima of its remaining rows
            first[0] -= rows
            rest = self.held.slice(0, first[0])
            first[1], first[2] = _min(rest["t_ns"]), _min(rest["arrived_ns"])
            rows = 0

    def add_spans(self, s: list[int], e: list[int], it: list[int], models: list[str],
                  keep_after: int | None, max_spans: int) -> None:
        """Index spans (one list entry per span); spans ending before
        ``keep_after`` and all but the ``max_spans`` latest-starting go."""
        codes = []
        for m in models:
            if m not in self.models:
                self.models.append(m)
            codes.append(self.models.index(m))
        ss = np.concatenate([self.s, np.asarray(s, np.int64)])
        ee = np.concatenate([self.e, np.asarray(e, np.int64)])
        ii = np.concatenate([self.it, np.asarray(it, np.int64)])
        cc = np.concatenate([self.mc, np.asarray(codes, np.int64)])
        order = np.argsort(ss, kind="stable")
        keep = order if keep_after is None else order[ee[order] >= keep_after]
        keep = keep[-max_spans:]
        self.s, self.e, self.it, self.mc = ss[keep], ee[keep], ii[keep], cc[keep]
        self.watermark = max(self.watermark, int(ee.max(initial=0)))

    def single_model(self) -> str | None:
        """The model of every indexed span when they share one, else None."""
        used = np.unique(self.mc)
        return self.models[int(used[0])] if len(used) == 1 else None

    def to_dict(self) -> dict[str, Any]:
        return {"s": self.s.tolist(), "e": self.e.tolist(), "it": self.it.tolist(),
                "mc": self.mc.tolist(), "models": self.models, "watermark": self.watermark,
                "held": _ipc_b64(self.held) if self.held is not None else None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PidJoin:
        s_, e_, it_, mc_ = (np.asarray(d[k], np.int64) for k in ("s", "e", "it", "mc"))
        j = cls(s_, e_, it_, mc_, models=[str(m) for m in d["models"]],
                watermark=int(d["watermark"]), seen_ns=time.time_ns())
        j.held = _from_b64(d["held"]) if d.get("held") else None
        if j.held is not None and j.held.schema != _HELD:  # a checkpoint of plain strings
            j.held = j.held.cast(_HELD)
        return j


def _ipc_b64(t: pa.Table) -> str:
    """A table as base64 Arrow IPC (JSON checkpoints hold held kernels this way,
    not as one JSON object per kernel)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")


def _from_b64(text: str) -> pa.Table:
    with pa.ipc.open_stream(pa.py_buffer(base64.b64decode(text))) as r:
        return r.read_all()


@dataclass
class Rec:
    """Aggregate of one iteration (or one time bucket when ``iteration < 0``)."""

    iteration: int
    start_ns: int
    end_ns: int
    duration_ns: int  # iteration span duration; 0 for buckets
    kernels: int = 0
    kernel_ns: int = 0
    busy_ns: int = 0
    max_end: int = 0
    launch_ns: int = 0
    launch_known: bool = False
    micro: int = 0  # kernels shorter than MICRO_KERNEL_NS
    source: str = ""  # the iteration span's ``source`` (ort, instrument, roctx, kineto)

    def as_list(self) -> list[Any]:
        return [self.iteration, self.start_ns, self.end_ns, self.duration_ns, self.kernels,
                self.kernel_ns, self.busy_ns, self.max_end, self.launch_ns, self.launch_known,
                self.micro, self.source]


@dataclass
class KeyState:
    """Everything the engine remembers about one (host, pid, model)."""

    node_count: int | None = None
    pending: dict[int, Rec] = field(default_factory=dict)  # kernels seen, span not yet
    window: deque[Rec] = field(default_factory=deque)  # completed iterations and buckets
    done: dict[int, Rec] = field(default_factory=dict)  # the window's records by iteration
    kernel_spans_total: int = 0
    iterations_total: int = 0
    iteration_ns_total: int = 0  # with iterations_total: non-overlapping latency means
    family_spans: Counter[str] = field(default_factory=Counter)
    family_ns: Counter[str] = field(default_factory=Counter)
    dirty: bool = False
    seen_ns: int = 0  # wall time of the last input for this key (forgetting idle keys)


def _min(col: pa.ChunkedArray | pa.Array) -> int:
    """Smallest value of a non-empty int64 column."""
    return int(pc.min(col).as_py())


def _col(t: pa.Table, name: str, default: Any, n: int) -> pa.Array:
    """Column ``name`` of ``t`` as one plain array (a dictionary decoded), nulls
    as ``default`` (None: kept); a missing column is ``n`` times ``default``.
    A column without nulls is not copied (``fill_null`` copies it regardless)."""
    if name in t.column_names:
        c = one_array(t.column(name))
        if pa.types.is_dictionary(c.type):
            c = c.cast(c.type.value_type)
        return c.fill_null(default) if default is not None and c.null_count else c
    return pa.repeat(pa.scalar(default), n) if default is not None else pa.nulls(n)


def _dict_col(t: pa.Table, name: str, default: str, n: int) -> pa.Array:
    """String or dictionary column ``name`` as ``dictionary<int32, string>``,
    nulls (and a missing column) as ``default``. A dictionary column is kept
    as it is, its null rows given the index of ``default`` (appended to the
    dictionary when absent): no string per row (a GPU trace's ``model`` is
    null on every row; hashing 2M empty strings took 78 ms)."""
    if name in t.column_names:
        c = one_array(t.column(name))
        if pa.types.is_dictionary(c.type) and not c.dictionary.null_count:
            if c.null_count:
                d = c.dictionary.cast(pa.string())
                k = pc.index(d, default).as_py()
                if k < 0:
                    d, k = pa.concat_arrays([d, pa.array([default], pa.string())]), len(d)
                c = pa.DictionaryArray.from_arrays(c.indices.cast(pa.int32()).fill_null(k), d)
            return c if c.type == _DICT else c.cast(_DICT)
    return pc.dictionary_encode(_col(t, name, default, n).cast(pa.string())).cast(_DICT)


def _busy_union(
    start: np.ndarray[Any, Any], end: np.ndarray[Any, Any], carry: int
) -> tuple[int, int]:
    """Union length of intervals sorted by start, given a previous max end."""
    if len(start) == 0:
        return 0, carry
    m = np.maximum.accumulate(np.maximum(end, carry))
    prev = np.empty_like(m)
    prev[0] = carry
    prev[1:] = m[:-1]
    lo = np.maximum(start, prev)
    return int(np.clip(end - lo, 0, None).sum()), int(m[-1])


def _codes(t: pa.Table, name: str, default: str) -> tuple[np.ndarray[Any, Any], list[str]]:
    """Integer codes and their values for a string or dictionary column."""
    n = t.num_rows
    if name not in t.column_names:
        return np.zeros(n, np.int32), [default]
    c = one_array(t.column(name))
    if not pa.types.is_dictionary(c.type):
        c = pc.dictionary_encode(c.fill_null(default))
    elif c.null_count:
        c = pc.dictionary_encode(c.cast(c.type.value_type).fill_null(default))
    values = [default if v is None else str(v) for v in c.dictionary.to_pylist()]
    return c.indices.to_numpy(zero_copy_only=False), values


def _in_order(mcode: np.ndarray[Any, Any], pid: np.ndarray[Any, Any],
              bucket: np.ndarray[Any, Any], start: np.ndarray[Any, Any]) -> bool:
    """True when rows are already sorted by (model, pid, group, start)."""
    if len(start) < 2:
        return True
    if mcode.min() != mcode.max() or pid.min() != pid.max():
        return False
    same = bucket[1:] == bucket[:-1]
    return bool(np.all(bucket[1:] >= bucket[:-1])
                and np.all(start[1:][same] >= start[:-1][same]))


_SPAN = np.int64(1 << 40)  # ~18 minutes: the longest group the vectorised union handles


def _segmented_union(start: np.ndarray[Any, Any], end: np.ndarray[Any, Any],
                     idx: np.ndarray[Any, Any], counts: np.ndarray[Any, Any],
                     g_start: np.ndarray[Any, Any], carry: np.ndarray[Any, Any],
                     ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Per group: union length of its intervals (sorted by start) not already
    covered up to ``carry`` (a previous max end), and the new max end.

    A running maximum restarted at each group: values are taken relative to
    the group's first start and offset by ``group index * 2**40``, so one
    ``np.maximum.accumulate`` serves every group. Groups longer than 2**40 ns
    fall back to a per-group loop.
    """
    base = np.repeat(g_start, counts)
    rel_s, rel_e = start - base, end - base
    rel_c = np.maximum(carry - g_start, 0)
    if len(start) == 0 or rel_e.max(initial=0) >= _SPAN or rel_c.max(initial=0) >= _SPAN:
        busy = np.empty(len(idx), np.int64)
        new = np.empty(len(idx), np.int64)
        for j, (a, c) in enumerate(zip(idx, counts, strict=True)):
            busy[j], new[j] = _busy_union(start[a:a + c], end[a:a + c], int(carry[j]))
        return busy, new
    off = np.repeat(np.arange(len(idx), dtype=np.int64) * _SPAN, counts)
    e = rel_e.copy()
    e[idx] = np.maximum(e[idx], rel_c)
    m = np.maximum.accumulate(off + e) - off
    prev = np.empty_like(m)
    prev[1:] = m[:-1]
    prev[idx] = rel_c
    contrib = np.clip(rel_e - np.maximum(rel_s, prev), 0, None)
    busy = np.add.reduceat(contrib, idx)
    last = np.append(idx[1:], len(start)) - 1
    return busy, np.maximum(m[last] + g_start, carry)


SETTLE_ROWS = 1 << 16
"""Kernels per reduction when :meth:`Analytics.settle` resolves a held table."""


def _group_key(t: pa.Table, bucket_ns: int) -> tuple[np.ndarray[Any, Any], list[str],
                                                     np.ndarray[Any, Any], np.ndarray[Any, Any],
                                                     np.ndarray[Any, Any]]:
    """What :meth:`Analytics._reduce` groups and orders kernel rows by:
    ``(model codes, their values, pid, group, start_ns)``; the group is the
    iteration, or ``-1 - start_ns // bucket_ns`` (a time bucket) without one."""
    n = t.num_rows
    mcode, models = _codes(t, "model", "")
    pid = _col(t, "pid", -1, n).to_numpy()
    itn = _col(t, "iteration", -1, n).to_numpy()
    start = _col(t, "start_ns", 0, n).to_numpy()
    return mcode, models, pid, np.where(itn < 0, -1 - start // bucket_ns, itn), start


def in_pieces(t: pa.Table, rows: int, bucket_ns: int) -> Iterator[pa.Table]:
    """``t`` (kernel rows as :meth:`Analytics._reduce` takes them) in slices of
    at most ``rows``, in an order where every group ``_reduce`` forms (model,
    pid, iteration or time bucket of ``bucket_ns``) meets its kernels by
    nondecreasing start across slices: then the busy union a group carries
    from one slice to the next (``max_end``) is exact, and the records equal
    those of one ``_reduce`` of all of ``t``. Rows already sorted by start
    (a time-ordered trace) are sliced zero-copy; others are taken a slice at
    a time in ``_reduce``'s own order (model, pid, group, start), from ``t``'s
    columns combined once into one array each (one copy of ``t``, which
    replaces it here: a caller that lets go of ``t`` holds one table, not two).

    >>> t = pa.table({"pid": [1, 1, 1], "start_ns": [30, 10, 20], "end_ns": [31, 11, 21]})
    >>> [p["start_ns"].to_pylist() for p in in_pieces(t, 2, 10**9)]
    [[10, 20], [30]]
    """
    n = t.num_rows
    if n <= rows:
        yield t
        return
    start = _col(t, "start_ns", 0, n).to_numpy()
    if bool(np.all(start[1:] >= start[:-1])):
        del start
        for off in range(0, n, rows):
            yield t.slice(off, rows)
        return
    # each column as one array first: a take from a column of many chunks
    # (the held table grows a chunk per message) concatenates all of them
    # again for every slice (16 takes of 65,536 from 1M rows: 0.30 -> 0.10 s)
    t = pa.Table.from_arrays([one_array(c) for c in t.columns], schema=t.schema)
    mcode, _, pid, bucket, start = _group_key(t, bucket_ns)
    order = np.lexsort((start, bucket, pid, mcode))
    del mcode, pid, bucket, start
    for off in range(0, n, rows):
        yield t.take(pa.array(order[off:off + rows]))


def split_rows(t: pa.Table, go: np.ndarray[Any, Any]) -> tuple[pa.Table, pa.Table | None]:
    """``(rows of t where go, the other rows or None when there are none)``, each
    in ``t``'s order; ``go``: bool array of ``t.num_rows``.

    When ``go`` is a prefix (the usual case for held kernels, which leave in
    arrival order: the ``max_held`` cap and the wall-clock grace both take the
    oldest first) both parts are zero-copy slices, so resolving a batch does
    not copy the up to ``max_held`` rows still held; otherwise two filters.
    """
    n = len(go)
    k = int(np.argmin(go)) if n else 0  # the first False (0 when go[0] is False)
    if n == 0 or go[k]:  # every row goes
        return t, None
    if not go[k:].any():
        return t.slice(0, k), t.slice(k)
    return t.filter(pa.array(go)), t.filter(pa.array(~go))


class Analytics:
    """The online engine; ``window_s=None`` keeps everything (captures).

    ``sched_keys``: a watched process that has scheduler samples but no
    kernels or iterations (a discovered server) gets its own key ``(host,
    pid, "")``, so its SII is evaluated too; it gives way to a model key of the
    same pid when one appears. ``forget_s``: a key with no input for this many
    seconds (wall clock) is dropped after its last result, so exited
    processes leave no state behind (default ``2 * window_s``, at least 300 s;
    a watched process's scheduler samples keep its keys alive while it lives;
    never with ``window_s=None``).

    ``attribution_grace_s``: how long (data time, per (host, pid)) a kernel
    without an iteration waits for an iteration span of its pid to arrive
    (see :meth:`_hold`); 0 turns the online join off (such kernels go to
    time buckets at once). ``max_held`` kernels and ``max_spans`` indexed
    spans per (host, pid) bound its memory.
    """

    def __init__(self, window_s: float | None = 30.0, bucket_s: float = 1.0, *,
                 sched_keys: bool = False, forget_s: float | None = None,
                 attribution_grace_s: float = 5.0, max_held: int = 1_000_000,
                 max_spans: int = 100_000) -> None:
        self.window_s = window_s
        self.bucket_ns = int(bucket_s * 1e9)
        self.grace_ns = int(attribution_grace_s * 1e9)
        self.max_held = max_held
        self.max_spans = max_spans
        self.joins: dict[tuple[str, int], PidJoin] = {}  # (host, pid) -> online join
        self.sched_keys = sched_keys
        self.forget_s = forget_s if forget_s is not None else (
            max(300.0, 2 * window_s) if window_s is not None else None)
        self.keys: dict[Key, KeyState] = {}
        self.nodes: dict[tuple[str, str], int] = {}  # (host, model) -> node_count
        self.sched: dict[tuple[str, int], deque[tuple[int, int, int, int]]] = {}
        self.comms: dict[tuple[str, int], str] = {}  # (host, pid) -> process comm
        # (host, pid) -> device types of its kernel spans ("cpu", "gpu")
        self.devices: dict[tuple[str, int], set[str]] = {}
        # (host, pid) -> recent rocprofv3 --attach windows (start_ns, end_ns)
        self.attach: dict[tuple[str, int], deque[tuple[int, int]]] = {}
        self.drops: Counter[str] = Counter()

    # -- ingest --------------------------------------------------------------
    def ingest(self, signal: str, host: str, batch: pa.RecordBatch | pa.Table) -> None:
        """Fold one decoded batch in; unknown signals are ignored."""
        t = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        if t.num_rows == 0:
            return
        if signal == "kernel_span":
            self._devices(host, t)
            self._kernels(host, t)
        elif signal == "iteration_span":
            self._iterations(host, t)
        elif signal == "graph_info":
            self._graph(host, t)
        elif signal == "sched_sample":
            self._sched(host, t)
        elif signal == "gauge_sample":
            self._attach_windows(host, t)

    def _attach_windows(self, host: str, t: pa.Table) -> None:
        """Remember ``rocprofv3 --attach`` windows (``aaco.attach.window.duration``
        rows of the attach collector: ts = window end, value = seconds) per pid."""
        sel = t.filter(pc.equal(t.column("metric").cast(pa.string()),
                                "aaco.attach.window.duration"))
        for ts, v, attrs in zip(*(sel.column(c).to_pylist()
                                  for c in ("ts_ns", "value", "attributes")), strict=True):
            pid = dict(attrs or []).get("pid")
            if pid is None or not str(pid).isdigit():
                continue
            dq = self.attach.setdefault((host, int(pid)), deque(maxlen=256))
            dq.append((int(ts) - int(v * 1e9), int(ts)))
            for k, st in self.keys.items():
                if k[0] == host and k[1] == int(pid):
                    st.dirty = True

    def _state(self, key: Key) -> KeyState:
        st = self.keys.get(key)
        if st is None:
            st = self.keys[key] = KeyState()
            st.node_count = self.nodes.get((key[0], key[2]))
            if key[2] and self.sched_keys:  # a model key replaces the pid's sched-only key
                sk = (key[0], key[1], "")
                if sk in self.keys and not self.keys[sk].window and not self.keys[sk].pending:
                    del self.keys[sk]
        st.seen_ns = time.time_ns()
        return st

    def _graph(self, host: str, t: pa.Table) -> None:
        for model, n in zip(t.column("model").to_pylist(), t.column("node_count").to_pylist(),
                            strict=True):
            self.nodes[(host, str(model))] = int(n)
            for k, st in self.keys.items():
                if k[0] == host and k[2] == model:
                    st.node_count = int(n)

    def _devices(self, host: str, t: pa.Table) -> None:
        """Note the device types (``device_type``, null = ``"cpu"``) each pid's
        kernels ran on: one set update per (pid, device) of the batch."""
        dcode, devs = _codes(t, "device_type", "cpu")
        pid = _col(t, "pid", -1, t.num_rows).to_numpy()
        if len(devs) == 1 and pid.min() == pid.max():
            pairs: Any = [(pid[0], dcode[0])]
        else:
            pairs = np.unique(np.stack([pid, dcode.astype(np.int64)]), axis=1).T
        for p, d in pairs:
            self.devices.setdefault((host, int(p)), set()).add(devs[int(d)])

    def _kernels(self, host: str, t: pa.Table) -> None:
        """Fold a kernel batch in: kernels with an iteration (ORT, Kineto, roctx
        joined by the parser) or without a pid are reduced at once; the others
        wait for an iteration span of their pid (:meth:`_hold`)."""
        ready = self._hold(host, t) if self.grace_ns > 0 else [t]
        for part in ready:
            if part.num_rows:
                self._reduce(host, part)

    # -- online join of kernels to iteration spans ----------------------------
    def _hold(self, host: str, t: pa.Table) -> list[pa.Table]:
        """Split ``t``: rows with an iteration or no pid are returned as they
        are; rows with a pid and no iteration join their pid's held kernels,
        which are then resolved (:meth:`_resolve`). Returns the tables to
        reduce now. Columnar; Python loops over the batch's pids."""
        n = t.num_rows
        itn = _col(t, "iteration", -1, n).to_numpy()
        pid = _col(t, "pid", -1, n).to_numpy()
        wait = (itn < 0) & (pid >= 0)
        if not wait.any():
            return [t]
        out = [t.filter(pa.array(~wait))] if not wait.all() else []
        # only the columns a held kernel keeps, and no copy when all wait
        # (a GPU trace with no iteration spans: every batch)
        held = t.select([c for c in _HELD.names if c in t.column_names])
        if not wait.all():
            held = held.filter(pa.array(wait))
        m = held.num_rows
        now = time.time_ns()
        cols = pa.table({
            "start_ns": _col(held, "start_ns", 0, m), "end_ns": _col(held, "end_ns", 0, m),
            "pid": _col(held, "pid", -1, m), "model": _dict_col(held, "model", "", m),
            "kernel_family": _dict_col(held, "kernel_family", "other", m),
            "launch_api_ns": _col(held, "launch_api_ns", None, m).cast(pa.int64()),
            "launch_delay_ns": _col(held, "launch_delay_ns", None, m).cast(pa.int64()),
            "t_ns": kernel_join_time(held), "arrived_ns": np.full(m, now, np.int64),
        }, schema=_HELD)
        hp = pid[wait]
        pids = np.unique(hp).tolist()
        for p in pids:
            part = cols if len(pids) == 1 else cols.filter(pa.array(hp == p))
            j = self.joins.get((host, p))
            if j is None:
                j = self.joins[(host, p)] = PidJoin()
            j.seen_ns = now
            j.hold(part, now)
            out.extend(self._resolve(host, int(p), now))
        return out

    def _resolve(self, host: str, pid: int, now: int, force: bool = False) -> list[pa.Table]:
        """Resolve the held kernels of (``host``, ``pid``) that can be: a kernel
        whose join time (:func:`~exporter.ranges.kernel_join_time`) lies in an indexed span
        ``[start_ns, end_ns]`` takes its iteration and model; one that no
        span holds once it is older than the grace (join time more than
        ``attribution_grace_s`` before the end of the pid's newest iteration
        span, or received that long ago on the wall clock) or when ``force``
        goes to time buckets, with the model
        of the pid's spans when they all share one (else its own), and counts
        as ``unattributed_kernel`` (not a loss: it still counts to kernel
        totals, busy time and LTS, not to KAR). The rest stay held; beyond
        ``max_held`` the oldest are forced. Returns KERNEL_SPAN-like tables."""
        j = self.joins[(host, pid)]
        h = j.held
        if h is None or h.num_rows == 0:
            return []
        n = h.num_rows
        idx: np.ndarray[Any, Any] | None = None
        if len(j.s):
            idx = join_ranges(np.full(n, pid, np.int64), h["t_ns"].to_numpy(),
                              np.full(len(j.s), pid, np.int64), j.s, j.e)
            hit = idx >= 0
        else:  # no span indexed for the pid (yet): nothing can be attributed
            hit = np.zeros(n, bool)
        if force:
            late = np.ones(n, bool)
        else:
            # a column is compared row by row only when its minimum is late
            # (held kernels wait for minutes of spans: most calls find none)
            late = np.zeros(n, bool)
            for name, least, limit in zip(("t_ns", "arrived_ns"), j.held_min(),
                                          (j.watermark - self.grace_ns, now - self.grace_ns),
                                          strict=True):
                if least < limit:
                    late |= h[name].to_numpy() < limit
            if n > self.max_held:
                late[: n - self.max_held] = True  # held in arrival order: the oldest first
        go = hit | late
        if not go.any():
            return []
        out, j.held = split_rows(h, go)
        j.released(out.num_rows, prefix=not go[int(np.argmin(go)):].any())
        hit_out = hit[go]
        lost = int((~hit_out).sum())
        if lost:
            self.drops["unattributed_kernel"] += lost
        pos = np.maximum(idx[go], 0) if idx is not None else np.zeros(len(hit_out), np.int64)
        span_model = pa.DictionaryArray.from_arrays(
            pa.array(j.mc[pos].astype(np.int32) if len(j.mc) else np.zeros(len(pos), np.int32)),
            pa.array(j.models or [""])).cast(pa.string())
        single = j.single_model()
        fallback = out["model"] if single is None else pa.repeat(pa.scalar(single), len(pos))
        if not hit_out.any():  # none attributed (GPU traces): no string per kernel
            model = fallback
        else:
            model = pc.if_else(pa.array(hit_out), span_model, fallback.cast(pa.string()))
        iteration = pa.array(j.it[pos] if len(j.it) else np.zeros(len(pos), np.int64),
                             mask=~hit_out)
        return [out.drop_columns(["model", "t_ns", "arrived_ns"]).append_column(
            "model", model).append_column("iteration", iteration)]

    def settle(self) -> int:
        """Resolve every held kernel now (end of a bounded session, when every
        span has arrived): attributed where a span holds it, else to time
        buckets. Returns the number of kernels resolved.

        Up to ``max_held`` kernels per pid are reduced :data:`SETTLE_ROWS` at
        a time (:func:`in_pieces`), which gives the same records as one
        reduction of all of them while the reduction's temporaries stay the
        size of a piece, not of the held table. Held kernels out of start
        order are combined into one array per column first; the held chunks
        are let go as that copy replaces them, so one held table's worth is
        in memory at a time."""
        now, done = time.time_ns(), 0
        for host, pid in list(self.joins):
            parts = self._resolve(host, pid, now, force=True)
            while parts:
                part = parts.pop(0)
                done += part.num_rows
                pieces = in_pieces(part, SETTLE_ROWS, self.bucket_ns)
                del part  # the generator holds the only reference: its combined copy replaces it
                for piece in pieces:
                    self._reduce(host, piece)
        return done

    def held_kernels(self) -> int:
        """Kernels currently waiting for an iteration span."""
        return sum(j.held.num_rows for j in self.joins.values() if j.held is not None)

    def _reduce(self, host: str, t: pa.Table) -> None:
        """Reduce a kernel batch to per-(model, pid, iteration) aggregates.

        Fully vectorised: one lexsort (skipped when the batch is already in
        order), ``reduceat`` per statistic, and a segmented running maximum
        for the busy union; Python only touches one record per group.
        """
        n = t.num_rows
        mcode, models, pid, bucket, start = _group_key(t, self.bucket_ns)
        end = _col(t, "end_ns", 0, n).to_numpy()
        dur = end - start
        api = _col(t, "launch_api_ns", None, n)
        delay = _col(t, "launch_delay_ns", None, n)
        launch_known = pc.or_(pc.is_valid(api), pc.is_valid(delay)).to_numpy(zero_copy_only=False)
        zero = np.zeros(n, np.int64)
        # a kernel that starts before its launch call returns waited 0, not less:
        # negative delays (async launches, or files of different runs) count as 0
        launch = (pc.fill_null(api, 0).to_numpy() if api.null_count < n else zero) + (
            np.maximum(pc.fill_null(delay, 0).to_numpy(), 0) if delay.null_count < n else zero)
        self._family_totals(host, t, models, mcode, pid, dur)
        if not _in_order(mcode, pid, bucket, start):
            order = np.lexsort((start, bucket, pid, mcode))
            mcode, pid, bucket, start, end, dur = (x[order] for x in
                                                   (mcode, pid, bucket, start, end, dur))
            launch, launch_known = launch[order], launch_known[order]
        brk = np.flatnonzero((bucket[1:] != bucket[:-1]) | (pid[1:] != pid[:-1])
                             | (mcode[1:] != mcode[:-1])) + 1
        idx = np.concatenate([[0], brk])
        counts = np.diff(np.append(idx, n))
        g_start = start[idx]  # sorted by start within a group: the minimum
        g_end = np.maximum.reduceat(end, idx)
        g_kernel_ns = np.add.reduceat(dur, idx)
        g_micro = np.add.reduceat((dur < MICRO_KERNEL_NS).astype(np.int64), idx)
        g_launch = np.add.reduceat(launch, idx)
        g_launch_known = np.logical_or.reduceat(launch_known, idx)
        # Existing records (a group split across messages, or late kernels) carry
        # their running max end into the union.
        keys = [(host, int(p), models[int(m)]) for p, m in zip(pid[idx].tolist(),
                                                                 mcode[idx].tolist(), strict=True)]
        groups = bucket[idx].tolist()
        recs: list[Rec] = []
        carry = np.empty(len(idx), np.int64)
        for j, (key, grp) in enumerate(zip(keys, groups, strict=True)):
            st = self._state(key)
            rec = st.pending.get(grp) or st.done.get(grp)
            if rec is None:
                rec = Rec(grp, int(g_start[j]), int(g_end[j]), 0, max_end=int(g_start[j]))
                st.pending[grp] = rec
            recs.append(rec)
            carry[j] = rec.max_end
        busy, new_max = _segmented_union(start, end, idx, counts, g_start, carry)
        touched: set[Key] = set()
        for j, rec in enumerate(recs):
            rec.busy_ns += int(busy[j])
            rec.max_end = int(new_max[j])
            rec.kernels += int(counts[j])
            rec.kernel_ns += int(g_kernel_ns[j])
            rec.micro += int(g_micro[j])
            rec.start_ns = min(rec.start_ns, int(g_start[j]))
            rec.end_ns = max(rec.end_ns, int(g_end[j]))
            if g_launch_known[j]:
                rec.launch_known = True
                rec.launch_ns += int(g_launch[j])
            touched.add(keys[j])
        for key in touched:
            st = self.keys[key]
            st.dirty = True
            # Time buckets (no iteration span will come) are complete per batch.
            for gk in [g for g in st.pending if g < 0]:
                rec = st.pending.pop(gk)
                st.window.append(rec)
                st.done[gk] = rec
            self._evict(st)

    def _family_totals(self, host: str, t: pa.Table, models: list[str],
                       mcode: np.ndarray[Any, Any], pid: np.ndarray[Any, Any],
                       dur: np.ndarray[Any, Any]) -> None:
        """Cumulative spans and time per (model, pid, family): a bounded label set."""
        fcode, fams = _codes(t, "kernel_family", "other")
        agg = group_reduce(pa.table({"m": mcode, "p": pid, "f": fcode, "d": dur}),
                           ["m", "p", "f"], [("d", "sum"), ("d", "count")])
        for m, p, f, s, c in zip(*(agg.column(x).to_pylist() for x in
                                  ("m", "p", "f", "d_sum", "d_count")), strict=True):
            st = self._state((host, int(p), models[int(m)]))
            st.family_spans[fams[int(f)]] += int(c)
            st.family_ns[fams[int(f)]] += int(s)
            st.kernel_spans_total += int(c)

    def _iterations(self, host: str, t: pa.Table) -> None:
        """Fold iteration spans in (one Python step per span): each closes its
        key's record and is indexed for the online join of its pid's held
        kernels (:meth:`_resolve`)."""
        n = t.num_rows
        cols = [_col(t, c, d, n).to_pylist() for c, d in (
            ("model", ""), ("pid", -1), ("iteration", -1),
            ("start_ns", 0), ("end_ns", 0), ("duration_ns", 0), ("source", ""))]
        index: dict[int, tuple[list[int], list[int], list[int], list[str]]] = {}
        for model, pid, it, s, e, d, src in zip(*cols, strict=True):
            if e < s or d < 0 or it < 0:  # malformed (e.g. a buggy instrumented process)
                self.drops["bad_iteration_span"] += 1
                continue
            key: Key = (host, int(pid), str(model))
            st = self._state(key)
            rec = st.pending.pop(int(it), None) or Rec(int(it), int(s), int(e), 0, max_end=int(s))
            if int(it) in st.done:  # a duplicate span: count it once
                self.drops["duplicate_iteration_span"] += 1
                st.pending.pop(int(it), None)
                continue
            rec.start_ns, rec.end_ns, rec.duration_ns = int(s), int(e), int(d)
            rec.source = str(src)
            st.window.append(rec)
            st.done[int(it)] = rec
            st.iterations_total += 1
            st.iteration_ns_total += int(d)
            st.dirty = True
            if self.grace_ns > 0 and int(pid) >= 0:
                ix = index.setdefault(int(pid), ([], [], [], []))
                ix[0].append(int(s))
                ix[1].append(int(e))
                ix[2].append(int(it))
                ix[3].append(str(model))
        now = time.time_ns()
        for pid, (ss, ee, ii, mm) in index.items():
            j = self.joins.get((host, pid))
            if j is None:
                j = self.joins[(host, pid)] = PidJoin()
            j.seen_ns = now
            keep = (None if self.window_s is None else
                    max(j.watermark, max(ee)) - int(self.window_s * 1e9) - 2 * self.grace_ns)
            j.add_spans(ss, ee, ii, mm, keep, self.max_spans)
            for part in self._resolve(host, pid, now):
                self._reduce(host, part)
        for st in self.keys.values():
            if st.dirty:
                self._evict(st)

    def _sched(self, host: str, t: pa.Table) -> None:
        """Fold a SCHED_SAMPLE table: per pid and sample (``ts_ns``), the active
        rows' run-queue wait and wall time (:func:`~stream_analytics.sii.active_totals`)
        and the involuntary switches, from one group-by over the batch (not a
        filter per pid), plus the newest ``comm`` of its main thread. A batch
        of k samples (``run --publish-interval``) folds in as k batches of one:
        one entry per pid and sample, in ``ts_ns`` order."""
        if t.num_rows == 0:
            return
        now = time.time_ns()
        pid_col = t.column("pid")
        active = pc.greater(pc.add(t.column("run_ns"), t.column("runq_wait_ns")), 0)
        per = pa.table({"pid": pid_col, "ts": t.column("ts_ns"),
                        "wait": pc.if_else(active, t.column("runq_wait_ns"), None),
                        "wall": pc.if_else(active, t.column("interval_ns"), None),
                        "invol": t.column("involuntary_switches")})
        sums = group_reduce(per, ["pid", "ts"], [("wait", "sum"), ("wall", "sum"),
                                                 ("invol", "sum")]).to_pydict()
        totals: dict[int, list[tuple[int, int, int, int]]] = {}
        for p, ts, w, wl, i in zip(sums["pid"], sums["ts"], sums["wait_sum"], sums["wall_sum"],
                                   sums["invol_sum"], strict=True):
            totals.setdefault(p, []).append((int(ts), int(w or 0), int(wl or 0), int(i or 0)))
        comms: dict[int, str] = {}
        if "comm" in t.column_names:  # the newest wins: exec() renames a process
            main = t.filter(pc.equal(t.column("tid"), pid_col)).select(["pid", "comm"])
            for p, c in zip(main.column("pid").to_pylist(), main.column("comm").to_pylist(),
                            strict=True):
                if c:
                    comms[p] = c
        for p in pc.unique(pid_col).to_pylist():  # first-seen order, as the keys are made
            dq = self.sched.setdefault((host, int(p)), deque())
            entries = totals[p]
            dq.extend(sorted(entries) if len(entries) > 1 else entries)
            if p in comms:
                self.comms[(host, int(p))] = comms[p]
            mine = [st for k, st in self.keys.items() if k[0] == host and k[1] == p]
            if not mine and self.sched_keys:
                mine = [self._state((host, int(p), ""))]
            for st in mine:
                st.dirty = True
                st.seen_ns = now

    def _evict(self, st: KeyState) -> None:
        if self.window_s is None or not st.window:
            return
        # Records arrive close to time order: the newest end is near the tail.
        newest = max(r.end_ns for r in itertools.islice(reversed(st.window), 64))
        horizon = newest - int(self.window_s * 1e9)
        while st.window and st.window[0].end_ns < horizon:
            old = st.window.popleft()
            if st.done.get(old.iteration) is old:
                del st.done[old.iteration]
        for g in [g for g, r in st.pending.items() if r.end_ns < horizon]:
            self.drops["no_iteration_span"] += st.pending.pop(g).kernels

    # -- evaluate ------------------------------------------------------------
    def evaluate(self, key: Key) -> dict[str, Any]:
        """The window's metrics for ``key`` as an ANALYTICS_RESULT row dict."""
        st = self.keys[key]
        host, pid, model = key
        its = [r for r in st.window if r.iteration >= 0]
        recs = list(st.window)
        row: dict[str, Any] = {"host": host, "model": model or None,
                               "pid": pid if pid >= 0 else None,
                               "iterations": len(its), "graph_node_count": st.node_count,
                               "kernel_spans_total": st.kernel_spans_total,
                               "iterations_total": st.iterations_total,
                               "iteration_ns_total": st.iteration_ns_total}
        fams = sorted(st.family_spans)
        row["family_names"] = fams
        row["family_spans_total"] = [st.family_spans[f] for f in fams]
        row["family_time_ns_total"] = [st.family_ns[f] for f in fams]
        kcount = sum(r.kernels for r in recs)
        row["kernel_count"] = kcount
        row["micro_kernel_count"] = sum(r.micro for r in recs)
        row["comm"] = self.comms.get((host, pid))
        devs = self.devices.get((host, pid))
        row["device_type"] = None if not devs else "gpu" if "gpu" in devs else "cpu"
        if not recs:
            if self.window_s is not None:  # a sched-only key: SII over the window
                self._sii(row, host, pid, time.time_ns() - int(self.window_s * 1e9))
            return row
        w0 = min(r.start_ns for r in recs)
        w1 = max(r.end_ns for r in recs)
        row["window_start_ns"], row["window_end_ns"] = w0, w1
        kernel_ns = sum(r.kernel_ns for r in recs)
        busy = sum(r.busy_ns for r in recs)
        # Launch overhead: the launch API calls joined to their kernels, else an
        # iteration's wall time its kernels left idle; with neither (a GPU
        # kernel trace alone) it is unknown, not 0 -- no LTS is reported.
        overhead: int | None = None
        if any(r.launch_known for r in recs):
            overhead = sum(r.launch_ns for r in recs if r.launch_known)
        elif its:
            overhead = sum(max(0, r.duration_ns - r.busy_ns) for r in its)
        row["kernel_time_ns"], row["launch_overhead_ns"] = kernel_ns, overhead
        row["launch_tax"] = overhead / kernel_ns if kernel_ns and overhead is not None else None
        if its:
            busy = sum(r.busy_ns for r in its)
            wall = sum(r.duration_ns for r in its)
        else:
            wall = w1 - w0
        row["busy_ns"], row["wall_ns"] = busy, wall
        # Without any kernel span (an instrumented process publishes iterations
        # only) KAR and the active ratio are unknown, not 0.
        row["gpu_active_ratio"] = min(1.0, busy / wall) if wall > 0 and kcount else None
        if its and kcount:
            # dispatches per iteration, known without a graph (roctx, Kineto)
            row["kernels_per_iteration"] = sum(r.kernels for r in its) / len(its)
            src = Counter(r.source for r in its).most_common(1)[0][0]
            row["kar_source"] = KAR_SOURCES.get(src)
            if st.node_count:
                row["kar"] = row["kernels_per_iteration"] / st.node_count
        if its:
            lat = np.array([r.duration_ns for r in its], dtype=np.float64) / 1e9
            row["latency_mean_s"] = float(lat.mean())
            row["latency_p50_s"] = float(np.percentile(lat, 50))
            row["latency_p99_s"] = float(np.percentile(lat, 99))
            wins = self.attach.get((host, pid))
            if wins:  # the attach duty cycle's cost: latency inside vs outside windows
                starts = np.array([r.start_ns for r in its], dtype=np.int64)
                inside = np.zeros(len(its), dtype=bool)
                for a, b in wins:
                    inside |= (starts >= a) & (starts <= b)
                if inside.any():
                    row["latency_attached_mean_s"] = float(lat[inside].mean())
                if (~inside).any():
                    row["latency_detached_mean_s"] = float(lat[~inside].mean())
        self._sii(row, host, pid, w0 if self.window_s is not None else 0)
        return row

    def _sii(self, row: dict[str, Any], host: str, pid: int, lo: int) -> None:
        """Run-queue wait, thread wall time and SII of the samples since ``lo``."""
        samples = self.sched.get((host, pid))
        if samples:
            sel = [(w, t, v) for ts, w, t, v in samples if ts >= lo]
            wait, wall = sum(s[0] for s in sel), sum(s[1] for s in sel)
            row["runq_wait_ns"], row["thread_wall_ns"] = wait, wall
            row["involuntary_switches"] = sum(s[2] for s in sel)
            row["sii"] = wait / wall if wall else None

    def results(self, now_ns: int | None = None, only_dirty: bool = False) -> pa.Table:
        """ANALYTICS_RESULT rows for every key (or only those changed)."""
        from exporter.schema import ANALYTICS_RESULT

        now = now_ns if now_ns is not None else time.time_ns()
        wall = time.time_ns()
        for host, pid in list(self.joins):  # held kernels past the wall-clock grace
            for part in self._resolve(host, pid, wall):
                self._reduce(host, part)
        rows = []
        for key, st in self.keys.items():
            if only_dirty and not st.dirty:
                continue
            st.dirty = False
            row = self.evaluate(key)
            row["ts_ns"] = now
            rows.append(row)
        self._trim_sched()
        self._forget(now)
        return pa.Table.from_pylist(rows, schema=ANALYTICS_RESULT)

    def _forget(self, now: int) -> None:
        """Drop keys, scheduler samples, comms and device types idle for
        ``forget_s`` (exited processes); their Prometheus series then go after
        the sink's grace."""
        if self.forget_s is None:
            return
        horizon = time.time_ns() - int(self.forget_s * 1e9)
        for k in [k for k, st in self.keys.items() if not st.dirty and st.seen_ns < horizon]:
            del self.keys[k]
        for hp_ in [hp_ for hp_, j in self.joins.items()
                    if j.held is None and j.seen_ns < horizon]:
            del self.joins[hp_]
        live = {(k[0], k[1]) for k in self.keys}
        for hp in [hp for hp, dq in self.sched.items() if hp not in live
                   and (not dq or dq[-1][0] < horizon)]:
            del self.sched[hp]
            self.comms.pop(hp, None)
        for hp in [hp for hp in self.devices if hp not in live and hp not in self.joins]:
            del self.devices[hp]

    def _trim_sched(self) -> None:
        if self.window_s is None:
            return
        horizon = time.time_ns() - int(2 * self.window_s * 1e9)
        for dq in self.sched.values():
            while dq and dq[0][0] < horizon:
                dq.popleft()

    # -- checkpoint ----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-able state for checkpointing (see :meth:`from_dict`)."""
        return {
            "window_s": self.window_s,
            "bucket_ns": self.bucket_ns,
            "nodes": [[h, m, n] for (h, m), n in self.nodes.items()],
            "sched": [[h, p, list(map(list, dq))] for (h, p), dq in self.sched.items()],
            "comms": [[h, p, c] for (h, p), c in self.comms.items()],
            "devices": [[h, p, sorted(d)] for (h, p), d in self.devices.items()],
            "attach": [[h, p, list(map(list, dq))] for (h, p), dq in self.attach.items()],
            "sched_keys": self.sched_keys,
            "forget_s": self.forget_s,
            "drops": dict(self.drops),
            "attribution_grace_s": self.grace_ns / 1e9,
            "max_held": self.max_held,
            "max_spans": self.max_spans,
            "joins": [[h, p, j.to_dict()] for (h, p), j in self.joins.items()],
            "keys": [
                {
                    "key": list(k),
                    "node_count": st.node_count,
                    "pending": [r.as_list() for r in st.pending.values()],
                    "window": [r.as_list() for r in st.window],
                    "kernel_spans_total": st.kernel_spans_total,
                    "iterations_total": st.iterations_total,
                    "iteration_ns_total": st.iteration_ns_total,
                    "family_spans": dict(st.family_spans),
                    "family_ns": dict(st.family_ns),
                    "seen_ns": st.seen_ns,
                }
                for k, st in self.keys.items()
            ],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Analytics:
        eng = cls(window_s=d["window_s"], sched_keys=bool(d.get("sched_keys", False)),
                  forget_s=d.get("forget_s"),
                  attribution_grace_s=float(d.get("attribution_grace_s", 5.0)),
                  max_held=int(d.get("max_held", 1_000_000)),
                  max_spans=int(d.get("max_spans", 100_000)))
        eng.joins = {(str(h), int(p)): PidJoin.from_dict(j) for h, p, j in d.get("joins", [])}
        eng.bucket_ns = int(d["bucket_ns"])
        eng.comms = {(h, int(p)): str(c) for h, p, c in d.get("comms", [])}
        eng.devices = {(h, int(p)): set(v) for h, p, v in d.get("devices", [])}
        eng.attach = {(h, int(p)): deque(((int(a), int(b)) for a, b in v), maxlen=256)
                      for h, p, v in d.get("attach", [])}
        eng.nodes = {(h, m): int(n) for h, m, n in d["nodes"]}
        eng.sched = {(h, int(p)): deque(tuple(x) for x in v) for h, p, v in d["sched"]}
        eng.drops = Counter(d["drops"])
        for ks in d["keys"]:
            st = KeyState(node_count=ks["node_count"])
            st.pending = {int(r[0]): Rec(*r) for r in ks["pending"]}
            st.window = deque(Rec(*r) for r in ks["window"])
            st.done = {r.iteration: r for r in st.window}
            st.kernel_spans_total = int(ks["kernel_spans_total"])
            st.iterations_total = int(ks["iterations_total"])
            st.iteration_ns_total = int(ks.get("iteration_ns_total", 0))
            st.family_spans = Counter(ks["family_spans"])
            st.family_ns = Counter(ks["family_ns"])
            st.seen_ns = int(ks.get("seen_ns", 0)) or time.time_ns()
            h, p, m = ks["key"]
            eng.keys[(str(h), int(p), str(m))] = st
        return eng
