"""A durable analytics consumer killed with SIGKILL mid-stream loses nothing
and double-counts nothing (real nats-server, real ORT kernel spans)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from collectors.base import CollectorContext, create
from exporter import schema
from exporter.bus import Bus, BusConfig
from exporter.natsserver import EmbeddedNats

COPIES = 12


def _real_chunk(magika: Path) -> tuple[pa.Table, pa.Table, pa.Table]:
    c = create("ort", CollectorContext(options={"model": str(magika), "iterations": 25}))
    graph, kernels, iters = (e.batch for e in c.collect())
    c.close()
    return graph, kernels, iters


async def _publish(url: str, graph: pa.Table, kernels: pa.Table, iters: pa.Table) -> int:
    bus = await Bus.open(url, BusConfig(), "restart-host")
    await bus.publish_table("graph_info", graph, "g")
    n_it = iters.num_rows
    span = int(pc.max(iters["end_ns"]).as_py()) - int(pc.min(iters["start_ns"]).as_py())
    total = 0
    for copy in range(COPIES):  # the real run, shifted in time and iteration number
        shift = copy * (span + 1_000_000)
        k = kernels.set_column(kernels.schema.get_field_index("iteration"), "iteration",
                               pc.add(kernels["iteration"], copy * n_it))
        for col in ("start_ns", "end_ns"):
            k = k.set_column(k.schema.get_field_index(col), col, pc.add(k[col], shift))
        it = iters.set_column(iters.schema.get_field_index("iteration"), "iteration",
                              pc.add(iters["iteration"], copy * n_it))
        for col in ("start_ns", "end_ns"):
            it = it.set_column(it.schema.get_field_index(col), col, pc.add(it[col], shift))
        for i in range(n_it):  # one message per iteration's kernels, then its span
            ki = k.filter(pc.equal(k["iteration"], copy * n_it + i))
            await bus.publish_table("kernel_span", ki, f"k{copy}:{i}")
            await bus.publish_table("iteration_span", it.slice(i, 1), f"i{copy}:{i}")
            total += ki.num_rows
    await bus.close()
    return total


async def _checkpoint_seq(url: str, durable: str) -> int:
    bus = await Bus.open(url, BusConfig(), "probe")
    try:
        kv = await bus.js.key_value("aaco_analytics")
        entry = await kv.get(durable)
        return int(json.loads(zlib.decompress(entry.value))["last_seq"])
    except Exception:
        return 0
    finally:
        await bus.close()


async def _last_result(url: str) -> dict[str, object]:
    bus = await Bus.open(url, BusConfig(), "probe")
    subj = schema.subject("analytics_result", "restart-host")  # results go to their host
    msg = await bus.js.get_last_msg("AACO", subj)
    await bus.close()
    _, _, _, batch = schema.decode(msg.data, msg.headers)
    rows = [r for r in batch.to_pylist() if r["host"] == "restart-host"]
    return rows[-1]


@pytest.mark.slow
def test_sigkilled_consumer_resumes_with_exact_kernel_count(
        magika_model: Path, tmp_path: Path, cli_env: dict[str, str], aaco: str) -> None:
    graph, kernels, iters = _real_chunk(magika_model)
    with EmbeddedNats(tmp_path / "nats") as srv:
        total = asyncio.run(_publish(srv.url, graph, kernels, iters))
        messages = 1 + 2 * COPIES * iters.num_rows
        # Small batches flushed (results, checkpoint, acks) after every fetch, so
        # the kill lands between checkpoints.
        args = [aaco, "analytics", "--nats", srv.url, "--durable", "restart", "--batch", "4",
                "--window", "100000", "--flush-interval", "0"]
        first = subprocess.Popen(args, env=cli_env, start_new_session=True)
        seq = 0
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                seq = asyncio.run(_checkpoint_seq(srv.url, "restart"))
                if seq >= messages // 4:
                    break
                time.sleep(0.05)
        finally:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
        assert 0 < seq < messages, "the kill must land mid-stream"
        second = subprocess.run([*args, "--exit-when-idle"], env=cli_env, timeout=180,
                                capture_output=True, text=True, check=False)
        assert second.returncode == 0, second.stderr
        row = asyncio.run(_last_result(srv.url))
    assert row["kernel_spans_total"] == total
    assert row["iterations_total"] == COPIES * iters.num_rows
    assert row["kar"] == pytest.approx(kernels.num_rows / iters.num_rows / 95)


async def _checkpoint_state(url: str, durable: str) -> tuple[int, int]:
    """(last_seq, generation) of the KV checkpoint; (0, 0) when there is none."""
    bus = await Bus.open(url, BusConfig(), "probe")
    try:
        kv = await bus.js.key_value("aaco_analytics")
        doc = json.loads(zlib.decompress((await kv.get(durable)).value))
        return int(doc["last_seq"]), int(doc["generation"])
    except Exception:
        return 0, 0
    finally:
        await bus.close()


async def _last_result_id(url: str) -> tuple[int, int]:
    """(generation, last input sequence) from the message id of the newest
    result, ``<durable>:<generation>:<first>-<last>:...``; (0, 0) before any."""
    bus = await Bus.open(url, BusConfig(), "probe")
    try:
        msg = await bus.js.get_last_msg("AACO", schema.subject("analytics_result",
                                                               "restart-host"))
        parts = (msg.headers or {})["Nats-Msg-Id"].split(":")
        return int(parts[1]), int(parts[2].split("-")[1])
    except Exception:
        return 0, 0
    finally:
        await bus.close()


async def _ack_pending(url: str, durable: str) -> int:
    bus = await Bus.open(url, BusConfig(), "probe")
    try:
        return int((await bus.js.consumer_info("AACO", durable)).num_ack_pending)
    finally:
        await bus.close()


@pytest.mark.slow
def test_sigkill_after_results_before_checkpoint_with_checkpoint_interval(
        magika_model: Path, tmp_path: Path, cli_env: dict[str, str], aaco: str) -> None:
    """With --checkpoint-interval 8 the worker publishes results every fetch
    but checkpoints (and acks) only every 8 s. Killed once results holding
    inputs past the checkpoint are out (their inputs still unacknowledged),
    the restarted worker resumes from the older checkpoint, gets those inputs
    redelivered after ack_wait, and ends with the exact kernel and iteration
    counts: 0 lost, 0 doubled."""
    graph, kernels, iters = _real_chunk(magika_model)
    with EmbeddedNats(tmp_path / "nats") as srv:
        total = asyncio.run(_publish(srv.url, graph, kernels, iters))
        args = [aaco, "analytics", "--nats", srv.url, "--durable", "restart", "--batch", "4",
                "--window", "100000", "--flush-interval", "0", "--checkpoint-interval", "8"]
        first = subprocess.Popen(args, env=cli_env, start_new_session=True)
        ckpt = result = (0, 0)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # the first flush checkpoints, the next ones not
                ckpt = asyncio.run(_checkpoint_state(srv.url, "restart"))
                result = asyncio.run(_last_result_id(srv.url))
                if ckpt[0] > 0 and result[0] >= ckpt[1] + 10:
                    break
                time.sleep(0.05)
        finally:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
        after = asyncio.run(_checkpoint_state(srv.url, "restart"))
        published = asyncio.run(_last_result_id(srv.url))
        assert 0 < after[0] < published[1], "results past the checkpoint were published"
        assert after[1] < published[0]
        assert asyncio.run(_ack_pending(srv.url, "restart")) > 0, "their inputs are unacked"
        second = subprocess.run([*args, "--exit-when-idle"], env=cli_env, timeout=180,
                                capture_output=True, text=True, check=False)
        assert second.returncode == 0, second.stderr
        row = asyncio.run(_last_result(srv.url))
        assert asyncio.run(_ack_pending(srv.url, "restart")) == 0
        final = asyncio.run(_checkpoint_state(srv.url, "restart"))
    assert row["kernel_spans_total"] == total
    assert row["iterations_total"] == COPIES * iters.num_rows
    assert final[0] == 1 + 2 * COPIES * iters.num_rows  # the last input sequence
