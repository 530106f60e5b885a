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


async def _flushes_for_two_messages(url: str) -> tuple[int, int]:
    """(flushes after the 2 messages and 1 empty fetch, messages left unacked)."""
    bus = await Bus.open(url, BusConfig(), "h")
    try:
        sampler = ProcSampler()
        sampler.sample({os.getpid()})
        for i in range(2):  # a publish tick: two batches back to back
            sum(range(50_000))
            await bus.publish_table("sched_sample", sampler.sample({os.getpid()}), f"t:{i}")
        c = AnalyticsConsumer(bus, durable="tick", window_s=30.0, checkpoint=False,
                              flush_interval_s=1.0, idle_flush=False, hosts=["h"],
                              sched_keys=True)
        c.batch = 1  # one message per fetch: the two arrive in two fetches
        await c.start()
        c._last_flush = asyncio.get_running_loop().time() - 60.0  # the interval is long past
        assert [await c.step(timeout=2.0) for _ in range(2)] == [1, 1]
        assert c.generation == 0  # neither fetch flushed: the inputs had not paused
        assert await c.step(timeout=0.2) == 0
        return c.generation, len(c._unacked)
    finally:
        await bus.close()


def test_samples_published_together_share_one_flush(nats_server: EmbeddedNats) -> None:
    """Without idle_flush, with the flush interval long past: two sched batches
    fetched one after the other are flushed once, after the empty fetch that
    follows them (not once each), and both are acknowledged then."""
    assert asyncio.run(_flushes_for_two_messages(nats_server.url)) == (1, 0)
