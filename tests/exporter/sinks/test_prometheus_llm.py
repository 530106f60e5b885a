"""The Prometheus sink folds generate_span batches (finished LLM generate
calls) into aaco_llm_*: exact counts per (host, model, pid), the pid's
k8s/Slurm labels once attribution exists, a bounded model label set whose
overflow is counted as llm_model_cap, and stale series forgotten."""

from __future__ import annotations

import pyarrow as pa
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter import schema
from exporter.instrument.llm import load
from exporter.instrument.publisher import generate_batch
from exporter.sinks.prometheus import PromState
from stream_analytics.llm import LlmMetrics
from tests.fuzzing.targets import ROOT

Samples = dict[str, list[tuple[dict[str, str], float]]]
SPANS = ROOT / "tests" / "exporter" / "testdata" / "romanizer_generate_spans.jsonl"


def _scrape(state: object) -> Samples:
    reg = CollectorRegistry()
    reg.register(state)  # type: ignore[arg-type]
    out: Samples = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def _calls(models: list[str], pid: int) -> pa.RecordBatch:
    n = len(models)
    return schema.conform("generate_span", pa.table({
        "generate_id": list(range(n)), "model": models, "pid": [pid] * n,
        "batch_size": [2] * n, "start_ns": [0] * n, "end_ns": [10**9] * n,
        "step_ns": [[1000, 3000]] * n, "step_tokens": [[2, 2]] * n}))


def test_bus_batches_fold_like_the_in_process_spans() -> None:
    """The recorded romanizer calls, sent as one generate_span batch through
    the sink, give the same TTFT/ITL histograms, tokens and tokens/s as
    LlmMetrics.observe on the same spans in process."""
    spans = load([str(SPANS)])
    msg = schema.encode("generate_span", generate_batch(spans), host="n1", msg_id="x")
    sig, _, host, batch = schema.decode(msg.payload, msg.headers)
    st = PromState()
    st.ingest(sig, host, batch)
    online = LlmMetrics(host="n1")
    assert online.observe(spans) == len(spans) == 6
    bus, local = _scrape(st), _scrape(online)
    for name in ("aaco_llm_time_to_first_token_seconds_bucket",
                 "aaco_llm_inter_token_latency_seconds_bucket",
                 "aaco_llm_output_tokens_total", "aaco_llm_tokens_per_second",
                 "aaco_llm_time_to_first_token_seconds_sum"):
        assert bus[name] == local[name], name
    (lab, count), = bus["aaco_llm_time_to_first_token_seconds_count"]
    assert (lab, count) == ({"host": "n1", "model": "romanizer", "pid": str(spans[0].pid)}, 6)
    tokens = sum(sum(r.step_tokens) for r in spans)
    assert bus["aaco_llm_output_tokens_total"][0][1] == tokens
    assert bus["aaco_llm_inter_token_latency_seconds_count"][0][1] == sum(
        len(r.step_ns) - 1 for r in spans)


def test_pid_gains_its_pod_and_slurm_labels_once_attribution_exists() -> None:
    """With k8s_attribution for pid 10, its aaco_llm_* series carry pod,
    namespace, container and slurm_job_id."""
    st = PromState()
    st.ingest("k8s_attribution", "a", schema.conform("k8s_attribution", pa.table({
        "ts_ns": [1], "kind": ["process"], "pid": [10], "namespace": ["ml"],
        "pod": ["llama-0"], "container": ["server"], "slurm_job_id": ["77"]})))
    st.ingest("generate_span", "a", _calls(["m"], 10))
    (lab, v), = _scrape(st)["aaco_llm_output_tokens_total"]
    assert lab == {"host": "a", "model": "m", "pid": "10", "pod": "llama-0",
                   "namespace": "ml", "container": "server", "slurm_job_id": "77"}
    assert v == 4


def test_models_per_pid_are_capped_and_overflow_counted_by_reason() -> None:
    """A pid naming 10 models keeps series for the first 8; the calls of the
    other two count as llm_model_cap drops; another pid has its own 8 slots;
    model names are cut to 128 characters."""
    st = PromState()
    st.ingest("generate_span", "a", _calls([f"m{i}" for i in range(10)] + ["m9"], 1))
    st.ingest("generate_span", "a", _calls(["x" * 300], 2))
    series = _scrape(st)["aaco_llm_output_tokens_total"]
    assert sorted(lab["model"] for lab, _ in series if lab["pid"] == "1") == [
        f"m{i}" for i in range(8)]
    assert [lab["model"] for lab, _ in series if lab["pid"] == "2"] == ["x" * 128]
    assert st.drops["llm_model_cap"] == 3


def test_stale_series_are_forgotten_and_free_their_model_slot() -> None:
    """A key not updated for stale_s is dropped at scrape; the pid then takes
    a new model again."""
    st = PromState(stale_s=0.0)
    st.ingest("generate_span", "a", _calls([f"m{i}" for i in range(8)], 1))
    assert "aaco_llm_output_tokens_total" not in _scrape(st)
    st.stale_s = 300.0
    st.ingest("generate_span", "a", _calls(["new"], 1))
    assert [lab["model"] for lab, _ in _scrape(st)["aaco_llm_output_tokens_total"]] == ["new"]
    assert st.drops["llm_model_cap"] == 0
