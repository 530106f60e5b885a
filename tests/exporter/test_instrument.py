"""exporter.instrument: zero-code ONNX Runtime instrumentation against a real
nats-server, the real magika model and a real OTLP/gRPC receiver."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pyarrow as pa
import pytest

import exporter.instrument as instr
from collectors.ort.graph import default_model_name
from collectors.ort.inputs import make_inputs
from exporter import schema
from exporter.bus import Bus, BusConfig
from exporter.natsserver import EmbeddedNats, free_port
from exporter.sinks import otlp_proto as op
from exporter.sinks.otlp import OtlpConfig, OtlpSink
from tests.support import ROOT, load_path

rx = load_path("aaco_otlp_receiver", ROOT / "tests/exporter/sinks/otlp_receiver.py")
EXE = str(Path(sys.executable).parent / "aaco-exporter")
N = 50

LOOP = """
import json, sys
import onnxruntime as ort
from collectors.ort.graph import default_model_name
from collectors.ort.inputs import make_inputs
sess = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
feed = make_inputs(sess.get_inputs())
for _ in range(int(sys.argv[2])):
    sess.run(None, feed)
from exporter.instrument import shutdown
s = shutdown(5.0)
print(json.dumps({"published": s.published, "recorded": s.recorded, "dropped": s.dropped,
                  "instrumented": s.instrumented}))
"""


async def _read(url: str, signal: str) -> list[tuple[dict[str, str], pa.RecordBatch]]:
    bus = await Bus.open(url, BusConfig(url=url), "reader")
    out: list[tuple[dict[str, str], pa.RecordBatch]] = []
    try:
        sub = await bus.js.pull_subscribe(f"aaco.v1.{signal}.>", durable=None, stream="AACO")
        while True:
            try:
                msgs = await sub.fetch(100, timeout=1)
            except Exception:  # nats TimeoutError: nothing more
                break
            for m in msgs:
                headers = dict(m.headers or {})
                out.append((headers, schema.decode(m.data, headers)[3]))
    finally:
        await bus.close()
    return out


def _rows(url: str, signal: str) -> list[dict[str, object]]:
    return [r for _, b in asyncio.run(_read(url, signal)) for r in b.to_pylist()]


def _make_stream(url: str) -> None:
    async def go() -> None:
        bus = await Bus.open(url, BusConfig(url=url), "test")
        await bus.close()

    asyncio.run(go())


def _run_loop(tmp_path: Path, model: Path, url: str, n: int = N,
              extra_env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str],
                                                                dict[str, object]]:
    script = tmp_path / "server.py"
    script.write_text(LOOP)
    env = dict(os.environ, AACO_NATS_URL=url, AACO_HOST="test-host", PYTHONPATH=str(ROOT),
               **(extra_env or {}))
    env.pop("AACO_MODEL_NAME", None)
    proc = subprocess.run([EXE, "instrument", "--", sys.executable, str(script), str(model),
                           str(n)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def instrumented(nats_server: EmbeddedNats, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """In-process instrumentation publishing to a fresh nats-server with the stream."""
    _make_stream(nats_server.url)
    monkeypatch.setenv("AACO_NATS_URL", nats_server.url)
    monkeypatch.setenv("AACO_HOST", "test-host")
    monkeypatch.delenv("AACO_MODEL_NAME", raising=False)
    assert instr.instrument_onnxruntime()
    try:
        yield nats_server.url
    finally:
        instr.uninstrument_onnxruntime()


def _session(model: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])


def test_subprocess_loop_publishes_exactly_n_iteration_spans_and_one_graph_info(
        tmp_path: Path, nats_server: EmbeddedNats, magika_model: Path) -> None:
    """`instrument -- python server.py`: N runs -> exactly N iteration spans of that pid,
    iterations 0..N-1, model name/path, CPU provider, tid and batch size set; one graph_info."""
    _make_stream(nats_server.url)
    _, st = _run_loop(tmp_path, magika_model, nats_server.url)
    assert st == {"published": N, "recorded": N, "dropped": {}, "instrumented": True}
    rows = _rows(nats_server.url, "iteration_span")
    assert len(rows) == N and len({r["pid"] for r in rows}) == 1
    assert sorted(r["iteration"] for r in rows) == list(range(N))
    assert {r["model"] for r in rows} == {default_model_name(magika_model)} == {"standard_v3_3"}
    assert {r["model_path"] for r in rows} == {str(magika_model)}
    assert {r["provider"] for r in rows} == {"CPUExecutionProvider"}
    assert {r["source"] for r in rows} == {"instrument"}
    assert {r["kernel_count"] for r in rows} == {0}
    assert {r["batch_size"] for r in rows} == {1}
    assert all(isinstance(r["tid"], int) and r["tid"] > 0 for r in rows)
    assert all(r["end_ns"] - r["start_ns"] == r["duration_ns"] > 0 for r in rows)  # type: ignore[operator]
    assert all(r["trace_id"] is None for r in rows)
    graphs = _rows(nats_server.url, "graph_info")
    assert len(graphs) == 1 and graphs[0]["model"] == "standard_v3_3"
    assert graphs[0]["pid"] == rows[0]["pid"] and graphs[0]["node_count"] > 0  # type: ignore[operator]


def test_bus_down_loop_completes_exits_zero_and_counts_drops_by_reason(
        tmp_path: Path, magika_model: Path) -> None:
    """AACO_NATS_URL on a closed port: all N runs complete, exit 0, every call is counted
    as dropped by reason in stats() and in the one stderr line at exit."""
    proc, st = _run_loop(tmp_path, magika_model, f"nats://127.0.0.1:{free_port()}")
    assert st["recorded"] == N and st["published"] == 0 and st["instrumented"] is True
    dropped = st["dropped"]
    assert isinstance(dropped, dict) and sum(dropped.values()) == N
    assert set(dropped) <= {"publish_failed", "shutdown"}
    line = [ln for ln in proc.stderr.splitlines() if "dropped:" in ln]
    assert len(line) == 1 and "0 iteration spans published" in line[0]


def test_full_queue_counts_queue_full_and_publishes_the_drop_counter(
        tmp_path: Path, nats_server: EmbeddedNats, magika_model: Path) -> None:
    """AACO_INSTRUMENT_QUEUE=1: published + queue_full drops == N; the bus holds exactly
    the published spans and an aaco.instrument.dropped counter row with reason queue_full."""
    _make_stream(nats_server.url)
    _, st = _run_loop(tmp_path, magika_model, nats_server.url,
                      extra_env={"AACO_INSTRUMENT_QUEUE": "1"})
    dropped = st["dropped"]
    assert isinstance(dropped, dict) and set(dropped) == {"queue_full"}
    assert st["published"] + dropped["queue_full"] == N  # type: ignore[operator]
    assert len(_rows(nats_server.url, "iteration_span")) == st["published"]
    gauges = [r for r in _rows(nats_server.url, "gauge_sample")
              if r["metric"] == "aaco.instrument.dropped"]
    assert gauges and {(r["kind"], r["unit"]) for r in gauges} == {("counter", "1")}
    last = max(gauges, key=lambda r: (r["value"], r["ts_ns"]))  # type: ignore[arg-type,return-value]
    assert dict(last["attributes"])["reason"] == "queue_full"  # type: ignore[arg-type]
    assert last["value"] == dropped["queue_full"]


def test_instrument_is_idempotent_and_uninstrument_restores(
        nats_server: EmbeddedNats, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second instrument_onnxruntime() is a no-op; uninstrument puts the originals back."""
    run, iob = ort.InferenceSession.run, ort.InferenceSession.run_with_iobinding
    monkeypatch.setenv("AACO_NATS_URL", nats_server.url)
    assert instr.instrument_onnxruntime() is True
    wrapped = ort.InferenceSession.run
    assert instr.instrument_onnxruntime() is False and ort.InferenceSession.run is wrapped
    assert instr.uninstrument_onnxruntime() is True
    assert ort.InferenceSession.run is run and ort.InferenceSession.run_with_iobinding is iob
    assert "run" not in ort.InferenceSession.__dict__  # inherited from Session again
    assert instr.uninstrument_onnxruntime() is False


