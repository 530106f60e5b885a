"""``AnalyticsConsumer._fold``: consecutive ``kernel_span`` messages of one
host in a fetch are folded as one table of at most ``FOLD_ROWS`` rows, in
order with the other signals; a fold that raises drops its messages, each
counted as ``bad_values``."""

from __future__ import annotations

import asyncio
from typing import Any

import pyarrow as pa
import pytest

from exporter.bus import Bus, BusConfig
from exporter.natsserver import EmbeddedNats
from exporter.schema import ITERATION_SPAN
from stream_analytics import consumer
from stream_analytics.consumer import AnalyticsConsumer
from tests.support import synthetic_kernel_spans


def _iteration(t0: int, t1: int) -> pa.Table:
    cols = {f.name: pa.nulls(1, f.type) for f in ITERATION_SPAN}
    cols |= {"start_ns": pa.array([t0], pa.int64()), "end_ns": pa.array([t1], pa.int64()),
             "duration_ns": pa.array([t1 - t0], pa.int64()),
             "source": pa.array(["ort"]).dictionary_encode(),
             "model": pa.array(["m"]).dictionary_encode(), "pid": pa.array([42], pa.int64()),
             "iteration": pa.array([0], pa.int64()), "kernel_count": pa.array([50], pa.int64())}
    return pa.table(cols).cast(ITERATION_SPAN)


async def _run(url: str, fail_rows: int | None) -> tuple[int, list[tuple[str, int]], Any, int]:
    """Publish 5 kernel messages (10 spans each), an iteration, 2 more kernel
    messages, then fold them in one step; returns (messages fetched, the
    engine's ingest calls as (signal, rows), drops, kernel spans in the
    result). ``fail_rows``: an ingest of that many kernel rows raises."""
    bus = await Bus.open(url, BusConfig(), "h")
    try:
        c = AnalyticsConsumer(bus, durable=f"fold{fail_rows}", window_s=None, checkpoint=False,
                              hosts=["h"])
        await c.start()
        calls: list[tuple[str, int]] = []
        ingest = c.engine.ingest

        def spy(signal: str, host: str, batch: pa.Table | pa.RecordBatch) -> None:
            calls.append((signal, batch.num_rows))
            if signal == "kernel_span" and batch.num_rows == fail_rows:
                raise ValueError("a bad batch")
            ingest(signal, host, batch)

        c.engine.ingest = spy  # type: ignore[method-assign]
        for i in range(5):
            await bus.publish_table("kernel_span",
                                    synthetic_kernel_spans(10, 100 * i, model=["m"] * 10), f"k{i}")
        await bus.publish_table("iteration_span", _iteration(0, 1000), "it")
        for i in range(5, 7):
            await bus.publish_table("kernel_span",
                                    synthetic_kernel_spans(10, 100 * i, model=["m"] * 10), f"k{i}")
        fetched = await c.step(timeout=2.0)
        await c.drain(caught_up=True)
        total = sum(int(r["kernel_spans_total"]) for r in c.engine.results().to_pylist())
        return fetched, calls, dict(c.drops), total
    finally:
        await bus.close()


def test_consecutive_kernel_messages_are_folded_as_one_table(nats_server: EmbeddedNats) -> None:
    """8 messages in one fetch reach the engine as 3 ingests, in their order:
    the 5 kernel messages before the iteration as one table of 50 rows, the
    iteration, the 2 after it as 20 rows; all 70 spans are counted."""
    fetched, calls, drops, total = asyncio.run(_run(nats_server.url, None))
    assert fetched == 8
    assert calls == [("kernel_span", 50), ("iteration_span", 1), ("kernel_span", 20)]
    assert drops == {}
    assert total == 70


def test_a_fold_that_raises_drops_and_counts_each_of_its_messages(
        nats_server: EmbeddedNats) -> None:
    """When the ingest of the 5-message group raises, those 5 messages are
    counted as ``bad_values`` drops; the messages after it are still folded."""
    fetched, calls, drops, total = asyncio.run(_run(nats_server.url, 50))
    assert fetched == 8
    assert calls == [("kernel_span", 50), ("iteration_span", 1), ("kernel_span", 20)]
    assert drops == {"bad_values": 5}
    assert total == 20


def test_a_fold_takes_at_most_fold_rows_kernels(nats_server: EmbeddedNats,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``FOLD_ROWS`` = 30 the 5 kernel messages of 10 rows before the
    iteration are folded as 30 + 20 rows; nothing is lost."""
    monkeypatch.setattr(consumer, "FOLD_ROWS", 30)
    fetched, calls, drops, total = asyncio.run(_run(nats_server.url, None))
    assert fetched == 8
    assert calls == [("kernel_span", 30), ("kernel_span", 20), ("iteration_span", 1),
                     ("kernel_span", 20)]
    assert (drops, total) == ({}, 70)
