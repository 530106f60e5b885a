"""vLLM's Prometheus exposition (``GET /metrics``) -> Arrow tables.

Input: the text of one scrape (Prometheus text format; ``# HELP``/``# TYPE``
lines optional, as in a filtered scrape). Only the request-level families
below are read; everything else (gauges, ``_created`` samples, other
servers' families) is skipped. Parsing uses prometheus-client's parser,
one sample line at a time so that an error names its line.

=======================================  ============  ==========================
vLLM family                               kind          ``figure`` (aaco_llm_*)
=======================================  ============  ==========================
``vllm:time_to_first_token_seconds``      histogram     ``ttft``
``vllm:inter_token_latency_seconds``      histogram     ``itl``
``vllm:time_per_output_token_seconds``    histogram     ``tpot`` (older vLLM's ITL)
``vllm:e2e_request_latency_seconds``      histogram     ``e2e``
``vllm:generation_tokens_total``          counter       ``output_tokens``
=======================================  ============  ==========================

Series are keyed by the ``model_name`` and ``engine`` labels ("" when
absent); values are seconds or tokens, as vLLM exposes them.

Errors: a sample line that does not parse raises ``ValueError`` naming
``source:line``; a bucket whose ``le`` is not a number names its line too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from prometheus_client.parser import text_string_to_metric_families

HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": "ttft",
    "vllm:inter_token_latency_seconds": "itl",
    "vllm:time_per_output_token_seconds": "tpot",
    "vllm:e2e_request_latency_seconds": "e2e",
}
COUNTERS = {"vllm:generation_tokens_total": "output_tokens"}

_KEY = [("figure", pa.string()), ("model", pa.string()), ("engine", pa.string())]
BUCKETS = pa.schema([*_KEY, ("le", pa.float64()), ("cumulative", pa.float64())])
SERIES = pa.schema([*_KEY, ("count", pa.float64()), ("sum", pa.float64())])
VALUES = pa.schema([*_KEY, ("value", pa.float64())])


@dataclass(frozen=True)
class VllmScrape:
    """One scrape: ``buckets`` (:data:`BUCKETS`, cumulative counts per upper
    bound ``le``, ``inf`` for ``+Inf``), ``series`` (:data:`SERIES`, each
    histogram's ``_count`` and ``_sum``), ``counters`` (:data:`VALUES`)."""

    buckets: pa.Table
    series: pa.Table
    counters: pa.Table


def _samples(text: str, source: str) -> Iterator[tuple[int, Any]]:
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            fams = list(text_string_to_metric_families(s + "\n"))
        except ValueError as e:
            raise ValueError(f"{source}:{n}: not a Prometheus sample: {e}") from e
        for fam in fams:
            for sample in fam.samples:
                yield n, sample


def parse_vllm_metrics(text: str, source: str = "<scrape>") -> VllmScrape:
    """Parse one scrape's ``text``; ``source`` names it in errors."""
    buckets: list[dict[str, Any]] = []
    series: dict[tuple[str, str, str], dict[str, Any]] = {}
    counters: list[dict[str, Any]] = []
    for n, s in _samples(text, source):
        model, engine = s.labels.get("model_name", ""), s.labels.get("engine", "")
        if s.name in COUNTERS:
            counters.append({"figure": COUNTERS[s.name], "model": model, "engine": engine,
                             "value": float(s.value)})
            continue
        base, _, suffix = s.name.rpartition("_")
        if base not in HISTOGRAMS or suffix not in ("bucket", "count", "sum"):
            continue
        key = (HISTOGRAMS[base], model, engine)
        if suffix == "bucket":
            try:
                le = float(s.labels["le"])
            except (KeyError, ValueError) as e:
                raise ValueError(f"{source}:{n}: bucket without a numeric 'le'") from e
            buckets.append({"figure": key[0], "model": model, "engine": engine,
                            "le": le, "cumulative": float(s.value)})
        else:
            row = series.setdefault(key, {"figure": key[0], "model": model, "engine": engine,
                                          "count": None, "sum": None})
            row[suffix] = float(s.value)
    return VllmScrape(
        pa.Table.from_pylist(buckets, schema=BUCKETS).sort_by(
            [("figure", "ascending"), ("model", "ascending"), ("engine", "ascending"),
             ("le", "ascending")]),
        pa.Table.from_pylist(list(series.values()), schema=SERIES),
        pa.Table.from_pylist(counters, schema=VALUES))
