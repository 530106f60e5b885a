"""A session's two readers (bundle sink, analytics consumer) read while it
publishes: their work overlaps the parser's, they stay within MAX_LAG
messages of the publisher, and a fetch is never cancelled under them."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pyarrow as pa
import pytest

from collectors.base import Emit
from exporter import session as session_mod
from exporter.bus import BusConfig
from exporter.natsserver import EmbeddedNats
from exporter.phases import Phases
from exporter.session import Session, _Readers
from tests.support import synthetic_kernel_spans


def _kernels(n: int, t0: int) -> pa.Table:
    return synthetic_kernel_spans(n, t0, kernel_name=[f"k{i % 7}" for i in range(n)])


def _emits(n: int) -> Iterator[Emit]:
    for i in range(n):
        yield Emit("kernel_span", _kernels(50, 1000 * i), f"k{i}")


def test_readers_take_messages_while_the_parser_is_still_producing(
        nats_server: EmbeddedNats, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parser (here: an iterator that, after READ_BEHIND + READ_BATCH
    batches, waits for both readers to have taken one) runs in a worker thread while the
    event loop keeps the readers fetching, with no lag limit forcing them:
    the publisher is not stopped to let them catch up. Before, readers only
    read once 128 messages were behind, and this parser waited in vain."""
    monkeypatch.setattr(session_mod, "READ_BEHIND", 1)
    first = 1 + session_mod.READ_BATCH  # a full fetch then leaves the readers 1 behind

    async def go() -> tuple[bool, int, int]:
        s = await Session.open("replay", BusConfig(url=nats_server.url))
        seen_in_time = threading.Event()

        def parser() -> Iterator[Emit]:
            for i in range(first):
                yield Emit("kernel_span", _kernels(50, 10**6 * (i + 1)), f"first{i}")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if s.sink.rows["kernel_span"] and s.consumer.received["kernel_span"]:
                    seen_in_time.set()
                    break
                time.sleep(0.01)
            yield from _emits(5)

        try:
            rows = await s.publish(parser())
            await s.drain()
        finally:
            await s.close()
        return seen_in_time.is_set(), rows, s.sink.rows["kernel_span"]

    seen, rows, spooled = asyncio.run(go())
    assert seen
    assert rows == spooled == 50 * (first + 5)


