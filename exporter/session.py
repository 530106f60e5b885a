"""One bounded session (capture, replay): the pipeline plus its two readers.

:class:`Session` opens the bus (embedded server unless a URL is given), a
bundle sink and a whole-session analytics consumer, all bound to one session
id, so ``capture``, ``capture -- CMD`` and ``replay`` share one way of
running and of writing their bundle (:meth:`Session.write_trace_bundle`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from collectors.base import Collector, CollectorContext, Emit, create
from collectors.rocprof.rejects import Rejects
from exporter import schema
from exporter.bus import Bus, BusConfig
from exporter.natsserver import EmbeddedNats, vm_hwm
from exporter.phases import Phases
from exporter.pipeline import Pipeline
from exporter.sinks.bundle import (
    FILES,
    SPOOLED,
    BundleSink,
    derived_metrics,
    env_info,
    write_json,
)
from stream_analytics.consumer import AnalyticsConsumer

if TYPE_CHECKING:
    from rich.progress import Progress

log = logging.getLogger(__name__)


MAX_LAG = 128
"""Messages (at most 900 kB each) a session's readers may fall behind its publisher."""
READ_BATCH = 16
"""Messages a session's reader (the analytics consumer, the bundle sink) asks
for per fetch. The two read side by side on one connection, so the server
may be sending both answers at once: at most 2 x 16 x 900 kB, well below
nats-server's 64 MiB ``max_pending`` per connection (beyond it the server
drops the connection as a slow consumer: seen with 512 + 1024)."""
READ_BEHIND = 64
"""Messages a session's reader stays behind its publisher (at most
:data:`MAX_LAG`) once it has taken this many: it fetches once the publisher
is this far ahead. Readers at the head of the stream made the embedded
nats-server's memory grow with the input (replay of 10M rows: 304 MB, and
579 MB at 30M; 164 MB reading 32 messages behind; flat at 103-111 MB
reading 64 behind, as with the readers of before, 128 behind). Only the
first this many messages are read at the head (:class:`_Readers`): 2M rows
1.08-1.10x faster, nats-server's peak 100-111 against 70-84 MiB at 2M and
174-191 against 120-127 MiB at 10M."""
SHARED_DECODED = 2 * READ_BATCH
"""Decoded messages a session keeps for its second reader
(:class:`exporter.schema.SharedDecode`): the two readers fetch
:data:`READ_BATCH` at a time, side by side, so the one behind finds the
other's decodes; a reader further behind decodes for itself. A 2M-row
replay decodes 97 times instead of 180 (83 messages found decoded): CPU
10.57 -> 10.32 s, medians of 8 alternating pairs (``benchmarks/README.md``)."""
READ_WAIT_S = 0.05
"""How long a session reader's fetch waits for a message while the publisher runs."""
NATS_GOMAXPROCS = 1
"""``GOMAXPROCS`` of the nats-server a session starts itself (``GOMAXPROCS``
in the environment wins; as the daemon's, ``exporter.daemon``): one Go thread
stores and delivers a replay's messages (nats-server used about 5 % of the
CPU of a 2M-row replay), and Go's idle threads no longer spin for work beside
the parser: 2M rows 1.755 -> 1.71 s, CPU 2.96 -> 2.83 s, medians of 10
alternating pairs (``benchmarks/README.md``)."""
GIVE_UP_EMPTY = 1200
"""Empty fetches in a row (:data:`READ_WAIT_S` each: 60 s) after which the
publisher stops waiting for a reader that is behind."""


async def _timed(it: Iterator[Emit], phases: Phases, phase: str) -> AsyncIterator[Emit]:
    """``it``'s items, each pulled in a worker thread (the event loop keeps
    serving the session's readers while a parser works or is waited for),
    the time spent waiting for them added to ``phase``."""
    while True:
        with phases.time(phase):
            item = await asyncio.to_thread(next, it, None)
        if item is None:
            return
        yield item


