"""Pipeline with a publish interval, against a real nats-server: the real gpu
collector (rocm-smi test double printing the real 4x MI100 recording,
collectors/gpu/testdata/PROVENANCE.md) and the real /proc scheduler collector
on this process. Messages are counted on the stream over a fixed number of
collect() calls, never over time."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pyarrow as pa
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from collectors.base import Collector, CollectorContext, create
from exporter import schema
from exporter.bus import Bus, BusConfig
from exporter.natsserver import EmbeddedNats
from exporter.pipeline import Pipeline

TD = Path(__file__).resolve().parents[2] / "collectors" / "gpu" / "testdata"
CALLS = 10


async def _count(bus: Bus, subject: str) -> int:
    info = await bus.js.stream_info("AACO", subjects_filter=subject)
    return int((info.state.subjects or {}).get(subject, 0))


async def _stored(bus: Bus, subject: str) -> list[pa.RecordBatch]:
    """Every stored message of ``subject``, decoded, in stream order."""
    n = await _count(bus, subject)
    sub = await bus.js.pull_subscribe(subject, durable=None, stream="AACO",
                                      config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL,
                                                            ack_policy=AckPolicy.NONE))
    out: list[pa.RecordBatch] = []
    while len(out) < n:
        out += [schema.decode(m.data, m.headers)[3] for m in await sub.fetch(n - len(out), 5)]
    await sub.unsubscribe()
    return out


def _collectors(host: str) -> list[Collector]:
    pids = {os.getpid()}
    smi = {"source": "rocm-smi", "rocm_smi": str(TD / "smi_ok_synthetic.sh")}
    return [create("gpu", CollectorContext(host, pids, smi, lambda _: None)),
            create("proc", CollectorContext(host, pids, {}, lambda _: None))]


async def _run(url: str, host: str, interval: float, calls: int) -> tuple[list[int], Pipeline]:
    """``calls`` collect() of each collector; the gauge messages stored after each call."""
    pipe = Pipeline(host, BusConfig(url=url), publish_interval_s=interval)
    await pipe.open()
    for c in _collectors(host):
        pipe.add(c)
        if c.name == "proc":
            c.collect()  # prime its deltas: the first sample is empty (as capture does)
    after: list[int] = []
    for _ in range(calls):
        for c in pipe.collectors:
            await pipe.collect_once(c)
        after.append(await _count(pipe.bus, schema.subject("gauge_sample", host)))  # type: ignore[arg-type]
    return after, pipe


@pytest.fixture(autouse=True)
def _smi_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SMI_FIXTURE", str(TD / "smi/telegraf/mi100_rocm602.json"))


def test_held_samples_cut_messages_and_keep_every_row(nats_server: EmbeddedNats) -> None:
    """Over 10 collect() calls of gpu and proc: without an interval 10 gauge and
    10 sched messages; with one, the first sample of each at once (1 message
    after the first call, still 1 after the tenth), then one message each
    holding the 9 held samples (9 distinct ts_ns) at publish_held(); a sample
    collected after that is published by close(). Same rows either way."""

    async def go() -> None:
        plain_after, plain = await _run(nats_server.url, "plain", 0.0, CALLS)
        assert plain_after == list(range(1, CALLS + 1))
        held_after, pipe = await _run(nats_server.url, "held", 5.0, CALLS)
        assert held_after == [1] * CALLS
        assert len(pipe.buffer) == 2 * (CALLS - 1)
        assert await pipe.publish_held() == 2
        assert pipe.bus is not None
        gs, ss = schema.subject("gauge_sample", "held"), schema.subject("sched_sample", "held")
        assert (await _count(pipe.bus, gs), await _count(pipe.bus, ss)) == (2, 2)
        first, rest = await _stored(pipe.bus, gs)
        assert len(set(rest.column("ts_ns").to_pylist())) == CALLS - 1
        assert rest.num_rows == (CALLS - 1) * first.num_rows
        for c in pipe.collectors:  # held, then published at stop
            await pipe.collect_once(c)
        bus = pipe.bus
        probe = await Bus.open(nats_server.url, BusConfig(url=nats_server.url), "probe")
        await pipe.close()
        assert (await _count(probe, gs), await _count(probe, ss)) == (3, 3)
        held_rows = sum(b.num_rows for b in await _stored(probe, gs))
        plain_rows = sum(b.num_rows for b in await _stored(probe, schema.subject(
            "gauge_sample", "plain")))
        assert held_rows == plain_rows * (CALLS + 1) // CALLS
        assert bus.published_messages == 6 and plain.bus is not None
        assert plain.bus.published_messages == 2 * CALLS
        await plain.close()
        await probe.close()

    asyncio.run(go())


def test_spans_are_never_held(nats_server: EmbeddedNats) -> None:
    """A collector returning iteration spans publishes every call at once,
    publish interval or not: 5 calls, 5 messages, nothing held."""

    class Spans:
        name, source, interval_s = "spans", "synthetic", 1.0

        def __init__(self) -> None:
            self.n = 0

        def collect(self) -> list[object]:
            from collectors.base import Emit
            self.n += 1
            t = pa.table({"start_ns": [self.n], "end_ns": [self.n + 1], "duration_ns": [1],
                          "source": ["ort"], "model": ["m"], "pid": [1],
                          "iteration": [self.n], "kernel_count": [0]})
            return [Emit("iteration_span", t, f"s:{self.n}")]

        def close(self) -> None:
            return None

    async def go() -> None:
        pipe = Pipeline("spans", BusConfig(url=nats_server.url), publish_interval_s=5.0)
        bus = await pipe.open()
        c = Spans()
        pipe.add(c)  # type: ignore[arg-type]
        for i in range(5):
            await pipe.collect_once(c)  # type: ignore[arg-type]
            assert await _count(bus, schema.subject("iteration_span", "spans")) == i + 1
        assert len(pipe.buffer) == 0
        await pipe.close()

    asyncio.run(go())
