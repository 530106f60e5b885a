"""Pipeline throughput vs. one OpenTelemetry span per kernel, in one run.

Both sides get the same input: kernel spans tiled from a REAL ONNX Runtime
profile of the ``magika`` model (a few profiled runs on this machine, then
the table repeated with shifted timestamps and iteration numbers).

* **pipeline**: Arrow batches -> ``Bus.publish_table`` -> embedded
  nats-server (JetStream, file storage) -> :class:`AnalyticsConsumer` with
  checkpointing on and a 30 s window, exactly as ``aaco-exporter run`` runs
  it, in the same event loop as the publisher. The clock stops when the
  consumer has processed and acknowledged everything; the last
  ``analytics_result`` on the bus must report every published kernel span.
* **baseline**: what a user would write without this project: for each
  kernel row one OpenTelemetry SDK span (``TracerProvider``,
  ``BatchSpanProcessor``, ``OTLPSpanExporter`` over gRPC) to a real OTLP/gRPC
  receiver (``TraceServiceServicer`` in a child process on 127.0.0.1:0) that
  counts spans. The clock stops when the receiver has all of them. The
  baseline only transports spans; it computes no analytics.

Per-core figures divide by the CPU time spent during the phase: this
process (``getrusage(RUSAGE_SELF)``) plus the server child (nats-server, or
the OTLP receiver) from ``/proc/<pid>/stat`` (psutil when installed).

Usage::

    python benchmarks/bench_pipeline.py [--rows 2000000] [--baseline-rows 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# benchmarks/ is not a package; benchcommon also puts the repository root on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchcommon import (
    Meter,
    Result,
    nats_child,
    otel_provider,
    otlp_receiver,
    publish_and_consume,
    table_text,
)

from collectors.ort import ModelRunner, resolve_model
from collectors.ort.graph import Graph, load_graph
from exporter.bus import Bus

RESULTS = Path(__file__).resolve().parent / "results"


# -- input: a real magika profile, tiled ----------------------------------------
@dataclass
class Input:
    graph: Graph
    provider: str
    profile_kernels: int
    profile_iterations: int
    kernels: pa.Table
    iterations: pa.Table


def real_profile(iterations: int) -> tuple[Graph, str, pa.Table, pa.Table]:
    """Kernel and iteration spans of ``iterations`` profiled magika runs."""
    graph = load_graph(resolve_model("magika"))
    runner = ModelRunner(graph)
    try:
        prof = runner.run_chunk(iterations, 60.0, warmup=2)
    finally:
        runner.close()
    return graph, runner.provider, prof.kernels, prof.iterations


def tile(kernels: pa.Table, iterations: pa.Table, reps: int) -> tuple[pa.Table, pa.Table]:
    """Repeat a profile ``reps`` times, back to back in time.

    Copy ``r`` is shifted by ``r`` times the profile's period (first run
    start to last run end plus one mean gap between runs) and its iteration
    numbers by ``r`` times the number of runs, so the result looks like one
    long, steady inference loop.
    """
    i_start = iterations.column("start_ns").to_numpy()
    i_end = iterations.column("end_ns").to_numpy()
    n_it = iterations.num_rows
    gap = int(np.mean(i_start[1:] - i_end[:-1])) if n_it > 1 else 0
    period = int(i_end.max() - i_start.min()) + max(gap, 0)

    def rep(t: pa.Table) -> pa.Table:
        n = t.num_rows
        out = t.take(pa.array(np.tile(np.arange(n), reps)))
        block = np.repeat(np.arange(reps, dtype=np.int64), n)
        for col, step in (("start_ns", period), ("end_ns", period), ("iteration", n_it)):
            i = out.schema.get_field_index(col)
            shifted = out.column(col).to_numpy() + block * step
            out = out.set_column(i, col, pa.array(shifted, pa.int64()))
        return out

    return rep(kernels), rep(iterations)


def build_input(rows: int, profile_iterations: int) -> Input:
    graph, provider, k, it = real_profile(profile_iterations)
    reps = max(1, math.ceil(rows / k.num_rows))
    kt, itt = tile(k, it, reps)
    return Input(graph, provider, k.num_rows, it.num_rows, kt, itt)


def head(inp: Input, rows: int) -> pa.Table:
    """The first ``rows`` kernel rows (the baseline's smaller input)."""
    return inp.kernels.slice(0, min(rows, inp.kernels.num_rows))


# -- pipeline -------------------------------------------------------------------
async def _pipeline(url: str, inp: Input, chunk_iterations: int, meter: Meter) -> dict[str, Any]:
    pid = int(inp.kernels.column("pid")[0].as_py())
    run = f"bench-{uuid.uuid4().hex[:8]}"
    k_iter = inp.kernels.column("iteration").to_numpy()
    i_iter = inp.iterations.column("iteration").to_numpy()
    n_iters = int(i_iter.max()) + 1
    # Chunk boundaries: whole iterations, like the ORT collector's chunks.
    edges = [*range(0, n_iters, chunk_iterations), n_iters]
    k_cut = np.searchsorted(k_iter, edges)
    i_cut = np.searchsorted(i_iter, edges)

    async def publish(bus: Bus) -> None:
        await bus.publish_table("graph_info", inp.graph.info_table(pid), f"{run}:graph")
        for c in range(len(edges) - 1):
            k0, k1 = int(k_cut[c]), int(k_cut[c + 1])
            i0, i1 = int(i_cut[c]), int(i_cut[c + 1])
            await bus.publish_table("kernel_span", inp.kernels.slice(k0, k1 - k0),
                                    f"{run}:{c}:k")
            await bus.publish_table("iteration_span", inp.iterations.slice(i0, i1 - i0),
                                    f"{run}:{c}:i")

    got = await publish_and_consume(url, publish, meter)
    rows = [r for r in got.results if r["model"] == inp.graph.name]
    return {
        "kernel_spans_total": rows[-1]["kernel_spans_total"] if rows else None,
        "iterations_total": rows[-1]["iterations_total"] if rows else None,
        "kar": rows[-1]["kar"] if rows else None,
        "published_kernel_rows": inp.kernels.num_rows,
        "kernel_messages": got.kernel_messages,
        "messages_published": got.messages_published,
        "results_published": got.results_published,
        "drops": got.drops,
        "chunks": len(edges) - 1,
    }


def run_pipeline(inp: Input, chunk_iterations: int) -> Result:
    with nats_child() as (srv, url, meter):
        extra = asyncio.run(_pipeline(url, inp, chunk_iterations, meter))
        stream_bytes = sum(f.stat().st_size for f in srv.state_dir.rglob("*") if f.is_file())
        extra["jetstream_dir_bytes"] = stream_bytes
    n = inp.kernels.num_rows
    got = extra["kernel_spans_total"]
    assert got == n, f"analytics kernel_spans_total {got} != published {n}"
    return Result("pipeline", n, meter.wall_s, meter.self_cpu_s, meter.child_cpu_s,
                  "nats-server", meter.others_cores, extra)


# -- baseline: one OTel span per kernel over OTLP/gRPC ------------------------------
def run_baseline(table: pa.Table, timeout_s: float) -> Result:
    with otlp_receiver() as rx:
        n = table.num_rows
        # Queue as large as the input so nothing is dropped (the default,
        # 2048, drops spans when they are made faster than exported).
        provider = otel_provider(rx.endpoint, n, service_name="bench-baseline")
        try:
            tracer = provider.get_tracer("aaco.bench")
            meter = Meter(rx.pid)
            meter.start()
            cols = {c: table.column(c) for c in table.column_names}
            for c in ("source", "model", "device_type", "kernel_name", "kernel_family",
                      "op_type", "node_name"):
                cols[c] = pc.cast(cols[c], pa.string())
            py = {c: v.to_pylist() for c, v in cols.items()}
            start, end, name = py["start_ns"], py["end_ns"], py["kernel_name"]
            attrs: list[tuple[str, list[Any]]] = [
                ("aaco.source", py["source"]), ("aaco.model", py["model"]),
                ("process.pid", py["pid"]), ("thread.id", py["tid"]),
                ("aaco.device_type", py["device_type"]),
                ("aaco.kernel_family", py["kernel_family"]),
                ("aaco.op_type", py["op_type"]), ("aaco.node_name", py["node_name"]),
                ("aaco.iteration", py["iteration"]),
            ]
            for i in range(n):
                span = tracer.start_span(name[i], start_time=start[i],
                                         attributes={k: v[i] for k, v in attrs})
                span.end(end_time=end[i])
            rx.wait_for(n, timeout_s)
            meter.stop()
            received = rx.received
        finally:
            provider.shutdown()
    assert received == n, f"receiver got {received} != {n}"
    return Result("otel-per-span", n, meter.wall_s, meter.self_cpu_s, meter.child_cpu_s,
                  "otlp-receiver", meter.others_cores, {"received": received})


# -- report -----------------------------------------------------------------------
TABLE_WIDTHS = (15, 11, 9, 8, 16, 13, 14, 8)
"""Column widths of the results table: path, spans, wall s, cpu s, (self+child),
spans/s, spans/cpu-s, others."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--rows", type=int, default=2_000_000, help="pipeline kernel spans")
    ap.add_argument("--baseline-rows", type=int, default=100_000,
                    help="OpenTelemetry per-span baseline kernel spans")
    ap.add_argument("--profile-iterations", type=int, default=20,
                    help="real magika runs profiled to make the input")
    ap.add_argument("--chunk-iterations", type=int, default=175,
                    help="iterations per published chunk (~1 s of magika on CPU)")
    ap.add_argument("--json", type=Path, default=RESULTS / "bench_pipeline.json")
    a = ap.parse_args(argv)

    def say(msg: str) -> None:
        print(msg, flush=True)

    t0 = time.perf_counter()
    inp = build_input(max(a.rows, a.baseline_rows), a.profile_iterations)
    say(f"input: {inp.profile_kernels} kernel spans / {inp.profile_iterations} runs from a real "
        f"ONNX Runtime profile of magika ({inp.graph.name}, {inp.provider}), tiled to "
        f"{inp.kernels.num_rows:,} rows / {inp.iterations.num_rows:,} runs with shifted "
        f"timestamps and iteration numbers ({time.perf_counter() - t0:.1f} s)")
    pipe_in = Input(inp.graph, inp.provider, inp.profile_kernels, inp.profile_iterations,
                    head(inp, a.rows), inp.iterations)
    last_it = int(pc.max(pipe_in.kernels.column("iteration")).as_py())
    pipe_in.iterations = inp.iterations.filter(pc.less_equal(inp.iterations["iteration"],
                                                             last_it))
    steps: list[tuple[str, Callable[[], Result]]] = [
        ("pipeline", lambda: run_pipeline(pipe_in, a.chunk_iterations)),
        ("baseline", lambda: run_baseline(head(inp, a.baseline_rows), 300.0)),
    ]
    results: list[Result] = []
    for label, fn in steps:
        say(f"running {label} ...")
        results.append(fn())
    pipe, base = results
    say("")
    say(f"kernel spans tiled from a real magika profile; {os.cpu_count()} CPUs; "
        f"load average {os.getloadavg()[0]:.2f} (other processes may be running)")
    say(table_text(results, TABLE_WIDTHS))
    say("(cpu s = this process + server child: nats-server / OTLP receiver; others = cores "
        "other processes kept busy during the phase)")
    ratio_wall = pipe.spans_per_s / base.spans_per_s
    ratio_cpu = pipe.spans_per_cpu_s / base.spans_per_cpu_s
    say(f"ratio pipeline/baseline: {ratio_wall:.1f}x spans/s, {ratio_cpu:.1f}x spans per "
        f"CPU-second")
    say(f"check: analytics kernel_spans_total = {pipe.extra['kernel_spans_total']:,} = "
        f"published {pipe.spans:,} (in {pipe.extra['kernel_messages']} kernel_span messages); "
        f"OTLP receiver got {base.extra['received']:,} of {base.spans:,}")
    out = {
        "benchmark": "bench_pipeline",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "loadavg_end": os.getloadavg()},
        "input": {"model": inp.graph.name, "provider": inp.provider,
                  "profile_kernel_spans": inp.profile_kernels,
                  "profile_iterations": inp.profile_iterations,
                  "note": "rows tiled from a real ONNX Runtime profile of magika"},
        "results": [r.as_dict() for r in results],
        "ratio": {"spans_per_s": ratio_wall, "spans_per_cpu_s": ratio_cpu},
    }
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(out, indent=2, default=str) + "\n")
    say(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
