"""nats-py is imported without aiohttp (issue 14: daemon RSS), and ws:// still works."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from exporter.natsserver import EmbeddedNats

ROOT = Path(__file__).resolve().parents[2]


def _fresh(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip()


def test_importing_the_cli_and_the_consumer_leaves_aiohttp_unimported() -> None:
    """With aiohttp installed (the dev extra's kubernetes brings it), ``exporter.cli``
    and ``stream_analytics.consumer`` import nats-py but not aiohttp; a later
    ``import aiohttp`` by anyone else still works."""
    assert importlib.util.find_spec("aiohttp") is not None, "the dev extra installs aiohttp"
    for mod in ("exporter.cli", "stream_analytics.consumer"):
        got = _fresh(f"""
            import sys, {mod}
            before = ("nats.aio.client" in sys.modules, "aiohttp" in sys.modules)
            import aiohttp
            print(before, "aiohttp" in sys.modules)
        """)
        assert got == "(True, False) True", (mod, got)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_ws_url_connects_through_nats_servers_websocket_listener(tmp_path: Path) -> None:
    """A ``ws://`` server URL: ``connect`` gives nats-py its aiohttp back and a
    message published over the WebSocket reaches a subscriber on it."""
    port = _free_port()
    conf = f'websocket {{ listen: "127.0.0.1:{port}", no_tls: true }}'
    with EmbeddedNats(tmp_path / "nats", extra_config=conf):
        got = _fresh(f"""
            import asyncio, sys
            from exporter.bus import BusConfig, connect
            assert "aiohttp" not in sys.modules
            async def main():
                nc = await connect("ws://127.0.0.1:{port}", BusConfig(connect_attempts=2))
                sub = await nc.subscribe("aaco.test.ws")
                await nc.publish("aaco.test.ws", b"over-websocket")
                msg = await sub.next_msg(timeout=5)
                await nc.close()
                return msg.data.decode()
            print(asyncio.run(main()))
        """)
    assert got == "over-websocket"