def _peak_rss(server: EmbeddedNats | None) -> dict[str, int | None]:
    """Peak RSS in bytes of this process (``self``) and of the embedded
    nats-server (``nats_server``; None with ``--nats URL``), each the
    process's own high-water mark, ``VmHWM`` of ``/proc/<pid>/status`` (the
    server's so far: :meth:`exporter.natsserver.EmbeddedNats.peak_rss`).

    Not ``getrusage``: a process started with ``vfork`` + ``exec`` (every
    ``subprocess``) begins with ``RUSAGE_SELF``'s ``ru_maxrss`` at its
    parent's peak (a benchmark that had parsed a 2M-slice trace made a
    replay "peak" at 3.1 GiB), and ``RUSAGE_CHILDREN`` credits such a child
    (``platform.platform()``'s ``uname -p``) with this process's peak.
    ``getrusage(RUSAGE_SELF)`` only where ``/proc`` cannot be read."""
    import resource

    own = vm_hwm(os.getpid())
    if own is None:
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"self": own, "nats_server": server.peak_rss() if server is not None else None}


def new_session_id() -> str:
    """``YYYYmmddTHHMMSS-xxxxxx``: sortable, unique enough for one host."""
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"


def gpu_collector(host: str, pids: set[int], interval_s: float = 1.0) -> Collector | None:
    """The ``gpu`` collector for a capture session (``source`` auto, polled every
    ``interval_s`` s), or ``None`` when this host has no GPU source; its reasons
    go to the log at INFO, so a CPU-only capture prints nothing about it."""
    c = create("gpu", CollectorContext(host, pids, {"interval_s": interval_s}, log=log.info))
    if c.source == "none":
        c.close()
        return None
    return c


class _Readers:
    """The bundle sink and the analytics consumer reading while a session
    publishes: one task each, fetching (:data:`READ_BATCH` messages, up to
    :data:`READ_WAIT_S` s) whenever that leaves it at least
    :data:`READ_BEHIND` messages behind the publisher, and taking in what it
    got, until the publisher is done; so their work overlaps the parser's
    and the publisher's. The stream's first :data:`READ_BEHIND` messages are
    read at its head (a fetch as soon as :data:`READ_BATCH` wait), so a
    reader starts with the parser, not 80 messages later: a 2M-row replay
    makes only 89. The session's drain reads the rest.

    :meth:`keep_up` holds the publisher while a reader is more than
    :data:`MAX_LAG` messages behind it, so the stream's ``max_bytes``
    retention never deletes what they have not read (a publisher that ran
    ahead on a busy machine lost a third of 10M rows). It gives up waiting
    on a reader that fetches nothing for :data:`GIVE_UP_EMPTY` fetches in a
    row (that reader then counts what it missed as ``stream_gap`` drops).
    A fetch is never cancelled (nats-py would throw its messages away):
    leaving the ``async with`` lets each reader finish its fetch and stop.
    The seconds a reader spends on fetches that returned messages are added
    to its phase (``bundle``, ``analytics``)."""

    def __init__(self, s: Session) -> None:
        self.phases = s.phases
        self.steps: dict[str, tuple[Callable[..., Awaitable[int]], str]] = {
            "sink": (s.sink.step, "bundle"), "analytics": (s.consumer.step, "analytics")}
        self.seen = dict.fromkeys(self.steps, 0)
        self.empty = dict.fromkeys(self.steps, 0)
        self._moved = asyncio.Event()
        self._published = asyncio.Event()
        self.published = 0
        self.gate = min(READ_BEHIND + READ_BATCH, MAX_LAG)
        """Messages ahead of a reader before it fetches: a full fetch leaves it
        READ_BEHIND behind, and it never waits past MAX_LAG."""
        self.head, self.head_gate = READ_BEHIND, min(READ_BATCH, MAX_LAG)
        """A reader that has taken fewer than ``head`` messages fetches once
        ``head_gate`` wait: at the head of the stream (see the class doc)."""
        self._done = False
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> _Readers:
        self._tasks = [asyncio.ensure_future(self._read(name)) for name in self.steps]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._done = True
        self._published.set()
        await asyncio.gather(*self._tasks, return_exceptions=exc[0] is not None)

    async def _read(self, name: str) -> None:
        step, phase = self.steps[name]
        try:
            while not self._done:
                while not self._done and self.published - self.seen[name] < (
                        self.head_gate if self.seen[name] < self.head else self.gate):
                    self._published.clear()
                    await self._published.wait()
                if self._done:
                    break
                t = time.perf_counter()
                n = await step(timeout=READ_WAIT_S)
                if n:
                    self.phases.add(phase, time.perf_counter() - t)
                self.seen[name] += n
                self.empty[name] = 0 if n else self.empty[name] + 1
                self._moved.set()
        finally:
            self._moved.set()  # wakes keep_up, which raises this task's exception

    def _behind(self, published: int) -> bool:
        return any(published - self.seen[n] > MAX_LAG and self.empty[n] < GIVE_UP_EMPTY
                   for n in self.steps)

    async def keep_up(self, published: int) -> None:
        """Return once each reader is at most :data:`MAX_LAG` messages behind
        ``published`` (or has given up); raises a reader's exception."""
        self.published = published
        self._published.set()
        while True:
            for t in self._tasks:
                if t.done():
                    t.result()  # a reader's exception, raised here
            if not self._behind(published):
                return
            self._moved.clear()
            await self._moved.wait()


