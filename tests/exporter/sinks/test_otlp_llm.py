"""LLM generate-loop metrics over OTLP: generate_span batches reach an OTLP
backend (a real gRPC receiver built from the opentelemetry-proto stubs) as the
catalogue's aaco.llm.* histograms, token sum and tokens/s gauge, with the
same counts and buckets as the Prometheus sink's aaco_llm_* for the same
input, the same model cap (drops counted by reason) and the pid's k8s/Slurm
attributes; OTLP on the bus (real nats-server) carries the same points."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.metrics.v1 import metrics_pb2
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from collectors.llmserve.stream_records import read_stream_file
from exporter import catalogue, schema
from exporter.bus import Bus, BusConfig
from exporter.instrument.llm import GenerateRecord, load
from exporter.instrument.publisher import generate_batch
from exporter.natsserver import EmbeddedNats
from exporter.sinks.otlp import OtlpConfig, OtlpSink
from exporter.sinks.otlp_bus import OtlpBusBridge
from exporter.sinks.prometheus import PromState
from stream_analytics.llm_metrics import ITL_BUCKETS_S, TTFT_BUCKETS_S, LlmSeries
from tests.support import ROOT, load_path

rx = load_path("aaco_otlp_receiver", Path(__file__).parent / "otlp_receiver.py")
LLAMA = ROOT / "collectors/llmserve/testdata/llamacpp_smollm2_135m_rate-1.jsonl"
ROMANIZER = ROOT / "tests/exporter/testdata/romanizer_generate_spans.jsonl"
TTFT, ITL = "aaco.llm.time_to_first_token", "aaco.llm.inter_token_latency"
TOKENS, TPS = "aaco.llm.output_tokens", "aaco.llm.tokens_per_second"
Samples = dict[str, list[tuple[dict[str, str], float]]]


def _bus_batch(recs: list[GenerateRecord], host: str) -> pa.RecordBatch:
    """``recs`` as the generate_span batch a consumer decodes off the bus."""
    msg = schema.encode("generate_span", generate_batch(recs), host=host, msg_id="t")
    sig, _, h, batch = schema.decode(msg.payload, msg.headers)
    assert (sig, h) == ("generate_span", host)
    return batch


def _prom(st: PromState) -> Samples:
    reg = CollectorRegistry()
    reg.register(st)
    out: Samples = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def _prom_buckets(samples: Samples, family: str, model: str) -> list[float]:
    """Cumulative bucket values of ``model``'s series, ``le`` ascending (+Inf last)."""
    rows = [(float(lab["le"]), v) for lab, v in samples[family + "_bucket"]
            if lab["model"] == model]
    return [v for _, v in sorted(rows)]


def _latest(r: Any, name: str) -> metrics_pb2.Metric:
    """The last exported ``name`` metric (points are cumulative)."""
    got = rx.metrics_of(r.metrics, name)
    assert got, f"{name} not exported"
    return got[-1][1]


def _export(batches: list[tuple[str, pa.RecordBatch]],
            http: bool = False) -> tuple[Any, OtlpSink]:
    with (rx.HttpReceiver() if http else rx.GrpcReceiver()) as r:
        sink = OtlpSink(OtlpConfig(endpoint=r.endpoint, insecure=True,
                                   protocol="http/protobuf" if http else "grpc"))
        try:
            for sig, b in batches:
                sink.ingest(sig, b, "n1")
            sink.flush()
            assert r.wait_for(lambda: bool(rx.metrics_of(r.metrics, TTFT)))
        finally:
            sink.close()
    return r, sink


def test_every_llm_catalogue_entry_names_a_series_field() -> None:
    """LLM_POINTS are exactly the catalogue's aaco.llm.* metrics, each bound to
    an LlmSeries field."""
    names = {m.otel for m in catalogue.CATALOGUE if m.otel.startswith("aaco.llm.")}
    assert {m.otel for m in catalogue.LLM_POINTS} == names == {TTFT, ITL, TOKENS, TPS}
    assert {m.llm for m in catalogue.LLM_POINTS} <= set(LlmSeries.__dataclass_fields__)


