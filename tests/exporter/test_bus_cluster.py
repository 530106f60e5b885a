"""The bus on a real three-node JetStream cluster (three nats-server processes
on loopback): replicas follow ``stream_replicas``, and SIGKILLing the stream
leader mid-stream loses no message and doubles none.

The data is synthetic (kernel and iteration spans made here)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import nats.errors
import pyarrow as pa
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import APIError

from exporter import schema
from exporter.bus import Bus, BusConfig
from stream_analytics.consumer import KV_BUCKET, AnalyticsConsumer
from tests.nats_cluster import NatsCluster, move_leader

pytestmark = pytest.mark.slow

HOST = "cluster-host"
PID = 4242
MODEL = "synthetic-cluster"
ITERS = 150  # one kernel_span and one iteration_span message per iteration
KILL_AFTER = 100  # messages acknowledged before the stream leader is killed
WAIT_S = 90.0  # bound of every condition wait
INPUTS = [f"{schema.SUBJECT_PREFIX}.{s}.>" for s in ("kernel_span", "iteration_span")]


def _iteration(i: int) -> tuple[pa.Table, pa.Table]:
    """Iteration ``i``: ``1 + i % 5`` kernel spans inside one iteration span."""
    k = 1 + i % 5
    t0 = 1_000_000_000 + i * 10_000_000
    starts = [t0 + 1_000 + j * 100_000 for j in range(k)]
    kernels = pa.table({
        "start_ns": starts, "end_ns": [s + 50_000 for s in starts],
        "duration_ns": [50_000] * k, "source": ["synthetic"] * k, "model": [MODEL] * k,
        "pid": [PID] * k, "device_type": ["gpu"] * k, "kernel_name": [f"k{j}" for j in range(k)],
        "kernel_family": ["gemm"] * k, "iteration": [i] * k,
    })
    it = pa.table({
        "start_ns": [t0], "end_ns": [t0 + 1_000_000], "duration_ns": [1_000_000],
        "source": ["synthetic"], "model": [MODEL], "pid": [PID], "iteration": [i],
        "kernel_count": [k],
    })
    return kernels, it


async def _until(cond: Callable[[], Awaitable[bool]], what: str,
                 timeout_s: float = WAIT_S) -> None:
    """Poll the async predicate ``cond`` until true; fail after ``timeout_s``.
    A bus error while the cluster fails over counts as not yet."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if await cond():
                return
        except (nats.errors.Error, APIError, TimeoutError):
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


class RetryingPublisher:
    """The project's publish path (:meth:`Bus.publish_table`, deterministic
    message ids) with bounded retries: a publish that fails while the stream
    elects a leader or the client reconnects is sent again with the same id
    (JetStream stores it once), never dropped."""

    def __init__(self, bus: Bus, attempts: int = 60, max_delay_s: float = 1.0) -> None:
        self.bus, self.attempts, self.max_delay_s = bus, attempts, max_delay_s
        self.retries = 0
        self.errors: Counter[str] = Counter()

    async def publish(self, signal: str, table: pa.Table, key: str) -> None:
        delay = 0.05
        for attempt in range(self.attempts):
            try:
                await self.bus.publish_table(signal, table, key)
                return
            except (nats.errors.Error, APIError, TimeoutError) as e:
                if attempt + 1 == self.attempts:
                    raise
                self.retries += 1
                self.errors[type(e).__name__] += 1
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_delay_s)


async def _stored_ids(bus: Bus) -> Counter[str]:
    """``Nats-Msg-Id`` of every input message the stream holds, with counts
    (read through an ephemeral consumer until nothing is pending)."""
    sub = await bus.js.pull_subscribe("", stream=bus.cfg.stream, config=ConsumerConfig(
        ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL, filter_subjects=INPUTS))
    ids: Counter[str] = Counter()
    deadline = time.monotonic() + WAIT_S
    try:
        while True:
            try:
                msgs = await sub.fetch(100, timeout=1)
            except TimeoutError:  # nats-py's and asyncio's
                msgs = []
            ids.update((m.headers or {})[schema.H_MSG_ID] for m in msgs)
            if not msgs and (await sub.consumer_info()).num_pending == 0:
                return ids
            assert time.monotonic() < deadline, "timed out reading the stream"
    finally:
        await sub.unsubscribe()


def test_sigkilled_stream_leader_loses_and_doubles_nothing(tmp_path: Path) -> None:
    """A stream with replicas=3 keeps every message exactly once across a
    SIGKILL of its leader mid-stream: the client (given all three URLs)
    reconnects, publishes failing during the election are retried with the
    same ids, and the durable analytics consumer folds in each message once."""
    with NatsCluster(tmp_path) as cl:
        asyncio.run(_leader_kill(cl))


