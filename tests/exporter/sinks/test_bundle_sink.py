"""BundleSink against a real nats-server: kernel spans spooled to Parquet, and
messages the stream deleted before the sink read them counted, not lost silently."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

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


def test_bundle_keeps_generate_calls_from_the_bus_and_derives_the_llm_tables(
        nats_server: EmbeddedNats, tmp_path: Path) -> None:
    """generate_span rows of an instrumented process the capture did not start
    are written to llm/generate_spans.parquet, and finish() derives the llm/
    tables from them: one generates row per call, one steps row per token step,
    the summary's token total equal to the sum of the published step tokens."""
    from exporter.sinks.bundle import finish

    calls = pa.table({
        "generate_id": [0, 1, 2], "model": ["m", "m", "n"], "pid": [7, 7, 8],
        "tid": [7, 7, 8], "batch_size": [2, 2, 1], "start_ns": [0, 100, 200],
        "end_ns": [50, 180, 260],
        "step_ns": [[10, 20, 30], [120, 150], [210]],
        "step_tokens": [[2, 2, 1], [2, 2], [1]], "error": [None, None, None]})

    async def go() -> BundleSink:
        bus = await Bus.open(nats_server.url, BusConfig(), "h")
        sink = BundleSink(bus, None, spool_dir=tmp_path / "spool")
        await sink.start()
        await bus.publish_table("generate_span", calls, "m")
        await sink.drain()
        await bus.close()
        return sink

    sink = asyncio.run(go())
    out = tmp_path / "bundle"
    counts = sink.write(out)
    assert counts["generate_span"] == 3
    assert "gauge_sample" not in counts  # no gauges arrived: no empty file
    finish(out, sink, None)
    assert pq.read_table(out / "llm/generate_spans.parquet").num_rows == 3
    assert pq.read_table(out / "llm/generates.parquet").column("generate_id").to_pylist() \
        == [0, 1, 2]
    assert pq.read_table(out / "llm/generate_steps.parquet").num_rows == 6
    import json
    summary = json.loads((out / "llm/llm_summary.json").read_text())
    assert summary["generates"] == 3 and summary["tokens"] == 10


def test_bundle_without_generate_calls_has_no_llm_directory(
        nats_server: EmbeddedNats, tmp_path: Path) -> None:
    """A session whose bus carried no generate_span rows writes no llm/ files."""
    from exporter.sinks.bundle import finish

    async def go() -> BundleSink:
        bus = await Bus.open(nats_server.url, BusConfig(), "h")
        sink = BundleSink(bus, None, spool_dir=tmp_path / "spool")
        await sink.start()
        await bus.publish_table("kernel_span", _kernels(5, 0), "k")
        await sink.drain()
        await bus.close()
        return sink

    sink = asyncio.run(go())
    out = tmp_path / "bundle"
    assert "generate_span" not in sink.write(out)
    finish(out, sink, None)
    assert not (out / "llm").exists()


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


def test_a_fetch_failing_with_a_lost_connection_is_retried_and_loses_nothing(
        nats_server: EmbeddedNats, tmp_path: Path) -> None:
    """A fetch raising ConnectionResetError (nats-py's inline flush when the
    connection drops mid-request) makes step() return 0 and count a bus
    error instead of ending the capture; the next step reads every row."""

    async def go() -> tuple[int, int, int]:
        bus = await Bus.open(nats_server.url, BusConfig(), "h")
        sink = BundleSink(bus, None, spool_dir=tmp_path / "spool")
        await sink.start()
        await bus.publish_table("kernel_span", _kernels(10, 0), "k")
        real = sink._sub.fetch
        calls = 0

        async def flaky(*a: object, **kw: object) -> object:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise ConnectionResetError("Connection lost")
            return await real(*a, **kw)

        sink._sub.fetch = flaky
        first = await sink.step(timeout=1.0)
        await sink.drain()
        await bus.close()
        return first, sink.bus_errors, sink.rows["kernel_span"]

    first, errors, rows = asyncio.run(go())
    assert (first, errors, rows) == (0, 1, 10)


