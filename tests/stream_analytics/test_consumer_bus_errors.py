"""A dropped connection in the middle of a fetch or an ack does not end a
capture's analytics: the error is counted in ``bus_errors`` and the work is
done again (messages fetched later, acks sent at the next commit)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from collectors.proc.sampler import ProcSampler
from exporter.bus import Bus, BusConfig
from exporter.natsserver import EmbeddedNats
from stream_analytics.consumer import AnalyticsConsumer


def test_fetch_and_ack_failing_with_a_lost_connection_are_retried(
        nats_server: EmbeddedNats) -> None:
    """The first fetch raises ConnectionResetError: step() returns 0 with
    bus_errors['fetch'] == 1. The first ack raises too: bus_errors['commit']
    == 1 and the message stays unacknowledged; the next commit acks it, so
    the consumer ends with nothing pending and the sample folded in once."""

    async def go() -> None:
        bus = await Bus.open(nats_server.url, BusConfig(), "h")
        try:
            c = AnalyticsConsumer(bus, durable="flaky", window_s=30.0, checkpoint=False,
                                  hosts=["h"], sched_keys=True)
            await c.start()
            sampler = ProcSampler()
            sampler.sample({os.getpid()})
            await bus.publish_table("sched_sample", sampler.sample({os.getpid()}), "s:1")
            real_fetch = c._sub.fetch
            state = {"fetches": 0, "acks": 0}

            async def fetch(*a: Any, **kw: Any) -> Any:
                state["fetches"] += 1
                if state["fetches"] == 1:
                    raise ConnectionResetError("Connection lost")
                msgs = await real_fetch(*a, **kw)
                for m in msgs:
                    real_ack = m.ack

                    async def ack(real_ack: Any = real_ack) -> None:
                        state["acks"] += 1
                        if state["acks"] == 1:
                            raise ConnectionResetError("Connection lost")
                        await real_ack()

                    m.ack = ack
                return msgs

            c._sub.fetch = fetch
            assert await c.step(timeout=1.0) == 0
            assert c.bus_errors["fetch"] == 1
            assert await c.step(timeout=5.0) == 1  # folded; its ack fails
            assert c.bus_errors["commit"] == 1 and len(c._unacked) == 1
            await c.flush(commit=True)  # the next commit acks it
            assert not c._unacked
            await bus.nc.flush()  # the ack reached the server
            assert await c.pending() == 0
            assert c.received["sched_sample"] == 1
        finally:
            await bus.close()

    asyncio.run(go())
