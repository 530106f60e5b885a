"""Event latency: a span's publish to its effect on ``/metrics``, p50 and p99.

The whole ``aaco-exporter run`` daemon runs as a child process (embedded
nats-server with JetStream, analytics consumer, Prometheus sink; ``--watch
none``, so nothing else publishes). This script plays an instrumented
inference server: it publishes the ``graph_info`` of the real magika model
once, then, one at a time, each profiled magika run's ``kernel_span`` rows
(96 ORT kernels) and its ``iteration_span`` row, as the ORT collector and
``aaco-exporter instrument`` do. After the iteration's publish is
acknowledged by JetStream, it polls ``/metrics`` until
``aaco_iterations_total`` for the model counts that iteration; that
interval is the **event latency**. Events are spaced by a random 0.1-0.4 s
gap (seeded), so each one meets an idle pipeline, as in a lightly loaded
server, and the analytics flush cadence is sampled at random phases.

Baseline, same run: the bus alone, the time from the same publish's start
to a core-NATS subscriber in this process receiving it (what any bus-based
exporter pays before doing any work).

Input: ``--events`` real magika runs profiled on this machine (ORT CPU
execution provider, ``bench_pipeline.real_profile``), tiled in time when
more events than runs are asked for. Resolution: ``/metrics`` is polled every
``--poll-ms`` (default 10 ms), so latencies are over-estimated by up to that.

    .venv/bin/python benchmarks/bench_event_latency.py [--events 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_pipeline import real_profile, tile  # noqa: E402

from exporter.bus import Bus, BusConfig  # noqa: E402
from exporter.natsserver import free_port  # noqa: E402

HOST = "bench-latency"


def iterations_total(port: int, model: str) -> float:
    """``aaco_iterations_total{host=HOST, model=model}`` (0 when absent)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if (line.startswith("aaco_iterations_total{") and f'host="{HOST}"' in line
                and f'model="{model}"' in line):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def wait_up(port: int, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
                if b"aaco_exporter_build_info" in r.read():
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("daemon did not serve /metrics")


async def measure(url: str, mport: int, events: int, poll_s: float,
                  seed: int) -> tuple[list[float], list[float]]:
    graph, _, k, it = real_profile(min(events, 50))
    reps = -(-events // it.num_rows)
    k, it = tile(k, it, reps)
    pid = int(it.column("pid")[0].as_py())
    run = f"lat-{uuid.uuid4().hex[:8]}"
    rng = np.random.default_rng(seed)
    bus = await Bus.open(url, BusConfig(url=url), HOST)
    got: dict[int, float] = {}

    async def on_iteration(msg: object) -> None:
        got.setdefault(len(got), time.monotonic())

    await bus.nc.subscribe(f"aaco.v1.iteration_span.{HOST}", cb=on_iteration)
    await bus.publish_table("graph_info", graph.info_table(pid), f"{run}:graph")
    k_iter = k.column("iteration").to_numpy()
    effect: list[float] = []
    base: list[float] = []
    loop = asyncio.get_running_loop()
    try:
        for e in range(events):
            lo, hi = np.searchsorted(k_iter, [e, e + 1])
            await asyncio.sleep(float(rng.uniform(0.1, 0.4)))
            await bus.publish_table("kernel_span", k.slice(int(lo), int(hi - lo)), f"{run}:{e}:k")
            t0 = time.monotonic()
            await bus.publish_table("iteration_span", it.slice(e, 1), f"{run}:{e}:i")
            t_acked = time.monotonic()
            while await loop.run_in_executor(None, iterations_total, mport, graph.name) < e + 1:
                await asyncio.sleep(poll_s)
            effect.append(time.monotonic() - t_acked)
            for _ in range(100):
                if e in got:
                    break
                await asyncio.sleep(0.001)
            base.append(got.get(e, float("nan")) - t0)
    finally:
        await bus.close()
    return effect, base


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=200)
    ap.add_argument("--poll-ms", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args(argv)
    port, mport = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-c", "from exporter.cli import main; main()", "run",
               "--watch", "none", "--nats-listen", f"127.0.0.1:{port}",
               "--metrics-addr", f"127.0.0.1:{mport}", "--host", HOST, "--state-dir", tmp,
               "--log-level", "WARNING"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE)
        try:
            wait_up(mport, proc)
            effect, base = asyncio.run(measure(f"nats://127.0.0.1:{port}", mport, a.events,
                                               a.poll_ms / 1000, a.seed))
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
    res = {
        "events": a.events, "poll_ms": a.poll_ms,
        "effect_p50_s": pct(effect, 50), "effect_p99_s": pct(effect, 99),
        "effect_max_s": max(effect),
        "bus_p50_s": pct(base, 50), "bus_p99_s": pct(base, 99),
        "effect_s": effect, "bus_s": base,
        "loadavg_1m_end": os.getloadavg()[0],
        "daemon_stderr_tail": err.decode()[-500:],
    }
    print(f"{'path':<34}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}")
    print(f"{'publish -> /metrics (aaco run)':<34}{res['effect_p50_s'] * 1e3:>10.1f}"
          f"{res['effect_p99_s'] * 1e3:>10.1f}{res['effect_max_s'] * 1e3:>10.1f}")
    print(f"{'publish -> subscriber (bus only)':<34}{res['bus_p50_s'] * 1e3:>10.1f}"
          f"{res['bus_p99_s'] * 1e3:>10.1f}{max(base) * 1e3:>10.1f}")
    print(f"goal p99 <= 1 s: {'met' if res['effect_p99_s'] <= 1.0 else 'NOT met'}")
    out = ROOT / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    (out / "event_latency.json").write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())