def test_llama_cpp_recording_over_otlp_equals_the_prometheus_side() -> None:
    """The 40 real llama.cpp calls (2554 token steps): the TTFT histogram counts
    40, the ITL histogram 2554 - 40, both with the Prometheus bucket bounds and
    cumulative bucket counts and sums equal to /metrics' for the same batch;
    the token sum equals the tokens the calls emitted; the tokens/s gauge
    equals /metrics'; names, units and kinds from the catalogue."""
    recs = read_stream_file(LLAMA).records
    assert len(recs) == 40 and sum(len(r.step_ns) for r in recs) == 2554
    batch = _bus_batch(recs, "n1")
    st = PromState()
    st.ingest("generate_span", "n1", batch)
    prom = _prom(st)
    r, sink = _export([("generate_span", batch)])
    model = recs[0].model
    for name, bounds, family, count in (
            (TTFT, TTFT_BUCKETS_S, "aaco_llm_time_to_first_token_seconds", 40),
            (ITL, ITL_BUCKETS_S, "aaco_llm_inter_token_latency_seconds", 2554 - 40)):
        m = _latest(r, name)
        d = catalogue.BY_OTEL[name]
        assert (m.unit, m.description, d.kind) == ("s", d.help, "histogram")
        assert m.histogram.aggregation_temporality == \
            metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
        (p,) = m.histogram.data_points
        assert p.count == count == sum(p.bucket_counts)
        assert tuple(p.explicit_bounds) == bounds
        assert np.cumsum(p.bucket_counts).tolist() == _prom_buckets(prom, family, model)
        assert p.sum == prom[family + "_sum"][0][1]
        assert p.HasField("min") and p.min <= p.max
        assert rx.attrs(p.attributes) == {"aaco.model": model, "process.pid": recs[0].pid}
    (p,) = _latest(r, TOKENS).sum.data_points
    assert _latest(r, TOKENS).sum.is_monotonic
    assert p.as_int == sum(sum(x.step_tokens) for x in recs) == \
        prom["aaco_llm_output_tokens_total"][0][1]
    (g,) = _latest(r, TPS).gauge.data_points
    assert g.as_double == prom["aaco_llm_tokens_per_second"][0][1] > 0
    res = rx.metrics_of(r.metrics, TTFT)[-1][0]
    assert res["host.name"] == "n1" and res["service.name"] == "aaco-exporter"
    assert sink.llm_exports >= 2 and not sink.take_drops()  # flush and close, no drops


def _calls(models: list[str], pid: int, steps: int = 3) -> list[GenerateRecord]:
    """One call per model: start 0, steps 1 ms apart from 2 ms, 2 tokens each."""
    return [GenerateRecord(i, m, 2, pid, pid, 0, 10**9,
                           [2_000_000 + k * 1_000_000 for k in range(steps)], [2] * steps)
            for i, m in enumerate(models)]


def test_model_cap_and_pod_attributes_follow_the_prometheus_side() -> None:
    """pid 10 sends 10 models: 8 are exported, the other 2 calls are counted as
    otlp_llm_model_cap (PromState counts the same 2 as llm_model_cap); every
    point carries the pid's pod, namespace, container and Slurm job; pid 11
    (no attribution) keeps its own 8 slots and no pod attributes."""
    models = [f"m{i}" for i in range(10)]
    attribution = schema.conform("k8s_attribution", pa.table({
        "ts_ns": [1], "kind": ["process"], "pid": [10], "namespace": ["ml"],
        "pod": ["llama-0"], "container": ["server"], "slurm_job_id": ["77"]}))
    a, b = _bus_batch(_calls(models, 10), "n1"), _bus_batch(_calls(["x"], 11, steps=1), "n1")
    st = PromState()
    for batch in (a, b):
        st.ingest("generate_span", "n1", batch)
    r, sink = _export([("k8s_attribution", attribution), ("generate_span", a),
                       ("generate_span", b)])
    assert sink.take_drops() == {"otlp_llm_model_cap": 2} and st.drops["llm_model_cap"] == 2
    assert not sink.take_drops()  # taken once
    points = {(rx.attrs(p.attributes)["process.pid"], rx.attrs(p.attributes)["aaco.model"]):
              rx.attrs(p.attributes) for p in _latest(r, TTFT).histogram.data_points}
    assert sorted(points) == [(10, m) for m in models[:8]] + [(11, "x")]
    for (pid, _), attrs in points.items():
        pod = {k: attrs.get(k) for k in ("k8s.pod.name", "k8s.namespace.name",
                                         "k8s.container.name", "slurm.job.id")}
        assert pod == ({"k8s.pod.name": "llama-0", "k8s.namespace.name": "ml",
                        "k8s.container.name": "server", "slurm.job.id": "77"} if pid == 10
                       else dict.fromkeys(pod))
    itl = {rx.attrs(p.attributes)["aaco.model"]: p for p in _latest(r, ITL).histogram.data_points}
    assert itl["m0"].count == 2 and itl["m0"].bucket_counts[ITL_BUCKETS_S.index(0.001)] == 2
    assert itl["x"].count == 0 and not itl["x"].HasField("min")  # one step: no ITL sample
    tokens = {rx.attrs(p.attributes)["aaco.model"]: p.as_int
              for p in _latest(r, TOKENS).sum.data_points}
    assert tokens == {**{m: 6 for m in models[:8]}, "x": 2}


