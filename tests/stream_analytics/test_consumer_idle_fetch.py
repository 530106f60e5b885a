"""``AnalyticsConsumer(idle_fetch_s=...)``: an idle consumer's pull lingers up
to ``idle_fetch_s`` (the daemon: 5 s, so it asks the server rarely), yet a
message ends the wait at once, a due flush cuts it short, and ``stop`` ends
``run`` without waiting it out. Bounds are an hour against a 60 s guard, so
a test fails by hanging into the guard, never by a timing threshold."""

from __future__ import annotations

import asyncio
import os

from collectors.proc.sampler import ProcSampler
from exporter.bus import Bus, BusConfig
from exporter.natsserver import EmbeddedNats
from stream_analytics.consumer import IDLE_FLUSH_S, AnalyticsConsumer

HOUR = 3600.0
GUARD_S = 60.0


def test_a_message_or_stop_ends_an_hour_long_idle_fetch(nats_server: EmbeddedNats) -> None:
    """With idle_fetch_s = 1 h: run() folds a sched_sample published while its
    pull lingers (received count 1) and returns once stop is set, both well
    inside the 60 s guard."""

    async def go() -> None:
        bus = await Bus.open(nats_server.url, BusConfig(), "h")
        try:
            c = AnalyticsConsumer(bus, durable="idle", window_s=30.0, checkpoint=False,
                                  flush_interval_s=1.0, idle_flush=False, hosts=["h"],
                                  sched_keys=True, idle_fetch_s=HOUR)
            await c.start()
            assert c.fetch_timeout() == HOUR  # nothing folded in: the long pull
            stop = asyncio.Event()
            task = asyncio.create_task(c.run(stop))
            await asyncio.sleep(0.2)  # the pull is lingering
            sampler = ProcSampler()
            sampler.sample({os.getpid()})
            sum(range(100_000))
            await bus.publish_table("sched_sample", sampler.sample({os.getpid()}), "s:1")
            async with asyncio.timeout(GUARD_S):
                while c.received["sched_sample"] < 1:
                    await asyncio.sleep(0.05)
            stop.set()
            await asyncio.wait_for(task, GUARD_S)
            assert c.received["sched_sample"] == 1 and c.results_published >= 1
        finally:
            await bus.close()

    asyncio.run(go())


def test_inputs_awaiting_a_flush_cut_the_fetch_to_the_flush_deadline(
        nats_server: EmbeddedNats) -> None:
    """Folded-in inputs without idle_flush bound the next fetch by the time
    left to the flush interval (<= 1 s, never the hour); spans waiting bound
    it by IDLE_FLUSH_S."""

    async def go() -> None:
        bus = await Bus.open(nats_server.url, BusConfig(), "h")
        try:
            c = AnalyticsConsumer(bus, durable="cut", window_s=30.0, checkpoint=False,
                                  flush_interval_s=1.0, idle_flush=False, hosts=["h"],
                                  idle_fetch_s=HOUR)
            await c.start()
            c._last_flush = asyncio.get_running_loop().time()
            c._new = [1]
            assert IDLE_FLUSH_S <= c.fetch_timeout() <= 1.0
            c._spans_waiting = True
            assert c.fetch_timeout() == IDLE_FLUSH_S
        finally:
            await bus.close()

    asyncio.run(go())
