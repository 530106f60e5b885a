"""The one pipeline both ``run`` and ``capture`` use.

collectors -> bus -> stream_analytics -> sinks. :class:`Pipeline` owns the
bus connection (starting the embedded nats-server when no URL is given),
drives each collector's ``collect()`` from a worker thread on its interval,
publishes what it returns, and records each collector's health: ``up``,
the active ``source``, errors, and the duration of every ``collect()`` call.

With ``publish_interval_s > 0`` (``run --publish-interval``) background
samples (GPU gauges, scheduler samples) are held in a
:class:`~exporter.publish_buffer.PublishBuffer` and published together every
``publish_interval_s`` by :meth:`Pipeline.run_publisher`, and at
:meth:`Pipeline.close`; spans are never held. ``0`` (``capture``,
``replay``): everything is published after each ``collect()``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import Histogram
from prometheus_client.core import Metric
from prometheus_client.registry import CollectorRegistry

from collectors.base import Collector, Emit
from exporter import catalogue
from exporter.bus import CLIENT_ERRORS, Bus, BusConfig
from exporter.natsserver import EmbeddedNats
from exporter.publish_buffer import PublishBuffer
from exporter.sinks.prometheus import counter_family, counters_family, gauge_family

log = logging.getLogger("aaco.pipeline")


@dataclass
class CollectorHealth:
    up: bool = True
    errors: int = 0
    last_error: str = ""
    calls: int = 0


@dataclass
class Pipeline:
    """Collectors plus the bus. Call :meth:`open`, then :meth:`run_collector`s."""

    host: str
    bus_cfg: BusConfig
    session: str | None = None
    state_dir: Path | None = None
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    collectors: list[Collector] = field(default_factory=list)
    health: dict[str, CollectorHealth] = field(default_factory=dict)
    drops: Counter[str] = field(default_factory=Counter)
    bus: Bus | None = None
    server: EmbeddedNats | None = None
    listen: tuple[str, int] | None = None  # embedded server's address; None: a free port
    publish_interval_s: float = 0.0  # background samples published this often; 0: at once
    buffer: PublishBuffer = field(default_factory=PublishBuffer)
    nats_go_max_procs: int | None = None  # the embedded server's GOMAXPROCS; None: Go's default
    closed: bool = field(default=False, init=False)  # close() was called
    watched: set[int] | None = None
    """The collectors' shared watched pid set (``CollectorContext.pids``).
    When a ``collect()`` adds pids to it, every collector whose
    ``follows_pids`` is true is called at once instead of at the end of its
    interval, so a process found between two samples is watched from then on
    (a scheduler sample every 5 s would otherwise miss a new server's first
    seconds: its warm-up and first requests)."""

    def __post_init__(self) -> None:
        self.collect_seconds = Histogram(
            "aaco_collector_collect_duration_seconds",
            catalogue.get("aaco_collector_collect_duration_seconds").help,
            ["collector"],
            registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self._wake: dict[str, asyncio.Event] = {}
        self._known_pids: set[int] = set(self.watched or ())
        self.early_collects = 0
        """``collect()`` calls made early because the watched set grew."""

    async def open(self) -> Bus:
        """Connect (starting the embedded server if no URL) and return the bus."""
        url = self.bus_cfg.url
        if url is None:
            host, port = self.listen or ("127.0.0.1", 0)
            self.server = EmbeddedNats(self.state_dir, bind=host, port=port or None,
                                       go_max_procs=self.nats_go_max_procs)
            url = await asyncio.to_thread(self.server.start)
            log.info("embedded nats-server with JetStream at %s", url)
        self.bus = await Bus.open(url, self.bus_cfg, self.host, self.session)
        return self.bus

    def add(self, c: Collector) -> None:
        self.collectors.append(c)
        self.health[c.name] = CollectorHealth()
        if getattr(c, "follows_pids", False):
            self._wake[c.name] = asyncio.Event()

    async def collect_once(self, c: Collector) -> int:
        """One ``collect()`` in a worker thread, then publish; never raises."""
        assert self.bus is not None
        h = self.health[c.name]
        t0 = time.perf_counter()
        try:
            emits = list(await asyncio.to_thread(c.collect))
            h.up = True
        except Exception as e:  # a collector failing must not stop the daemon
            h.up, h.errors, h.last_error = False, h.errors + 1, f"{type(e).__name__}: {e}"
            self.drops["collector_error"] += 1
            log.warning("collector %s failed: %s", c.name, h.last_error)
            return 0
        finally:
            h.calls += 1
            self.collect_seconds.labels(c.name).observe(time.perf_counter() - t0)
            self._note_watched()
        if self.publish_interval_s > 0:
            try:
                emits = self.buffer.take(c.name, emits)
            except Exception as e:  # a batch outside its schema: as a failed publish
                self.drops["publish_error"] += len(emits)
                log.warning("publishing %s output failed: %s", c.name, e)
                return 0
        return await self._publish(c.name, emits)

    async def _publish(self, what: str, emits: list[Emit]) -> int:
        assert self.bus is not None
        try:
            return await self.bus.publish(emits)
        except Exception as e:
            self.drops["publish_error"] += len(emits)
            log.warning("publishing %s output failed: %s", what, e)
            return 0

    async def publish_held(self) -> int:
        """Publish every background sample held (see the module doc); returns
        the messages sent. A no-op without a bus or with nothing held."""
        if self.bus is None or not len(self.buffer):
            return 0
        return await self._publish("held samples", self.buffer.drain())

    async def run_publisher(self, stop: asyncio.Event) -> None:
        """Every ``publish_interval_s`` publish the held samples, until ``stop``
        (what is held then is published by :meth:`close`). Returns at once when
        the interval is 0."""
        if self.publish_interval_s <= 0:
            return
        stopped = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                await asyncio.wait({stopped}, timeout=self.publish_interval_s)
                if not stop.is_set():
                    await self.publish_held()
        finally:
            stopped.cancel()

    def _note_watched(self) -> None:
        """Wake the ``follows_pids`` collectors when :attr:`watched` grew."""
        if self.watched is None or self.watched <= self._known_pids:
            self._known_pids = set(self.watched or ())
            return
        self._known_pids = set(self.watched)
        for ev in self._wake.values():
            ev.set()

    async def run_collector(self, c: Collector, stop: asyncio.Event,
                            done: Callable[[], bool] | None = None) -> None:
        """Call ``c`` every ``c.interval_s`` until ``stop`` (or ``done()``);
        at once, too, when ``c.follows_pids`` and :attr:`watched` grew."""
        wake = self._wake.get(c.name)
        # one waiter on stop (and one on wake) for the whole loop, not a task and
        # its cancellation per interval: a 1 Hz poller's wait costs one timer
        stopped = asyncio.ensure_future(stop.wait())
        woke: asyncio.Future[Any] | None = None
        try:
            while not stop.is_set() and not (done and done()):
                t0 = time.monotonic()
                if wake is not None:
                    wake.clear()
                await self.collect_once(c)
                wait = max(0.0, c.interval_s - (time.monotonic() - t0))
                if wake is None:
                    await asyncio.wait({stopped}, timeout=wait or 0.001)
                    continue
                if woke is None or woke.done():
                    woke = asyncio.ensure_future(wake.wait())
                await asyncio.wait({stopped, woke}, timeout=wait or 0.001,
                                   return_when=asyncio.FIRST_COMPLETED)
                if wake.is_set() and not stop.is_set():
                    self.early_collects += 1
        finally:
            stopped.cancel()
            if woke is not None:
                woke.cancel()

    def health_metrics(self, extra_drops: Callable[[], Counter[str]] | None = None,
                       received: Callable[[], Counter[str]] | None = None) -> Iterator[Metric]:
        """Exporter self-metrics: collector up, drops and receipts by reason."""
        up = gauge_family("aaco_collector_up", ["collector", "source"])
        for c in self.collectors:
            ok = self.health[c.name].up and c.source != "none"
            up.add_metric([c.name, c.source], 1.0 if ok else 0.0)
        yield up
        drops = Counter(self.drops)
        if extra_drops is not None:
            drops.update(extra_drops())
        drops.update(self.collector_drops())
        if self.bus is not None:  # so the events-dropped alert covers outbox losses too
            drops.update(self.bus.outbox.drop_reasons())
        slow = CLIENT_ERRORS.get("SlowConsumerError", 0)
        if slow:
            drops["nats_slow_consumer"] = slow
        for reason in ("bad_payload", "schema_mismatch", "missing_header", "collector_error"):
            drops.setdefault(reason, 0)
        yield counters_family("aaco_exporter_events_dropped", "reason", drops)
        yield from self.outbox_metrics()
        if received is not None:
            yield counters_family("aaco_exporter_events_received", "signal",
                                  received())

    def outbox_metrics(self) -> Iterator[Metric]:
        """``aaco_outbox_held_{messages,bytes}`` gauges and
        ``aaco_outbox_dropped_messages_total{reason}`` (``outbox_full``,
        ``spool_error``, ``rejected``, ``undelivered_at_exit``), plus counters
        of late publishes: ``aaco_outbox_redelivered_messages_total`` and
        ``aaco_outbox_already_stored_messages_total`` (ack lost, not re-sent)."""
        if self.bus is None:
            return
        ob = self.bus.outbox
        held = gauge_family("aaco_outbox_held_messages", [])
        held.add_metric([], len(ob))
        held_b = gauge_family("aaco_outbox_held_bytes", [])
        held_b.add_metric([], ob.held_bytes)
        drops = Counter(ob.dropped)
        for reason in ("outbox_full", "spool_error", "rejected"):
            drops.setdefault(reason, 0)
        yield held
        yield held_b
        yield counters_family("aaco_outbox_dropped_messages", "reason", drops)
        for name, value in (("aaco_outbox_redelivered_messages", self.bus.redelivered),
                            ("aaco_outbox_already_stored_messages", self.bus.already_stored)):
            fam = counter_family(name, [])
            fam.add_metric([], value)
            yield fam

    def collector_drops(self) -> Counter[str]:
        """Drops the collectors counted themselves (bad rows, failed CLI calls),
        as ``<collector>_<reason>``: a ``drops`` Counter/dict or ``drops()``."""
        out: Counter[str] = Counter()
        for c in self.collectors:
            d = getattr(c, "drops", None)
            if callable(d):
                d = d()
            if isinstance(d, dict):  # Counter is a dict
                for reason, n in d.items():
                    out[f"{c.name}_{reason}"] += int(n)
        return out

    async def close(self) -> None:
        """Publish the held samples, close the collectors, the bus and the server.
        Once: a second call does nothing (a session may close its pipeline
        as soon as its readers have drained, and again on its way out)."""
        if self.closed:
            return
        self.closed = True
        await self.publish_held()
        for c in self.collectors:
            try:
                await asyncio.to_thread(c.close)
            except Exception as e:
                log.warning("closing collector %s: %s", c.name, e)
        try:
            if self.bus is not None:
                await self.bus.close()
        finally:  # a close that failed is not repeated: the server stops now
            if self.server is not None:
                await asyncio.to_thread(self.server.stop)
