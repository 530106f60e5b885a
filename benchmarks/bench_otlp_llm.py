"""Cost of the LLM metrics on OTLP: pre-aggregated export vs one SDK
``record`` call per value.

```
.venv/bin/python benchmarks/bench_otlp_llm.py [--calls 20000] [--repeat 3]
```

Input: the real llama.cpp token streams
(``collectors/llmserve/testdata/llamacpp_smollm2_135m_rate-1.jsonl``: 40
calls, 2554 token steps) tiled to ``--calls`` calls of one pid, times
shifted per copy, as decoded ``generate_span`` batches of
``LLM_BATCH_ROWS`` (1024) calls (what the OTLP sink receives).

Legs (best of ``--repeat``, same process, same batches), each ending in one
encoded ``ExportMetricsServiceRequest`` (the OTLP exporter's own encoder):

* ``pre-aggregated`` (this tree, :class:`exporter.sinks.otlp.OtlpSink`):
  ``LlmMetrics.observe_table`` per batch, then one ``snapshot`` and
  :func:`exporter.sinks.otlp_llm.sdk_metrics`;
* ``SDK record`` (baseline): a ``MeterProvider`` with explicit-bucket
  histograms (``explicit_bucket_boundaries_advisory`` = the same bounds), a
  counter and a gauge; per batch the TTFT / ITL values computed with numpy,
  then one ``Histogram.record`` per call (TTFT) and per step gap (ITL), one
  ``Counter.add`` and ``Gauge.set`` per call; collected by an
  ``InMemoryMetricReader``.

Both legs must give the same TTFT/ITL counts, bucket counts and tokens
(checked). Prints seconds, microseconds per step and the ratio; writes
``benchmarks/results/bench_otlp_llm.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchcommon import best_of, tile_generates  # noqa: E402
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import (  # noqa: E402
    encode_metrics,
)
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import (  # noqa: E402
    InMemoryMetricReader,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.util.instrumentation import InstrumentationScope  # noqa: E402

from collectors.llmserve.stream_records import read_stream_file  # noqa: E402
from exporter import catalogue, schema  # noqa: E402
from exporter.instrument.llm import GenerateRecord  # noqa: E402
from exporter.instrument.publisher import LLM_BATCH_ROWS, generate_batch  # noqa: E402
from exporter.sinks import otlp_llm  # noqa: E402
from stream_analytics.llm_metrics import (  # noqa: E402
    ITL_BUCKETS_S,
    TTFT_BUCKETS_S,
    LlmMetrics,
    _flat,
)

LLAMA = ROOT / "collectors/llmserve/testdata/llamacpp_smollm2_135m_rate-1.jsonl"
RES = Resource.create({"service.name": "aaco-exporter", "host.name": "h"})


def _tiled(n: int) -> list[GenerateRecord]:
    return tile_generates(read_stream_file(LLAMA).records, n)


def _hists(req: Any) -> dict[str, tuple[int, list[int]]]:
    out = {}
    for rm in req.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.WhichOneof("data") == "histogram":
                    (p,) = m.histogram.data_points
                    out[m.name] = (p.count, list(p.bucket_counts))
                elif m.WhichOneof("data") == "sum":
                    (p,) = m.sum.data_points
                    out[m.name] = (int(p.as_int or p.as_double), [])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    recs = _tiled(a.calls)
    batches = []
    for j in range(0, len(recs), LLM_BATCH_ROWS):
        msg = schema.encode("generate_span", generate_batch(recs[j:j + LLM_BATCH_ROWS]),
                            host="h", msg_id=str(j))
        batches.append(schema.decode(msg.payload, msg.headers)[3])
    scope = InstrumentationScope("aaco-exporter")

    def pre_aggregated() -> bytes:
        m = LlmMetrics(host="h")
        for b in batches:
            m.observe_table("h", b)
        metrics = otlp_llm.sdk_metrics(m.snapshot(), time.time_ns())
        data = MetricsData([ResourceMetrics(RES, [ScopeMetrics(scope, metrics, "")], "")])
        return bytes(encode_metrics(data).SerializeToString())

    def sdk_record() -> bytes:
        reader = InMemoryMetricReader()
        meter = MeterProvider(metric_readers=[reader], resource=RES).get_meter("aaco-exporter")
        d = {m.llm: m for m in catalogue.LLM_POINTS}
        ttft_h = meter.create_histogram(d["ttft"].otel, unit="s",
                                        explicit_bucket_boundaries_advisory=TTFT_BUCKETS_S)
        itl_h = meter.create_histogram(d["itl"].otel, unit="s",
                                       explicit_bucket_boundaries_advisory=ITL_BUCKETS_S)
        tok_c = meter.create_counter(d["tokens"].otel, unit=d["tokens"].unit)
        tps_g = meter.create_gauge(d["tps"].otel, unit=d["tps"].unit)
        for b in batches:
            attrs = {"aaco.model": b.column("model")[0].as_py(),
                     "process.pid": b.column("pid")[0].as_py()}
            steps, off = _flat(b.column("step_ns"))
            toks, _ = _flat(b.column("step_tokens"))
            start = b.column("start_ns").to_numpy()
            end = b.column("end_ns").to_numpy()
            for i in range(b.num_rows):
                s = steps[off[i]:off[i + 1]]
                n_tok = int(toks[off[i]:off[i + 1]].sum())
                tok_c.add(n_tok, attrs)
                if not len(s):
                    continue
                ttft_h.record((s[0] - start[i]) / 1e9, attrs)
                for v in np.diff(s) / 1e9:
                    itl_h.record(float(v), attrs)
                if end[i] > start[i]:
                    tps_g.set(n_tok / ((end[i] - start[i]) / 1e9), attrs)
        data = reader.get_metrics_data()
        return bytes(encode_metrics(data).SerializeToString())

    t_pre, body_pre = best_of(pre_aggregated, a.repeat)
    t_sdk, body_sdk = best_of(sdk_record, a.repeat)
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )
    got = [_hists(ExportMetricsServiceRequest.FromString(b)) for b in (body_pre, body_sdk)]
    assert got[0] == got[1], ("legs differ", got)
    steps = sum(len(r.step_ns) for r in recs)
    res = {
        "calls": a.calls, "steps": steps, "batches": len(batches),
        "pre_aggregated_s": t_pre, "sdk_record_s": t_sdk,
        "pre_aggregated_us_per_step": t_pre / steps * 1e6,
        "sdk_record_us_per_step": t_sdk / steps * 1e6,
        "pre_aggregated_vs_sdk_record": t_pre / t_sdk,
        "request_bytes": [len(body_pre), len(body_sdk)],
    }
    print(f"{a.calls} calls, {steps} token steps, {len(batches)} generate_span batches")
    print(f"pre-aggregated (this tree): {t_pre:.3f} s "
          f"({res['pre_aggregated_us_per_step']:.3f} us/step), request {len(body_pre)} B")
    print(f"SDK record per value (baseline): {t_sdk:.3f} s "
          f"({res['sdk_record_us_per_step']:.3f} us/step), request {len(body_sdk)} B")
    print(f"pre-aggregated / SDK record: {res['pre_aggregated_vs_sdk_record']:.4f}x time")
    out = ROOT / "benchmarks" / "results" / "bench_otlp_llm.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
