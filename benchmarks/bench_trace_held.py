"""Benchmark: ``trace.pftrace`` of a large CPU-kernel capture, held slices
columnar vs one Python object (and protobuf packet) per slice.

Input: the real magika ORT CPU-EP profile recorded in
``tests/exporter/sinks/testdata`` (576 CPU kernels in 6 iterations, see
PROVENANCE.md there) **tiled** into ``--rows`` CPU kernel rows (copies shifted
in time past the previous one, iteration numbers continued), written at run
time as ``<tmp>/magika_tiled_<rows>_synthetic_{kernels,iterations}.parquet``.

Legs, each in its own child process (same interpreter, tree on ``sys.path``):
read the two Parquet files, then time ``write_trace(out, kernels,
iterations)`` (**wall**, ``time.perf_counter``), and report the child's
**peak RSS** (``VmHWM`` of ``/proc/self/status``; the kernel keeps the maximum)
after loading the inputs and after writing, plus the trace's packets and
bytes. ``--baseline-ref REF`` (default ``c9988e4``): the same for git revision
REF (``git archive`` into the temp dir), run first, on the same files;
``new``: this tree. Printed: both legs and the ratios baseline / new.

Usage: ``python benchmarks/bench_trace_held.py [--rows 1000000] [--baseline-ref REF]
[--json F]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchcommon import ROOT


def _hwm() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def make_inputs(rows: int, tmp: Path) -> tuple[Path, Path]:
    """SYNTHETIC tiling of the real recorded profile to ``rows`` CPU kernels."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    sys.path.insert(0, str(ROOT))
    from tests.support import load_path

    data = load_path("aaco_sink_testdata", ROOT / "tests/exporter/sinks/testdata/sinkdata.py")
    events = json.loads(data.MAGIKA_PROFILE.read_text())
    ks, its = data.tables_from_profile(events, data.MAGIKA_EPOCH_NS, data.MAGIKA_PID)
    lo = min(pc.min(ks["start_ns"]).as_py(), pc.min(its["start_ns"]).as_py())
    hi = max(pc.max(ks["end_ns"]).as_py(), pc.max(its["end_ns"]).as_py())
    period, n_it = hi - lo + 1_000_000, its.num_rows
    copies = -(-rows // ks.num_rows)
    kparts, iparts = [], []
    for i in range(copies):
        def shift(t: pa.Table, i: int = i) -> pa.Table:
            for c in ("start_ns", "end_ns"):
                t = t.set_column(t.schema.get_field_index(c), c, pc.add(t[c], period * i))
            return t.set_column(t.schema.get_field_index("iteration"), "iteration",
                                pc.add(t["iteration"], n_it * i))
        kparts.append(shift(ks))
        iparts.append(shift(its))
    k = pa.concat_tables(kparts).slice(0, rows)
    it = pa.concat_tables(iparts)
    kp = tmp / f"magika_tiled_{rows}_synthetic_kernels.parquet"
    ip = tmp / f"magika_tiled_{rows}_synthetic_iterations.parquet"
    pq.write_table(k, kp)
    pq.write_table(it, ip)
    return kp, ip


def child(tree: str, kernels: str, iterations: str, out: str) -> None:
    """One leg: load, write the trace, print JSON."""
    sys.path.insert(0, tree)
    import pyarrow.parquet as pq

    from exporter.sinks import perfetto_trace as pt

    assert pt.__file__.startswith(tree), pt.__file__
    ks, its = pq.read_table(kernels), pq.read_table(iterations)
    loaded = _hwm()
    t0 = time.perf_counter()
    s = pt.write_trace(Path(out), ks, its)
    wall = time.perf_counter() - t0
    print(json.dumps({"wall_s": wall, "hwm_loaded_bytes": loaded, "hwm_bytes": _hwm(),
                      "packets": s.packets, "bytes": s.bytes, "kernel_slices": s.kernel_slices,
                      "iteration_slices": s.iteration_slices}))


def leg(tree: Path, kp: Path, ip: Path, out: Path) -> dict[str, Any]:
    r = subprocess.run([sys.executable, __file__, "--child", str(tree), str(kp), str(ip),
                        str(out)], capture_output=True, text=True, check=True)
    res: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    out.unlink()
    return res


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:6])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--baseline-ref", default="c9988e4")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        kp, ip = make_inputs(a.rows, tmp)
        base = tmp / "ref"
        base.mkdir()
        arch = subprocess.run(["git", "-C", str(ROOT), "archive", a.baseline_ref],
                              capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(base)], input=arch.stdout, check=True)
        res = {"rows": a.rows, "input": kp.name, "baseline_ref": a.baseline_ref,
               "baseline": leg(base, kp, ip, tmp / "base.pftrace"),
               "new": leg(ROOT, kp, ip, tmp / "new.pftrace")}
    b, n = res["baseline"], res["new"]
    mib = 1 << 20
    for name, r in (("baseline " + a.baseline_ref, b), ("new", n)):
        print(f"{name:>16}: write_trace {r['wall_s']:7.2f} s, VmHWM loaded "
              f"{r['hwm_loaded_bytes'] / mib:6.0f} MiB -> {r['hwm_bytes'] / mib:6.0f} MiB, "
              f"{r['packets']} packets, {r['bytes'] / mib:.1f} MiB trace")
    res["speedup"] = b["wall_s"] / n["wall_s"]
    res["peak_ratio"] = b["hwm_bytes"] / n["hwm_bytes"]
    grow_b = b["hwm_bytes"] - b["hwm_loaded_bytes"]
    grow_n = n["hwm_bytes"] - n["hwm_loaded_bytes"]
    res["growth_ratio"] = grow_b / max(grow_n, 1)
    print(f"{a.rows} tiled CPU kernel rows: {res['speedup']:.1f}x faster, peak RSS "
          f"{res['peak_ratio']:.2f}x lower (growth during write_trace "
          f"{grow_b / mib:.0f} -> {grow_n / mib:.0f} MiB, {res['growth_ratio']:.1f}x)")
    for k in ("kernel_slices", "iteration_slices"):
        assert b[k] == n[k], f"both legs write the same {k}"
    if a.json:
        a.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
