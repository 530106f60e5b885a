"""Two analytics workers share the hosts of a partitioned stream: every host
is evaluated by exactly one of them and nothing is counted twice."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa
import pytest

from exporter import schema
from exporter.bus import Bus, BusConfig
from exporter.natsserver import EmbeddedNats
from stream_analytics.consumer import AnalyticsConsumer

HOSTS = [f"gpu-node-{i}" for i in range(8)]


def _host_data(i: int) -> tuple[pa.Table, pa.Table]:
    """Synthetic spans: host i runs 3 + i iterations of 4 kernels each."""
    its = 3 + i
    k = pa.table({"start_ns": [it * 1000 + j * 100 for it in range(its) for j in range(4)],
                  "end_ns": [it * 1000 + j * 100 + 50 for it in range(its) for j in range(4)],
                  "duration_ns": [50] * (4 * its), "source": ["ort"] * (4 * its),
                  "model": ["m"] * (4 * its), "pid": [100] * (4 * its),
                  "kernel_name": ["k"] * (4 * its), "kernel_family": ["gemm"] * (4 * its),
                  "iteration": [it for it in range(its) for _ in range(4)]})
    t = pa.table({"start_ns": [it * 1000 for it in range(its)],
                  "end_ns": [it * 1000 + 400 for it in range(its)],
                  "duration_ns": [400] * its, "source": ["ort"] * its, "model": ["m"] * its,
                  "pid": [100] * its, "iteration": list(range(its)),
                  "kernel_count": [4] * its})
    return k, t


async def _run(url: str) -> tuple[list[set[str]], dict[str, int]]:
    cfg = BusConfig(partitions=4)
    pubs = [await Bus.open(url, cfg, h) for h in HOSTS]
    for i, bus in enumerate(pubs):
        k, t = _host_data(i)
        await bus.publish_table("kernel_span", k, f"{HOSTS[i]}:k")
        await bus.publish_table("iteration_span", t, f"{HOSTS[i]}:i")
    workers = []
    for k in range(2):
        bus = await Bus.open(url, cfg, f"worker-{k}")
        c = AnalyticsConsumer(bus, durable=f"share-{k}", window_s=None, instance=k,
                              instances=2)
        await c.start()
        workers.append((bus, c))
    await asyncio.gather(*(c.drain() for _, c in workers))
    owned = [{key[0] for key in c.engine.keys} for _, c in workers]
    totals: dict[str, int] = {}
    reader = workers[0][0]
    sub = await reader.js.pull_subscribe("aaco.v1.analytics_result.>", durable=None,
                                         stream="AACO")
    while True:  # every result in stream order; the last per host wins
        try:
            msgs = await sub.fetch(100, timeout=1)
        except Exception:
            break
        for m in msgs:
            for row in schema.decode(m.data, m.headers)[3].to_pylist():
                totals[row["host"]] = row["kernel_spans_total"]
    for bus in [*pubs, *(b for b, _ in workers)]:
        await bus.close()
    return owned, totals


def test_two_workers_split_hosts_without_double_counting(tmp_path: Path) -> None:
    with EmbeddedNats(tmp_path / "nats") as srv:
        owned, totals = asyncio.run(_run(srv.url))
    assert owned[0] and owned[1], "both workers got a share"
    assert owned[0].isdisjoint(owned[1])
    assert owned[0] | owned[1] == {schema.sanitize_token(h) for h in HOSTS}
    # every result carries the host's exact cumulative count
    assert totals == {schema.sanitize_token(h): 4 * (3 + i) for i, h in enumerate(HOSTS)}


def test_more_workers_than_partitions_is_refused(tmp_path: Path) -> None:
    async def go(url: str) -> None:
        bus = await Bus.open(url, BusConfig(partitions=2), "h")
        try:
            c = AnalyticsConsumer(bus, durable="x", instance=0, instances=3)
            with pytest.raises(ValueError, match="at least as many partitions"):
                await c.start()
        finally:
            await bus.close()

    with EmbeddedNats(tmp_path / "nats") as srv:
        asyncio.run(go(srv.url))


def test_a_client_without_partitions_keeps_a_partitioned_stream_and_its_host_filter(
        tmp_path: Path) -> None:
    """A node daemon's bus (partitions unset) opened on an operator's
    partitioned stream keeps the partition transform, learns N, and its
    host-scoped consumer still folds exactly its own host's messages."""

    async def go(url: str) -> tuple[int, int, int]:
        await (await Bus.open(url, BusConfig(partitions=4), "operator")).close()
        node = await Bus.open(url, BusConfig(), HOSTS[2])
        other = await Bus.open(url, BusConfig(), HOSTS[3])
        for i, bus in ((2, node), (3, other)):
            k, t = _host_data(i)
            await bus.publish_table("kernel_span", k, f"{HOSTS[i]}:k")
            await bus.publish_table("iteration_span", t, f"{HOSTS[i]}:i")
        info = await node.js.stream_info("AACO")
        c = AnalyticsConsumer(node, durable="node", window_s=None, hosts=[HOSTS[2]])
        await c.start()
        await c.drain()
        its = sum(st.iterations_total for st in c.engine.keys.values())
        await node.close()
        await other.close()
        assert info.config.subject_transform is not None
        return node.cfg.partitions, its, len({k[0] for k in c.engine.keys})

    with EmbeddedNats(tmp_path / "nats") as srv:
        partitions, iterations, hosts = asyncio.run(go(srv.url))
    assert (partitions, iterations, hosts) == (4, 3 + 2, 1)
