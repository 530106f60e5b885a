"""Time and peak memory of the kernel-level ``diff`` (:mod:`exporter.kernel_diff`):
columnar grouping vs a Python object per dispatch.

```
.venv/bin/python benchmarks/bench_kernel_diff.py [--rows 1000000]
```

Input: the real seismic-stencils rocprof trace
(``collectors/rocprof/testdata/seismic_stencils_results.csv``, 1024
dispatches of 13 kernels on an MI250X) tiled to ``--rows`` dispatches per
side; the session's durations get seeded log-normal noise (sigma 2%) and
``compute_fd_z_kernel`` 1.3x. Each side is written as a bundle's
``profiler/kernels.parquet`` (kernel_name and kernel_family dictionary-encoded,
as the bundle sink writes them).

Legs, each in its own subprocess (``ru_maxrss`` is that leg's own peak):

* ``columnar``: :func:`exporter.kernel_diff.read_groups` (Arrow read, one
  dictionary encode and a stable argsort per grouping);
* ``objects`` (baseline): ``Table.to_pylist()`` rows grouped into Python
  lists per kernel name.

Each leg then computes the per-kernel statistics of the top names
(:func:`exporter.kernel_diff.compare_one`); the rows are checked equal. Prints
the grouping's seconds and peak RSS growth with the ratios, and the
statistics' seconds; writes
``benchmarks/results/bench_kernel_diff.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TRACE = ROOT / "collectors/rocprof/testdata/seismic_stencils_results.csv"


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def make_bundles(rows: int, out: Path) -> tuple[Path, Path]:
    """Two bundles with ``rows`` dispatches each (see the module doc)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from collectors.rocprof.families import classify

    t = pcsv.read_csv(TRACE, convert_options=pcsv.ConvertOptions(
        include_columns=["KernelName", "DurationNs"]))
    reps = -(-rows // t.num_rows)
    names = pa.concat_arrays([t.column("KernelName").combine_chunks()] * reps)[:rows]
    dur = np.tile(t.column("DurationNs").to_numpy(), reps)[:rows].astype(np.int64)
    rng = np.random.default_rng(0)
    slow = pc.equal(names, "compute_fd_z_kernel").to_numpy(zero_copy_only=False)
    sdur = (dur * rng.lognormal(0.0, 0.02, rows) * np.where(slow, 1.3, 1.0)).astype(np.int64)
    out_paths = []
    for side, d in (("baseline", dur), ("session", sdur)):
        b = out / side / "profiler"
        b.mkdir(parents=True)
        pq.write_table(pa.table({
            "kernel_name": pc.dictionary_encode(names),
            "kernel_family": pc.dictionary_encode(classify(names)),
            "duration_ns": pa.array(d)}), b / "kernels.parquet")
        out_paths.append(b.parent)
    return out_paths[0], out_paths[1]


def objects_groups(bundle: Path) -> dict[str, Any]:
    """Baseline grouping: ``to_pylist()`` rows appended to a Python list per name."""
    import numpy as np
    import pyarrow.parquet as pq

    by: dict[str, list[int]] = {}
    for r in pq.read_table(bundle / "profiler/kernels.parquet").to_pylist():
        by.setdefault(r["kernel_name"], []).append(r["duration_ns"])
    return {k: np.asarray(v, dtype=np.int64) for k, v in by.items()}


def columnar_groups(bundle: Path) -> dict[str, Any]:
    """:func:`exporter.kernel_diff.read_groups` (by name), as a dict of array views."""
    from exporter.kernel_diff import read_groups

    _, names = read_groups(bundle)
    return {k: names.get(k) for k in names.keys}


def leg(kind: str, baseline: Path, session: Path) -> dict[str, Any]:
    import scipy.stats  # noqa: F401  (imported before measuring)

    from exporter.kernel_diff import TOP_N, compare_one

    group = columnar_groups if kind == "columnar" else objects_groups
    rss0 = _rss_kib()
    t0 = time.perf_counter()
    gb, gs = group(baseline), group(session)
    t1 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    both = set(gb) & set(gs)
    top = sorted(both, key=lambda k: (-(int(gb[k].sum()) + int(gs[k].sum())), k))[:TOP_N]
    rows = [compare_one(k, gb[k], gs[k], 5.0) for k in top]
    t2 = time.perf_counter()
    return {"leg": kind, "group_seconds": t1 - t0, "stats_seconds": t2 - t1,
            "group_peak_rss_growth_mib": (peak - rss0) / 1024, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="dispatches per side")
    ap.add_argument("--leg", help=argparse.SUPPRESS)
    ap.add_argument("--dirs", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.leg:
        print(json.dumps(leg(a.leg, Path(a.dirs[0]), Path(a.dirs[1])), default=float))
        return
    with tempfile.TemporaryDirectory() as tmp:
        base, sess = make_bundles(a.rows, Path(tmp))
        res = {}
        for kind in ("objects", "columnar"):
            p = subprocess.run([sys.executable, __file__, "--leg", kind, "--dirs", str(base),
                                str(sess)], capture_output=True, text=True, check=True)
            res[kind] = json.loads(p.stdout)
    assert res["objects"]["rows"] == res["columnar"]["rows"], "legs disagree"
    o, c = res["objects"], res["columnar"]
    print(f"{a.rows} dispatches per side, 13 kernel names")
    for r in (o, c):
        print(f"  {r['leg']:9s} grouping {r['group_seconds']:7.2f} s, peak RSS growth "
              f"{r['group_peak_rss_growth_mib']:7.1f} MiB; statistics {r['stats_seconds']:6.2f} s")
    mem = c["group_peak_rss_growth_mib"] / max(o["group_peak_rss_growth_mib"], 1e-9)
    print(f"  columnar / objects grouping: time {c['group_seconds'] / o['group_seconds']:.3f}, "
          f"memory {mem:.3f}")
    slow = [r["key"] for r in c["rows"] if r["slower"]]
    print(f"  significantly slower kernels: {slow}")
    out = ROOT / "benchmarks/results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_kernel_diff.json").write_text(json.dumps(
        {"rows": a.rows, **{k: {x: v[x] for x in ("group_seconds", "stats_seconds",
                                                  "group_peak_rss_growth_mib")}
                            for k, v in res.items()}}, indent=2))


if __name__ == "__main__":
    main()
