"""aaco_llm_* figures from an LLM server's own Prometheus histograms.

Input: a parsed vLLM scrape (:class:`collectors.llmserve.vllm_metrics.VllmScrape`,
cumulative bucket counts per upper bound). Output: :data:`SUMMARY`, one row
per (model, engine): the request count and mean of each histogram
(``_sum`` ÷ ``_count``, seconds), its p50/p90/p99 estimated from the buckets
(:func:`histogram_quantile`), and the output-token counter. Column names
follow the figures of :mod:`stream_analytics.llm` (``ttft``, ``itl``);
``tpot`` is older vLLM's per-output-token histogram, ``e2e`` the request
latency. A histogram the scrape lacks gives nulls.

What buckets cannot give: exact quantiles (a quantile is interpolated
linearly inside its bucket, as PromQL's ``histogram_quantile`` does) and
per-token timestamps; tokens/s needs two scrapes (counter difference ÷
their time apart), which one scrape does not have.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from collectors.llmserve.vllm_metrics import HISTOGRAMS, VllmScrape

QUANTILES = (0.5, 0.9, 0.99)
_FIGS = list(dict.fromkeys(HISTOGRAMS.values()))
SUMMARY = pa.schema(
    [("model", pa.string()), ("engine", pa.string())]
    + [c for f in _FIGS for c in (
        (f"{f}_count", pa.int64()), (f"{f}_mean_s", pa.float64()),
        *((f"{f}_p{round(q * 100)}_s", pa.float64()) for q in QUANTILES))]
    + [("output_tokens_total", pa.float64())])


def histogram_quantile(le: np.ndarray[Any, Any], cumulative: np.ndarray[Any, Any],
                       q: float) -> float | None:
    """The ``q`` quantile (0..1) of a histogram with ascending upper bounds
    ``le`` (the last ``inf``) and cumulative counts ``cumulative``, by
    Prometheus' rule: find the first bucket whose count reaches ``q`` * total
    and interpolate linearly between its lower bound (the previous ``le``;
    0 for the first bucket) and its upper bound. A rank in the ``+Inf``
    bucket returns the largest finite bound. None when the total is 0.
    Raises ``ValueError`` if the last bound is not ``inf``."""
    if not len(le) or not np.isinf(le[-1]):
        raise ValueError("histogram needs a +Inf bucket")
    total = float(cumulative[-1])
    if total <= 0:
        return None
    rank = q * total
    i = int(np.searchsorted(cumulative, rank, side="left"))
    if i == len(le) - 1:
        return float(le[-2]) if len(le) > 1 else None
    lo = float(le[i - 1]) if i > 0 else 0.0
    below = float(cumulative[i - 1]) if i > 0 else 0.0
    inside = float(cumulative[i]) - below
    if inside <= 0:
        return float(le[i])
    return lo + (float(le[i]) - lo) * (rank - below) / inside


def _select(t: pa.Table, figure: str, model: str, engine: str) -> pa.Table:
    m = pc.and_(pc.and_(pc.equal(t["figure"], figure), pc.equal(t["model"], model)),
                pc.equal(t["engine"], engine))
    return t.filter(m)


def serving_summary(scrape: VllmScrape) -> pa.Table:
    """:data:`SUMMARY` rows, sorted by (model, engine)."""
    keys = sorted({(r["model"], r["engine"]) for t in (scrape.buckets, scrape.series,
                                                       scrape.counters)
                   for r in t.select(["model", "engine"]).to_pylist()})
    rows = []
    for model, engine in keys:
        row: dict[str, Any] = {"model": model, "engine": engine}
        for fig in _FIGS:
            b = _select(scrape.buckets, fig, model, engine)
            s = _select(scrape.series, fig, model, engine)
            le, cum = b["le"].to_numpy(), b["cumulative"].to_numpy()
            have = len(le) > 0 and bool(np.isinf(le[-1]))
            count = s["count"][0].as_py() if s.num_rows else (float(cum[-1]) if have else None)
            total = s["sum"][0].as_py() if s.num_rows else None
            row[f"{fig}_count"] = None if count is None else int(count)
            row[f"{fig}_mean_s"] = total / count if total is not None and count else None
            for q in QUANTILES:
                row[f"{fig}_p{round(q * 100)}_s"] = histogram_quantile(le, cum, q) if have else None
        c = _select(scrape.counters, "output_tokens", model, engine)
        row["output_tokens_total"] = float(pc.sum(c["value"]).as_py()) if c.num_rows else None
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=SUMMARY)
