"""A bad checkpoint in the real KV bucket never stops the analytics worker:
it is refused (a pickle in it is never executed), counted as
drops["bad_checkpoint"], and the worker starts fresh and runs (real nats-server)."""

from __future__ import annotations

import asyncio
import json
import zlib
from pathlib import Path

import pyarrow as pa
from nats.js.api import KeyValueConfig

from exporter import schema
from exporter.bus import Bus, BusConfig
from exporter.natsserver import EmbeddedNats
from stream_analytics import checkpoint
from stream_analytics.consumer import KV_BUCKET, AnalyticsConsumer
from tests.stream_analytics.test_checkpoint import pickled_legacy_checkpoint

DURABLE = "ckpt-test"


def _iteration(i: int) -> pa.Table:
    f = schema.ITERATION_SPAN
    row = {n: None for n in f.names}
    row.update(source="test", pid=1, model="m", iteration=i, start_ns=i * 10**6,
               end_ns=i * 10**6 + 5 * 10**5, duration_ns=5 * 10**5, kernel_count=0)
    return pa.Table.from_pylist([row], schema=f)


async def _start_with(url: str, raw: bytes) -> tuple[AnalyticsConsumer, bytes]:
    bus = await Bus.open(url, BusConfig(), "kvhost")
    try:
        kv = await bus.js.create_key_value(KeyValueConfig(bucket=KV_BUCKET, history=1))
        await kv.put(DURABLE, raw)
        c = AnalyticsConsumer(bus, durable=DURABLE, flush_interval_s=0)
        await c.start()
        for i in range(1, 4):
            await bus.publish_table("iteration_span", _iteration(i), f"it{i}")
        for _ in range(20):
            await c.step(timeout=0.2)
            if c.received["iteration_span"] >= 3 and not c._unacked:
                break
        saved = (await kv.get(DURABLE)).value
        return c, saved
    finally:
        await bus.close()


def test_pickled_checkpoint_in_kv_is_refused_and_worker_runs(tmp_path: Path) -> None:
    """Marker absent, one bad_checkpoint drop, inputs folded in, v3 checkpoint saved."""
    marker = tmp_path / "pwned"
    with EmbeddedNats(tmp_path / "nats") as srv:
        c, saved = asyncio.run(_start_with(srv.url, pickled_legacy_checkpoint(marker)))
    assert not marker.exists()
    assert c.drops["bad_checkpoint"] == 1
    assert c.received["iteration_span"] == 3 and c.last_seq >= 3
    doc = json.loads(zlib.decompress(saved))
    assert (doc["format"], doc["version"]) == (checkpoint.FORMAT, checkpoint.VERSION)
    assert checkpoint.decode(saved)["drops"]["bad_checkpoint"] == 1


def test_garbage_checkpoint_in_kv_is_refused_and_worker_runs(tmp_path: Path) -> None:
    """Bytes that are not a checkpoint at all: counted once, fresh start."""
    with EmbeddedNats(tmp_path / "nats") as srv:
        c, _ = asyncio.run(_start_with(srv.url, b"\x80\x04garbage"))
    assert c.drops["bad_checkpoint"] == 1
    assert c.received["iteration_span"] == 3


def test_valid_checkpoint_in_kv_resumes(tmp_path: Path) -> None:
    """A valid v3 checkpoint resumes: its sequences and drops are kept."""
    from stream_analytics.engine import Analytics
    from stream_analytics.verdicts import OnlineVerdicts

    raw = checkpoint.encode({"engine": Analytics().to_dict(), "last_seq": 0, "processed": [],
                             "generation": 5, "drops": {"bad_values": 2},
                             "verdicts": OnlineVerdicts().to_dict()})
    with EmbeddedNats(tmp_path / "nats") as srv:
        c, _ = asyncio.run(_start_with(srv.url, raw))
    assert c.drops["bad_values"] == 2 and "bad_checkpoint" not in c.drops
    assert c.generation > 5
