"""Benchmark: rocpd (rocprofv3 SQLite) -> Arrow KERNEL_SPAN rows/s on one core.

Input, generated once into ``benchmarks/results/`` (git-ignored):
``rocpd_synthetic_<rows>.db``, built by ``tests/collectors/rocprof/rocpd_synthetic.py``
from the real rocprofiler-sdk schema SQL and the real fixture rows
(``collectors/rocprof/testdata/kernel_trace.csv`` and ``api/hip_runtime_trace.csv``),
repeated as time-shifted copies (unique dispatch/correlation ids) until it holds
``--rows`` kernel dispatches; and ``rocpd_synthetic_<rows>_kernel_trace.csv``, the
same dispatches (read back from the database's ``kernels`` view) as a rocprofv3
kernel-trace CSV. Legs, one after the other in this process, pinned to one CPU:

1. rocpd -> KERNEL_SPAN with the HIP launch join, ADBC driver and stdlib sqlite3;
2. the same without the join, and the CSV path (``iter_csv_kernel_spans``, no HIP
   trace beside it, so no join) on the same rows: the ratio rocpd / CSV;
3. the bare ``kernels`` view query into Arrow (no validation, families, join):
   ADBC vs sqlite3, the engine comparison;
4. the bare ``rocpd_kernel_dispatch`` view (no joins): what the ``kernels``
   view's eight joins cost.

Usage: ``python benchmarks/bench_rocpd.py [--rows 1000000] [--repeat 1]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.csv as pcsv  # noqa: E402

from collectors.rocprof import rocpd  # noqa: E402
from collectors.rocprof.kernels import iter_csv_kernel_spans  # noqa: E402
from collectors.rocprof.rejects import Rejects  # noqa: E402
from tests.collectors.rocprof.rocpd_synthetic import build_synthetic_rocpd  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
CSV_NAMES = {"start_ns": "Start_Timestamp", "end_ns": "End_Timestamp",
             "kernel_name": "Kernel_Name", "agent_id": "Agent_Id", "queue_id": "Queue_Id",
             "stream_id": "Stream_Id", "tid": "Thread_Id", "dispatch_id": "Dispatch_Id",
             "correlation_id": "Correlation_Id", "grid_x": "Grid_Size_X",
             "grid_y": "Grid_Size_Y", "grid_z": "Grid_Size_Z",
             "workgroup_x": "Workgroup_Size_X", "workgroup_y": "Workgroup_Size_Y",
             "workgroup_z": "Workgroup_Size_Z"}


def inputs(rows: int) -> tuple[Path, Path, int]:
    """(database, CSV, kernel rows), generated when absent."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    db = RESULTS / f"rocpd_synthetic_{rows}.db"
    csv = RESULTS / f"rocpd_synthetic_{rows}_kernel_trace.csv"
    if not db.exists():
        t = time.perf_counter()
        build_synthetic_rocpd(db.with_suffix(".tmp"), copies=-(-rows // 9))
        db.with_suffix(".tmp").rename(db)
        print(f"built {db} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    if not csv.exists():
        with pcsv.CSVWriter(csv.with_suffix(".tmp"), pa.schema(
                [pa.field(CSV_NAMES[n], pa.string() if n == "kernel_name" else pa.int64())
                 for n in CSV_NAMES])) as w:
            for b in rocpd.iter_query(db, rocpd.KERNEL_SQL, engine="sqlite3",
                                      types={"kernel_name": pa.string()}):
                w.write_batch(pa.RecordBatch.from_arrays(
                    [b.column(n) for n in CSV_NAMES], names=list(CSV_NAMES.values())))
        csv.with_suffix(".tmp").rename(csv)
    n = next(iter(rocpd.iter_query(db, "SELECT count(*) AS n FROM kernels")))["n"][0].as_py()
    return db, csv, int(n)


def timed(fn: Callable[[], Iterable[pa.RecordBatch]], repeat: int) -> tuple[int, float]:
    """(rows, best seconds) of consuming ``fn()`` ``repeat`` times."""
    best, rows = float("inf"), 0
    for _ in range(repeat):
        t = time.perf_counter()
        rows = sum(b.num_rows for b in fn())
        best = min(best, time.perf_counter() - t)
    return rows, best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    db, csv, n = inputs(a.rows)
    engines = ["adbc", "sqlite3"] if rocpd.HAVE_ADBC else ["sqlite3"]
    legs: dict[str, Callable[[], Iterable[pa.RecordBatch]]] = {}
    for e in engines:
        legs[f"rocpd {e} -> KERNEL_SPAN + launch join"] = (
            lambda e=e: rocpd.iter_kernel_spans(db, Rejects(), engine=e))
        legs[f"rocpd {e} -> KERNEL_SPAN, no join"] = (
            lambda e=e: rocpd.iter_kernel_spans(db, Rejects(), engine=e, join=False))
    legs["CSV (same rows) -> KERNEL_SPAN"] = lambda: iter_csv_kernel_spans(
        csv, "rocprofv3_kernel_trace", Rejects())
    for e in engines:
        legs[f"kernels view -> Arrow, {e}"] = lambda e=e: rocpd.iter_query(
            db, rocpd.KERNEL_SQL, engine=e, types={"kernel_name": pa.string()})
        legs[f"rocpd_kernel_dispatch view -> Arrow, {e}"] = lambda e=e: rocpd.iter_query(
            db, "SELECT start, end, kernel_id, pid, tid, agent_id, queue_id, stream_id, "
            "dispatch_id, event_id FROM rocpd_kernel_dispatch", engine=e)
    rate: dict[str, float] = {}
    print(f"{n} kernel rows; {db.stat().st_size / 2**20:.0f} MiB db, "
          f"{csv.stat().st_size / 2**20:.0f} MiB csv; 1 core")
    for name, fn in legs.items():
        rows, s = timed(fn, a.repeat)
        assert rows == n, (name, rows, n)
        rate[name] = rows / s
        print(f"{name:48s} {rows / s / 1e6:6.2f} M rows/s  ({s:.2f} s)", flush=True)
    e = engines[0]
    csv_rate = rate["CSV (same rows) -> KERNEL_SPAN"]
    print(f"rocpd ({e}, no join) / CSV: "
          f"{rate[f'rocpd {e} -> KERNEL_SPAN, no join'] / csv_rate:.2f}x")
    if len(engines) == 2:
        ratio = rate["kernels view -> Arrow, adbc"] / rate["kernels view -> Arrow, sqlite3"]
        print(f"ADBC / sqlite3 (kernels view -> Arrow): {ratio:.2f}x")


if __name__ == "__main__":
    main()
