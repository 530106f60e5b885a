"""Stream replicas and server lists against one real nats-server (the cluster
cases are in test_bus_cluster.py)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from exporter.bus import Bus, BusConfig, BusError
from exporter.cli import app
from exporter.natsserver import EmbeddedNats, free_port


def _iters(n: int) -> pa.Table:
    return pa.table({"start_ns": [0] * n, "end_ns": [1] * n, "duration_ns": [1] * n,
                     "source": ["ort"] * n, "model": ["m"] * n, "pid": [1] * n,
                     "iteration": list(range(n)), "kernel_count": [0] * n})


def test_refused_replica_change_is_one_log_line_and_the_stream_keeps_working(
        nats_server: EmbeddedNats, caplog: pytest.LogCaptureFixture) -> None:
    """On a single server an existing one-replica stream asked for 3 keeps 1,
    says why in one WARNING line, and still takes messages."""

    async def go() -> tuple[int, int]:
        first = await Bus.open(nats_server.url, BusConfig(), "h")
        assert first.replicas == 1
        await first.close()
        bus = await Bus.open(nats_server.url, BusConfig(stream_replicas=3), "h")
        await bus.publish_table("iteration_span", _iters(2), "r:0")
        info = await bus.js.stream_info("AACO")
        await bus.close()
        return bus.replicas, int(info.state.messages)

    with caplog.at_level(logging.INFO, logger="aaco.bus"):
        assert asyncio.run(go()) == (1, 1)
    lines = [r.getMessage() for r in caplog.records if r.name == "aaco.bus"]
    assert len(lines) == 1, lines
    assert "stream AACO keeps 1 replica(s), not 3" in lines[0]
    assert "non-clustered" in lines[0]  # the server's own reason


def test_new_three_replica_stream_on_a_single_server_is_a_bus_error(
        nats_server: EmbeddedNats) -> None:
    """Creating a replicas=3 stream where the server cannot is a BusError
    that names the stream, the count and the server's reason."""
    with pytest.raises(BusError, match=r"stream AACO with 3 replica\(s\): replicas > 1 not "
                                       r"supported in non-clustered mode"):
        asyncio.run(Bus.open(nats_server.url, BusConfig(stream_replicas=3), "h"))


def test_comma_separated_url_fails_over_to_the_next_server(tmp_path: Path) -> None:
    """``nats://dead,nats://alive``: the bus connects to the server that is up."""
    dead = f"nats://127.0.0.1:{free_port()}"

    async def go(url: str) -> int | None:
        bus = await Bus.open(url, BusConfig(url=url, connect_attempts=2), "h")
        port = bus.nc.connected_url.port if bus.nc.connected_url else None
        await bus.close()
        return port

    with EmbeddedNats(tmp_path / "nats") as srv:
        assert asyncio.run(go(f"{dead}, {srv.url}")) == srv.port


def test_run_refuses_replicas_above_one_with_the_embedded_server() -> None:
    """``run --stream-replicas 3`` without ``--nats`` exits 2 with one line
    saying that the embedded nats-server is a single node."""
    r = CliRunner().invoke(app, ["run", "--stream-replicas", "3", "--metrics-addr",
                                 "127.0.0.1:0", "--duration", "0"])
    assert r.exit_code == 2
    assert "--stream-replicas 3 needs --nats with a JetStream cluster" in r.output
    assert "single node" in r.output
