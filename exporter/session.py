"""One bounded session (capture, replay): the pipeline plus its two readers.

:class:`Session` opens the bus (embedded server unless a URL is given), a
bundle sink and a whole-session analytics consumer, all bound to one session
id, so ``capture``, ``capture -- CMD`` and ``replay`` share one way of
running and of writing their bundle (:meth:`Session.write_trace_bundle`).
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from collectors.base import Collector, CollectorContext, create
from collectors.rocprof.rejects import Rejects
from exporter import schema
from exporter.bus import Bus, BusConfig
from exporter.pipeline import Pipeline
from exporter.sinks.bundle import BundleSink, derived_metrics, env_info, finish, write_json
from stream_analytics.consumer import AnalyticsConsumer

log = logging.getLogger(__name__)


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

    @classmethod
    async def open(cls, kind: str, bus_cfg: BusConfig) -> Session:
        host = socket.gethostname()
        sid = new_session_id()
        pipe = Pipeline(host, bus_cfg, session=sid)
        try:
            bus = await pipe.open()
            sink = BundleSink(bus, sid)
            await sink.start()
            consumer = AnalyticsConsumer(bus, durable=f"{kind}-{sid}", window_s=None,
                                         checkpoint=False, session=schema.sanitize_token(sid))
            await consumer.start()
        except BaseException:
            await pipe.close()
            raise
        return cls(sid, host, bus_cfg, pipe, sink, consumer)

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
        left = await self.bus.flush_outbox()
        if left:
            log.warning("outbox: %d messages still held after %.0f s; the bus is not back",
                        left, self.bus_cfg.outbox_drain_timeout_s)
            self.bus.outbox.clear("undelivered_at_exit")
        await self.consumer.drain()
        await self.sink.drain()

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
        found already stored (``already_stored``), spilled to disk, dropped."""
        b = self.bus
        return {"redelivered": b.redelivered, "already_stored": b.already_stored,
                "spilled": b.outbox.spilled, "dropped": dict(b.outbox.dropped)}

    def loss(self) -> str | None:
        """``None`` when nothing published was lost, else a line naming it:
        messages the outbox dropped, by reason."""
        d = {k: v for k, v in self.bus.outbox.dropped.items() if v}
        if not d:
            return None
        why = ", ".join(f"{v} {k}" for k, v in sorted(d.items()))
        return (f"the bus outbox dropped {sum(d.values())} messages ({why}); raise "
                "--outbox-max-bytes or restore the bus sooner")

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
        and lists every key under ``keys``.
        """
        out.mkdir(parents=True, exist_ok=True)
        counts = self.sink.write(out)
        keys = self.final_results()
        derived = derived_metrics(keys[0]) if keys else derived_metrics({})
        derived["kernel_count_total"] = sum(int(r["kernel_spans_total"]) for r in keys)
        derived["keys"] = [derived_metrics(r) | {"pid": r["pid"], "model": r["model"]}
                           for r in keys]
        write_json(out / "metrics/derived_metrics.json", derived)
        derived["bottleneck"] = finish(out, self.sink, keys[0] if keys else None,
                                       hip_api).get("class")
        write_json(out / "rejects.json", {"dropped": rejects.counts, "notes": rejects.notes,
                                          "examples": rejects.examples})
        write_json(out / "env.json", env_info())
        write_json(out / "session.json", {
            "session_id": self.id, "host": self.host, "schema_version": schema.SCHEMA_VERSION,
            "nats": self.bus_cfg.url or "embedded", "rows": counts, "drops": self.drops(),
            "shortfall": self.loss(), "outbox": self.outbox_stats(), **info,
        })
        derived["shortfall"] = self.loss()
        return derived
