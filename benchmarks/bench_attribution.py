"""Cost of operator -> kernel attribution in a capture, against its baselines.

```
.venv/bin/python benchmarks/bench_attribution.py [--runs 100] [--repeat 5]
```

Input: one ORT profile of ``--runs`` real magika runs (CPU EP; 96 node
events per run) recorded at the start. Timed in the same process, best of
``--repeat``:

* **parse** (the baseline every capture already pays):
  :func:`collectors.ort.profile.parse_profile` on that file;
* **attribution**: :func:`collectors.ort.attribution.from_ort_profile` plus
  :func:`collectors.ort.attribution.kernel_groups` (what
  ``exporter/attribution_bundle.py`` adds per profile);
* **naive** (what one would otherwise write): ``json.load`` and a Python loop
  mapping each node event to a dict and summing per node.

Reports seconds, events/s and the ratios attribution/parse and
naive/attribution; checks the three agree on the event count. Writes
``benchmarks/results/bench_attribution.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def best(fn: Callable[[], int], repeat: int) -> tuple[float, int]:
    out, n = float("inf"), 0
    for _ in range(repeat):
        t = time.perf_counter()
        n = fn()
        out = min(out, time.perf_counter() - t)
    return out, n


def naive(path: Path) -> int:
    ev = json.loads(path.read_text())
    per_node: dict[str, list[Any]] = defaultdict(lambda: [0, 0])
    rows = []
    for e in ev:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            node = e["name"][: -len("_kernel_time")]
            rows.append({"node": node, "op": e["args"].get("op_name"),
                         "provider": e["args"].get("provider"), "dur": e["dur"]})
            per_node[node][0] += 1
            per_node[node][1] += e["dur"]
    return len(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()

    from collectors.ort import ModelRunner, load_graph, resolve_model
    from collectors.ort.attribution import from_ort_profile, kernel_groups
    from collectors.ort.profile import parse_profile

    with tempfile.TemporaryDirectory() as d:
        runner = ModelRunner(load_graph(resolve_model("magika")),
                             providers=["CPUExecutionProvider"], profile_dir=Path(d))
        runner.run_chunk(a.runs, 1e9, warmup=0)
        path, start, _, _ = runner.chunks[0]

        def parse() -> int:
            return int(parse_profile(path, start_ns=start, model="m").kernels.num_rows)

        def attribution() -> int:
            m = from_ort_profile(path, start_ns=start)
            kernel_groups(m)
            return int(m.num_rows)

        res = {name: best(fn, a.repeat) for name, fn in
               (("parse", parse), ("attribution", attribution),
                ("naive", lambda: naive(path)))}
    counts = {n for _, n in res.values()}
    assert len(counts) == 1, res
    events = counts.pop()
    print(f"{events} node events ({a.runs} magika runs), best of {a.repeat}")
    for name, (s, _) in res.items():
        print(f"  {name:12s} {s * 1e3:9.2f} ms  {events / s:12,.0f} events/s")
    ratio_overhead = res["attribution"][0] / res["parse"][0]
    ratio_naive = res["naive"][0] / res["attribution"][0]
    print(f"  attribution / parse = {ratio_overhead:.2f}   naive / attribution = "
          f"{ratio_naive:.2f}")
    out = ROOT / "benchmarks/results/bench_attribution.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"events": events, "runs": a.runs,
                               "seconds": {k: v[0] for k, v in res.items()},
                               "attribution_over_parse": ratio_overhead,
                               "naive_over_attribution": ratio_naive}, indent=2))


if __name__ == "__main__":
    main()