def test_run_with_iobinding_is_recorded(instrumented: str, magika_model: Path) -> None:
    """Calls through run_with_iobinding become iteration spans (batch size unknown: null)."""
    sess = _session(magika_model)
    feed = make_inputs(sess.get_inputs())
    binding = sess.io_binding()
    for name, arr in feed.items():
        binding.bind_cpu_input(name, arr)
    for o in sess.get_outputs():
        binding.bind_output(o.name)
    for _ in range(3):
        sess.run_with_iobinding(binding)
    assert len(binding.copy_outputs_to_cpu()) == len(sess.get_outputs())
    s = instr.uninstrument_onnxruntime()
    assert s
    rows = _rows(instrumented, "iteration_span")
    assert len(rows) == 3 and [r["iteration"] for r in rows] == list(
        range(rows[0]["iteration"], rows[0]["iteration"] + 3))  # type: ignore[call-overload,operator]
    assert {r["batch_size"] for r in rows} == {None}
    assert {r["provider"] for r in rows} == {"CPUExecutionProvider"}


def test_exception_of_the_original_run_passes_through_and_is_not_recorded(
        instrumented: str, magika_model: Path) -> None:
    """A bad feed raises ORT's own exception type and message, unchanged; only the good
    calls around it are recorded, with consecutive iteration indices (the failed call takes
    none), and nothing is counted as our error."""
    sess = _session(magika_model)
    feed = make_inputs(sess.get_inputs())
    name = next(iter(feed))
    bad = {name: np.zeros((1, 3), dtype=np.float64)}
    uninstrumented = ort.InferenceSession.run.__aaco_wrapped__  # type: ignore[attr-defined]
    with pytest.raises(Exception) as plain:
        uninstrumented(sess, None, bad)
    sess.run(None, feed)
    with pytest.raises(type(plain.value)) as err:
        sess.run(None, bad)
    assert str(err.value) == str(plain.value)
    out = sess.run(None, feed)
    assert np.array_equal(out[0], uninstrumented(sess, None, feed)[0])
    instr.uninstrument_onnxruntime()
    rows = _rows(instrumented, "iteration_span")
    assert len(rows) == 2 and rows[1]["iteration"] == rows[0]["iteration"] + 1  # type: ignore[operator]
    assert "error" not in instr.stats().dropped