def test_spool_writer_thread_keeps_row_groups_in_arrival_order(tmp_path: Path) -> None:
    """Row groups written by the spool's worker thread (several waiting at
    once) come out in the order the batches arrived: every row, once, in order;
    each of ROW_GROUP_ROWS rows but the last."""
    from exporter.sinks import bundle

    sp = bundle._Spool(tmp_path / "k.parquet", KERNEL_SPAN)
    n, step = 0, 50_000  # not a divisor of ROW_GROUP_ROWS: most adds cross a boundary
    for i in range(12):
        sp.add(_kernels(step, i * step).to_batches()[0])
        n += step
    t = pq.read_table(sp.close())
    assert t.num_rows == n == sp.rows
    assert t.column("start_ns").to_pylist() == list(range(n))
    md = pq.ParquetFile(sp.path).metadata
    sizes = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
    # every row group but the last is ROW_GROUP_ROWS rows: batches split at the boundary
    assert sizes[:-1] == [bundle.ROW_GROUP_ROWS] * (n // bundle.ROW_GROUP_ROWS)
    assert sizes[-1] == n % bundle.ROW_GROUP_ROWS


def test_kernel_spool_row_groups_have_statistics_on_times_and_ids_not_on_strings(
        tmp_path: Path) -> None:
    """Each row group of the kernel spool carries min/max statistics for the
    columns of STATS_COLUMNS (a reader prunes row groups by time or id), equal
    to the row group's own minimum and maximum; the dictionary-encoded string
    columns have none."""
    from exporter.sinks import bundle

    sp = bundle._Spool(tmp_path / "k.parquet", KERNEL_SPAN, "kernel_span")
    n = bundle.ROW_GROUP_ROWS + 1000
    sp.add(_kernels(n, 5).to_batches()[0])
    md = pq.ParquetFile(sp.close()).metadata
    names = md.schema.to_arrow_schema().names
    assert md.num_row_groups == 2
    for g, (lo, hi) in enumerate([(5, 5 + bundle.ROW_GROUP_ROWS - 1), (5 + bundle.ROW_GROUP_ROWS,
                                                                      5 + n - 1)]):
        rg = md.row_group(g)
        st = rg.column(names.index("start_ns")).statistics
        assert st is not None and (st.min, st.max) == (lo, hi)
        have = {c for c in names if rg.column(names.index(c)).statistics is not None}
        assert have == set(bundle.STATS_COLUMNS["kernel_span"])
        assert "kernel_name" not in have

def test_spool_keeps_kernel_names_dictionary_encoded_across_batches_with_their_own_dictionaries(
        tmp_path: Path) -> None:
    """Batches decoded from separate bus messages each carry their own
    dictionary (other names, another order). A row group made of several of
    them is written with one dictionary page and dictionary indices, not with
    every row's name spelled out (Parquet's writer falls back to plain values
    when a column chunk's dictionaries differ). The names read back are
    the same, row for row."""
    from exporter.sinks import bundle

    long = "void ck::kernel_gemm_xdl_cshuffle_v3<" + "x" * 200
    names = [f"{long}{i}>" for i in range(6)]
    sp = bundle._Spool(tmp_path / "k.parquet", KERNEL_SPAN)
    step = bundle.ROW_GROUP_ROWS // 4
    want: list[str] = []
    for b in range(8):
        t = _kernels(step, b * step)
        part = [names[(b + i % (2 + b % 3)) % 6] for i in range(step)]  # own subset, own order
        want += part
        t = t.set_column(t.schema.get_field_index("kernel_name"), KERNEL_SPAN.field("kernel_name"),
                         pa.array(part).dictionary_encode())
        sp.add(t.to_batches()[0])
    path = sp.close()
    md = pq.ParquetFile(path).metadata
    col = md.schema.to_arrow_schema().get_field_index("kernel_name")
    assert md.num_row_groups == 2
    for g in range(md.num_row_groups):
        chunk = md.row_group(g).column(col)
        assert chunk.has_dictionary_page
        # indices and one dictionary page: far less than the names spelled out (~210 B a row)
        assert chunk.total_uncompressed_size < 4 * chunk.num_values, chunk.total_uncompressed_size
    assert pq.read_table(path, columns=["kernel_name"]).column(0).to_pylist() == want


def test_spool_write_error_is_raised_by_close(tmp_path: Path) -> None:
    """A row group the worker thread cannot write (its directory is gone) raises
    at close, not silently."""
    import shutil

    import pytest

    from exporter.sinks import bundle

    d = tmp_path / "gone"
    d.mkdir()
    sp = bundle._Spool(d / "k.parquet", KERNEL_SPAN)
    shutil.rmtree(d)
    sp.add(_kernels(10, 0).to_batches()[0])
    with pytest.raises(OSError):
        sp.close()


def test_session_readers_fetch_less_than_the_servers_pending_limit() -> None:
    """The analytics consumer and the bundle sink of a session read side by
    side on one connection: both fetches at their largest (READ_BATCH
    messages of at most max_payload_bytes each) stay below nats-server's
    default 64 MiB max_pending, beyond which it drops the connection."""
    from exporter.session import READ_BATCH

    assert 2 * READ_BATCH * BusConfig().max_payload_bytes < 64 << 20


def test_preimport_trace_imports_the_trace_modules_and_leaves_a_missing_one_to_the_trace(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The trace's modules are imported ahead of the trace (in a worker thread
    while the readers drain); one that cannot be imported (an extra not
    installed) raises nothing there: write_kernel_outputs reports it."""
    import sys

    from exporter.sinks import bundle

    monkeypatch.setattr(bundle, "TRACE_MODULES",
                        ("aaco_no_such_module_for_the_test", "email.mime.text"))
    monkeypatch.delitem(sys.modules, "email.mime.text", raising=False)
    bundle.preimport_trace()
    assert "email.mime.text" in sys.modules
    assert "aaco_no_such_module_for_the_test" not in sys.modules
