"""``AnalyticsConsumer(idle_flush=False)`` (the daemon) flushes at most once per
``flush_interval_s``: an empty fetch does not flush early, as it does with
the default ``idle_flush=True``."""

from __future__ import annotations

import asyncio
import os

import pytest

from collectors.proc.sampler import ProcSampler
from exporter.bus import Bus, BusConfig
from exporter.natsserver import EmbeddedNats
from stream_analytics.consumer import AnalyticsConsumer


async def _after_an_empty_fetch(url: str, idle_flush: bool) -> tuple[int, int, int]:
    """(messages fetched, left unacked after an empty fetch, results published)."""
    bus = await Bus.open(url, BusConfig(), "h")
    try:
        sampler = ProcSampler()
        sampler.sample({os.getpid()})  # primes the deltas
        sum(range(100_000))
        await bus.publish_table("sched_sample", sampler.sample({os.getpid()}), "s:1")
        c = AnalyticsConsumer(bus, durable=f"d{int(idle_flush)}", window_s=30.0,
                              checkpoint=False, flush_interval_s=3600.0,
                              idle_flush=idle_flush, hosts=["h"], sched_keys=True)
        await c.start()
        c._last_flush = asyncio.get_running_loop().time()  # an interval has just begun
        fetched = await c.step(timeout=2.0)
        empty = await c.step(timeout=0.2)
        assert empty == 0
        return fetched, len(c._unacked), c.results_published
    finally:
        await bus.close()


@pytest.mark.parametrize(("idle_flush", "unacked", "published"), [(False, 1, 0), (True, 0, 1)])
def test_an_empty_fetch_flushes_only_with_idle_flush(
        nats_server: EmbeddedNats, idle_flush: bool, unacked: int, published: int) -> None:
    """One sched_sample message is fetched; after the next, empty, fetch it is
    still unacknowledged and unpublished without idle_flush (the interval, 1 h,
    has not passed), and flushed (one result row, acked) with it."""
    fetched, left, results = asyncio.run(_after_an_empty_fetch(nats_server.url, idle_flush))
    assert fetched == 1
    assert (left, results) == (unacked, published)
