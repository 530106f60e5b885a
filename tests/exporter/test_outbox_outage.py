"""`capture --nats URL` through a real nats-server SIGKILLed and restarted mid-capture."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import nats
import pyarrow.parquet as pq
import pytest

from exporter.natsserver import EmbeddedNats, free_port

EXE = str(Path(sys.executable).parent / "aaco-exporter")
ITERATIONS = 600  # ~20 ORT chunks of 30 iterations: several seconds of capture
KILL_AFTER = 3  # kernel_span messages stored before the kill
OUTAGE_S = 8.0  # > the 1 s duplicate window, and > nats-py's 5 s publish timeout plus a chunk


async def _kernel_messages(url: str) -> int:
    nc = await nats.connect(url, connect_timeout=1, max_reconnect_attempts=0)
    try:
        info = await nc.jetstream().stream_info("AACO", subjects_filter="aaco.v1.kernel_span.>")
        return sum((info.state.subjects or {}).values())
    except Exception:  # the stream is not there yet
        return 0
    finally:
        await nc.close()


def _capture_through_outage(tmp_path: Path, env: dict[str, str],
                            extra: list[str]) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run the capture; SIGKILL the server once KILL_AFTER kernel_span messages
    are stored, restart it OUTAGE_S later on the same port and store."""
    srv = EmbeddedNats(tmp_path / "nats", port=free_port())
    srv.start()
    out = tmp_path / "sessions"
    proc = subprocess.Popen(
        [EXE, "capture", "--model", "magika", "--iterations", str(ITERATIONS), "--warmup", "2",
         "--out", str(out), "--quiet", "--nats", srv.url, "--nats-duplicate-window", "1",
         *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while asyncio.run(_kernel_messages(srv.url)) < KILL_AFTER:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "capture published no kernels"
            time.sleep(0.05)
        assert srv.proc is not None
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(10)
        srv.proc = None
        time.sleep(OUTAGE_S)
        assert proc.poll() is None, "the capture ended during the outage: test too short"
        srv.start()
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        srv.stop()
    r = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return r, Path(stdout.strip().splitlines()[-1]) if stdout.strip() else out


@pytest.mark.slow
def test_capture_through_a_killed_and_restarted_server_records_every_iteration_once(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    """Messages published while the server is down are held and published
    after the restart, once each although the outage outlasts the 1 s
    duplicate window: the bundle holds exactly N iterations and, per
    iteration, the kernel spans it published; exit status 0."""
    r, session = _capture_through_outage(tmp_path, cli_env, [])
    assert r.returncode == 0, r.stderr
    iters = pq.read_table(session / "metrics/inference_iters.parquet")
    kernels = pq.read_table(session / "profiler/kernels.parquet")
    assert iters.num_rows == ITERATIONS
    assert sorted(iters.column("iteration").to_pylist()) == list(range(ITERATIONS))
    per_run = set(iters.column("kernel_count").to_pylist())
    assert len(per_run) == 1 and per_run.pop() > 0  # the same kernels every run
    assert kernels.num_rows == sum(iters.column("kernel_count").to_pylist())
    counts = kernels.group_by("iteration").aggregate([("iteration", "count")])
    assert counts.num_rows == ITERATIONS
    assert set(counts.column("iteration_count").to_pylist()) == {
        iters.column("kernel_count")[0].as_py()}
    meta = json.loads((session / "session.json").read_text())
    assert meta["shortfall"] is None
    assert meta["outbox"]["dropped"] == {}
    assert meta["outbox"]["redelivered"] + meta["outbox"]["already_stored"] > 0  # it was used


@pytest.mark.slow
def test_capture_through_an_outage_with_a_small_outbox_exits_2_naming_the_loss(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    """With --outbox-max-bytes too small to hold the outage, the capture says
    how many iterations were requested and recorded and why (outbox_full), and
    exits 2 although it wrote the bundle."""
    r, session = _capture_through_outage(tmp_path, cli_env, ["--outbox-max-bytes", "1000"])
    assert r.returncode == 2, (r.stdout, r.stderr)
    iters = pq.read_table(session / "metrics/inference_iters.parquet")
    assert iters.num_rows < ITERATIONS
    assert f"{ITERATIONS} iterations requested, {iters.num_rows} recorded" in r.stderr
    assert "outbox_full" in r.stderr
    meta = json.loads((session / "session.json").read_text())
    assert meta["outbox"]["dropped"]["outbox_full"] > 0
