"""One bounded session (capture, replay): the pipeline plus its two readers.

:class:`Session` opens the bus (embedded server unless a URL is given), a
bundle sink and a whole-session analytics consumer, all bound to one session
id, so ``capture``, ``capture -- CMD`` and ``replay`` share one way of
running and of writing their bundle (:meth:`Session.write_trace_bundle`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from rich.progress import Progress

from collectors.base import Collector, CollectorContext, Emit, create
from collectors.rocprof.rejects import Rejects
from exporter import schema
from exporter.bus import Bus, BusConfig
from exporter.natsserver import EmbeddedNats, vm_hwm
from exporter.phases import Phases
from exporter.pipeline import Pipeline
from exporter.sinks.bundle import BundleSink, derived_metrics, env_info, finish, write_json
from stream_analytics.consumer import AnalyticsConsumer

log = logging.getLogger(__name__)


MAX_LAG = 128
"""Messages (at most 900 kB each) a session's readers may fall behind its publisher."""
READ_BATCH = 16
"""Messages a session's reader (the analytics consumer, the bundle sink) asks
for per fetch. The two read side by side on one connection, so the server
may be sending both answers at once: at most 2 x 16 x 900 kB, well below
nats-server's 64 MiB ``max_pending`` per connection (beyond it the server
drops the connection as a slow consumer: seen with 512 + 1024)."""


def _timed(it: Iterator[Emit], phases: Phases, phase: str) -> Iterator[Emit]:
    """``it``'s items, the time spent producing them added to ``phase``."""
    while True:
        with phases.time(phase):
            item = next(it, None)
        if item is None:
            return
        yield item


async def _together(*reads: Awaitable[None]) -> None:
    """Run ``reads`` side by side; when one raises, the others are cancelled
    (and awaited) and its exception is raised as it is."""
    tasks = [asyncio.ensure_future(r) for r in reads]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _peak_rss(server: EmbeddedNats | None) -> dict[str, int | None]:
    """Peak RSS in bytes of this process (``self``) and of the embedded
    nats-server (``nats_server``; None with ``--nats URL``), each the
    process's own high-water mark, ``VmHWM`` of ``/proc/<pid>/status`` (the
    server's read when it stopped).

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
    return {"self": own,
            "nats_server": server.peak_rss_bytes if server is not None else None}


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
        (a new one when ``None``)."""
        host = socket.gethostname()
        sid = new_session_id()
        pipe = Pipeline(host, bus_cfg, session=sid)
        try:
            bus = await pipe.open()
            sink = BundleSink(bus, sid, take_in_thread=True, fetch_batch=READ_BATCH)
            await sink.start()
            consumer = AnalyticsConsumer(bus, durable=f"{kind}-{sid}", window_s=None,
                                         checkpoint=False, session=schema.sanitize_token(sid),
                                         fold_in_thread=True, batch=READ_BATCH)
            await consumer.start()
        except BaseException:
            await pipe.close()
            raise
        return cls(sid, host, bus_cfg, pipe, sink, consumer, phases or Phases())

    @property
    def bus(self) -> Bus:
        assert self.pipe.bus is not None
        return self.pipe.bus

    async def drain(self) -> None:
        """Let analytics and the bundle sink read everything published.

        First the outbox publishes what it held through an outage (at most
        ``bus_cfg.outbox_drain_timeout_s``); what it could not is counted as
        ``undelivered_at_exit`` in :meth:`loss`.
        """
        with self.phases.time("bus"):
            left = await self.bus.flush_outbox()
        if left:
            log.warning("outbox: %d messages still held after %.0f s; the bus is not back",
                        left, self.bus_cfg.outbox_drain_timeout_s)
            self.bus.outbox.clear("undelivered_at_exit")
        # everything is published and stored: the two readers drain side by
        # side (the consumer folds in a worker thread while the sink decodes),
        # then the sink reads the results the consumer published last
        await _together(self._timed_read("analytics", self.consumer.drain(caught_up=True)),
                        self._timed_read("bundle", self.sink.drain(caught_up=True)))
        with self.phases.time("bundle"):
            await self.sink.drain(caught_up=True)

    async def _timed_read(self, phase: str, read: Awaitable[None]) -> None:
        with self.phases.time(phase):
            await read

    async def publish(self, emits: Iterable[Emit],
                      transform: Callable[[Emit], pa.RecordBatch] | None = None) -> int:
        """Publish every emit of ``emits`` (a parser's output; ``transform``
        maps an emit to the batch to publish), keeping the analytics consumer
        and the bundle sink reading as it goes so the backlog stays bounded;
        returns the rows published. Times ``parse`` (pulling from ``emits``),
        ``bus``, ``analytics`` and ``bundle``; shows rows on the progress bar."""
        it = iter(emits)
        task = self.progress.add_task("replay rows", total=None) if self.progress else None
        rows = published = 0
        seen = {"sink": 0, "analytics": 0}
        for emit in _timed(it, self.phases, "parse"):
            batch = transform(emit) if transform is not None else emit.batch
            rows += batch.num_rows
            with self.phases.time("bus"):
                published += await self.bus.publish_table(emit.signal, batch, emit.key)
            await self._catch_up(published, seen)
            if self.progress is not None and task is not None:
                self.progress.update(task, completed=rows)
        return rows

    async def _catch_up(self, published: int, seen: dict[str, int]) -> None:
        """Let the bundle sink and the analytics consumer read until each is at
        most :data:`MAX_LAG` messages behind ``published``, so the stream's
        ``max_bytes`` retention never deletes what they have not read (a
        publisher that ran ahead on a busy machine lost a third of 10M rows).
        Gives up waiting on a reader that fetches nothing for 60 s (it then
        counts what it missed as ``stream_gap`` drops)."""
        async def catch_up(name: str, step: Callable[..., Awaitable[int]], phase: str) -> None:
            idle = 0
            while published - seen[name] > MAX_LAG and idle < 300:
                with self.phases.time(phase):
                    n = await step(timeout=0.2)
                seen[name] += n
                idle = 0 if n else idle + 1

        # side by side: the consumer folds in a worker thread while the sink decodes
        await _together(catch_up("sink", self.sink.step, "bundle"),
                        catch_up("analytics", self.consumer.step, "analytics"))

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

    def write_trace_bundle(self, out: Path, info: dict[str, Any], rejects: Rejects,
                           hip_api: pa.Table | None = None) -> dict[str, Any]:
        """Bundle of a session without a model (GPU traces): returns derived metrics.

        ``derived_metrics.json`` describes the key with the most kernel spans
        and lists every key under ``keys``; ``session.json`` has ``timings_s``,
        the seconds per phase so far (:class:`exporter.phases.Phases`).
        """
        out.mkdir(parents=True, exist_ok=True)
        ph = self.phases
        with ph.time("bundle"):
            counts = self.sink.write(out)
            keys = self.final_results()
            derived = derived_metrics(keys[0]) if keys else derived_metrics({})
            derived["kernel_count_total"] = sum(int(r["kernel_spans_total"]) for r in keys)
            derived["keys"] = [derived_metrics(r) | {"pid": r["pid"], "model": r["model"]}
                               for r in keys]
            write_json(out / "metrics/derived_metrics.json", derived)
        task = None
        if self.progress is not None:
            task = self.progress.add_task("trace.pftrace", total=counts.get("kernel_span", 0))

        def advance(rows: int) -> None:
            if self.progress is not None and task is not None:
                self.progress.update(task, completed=rows)

        derived["bottleneck"] = finish(out, self.sink, keys[0] if keys else None,
                                       hip_api, timer=ph.time, progress=advance).get("class")
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
