"""LLM generate-loop metrics (stream_analytics/llm.py): TTFT, inter-token
latency and tokens/s follow their definitions on spans stamped by an injected
clock, and the online collector exposes catalogued aaco_llm_* families through
a real prometheus-client registry."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.instrument.llm import GenerateRecord, generate_span, records
from stream_analytics.llm import (
    BATCH_CURVE,
    GENERATES,
    STEPS,
    LlmMetrics,
    batch_curve,
    generates_table,
    steps_table,
)
from tests.support import uncatalogued

MS = 1_000_000


def _clock(ticks_ms: list[int]) -> Iterator[int]:
    return iter(t * MS for t in ticks_ms)


def _span(model: str, batch: int, ticks_ms: list[int], steps: int,
          fail: bool = False) -> GenerateRecord:
    """A span whose start, steps and end read ``ticks_ms`` in that order."""
    it = _clock(ticks_ms)
    ctx: Any = pytest.raises(RuntimeError) if fail else contextlib.nullcontext()
    with ctx, generate_span(model, batch_size=batch, clock=lambda: next(it)) as g:
        for _ in range(steps):
            g.token()
        if fail:
            raise RuntimeError("boom")
    return g.record


def test_ttft_itl_and_tokens_per_second_follow_the_definitions() -> None:
    """start 0, steps at 100/120/150 ms, end 200 ms, batch 4: TTFT 0.1 s, ITL
    0.02 and 0.03 s, 12 tokens, 60 tokens/s, decode 8 tokens / 0.05 s = 160/s."""
    r = _span("m", 4, [0, 100, 120, 150, 200], 3)
    g = generates_table([r])
    assert g.schema == GENERATES
    row = g.to_pylist()[0]
    assert row["ttft_s"] == pytest.approx(0.1)
    assert row["itl_mean_s"] == pytest.approx(0.025)
    assert row["itl_p50_s"] == pytest.approx(0.025)
    assert (row["steps"], row["tokens"]) == (3, 12)
    assert row["tokens_per_s"] == pytest.approx(60.0)
    assert row["decode_tokens_per_s"] == pytest.approx(160.0)
    s = steps_table([r])
    assert s.schema == STEPS
    assert s["gap_ns"].to_pylist() == [100 * MS, 20 * MS, 30 * MS]
    assert s["step"].to_pylist() == [0, 1, 2]


def test_batch_curve_has_one_row_per_batch_size_and_skips_failed_spans() -> None:
    """Two batch sizes give two rows with their own TTFT medians; a span that
    raised is kept (error set) but stays out of the curve."""
    recs = [_span("m", 1, [0, 10, 12, 14], 2), _span("m", 1, [0, 30, 32, 34], 2),
            _span("m", 8, [0, 50, 60, 70], 2), _span("m", 8, [0, 5, 9], 1, fail=True)]
    assert recs[-1].error == "RuntimeError"
    c = batch_curve(recs)
    assert c.schema == BATCH_CURVE
    rows = c.to_pylist()
    assert [(r["batch_size"], r["generates"]) for r in rows] == [(1, 2), (8, 1)]
    assert rows[0]["ttft_p50_s"] == pytest.approx(0.02)
    assert rows[1]["tokens"] == 16
    assert rows[1]["tokens_per_s_per_sequence"] == pytest.approx(rows[1]["tokens_per_s_mean"]
                                                                 / 8)
    assert records()[-1] is recs[-1]  # the store keeps finished spans, oldest first


def test_online_collector_exposes_catalogued_families_with_exact_counts() -> None:
    """Three spans (one failed) folded online: the TTFT histogram counts 2,
    the ITL histogram counts the 3 step gaps, tokens count every emitted
    token, and every aaco_llm_* sample is in the catalogue."""
    recs = [_span("m", 2, [0, 10, 11, 12, 20], 3), _span("m", 2, [0, 7, 9, 10], 2),
            _span("m", 2, [0, 5, 9], 1, fail=True)]
    online = LlmMetrics(host="h")
    assert online.observe(recs) == 3
    reg = CollectorRegistry()
    reg.register(online)
    text = generate_latest(reg).decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            samples.setdefault(s.name, []).append((dict(s.labels), s.value))
    assert not uncatalogued(samples)
    assert samples["aaco_llm_time_to_first_token_seconds_count"][0][1] == 2
    assert samples["aaco_llm_inter_token_latency_seconds_count"][0][1] == 3
    assert samples["aaco_llm_output_tokens_total"][0][1] == 2 * 3 + 2 * 2 + 2 * 1
    assert samples["aaco_llm_tokens_per_second"][0] == (
        {"host": "h", "model": "m", "pid": str(recs[0].pid)}, pytest.approx(4 / 0.010))
    assert samples["aaco_llm_time_to_first_token_seconds_sum"][0][1] == pytest.approx(0.017)


def test_batch_size_below_one_is_refused() -> None:
    """generate_span names the bad batch size."""
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"), \
            generate_span("m", batch_size=0):
        pass
