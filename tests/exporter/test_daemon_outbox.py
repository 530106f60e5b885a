"""The daemon through a bus outage: a real nats-server SIGKILLed and restarted."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from exporter.natsserver import EmbeddedNats, free_port
from tests.support import scrape_metrics

Metrics = dict[str, list[tuple[dict[str, str], float]]]


def _one(m: Metrics, name: str) -> float | None:
    got = m.get(name)
    return got[0][1] if got else None


def _wait(port: int, ok: Callable[[Metrics], bool], what: str, timeout: float = 90) -> Metrics:
    """Scrape until ``ok`` holds (the condition, not a sleep, decides)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            m = scrape_metrics(port)
            if ok(m):
                return m
        except OSError:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


@pytest.mark.slow
def test_the_daemon_holds_messages_while_the_bus_is_down_and_publishes_them_after(
        tmp_path: Path, cli_env: dict[str, str], aaco: str) -> None:
    """`run --model magika --nats URL --state-dir D`: with the server killed,
    /metrics shows messages held in the outbox; after the restart on the same
    port and store they are published (held back to 0, redelivered > 0) and
    none was dropped."""
    srv = EmbeddedNats(tmp_path / "nats", port=free_port())
    srv.start()
    port = free_port()
    proc = subprocess.Popen(
        [aaco, "run", "--model", "magika", "--nats", srv.url, "--metrics-addr",
         f"127.0.0.1:{port}", "--state-dir", str(tmp_path / "state"), "--watch", "none",
         "--log-level", "WARNING"], env=cli_env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        _wait(port, lambda m: _one(m, "aaco_outbox_held_messages") == 0, "/metrics")
        assert srv.proc is not None
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(10)
        srv.proc = None
        _wait(port, lambda m: (_one(m, "aaco_outbox_held_messages") or 0) > 0, "held messages")
        srv.start()
        m = _wait(port, lambda m: _one(m, "aaco_outbox_held_messages") == 0
                  and (_one(m, "aaco_outbox_redelivered_messages_total") or 0) > 0,
                  "the outbox to drain")
        assert all(v == 0 for _, v in m["aaco_outbox_dropped_messages_total"])
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        srv.stop()
