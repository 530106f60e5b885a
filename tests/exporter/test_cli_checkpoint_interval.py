"""``run --checkpoint-interval`` (and its ``[run]`` key): the daemon's analytics
durable gets the matching ``ack_wait`` and a checkpoint at exit (real
nats-server), and an interval the duplicate window cannot cover is refused."""

from __future__ import annotations

import asyncio
import json
import socket
import zlib
from pathlib import Path

from typer.testing import CliRunner

from exporter import schema
from exporter.bus import Bus, BusConfig
from exporter.cli import app
from exporter.natsserver import EmbeddedNats
from stream_analytics.consumer import ack_wait_s


def test_run_refuses_a_checkpoint_interval_beyond_the_duplicate_window() -> None:
    """2 x (100 + 1) + 10 = 212 s > the default 120 s window: exit 2, one line
    naming both flags and the window needed."""
    r = CliRunner().invoke(app, ["run", "--checkpoint-interval", "100", "--metrics-addr",
                                 "127.0.0.1:0", "--duration", "0"])
    assert r.exit_code == 2
    assert "--checkpoint-interval 100 with --flush-interval 1" in r.output
    assert "at least 212 s (--nats-duplicate-window is 120)" in r.output


def test_the_analytics_worker_refuses_a_checkpoint_interval_beyond_the_window() -> None:
    """``analytics --checkpoint-interval 60``: 2 x 61 + 10 = 132 s > 120 s, exit 2
    before connecting (the URL is never dialled)."""
    r = CliRunner().invoke(app, ["analytics", "--nats", "nats://127.0.0.1:1",
                                 "--checkpoint-interval", "60"])
    assert r.exit_code == 2
    assert "--checkpoint-interval 60 with --flush-interval 1" in r.output
    assert "at least 132 s (the stream's is 120)" in r.output


def test_the_checkpoint_interval_config_key_is_checked_like_the_flag(tmp_path: Path) -> None:
    """``[run] checkpoint_interval = 250`` is the flag's value: refused the same way."""
    conf = tmp_path / "aaco.toml"
    conf.write_text("[run]\ncheckpoint_interval = 250.0\n")
    r = CliRunner().invoke(app, ["run", "--config", str(conf)])
    assert r.exit_code == 2
    assert "--checkpoint-interval 250 with --flush-interval 1" in r.output


async def _durable_state(url: str, durable: str) -> tuple[float, int]:
    """(ack_wait in s, generation in the KV checkpoint) of ``durable``."""
    bus = await Bus.open(url, BusConfig(), "probe")
    try:
        info = await bus.js.consumer_info("AACO", durable)
        kv = await bus.js.key_value("aaco_analytics")
        doc = json.loads(zlib.decompress((await kv.get(durable)).value))
        return float(info.config.ack_wait or 0), int(doc["generation"])
    finally:
        await bus.close()


def test_run_checkpoint_interval_sets_ack_wait_and_checkpoints_at_exit(
        tmp_path: Path) -> None:
    """``run --checkpoint-interval 100 --nats-duplicate-window 300 --duration 3``
    (a window that covers the interval): it runs, the host's durable has
    ack_wait 100 + 1 + 10 = 111 s, and the checkpoint written at stop holds at
    least one flush (the sched samples of the watched pid 1)."""
    host = schema.sanitize_token(socket.gethostname())
    with EmbeddedNats(tmp_path / "nats") as srv:
        r = CliRunner().invoke(app, ["run", "--nats", srv.url, "--checkpoint-interval", "100",
                                     "--nats-duplicate-window", "300",
                                     "--watch", "none", "--pid", "1",
                                     "--metrics-addr", "127.0.0.1:0", "--duration", "3",
                                     "--log-level", "WARNING"])
        assert r.exit_code == 0, r.output
        ack_wait, generation = asyncio.run(_durable_state(srv.url, f"aaco-analytics-{host}"))
    assert ack_wait == ack_wait_s(100.0, 1.0) == 111.0
    assert generation >= 1
