"""Pieces the throughput benchmarks share (``bench_pipeline.py``, ``bench_rocprof.py``,
``bench_capture_overhead.py``).

* :func:`stop_process`: SIGTERM a child, then SIGKILL past a grace period;
* **CPU metering**: :func:`self_cpu_s`, :func:`pid_cpu_s`, :func:`machine_busy_s` and
  :class:`Meter`, which reads wall clock, this process's CPU, one child's CPU and the
  CPU other processes used over one benchmark phase;
* :class:`Result`: one benchmark leg's spans, wall clock and CPU, with spans/s and
  spans per CPU-second, and :func:`table_text` to print a list of them;
* **pipeline leg**: :func:`nats_child` (an embedded nats-server child with a
  :class:`Meter` on it) and :func:`publish_and_consume` (publish to the bus while an
  ``AnalyticsConsumer`` steps in the same event loop, timed until all is acknowledged);
* **OpenTelemetry baseline**: :func:`otlp_receiver`, a real OTLP/gRPC trace receiver in
  a child process that counts spans, and :func:`otel_provider`, the SDK tracer provider
  (``BatchSpanProcessor`` + ``OTLPSpanExporter`` over gRPC) the baselines make spans with.

``benchmarks/`` is not a package: the scripts put their own directory on ``sys.path``
and ``import benchcommon``. Heavy imports (the project's bus and analytics,
OpenTelemetry, gRPC) are made inside the functions that need them, so importing this
module costs only the standard library (``bench_rocprof.py`` measures peak RSS in a
subprocess that imports it).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
"""The repository root (put on ``sys.path`` so the project's packages import)."""
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from exporter.bus import Bus
    from exporter.natsserver import EmbeddedNats

CLK_TCK = os.sysconf("SC_CLK_TCK")
"""Clock ticks per second: the unit of ``/proc/stat`` and ``/proc/<pid>/stat`` times."""


# -- CPU accounting ---------------------------------------------------------------------
def stop_process(p: subprocess.Popen[bytes] | None, term_wait_s: float = 15.0,
                 kill_wait_s: float = 5.0) -> None:
    """SIGTERM ``p``, ``term_wait_s`` for it to exit, then SIGKILL and
    ``kill_wait_s`` more; nothing for ``None`` or a process already reaped."""
    if p is None or p.poll() is not None:
        return
    p.terminate()
    try:
        p.wait(term_wait_s)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(kill_wait_s)


def self_cpu_s() -> float:
    """User + system CPU seconds of this process (all its threads).

    Read with ``getrusage(RUSAGE_SELF)``; children are not included.
    """
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def pid_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live child process.

    From psutil when it is installed, else from fields 14 (utime) and 15 (stime) of
    ``/proc/<pid>/stat`` divided by :data:`CLK_TCK`. Unlike ``RUSAGE_CHILDREN`` this
    works while the child is still running (the nats-server, the OTLP receiver).
    """
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
    """CPU seconds all processes on the machine have used since boot.

    The first (aggregate ``cpu``) line of ``/proc/stat``: user + nice + system + irq +
    softirq + steal ticks (idle and iowait left out) divided by :data:`CLK_TCK`.
    """
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = v
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


@dataclass
class Meter:
    """Wall clock and CPU of this process plus (optionally) one child over a phase.

    :meth:`start` and :meth:`stop` bracket the phase. ``wall_s`` is
    ``time.perf_counter`` time, ``self_cpu_s`` :func:`self_cpu_s` of this process,
    ``child_cpu_s`` :func:`pid_cpu_s` of ``child_pid`` (0 without one), and
    ``others_cores`` the cores other processes kept busy meanwhile: the machine's
    :func:`machine_busy_s` less this process and the child, over the wall time.
    """

    child_pid: int | None = None
    wall0: float = 0.0
    self0: float = 0.0
    child0: float = 0.0
    busy0: float = 0.0
    wall_s: float = 0.0
    self_cpu_s: float = 0.0
    child_cpu_s: float = 0.0
    others_cores: float = 0.0  # cores other processes kept busy meanwhile

    def _child(self) -> float:
        return pid_cpu_s(self.child_pid) if self.child_pid is not None else 0.0

    def start(self) -> None:
        """Read the starting CPU counters and clock."""
        self.self0, self.child0 = self_cpu_s(), self._child()
        self.busy0 = machine_busy_s()
        self.wall0 = time.perf_counter()

    def stop(self) -> None:
        """Read the counters again and set the phase's figures."""
        self.wall_s = time.perf_counter() - self.wall0
        self.self_cpu_s = self_cpu_s() - self.self0
        self.child_cpu_s = self._child() - self.child0
        others = machine_busy_s() - self.busy0 - self.self_cpu_s - self.child_cpu_s
        self.others_cores = max(0.0, others) / self.wall_s

    @property
    def cpu_s(self) -> float:
        """CPU seconds of this process plus the child over the phase."""
        return self.self_cpu_s + self.child_cpu_s


# -- results ----------------------------------------------------------------------------
@dataclass
class Result:
    """One benchmark leg: ``spans`` handled in ``wall_s`` using ``cpu_s`` CPU seconds.

    ``child`` names the child process whose CPU is in ``child_cpu_s`` (nats-server,
    the OTLP receiver; empty for none); ``extra`` holds the leg's own checks and counts.
    """

    name: str
    spans: int
    wall_s: float
    self_cpu_s: float
    child_cpu_s: float = 0.0
    child: str = ""
    others_cores: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, spans: int, m: Meter, /, child: str = "", **extra: Any) -> Result:
        """A result from a stopped :class:`Meter`; keyword arguments go to ``extra``."""
        return cls(name, spans, m.wall_s, m.self_cpu_s, m.child_cpu_s, child,
                   m.others_cores, extra)

    @property
    def cpu_s(self) -> float:
        """CPU seconds of this process plus the child."""
        return self.self_cpu_s + self.child_cpu_s

    @property
    def spans_per_s(self) -> float:
        """Throughput over wall-clock time."""
        return self.spans / self.wall_s

    @property
    def spans_per_cpu_s(self) -> float:
        """Throughput per core: spans over CPU seconds (this process + child)."""
        return self.spans / self.cpu_s

    def as_dict(self) -> dict[str, Any]:
        """The fields plus the derived figures, for the JSON report."""
        d = asdict(self)
        d.update(cpu_s=self.cpu_s, spans_per_s=self.spans_per_s,
                 spans_per_cpu_s=self.spans_per_cpu_s)
        return d


