"""Benchmark: rocprofv3 kernel_trace.csv -> Arrow kernel_span batches vs per-span baselines.

Generates ``*_synthetic_kernel_trace.csv`` at run time in a temp dir from the
real fixture rows (collectors/rocprof/testdata/kernel_trace.csv) with unique
dispatch/correlation ids, then reports, single-threaded (spans/s per core):

1. columnar parse (this package) into KERNEL_SPAN record batches;
2. baseline A: Python ``csv`` module, one dict per row;
3. baseline B: one OpenTelemetry SDK span per kernel, BatchSpanProcessor +
   OTLP/gRPC exporter to a closed local port (export fails fast; the cost
   measured is the SDK's per-span work);
4. peak RSS (``resource.getrusage`` in a fresh subprocess) parsing 1M and
   ``--rss-rows`` (default 10M) rows: streaming keeps it flat.

Usage: ``python benchmarks/bench_rocprof.py [--rows 2000000] [--rss-rows 10000000]``
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURE = ROOT / "collectors" / "rocprof" / "testdata" / "kernel_trace.csv"


def make_file(path: Path, rows: int, block: int = 100_000) -> None:
    """Write ``rows`` data rows cycling the fixture rows; ids unique per block."""
    lines = FIXTURE.read_text().splitlines()
    hdr, src = lines[0], list(csv.reader(lines[1:]))
    out = []
    for i in range(min(rows, block)):
        r = list(src[i % len(src)])
        r[5] = r[8] = str(i + 1)
        r[9], r[10] = str(int(r[9]) + i * 20000), str(int(r[10]) + i * 20000)
        out.append(",".join(f'"{v}"' if j in (0, 1, 7) else v for j, v in enumerate(r)))
    blob = ("\n".join(out) + "\n").encode()
    with path.open("wb") as f:
        f.write(hdr.encode() + b"\n")
        full, rest = divmod(rows, block)
        for _ in range(full):
            f.write(blob)
        if rest:
            f.write(b"".join(blob.splitlines(keepends=True)[:rest]))


def bench_arrow(path: Path) -> tuple[int, float]:
    from collectors.rocprof.kernels import iter_csv_kernel_spans
    from collectors.rocprof.rejects import Rejects

    t0, n = time.process_time(), 0
    for b in iter_csv_kernel_spans(path, "rocprofv3_kernel_trace", Rejects()):
        n += b.num_rows
    return n, time.process_time() - t0


def bench_csv(path: Path, limit: int) -> tuple[int, float]:
    t0, n = time.process_time(), 0
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            _ = int(row["End_Timestamp"]) - int(row["Start_Timestamp"])
            n += 1
            if n >= limit:
                break
    return n, time.process_time() - t0


def bench_otel(path: Path, limit: int) -> tuple[int, float]:
    import logging

    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
    provider = TracerProvider()
    exporter = OTLPSpanExporter(endpoint="127.0.0.1:9", insecure=True, timeout=1)
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=1 << 16))
    tracer = provider.get_tracer("bench")
    t0, n = time.process_time(), 0
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            s = tracer.start_span(row["Kernel_Name"], start_time=int(row["Start_Timestamp"]),
                                  attributes={"agent": row["Agent_Id"],
                                              "queue": int(row["Queue_Id"])})
            s.end(end_time=int(row["End_Timestamp"]))
            n += 1
            if n >= limit:
                break
    dt = time.process_time() - t0
    provider.shutdown()
    return n, dt


def rss_child(path: Path) -> None:
    import resource

    n, _ = bench_arrow(path)
    print(n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def peak_rss(path: Path) -> tuple[int, int]:
    out = subprocess.run([sys.executable, __file__, "--rss-child", str(path)],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), int(out[1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--baseline-rows", type=int, default=50_000)
    ap.add_argument("--rss-rows", type=int, default=10_000_000)
    ap.add_argument("--rss-child")
    a = ap.parse_args()
    if a.rss_child:
        rss_child(Path(a.rss_child))
        return
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "bench_synthetic_kernel_trace.csv"
        make_file(p, a.rows)
        bench_arrow(p)  # warm the page cache
        n, dt = bench_arrow(p)
        nc, dc = bench_csv(p, a.baseline_rows)
        no, do = bench_otel(p, a.baseline_rows)
        print(f"{'path':<44}{'spans':>12}{'cpu s':>9}{'spans/s/core':>15}{'x otel':>9}")
        for name, k, t in (("arrow columnar parse -> kernel_span", n, dt),
                           ("baseline: csv.DictReader per row", nc, dc),
                           ("baseline: OTel SDK span + OTLP/gRPC", no, do)):
            print(f"{name:<44}{k:>12,}{t:>9.2f}{k / t:>15,.0f}{(k / t) / (no / do):>9.1f}")
        p.unlink()
        print(f"file MB/s (arrow): {n * 190 / dt / 1e6:.0f} (approx. 190 B/row)")
        for rows in (1_000_000, a.rss_rows):
            q = Path(d) / f"rss_{rows}_synthetic_kernel_trace.csv"
            make_file(q, rows)
            got, kb = peak_rss(q)
            gb = q.stat().st_size / 1e9
            print(f"peak RSS parsing {got:,} rows ({gb:.2f} GB): {kb / 1024:.0f} MiB")
            q.unlink()


if __name__ == "__main__":
    main()
