"""BundleSink against a real nats-server: kernel spans spooled to Parquet, and
messages the stream deleted before the sink read them counted, not lost silently."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from exporter.bus import Bus, BusConfig
from exporter.natsserver import EmbeddedNats
from exporter.schema import KERNEL_SPAN
from exporter.sinks.bundle import BundleSink


def _kernels(n: int, t0: int) -> pa.Table:
    cols = {f.name: pa.nulls(n, f.type) for f in KERNEL_SPAN}
    cols |= {"start_ns": pa.array(range(t0, t0 + n), pa.int64()),
             "end_ns": pa.array(range(t0 + 1, t0 + n + 1), pa.int64()),
             "duration_ns": pa.array([1] * n, pa.int64()),
             "source": pa.array(["rocprofv3"] * n).dictionary_encode(),
             "kernel_name": pa.array([f"k{i % 7}" for i in range(n)]).dictionary_encode(),
             "kernel_family": pa.array(["gemm"] * n).dictionary_encode()}
    return pa.table(cols).cast(KERNEL_SPAN)


def test_sink_spools_kernels_to_parquet_and_counts_messages_the_stream_dropped(
        nats_server: EmbeddedNats, tmp_path: Path) -> None:
    """With a stream of ~64 kB, 40 messages of ~4 kB published before the sink
    reads leave only the newest; the sink counts the deleted ones as
    ``stream_gap`` drops and writes the rows it got to kernels.parquet."""

    async def go() -> tuple[int, int, int]:
        bus = await Bus.open(nats_server.url, BusConfig(max_bytes=64 * 1024), "h")
        sink = BundleSink(bus, None, spool_dir=tmp_path / "spool")
        await sink.start()
        await bus.publish_table("kernel_span", _kernels(10, 0), "first")
        assert await sink.step(timeout=1.0) == 1  # the sink has seen sequence 1
        for i in range(40):
            await bus.publish_table("kernel_span", _kernels(300, 1000 * (i + 1)), f"k{i}")
        info = await bus.js.stream_info("AACO")
        got = 0
        while (n := await sink.step(timeout=0.5)) > 0:
            got += n
        counts = sink.write(tmp_path / "bundle")
        await bus.close()
        first_kept = int(info.state.first_seq)
        assert counts["kernel_span"] == sink.rows["kernel_span"]
        return sink.drops["stream_gap"], first_kept, got

    gap, first_kept, got = asyncio.run(go())
    assert first_kept > 2  # the stream did delete unread messages
    assert gap == first_kept - 2  # sequences 2 .. first_kept-1 never reached the sink
    assert got == 41 - first_kept + 1
    t = pq.read_table(tmp_path / "bundle/profiler/kernels.parquet")
    assert t.num_rows == 10 + 300 * got


def test_caught_up_drains_of_sink_and_analytics_read_everything_without_an_empty_fetch(
        nats_server: EmbeddedNats, tmp_path: Path) -> None:
    """After the publisher has finished (a session's drain), ``caught_up=True``:
    the analytics consumer folds in and the sink spools every kernel row, and
    neither waits for an empty 0.2 s fetch to learn it is done (the idle
    polls cost 0.6 s of every replay); the analytics results it publishes at
    the end reach the sink too."""
    from stream_analytics.consumer import AnalyticsConsumer

    async def go() -> tuple[int, int, list[int], list[int], int]:
        bus = await Bus.open(nats_server.url, BusConfig(), "h")
        sink = BundleSink(bus, None, spool_dir=tmp_path / "spool")
        await sink.start()
        con = AnalyticsConsumer(bus, durable="drain-test", window_s=None, checkpoint=False)
        await con.start()
        for i in range(25):
            await bus.publish_table("kernel_span", _kernels(400, 1000 * i), f"d{i}")
        fetched: dict[str, list[int]] = {"sink": [], "analytics": []}
        for name, obj in (("sink", sink), ("analytics", con)):
            step = obj.step

            async def counted(timeout: float = 0.2, _s=step, _n=name) -> int:  # type: ignore[no-untyped-def]
                n = await _s(timeout=timeout)
                fetched[_n].append(n)
                return int(n)

            obj.step = counted  # type: ignore[method-assign]
        await con.drain(caught_up=True)
        await sink.drain(caught_up=True)
        folded = sum(st.kernel_spans_total for st in con.engine.keys.values())
        await bus.close()
        return (sink.rows["kernel_span"], folded, fetched["sink"],
                fetched["analytics"], sink.rows["analytics_result"])

    sink_rows, folded, sink_fetches, an_fetches, results = asyncio.run(go())
    assert sink_rows == folded == 25 * 400
    assert 0 not in sink_fetches and 0 not in an_fetches
    assert results >= 1  # the results the consumer published at the end
