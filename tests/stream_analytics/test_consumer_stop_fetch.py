"""A stop never throws away messages a fetch had received, and a drain never
reports results without messages the server delivered but this consumer
never got. (A capture's final results once held 30 of its 40 iterations,
exit 0, or its drain stalled 10 s: nats-py's cancelled fetch had popped the
messages.) Counts and identities only; the guard is minutes."""

from __future__ import annotations

import asyncio
import os

import pytest

from collectors.proc.sampler import ProcSampler
from exporter.bus import Bus, BusConfig
from exporter.natsserver import EmbeddedNats
from stream_analytics import consumer as consumer_mod
from stream_analytics.consumer import STOP_WAIT_S, AnalyticsConsumer

GUARD_S = 120.0


async def _publish_sched(bus: Bus, n: int) -> None:
    sampler = ProcSampler()
    sampler.sample({os.getpid()})
    for i in range(n):
        sum(range(20_000))
        await bus.publish_table("sched_sample", sampler.sample({os.getpid()}), f"s:{i}")


def test_a_short_fetch_under_a_set_stop_returns_its_messages(nats_server: EmbeddedNats) -> None:
    """Stop already set, 3 messages stored, a fetch of up to 10 waiting at most
    STOP_WAIT_S: the 3 come back (the old code cancelled the fetch: [])."""

    async def go() -> int:
        bus = await Bus.open(nats_server.url, BusConfig(), "h")
        try:
            await _publish_sched(bus, 3)
            c = AnalyticsConsumer(bus, durable="stopfetch", window_s=30.0, checkpoint=False,
                                  hosts=["h"], batch=10)
            await c.start()
            stop = asyncio.Event()
            stop.set()
            return len(await c._fetch(STOP_WAIT_S, stop))
        finally:
            await bus.close()

    assert asyncio.run(asyncio.wait_for(go(), GUARD_S)) == 3


def test_a_drain_waits_for_delivered_messages_it_never_received(
        nats_server: EmbeddedNats, monkeypatch: pytest.MonkeyPatch) -> None:
    """4 sched batches; the first 2 are fetched and dropped on the floor (as a
    cancelled fetch drops them), the other 2 fetched normally. The caught-up
    drain does not stop at the 2 it has: it waits for the server to deliver
    the lost 2 again (ack_wait, 2 s here) and folds all 4 into its results."""
    monkeypatch.setattr(consumer_mod, "ACK_WAIT_S", 2.0)

    async def go() -> int:
        bus = await Bus.open(nats_server.url, BusConfig(), "h")
        try:
            await _publish_sched(bus, 4)
            c = AnalyticsConsumer(bus, durable="lostfetch", window_s=None, checkpoint=False,
                                  hosts=["h"], sched_keys=True, batch=2)
            await c.start()
            lost = await c._sub.fetch(2, timeout=5)  # delivered, never folded
            assert len(lost) == 2
            await c.drain(caught_up=True)
            return c.received["sched_sample"]
        finally:
            await bus.close()

    assert asyncio.run(asyncio.wait_for(go(), GUARD_S)) == 4