def table_text(results: Sequence[Result], widths: Sequence[int],
               ref: Result | None = None) -> str:
    """A fixed-width text table of ``results``, one row each, under a header and a rule.

    Columns: path, spans, wall s, cpu s, (self+child) CPU, spans/s, spans/cpu-s, then,
    with ``ref``, ``x otel`` (spans/cpu-s over ``ref``'s), and others (cores other
    processes kept busy). ``widths`` gives each column's width in that order (8 of
    them, 9 with ``ref``); the path is left-aligned, the rest right-aligned.
    """
    w = list(widths)
    names = ["path", "spans", "wall s", "cpu s", "(self+child)", "spans/s", "spans/cpu-s"]
    if ref is not None:
        names.append("x otel")
    names.append("others")
    if len(w) != len(names):
        raise ValueError(f"{len(names)} column widths wanted, got {len(w)}")
    hdr = f"{names[0]:<{w[0]}}" + "".join(f"{n:>{k}}" for n, k in zip(names[1:], w[1:],
                                                                            strict=True))
    lines = [hdr, "-" * len(hdr)]
    for r in results:
        split = f"{r.self_cpu_s:.2f}+{r.child_cpu_s:.2f}"
        cells = [f"{r.name:<{w[0]}}", f"{r.spans:>{w[1]},}", f"{r.wall_s:>{w[2]}.2f}",
                 f"{r.cpu_s:>{w[3]}.2f}", f"{split:>{w[4]}}", f"{r.spans_per_s:>{w[5]},.0f}",
                 f"{r.spans_per_cpu_s:>{w[6]},.0f}"]
        if ref is not None:
            cells.append(f"{r.spans_per_cpu_s / ref.spans_per_cpu_s:>{w[7]}.1f}")
        cells.append(f"{r.others_cores:>{w[-1]}.2f}")
        lines.append("".join(cells))
    return "\n".join(lines)


# -- pipeline leg: embedded nats-server, bus, analytics ----------------------------------
@contextmanager
def nats_child() -> Iterator[tuple[EmbeddedNats, str, Meter]]:
    """An embedded nats-server (JetStream, file storage) for one leg.

    Yields the server, its URL and a :class:`Meter` whose child is the server process;
    stops the server on exit.
    """
    from exporter.natsserver import EmbeddedNats

    srv = EmbeddedNats()
    try:
        url = srv.start()
        assert srv.proc is not None
        yield srv, url, Meter(srv.proc.pid)
    finally:
        srv.stop()


@dataclass
class Consumed:
    """What :func:`publish_and_consume` saw on the bus after the timed phase."""

    results: list[dict[str, Any]]
    """Rows of the last ``analytics_result`` message for this host."""
    kernel_messages: int
    messages_published: int
    results_published: int
    drops: dict[str, int]


