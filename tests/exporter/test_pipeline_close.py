"""Pipeline.close: once, and the embedded nats-server stops even when closing
the bus connection fails (a session closes its pipeline as soon as its
readers have drained, and again on its way out)."""

from __future__ import annotations

import asyncio

import pytest

from exporter.busconfig import BusConfig
from exporter.pipeline import Pipeline


def test_close_twice_closes_once_and_a_failing_bus_close_still_stops_the_server(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The bus connection's close raises: the error reaches the caller, the
    embedded server has stopped anyway, and a second close does nothing."""

    async def go() -> tuple[bool, bool, int]:
        pipe = Pipeline("host", BusConfig(), session="t")
        bus = await pipe.open()
        server = pipe.server
        assert server is not None and server.proc is not None
        calls = 0
        real = bus.close

        async def failing() -> None:
            nonlocal calls
            calls += 1
            await real()
            raise RuntimeError("bus close failed")

        monkeypatch.setattr(bus, "close", failing)
        with pytest.raises(RuntimeError, match="bus close failed"):
            await pipe.close()
        stopped = server.proc is None
        await pipe.close()  # once: the failing close is not called again
        return stopped, pipe.closed, calls

    stopped, closed, calls = asyncio.run(go())
    assert stopped and closed and calls == 1
