"""Cost of LLM generate calls on the bus: encode/decode per call, and the
daemon's fold (columnar vs a Python loop per call).

```
.venv/bin/python benchmarks/bench_llm_bus.py [--calls 60000] [--repeat 3]
```

Input: the real generate calls recorded from the arabic-name-romanizer loop
(``tests/exporter/testdata/romanizer_generate_spans.jsonl``: 6 calls, batch
1/4/16, 9 token steps each) tiled to ``--calls`` calls of one pid, times
shifted per copy, split into ``generate_span`` messages of
``LLM_BATCH_ROWS`` (1024) calls as the instrumentation publisher sends them.

Legs (best of ``--repeat``, same process, same data):

* ``wire``: ``publisher.generate_batch`` + ``schema.encode`` in the
  instrumented process, ``schema.decode`` (with its row checks) in the
  daemon: microseconds and payload bytes per call;
* ``fold columnar``: ``LlmMetrics.observe_table`` on the decoded batches
  (this tree's sink);
* ``fold objects`` (baseline): the per-call loop ``LlmMetrics.observe`` ran
  before this change (one numpy diff and histogram update per call) on the
  same calls as ``GenerateRecord`` objects.

Both folds must give the same TTFT/ITL counts and tokens (checked). Prints
the seconds and the ratio; writes ``benchmarks/results/bench_llm_bus.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchcommon import best_of, tile_generates  # noqa: E402

from exporter import schema  # noqa: E402
from exporter.instrument.llm import GenerateRecord, load  # noqa: E402
from exporter.instrument.publisher import LLM_BATCH_ROWS, generate_batch  # noqa: E402
from stream_analytics.llm_metrics import LlmMetrics, _Key  # noqa: E402

SPANS = ROOT / "tests" / "exporter" / "testdata" / "romanizer_generate_spans.jsonl"


def _tiled(n: int) -> list[GenerateRecord]:
    return tile_generates(load([str(SPANS)]), n)


def _fold_objects(recs: list[GenerateRecord]) -> dict[tuple[str, str], _Key]:
    """The per-call fold of LlmMetrics.observe before this change (baseline)."""
    keys: dict[tuple[str, str], _Key] = {}
    for r in recs:
        k = keys.setdefault((r.model, str(r.pid)), _Key())
        k.tokens += int(sum(r.step_tokens))
        if r.error is not None or not r.step_ns:
            continue
        steps = np.asarray(r.step_ns, np.int64)
        k.ttft.add(np.array([(steps[0] - r.start_ns) / 1e9]))
        if len(steps) > 1:
            k.itl.add(np.diff(steps) / 1e9)
        dur = (r.end_ns - r.start_ns) / 1e9
        if dur > 0:
            k.tps = sum(r.step_tokens) / dur
    return keys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=60_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    recs = _tiled(a.calls)
    chunks = [recs[i:i + LLM_BATCH_ROWS] for i in range(0, len(recs), LLM_BATCH_ROWS)]

    def wire() -> tuple[list[Any], int]:
        batches, size = [], 0
        for j, c in enumerate(chunks):
            msg = schema.encode("generate_span", generate_batch(c), host="h", msg_id=str(j))
            size += len(msg.payload)
            batches.append(schema.decode(msg.payload, msg.headers)[3])
        return batches, size

    t_wire, (batches, size) = best_of(wire, a.repeat)

    def columnar() -> LlmMetrics:
        m = LlmMetrics(host="h")
        for b in batches:
            m.observe_table("h", b)
        return m

    t_col, m = best_of(columnar, a.repeat)
    t_obj, keys = best_of(lambda: _fold_objects(recs), a.repeat)
    (kc,), (ko,) = m.keys.values(), keys.values()
    assert (kc.tokens, kc.ttft.counts.tolist(), kc.itl.counts.tolist()) == (
        ko.tokens, ko.ttft.counts.tolist(), ko.itl.counts.tolist()), "folds differ"
    steps = sum(len(r.step_ns) for r in recs)
    res = {
        "calls": a.calls, "steps": steps, "messages": len(chunks),
        "wire_us_per_call": t_wire / a.calls * 1e6, "payload_bytes_per_call": size / a.calls,
        "fold_columnar_s": t_col, "fold_objects_s": t_obj,
        "fold_columnar_us_per_call": t_col / a.calls * 1e6,
        "fold_objects_us_per_call": t_obj / a.calls * 1e6,
        "columnar_vs_objects": t_col / t_obj,
    }
    print(f"{a.calls} calls, {steps} token steps, {len(chunks)} generate_span messages")
    print(f"wire (batch+encode+decode): {res['wire_us_per_call']:.2f} us/call, "
          f"{res['payload_bytes_per_call']:.1f} payload bytes/call")
    print(f"fold columnar: {t_col:.3f} s ({res['fold_columnar_us_per_call']:.2f} us/call)")
    print(f"fold objects (baseline): {t_obj:.3f} s ({res['fold_objects_us_per_call']:.2f} us/call)")
    print(f"columnar / objects: {res['columnar_vs_objects']:.3f}x time")
    out = ROOT / "benchmarks" / "results" / "bench_llm_bus.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