async def publish_and_consume(url: str, publish: Callable[[Bus], Awaitable[None]],
                              meter: Meter) -> Consumed:
    """Time ``publish(bus)`` with an ``AnalyticsConsumer`` draining the bus meanwhile.

    Opens a :class:`~exporter.bus.Bus` on ``url``, starts the consumer the way
    ``aaco-exporter run`` does (per-host durable, 30 s window, checkpointing on), then
    runs the publisher and ``consumer.step`` in the same event loop. ``meter`` runs from
    the start until everything published has been processed, checkpointed and
    acknowledged (``pending() == 0`` after the publisher finished). Then reads the last
    ``analytics_result`` for this host from the stream.
    """
    from exporter import schema
    from exporter.bus import Bus, BusConfig
    from stream_analytics.consumer import AnalyticsConsumer

    host = socket.gethostname()
    cfg = BusConfig(url=url)
    bus = await Bus.open(url, cfg, host)
    try:
        durable = f"aaco-analytics-{schema.sanitize_token(host)}"
        consumer = AnalyticsConsumer(bus, durable=durable, window_s=30.0, checkpoint=True)
        await consumer.start()
        published = asyncio.Event()

        async def produce() -> None:
            await publish(bus)
            published.set()

        async def consume() -> None:
            while True:
                n = await consumer.step(timeout=0.2)
                if n == 0 and published.is_set() and await consumer.pending() == 0:
                    return

        meter.start()
        await asyncio.gather(produce(), consume())
        meter.stop()
        last = await bus.js.get_last_msg(cfg.stream, schema.subject("analytics_result", host))
        _, _, _, batch = schema.decode(last.data or b"", last.headers)
        return Consumed(batch.to_pylist(), consumer.received["kernel_span"],
                        bus.published_messages, consumer.results_published,
                        dict(consumer.drops))
    finally:
        await bus.close()


# -- OpenTelemetry baseline: a real OTLP/gRPC receiver ------------------------------------
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


@dataclass
class Receiver:
    """A running OTLP/gRPC receiver child: its port, pid and span count so far."""

    port: int
    pid: int
    count: Synchronized[int]

    @property
    def endpoint(self) -> str:
        """``host:port`` for ``OTLPSpanExporter(endpoint=..., insecure=True)``."""
        return f"127.0.0.1:{self.port}"

    @property
    def received(self) -> int:
        """Spans the receiver has counted."""
        return int(self.count.value)

    def wait_for(self, n: int, timeout_s: float) -> None:
        """Poll (every 2 ms) until the receiver has ``n`` spans; RuntimeError after
        ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        while self.count.value < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"receiver got {self.count.value} of {n} spans "
                                   f"in {timeout_s}s")
            time.sleep(0.002)


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """Start a real OTLP/gRPC trace receiver on 127.0.0.1:0 in a spawned child.

    The child serves ``TraceService.Export`` (grpcio, 4 worker threads, 64 MiB
    messages) and adds every request's span count to a shared counter. Yields a
    :class:`Receiver` once the port is known (RuntimeError if not within 30 s); on
    exit stops the server and joins the child (terminating it if it lingers).
    """
    ctx = mp.get_context("spawn")
    count: Synchronized[int] = ctx.Value("q", 0)
    stop = ctx.Event()
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_receiver, args=(child, count, stop), daemon=True)
    proc.start()
    try:
        if not parent.poll(30):
            raise RuntimeError("OTLP receiver did not start")
        port = int(parent.recv())
        assert proc.pid is not None
        yield Receiver(port, proc.pid, count)
    finally:
        stop.set()
        proc.join(10)
        if proc.is_alive():
            proc.terminate()
            proc.join(5)


def otel_provider(endpoint: str, queue: int, *, timeout: float | None = None,
                  service_name: str | None = None) -> TracerProvider:
    """An OpenTelemetry SDK ``TracerProvider`` exporting over OTLP/gRPC to ``endpoint``.

    One ``BatchSpanProcessor`` (queue of ``queue`` spans, export batches of 512, every
    100 ms) feeding an insecure ``OTLPSpanExporter`` with the given ``timeout``; with
    ``service_name`` the provider's resource carries ``service.name``. The caller makes
    one span per kernel with it and shuts it down.
    """
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = (TracerProvider() if service_name is None else
                TracerProvider(resource=Resource.create({"service.name": service_name})))
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=timeout)
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=queue,
                                                   max_export_batch_size=512,
                                                   schedule_delay_millis=100))
    return provider


def best_of(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """The fastest of ``repeat`` calls of ``fn`` (seconds, perf_counter) and
    the last call's result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def tile_generates(base: Sequence[Any], n: int) -> list[Any]:
    """``n`` generate records (:class:`exporter.instrument.llm.GenerateRecord`)
    tiled from the recorded ``base`` calls: copy ``k`` is shifted by ``k`` times
    the recording's span and the ids renumbered (the output says "tiled")."""
    import dataclasses

    span = max(r.end_ns for r in base) - min(r.start_ns for r in base)
    out = []
    for i in range(n):
        r, k = base[i % len(base)], i // len(base)
        d = k * span
        out.append(dataclasses.replace(
            r, generate_id=i, start_ns=r.start_ns + d, end_ns=r.end_ns + d,
            step_ns=[t + d for t in r.step_ns]))
    return out
