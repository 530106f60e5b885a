"""The JetStream bus against a real nats-server."""

from __future__ import annotations

import asyncio
import time

import pyarrow as pa
import pytest

from exporter.bus import Bus, BusConfig, BusError, connect
from exporter.natsserver import EmbeddedNats, free_port


def _iters(n: int) -> pa.Table:
    return pa.table({"start_ns": [0] * n, "end_ns": [1] * n, "duration_ns": [1] * n,
                     "source": ["ort"] * n, "model": ["m"] * n, "pid": [1] * n,
                     "iteration": list(range(n)), "kernel_count": [0] * n})


def test_republished_message_ids_are_stored_once(nats_server: EmbeddedNats) -> None:
    """JetStream's duplicate window drops a re-publish of the same key."""

    async def go() -> int:
        bus = await Bus.open(nats_server.url, BusConfig(), "host-a")
        await bus.publish_table("iteration_span", _iters(3), "run1:0")
        await bus.publish_table("iteration_span", _iters(3), "run1:0")
        await bus.publish_table("iteration_span", _iters(3), "run1:1")
        info = await bus.js.stream_info("AACO")
        await bus.close()
        return int(info.state.messages)

    assert asyncio.run(go()) == 2


def test_stream_is_created_with_limits_retention(nats_server: EmbeddedNats) -> None:
    async def go() -> tuple[list[str], float]:
        bus = await Bus.open(nats_server.url, BusConfig(max_age_s=120), "h")
        info = await bus.js.stream_info("AACO")
        await bus.close()
        return list(info.config.subjects or []), float(info.config.max_age or 0)

    subjects, max_age = asyncio.run(go())
    assert subjects == ["aaco.v1.>"]
    assert max_age == pytest.approx(120)


def test_unreachable_url_fails_clearly_after_bounded_retries() -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    cfg = BusConfig(connect_attempts=3, connect_timeout_s=0.5)
    t0 = time.monotonic()
    with pytest.raises(BusError, match=f"cannot reach NATS at {url} after 3 attempts"):
        asyncio.run(connect(url, cfg))
    assert time.monotonic() - t0 < 15


def test_publish_whose_ack_times_out_is_sent_again_and_stored_once(
        nats_server: EmbeddedNats) -> None:
    """A publish stored by the server whose ack is lost (TimeoutError) goes to the
    outbox, which finds it stored and does not send it again: one message in
    the stream, counted as already stored."""
    from nats.errors import TimeoutError as NatsTimeoutError

    async def go() -> tuple[int, int]:
        bus = await Bus.open(nats_server.url, BusConfig(), "host-a")
        real = bus.js.publish
        calls = 0

        async def lossy(*a: object, **k: object) -> object:
            nonlocal calls
            calls += 1
            ack = await real(*a, **k)  # type: ignore[arg-type]
            if calls == 1:
                raise NatsTimeoutError
            return ack

        bus.js.publish = lossy  # type: ignore[method-assign]
        await bus.publish_table("iteration_span", _iters(3), "lossy:0")
        assert await bus.flush_outbox() == 0
        info = await bus.js.stream_info("AACO")
        await bus.close()
        return bus.already_stored, int(info.state.messages)

    assert asyncio.run(go()) == (1, 1)
