"""LLM generate calls on the bus, end to end: a real GRU seq2seq ONNX model
(arabic-name-romanizer) generating under ``generate_span`` in a separate
process started with ``aaco-exporter instrument`` publishes its finished calls
as ``generate_span`` messages to a real nats-server; the daemon (``run``) folds
them into ``aaco_llm_*`` on its /metrics. Bad LLM messages are counted as drops
by reason and the daemon keeps running (real nats-server, real onnxruntime)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pyarrow as pa
import pytest

from exporter import schema
from exporter.natsserver import free_port
from tests.support import scrape_metrics, stop_process

pytest.importorskip("arabic_name_romanizer")

HOST = "llm-e2e"
Samples = dict[str, list[tuple[dict[str, str], float]]]

# The served process knows nothing of the bus: it only marks generate calls.
# It prints how many calls it made, the tokens they emitted, the step gaps
# (ITL samples), and what the instrumentation published, once flushed.
LOOP = """
from pathlib import Path
import arabic_name_romanizer.inference as R
from exporter.instrument.llm import generate_span, records
NAMES = ["محمد", "فاطمة", "عبد الله", "يوسف", "مريم", "خالد", "زينب", "عمر"] * 2
model = R.OnnxModel(Path(R.__file__).parent / "resources", beam_width=2, dedupe=False,
                    intra_op_threads=1)
for bs in (1, 4, 16):
    for _ in range(2):
        with generate_span("romanizer", batch_size=bs, step_session=model.backend.decoder):
            model.transliterate_units(NAMES[:bs], None, 1)
recs = records()
from exporter.instrument import shutdown
s = shutdown(10.0)
print(len(recs), sum(sum(r.step_tokens) for r in recs),
      sum(max(len(r.step_ns) - 1, 0) for r in recs), s.generates_published,
      sorted(s.dropped.items()), flush=True)
"""


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    nats_url: str
    metrics_port: int
    log: Path

    def scrape(self) -> Samples:
        return scrape_metrics(self.metrics_port)

    def wait_for(self, ok: object, what: str, timeout_s: float = 60) -> Samples:
        deadline, m = time.monotonic() + timeout_s, {}
        while time.monotonic() < deadline:
            m = self.scrape()
            if ok(m):  # type: ignore[operator]
                return m
            assert self.proc.poll() is None, self.log.read_text()
            time.sleep(0.3)
        raise AssertionError(f"{what} not seen in {timeout_s} s: "
                             f"{ {k: v for k, v in m.items() if 'llm' in k or 'drop' in k} }")


@pytest.fixture
def daemon(tmp_path: Path, cli_env: dict[str, str], aaco: str) -> Iterator[Daemon]:
    """``aaco-exporter run`` with its embedded nats-server on ephemeral ports."""
    nats_port, metrics_port = free_port(), free_port()
    log_path = tmp_path / "daemon.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [aaco, "run", "--nats-listen", f"127.0.0.1:{nats_port}", "--metrics-addr",
         f"127.0.0.1:{metrics_port}", "--host", HOST, "--watch", "none", "--window", "120",
         "--state-dir", str(tmp_path / "nats"), "--log-level", "WARNING"],
        env=cli_env, stdout=subprocess.DEVNULL, stderr=log)
    d = Daemon(proc, f"nats://127.0.0.1:{nats_port}", metrics_port, log_path)
    try:
        deadline = time.monotonic() + 30
        while True:  # /metrics is up once the bus is subscribed
            try:
                d.scrape()
                break
            except OSError:
                assert proc.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "daemon did not serve /metrics in 30 s"
                time.sleep(0.2)
        yield d
    finally:
        stop_process(proc)
        log.close()


def _of(m: Samples, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    return [(lab, v) for lab, v in m.get(name, [])
            if all(lab.get(k) == v for k, v in labels.items())]


@pytest.mark.slow
def test_instrumented_generate_loop_reaches_the_daemons_llm_metrics(
        tmp_path: Path, cli_env: dict[str, str], aaco: str, daemon: Daemon) -> None:
    """Six romanizer generate calls (batch 1, 4, 16, twice each) in a process
    under `instrument`: the daemon's TTFT histogram counts 6, its ITL
    histogram counts every step gap, output tokens equal the tokens the calls
    emitted, labelled with host, model and the process's pid."""
    (tmp_path / "loop.py").write_text(LOOP)
    env = dict(cli_env, AACO_NATS_URL=daemon.nats_url, AACO_HOST=HOST,
               AACO_LLM_DIR=str(tmp_path / "llm"))
    out = subprocess.run([aaco, "instrument", "--", sys.executable, str(tmp_path / "loop.py")],
                         env=env, capture_output=True, text=True, timeout=300, check=True)
    line = out.stdout.strip().splitlines()[-1]
    calls, tokens, gaps, published, dropped = line.split(" ", 4)
    assert (int(calls), int(published), dropped) == (6, 6, "[]"), out.stdout + out.stderr
    assert int(tokens) >= 6 and int(gaps) >= 6  # every call emitted and stepped
    saved = list((tmp_path / "llm").glob("*.jsonl"))  # the capture path is kept as well
    assert len(saved) == 1
    pid = saved[0].stem

    key = {"host": HOST, "model": "romanizer", "pid": pid}
    m = daemon.wait_for(lambda s: _of(s, "aaco_llm_time_to_first_token_seconds_count", **key),
                        "aaco_llm_time_to_first_token_seconds")
    assert [v for _, v in _of(m, "aaco_llm_time_to_first_token_seconds_count", **key)] == [6.0]
    assert [v for _, v in _of(m, "aaco_llm_output_tokens_total", **key)] == [float(tokens)]
    assert [v for _, v in _of(m, "aaco_llm_inter_token_latency_seconds_count", **key)] == [
        float(gaps)]
    inf = _of(m, "aaco_llm_time_to_first_token_seconds_bucket", **key, le="+Inf")
    assert [v for _, v in inf] == [6.0]
    (_, tps), = _of(m, "aaco_llm_tokens_per_second", **key)
    assert tps > 0
    assert daemon.proc.poll() is None


