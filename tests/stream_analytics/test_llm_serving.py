"""stream_analytics/llm_serving.py: TTFT figures from a real vLLM 0.29.0
scrape's buckets (collectors/llmserve/testdata), with each quantile worked
out by hand from the bucket counts in the docstrings; histogram_quantile
follows Prometheus' rule at its edges."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from collectors.llmserve.vllm_metrics import parse_vllm_metrics
from stream_analytics.llm_serving import SUMMARY, histogram_quantile, serving_summary

SCRAPE = (Path(__file__).parents[2]
          / "collectors/llmserve/testdata/vllm_0.29.0_smollm2_360m_scrape.txt")


def test_ttft_figures_of_the_real_scrape() -> None:
    """178 requests, sum 50.285691261291504 s -> mean 0.282503883... s.
    p50: rank 89 falls in (0.1, 0.25] holding 129 -> 0.1 + 0.15 * 89/129.
    p90: rank 160.2 in (0.25, 0.5] holding 167-129 = 38 -> 0.25 + 0.25 * 31.2/38.
    p99: rank 176.22 in (1.0, 2.5] holding 178-171 = 7 -> 1.0 + 1.5 * 5.22/7.
    Tokens: 11392. No ITL histogram in this (filtered) scrape: nulls."""
    t = serving_summary(parse_vllm_metrics(SCRAPE.read_text()))
    assert t.schema == SUMMARY and t.num_rows == 1
    row = t.to_pylist()[0]
    assert (row["model"], row["engine"], row["ttft_count"]) == ("smollm2-360m", "0", 178)
    assert row["ttft_mean_s"] == pytest.approx(50.285691261291504 / 178)
    assert row["ttft_p50_s"] == pytest.approx(0.1 + 0.15 * 89 / 129)
    assert row["ttft_p90_s"] == pytest.approx(0.25 + 0.25 * 31.2 / 38)
    assert row["ttft_p99_s"] == pytest.approx(1.0 + 1.5 * 5.22 / 7)
    assert row["output_tokens_total"] == 11392
    assert row["itl_count"] is None and row["itl_p50_s"] is None


def test_histogram_quantile_edges_follow_prometheus() -> None:
    """First bucket interpolates from 0; a rank in +Inf gives the largest
    finite bound; an empty histogram gives None; no +Inf bucket is an error."""
    le = np.array([1.0, 2.0, np.inf])
    assert histogram_quantile(le, np.array([4.0, 4.0, 4.0]), 0.5) == pytest.approx(0.5)
    assert histogram_quantile(le, np.array([1.0, 2.0, 10.0]), 0.99) == 2.0
    assert histogram_quantile(le, np.zeros(3), 0.5) is None
    with pytest.raises(ValueError, match=r"\+Inf"):
        histogram_quantile(np.array([1.0, 2.0]), np.array([1.0, 2.0]), 0.5)