async def _bridge_request(url: str, batch: pa.RecordBatch) -> tuple[int, list[bytes]]:
    bus = await Bus.open(url, BusConfig(), "n1")
    try:
        bridge = OtlpBusBridge()
        bridge.ingest("generate_span", "n1", batch)
        sent = await bridge.flush(bus)
        empty = await bridge.flush(bus)  # nothing new: no metrics request
        sub = await bus.js.pull_subscribe("aaco.v1.otlp.metrics.>", durable=None, stream="AACO")
        msgs = await sub.fetch(10, timeout=5)
        return sent + 10 * empty, [m.data for m in msgs]
    finally:
        await bus.close()


def test_otlp_on_the_bus_carries_the_same_llm_points(tmp_path: Path) -> None:
    """The recorded romanizer calls through OtlpBusBridge on a real nats-server:
    one metrics request whose TTFT/ITL histograms, token sum and tokens/s equal
    the SDK exporter's for the same batch (6 calls, steps - calls ITL samples)."""
    recs = load([str(ROMANIZER)])
    batch = _bus_batch(recs, "n1")
    with EmbeddedNats(tmp_path / "nats") as srv:
        sent, payloads = asyncio.run(_bridge_request(srv.url, batch))
    assert sent == 1 and len(payloads) == 1
    bus_req = ExportMetricsServiceRequest.FromString(payloads[0])
    r, _ = _export([("generate_span", batch)])
    for name in (TTFT, ITL):
        (_, bm), = rx.metrics_of([bus_req], name)
        (bp,), (sp,) = bm.histogram.data_points, _latest(r, name).histogram.data_points
        assert (bp.count, list(bp.bucket_counts), bp.sum, bp.min, bp.max) == \
            (sp.count, list(sp.bucket_counts), sp.sum, sp.min, sp.max)
        assert bm.unit == "s" and list(bp.explicit_bounds) == list(sp.explicit_bounds)
        assert rx.attrs(bp.attributes) == rx.attrs(sp.attributes)
    ttft = rx.metrics_of([bus_req], TTFT)[0][1].histogram.data_points[0]
    itl = rx.metrics_of([bus_req], ITL)[0][1].histogram.data_points[0]
    assert ttft.count == 6 and itl.count == sum(len(x.step_ns) - 1 for x in recs)
    (tok,) = rx.metrics_of([bus_req], TOKENS)[0][1].sum.data_points
    assert tok.as_int == sum(sum(x.step_tokens) for x in recs)
    (tps,) = rx.metrics_of([bus_req], TPS)[0][1].gauge.data_points
    assert tps.as_double == _latest(r, TPS).gauge.data_points[0].as_double


def test_http_protobuf_export_carries_the_llm_metrics() -> None:
    """Over OTLP/HTTP: the 6 recorded romanizer calls give a TTFT count of 6 and
    the token sum the calls emitted."""
    recs = load([str(ROMANIZER)])
    r, _ = _export([("generate_span", _bus_batch(recs, "n1"))], http=True)
    (p,) = _latest(r, TTFT).histogram.data_points
    (tok,) = _latest(r, TOKENS).sum.data_points
    assert (p.count, tok.as_int) == (6, sum(sum(x.step_tokens) for x in recs))
