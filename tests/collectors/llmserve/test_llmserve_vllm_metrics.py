"""collectors/llmserve/vllm_metrics.py on a real vLLM 0.29.0 /metrics scrape
(collectors/llmserve/testdata/vllm_0.29.0_smollm2_360m_scrape.txt, see its
PROVENANCE.md): buckets, count/sum and the token counter come out as read
from the file; a broken line is named."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from collectors.llmserve.vllm_metrics import BUCKETS, SERIES, VALUES, parse_vllm_metrics

SCRAPE = (Path(__file__).parents[3]
          / "collectors/llmserve/testdata/vllm_0.29.0_smollm2_360m_scrape.txt")


def test_the_ttft_histogram_and_token_counter_are_read_as_exposed() -> None:
    """23 TTFT buckets (0.001 .. 2560 and +Inf; 0 up to 0.1 s, 129 at 0.25,
    167 at 0.5, 178 from 2.5 on), count 178, sum 50.285691261291504 s,
    vllm:generation_tokens_total 11392; the _created samples are skipped."""
    s = parse_vllm_metrics(SCRAPE.read_text(), str(SCRAPE))
    assert (s.buckets.schema, s.series.schema, s.counters.schema) == (BUCKETS, SERIES, VALUES)
    b = s.buckets.to_pydict()
    assert set(b["figure"]) == {"ttft"} and set(b["model"]) == {"smollm2-360m"}
    assert set(b["engine"]) == {"0"}
    assert len(b["le"]) == 23 and math.isinf(b["le"][-1])
    cum = dict(zip(b["le"], b["cumulative"], strict=True))
    assert (cum[0.1], cum[0.25], cum[0.5], cum[1.0], cum[2.5], cum[math.inf]) == (
        0, 129, 167, 171, 178, 178)
    assert s.series.to_pylist() == [{"figure": "ttft", "model": "smollm2-360m", "engine": "0",
                                     "count": 178.0, "sum": 50.285691261291504}]
    assert s.counters.to_pylist() == [{"figure": "output_tokens", "model": "smollm2-360m",
                                       "engine": "0", "value": 11392.0}]


def test_every_request_of_the_ramp_gave_its_64_tokens() -> None:
    """The lab's load client asks 64 tokens of every request (ch03 README:
    178 requests, 0 errors): the server's token counter is 178 x 64 and the
    TTFT histogram counted each request once (+Inf bucket = count = 178)."""
    s = parse_vllm_metrics(SCRAPE.read_text())
    count = s.series["count"][0].as_py()
    assert s.buckets["cumulative"][-1].as_py() == count == 178
    assert s.counters["value"][0].as_py() == count * 64


def test_families_of_other_servers_and_comments_are_skipped() -> None:
    """HELP/TYPE lines, a gauge and another server's histogram add nothing."""
    text = ("# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{model_name="m"} 3\n'
            'sglang:time_to_first_token_seconds_bucket{le="1.0"} 2\n' + SCRAPE.read_text())
    s = parse_vllm_metrics(text)
    assert (s.buckets.num_rows, s.series.num_rows, s.counters.num_rows) == (23, 1, 1)


def test_a_broken_sample_line_is_named_by_source_and_line() -> None:
    """Line 3 of this text (lines 1-2 real) lacks its closing brace."""
    lines = SCRAPE.read_text().splitlines()
    text = "\n".join([*lines[:2], 'vllm:time_to_first_token_seconds_bucket{le="0.1" 1', ""])
    with pytest.raises(ValueError, match=r"^scrape_synthetic:3: not a Prometheus sample"):
        parse_vllm_metrics(text, "scrape_synthetic")
