"""Capture sink: reads a session's messages from the bus, writes the bundle.

Bundle layout (one directory per session)::

    session.json                     id, host, command line, start/end, versions
    env.json                         platform, CPU, Python, library versions
    model/model_meta.json            name, path, sha256, node counts, op histogram
    model/graph_nodes.parquet        one row per ONNX node
    model/graph_edges.parquet        producer -> consumer per tensor
    profiler/kernels.parquet         KERNEL_SPAN rows, one per kernel span
    profiler/ort_profile_*.json      ONNX Runtime's own profiles (ORT captures)
    telemetry/system_events.parquet  SCHED_SAMPLE rows
    telemetry/gauges.parquet         GAUGE_SAMPLE rows (when a GPU source exists)
    metrics/inference_iters.parquet  ITERATION_SPAN rows
    metrics/analytics.parquet        every ANALYTICS_RESULT row published
    metrics/inference_summary.json   iterations, latency stats (ms), throughput
    metrics/derived_metrics.json     KAR, LTS, SII, active ratio, latency (ms)
    metrics/bottleneck.json          class, confidence, ranked evidence, recommendation
    metrics/drift_status.parquet     DRIFT_STATUS rows; bottleneck.parquet: BOTTLENECK rows
    profiler/kernel_stats.parquet    per kernel name: calls, total/avg/min/max ns
    attribution/op_to_kernel_map.parquet  ONNX node -> kernel events, method, score
    attribution/kernel_groups.parquet     kernels per node / op type / family
    runtime/ort_config.json          providers, session options, node -> EP, PFI
                                     (ORT captures; docs/attribution.md)
    roofline.json                    kernels on the roofline, when counters exist
                                     (exporter/roofline.py)
    trace.pftrace                    Perfetto trace (threads, iterations, GPU queues,
                                     counters, launch->kernel flows); only with the
                                     ``perfetto`` extra (else a one-line warning)
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import weakref
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from exporter import schema
from exporter.bus import TRANSIENT, Bus
from exporter.extras import MissingExtra, require

log = logging.getLogger("aaco.bundle")

FILES = {
    "kernel_span": "profiler/kernels.parquet",
    "iteration_span": "metrics/inference_iters.parquet",
    "sched_sample": "telemetry/system_events.parquet",
    "gauge_sample": "telemetry/gauges.parquet",
    "analytics_result": "metrics/analytics.parquet",
    "graph_info": "model/graph_info.parquet",
    "drift_status": "metrics/drift_status.parquet",
    "bottleneck": "metrics/bottleneck.parquet",
    "generate_span": "llm/generate_spans.parquet",
}
"""Bundle path of each signal's Parquet file. ``gauge_sample`` and
``generate_span`` are written only when rows arrived."""


SPOOLED = frozenset({"kernel_span"})
"""Signals that grow with the input: written to Parquet as they arrive, never held."""
ROW_GROUP_ROWS = 65_536
"""Rows buffered per Parquet row group of a spooled signal."""
SPOOL_PENDING = 2
"""Row groups of a spooled signal waiting for its writer thread, at most."""
DELTA_COLUMNS = {"kernel_span": ("start_ns", "end_ns", "correlation_id", "dispatch_id")}
"""Columns of a spooled signal written ``DELTA_BINARY_PACKED`` (no dictionary):
timestamps and ids that grow row by row, where a dictionary only fills up
and falls back to plain values. The other columns keep dictionary encoding."""
STATS_COLUMNS = {"kernel_span": ("start_ns", "end_ns", "pid", "tid", "agent_id", "queue_id",
                                 "correlation_id", "dispatch_id", "iteration")}
"""Columns of a spooled signal whose row groups get min/max statistics (the
times and ids a reader prunes row groups by; other signals: every column).
Not the dictionary-encoded strings: their min and max cost the writer a
third of its CPU (2M kernel rows: 0.29 -> 0.21 s, ``benchmarks/README.md``)."""


class _Spool:
    """One spooled signal: batches buffered up to :data:`ROW_GROUP_ROWS` rows, then
    written as a row group of ``path`` (``pyarrow.parquet.ParquetWriter``, zstd;
    the signal's :data:`DELTA_COLUMNS` delta-encoded, statistics for its
    :data:`STATS_COLUMNS`; the dictionaries of a row
    group's batches unified first, so that its dictionary columns are written
    as one dictionary page and indices).

    Every row group but the last has exactly :data:`ROW_GROUP_ROWS` rows (the
    batch that crosses the boundary is split, without a copy): the trace
    reads them back as whole chunks of
    :data:`exporter.sinks.perfetto_trace.CHUNK_ROWS`. Row groups of 66,000
    rows (three 22,000-row bus messages) had made it encode a chunk of 65,536
    and one of 464 rows from each.

    The row groups are encoded and written in a worker thread, one at a time
    and in order (Parquet encoding and zstd release the GIL, so the sink and
    the analytics consumer go on reading the bus meanwhile); at most
    :data:`SPOOL_PENDING` row groups wait for it, so memory stays bounded. An
    error of a write is raised by the next :meth:`add` or by :meth:`close`."""

    def __init__(self, path: Path, schema: pa.Schema, signal: str = "") -> None:
        self.path = path
        self.schema = schema
        self.signal = signal
        self.buf: list[pa.RecordBatch] = []
        self.buffered = 0
        self.rows = 0
        self.writer: pq.ParquetWriter | None = None
        self.closed = False
        self._pool = ThreadPoolExecutor(1, "bundle-spool")
        self._writes: deque[Future[None]] = deque()

    def add(self, batch: pa.RecordBatch) -> None:
        self.buf.append(batch)
        self.buffered += batch.num_rows
        self.rows += batch.num_rows
        while self.buffered >= ROW_GROUP_ROWS:
            self._write(ROW_GROUP_ROWS)

    def _write_table(self, table: pa.Table) -> None:
        if self.writer is None:
            delta = [c for c in DELTA_COLUMNS.get(self.signal, ()) if c in self.schema.names]
            stats = STATS_COLUMNS.get(self.signal)
            self.writer = pq.ParquetWriter(
                self.path, self.schema, compression="zstd",
                use_dictionary=[c for c in self.schema.names if c not in delta],
                column_encoding=dict.fromkeys(delta, "DELTA_BINARY_PACKED"),
                write_statistics=True if stats is None else
                [c for c in stats if c in self.schema.names])
        # one dictionary per column and row group: batches decoded from separate
        # bus messages each bring their own, and Parquet's writer spells out every
        # row's value when a column chunk's dictionaries differ (a real trace's
        # 400-character kernel names, row after row)
        self.writer.write_table(table.unify_dictionaries())

    def _write(self, rows: int | None = None) -> None:
        """Hand the first ``rows`` buffered rows (all: None) to the writer
        thread as one row group; the rest (a slice, no copy) stays buffered."""
        table = pa.Table.from_batches(self.buf, schema=self.schema)
        if rows is not None and rows < table.num_rows:
            rest = table.slice(rows)
            table = table.slice(0, rows)
            self.buf, self.buffered = rest.to_batches(), rest.num_rows
        else:
            self.buf, self.buffered = [], 0
        self._writes.append(self._pool.submit(self._write_table, table))
        while self._writes and (len(self._writes) > SPOOL_PENDING or self._writes[0].done()):
            self._writes.popleft().result()

    def stop(self) -> None:
        """Wait for the writes given to the writer thread and end it (their
        errors are not raised: the spool is being thrown away)."""
        self._pool.shutdown(wait=True)
        self._writes.clear()

    def close(self) -> Path:
        """Write what is buffered and close the file (an empty file when no rows)."""
        if not self.closed:
            if self.buf or (self.writer is None and not self._writes):
                self._write()
            while self._writes:
                self._writes.popleft().result()
            self._pool.shutdown()
            assert self.writer is not None
            self.writer.close()
            self.closed = True
        return self.path


class BundleSink:
    """Collects every batch of one session from an ephemeral JetStream consumer.

    Signals in :data:`SPOOLED` (kernel spans) go straight to Parquet files in
    ``spool_dir`` (default: a new temporary directory, removed by
    :meth:`discard`), so memory does not grow with them; the others are kept
    in memory (they grow with iterations and time, not with kernels).
    ``take_in_thread`` decodes each fetched batch of messages in a worker
    thread (``asyncio.to_thread``), so the event loop goes on reading the
    connection meanwhile (a session's analytics consumer shares it: a loop
    busy decoding while the server pushes the consumer's fetch overflows the
    server's per-connection buffer, a "slow consumer" it disconnects).
    ``fetch_batch``: messages asked for per fetch. ``shared``: messages
    decoded once with the session's other reader (:class:`schema.SharedDecode`).
    """

    def __init__(self, bus: Bus, session: str | None, spool_dir: Path | None = None,
                 take_in_thread: bool = False, fetch_batch: int = 1024,
                 shared: schema.SharedDecode | None = None) -> None:
        self.bus = bus
        self._shared = None if shared is None else shared.reader()
        self.take_in_thread = take_in_thread
        self.fetch_batch = fetch_batch
        self.session = session
        self.batches: dict[str, list[pa.RecordBatch]] = defaultdict(list)
        self.drops: Counter[str] = Counter()
        self.bus_errors = 0  # transient fetch errors (nothing lost: fetched again)
        self._sub: Any = None
        self._spool_dir = spool_dir
        self._own_dir: str | None = None
        self._spools: dict[str, _Spool] = {}
        self.rows: Counter[str] = Counter()
        self._last_seq = 0

    def _spool(self, signal: str) -> _Spool:
        if signal not in self._spools:
            if self._spool_dir is None:
                self._own_dir = tempfile.mkdtemp(prefix="aaco-spool-")
                self._spool_dir = Path(self._own_dir)
                weakref.finalize(self, shutil.rmtree, self._own_dir, True)
            self._spool_dir.mkdir(parents=True, exist_ok=True)
            path = self._spool_dir / f"{signal}.parquet"
            self._spools[signal] = _Spool(path, schema.SCHEMAS[signal], signal)
        return self._spools[signal]

    async def start(self) -> None:
        """Subscribe before the collectors start (deliver policy NEW)."""
        cfg = ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.NEW,
                             inactive_threshold=300)
        self._sub = await self.bus.js.pull_subscribe(
            f"{schema.SUBJECT_PREFIX}.>", durable=None, stream=self.bus.cfg.stream, config=cfg)

    async def step(self, timeout: float = 0.2) -> int:
        """Fetch up to :attr:`fetch_batch` messages and take them in
        (:attr:`take_in_thread`: in a worker thread); returns how many were fetched."""
        try:
            msgs = await self._sub.fetch(self.fetch_batch, timeout=timeout)
        except (TimeoutError, NatsTimeout):
            return 0
        except TRANSIENT as e:  # connection lost mid-request: fetched again next step
            self.bus_errors += 1
            log.warning("bundle sink fetch failed, retrying: %s: %s", type(e).__name__, e)
            await asyncio.sleep(0.1)
            return 0
        if self.take_in_thread and msgs:
            await asyncio.to_thread(self._take, msgs)
        else:
            self._take(msgs)
        return len(msgs)

    def _take(self, msgs: list[Any]) -> None:
        """Decode fetched messages into the spools and the held batches."""
        for m in msgs:
            seq = m.metadata.sequence.stream
            if self._last_seq and seq > self._last_seq + 1:
                # deleted by the stream's limits before this sink read them
                self.drops["stream_gap"] += seq - self._last_seq - 1
            self._last_seq = max(self._last_seq, seq)
            hdrs = m.headers or {}
            if hdrs.get(schema.H_SCHEMA, "").startswith("otlp."):
                continue  # the OTLP copy of data this sink already has
            if self.session and hdrs.get(schema.H_SESSION) != schema.sanitize_token(self.session):
                continue
            try:
                signal, _, _, batch = (
                    schema.decode(m.data, hdrs) if self._shared is None
                    else self._shared(seq, m.data, hdrs))
            except schema.SchemaError as e:
                self.drops[e.reason] += 1
                continue
            self.rows[signal] += batch.num_rows
            if signal in SPOOLED:
                self._spool(signal).add(batch)
            else:
                self.batches[signal].append(batch)

    async def drain(self, caught_up: bool = False) -> None:
        """Read until the consumer has nothing pending (a busy server's late
        answer to the pending count is asked again, up to 5 times in a row):
        after an empty fetch (0.2 s) with nothing pending, or, with
        ``caught_up`` (the publisher has finished: a session's drain), as
        soon as nothing is pending and the last message the server delivered
        has been read, without waiting for an empty fetch."""
        late = 0
        n: int | None = None  # messages the last fetch returned; None: none yet
        while True:
            if n is None and not caught_up:
                n = await self.step()
                continue
            try:
                info = await self._sub.consumer_info()
            except TRANSIENT:  # a busy server's late answer, or a dropped connection
                late += 1
                if late >= 5:
                    raise
                continue
            late = 0
            read_all = int(info.delivered.stream_seq or 0) <= self._last_seq
            if info.num_pending == 0 and (n == 0 or (caught_up and read_all)):
                return
            n = await self.step()

    def table(self, signal: str) -> pa.Table:
        """Everything received for ``signal`` (an empty table of its schema if none).

        For a spooled signal this reads its whole Parquet file: use
        :meth:`iter_batches` where the input may be large."""
        if signal in SPOOLED:
            return pa.Table.from_batches(list(self.iter_batches(signal)),
                                         schema=schema.SCHEMAS[signal])
        return pa.Table.from_batches(self.batches.get(signal) or [], schema=schema.SCHEMAS[signal])

    def iter_batches(self, signal: str, batch_rows: int = ROW_GROUP_ROWS,
                     columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        """``signal``'s batches in arrival order, at most ``batch_rows`` rows each
        (a spooled signal is read back from its Parquet file); ``columns``:
        only these, in this order (None: all)."""
        if signal not in SPOOLED:
            t = self.table(signal)
            yield from (t if columns is None else t.select(list(columns))).to_batches(
                max_chunksize=batch_rows)
            return
        pf = pq.ParquetFile(self._spool(signal).close())
        cols = None if columns is None else list(columns)
        # row group by row group: ParquetFile.iter_batches keeps memory that
        # grows with the file (about 30 MB per million kernel rows, pyarrow 26)
        for i in range(pf.metadata.num_row_groups):
            yield from pf.read_row_group(i, columns=cols).to_batches(max_chunksize=batch_rows)

    def write(self, out: Path, only: Collection[str] | None = None) -> dict[str, int]:
        """Write every collected signal's Parquet file (``only``: these
        signals); returns row counts.

        A spooled signal's file is moved into ``out`` (and read from there
        afterwards)."""
        counts: dict[str, int] = {}
        for signal, rel in FILES.items():
            if only is not None and signal not in only:
                continue
            path = out / rel
            if signal in SPOOLED:
                path.parent.mkdir(parents=True, exist_ok=True)
                sp = self._spool(signal)
                shutil.move(sp.close(), path)
                sp.path = path
                counts[signal] = sp.rows
                continue
            t = self.table(signal)
            if signal in ("gauge_sample", "generate_span") and t.num_rows == 0:
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(t, path, compression="zstd")
            counts[signal] = t.num_rows
        return counts

    def discard(self) -> None:
        """Remove the spool directory this sink made (if any), after the spools'
        writer threads have finished what they were given."""
        for sp in self._spools.values():
            sp.stop()
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)
            self._own_dir = None


def write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def finish(out: Path, sink: BundleSink, key_row: dict[str, Any] | None,
           hip_api: pa.Table | None = None, timer: Callable[[str], Any] | None = None,
           progress: Callable[[int], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """Write the parts every bundle shares; returns the ``bottleneck.json`` dict.

    ``key_row`` is the session's final ANALYTICS_RESULT row (the key whose
    verdict goes into ``metrics/bottleneck.json``); ``hip_api`` the HIP API
    calls for the trace's API slices and launch flows
    (:func:`collectors.rocprof.replay.hip_api_table`). The trace and the
    kernel statistics are :func:`write_kernel_outputs`; ``timer(phase)``
    (e.g. :meth:`exporter.phases.Phases.time`) times the ``bundle`` and
    ``trace`` phases; ``progress(rows)`` is called as the trace's kernel
    rows are written.
    """
    write_kernel_outputs(out, sink, lambda: sink.table("analytics_result"), hip_api, timer,
                         progress)
    return finish_verdict(out, sink, key_row)


def _phase(timer: Callable[[str], Any] | None, name: str) -> Any:
    from contextlib import nullcontext

    return timer(name) if timer is not None else nullcontext()


TRACE_MODULES = ("exporter.sinks.perfetto_trace", "stream_analytics.kernel_stats",
                 "pyarrow.acero")
"""What :func:`write_kernel_outputs` imports: perfetto's and OpenTelemetry's
protos (about 50 ms on the 2-core VM) and Arrow's query engine (its
``group_by``)."""


def preimport_trace() -> None:
    """Import :data:`TRACE_MODULES` now, e.g. in a worker thread while the
    last messages are read, so that the trace does not begin by importing
    them. One that cannot be imported (the ``perfetto`` extra missing) is
    left for :func:`write_kernel_outputs` to report."""
    import contextlib
    import importlib

    for m in TRACE_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(m)


def write_kernel_outputs(out: Path, sink: BundleSink,
                         analytics: Callable[[], pa.Table | None],
                         hip_api: pa.Table | None = None,
                         timer: Callable[[str], Any] | None = None,
                         progress: Callable[[int], None] | None = None) -> None:
    """``trace.pftrace`` and ``profiler/kernel_stats.parquet``.

    Kernel spans are read back once, in batches, never as one table (in a
    worker thread, two batches ahead; only the columns the trace and the
    statistics read): each batch goes to the trace and to
    the kernel statistics (its
    :func:`~stream_analytics.kernel_stats.kernel_stats`, merged when all
    are read). ``analytics()`` returns the ANALYTICS_RESULT rows for the
    trace's counters; it is called once the kernel slices are written, so a
    caller may still be computing them (:meth:`exporter.session.Session.write_trace_bundle`).
    Without the ``perfetto`` extra only the statistics are written (logged).
    """
    from exporter.prefetch import prefetch
    from stream_analytics.kernel_stats import kernel_stats, merge_stats

    stats: list[pa.Table] = []  # kernel_stats of each batch, merged at the end
    missing: MissingExtra | None = None
    try:  # the perfetto extra (perfetto, opentelemetry-proto); without it no trace
        for mod in ("perfetto.protos.perfetto.trace.perfetto_trace_pb2",
                    "opentelemetry.proto.trace.v1.trace_pb2"):
            require(mod, "perfetto", "trace.pftrace")
    except MissingExtra as e:
        missing = e
    columns: tuple[str, ...] = ("kernel_name", "duration_ns")  # the statistics'
    if missing is None:
        from exporter.sinks.perfetto_trace import KERNEL_COLUMNS

        columns = (*KERNEL_COLUMNS, *(c for c in columns if c not in KERNEL_COLUMNS))

    def kernels() -> Iterator[pa.RecordBatch]:
        """The kernel spans, read back once for both the trace and the stats
        (only the columns they read)."""
        for b in sink.iter_batches("kernel_span", columns=columns):
            stats.append(kernel_stats(pa.Table.from_batches([b])))
            yield b

    # read and counted in a worker thread (Parquet decoding and the group-by
    # release the GIL) while the trace encodes the batches before
    batches = prefetch(kernels(), depth=2)
    if missing is not None:
        log.warning("%s; bundle %s written without it", missing, out)
    else:
        from exporter.sinks.perfetto_trace import write_trace

        with _phase(timer, "trace"):
            write_trace(out / "trace.pftrace", batches,
                        sink.table("iteration_span"), sched=sink.table("sched_sample"),
                        gauges=sink.table("gauge_sample"), analytics=analytics,
                        hip_api=hip_api, progress=progress)
    with _phase(timer, "bundle"):
        for _ in batches:  # what the trace did not read (none, or all without a trace)
            pass
        pq.write_table(merge_stats(stats), out / "profiler/kernel_stats.parquet")


def finish_verdict(out: Path, sink: BundleSink, key_row: dict[str, Any] | None
                   ) -> dict[str, Any]:
    """``metrics/bottleneck.json`` (the verdict of ``key_row``'s key, the
    session's final ANALYTICS_RESULT row) and, for generate spans of
    processes the capture did not start, the ``llm/`` tables; returns the
    ``bottleneck.json`` dict."""
    verdict: dict[str, Any] = {"class": None, "confidence": None}
    if key_row is not None:
        rows = [r for r in sink.table("bottleneck").to_pylist()
                if r["host"] == key_row["host"] and r["model"] == key_row["model"]
                and r["pid"] == key_row["pid"]]
        if rows:
            r = rows[-1]
            verdict = {"class": r["label"], "confidence": r["confidence"],
                       "scores": dict(zip(r["classes"], r["scores"], strict=True)),
                       "evidence": json.loads(r["evidence_json"]),
                       "recommendation": r["recommendation"],
                       "thresholds": "stream_analytics/thresholds.py"}
    write_json(out / "metrics/bottleneck.json", verdict)
    if sink.rows["generate_span"] and not (out / "llm" / "raw").exists():
        # generate calls of instrumented processes the capture did not start:
        # the llm/ tables from their bus rows (``capture -- CMD`` writes them
        # from the spans its child saved, exporter.llm_bundle.write_saved)
        from exporter.llm_bundle import records_from_table, write_llm

        write_llm(out, records_from_table(sink.table("generate_span")))
    return verdict


def env_info() -> dict[str, Any]:
    """``env.json``: platform, kernel, Python, CPU count and library versions."""
    from importlib.metadata import PackageNotFoundError, version

    from exporter.hostinfo import host_details

    libs: dict[str, str | None] = {}
    for lib in ("onnxruntime", "onnx", "pyarrow", "nats-py", "prometheus-client", "numpy"):
        try:
            libs[lib] = version(lib)
        except PackageNotFoundError:
            libs[lib] = None
    return {
        "platform": platform.platform(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
        "processor": platform.processor(),
        "libraries": libs,
        **host_details(),  # kernel, CPU, ROCm, driver, GPUs (exporter/hostinfo.py)
    }

def derived_metrics(row: dict[str, Any]) -> dict[str, Any]:
    """``metrics/derived_metrics.json`` from the session's analytics result."""

    def ms(v: float | None) -> float | None:
        return None if v is None else v * 1e3

    return {
        "graph_node_count": row.get("graph_node_count"),
        "kernel_count": row.get("kernel_count"),
        "iterations": row.get("iterations"),
        "kar": row.get("kar"),
        "kar_source": row.get("kar_source"),
        "kernels_per_iteration": row.get("kernels_per_iteration"),
        "launch_tax": row.get("launch_tax"),
        "launch_overhead_ns": row.get("launch_overhead_ns"),
        "kernel_time_ns": row.get("kernel_time_ns"),
        "sii": row.get("sii"),
        "runq_wait_ns": row.get("runq_wait_ns"),
        "thread_wall_ns": row.get("thread_wall_ns"),
        "gpu_active_ratio": row.get("gpu_active_ratio"),
        "busy_ns": row.get("busy_ns"),
        "wall_ns": row.get("wall_ns"),
        "latency_ms": {"mean": ms(row.get("latency_mean_s")), "p50": ms(row.get("latency_p50_s")),
                       "p99": ms(row.get("latency_p99_s"))},
        "definitions": "docs/metrics.md",
    }

def inference_summary(durations_ns: np.ndarray[Any, Any], warmup: int) -> dict[str, Any]:
    """Latency statistics (ms) and throughput (iterations/s) of measured runs."""
    if len(durations_ns) == 0:
        return {"iterations": 0, "warmup": warmup}
    ms = durations_ns.astype(np.float64) / 1e6
    return {
        "iterations": len(ms),
        "warmup": warmup,
        "latency_ms": {
            "mean": float(ms.mean()), "std": float(ms.std()), "min": float(ms.min()),
            "p50": float(np.percentile(ms, 50)), "p90": float(np.percentile(ms, 90)),
            "p99": float(np.percentile(ms, 99)), "max": float(ms.max()),
        },
        "throughput_ips": float(len(ms) / (ms.sum() / 1e3)),
    }
