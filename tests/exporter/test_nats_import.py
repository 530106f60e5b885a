"""Start-up: importing the bus (nats-py) does not import nats-py's optional aiohttp
(about 0.15 s, used only by its WebSocket transport), and a ``ws://`` bus URL
still connects through that transport (a real nats-server websocket listener)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.natsserver import EmbeddedNats, free_port

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_bus_leaves_aiohttp_unimported_and_importable() -> None:
    """In a fresh interpreter, ``exporter.bus`` (which imports nats-py) loads
    no aiohttp module, and ``import aiohttp`` works afterwards."""
    pytest.importorskip("aiohttp")
    code = ("import sys, exporter.bus\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'aiohttp'))\n"
            "import aiohttp\n"
            "print(aiohttp.__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, env={"PYTHONPATH": str(ROOT)}).stdout
    assert out.splitlines() == ["[]", "aiohttp"]


def test_ws_url_connects_through_the_websocket_transport(tmp_path: Path) -> None:
    """``exporter.bus.connect`` with a ``ws://`` URL (nats-server's websocket
    listener) gets aiohttp back into nats-py and round-trips one message."""
    pytest.importorskip("aiohttp")
    from exporter.bus import BusConfig, connect

    ws = free_port()
    conf = f"websocket {{ listen: \"127.0.0.1:{ws}\"\n no_tls: true }}"

    async def go(url: str) -> bytes:
        nc = await connect(url, BusConfig(connect_attempts=1))
        try:
            sub = await nc.subscribe("t.ws")
            await nc.publish("t.ws", b"over websocket")
            msg = await sub.next_msg(timeout=5)
            return bytes(msg.data)
        finally:
            await nc.close()

    with EmbeddedNats(tmp_path / "nats", extra_config=conf):
        assert asyncio.run(go(f"ws://127.0.0.1:{ws}")) == b"over websocket"
