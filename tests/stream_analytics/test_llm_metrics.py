"""LlmMetrics.observe_table (stream_analytics/llm_metrics.py) folds a
columnar batch of generate calls: step gaps never cross two calls, failed
calls and calls without steps count tokens only, and each (model, pid) key
gets exactly its own calls."""

from __future__ import annotations

import pyarrow as pa
import pytest

from stream_analytics.llm_metrics import LlmMetrics

MS = 1_000_000


def test_mixed_batch_folds_exact_counts_per_key_without_cross_call_gaps() -> None:
    """Rows: a (3 steps), a failed (2 steps), b (no steps), a (1 step), b (2
    steps) of one pid: key a has TTFT count 2 (10 ms, 5 ms), ITL count 2 (the
    gaps inside the first call only), tokens 3+2+1; key b has one TTFT of
    1 ms, one ITL of 4 ms, tokens 2."""
    t = pa.table({
        "model": ["a", "a", "b", "a", "b"], "pid": [5] * 5,
        "start_ns": [0, 100 * MS, 200 * MS, 300 * MS, 400 * MS],
        "end_ns": [50 * MS, 150 * MS, 210 * MS, 320 * MS, 420 * MS],
        "step_ns": [[10 * MS, 20 * MS, 40 * MS], [110 * MS, 111 * MS], [], [305 * MS],
                    [401 * MS, 405 * MS]],
        "step_tokens": [[1, 1, 1], [1, 1], [], [1], [1, 1]],
        "error": [None, "RuntimeError", None, None, None],
    })
    m = LlmMetrics()
    assert m.observe_table("h", t) == 5
    a, b = m.keys[("h", "a", "5")], m.keys[("h", "b", "5")]
    assert (int(a.ttft.counts.sum()), int(a.itl.counts.sum()), a.tokens) == (2, 2, 6)
    assert a.ttft.total == pytest.approx(0.015)
    assert a.itl.total == pytest.approx(0.030)  # 10 ms + 20 ms; not 110 - 40 ms
    assert a.tps == pytest.approx(1 / 0.020)  # the latest call: 1 token in 20 ms
    assert (int(b.ttft.counts.sum()), int(b.itl.counts.sum()), b.tokens) == (1, 1, 2)
    assert (b.ttft.total, b.itl.total) == (pytest.approx(0.001), pytest.approx(0.004))


def test_empty_and_stepless_batches_fold_nothing_but_tokens() -> None:
    """A zero-row batch folds nothing; calls without steps make a key with no
    latency samples and zero tokens."""
    m = LlmMetrics()
    empty = pa.table({"model": pa.array([], pa.string()), "pid": pa.array([], pa.int64()),
                      "start_ns": pa.array([], pa.int64()), "end_ns": pa.array([], pa.int64()),
                      "step_ns": pa.array([], pa.list_(pa.int64())),
                      "step_tokens": pa.array([], pa.list_(pa.int64())),
                      "error": pa.array([], pa.string())})
    assert m.observe_table("h", empty) == 0 and not m.keys
    stepless = pa.table({"model": ["a"], "pid": [1], "start_ns": [0], "end_ns": [5],
                         "step_ns": [[]], "step_tokens": [[]], "error": [None]},
                        schema=empty.schema)
    assert m.observe_table("h", stepless) == 1
    k = m.keys[("h", "a", "1")]
    assert (int(k.ttft.counts.sum()), k.tokens, k.tps) == (0, 0, None)
