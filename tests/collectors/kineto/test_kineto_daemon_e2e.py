"""`aaco-exporter run --kineto-dir D` end to end: real nats-server, the real
MI250 Kineto trace copied into D while the daemon runs, exact counts scraped
from /metrics."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from exporter.natsserver import EmbeddedNats, free_port

FIXTURE = (Path(__file__).resolve().parents[3] / "collectors" / "rocprof" / "testdata"
           / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
KERNELS, STEPS = 14, 2  # hand counts, see test_kineto_steps.py
PID = 597913


def _scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return str(r.read().decode())
    except OSError:
        return ""


def _iterations(text: str, model: str) -> float | None:
    m = re.search(rf'^aaco_iterations_total\{{[^}}]*model="{model}"[^}}]*\}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else None


def _kernel_spans(text: str, model: str) -> float:
    return sum(float(v) for v in re.findall(
        rf'^aaco_kernel_spans_total\{{[^}}]*model="{model}"[^}}]*\}} (\S+)$', text, re.M))


def _dropped(text: str, reason: str) -> float | None:
    m = re.search(rf'^aaco_exporter_events_dropped_total\{{reason="{reason}"\}} (\S+)$', text,
                  re.M)
    return float(m.group(1)) if m else None


@pytest.mark.slow
def test_run_kineto_dir_counts_iterations_and_kernels_of_traces_copied_in(
        tmp_path: Path, nats_server: EmbeddedNats, cli_env: dict[str, str], aaco: str) -> None:
    """Traces that appear in --kineto-dir while the daemon runs (one renamed
    into place, one written in two chunks under its final name, in a
    sub-directory) each give exactly STEPS iterations and KERNELS kernel
    spans under their own model label and the step's pid; a corrupt trace is
    counted once as kineto_bad_json and the daemon goes on."""
    d = tmp_path / "traces"
    d.mkdir()
    port = free_port()
    proc = subprocess.Popen(
        [aaco, "run", "--kineto-dir", str(d), "--nats", nats_server.url, "--metrics-addr",
         f"127.0.0.1:{port}", "--window", "30", "--duration", "90", "--log-level", "INFO"],
        env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "aaco_collector_up" not in _scrape(port):
            time.sleep(0.3)
        # 1. a profiler finishing a file: write under a temp name, rename
        tmp = d / "rank0.json.gz.part"
        shutil.copyfile(FIXTURE, tmp)
        tmp.rename(d / "rank0.1712345678.pt.trace.json.gz")
        # 2. written in place, in two chunks
        sub = d / "worker1"
        sub.mkdir()
        data = FIXTURE.read_bytes()
        target = sub / "rank1.1712345679.pt.trace.json.gz"
        with target.open("wb") as f:
            f.write(data[: len(data) // 2])
            f.flush()
            time.sleep(0.3)
            f.write(data[len(data) // 2:])
        # 3. a corrupt trace
        (d / "broken.1.pt.trace.json").write_text('{"traceEvents": [')

        want = {"rank0": (STEPS, KERNELS), "rank1": (STEPS, KERNELS)}
        text, got = "", {}
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            text = _scrape(port)
            got = {m: (_iterations(text, m), _kernel_spans(text, m)) for m in want}
            if got == want and _dropped(text, "kineto_bad_json") == 1.0:
                break
            time.sleep(0.5)
        assert got == want, text[-3000:]
        assert _dropped(text, "kineto_bad_json") == 1.0
        assert re.search(rf'^aaco_iterations_total\{{[^}}]*model="rank0",pid="{PID}"', text,
                         re.M), "iterations must be keyed by the step's pid"
        assert 'aaco_collector_up{collector="kineto",source="kineto"} 1.0' in text
        time.sleep(2.5)  # nothing is parsed twice
        again = _scrape(port)
        assert {m: (_iterations(again, m), _kernel_spans(again, m)) for m in want} == want
        assert proc.poll() is None
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out.decode()[-2000:]
    assert b"Traceback" not in out
    assert out.decode().count("kineto: rejected") == 1