async def _publish(url: str, msgs: list[tuple[str, bytes, dict[str, str]]]) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for subject, payload, headers in msgs:
            await js.publish(subject, payload, headers=headers)
    finally:
        await nc.close()


def _calls(models: list[str], pid: int, steps: list[list[int]]) -> pa.Table:
    n = len(models)
    return pa.table({
        "generate_id": list(range(n)), "model": models, "pid": [pid] * n,
        "batch_size": [1] * n, "start_ns": [0] * n, "end_ns": [10**9] * n,
        "step_ns": steps, "step_tokens": [[1] * len(s) for s in steps],
    })


@pytest.mark.slow
def test_bad_llm_messages_are_counted_by_reason_and_the_daemon_keeps_folding(
        daemon: Daemon) -> None:
    """A generate_span message whose step lists differ in length is dropped as
    bad_value; a pid naming a 9th model has that model's calls dropped as
    llm_model_cap; the daemon keeps running and folds the valid calls
    (8 models of pid 4242, one call each, plus a later valid message)."""
    bad = schema.conform("generate_span", _calls(["m"], 4141, [[5, 6]])).to_pydict()
    bad["step_tokens"] = [[1]]  # two steps, one token count
    rb = pa.RecordBatch.from_pydict(bad, schema=schema.GENERATE_SPAN)
    raw = schema._message("generate_span", rb, HOST, "bad:0", None)
    models = [f"model-{i}" for i in range(9)]
    capped = schema.encode("generate_span", _calls([*models, "model-8"], 4242, [[5]] * 10),
                           host=HOST, msg_id="cap:0")
    later = schema.encode("generate_span", _calls(["model-0"], 4242, [[5, 7]]),
                          host=HOST, msg_id="later:0")
    asyncio.run(_publish(daemon.nats_url, [(m.subject, m.payload, m.headers)
                                           for m in (raw, capped, later)]))

    def done(s: Samples) -> bool:
        return bool(_of(s, "aaco_llm_time_to_first_token_seconds_count", pid="4242",
                        model="model-0")
                    and _of(s, "aaco_llm_time_to_first_token_seconds_count", pid="4242",
                            model="model-0")[0][1] == 2)

    m = daemon.wait_for(done, "the later valid call")
    drops = {lab["reason"]: v for lab, v in m["aaco_exporter_events_dropped_total"]}
    assert drops.get("bad_value") == 1.0, drops
    assert drops.get("llm_model_cap") == 2.0, drops  # both calls of the 9th model
    series = _of(m, "aaco_llm_output_tokens_total", host=HOST, pid="4242")
    assert sorted(lab["model"] for lab, _ in series) == models[:8]
    assert not _of(m, "aaco_llm_output_tokens_total", pid="4141")
    assert daemon.proc.poll() is None