def test_publisher_stays_within_max_lag_of_both_readers(
        nats_server: EmbeddedNats, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whenever the publisher asks the parser for its next batch, each reader
    has taken all but at most MAX_LAG of the messages published (one per
    batch here; the readers' READ_BEHIND, 64, is cut to MAX_LAG, else the
    two would wait for each other); every row reaches the bundle and the
    analytics, whose
    results are published once, from all of it (the consumer holds them
    while the session publishes: their count does not depend on how the
    reads interleaved with the publisher)."""
    monkeypatch.setattr(session_mod, "MAX_LAG", 2)
    worst: list[int] = []

    async def go() -> tuple[int, int, int, int]:
        s = await Session.open("replay", BusConfig(url=nats_server.url))

        def parser() -> Iterator[Emit]:
            for i, e in enumerate(_emits(30)):
                if i:  # i messages published so far
                    worst.append(max(i - s.sink.rows["kernel_span"] // 50,
                                     i - s.consumer.received["kernel_span"]))
                yield e

        try:
            rows = await s.publish(parser())
            await s.drain()
        finally:
            await s.close()
        return rows, s.sink.rows["kernel_span"], sum(
            int(r["kernel_spans_total"]) for r in s.final_results()), s.sink.table(
            "analytics_result").num_rows

    rows, spooled, analysed, results = asyncio.run(go())
    assert len(worst) == 29 and max(worst) <= 2
    assert rows == spooled == analysed == 50 * 30
    assert results == 1


def _readers(sink_step: object, consumer_step: object) -> _Readers:
    """Readers over fake steps, with the publisher far ahead (READ_BEHIND met)."""
    s = SimpleNamespace(phases=Phases(), sink=SimpleNamespace(step=sink_step),
                        consumer=SimpleNamespace(step=consumer_step))
    r = _Readers(s)  # type: ignore[arg-type]
    r.published = 10**9
    return r


def test_a_readers_exception_is_raised_to_the_publisher() -> None:
    """A reader that fails (a bug, not a bus error: those are retried inside
    step) makes keep_up raise that exception instead of waiting forever."""

    async def bad(timeout: float) -> int:
        raise RuntimeError("fold failed")

    async def ok(timeout: float) -> int:
        await asyncio.sleep(timeout)
        return 1

    async def go() -> None:
        async with _readers(ok, bad) as r:
            await r.keep_up(10_000)

    with pytest.raises(RuntimeError, match="fold failed"):
        asyncio.run(go())


def test_leaving_lets_a_fetch_in_flight_finish_and_never_cancels_it() -> None:
    """nats-py throws away what a cancelled fetch had received, so the
    readers stop only between fetches: a step still waiting when the
    publisher is done completes, and its messages are counted."""
    state = {"finished": 0, "cancelled": 0}

    async def go() -> dict[str, int]:
        gate = asyncio.Event()

        async def slow(timeout: float) -> int:
            try:
                await gate.wait()
            except asyncio.CancelledError:
                state["cancelled"] += 1
                raise
            state["finished"] += 1
            return 3

        async def quick(timeout: float) -> int:
            await asyncio.sleep(0.001)
            return 0

        r = _readers(slow, quick)
        async with r:
            await asyncio.sleep(0.05)
            asyncio.get_running_loop().call_later(0.1, gate.set)
        return {**state, "seen": r.seen["sink"]}

    out = asyncio.run(go())
    assert out == {"finished": 1, "cancelled": 0, "seen": 3}


def test_keep_up_gives_up_on_a_reader_that_fetches_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader behind by more than MAX_LAG whose fetches come back empty
    GIVE_UP_EMPTY times in a row no longer holds the publisher (it counts
    what the stream deleted as stream_gap drops); a reader that takes
    messages is waited for until it is within MAX_LAG."""
    monkeypatch.setattr(session_mod, "GIVE_UP_EMPTY", 5)
    monkeypatch.setattr(session_mod, "MAX_LAG", 10)

    async def empty(timeout: float) -> int:
        await asyncio.sleep(0)
        return 0

    async def reading(timeout: float) -> int:
        await asyncio.sleep(0)
        return 1

    async def go() -> tuple[int, int]:
        r = _readers(empty, reading)
        async with r:
            await r.keep_up(100)
            return r.empty["sink"], r.seen["analytics"]

    empties, read = asyncio.run(go())
    assert empties >= 5
    assert read >= 90


def test_readers_read_at_the_head_only_for_their_first_read_behind_messages(
        nats_server: EmbeddedNats, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the session publishes, a reader takes messages at the head of
    the stream (READ_BATCH waiting) until it has READ_BEHIND of them; after
    that it never takes a message fewer than READ_BEHIND behind the
    publisher (readers at the head throughout made the embedded
    nats-server's memory grow with the input). Here the parser, 3 messages
    in, waits until both readers have taken one: with the readers
    READ_BEHIND behind from the start it would wait in vain. The drain reads
    the rest, and every row arrives."""
    monkeypatch.setattr(session_mod, "READ_BEHIND", 5)
    monkeypatch.setattr(session_mod, "READ_BATCH", 2)
    over: list[tuple[int, int]] = []
    at_head = threading.Event()

    async def go() -> tuple[int, int]:
        s = await Session.open("replay", BusConfig(url=nats_server.url))

        def seen() -> tuple[int, int]:
            return s.sink.rows["kernel_span"] // 50, s.consumer.received["kernel_span"]

        def parser() -> Iterator[Emit]:
            for i, e in enumerate(_emits(40)):
                if i == 3:
                    deadline = time.monotonic() + 20
                    while time.monotonic() < deadline and not all(seen()):
                        time.sleep(0.01)
                    if all(seen()):
                        at_head.set()
                # i messages published: at most the first 5 + one fetch of 2, or 5 behind
                over.extend((i, n) for n in seen() if n > max(i - 5, 5 - 1 + 2))
                yield e

        try:
            rows = await s.publish(parser())
            during = s.sink.rows["kernel_span"] // 50
            await s.drain()
        finally:
            await s.close()
        return during, rows - s.sink.rows["kernel_span"]

    during, missing = asyncio.run(go())
    assert at_head.is_set()
    assert over == []
    assert during > 6 and missing == 0
