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
import multiprocessing as mp
import os
import platform
import resource
import socket
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from collectors.ort import ModelRunner, resolve_model  # noqa: E402
from collectors.ort.graph import Graph, load_graph  # noqa: E402
from exporter import schema  # noqa: E402
from exporter.bus import Bus, BusConfig  # noqa: E402
from exporter.natsserver import EmbeddedNats  # noqa: E402
from stream_analytics.consumer import AnalyticsConsumer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- CPU accounting -------------------------------------------------------------
def self_cpu_s() -> float:
    """User + system CPU seconds of this process (all its threads)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def pid_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live child process."""
    try:
        import psutil  # type: ignore[import-not-found,import-untyped,unused-ignore]

        t = psutil.Process(pid).cpu_times()
        return float(t.user + t.system)
    except ImportError:
        pass
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy_s() -> float:
    """CPU seconds all processes on the machine have used (``/proc/stat``)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = v
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


@dataclass
class Meter:
    """Wall clock and CPU of this process plus one child over a phase."""

    child_pid: int
    wall0: float = 0.0
    self0: float = 0.0
    child0: float = 0.0
    busy0: float = 0.0
    wall_s: float = 0.0
    self_cpu_s: float = 0.0
    child_cpu_s: float = 0.0
    others_cores: float = 0.0  # cores other processes kept busy meanwhile

    def start(self) -> None:
        self.self0, self.child0 = self_cpu_s(), pid_cpu_s(self.child_pid)
        self.busy0 = machine_busy_s()
        self.wall0 = time.perf_counter()

    def stop(self) -> None:
        self.wall_s = time.perf_counter() - self.wall0
        self.self_cpu_s = self_cpu_s() - self.self0
        self.child_cpu_s = pid_cpu_s(self.child_pid) - self.child0
        others = machine_busy_s() - self.busy0 - self.self_cpu_s - self.child_cpu_s
        self.others_cores = max(0.0, others) / self.wall_s

    @property
    def cpu_s(self) -> float:
        return self.self_cpu_s + self.child_cpu_s


@dataclass
class Result:
    name: str
    spans: int
    wall_s: float
    self_cpu_s: float
    child_cpu_s: float
    child: str
    others_cores: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def cpu_s(self) -> float:
        return self.self_cpu_s + self.child_cpu_s

    @property
    def spans_per_s(self) -> float:
        return self.spans / self.wall_s

    @property
    def spans_per_cpu_s(self) -> float:
        return self.spans / self.cpu_s

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(cpu_s=self.cpu_s, spans_per_s=self.spans_per_s,
                 spans_per_cpu_s=self.spans_per_cpu_s)
        return d


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
    host = socket.gethostname()
    cfg = BusConfig(url=url)
    bus = await Bus.open(url, cfg, host)
    try:
        durable = f"aaco-analytics-{schema.sanitize_token(host)}"
        consumer = AnalyticsConsumer(bus, durable=durable, window_s=30.0, checkpoint=True)
        await consumer.start()
        pid = int(inp.kernels.column("pid")[0].as_py())
        run = f"bench-{uuid.uuid4().hex[:8]}"
        k_iter = inp.kernels.column("iteration").to_numpy()
        i_iter = inp.iterations.column("iteration").to_numpy()
        n_iters = int(i_iter.max()) + 1
        # Chunk boundaries: whole iterations, like the ORT collector's chunks.
        edges = [*range(0, n_iters, chunk_iterations), n_iters]
        k_cut = np.searchsorted(k_iter, edges)
        i_cut = np.searchsorted(i_iter, edges)
        published = asyncio.Event()

        async def publish() -> None:
            await bus.publish_table("graph_info", inp.graph.info_table(pid), f"{run}:graph")
            for c in range(len(edges) - 1):
                k0, k1 = int(k_cut[c]), int(k_cut[c + 1])
                i0, i1 = int(i_cut[c]), int(i_cut[c + 1])
                await bus.publish_table("kernel_span", inp.kernels.slice(k0, k1 - k0),
                                        f"{run}:{c}:k")
                await bus.publish_table("iteration_span", inp.iterations.slice(i0, i1 - i0),
                                        f"{run}:{c}:i")
            published.set()

        async def consume() -> None:
            while True:
                n = await consumer.step(timeout=0.2)
                if n == 0 and published.is_set() and await consumer.pending() == 0:
                    return

        meter.start()
        await asyncio.gather(publish(), consume())
        meter.stop()
        last = await bus.js.get_last_msg(cfg.stream, schema.subject("analytics_result", host))
        _, _, _, batch = schema.decode(last.data or b"", last.headers)
        rows = [r for r in batch.to_pylist() if r["model"] == inp.graph.name]
        kernel_msgs = consumer.received["kernel_span"]
        return {
            "kernel_spans_total": rows[-1]["kernel_spans_total"] if rows else None,
            "iterations_total": rows[-1]["iterations_total"] if rows else None,
            "kar": rows[-1]["kar"] if rows else None,
            "published_kernel_rows": inp.kernels.num_rows,
            "kernel_messages": kernel_msgs,
            "messages_published": bus.published_messages,
            "results_published": consumer.results_published,
            "drops": dict(consumer.drops),
            "chunks": len(edges) - 1,
        }
    finally:
        await bus.close()


def run_pipeline(inp: Input, chunk_iterations: int) -> Result:
    srv = EmbeddedNats()
    try:
        url = srv.start()
        assert srv.proc is not None
        meter = Meter(srv.proc.pid)
        extra = asyncio.run(_pipeline(url, inp, chunk_iterations, meter))
        stream_bytes = sum(f.stat().st_size for f in srv.state_dir.rglob("*") if f.is_file())
        extra["jetstream_dir_bytes"] = stream_bytes
    finally:
        srv.stop()
    n = inp.kernels.num_rows
    got = extra["kernel_spans_total"]
    assert got == n, f"analytics kernel_spans_total {got} != published {n}"
    return Result("pipeline", n, meter.wall_s, meter.self_cpu_s, meter.child_cpu_s,
                  "nats-server", meter.others_cores, extra)


# -- baseline: one OTel span per kernel over OTLP/gRPC ------------------------------
def _receiver(conn: Connection, count: Synchronized[int], stop: Any) -> None:
    """Child process: an OTLP/gRPC trace receiver that counts spans."""
    import grpc
    from opentelemetry.proto.collector.trace.v1 import (
        trace_service_pb2,
        trace_service_pb2_grpc,
    )

    class Counter(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            n = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
            with count.get_lock():
                count.value += n
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(ThreadPoolExecutor(max_workers=4),
                         options=[("grpc.max_receive_message_length", 64 << 20)])
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Counter(), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    conn.send(port)
    stop.wait()
    server.stop(0)


def run_baseline(table: pa.Table, timeout_s: float) -> Result:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    ctx = mp.get_context("spawn")
    count: Synchronized[int] = ctx.Value("q", 0)
    stop = ctx.Event()
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_receiver, args=(child, count, stop), daemon=True)
    proc.start()
    provider: TracerProvider | None = None
    try:
        if not parent.poll(30):
            raise RuntimeError("OTLP receiver did not start")
        port = int(parent.recv())
        assert proc.pid is not None
        n = table.num_rows
        provider = TracerProvider(resource=Resource.create({"service.name": "bench-baseline"}))
        # Queue as large as the input so nothing is dropped (the default,
        # 2048, drops spans when they are made faster than exported).
        provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True),
            max_queue_size=n, max_export_batch_size=512, schedule_delay_millis=100))
        tracer = provider.get_tracer("aaco.bench")
        meter = Meter(proc.pid)
        meter.start()
        cols = {c: table.column(c) for c in table.column_names}
        for c in ("source", "model", "device_type", "kernel_name", "kernel_family", "op_type",
                  "node_name"):
            cols[c] = pc.cast(cols[c], pa.string())
        py = {c: v.to_pylist() for c, v in cols.items()}
        start, end, name = py["start_ns"], py["end_ns"], py["kernel_name"]
        attrs: list[tuple[str, list[Any]]] = [
            ("aaco.source", py["source"]), ("aaco.model", py["model"]),
            ("process.pid", py["pid"]), ("thread.id", py["tid"]),
            ("aaco.device_type", py["device_type"]), ("aaco.kernel_family", py["kernel_family"]),
            ("aaco.op_type", py["op_type"]), ("aaco.node_name", py["node_name"]),
            ("aaco.iteration", py["iteration"]),
        ]
        for i in range(n):
            span = tracer.start_span(name[i], start_time=start[i],
                                     attributes={k: v[i] for k, v in attrs})
            span.end(end_time=end[i])
        deadline = time.monotonic() + timeout_s
        while count.value < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"receiver got {count.value} of {n} spans in {timeout_s}s")
            time.sleep(0.002)
        meter.stop()
        received = int(count.value)
    finally:
        if provider is not None:
            provider.shutdown()
        stop.set()
        proc.join(10)
        if proc.is_alive():
            proc.terminate()
            proc.join(5)
    assert received == n, f"receiver got {received} != {n}"
    return Result("otel-per-span", n, meter.wall_s, meter.self_cpu_s, meter.child_cpu_s,
                  "otlp-receiver", meter.others_cores, {"received": received})


# -- report -----------------------------------------------------------------------
def table_text(results: list[Result]) -> str:
    hdr = (f"{'path':<15}{'spans':>11}{'wall s':>9}{'cpu s':>8}{'(self+child)':>16}"
           f"{'spans/s':>13}{'spans/cpu-s':>14}{'others':>8}")
    lines = [hdr, "-" * len(hdr)]
    for r in results:
        split = f"{r.self_cpu_s:.2f}+{r.child_cpu_s:.2f}"
        lines.append(f"{r.name:<15}{r.spans:>11,}{r.wall_s:>9.2f}{r.cpu_s:>8.2f}{split:>16}"
                     f"{r.spans_per_s:>13,.0f}{r.spans_per_cpu_s:>14,.0f}"
                     f"{r.others_cores:>8.2f}")
    return "\n".join(lines)


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
    say(table_text(results))
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