async def _leader_kill(cl: NatsCluster) -> None:
    await cl.wait_jetstream()
    bus = await Bus.open(cl.url, BusConfig(url=cl.url, stream_replicas=3), HOST)
    assert bus.replicas == 3
    consumer = AnalyticsConsumer(bus, durable="cluster-test", window_s=None, batch=8,
                                 flush_interval_s=0.0)
    await consumer.start()
    ci = await bus.js.consumer_info(bus.cfg.stream, "cluster-test")
    kv = await bus.js.stream_info(f"KV_{KV_BUCKET}")
    assert (ci.config.num_replicas, kv.config.num_replicas) == (3, 3)
    # The leader is the server the client is connected to, so the kill
    # forces both a leader election and a client reconnect.
    assert bus.nc.connected_url is not None and bus.nc.connected_url.port is not None
    victim = cl.name_of_port(bus.nc.connected_url.port)
    await move_leader(bus.nc, bus.cfg.stream, victim)
    await bus.wait_leader(bus.cfg.stream, 3)

    stop = asyncio.Event()
    reader = asyncio.create_task(consumer.run(stop))
    pub = RetryingPublisher(bus)
    data = [_iteration(i) for i in range(ITERS)]
    sent = 0
    for i, (kernels, it) in enumerate(data[: KILL_AFTER // 2]):
        await pub.publish("kernel_span", kernels, f"k{i}")
        await pub.publish("iteration_span", it, f"i{i}")
        sent += 2
    assert sent == KILL_AFTER and pub.retries == 0

    async def consumer_reading() -> bool:
        return consumer.received["kernel_span"] >= 10
    await _until(consumer_reading, "the consumer to read before the kill")
    killed_at = time.monotonic()
    cl.kill(victim)
    first_ok: float | None = None
    for i, (kernels, it) in enumerate(data[KILL_AFTER // 2:], start=KILL_AFTER // 2):
        await pub.publish("kernel_span", kernels, f"k{i}")
        first_ok = first_ok or time.monotonic()
        await pub.publish("iteration_span", it, f"i{i}")
    assert first_ok is not None
    outage_s = first_ok - killed_at

    async def new_leader() -> bool:
        info = await bus.js.stream_info(bus.cfg.stream)
        return info.cluster is not None and info.cluster.leader not in (None, victim)
    await _until(new_leader, "a new stream leader")
    assert bus.nc.connected_url is not None
    assert cl.name_of_port(bus.nc.connected_url.port or 0) != victim, "client did not move"

    async def all_read() -> bool:
        return (consumer.received["kernel_span"] + consumer.received["iteration_span"]
                >= 2 * ITERS and await consumer.pending() == 0)
    await _until(all_read, "the consumer to read every message")
    stop.set()
    await asyncio.wait_for(reader, WAIT_S)

    ids = await _stored_ids(bus)
    info = await bus.js.stream_info(bus.cfg.stream, subjects_filter=f"{schema.SUBJECT_PREFIX}.>")
    per_subject = info.state.subjects or {}  # the stream's own count, by subject
    assert {s: n for s, n in per_subject.items() if "_span." in s} == {
        schema.subject("kernel_span", HOST): ITERS, schema.subject("iteration_span", HOST): ITERS}
    expected = {f"{p}{i}:0" for p in "ki" for i in range(ITERS)}
    assert set(ids) == expected, f"lost {sorted(expected - set(ids))[:5]}"
    assert max(ids.values()) == 1, "a message is stored twice"
    assert consumer.received["kernel_span"] == ITERS  # each folded in exactly once
    assert consumer.received["iteration_span"] == ITERS
    res = consumer.engine.results().to_pylist()
    assert sum(r["kernel_spans_total"] for r in res) == sum(k.num_rows for k, _ in data)
    assert sum(r["iterations_total"] for r in res) == ITERS
    # figures for a person (pytest -s): not asserted, they depend on timing
    print(f"\nCLUSTER-FIGURES outage_s={outage_s:.2f} retries={pub.retries} "
          f"errors={dict(pub.errors)} consumer_error={consumer.drops['consumer_error']} "
          f"redelivered={consumer.received['redelivered']}")
    await bus.close()


def test_existing_r1_stream_kv_and_consumer_scale_to_three(tmp_path: Path) -> None:
    """``stream_replicas=3`` on a cluster changes an existing one-replica
    stream, the analytics KV bucket and a durable consumer to three replicas;
    a client that asks for no count (``None``) then keeps three."""
    with NatsCluster(tmp_path) as cl:
        asyncio.run(_scale(cl))


async def _scale(cl: NatsCluster) -> None:
    await cl.wait_jetstream()

    async def counts(bus: Bus) -> tuple[int, int, int]:
        s = await bus.js.stream_info(bus.cfg.stream)
        kv = await bus.js.stream_info(f"KV_{KV_BUCKET}")
        c = await bus.js.consumer_info(bus.cfg.stream, "scale")
        return (s.config.num_replicas or 1, kv.config.num_replicas or 1,
                c.config.num_replicas or s.config.num_replicas or 1)

    for want in (1, 3, None):
        bus = await Bus.open(cl.url, BusConfig(url=cl.url, stream_replicas=want), HOST)
        await AnalyticsConsumer(bus, durable="scale").start()
        assert await counts(bus) == (want or 3,) * 3
        assert bus.replicas == (want or 3)
        await bus.close()
