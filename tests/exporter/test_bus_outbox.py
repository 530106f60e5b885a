"""The bus outbox against a real nats-server that is SIGKILLed and restarted."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import nats.errors
import pyarrow as pa
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from exporter import schema
from exporter.bus import Bus, BusConfig
from exporter.natsserver import EmbeddedNats, free_port
from exporter.pipeline import Pipeline

WINDOW_S = 1.0


def _iters(first: int, n: int) -> pa.Table:
    return pa.table({"start_ns": [0] * n, "end_ns": [1] * n, "duration_ns": [1] * n,
                     "source": ["ort"] * n, "model": ["m"] * n, "pid": [1] * n,
                     "iteration": list(range(first, first + n)), "kernel_count": [0] * n})


async def _stored(bus: Bus) -> tuple[list[str], list[int]]:
    """Every stored message's id and its first iteration, in stream order."""
    sub = await bus.js.pull_subscribe("aaco.v1.>", durable=None, stream="AACO",
                                      config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL,
                                                            ack_policy=AckPolicy.NONE))
    ids, firsts = [], []
    n = int((await bus.js.stream_info("AACO")).state.messages)
    while len(ids) < n:
        for m in await sub.fetch(n - len(ids), timeout=5):
            ids.append(m.headers["Nats-Msg-Id"])
            firsts.append(schema.decode(m.data, m.headers)[3].column("iteration")[0].as_py())
    await sub.unsubscribe()
    return ids, firsts


def _kill(srv: EmbeddedNats) -> None:
    assert srv.proc is not None
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait(10)
    srv.proc = None


@pytest.mark.slow
def test_a_stored_message_whose_ack_was_lost_is_not_doubled_after_a_long_outage(
        tmp_path: Path) -> None:
    """The stream stored b:0 but the bus never saw its ack, so it is held with
    the ack floor of its attempt. The server is killed; more batches are
    published (held, in order); the outage outlasts the 1 s duplicate window.
    After the restart the outbox publishes everything in order and skips b:0,
    which the stream already has: each id once, iterations in order. Control:
    a plain re-publish of b:0 afterwards is stored again, so the duplicate
    window alone would have doubled it."""
    srv = EmbeddedNats(tmp_path / "nats", port=free_port())
    srv.start()

    async def go() -> None:
        cfg = BusConfig(duplicate_window_s=WINDOW_S, outbox_dir=str(tmp_path / "spool"),
                        outbox_memory_bytes=600)  # later held messages spill to disk
        bus = await Bus.open(srv.url, cfg, "h")
        await bus.publish_table("iteration_span", _iters(0, 3), "a")  # acked
        real = bus.js.publish

        async def ack_lost(*args: Any, **kw: Any) -> Any:
            await real(*args, **kw)  # the stream stores it ...
            raise nats.errors.TimeoutError  # ... and the client sees no ack

        bus.js.publish = ack_lost  # type: ignore[method-assign]
        await bus.publish_table("iteration_span", _iters(3, 3), "b")
        bus.js.publish = real  # type: ignore[method-assign]
        assert len(bus.outbox) == 1
        lost = bus.outbox.peek()
        assert lost is not None
        await asyncio.to_thread(_kill, srv)
        while bus.nc.is_connected:
            await asyncio.sleep(0.02)
        for i in range(2, 8):  # held behind b:0, in order
            await bus.publish_table("iteration_span", _iters(3 * i, 3), f"c{i}")
        assert len(bus.outbox) == 7 and bus.outbox.spilled > 0
        pipe = Pipeline("h", cfg)
        pipe.bus = bus
        held = {m.name: m.samples[0].value for m in pipe.outbox_metrics()
                if m.name.startswith("aaco_outbox_held")}
        assert held == {"aaco_outbox_held_messages": 7,
                        "aaco_outbox_held_bytes": bus.outbox.held_bytes}
        await asyncio.sleep(WINDOW_S + 1.0)
        await asyncio.to_thread(srv.start)
        assert await bus.flush_outbox(60) == 0
        ids, firsts = await _stored(bus)
        assert ids == ["a:0", "b:0"] + [f"c{i}:0" for i in range(2, 8)]
        assert firsts == [3 * i for i in range(8)]
        assert (bus.already_stored, bus.redelivered) == (1, 6)
        assert not list((tmp_path / "spool").glob("*.msg"))
        ack = await bus.js.publish(lost.subject, lost.payload, headers=lost.headers)
        assert not ack.duplicate  # the window had passed: only the scan kept b:0 single
        await bus.close()

    try:
        asyncio.run(go())
    finally:
        srv.stop()