def test_otel_request_span_becomes_the_parent_in_both_otlp_paths(
        instrumented: str, magika_model: Path) -> None:
    """Inside tracer.start_as_current_span("request"): the published row carries the request's
    trace/span id; the SDK sink (via a real OTLP/gRPC receiver) and the OTLP-on-bus request
    both make the inference span its child."""
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("test")
    sess = _session(magika_model)
    feed = make_inputs(sess.get_inputs())
    with tracer.start_as_current_span("request") as req:
        sess.run(None, feed)
    sess.run(None, feed)  # outside any span: a root inference span
    ctx = req.get_span_context()
    trace_hex, span_hex = f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"
    instr.uninstrument_onnxruntime()
    (batch,) = [b for _, b in asyncio.run(_read(instrumented, "iteration_span"))]
    rows = batch.to_pylist()
    assert [(r["trace_id"], r["parent_span_id"]) for r in rows] == [
        (trace_hex, span_hex), (None, None)]
    first = rows[0]["iteration"]

    t = pa.Table.from_batches([batch])
    no_kernels = pa.Table.from_batches([schema.empty_batch("kernel_span")])
    proto = op.traces_request(no_kernels, t, "test-host", op.SpanPolicy())
    bus_spans = [s for rs in proto.resource_spans for ss in rs.scope_spans for s in ss.spans]
    child = next(s for s in bus_spans if rx.attrs(s.attributes)["aaco.iteration"] == first)
    assert child.trace_id.hex() == trace_hex and child.parent_span_id.hex() == span_hex
    root = next(s for s in bus_spans if rx.attrs(s.attributes)["aaco.iteration"] != first)
    assert root.parent_span_id == b"" and root.trace_id.hex() != trace_hex

    with rx.GrpcReceiver() as r:
        sink = OtlpSink(OtlpConfig(endpoint=r.endpoint, insecure=True))
        try:
            sink.ingest("iteration_span", batch, "test-host")
            sink.flush()
            assert r.wait_for(lambda: len(rx.spans_of(r.traces)) >= 2)
        finally:
            sink.close()
        spans = [s for _, s in rx.spans_of(r.traces)]
    got = {rx.attrs(s.attributes)["aaco.iteration"] == first: s for s in spans}
    assert len(spans) == 2 and got[True].name == "inference"
    assert got[True].trace_id.hex() == trace_hex and got[True].parent_span_id.hex() == span_hex
    assert rx.attrs(got[True].attributes)["thread.id"] == rows[0]["tid"]
    assert got[False].parent_span_id == b"" and got[False].trace_id.hex() != trace_hex


def test_sitecustomize_does_not_import_onnxruntime_into_other_programs(tmp_path: Path) -> None:
    """Under `instrument --`, a program that never imports onnxruntime does not get it
    (nor pyarrow/nats); the exit status is the program's; a shadowed sitecustomize still runs."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED'] = 'yes'\n")
    code = ("import os, sys; mods = [m for m in ('onnxruntime', 'pyarrow', 'nats') "
            "if m in sys.modules]; print(mods, os.environ.get('CHAINED')); sys.exit(7)")
    env = dict(os.environ, PYTHONPATH=f"{other}{os.pathsep}{ROOT}")
    proc = subprocess.run([EXE, "instrument", "--", sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout.strip() == "[] yes"


def test_unknown_command_is_one_error_line_exit_2() -> None:
    """`instrument -- no-such-program`: one clear stderr line, exit status 2."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([EXE, "instrument", "--", "no-such-program-aaco"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "aaco-exporter: error: command not found: no-such-program-aaco"]


def test_a_comma_separated_cluster_url_reaches_the_server_that_is_up(
        tmp_path: Path, nats_server: EmbeddedNats, magika_model: Path) -> None:
    """``AACO_NATS_URL`` naming two servers of a cluster, the first one down
    (a closed port): every span reaches the second, as the daemon's own
    ``--nats`` list does (exporter.bus.server_list)."""
    _make_stream(nats_server.url)
    url = f"nats://127.0.0.1:{free_port()},{nats_server.url}"
    _, st = _run_loop(tmp_path, magika_model, url, n=20)
    assert st["published"] == 20 and st["dropped"] == {}, st
    assert len(_rows(nats_server.url, "iteration_span")) == 20
