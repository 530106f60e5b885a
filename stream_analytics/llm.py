"""LLM generate-loop metrics: TTFT, inter-token latency, tokens/s, batch curves.

Input: finished generate spans (:class:`exporter.instrument.llm.GenerateRecord`).
Definitions (docs/llm.md), per generate call *g* with start *s*, end *e*
and token steps at t_1 < ... < t_n emitting k_1 ... k_n tokens:

* **TTFT** = t_1 - s (seconds); null without steps.
* **ITL** (inter-token latency) = t_i - t_(i-1) for i = 2..n (one value
  per step, seconds; a batched step emits one token per sequence, so ITL is
  per sequence); a call with one step has none.
* **tokens** = Σ k_i; **tokens/s** = tokens ÷ (e - s) (end-to-end output
  throughput of the call); **decode tokens/s** = (tokens - k_1) ÷ (t_n - t_1).

Tables (columnar, :data:`STEPS`, :data:`GENERATES`, :data:`BATCH_CURVE`):
:func:`steps_table` one row per token step, :func:`generates_table` one row
per call, :func:`batch_curve` one row per (model, batch size): the curve of
TTFT, ITL and throughput against batch size.

:class:`LlmMetrics` (:mod:`stream_analytics.llm_metrics`, re-exported here)
is the online form: it folds spans, or ``generate_span`` bus batches, into
per-(host, model, pid) histograms and counters and is a prometheus-client
collector exposing the catalogue's ``aaco_llm_*`` families.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from exporter.instrument.llm import GenerateRecord
from stream_analytics.llm_metrics import (
    ITL_BUCKETS_S,
    MAX_MODELS_PER_PID,
    TTFT_BUCKETS_S,
    LlmMetrics,
    records_table,
)

__all__ = ["BATCH_CURVE", "GENERATES", "ITL_BUCKETS_S", "MAX_MODELS_PER_PID", "STEPS",
           "TTFT_BUCKETS_S", "LlmMetrics", "batch_curve", "generates_table", "records_table",
           "steps_table"]

STEPS = pa.schema([
    ("generate_id", pa.int64()), ("model", pa.string()), ("pid", pa.int64()),
    ("batch_size", pa.int64()), ("step", pa.int64()), ("time_ns", pa.int64()),
    ("tokens", pa.int64()),
    ("gap_ns", pa.int64()),  # step 0: TTFT; later steps: ITL
])
GENERATES = pa.schema([
    ("generate_id", pa.int64()), ("model", pa.string()), ("pid", pa.int64()),
    ("batch_size", pa.int64()), ("start_ns", pa.int64()), ("end_ns", pa.int64()),
    ("steps", pa.int64()), ("tokens", pa.int64()), ("ttft_s", pa.float64()),
    ("itl_mean_s", pa.float64()), ("itl_p50_s", pa.float64()), ("itl_p99_s", pa.float64()),
    ("duration_s", pa.float64()), ("tokens_per_s", pa.float64()),
    ("decode_tokens_per_s", pa.float64()), ("error", pa.string()),
])
BATCH_CURVE = pa.schema([
    ("model", pa.string()), ("batch_size", pa.int64()), ("generates", pa.int64()),
    ("tokens", pa.int64()), ("ttft_p50_s", pa.float64()), ("ttft_mean_s", pa.float64()),
    ("itl_p50_s", pa.float64()), ("itl_p99_s", pa.float64()),
    ("tokens_per_s_mean", pa.float64()), ("tokens_per_s_per_sequence", pa.float64()),
])

def _ok(recs: Iterable[GenerateRecord]) -> list[GenerateRecord]:
    return [r for r in recs if r.step_ns]


def steps_table(recs: Sequence[GenerateRecord]) -> pa.Table:
    """:data:`STEPS` rows of every span with at least one step."""
    rs = _ok(recs)
    n = np.array([len(r.step_ns) for r in rs], np.int64)
    if not rs:
        return STEPS.empty_table()
    t = np.concatenate([np.asarray(r.step_ns, np.int64) for r in rs])
    prev = np.concatenate([np.r_[r.start_ns, np.asarray(r.step_ns[:-1], np.int64)]
                           for r in rs]).astype(np.int64)
    rep = np.repeat(np.arange(len(rs)), n)
    return pa.table({
        "generate_id": np.array([r.generate_id for r in rs], np.int64)[rep],
        "model": pa.array([r.model for r in rs]).take(pa.array(rep)),
        "pid": np.array([r.pid for r in rs], np.int64)[rep],
        "batch_size": np.array([r.batch_size for r in rs], np.int64)[rep],
        "step": np.concatenate([np.arange(k) for k in n]).astype(np.int64),
        "time_ns": t,
        "tokens": np.concatenate([np.asarray(r.step_tokens, np.int64) for r in rs]),
        "gap_ns": t - prev,
    }, schema=STEPS)


def _one(r: GenerateRecord) -> dict[str, Any]:
    steps = np.asarray(r.step_ns, np.int64)
    toks = np.asarray(r.step_tokens, np.int64)
    dur = (r.end_ns - r.start_ns) / 1e9
    itl = np.diff(steps) / 1e9
    total = int(toks.sum())
    return {
        "generate_id": r.generate_id, "model": r.model, "pid": r.pid,
        "batch_size": r.batch_size, "start_ns": r.start_ns, "end_ns": r.end_ns,
        "steps": len(steps), "tokens": total,
        "ttft_s": float(steps[0] - r.start_ns) / 1e9 if len(steps) else None,
        "itl_mean_s": float(itl.mean()) if len(itl) else None,
        "itl_p50_s": float(np.percentile(itl, 50)) if len(itl) else None,
        "itl_p99_s": float(np.percentile(itl, 99)) if len(itl) else None,
        "duration_s": dur,
        "tokens_per_s": total / dur if dur > 0 else None,
        "decode_tokens_per_s": (float(total - toks[0]) / ((steps[-1] - steps[0]) / 1e9)
                                if len(steps) > 1 and steps[-1] > steps[0] else None),
        "error": r.error,
    }


def generates_table(recs: Sequence[GenerateRecord]) -> pa.Table:
    """:data:`GENERATES` rows, one per span (spans without steps included,
    their TTFT null)."""
    return pa.Table.from_pylist([_one(r) for r in recs], schema=GENERATES)


def batch_curve(recs: Sequence[GenerateRecord]) -> pa.Table:
    """:data:`BATCH_CURVE` rows per (model, batch size), sorted, over spans
    that completed (no ``error``) with at least one step. ITL percentiles pool
    every step gap of the group; ``tokens_per_s_per_sequence`` is the mean
    tokens/s divided by the batch size."""
    groups: dict[tuple[str, int], list[GenerateRecord]] = {}
    for r in _ok(recs):
        if r.error is None:
            groups.setdefault((r.model, r.batch_size), []).append(r)
    rows = []
    for (model, bs), rs in sorted(groups.items()):
        g = [_one(r) for r in rs]
        ttft = np.array([x["ttft_s"] for x in g], np.float64)
        itl = np.concatenate([np.diff(np.asarray(r.step_ns, np.int64)) / 1e9 for r in rs])
        tps = np.array([x["tokens_per_s"] for x in g if x["tokens_per_s"] is not None])
        rows.append({
            "model": model, "batch_size": bs, "generates": len(rs),
            "tokens": int(sum(x["tokens"] for x in g)),
            "ttft_p50_s": float(np.percentile(ttft, 50)), "ttft_mean_s": float(ttft.mean()),
            "itl_p50_s": float(np.percentile(itl, 50)) if len(itl) else None,
            "itl_p99_s": float(np.percentile(itl, 99)) if len(itl) else None,
            "tokens_per_s_mean": float(tps.mean()) if len(tps) else None,
            "tokens_per_s_per_sequence": float(tps.mean()) / bs if len(tps) else None,
        })
    return pa.Table.from_pylist(rows, schema=BATCH_CURVE)
