"""The daemon end to end: real nats-server, real onnxruntime, real magika model."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from exporter import schema
from exporter.bus import Bus, BusConfig
from exporter.natsserver import EmbeddedNats, free_port

SERIES = ("aaco_kernel_amplification_ratio", "aaco_launch_tax_ratio",
          "aaco_scheduler_interference_ratio", 'aaco_iteration_latency_seconds{',
          "aaco_gpu_active_ratio")


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
        return str(r.read().decode())


def _value(text: str, pattern: str) -> float | None:
    m = re.search(rf"^{pattern}\S* (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def _publish_garbage(url: str) -> None:
    # On the daemon's own host subject: a node daemon reads only its host's subjects.
    host = schema.sanitize_token(socket.gethostname())
    subj = schema.subject("kernel_span", host)

    async def go() -> None:
        bus = await Bus.open(url, BusConfig(), host)
        # A well-formed header set with a payload that is not Arrow IPC.
        headers = {schema.H_SCHEMA: "kernel_span", schema.H_VERSION: "1",
                   schema.H_HOST: host, schema.H_MSG_ID: "garbage-1"}
        await bus.js.publish(subj, b"\x00not arrow", headers=headers)
        # No schema header at all.
        await bus.js.publish(subj, b"xx", headers={schema.H_MSG_ID: "garbage-2"})
        await bus.close()

    asyncio.run(go())


@pytest.mark.slow
def test_run_serves_kar_lts_sii_latency_within_15s_and_survives_bad_messages(
        tmp_path: Path, cli_env: dict[str, str], aaco: str) -> None:
    """`aaco-exporter run --model M` serves the headline series within 15 s;
    malformed bus messages are counted by reason and the daemon goes on."""
    port = free_port()
    with EmbeddedNats(tmp_path / "nats") as srv:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [aaco, "run", "--model", "magika", "--nats", srv.url, "--metrics-addr",
             f"127.0.0.1:{port}", "--window", "10", "--log-level", "WARNING"],
            env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            text = ""
            while time.monotonic() - t0 < 15:
                try:
                    text = _scrape(port)
                except OSError:
                    text = ""
                if all(s in text for s in SERIES):
                    break
                time.sleep(0.5)
            missing = [s for s in SERIES if s not in text]
            assert not missing, f"missing after 15 s: {missing}"
            kar = _value(text, "aaco_kernel_amplification_ratio")
            assert kar is not None and 0.5 < kar < 3
            spans_before = sum(float(v) for v in re.findall(
                r"^aaco_kernel_spans_total\{.*\} (\S+)$", text, re.M))

            _publish_garbage(srv.url)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                text = _scrape(port)
                bad = _value(text, r'aaco_exporter_events_dropped_total\{reason="bad_payload"\}')
                hdr = _value(text,
                             r'aaco_exporter_events_dropped_total\{reason="missing_header"\}')
                if bad and hdr:
                    break
                time.sleep(0.5)
            assert bad == 1.0 and hdr == 1.0
            time.sleep(2.5)  # the daemon keeps going: more kernel spans arrive
            text = _scrape(port)
            spans_after = sum(float(v) for v in re.findall(
                r"^aaco_kernel_spans_total\{.*\} (\S+)$", text, re.M))
            assert spans_after > spans_before
            assert proc.poll() is None
            assert 'aaco_collector_up{collector="ort"' in text
        finally:
            proc.terminate()
            out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out.decode()[-2000:]
        assert b"Traceback" not in out