@pytest.mark.slow
def test_past_the_cap_drops_are_counted_and_exported_by_reason(tmp_path: Path) -> None:
    """With the server down and a cap of two messages, the third and later are
    dropped as outbox_full, shown on aaco_outbox_dropped_messages_total (and
    as outbox_full on aaco_exporter_events_dropped_total); the
    two held ones are published after the restart."""
    srv = EmbeddedNats(tmp_path / "nats", port=free_port())
    srv.start()

    async def go() -> None:
        one = next(schema.encode_chunks("iteration_span", _iters(0, 3), host="h",
                                        msg_id_prefix="x"))
        size = len(one.payload) + len(one.subject) + sum(
            len(k) + len(v) for k, v in one.headers.items())
        cfg = BusConfig(outbox_max_bytes=2 * size + 10)
        bus = await Bus.open(srv.url, cfg, "h")
        await asyncio.to_thread(_kill, srv)
        while bus.nc.is_connected:
            await asyncio.sleep(0.02)
        for i in range(5):
            await bus.publish_table("iteration_span", _iters(3 * i, 3), f"x{i}")
        pipe = Pipeline("h", cfg)
        pipe.bus = bus
        fams = {m.name: m for m in pipe.health_metrics()}
        dropped = {s.labels["reason"]: s.value
                   for s in fams["aaco_outbox_dropped_messages"].samples}
        assert dropped == {"outbox_full": 3, "spool_error": 0, "rejected": 0}
        events = {s.labels["reason"]: s.value
                  for s in fams["aaco_exporter_events_dropped"].samples}
        assert events["outbox_full"] == 3  # AacoEventsDropped fires on it too
        await asyncio.to_thread(srv.start)
        assert await bus.flush_outbox(60) == 0
        ids, _ = await _stored(bus)
        assert ids == ["x0:0", "x1:0"]
        await bus.close()

    try:
        asyncio.run(go())
    finally:
        srv.stop()


@pytest.mark.slow
def test_what_is_held_at_exit_is_kept_in_the_state_spool_and_sent_by_the_next_run(
        tmp_path: Path) -> None:
    """A bus closed while the server is down writes its held messages to the
    persistent spool (outbox_dir); the next Bus.open on that spool publishes
    them, in order, once the server is back, and empties the spool."""
    srv = EmbeddedNats(tmp_path / "nats", port=free_port())
    srv.start()
    spool = tmp_path / "state" / "outbox"

    async def first() -> None:
        bus = await Bus.open(srv.url, BusConfig(outbox_dir=str(spool)), "h")
        await asyncio.to_thread(_kill, srv)
        while bus.nc.is_connected:
            await asyncio.sleep(0.02)
        for i in range(4):
            await bus.publish_table("iteration_span", _iters(3 * i, 3), f"p{i}")
        await bus.close()
        assert not bus.outbox.dropped

    async def second() -> None:
        bus = await Bus.open(srv.url, BusConfig(outbox_dir=str(spool)), "h")
        assert await bus.flush_outbox(60) == 0
        ids, firsts = await _stored(bus)
        assert ids == [f"p{i}:0" for i in range(4)] and firsts == [0, 3, 6, 9]
        await bus.close()

    try:
        asyncio.run(first())
        assert len(list(spool.glob("*.msg"))) == 4
        srv.start()
        asyncio.run(second())
        assert list(spool.glob("*.msg")) == []
    finally:
        srv.stop()
