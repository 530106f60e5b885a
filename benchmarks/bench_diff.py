"""Peak memory and time of ``shift_ci`` (the ``diff`` CI): matrix vs selection.

```
.venv/bin/python benchmarks/bench_diff.py [--sizes 20000 200000] [--old-sizes 20000]
```

Each leg runs in its own subprocess (so ``ru_maxrss`` is that leg's own
peak): two samples of ``n`` log-normal latencies (ns, seed 0, session 3%
slower), then one ``shift_ci``. Reported per leg: wall seconds of the call,
tracemalloc peak during the call (numpy allocations are traced), and the
process's peak RSS minus its RSS just before the call. ``old`` is the
previous implementation (``np.subtract.outer`` then sort, copied here);
``new`` is :func:`exporter.diff.shift_ci`. Where both ran at the same ``n``
the triples are checked identical. Prints a table; writes
``benchmarks/results/bench_diff.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def shift_ci_matrix(session: np.ndarray, baseline: np.ndarray,
                    level: float = 0.95) -> tuple[float, float, float]:
    """The previous ``shift_ci``: the full n1 x n2 difference matrix, sorted."""
    from scipy.stats import norm

    d = np.sort(np.subtract.outer(session, baseline).ravel())
    n1, n2 = len(session), len(baseline)
    z = float(norm.ppf(0.5 + level / 2))
    k = int(np.floor(n1 * n2 / 2 - z * np.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)))
    k = max(0, min(k, len(d) - 1))
    return float(d[k]), float(np.median(d)), float(d[len(d) - 1 - k])


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def leg(impl: str, n: int) -> dict[str, Any]:
    """One measurement in this process (run it in a fresh subprocess)."""
    from exporter.diff import shift_ci

    fn = shift_ci if impl == "new" else shift_ci_matrix
    rng = np.random.default_rng(0)
    base = rng.lognormal(np.log(2e6), 0.2, n)
    sess = rng.lognormal(np.log(2e6 * 1.03), 0.2, n)
    fn(sess[:50], base[:50])  # imports (scipy) outside the measurement
    rss0 = _rss_kib()
    tracemalloc.start()
    t0 = time.perf_counter()
    out = fn(sess, base)
    wall = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"impl": impl, "n": n, "wall_s": wall, "tracemalloc_peak_mib": peak / 2**20,
            "rss_growth_mib": max(0, maxrss - rss0) / 1024, "result": list(out)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[20_000, 200_000])
    ap.add_argument("--old-sizes", type=int, nargs="*", default=[20_000])
    ap.add_argument("--leg", nargs=2, metavar=("IMPL", "N"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.leg:
        print(json.dumps(leg(a.leg[0], int(a.leg[1]))))
        return
    rows = []
    for impl, sizes in (("new", a.sizes), ("old", a.old_sizes)):
        for n in sizes:
            p = subprocess.run([sys.executable, __file__, "--leg", impl, str(n)],
                               capture_output=True, text=True, check=True)
            rows.append(json.loads(p.stdout.strip().splitlines()[-1]))
    print(f"{'impl':<5} {'n':>8} {'wall s':>8} {'tracemalloc MiB':>16} {'RSS growth MiB':>15}")
    for r in rows:
        print(f"{r['impl']:<5} {r['n']:>8} {r['wall_s']:>8.2f} {r['tracemalloc_peak_mib']:>16.1f}"
              f" {r['rss_growth_mib']:>15.1f}")
    by = {(r["impl"], r["n"]): r["result"] for r in rows}
    for n in a.old_sizes:
        if ("new", n) in by:
            same = by[("new", n)] == by[("old", n)]
            print(f"n={n}: new == old: {same}")
            if not same:
                raise SystemExit(f"results differ at n={n}: {by[('new', n)]} vs {by[('old', n)]}")
    out = ROOT / "benchmarks/results/bench_diff.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
