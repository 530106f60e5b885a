"""Session.write_trace_bundle drains and writes the bundle: the trace's
kernel slices are written while the analytics consumer settles, its counters
wait for the final results, and a failure on either side is raised."""

from __future__ import annotations

import asyncio
import io
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from rich.console import Console
from rich.progress import Progress

from collectors.base import Emit
from collectors.rocprof.rejects import Rejects
from exporter.bus import BusConfig
from exporter.natsserver import EmbeddedNats
from exporter.session import Session
from exporter.sinks import bundle as bundle_mod
from tests.support import synthetic_kernel_spans


def _kernels(n: int) -> pa.Table:
    return synthetic_kernel_spans(n, step=10, duration=5)


async def _bundle(url: str, out: Path, drain: Any = None,
                  progress: Progress | None = None) -> dict[str, Any]:
    s = await Session.open("replay", BusConfig(url=url))
    s.progress = progress
    try:
        await s.publish(iter([Emit("kernel_span", _kernels(500), "k")]))
        if drain is not None:
            real = s.consumer.drain
            s.consumer.drain = lambda **kw: drain(real, **kw)  # type: ignore[method-assign]
        return await asyncio.wait_for(
            s.write_trace_bundle(out, {"kind": "test"}, Rejects()), timeout=120)
    finally:
        await s.close()
        s.sink.discard()


def test_the_trace_starts_while_analytics_settles(
        nats_server: EmbeddedNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The analytics consumer's drain (its settle) here waits until the trace
    has started: with the trace written after the drain, as before, it would
    wait in vain. The trace's counters still get the final results."""
    started = threading.Event()
    seen: list[int] = []
    real_write = bundle_mod.write_kernel_outputs

    def write(*a: Any, **kw: Any) -> None:
        started.set()
        analytics = a[2]
        real_write(*a[:2], lambda: _keep(analytics()), *a[3:], **kw)

    def _keep(t: pa.Table | None) -> pa.Table | None:
        seen.append(0 if t is None else t.num_rows)
        return t

    async def drain(real: Any, **kw: Any) -> None:
        assert await asyncio.to_thread(started.wait, 60), "the trace did not start"
        await real(**kw)

    monkeypatch.setattr(bundle_mod, "write_kernel_outputs", write)
    derived = asyncio.run(_bundle(nats_server.url, tmp_path / "b", drain))
    assert derived["kernel_count_total"] == 500
    assert seen == [1]  # the counters got the one final result row
    assert (tmp_path / "b/trace.pftrace").stat().st_size > 0


def test_a_failed_settle_is_raised_and_stops_the_trace(
        nats_server: EmbeddedNats, tmp_path: Path) -> None:
    """The analytics consumer's drain fails after the trace has started: the
    trace, waiting for the final results, stops, and the drain's error is
    raised (not a hang, not the trace's own error)."""

    async def drain(real: Any, **kw: Any) -> None:
        await asyncio.sleep(0.2)
        raise RuntimeError("settle failed")

    with pytest.raises(RuntimeError, match="settle failed"):
        asyncio.run(_bundle(nats_server.url, tmp_path / "b", drain))


def test_the_trace_bar_counts_every_kernel_row(nats_server: EmbeddedNats,
                                               tmp_path: Path) -> None:
    """The ``trace.pftrace`` progress bar's total is the session's kernel rows
    (known once the bundle sink has read every input; it showed a quarter of
    them when taken earlier) and it ends complete."""
    progress = Progress(console=Console(file=io.StringIO(), force_terminal=True))
    asyncio.run(_bundle(nats_server.url, tmp_path / "b", progress=progress))
    bars = {t.description: t for t in progress.tasks}
    assert (bars["trace.pftrace"].total, bars["trace.pftrace"].completed) == (500, 500)


def test_the_embedded_server_stops_once_drained_and_the_bundle_still_records_it(
        tmp_path: Path) -> None:
    """With the embedded nats-server, write_trace_bundle closes the pipeline
    as soon as everything published is read (while the trace is written): the
    server has stopped when it returns, session.json still has the server's
    peak RSS and every kernel, and the session's close afterwards does
    nothing more."""
    import json

    async def go() -> tuple[dict[str, Any], bool, bool]:
        s = await Session.open("replay", BusConfig())
        server = s.pipe.server
        assert server is not None and server.proc is not None
        try:
            await s.publish(iter([Emit("kernel_span", _kernels(500), "k")]))
            derived = await s.write_trace_bundle(tmp_path / "b", {"kind": "test"}, Rejects())
            stopped = server.proc is None
        finally:
            await s.close()
            s.sink.discard()
        return derived, stopped, s.pipe.closed

    derived, stopped, closed = asyncio.run(go())
    assert stopped and closed
    assert derived["kernel_count_total"] == 500
    info = json.loads((tmp_path / "b/session.json").read_text())
    assert info["rows"]["kernel_span"] == 500
    assert info["peak_rss_bytes"]["nats_server"] > 0
    assert info["shortfall"] is None
