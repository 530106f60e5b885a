"""Observing a server the exporter did not start, end to end: a separate
Python ONNX Runtime loop under ``aaco-exporter instrument``, and a daemon
running without ``--model`` that discovers it (real nats-server, real
onnxruntime, real magika model, real /proc)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from exporter.natsserver import free_port
from tests.support import scrape_metrics

N = 200
HOST = "observe-e2e"

# The served process: knows nothing of aaco-exporter; runs N inferences,
# prints its pid and count once its spans are flushed, then stays alive (idle)
# until stdin closes, as a server between requests would.
LOOP = """
import sys, time
import onnxruntime as ort
from collectors.ort.inputs import make_inputs
sess = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
feed = make_inputs(sess.get_inputs())
n = int(sys.argv[2])
for _ in range(n):
    sess.run(None, feed)
    time.sleep(0.002)
from exporter.instrument import shutdown
s = shutdown(10.0)
print(n, s.published, flush=True)
sys.stdin.read()
"""


_scrape = scrape_metrics


def _of(m: dict[str, list[tuple[dict[str, str], float]]], name: str,
        pid: int) -> list[tuple[dict[str, str], float]]:
    return [(lab, v) for lab, v in m.get(name, []) if lab.get("pid") == str(pid)]


@pytest.mark.slow
def test_daemon_without_model_discovers_an_instrumented_server_and_exports_its_runs(
        tmp_path: Path, cli_env: dict[str, str], aaco: str, magika_model: Path) -> None:
    """`run` (no --model) discovers a separately started ORT loop under
    `instrument`: /metrics shows its iteration count equal to the runs it
    made, its latency quantiles, SII for its pid with comm, and why it is
    watched; once it exits, discovery drops it."""
    nats_port, metrics_port = free_port(), free_port()
    env = dict(cli_env, AACO_NATS_URL=f"nats://127.0.0.1:{nats_port}", AACO_HOST=HOST)
    log = (tmp_path / "daemon.log").open("wb")
    daemon = subprocess.Popen(
        [aaco, "run", "--nats-listen", f"127.0.0.1:{nats_port}", "--metrics-addr",
         f"127.0.0.1:{metrics_port}", "--host", HOST, "--watch-interval", "0.5",
         "--window", "120", "--state-dir", str(tmp_path / "nats"), "--log-level", "WARNING"],
        env=cli_env, stdout=subprocess.DEVNULL, stderr=log)
    loop = None
    try:
        deadline = time.monotonic() + 30
        while True:  # /metrics is up once the bus and consumer are
            try:
                _scrape(metrics_port)
                break
            except OSError:
                assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()
                assert time.monotonic() < deadline, "daemon did not serve /metrics in 30 s"
                time.sleep(0.2)
        (tmp_path / "loop.py").write_text(LOOP)
        loop = subprocess.Popen(
            [aaco, "instrument", "--", sys.executable, str(tmp_path / "loop.py"),
             str(magika_model), str(N)],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert loop.stdout is not None
        ran, published = map(int, loop.stdout.readline().split())
        assert (ran, published) == (N, N), "the loop's own count of runs and published spans"

        deadline, m = time.monotonic() + 60, {}
        while time.monotonic() < deadline:
            m = _scrape(metrics_port)
            its = _of(m, "aaco_iterations_total", loop.pid)
            if (its and its[0][1] == N and _of(m, "aaco_scheduler_interference_ratio", loop.pid)
                    and _of(m, "aaco_iteration_latency_seconds", loop.pid)):
                break
            time.sleep(0.5)
        its = _of(m, "aaco_iterations_total", loop.pid)
        assert [v for _, v in its] == [float(N)], its
        assert its[0][0]["host"] == HOST and its[0][0]["model"]
        stats = {lab["stat"]: v for lab, v in _of(m, "aaco_iteration_latency_seconds", loop.pid)}
        assert set(stats) == {"mean", "p50", "p99"}, stats
        assert 0 < stats["p50"] <= stats["p99"]
        (sii_labels, sii), = _of(m, "aaco_scheduler_interference_ratio", loop.pid)
        assert 0.0 <= sii <= 1.0
        assert sii_labels["comm"].startswith("python"), sii_labels
        assert sii_labels["model"] == its[0][0]["model"]  # one key: iterations and SII joined
        (info, _), = _of(m, "aaco_watched_process_info", loop.pid)
        assert info["reason"].startswith("lib:"), info
        assert _of(m, "aaco_sched_cpu_seconds_total", loop.pid)
        # the exporter never watches itself or its nats-server
        watched = {lab["pid"] for lab, _ in m["aaco_watched_process_info"]}
        assert str(daemon.pid) not in watched

        loop.stdin.close()  # type: ignore[union-attr]
        loop.wait(30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = _scrape(metrics_port)
            if not _of(m, "aaco_watched_process_info", loop.pid):
                break
            time.sleep(0.5)
        assert not _of(m, "aaco_watched_process_info", loop.pid), "exited process still listed"
        assert daemon.poll() is None, "the daemon must keep running"
    finally:
        if loop is not None and loop.poll() is None:
            loop.kill()
        daemon.terminate()
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()
