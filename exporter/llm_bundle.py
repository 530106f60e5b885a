"""Bundle files of LLM generate loops (``llm/`` in a session bundle).

:func:`write_llm` writes, from finished generate spans
(:func:`exporter.instrument.llm.records`):

* ``llm/generate_steps.parquet`` (:data:`stream_analytics.llm.STEPS`),
* ``llm/generates.parquet`` (:data:`stream_analytics.llm.GENERATES`),
* ``llm/batch_curve.parquet`` (:data:`stream_analytics.llm.BATCH_CURVE`),
* ``llm/llm_summary.json``: spans, steps, tokens, the batch curve as JSON.

``capture -- CMD`` sets ``AACO_LLM_DIR`` to the bundle's ``llm/raw`` for the
command, whose generate spans are saved there at its exit (one
``<pid>.jsonl`` per process), and calls :func:`write_saved`. Any other
capture or replay whose bus carried ``generate_span`` rows (instrumented
processes it did not start) keeps them in ``llm/generate_spans.parquet`` and
gets the same files from them (:func:`records_from_table`).

Definitions: docs/llm.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from exporter.instrument.llm import GenerateRecord
from exporter.sinks.bundle import write_json
from stream_analytics.llm import batch_curve, generates_table, steps_table

RAW = "llm/raw"
"""Where ``capture -- CMD`` children save their spans, inside the bundle."""


def write_saved(out: Path) -> dict[str, Any] | None:
    """:func:`write_llm` from the spans a ``capture -- CMD`` child saved under
    ``out/llm/raw`` (:data:`exporter.instrument.llm.ENV_DIR`); None when it saved none."""
    from exporter.instrument.llm import load

    files = sorted(str(p) for p in (out / RAW).glob("*.jsonl"))
    return write_llm(out, load(files)) if files else None


def records_from_table(t: pa.Table) -> list[GenerateRecord]:
    """The generate calls of a ``generate_span`` table
    (:data:`exporter.schema.GENERATE_SPAN`, e.g. a bundle's
    ``llm/generate_spans.parquet``), one record per row, as
    :func:`write_llm` takes them (one object per call, not per token)."""
    return [GenerateRecord(generate_id=r["generate_id"], model=r["model"],
                           batch_size=r["batch_size"], pid=r["pid"], tid=r["tid"] or 0,
                           start_ns=r["start_ns"], end_ns=r["end_ns"],
                           step_ns=list(r["step_ns"]), step_tokens=list(r["step_tokens"]),
                           error=r["error"])
            for r in t.to_pylist()]


def write_llm(out: Path, recs: Sequence[GenerateRecord]) -> dict[str, Any]:
    """Write the ``llm/`` files under ``out``; returns the summary dict."""
    d = out / "llm"
    d.mkdir(parents=True, exist_ok=True)
    steps = steps_table(recs)
    curve = batch_curve(recs)
    pq.write_table(steps, d / "generate_steps.parquet", compression="zstd")
    pq.write_table(generates_table(recs), d / "generates.parquet", compression="zstd")
    pq.write_table(curve, d / "batch_curve.parquet", compression="zstd")
    summary = {"generates": len(recs), "steps": steps.num_rows,
               "errors": sum(1 for r in recs if r.error is not None),
               "tokens": int(sum(sum(r.step_tokens) for r in recs)),
               "batch_curve": curve.to_pylist(), "definitions": "docs/llm.md"}
    write_json(d / "llm_summary.json", summary)
    return summary
