"""``aaco-exporter aggregate``: one ``/metrics`` for every host on a shared bus.

Runs no collectors and no analytics: node daemons (or standalone
``analytics`` workers) already publish each host's results on
``aaco.v1.<signal>.<host>``. The aggregator subscribes (core NATS, no
JetStream consumer, no stream changes) to ``aaco.v1.<signal>.*`` for the
signals a Prometheus sink renders (:data:`exporter.fleet.FLEET_SIGNALS`) and
serves them through the same :class:`exporter.sinks.prometheus.PromState`,
where every data series carries its ``host`` label, so hosts never collide
and a fleet sum counts each host once. Point Prometheus at the aggregator
*instead of* the node daemons' ``/metrics`` for fleet panels (scraping both
doubles every sum).

Self-metrics: ``aaco_exporter_events_dropped_total{reason}`` (undecodable
messages, counted, never fatal), ``aaco_exporter_events_received_total{signal}``
(messages ingested) and ``aaco_exporter_build_info``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import PlatformCollector, ProcessCollector
from prometheus_client.core import Metric
from prometheus_client.registry import CollectorRegistry

from exporter import schema
from exporter.bus import CLIENT_ERRORS, BusConfig, connect
from exporter.fleet import FLEET_SIGNALS
from exporter.sinks.prometheus import PromState, counters_family, gauge_family
from exporter.webconfig import load_web_config, serve_metrics

log = logging.getLogger("aaco.aggregate")
VERSION = "0.1.0"


@dataclass
class AggregateOptions:
    """Where to serve; ``duration_s=None`` runs until SIGINT/SIGTERM."""

    metrics_host: str = "0.0.0.0"
    metrics_port: int = 9464
    web_config: str | None = None  # exporter-toolkit style TLS / basic auth file
    duration_s: float | None = None


class Aggregator:
    """Bus messages of every host in, one Prometheus collector out."""

    def __init__(self) -> None:
        self.received: Counter[str] = Counter()
        self.state = PromState(self_metrics=self._self_metrics)

    def ingest(self, data: bytes, headers: dict[str, str] | None) -> None:
        """Decode one message and fold it in; bad input is counted by reason."""
        try:
            sig, _, host, batch = schema.decode(data, headers)
        except schema.SchemaError as e:
            self.state.drops[e.reason] += 1
            return
        try:
            self.state.ingest(sig, host, batch)
        except Exception as e:  # bad values inside a well-formed batch
            self.state.drops["bad_values"] += 1
            log.warning("dropped %s batch from %s: %s", sig, host, e)
            return
        self.received[sig] += 1

    def _self_metrics(self) -> Iterator[Metric]:
        drops = Counter(self.state.drops)
        slow = CLIENT_ERRORS.get("SlowConsumerError", 0)
        if slow:
            drops["nats_slow_consumer"] = slow
        for reason in ("bad_payload", "schema_mismatch", "missing_header"):
            drops.setdefault(reason, 0)
        yield counters_family("aaco_exporter_events_dropped", "reason", drops)
        yield counters_family("aaco_exporter_events_received", "signal",
                              self.received)
        info = gauge_family("aaco_exporter_build_info", ["version", "schema_version"])
        info.add_metric([VERSION, str(schema.SCHEMA_VERSION)], 1.0)
        yield info


async def run_aggregate(opts: AggregateOptions, bus_cfg: BusConfig,
                        ready: asyncio.Event | None = None) -> None:
    """Serve every host's series until a signal or ``opts.duration_s``.

    ``bus_cfg.url`` is required (a shared bus; there is nothing to aggregate
    on an embedded one). Raises :class:`exporter.bus.BusError` when the bus
    cannot be reached, :class:`exporter.webconfig.WebConfigError` for a bad
    web config, :class:`OSError` when the address cannot be bound.
    """
    if not bus_cfg.url:
        raise ValueError("aggregate needs --nats URL of the shared bus")
    web = load_web_config(Path(opts.web_config) if opts.web_config else None)
    agg = Aggregator()
    registry = CollectorRegistry()
    registry.register(agg.state)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    nc = await connect(bus_cfg.url, bus_cfg)

    async def on_msg(msg: Any) -> None:
        agg.ingest(msg.data, msg.headers)

    try:
        for sig in FLEET_SIGNALS:
            await nc.subscribe(f"{schema.SUBJECT_PREFIX}.{sig}.*", cb=on_msg,
                               pending_msgs_limit=1_000_000)
        await nc.flush()
        server = serve_metrics(registry, opts.metrics_host, opts.metrics_port, web)
    except BaseException:
        await nc.close()
        raise
    log.info("aggregating every host on %s; /metrics on %s:%d", bus_cfg.url,
             opts.metrics_host, opts.metrics_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(s, stop.set)
    if ready is not None:
        ready.set()
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), opts.duration_s)
    finally:
        server.shutdown()
        with contextlib.suppress(Exception):
            await nc.drain()
        if not nc.is_closed:
            await nc.close()
