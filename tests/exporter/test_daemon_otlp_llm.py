"""`run --otlp-endpoint …`: generate_span messages on the daemon's bus reach a
real OTLP gRPC receiver as the catalogue's aaco.llm.* metrics, with the
counts /metrics shows for the same calls, and calls over the model cap are
counted as otlp_llm_model_cap drops (real nats-server, real daemon process)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import nats
import pyarrow as pa
import pytest

from exporter import schema
from exporter.instrument.llm import load
from exporter.instrument.publisher import generate_batch
from exporter.natsserver import free_port
from tests.support import ROOT, load_path, scrape_metrics, stop_process

rx = load_path("aaco_otlp_receiver", ROOT / "tests/exporter/sinks/otlp_receiver.py")
ROMANIZER = ROOT / "tests/exporter/testdata/romanizer_generate_spans.jsonl"
HOST = "llm-otlp-e2e"
TTFT = "aaco.llm.time_to_first_token"


async def _publish(url: str, msgs: list[schema.Message]) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for m in msgs:
            await js.publish(m.subject, m.payload, headers=m.headers)
    finally:
        await nc.close()


def _capped(pid: int, n_models: int) -> pa.RecordBatch:
    """One call per model ``m0``.. of ``pid``: two 1-token steps each."""
    n = n_models
    return schema.conform("generate_span", pa.table({
        "generate_id": list(range(n)), "model": [f"m{i}" for i in range(n)], "pid": [pid] * n,
        "batch_size": [1] * n, "start_ns": [0] * n, "end_ns": [10**9] * n,
        "step_ns": [[5, 7]] * n, "step_tokens": [[1, 1]] * n}))


def _ttft_counts(r: object) -> dict[tuple[str, int], int]:
    got = rx.metrics_of(r.metrics, TTFT)  # type: ignore[attr-defined]
    if not got:
        return {}
    out = {}
    for p in got[-1][1].histogram.data_points:
        a = rx.attrs(p.attributes)
        out[(str(a["aaco.model"]), int(a["process.pid"]))] = int(p.count)
    return out


@pytest.mark.slow
def test_daemon_exports_generate_spans_as_llm_metrics_over_otlp(
        tmp_path: Path, cli_env: dict[str, str], aaco: str) -> None:
    """The 6 recorded romanizer calls and 10 one-call models of pid 4242: the
    receiver's TTFT histogram counts 6 for (romanizer, its pid) and 1 for each
    of pid 4242's first 8 models; /metrics shows the same TTFT count, and the
    2 calls over the cap as llm_model_cap and otlp_llm_model_cap drops."""
    recs = load([str(ROMANIZER)])
    nats_port, metrics_port = free_port(), free_port()
    with rx.GrpcReceiver() as r:
        log_path = tmp_path / "daemon.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [aaco, "run", "--nats-listen", f"127.0.0.1:{nats_port}", "--metrics-addr",
                 f"127.0.0.1:{metrics_port}", "--host", HOST, "--watch", "none",
                 "--state-dir", str(tmp_path / "nats"), "--otlp-endpoint", r.endpoint,
                 "--otlp-insecure", "--log-level", "WARNING"],
                env=cli_env, stdout=subprocess.DEVNULL, stderr=log)
            try:
                deadline = time.monotonic() + 30
                while True:  # /metrics is up once the bus is subscribed
                    try:
                        scrape_metrics(metrics_port)
                        break
                    except OSError:
                        assert proc.poll() is None, log_path.read_text()
                        assert time.monotonic() < deadline, "no /metrics in 30 s"
                        time.sleep(0.2)
                asyncio.run(_publish(f"nats://127.0.0.1:{nats_port}", [
                    schema.encode("generate_span", generate_batch(recs), host=HOST,
                                  msg_id="rom:0"),
                    schema.encode("generate_span", _capped(4242, 10), host=HOST,
                                  msg_id="cap:0")]))
                want = {("romanizer", recs[0].pid): 6, **{(f"m{i}", 4242): 1 for i in range(8)}}
                assert r.wait_for(lambda: _ttft_counts(r) == want, timeout_s=60), \
                    (_ttft_counts(r), log_path.read_text())
                drops: dict[str, float] = {}
                deadline = time.monotonic() + 30
                while drops.get("otlp_llm_model_cap") != 2.0 and time.monotonic() < deadline:
                    m = scrape_metrics(metrics_port)  # merged after each OTLP flush
                    drops = {lab["reason"]: v for lab, v in
                             m.get("aaco_exporter_events_dropped_total", [])}
                    time.sleep(0.3)
                assert drops.get("otlp_llm_model_cap") == 2.0, drops
                assert drops.get("llm_model_cap") == 2.0, drops
                (_, count), = [(lab, v) for lab, v in
                               m["aaco_llm_time_to_first_token_seconds_count"]
                               if lab["model"] == "romanizer"]
                assert count == 6.0
                assert proc.poll() is None
            finally:
                stop_process(proc)
    assert proc.returncode == 0, log_path.read_text()[-2000:]
