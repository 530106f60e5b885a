"""Benchmark: the bus wire encoding of kernel spans, schema's options vs Arrow's defaults.

Input: KERNEL_SPAN batches parsed (``collectors.rocprof.replay.load_paths``)
from a synthetic rocprofv3 ``kernel_trace.csv`` tiled from the real fixture
rows, as ``bench_rocprof.py`` writes it. Per batch, in one process run:

* **schema**: ``exporter.schema.encode`` (LZ4 IPC, one thread) then
  ``exporter.schema.decode``, exactly what the bus does;
* **baseline**: the same batches through Arrow IPC with LZ4 and Arrow's
  default ``use_threads=True`` for writing and reading (what the schema used
  before), and with no compression.

Reports CPU seconds (``time.process_time``, all threads of this process) per
1M spans for encode and decode, bytes per span on the wire, and the ratio of
the schema's CPU to the threaded baseline's. Each side runs ``--repeats``
times, interleaved; the best repeat counts (noise only adds time).

Usage: ``python benchmarks/bench_ipc.py [--rows 500000] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pyarrow as pa
from bench_rocprof import make_file

from collectors.rocprof.rejects import Rejects
from collectors.rocprof.replay import load_paths
from exporter import schema


def _arrow(compression: str | None, threads: bool) -> tuple[Callable[[pa.RecordBatch], bytes],
                                                             Callable[[bytes], object]]:
    wopt = pa.ipc.IpcWriteOptions(compression=compression, use_threads=threads)
    ropt = pa.ipc.IpcReadOptions(use_threads=threads)

    def enc(rb: pa.RecordBatch) -> bytes:
        return schema._serialize(rb, wopt)

    def dec(payload: bytes) -> object:
        with pa.ipc.open_stream(pa.py_buffer(payload), options=ropt) as r:
            return list(r)

    return enc, dec


def _schema() -> tuple[Callable[[pa.RecordBatch], bytes], Callable[[bytes], object]]:
    headers: dict[str, str] = {}

    def enc(rb: pa.RecordBatch) -> bytes:
        m = schema.encode("kernel_span", rb, host="bench", msg_id="x")
        headers.update(m.headers)
        return m.payload

    def dec(payload: bytes) -> object:
        return schema.decode(payload, headers)

    return enc, dec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "4242"
        d.mkdir()
        path = d / "synthetic_kernel_trace.csv"
        make_file(path, a.rows)
        batches = [schema.conform("kernel_span", e.batch)
                   for e in load_paths([path], Rejects()) if e.signal == "kernel_span"]
    n = sum(b.num_rows for b in batches)
    sides = {
        "schema (lz4, 1 thread)": _schema(),
        "arrow lz4, threads (baseline)": _arrow("lz4", True),
        "arrow uncompressed, threads": _arrow(None, True),
    }
    best: dict[str, list[float]] = {k: [float("inf"), float("inf"), 0.0] for k in sides}
    for _ in range(a.repeats):
        for name, (enc, dec) in sides.items():
            t0 = time.process_time()
            payloads = [enc(b) for b in batches]
            t1 = time.process_time()
            for p in payloads:
                dec(p)
            t2 = time.process_time()
            b = best[name]
            b[0], b[1] = min(b[0], t1 - t0), min(b[1], t2 - t1)
            b[2] = sum(len(p) for p in payloads) / n
    print(f"{n:,} kernel spans in {len(batches)} batches; best of {a.repeats} repeats; "
          "CPU s per 1M spans")
    print(f"{'side':32} {'encode':>8} {'decode':>8} {'both':>8} {'bytes/span':>11}")
    for name, (e, dd, size) in best.items():
        print(f"{name:32} {e / n * 1e6:8.3f} {dd / n * 1e6:8.3f} {(e + dd) / n * 1e6:8.3f} "
              f"{size:11.1f}")
    s, base = best["schema (lz4, 1 thread)"], best["arrow lz4, threads (baseline)"]
    print(f"ratio schema/baseline CPU: encode {s[0] / base[0]:.2f}, decode {s[1] / base[1]:.2f}, "
          f"both {(s[0] + s[1]) / (base[0] + base[1]):.2f}")


if __name__ == "__main__":
    main()
