"""``AnalyticsConsumer.hold_results`` (set by a bounded session while it
publishes): flushes acknowledge what was folded in but publish no results;
the drain publishes them once, from every input."""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pytest

from exporter.bus import Bus, BusConfig
from exporter.natsserver import EmbeddedNats
from exporter.schema import ITERATION_SPAN
from stream_analytics.consumer import AnalyticsConsumer
from tests.support import synthetic_kernel_spans


def _kernels(n: int, t0: int) -> pa.Table:
    return synthetic_kernel_spans(n, t0, model=["m"] * n)


def _iteration(i: int, t0: int, t1: int) -> pa.Table:
    """Iteration ``i`` of model m, pid 42, over [t0, t1]: it resolves the
    kernels it holds, so a flush has a result to publish."""
    cols = {f.name: pa.nulls(1, f.type) for f in ITERATION_SPAN}
    cols |= {"start_ns": pa.array([t0], pa.int64()), "end_ns": pa.array([t1], pa.int64()),
             "duration_ns": pa.array([t1 - t0], pa.int64()),
             "source": pa.array(["ort"]).dictionary_encode(),
             "model": pa.array(["m"]).dictionary_encode(), "pid": pa.array([42], pa.int64()),
             "iteration": pa.array([i], pa.int64()), "kernel_count": pa.array([10], pa.int64())}
    return pa.table(cols).cast(ITERATION_SPAN)


async def _run(url: str, hold: bool) -> tuple[int, int, int, int]:
    """(results published after 3 messages, each followed by an empty fetch;
    messages left unacked then; results published by the drain; kernel spans
    in the final result)."""
    bus = await Bus.open(url, BusConfig(), "h")
    try:
        c = AnalyticsConsumer(bus, durable=f"hold{int(hold)}", window_s=None, checkpoint=False,
                              hosts=["h"])
        await c.start()
        c.hold_results = hold
        for i in range(3):
            await bus.publish_table("kernel_span", _kernels(10, 1000 * i), f"k{i}")
            await bus.publish_table("iteration_span", _iteration(i, 1000 * i, 1000 * i + 20),
                                    f"i{i}")
            assert await c.step(timeout=2.0) == 2
            assert await c.step(timeout=0.2) == 0  # a pause: a prompt flush
        before, unacked = c.results_published, len(c._unacked)
        await c.drain(caught_up=True)
        last = c.engine.results().to_pylist()
        return before, unacked, c.results_published - before, int(last[-1]["kernel_spans_total"])
    finally:
        await bus.close()


@pytest.mark.parametrize(("hold", "before", "by_drain"), [(True, 0, 1), (False, 3, 0)])
def test_held_results_are_published_once_by_the_drain(
        nats_server: EmbeddedNats, hold: bool, before: int, by_drain: int) -> None:
    """Three iterations' kernel and iteration messages, each pair followed by
    an empty fetch: held, no result is published before the drain (every
    message is acknowledged all the same), and the drain publishes one row
    holding all 30 spans; not held, each pause publishes a row."""
    got = asyncio.run(_run(nats_server.url, hold))
    assert got == (before, 0, by_drain, 30)