@dataclass
class Session:
    """An open session; use :meth:`open`, then :meth:`drain` and :meth:`close`."""

    id: str
    host: str
    bus_cfg: BusConfig
    pipe: Pipeline
    sink: BundleSink
    consumer: AnalyticsConsumer
    phases: Phases = field(default_factory=Phases)
    progress: Progress | None = None

    @classmethod
    async def open(cls, kind: str, bus_cfg: BusConfig, phases: Phases | None = None) -> Session:
        """Start the pipeline (embedded nats-server unless ``bus_cfg.url``), the
        bundle sink and the analytics consumer; ``phases`` times the session
        (a new one when ``None``); the start-up is its ``start`` phase."""
        phases = phases or Phases()
        host = socket.gethostname()
        sid = new_session_id()
        pipe = Pipeline(host, bus_cfg, session=sid, nats_go_max_procs=NATS_GOMAXPROCS)
        try:
            with phases.time("start"):
                bus = await pipe.open()
                # both readers fetch every message: each is decoded once for the two
                shared = schema.SharedDecode(max_entries=SHARED_DECODED)
                sink = BundleSink(bus, sid, take_in_thread=True, fetch_batch=READ_BATCH,
                                  shared=shared)
                await sink.start()
                consumer = AnalyticsConsumer(bus, durable=f"{kind}-{sid}", window_s=None,
                                             checkpoint=False,
                                             session=schema.sanitize_token(sid),
                                             fold_in_thread=True, batch=READ_BATCH,
                                             shared=shared)
                await consumer.start()
        except BaseException:
            await pipe.close()
            raise
        return cls(sid, host, bus_cfg, pipe, sink, consumer, phases)

    async def run_analytics(self, stop: asyncio.Event) -> None:
        """The analytics consumer's loop while a capture runs
        (:meth:`~stream_analytics.consumer.AnalyticsConsumer.run`), the
        seconds of its steps that fetched messages added to ``analytics``."""
        await self.consumer.run(stop, busy=lambda s: self.phases.add("analytics", s))

    @property
    def bus(self) -> Bus:
        assert self.pipe.bus is not None
        return self.pipe.bus

    async def drain(self, inputs_read: Callable[[], None] | None = None) -> None:
        """Let analytics and the bundle sink read everything published.

        First the outbox publishes what it held through an outage (at most
        ``bus_cfg.outbox_drain_timeout_s``); what it could not is counted as
        ``undelivered_at_exit`` in :meth:`loss`. Then the two readers drain
        side by side (the consumer folds in a worker thread while the sink
        decodes); ``inputs_read()`` is called as soon as the bundle sink has
        read every input, while the consumer may still be settling. Last the
        sink reads the results the consumer published. When either reader
        raises, the other is cancelled and the exception raised.
        """
        await self._flush_outbox()
        settle = asyncio.ensure_future(
            self._timed_read("analytics", self.consumer.drain(caught_up=True)))
        try:
            await self._timed_read("bundle", self.sink.drain(caught_up=True))
            if inputs_read is not None:
                inputs_read()
            await settle
        except BaseException:
            settle.cancel()
            await asyncio.gather(settle, return_exceptions=True)
            raise
        with self.phases.time("bundle"):
            await self.sink.drain(caught_up=True)

    async def _flush_outbox(self) -> None:
        with self.phases.time("bus"):
            left = await self.bus.flush_outbox()
        if left:
            log.warning("outbox: %d messages still held after %.0f s; the bus is not back",
                        left, self.bus_cfg.outbox_drain_timeout_s)
            self.bus.outbox.clear("undelivered_at_exit")

    def _trace_progress(self, rows: int) -> Callable[[int], None]:
        """A ``trace.pftrace`` bar of ``rows`` kernel rows (when the session
        shows progress); returns the function that moves it to a row count."""
        progress = self.progress
        if progress is None:
            return lambda _: None
        task = progress.add_task("trace.pftrace", total=rows)
        return lambda done: progress.update(task, completed=done)

    async def _timed_read(self, phase: str, read: Awaitable[None]) -> None:
        with self.phases.time(phase):
            await read

    async def publish(self, emits: Iterable[Emit],
                      transform: Callable[[Emit], pa.RecordBatch] | None = None) -> int:
        """Publish every emit of ``emits`` (a parser's output; ``transform``
        maps an emit to the batch to publish) while the analytics consumer
        and the bundle sink read in the background (:class:`_Readers`), so
        folding and spooling overlap parsing and publishing and the backlog
        stays bounded; returns the rows published. Times ``parse`` (pulling
        from ``emits``), ``bus``, ``analytics`` and ``bundle``; shows rows on
        the progress bar. A reader's exception is raised here."""
        it = iter(emits)
        task = self.progress.add_task("replay rows", total=None) if self.progress else None
        rows = published = 0
        self.consumer.hold_results = True  # until the drain has read it all
        async with _Readers(self) as readers:
            async for emit in _timed(it, self.phases, "parse"):
                batch = transform(emit) if transform is not None else emit.batch
                rows += batch.num_rows
                with self.phases.time("bus"):
                    published += await self.bus.publish_table(emit.signal, batch, emit.key)
                await readers.keep_up(published)
                if self.progress is not None and task is not None:
                    self.progress.update(task, completed=rows)
        return rows

    async def close(self) -> None:
        await self.pipe.close()

    def drops(self) -> dict[str, int]:
        """Drops by reason: analytics, bundle sink, pipeline and outbox
        (:meth:`exporter.outbox.Outbox.drop_reasons`)."""
        c = self.consumer
        out = c.drops + c.engine.drops + self.sink.drops + self.pipe.drops
        out.update(self.bus.outbox.drop_reasons())
        return dict(out)

    def outbox_stats(self) -> dict[str, Any]:
        """What the bus outbox did: messages published late (``redelivered``),
        found already stored (``already_stored``), spilled to disk, dropped;
        and ``read_retries``: fetches or acks of the analytics consumer and
        the bundle sink retried after a dropped connection (nothing lost)."""
        b = self.bus
        return {"redelivered": b.redelivered, "already_stored": b.already_stored,
                "spilled": b.outbox.spilled, "dropped": dict(b.outbox.dropped),
                "read_retries": {"analytics": sum(self.consumer.bus_errors.values()),
                                 "bundle": self.sink.bus_errors}}

    def loss(self) -> str | None:
        """``None`` when nothing published was lost, else a line naming it:
        messages the outbox dropped, by reason, and messages the bundle sink
        never read because the stream's retention deleted them (``stream_gap``)."""
        parts = []
        d = {k: v for k, v in self.bus.outbox.dropped.items() if v}
        if d:
            why = ", ".join(f"{v} {k}" for k, v in sorted(d.items()))
            parts.append(f"the bus outbox dropped {sum(d.values())} messages ({why}); raise "
                         "--outbox-max-bytes or restore the bus sooner")
        gap = self.sink.drops.get("stream_gap", 0)
        if gap:
            parts.append(f"the bundle missed {gap} bus messages the stream's retention "
                         "deleted before they were read (stream_gap)")
        return "; ".join(parts) or None

    def final_results(self) -> list[dict[str, Any]]:
        """The last analytics result of every key, most kernel spans first."""
        last: dict[tuple[Any, ...], dict[str, Any]] = {}
        for r in self.sink.table("analytics_result").to_pylist():
            last[(r["host"], r["pid"], r["model"])] = r
        return sorted(last.values(), key=lambda r: -int(r["kernel_spans_total"]))

    async def write_trace_bundle(self, out: Path, info: dict[str, Any], rejects: Rejects,
                                 hip_api: pa.Table | None = None) -> dict[str, Any]:
        """Drain (as :meth:`drain`), then write the bundle of a session without
        a model (GPU traces) into ``out``; returns derived metrics. Call it
        once everything is published, before :meth:`close`.

        The trace's kernel slices and the kernel statistics
        (:func:`~exporter.sinks.bundle.write_kernel_outputs`) are written in
        a worker thread as soon as the bundle sink has read every input,
        while the analytics consumer still settles its held kernels; the
        trace's analytics counters, written last, wait for its final results.
        What the trace imports (:func:`~exporter.sinks.bundle.preimport_trace`)
        is imported in another worker thread while the readers drain.
        Once they have drained, the pipeline (bus connection, embedded
        nats-server) is closed while the trace is written; :meth:`close`
        then has nothing left to do.
        ``derived_metrics.json`` describes the key with the most kernel spans
        and lists every key under ``keys``; ``session.json`` has ``timings_s``,
        the seconds per phase so far (:class:`exporter.phases.Phases`; here
        ``trace`` overlaps ``analytics``). An exception of either side is
        raised once both have stopped.
        """
        from exporter.sinks.bundle import finish_verdict, preimport_trace, write_kernel_outputs

        out.mkdir(parents=True, exist_ok=True)
        ph = self.phases
        results: concurrent.futures.Future[pa.Table] = concurrent.futures.Future()
        # beside the drain and the bundle: the trace's imports (not on the trace's
        # path), the trace, and the pipeline's close
        beside: list[asyncio.Future[None]] = [asyncio.ensure_future(
            asyncio.to_thread(preimport_trace))]
        counts: dict[str, int] = {}

        def start_trace() -> None:  # every input is read: the kernel spool is complete
            with ph.time("bundle"):
                counts.update(self.sink.write(out, only=SPOOLED))
            advance = self._trace_progress(counts.get("kernel_span", 0))
            beside.append(asyncio.ensure_future(asyncio.to_thread(
                write_kernel_outputs, out, self.sink, results.result, hip_api, ph.time,
                advance)))

        try:
            await self.drain(start_trace)
            results.set_result(self.sink.table("analytics_result"))
            # everything published is read: the bus and the server stop while the trace
            # is written (nothing is held to publish: capture and replay publish at once)
            beside.append(asyncio.ensure_future(self.pipe.close()))
            await asyncio.gather(*beside)
        except BaseException:
            results.cancel()  # a trace waiting for the results stops
            await asyncio.gather(*beside, return_exceptions=True)
            raise
        with ph.time("bundle"):
            counts |= self.sink.write(out, only=set(FILES) - SPOOLED)
            keys = self.final_results()
            derived = derived_metrics(keys[0]) if keys else derived_metrics({})
            derived["kernel_count_total"] = sum(int(r["kernel_spans_total"]) for r in keys)
            derived["keys"] = [derived_metrics(r) | {"pid": r["pid"], "model": r["model"]}
                               for r in keys]
            write_json(out / "metrics/derived_metrics.json", derived)
            derived["bottleneck"] = finish_verdict(out, self.sink,
                                                   keys[0] if keys else None).get("class")
        self.sink.discard()
        with ph.time("bundle"):
            write_json(out / "rejects.json", {"dropped": rejects.counts, "notes": rejects.notes,
                                              "examples": rejects.examples})
            write_json(out / "env.json", env_info())
            write_json(out / "session.json", {
                "session_id": self.id, "host": self.host,
                "schema_version": schema.SCHEMA_VERSION, "nats": self.bus_cfg.url or "embedded",
                "rows": counts, "drops": self.drops(), "timings_s": ph.as_dict(),
                "peak_rss_bytes": _peak_rss(self.pipe.server), "shortfall": self.loss(),
                "outbox": self.outbox_stats(), **info,
            })
        derived["shortfall"] = self.loss()
        return derived
