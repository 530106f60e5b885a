"""stream_analytics/llm.py on a real LLM decode loop: 40 streamed requests to
llama.cpp serving SmolLM2-135M (collectors/llmserve/testdata/
llamacpp_smollm2_135m_rate-1.jsonl, see its PROVENANCE.md). Counts and
identities are checked against fields of the file and against the lab's own
report of the same file (measured/ch03/report.json, computed by its
metrics.py, not by this project); figures are copied into the docstrings."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from collectors.llmserve.stream_records import read_stream_file
from stream_analytics.llm import LlmMetrics, batch_curve, generates_table, steps_table

LLAMA = (Path(__file__).parents[2]
         / "collectors/llmserve/testdata/llamacpp_smollm2_135m_rate-1.jsonl")
NS = 1e-9  # records hold ns; the file holds float seconds


def test_steps_table_has_one_row_per_streamed_text_chunk() -> None:
    """2554 steps = 38 x 64 + 2 x 61 text chunks; per request the step count
    is the file's ``chunks`` field less 3 (role, stop and usage chunks)."""
    recs = read_stream_file(LLAMA).records
    st = steps_table(recs)
    assert st.num_rows == 2554 == 38 * 64 + 2 * 61
    raw = [json.loads(x) for x in LLAMA.read_text().splitlines()]
    per = np.bincount(st["generate_id"].to_numpy(), minlength=40)
    assert per.tolist() == [x["chunks"] - 3 for x in raw]


def test_ttft_of_request_0_is_its_first_text_chunk_minus_sent() -> None:
    """Line 1: sent 0.2764479530014796, first text chunk 0.3365908949999721
    -> TTFT 0.0601429419985 s; its 64 tokens over sent..last chunk
    (0.576186004000192) -> 64 / 0.2997380509987 = 213.52 tokens/s."""
    g = generates_table(read_stream_file(LLAMA).records).to_pylist()[0]
    assert g["ttft_s"] == pytest.approx(0.3365908949999721 - 0.2764479530014796, abs=2 * NS)
    assert g["tokens"] == 64 and g["steps"] == 64
    assert g["tokens_per_s"] == pytest.approx(64 / (0.576186004000192 - 0.2764479530014796),
                                              rel=1e-7)


def test_client_ttft_never_undercuts_the_servers_prompt_time() -> None:
    """llama.cpp's ``prompt_ms`` lies inside the client's TTFT for all 40
    requests; the smallest gap is the report's client_minus_server_ttft.min,
    0.0026848399999735394 s."""
    s = read_stream_file(LLAMA)
    ttft = generates_table(s.records)["ttft_s"].to_numpy()
    gap = ttft - s.server["prompt_s"].to_numpy()
    assert (gap > 0).all()
    assert gap.min() == pytest.approx(0.0026848399999735394, abs=2 * NS)


def test_ttft_and_pooled_itl_match_the_labs_own_report() -> None:
    """report.json of the same file: TTFT n 40, mean 0.05060548425008164,
    p50 0.05725335649913177, p99 0.08698082161059574; ITL pooled over every
    gap n 2514 (= 2554 steps - 40 first steps), p50 0.0027183365000382764,
    p90 0.004289772199990691, p99 0.020854544749163324."""
    recs = read_stream_file(LLAMA).records
    g = generates_table(recs)
    ttft = g["ttft_s"].to_numpy()
    assert len(ttft) == 40
    assert ttft.mean() == pytest.approx(0.05060548425008164, abs=2 * NS)
    assert np.percentile(ttft, 50) == pytest.approx(0.05725335649913177, abs=2 * NS)
    assert np.percentile(ttft, 99) == pytest.approx(0.08698082161059574, abs=2 * NS)
    st = steps_table(recs)
    itl = st.filter(st["step"].to_numpy() > 0)["gap_ns"].to_numpy() * NS
    assert len(itl) == 2514
    for q, want in ((50, 0.0027183365000382764), (90, 0.004289772199990691),
                    (99, 0.020854544749163324)):
        assert np.percentile(itl, q) == pytest.approx(want, abs=2 * NS)


def test_batch_curve_pools_the_recording_into_one_batch_1_row() -> None:
    """One model, batch size 1: 40 generates, 2560 tokens, TTFT p50 and pooled
    ITL p50 as in the report (0.05725335649913177, 0.0027183365000382764)."""
    rows = batch_curve(read_stream_file(LLAMA).records).to_pylist()
    assert len(rows) == 1
    r = rows[0]
    assert (r["batch_size"], r["generates"], r["tokens"]) == (1, 40, 2560)
    assert r["ttft_p50_s"] == pytest.approx(0.05725335649913177, abs=2 * NS)
    assert r["itl_p50_s"] == pytest.approx(0.0027183365000382764, abs=2 * NS)


def test_online_families_count_every_request_and_token() -> None:
    """Through a real prometheus-client registry: TTFT histogram count 40, its
    cumulative buckets equal the number of requests whose first text chunk
    came within the bound of ``sent`` in the raw file (8 by 0.025 s, 13 by
    0.05 s, all 40 by 0.1 s; the fastest 0.01694 s, the slowest 0.08996 s),
    ITL count 2514, output tokens 2560."""
    reg = CollectorRegistry()
    m = LlmMetrics(host="h")
    reg.register(m)
    assert m.observe(read_stream_file(LLAMA).records) == 40
    fams = {f.name: f for f in text_string_to_metric_families(generate_latest(reg).decode())}
    samples = {(s.name, s.labels.get("le")): s.value
               for f in fams.values() for s in f.samples}
    ttft = "aaco_llm_time_to_first_token_seconds"
    assert samples[(ttft + "_count", None)] == 40
    raw = [json.loads(x) for x in LLAMA.read_text().splitlines()]
    first = np.array([x["text_chunk_times"][0] - x["sent"] for x in raw])
    for le, n in (("0.025", 8), ("0.05", 13), ("0.1", 40)):
        assert samples[(ttft + "_bucket", le)] == n == int((first <= float(le)).sum())
    assert samples[("aaco_llm_inter_token_latency_seconds_count", None)] == 2514
    assert samples[("aaco_llm_output_tokens_total", None)] == 2560
