"""Benchmark: rocprofv3 kernel_trace.csv -> Arrow kernel_span batches vs per-span baselines.

Generates ``*_synthetic_kernel_trace.csv`` at run time in a temp dir from the
real fixture rows (collectors/rocprof/testdata/kernel_trace.csv): every
100,000-row block repeats the fixture rows with unique dispatch/correlation
ids and start/end shifted 20 us per row, and each block starts 2 s after the
previous one, so the file reads as one long GPU trace. All legs run in one
process run, one after the other, and report kernel spans/s per core:

1. **parse**: columnar parse (``iter_csv_kernel_spans``) into KERNEL_SPAN
   record batches, single-threaded;
2. **end to end** (issue 3): ``collectors.rocprof.replay.load_paths`` parses
   the same file (in ``<tmp>/<pid>/``, rocprofv3's layout) -> every batch
   ``Bus.publish_table("kernel_span", ...)`` -> embedded nats-server
   (JetStream, file storage) -> ``AnalyticsConsumer(window_s=30,
   checkpoint=True)`` stepping in the same event loop as the publisher, as
   ``aaco-exporter replay``/``run`` wires them. The clock stops when
   everything published is consumed, folded, checkpointed and acknowledged
   (``pending() == 0``); the last ``analytics_result`` on the bus must report
   ``kernel_spans_total`` == rows parsed (asserted). CPU = this process +
   the nats-server child. A 100,000-row warm-up run (own nats-server) comes
   first so lazy imports (river, on the first analytics result) are not
   timed, as in a running exporter;
3. baseline A: Python ``csv`` module, one dict per row;
4. baseline B (reference): ``csv.DictReader`` -> one OpenTelemetry SDK span
   per kernel (``BatchSpanProcessor``, queue as large as the input) ->
   ``OTLPSpanExporter`` over gRPC to a **real** OTLP/gRPC receiver (child
   process on 127.0.0.1:0 counting spans); the clock stops when the receiver
   has every span (asserted). CPU = this process + the receiver child;
5. baseline C: as B but exporting to a closed port (127.0.0.1:9): export
   fails fast, so this measures span creation only, CPU of this process up
   to the last ``span.end()``. Kept for comparison with earlier runs; B pays
   for real delivery, as the issue's baseline does, and is the one the
   ratios use;
6. peak RSS (``resource.getrusage`` in a fresh subprocess) parsing 1M and
   ``--rss-rows`` (default 10M) rows: streaming keeps it flat.

Usage: ``python benchmarks/bench_rocprof.py [--rows 2000000] [--baseline-rows 50000]
[--rss-rows 10000000] [--no-rss]``
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# benchmarks/ is not a package; benchcommon also puts the repository root on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchcommon import (
    ROOT,
    Meter,
    Result,
    nats_child,
    otel_provider,
    otlp_receiver,
    publish_and_consume,
    table_text,
)

FIXTURE = ROOT / "collectors" / "rocprof" / "testdata" / "kernel_trace.csv"
E2E_PID = 4242
"""pid directory of the end-to-end input (rocprofv3 writes ``<host>/<pid>/``)."""


def make_file(path: Path, rows: int, block: int = 100_000) -> None:
    """Write ``rows`` data rows cycling the fixture rows; ids unique per block,
    start/end +20 us per row and +2 s (``block`` rows) per block."""
    lines = FIXTURE.read_text().splitlines()
    hdr, src = lines[0], list(csv.reader(lines[1:]))
    n = min(rows, block)
    pre: list[str] = []
    post: list[str] = []
    start: list[int] = []
    end: list[int] = []
    for i in range(n):
        r = list(src[i % len(src)])
        r[5] = r[8] = str(i + 1)
        q = [f'"{v}"' if j in (0, 1, 7) else v for j, v in enumerate(r)]
        pre.append(",".join(q[:9]) + ",")
        post.append("," + ",".join(q[11:]) + "\n")
        start.append(int(r[9]) + i * 20000)
        end.append(int(r[10]) + i * 20000)
    period = block * 20000
    with path.open("wb") as f:
        f.write(hdr.encode() + b"\n")
        for b, lo in enumerate(range(0, rows, block)):
            off, k = b * period, min(block, rows - lo)
            f.write("".join([f"{p}{s + off},{e + off}{q}" for p, s, e, q in
                             zip(pre[:k], start[:k], end[:k], post[:k], strict=True)]).encode())


# -- 1. parse ---------------------------------------------------------------------------
def bench_arrow(path: Path) -> Result:
    from collectors.rocprof.kernels import iter_csv_kernel_spans
    from collectors.rocprof.rejects import Rejects

    m, n = Meter(), 0
    m.start()
    for b in iter_csv_kernel_spans(path, "rocprofv3_kernel_trace", Rejects()):
        n += b.num_rows
    m.stop()
    return Result.of("arrow parse -> kernel_span", n, m)


# -- 2. end to end: parse -> bus -> analytics -------------------------------------------
async def _e2e(url: str, path: Path, meter: Meter) -> dict[str, Any]:
    from collectors.rocprof.rejects import Rejects
    from collectors.rocprof.replay import load_paths
    from exporter.bus import Bus

    rejects = Rejects()
    rows = batches = 0

    async def publish(bus: Bus) -> None:
        nonlocal rows, batches
        for e in load_paths([path], rejects):
            await bus.publish_table(e.signal, e.batch, e.key)
            rows += e.batch.num_rows
            batches += 1

    got = await publish_and_consume(url, publish, meter)
    res = [r for r in got.results if r["pid"] == E2E_PID]
    return {
        "kernel_spans_total": res[-1]["kernel_spans_total"] if res else None,
        "rows_parsed": rows,
        "rejects": rejects.total,
        "batches": batches,
        "kernel_messages": got.kernel_messages,
        "messages_published": got.messages_published,
        "results_published": got.results_published,
        "drops": got.drops,
    }


def bench_e2e(path: Path) -> Result:
    with nats_child() as (_, url, meter):
        extra = asyncio.run(_e2e(url, path, meter))
    n = extra["rows_parsed"]
    assert extra["rejects"] == 0, f"{extra['rejects']} rows rejected"
    got = extra["kernel_spans_total"]
    assert got == n, f"analytics kernel_spans_total {got} != published {n}"
    return Result.of("end to end: parse->bus->analytics", n, meter, **extra)


# -- 3. baseline A: csv module ------------------------------------------------------------
def bench_csv(path: Path, limit: int) -> Result:
    m, n = Meter(), 0
    m.start()
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            _ = int(row["End_Timestamp"]) - int(row["Start_Timestamp"])
            n += 1
            if n >= limit:
                break
    m.stop()
    return Result.of("baseline: csv.DictReader per row", n, m)


# -- 4./5. baselines B and C: one OTel SDK span per kernel over OTLP/gRPC ----------------
def _otel_spans(path: Path, limit: int, endpoint: str, queue: int, timeout: float | None,
                meter: Meter, wait_for: Any = None) -> int:
    """csv.DictReader -> one span per row; returns spans made. ``wait_for(n)``
    blocks until delivery completes before the meter stops."""
    import logging

    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
    provider = otel_provider(endpoint, queue, timeout=timeout)
    tracer = provider.get_tracer("bench")
    n = 0
    try:
        meter.start()
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                s = tracer.start_span(row["Kernel_Name"], start_time=int(row["Start_Timestamp"]),
                                      attributes={"agent": row["Agent_Id"],
                                                  "queue": int(row["Queue_Id"])})
                s.end(end_time=int(row["End_Timestamp"]))
                n += 1
                if n >= limit:
                    break
        if wait_for is not None:
            wait_for(n)
        meter.stop()
    finally:
        provider.shutdown()
    return n


def bench_otel_closed(path: Path, limit: int) -> Result:
    m = Meter()
    n = _otel_spans(path, limit, "127.0.0.1:9", 1 << 16, 1, m)
    return Result.of("baseline: OTel span, OTLP to closed port", n, m)


def bench_otel_real(path: Path, limit: int, timeout_s: float = 300.0) -> Result:
    with otlp_receiver() as rx:
        m = Meter(rx.pid)
        # Queue as large as the input: the default (2,048) drops spans.
        n = _otel_spans(path, limit, rx.endpoint, max(limit, 2048), None, m,
                        lambda n: rx.wait_for(n, timeout_s))
        received = rx.received
    assert received == n, f"receiver got {received} != {n}"
    return Result.of("baseline: OTel span + OTLP/gRPC, receiver", n, m, received=received)


# -- 6. peak RSS ----------------------------------------------------------------------------
def rss_child(path: Path) -> None:
    n = bench_arrow(path).spans
    print(n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def peak_rss(path: Path) -> tuple[int, int]:
    out = subprocess.run([sys.executable, __file__, "--rss-child", str(path)],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), int(out[1])


TABLE_WIDTHS = (43, 11, 8, 7, 13, 12, 13, 8, 7)
"""Column widths of the results table: path, spans, wall s, cpu s, (self+child),
spans/s, spans/cpu-s, x otel, others."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000, help="rows in the parse/e2e file")
    ap.add_argument("--baseline-rows", type=int, default=50_000)
    ap.add_argument("--rss-rows", type=int, default=10_000_000)
    ap.add_argument("--no-rss", action="store_true", help="skip the peak-RSS legs")
    ap.add_argument("--rss-child")
    a = ap.parse_args()
    if a.rss_child:
        rss_child(Path(a.rss_child))
        return

    def say(msg: str) -> None:
        print(msg, flush=True)

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / str(E2E_PID) / "bench_synthetic_kernel_trace.csv"
        p.parent.mkdir()
        t0 = time.perf_counter()
        make_file(p, a.rows)
        say(f"input: {a.rows:,} rows, {p.stat().st_size / 1e6:.0f} MB, tiled from the "
            f"fixture's real rocprofv3 rows ({time.perf_counter() - t0:.1f} s)")
        bench_arrow(p)  # warm the page cache
        # Warm-up end-to-end run on a small file in its own nats-server: the
        # analytics import river (drift detectors) lazily on the first result,
        # ~1 s once per process that a running exporter has long paid.
        w = Path(d) / "warm" / str(E2E_PID) / "warm_kernel_trace.csv"
        w.parent.mkdir(parents=True)
        make_file(w, 100_000)
        say(f"warm-up end to end ({bench_e2e(w).spans:,} rows) ...")
        w.unlink()
        steps: list[tuple[str, Callable[[], Result]]] = [
            ("parse", lambda: bench_arrow(p)),
            ("end to end", lambda: bench_e2e(p)),
            ("csv baseline", lambda: bench_csv(p, a.baseline_rows)),
            ("OTel baseline (receiver)", lambda: bench_otel_real(p, a.baseline_rows)),
            ("OTel baseline (closed port)", lambda: bench_otel_closed(p, a.baseline_rows)),
        ]
        results: list[Result] = []
        for label, fn in steps:
            say(f"running {label} ...")
            results.append(fn())
        parse, e2e, _, ref, closed = results
        say("")
        say(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
        say(table_text(results, TABLE_WIDTHS, ref))
        say("(cpu s = this process + child: nats-server for end to end, the OTLP receiver "
            "for the receiver baseline; x otel = spans/cpu-s over the receiver baseline's; "
            "others = cores other processes kept busy meanwhile)")
        say(f"end to end vs OTel per-span baseline with real delivery (reference): "
            f"{e2e.spans_per_s / ref.spans_per_s:.1f}x spans/s, "
            f"{e2e.spans_per_cpu_s / ref.spans_per_cpu_s:.1f}x spans per CPU-second; "
            f"vs closed-port OTel (span creation only): "
            f"{e2e.spans_per_cpu_s / closed.spans_per_cpu_s:.1f}x per CPU-second")
        x = e2e.extra
        say(f"check: analytics kernel_spans_total = {x['kernel_spans_total']:,} = parsed "
            f"{x['rows_parsed']:,} ({x['batches']} batches, {x['kernel_messages']} kernel_span "
            f"messages, {x['results_published']} result rows, drops {x['drops'] or 0}); "
            f"OTLP receiver got {ref.extra['received']:,} of {ref.spans:,}")
        say(f"file MB/s (arrow parse): {p.stat().st_size / parse.cpu_s / 1e6:.0f}")
        p.unlink()
        if a.no_rss:
            return
        for rows in (1_000_000, a.rss_rows):
            q = Path(d) / f"rss_{rows}_synthetic_kernel_trace.csv"
            make_file(q, rows)
            got, kb = peak_rss(q)
            gb = q.stat().st_size / 1e9
            say(f"peak RSS parsing {got:,} rows ({gb:.2f} GB): {kb / 1024:.0f} MiB")
            q.unlink()


if __name__ == "__main__":
    main()
