"""``aaco-exporter run``: the always-on daemon.

Starts (or connects to) the bus, the durable analytics consumer, the
Prometheus sink and its ``/metrics`` endpoint, then drives the configured
collectors until SIGINT/SIGTERM (or ``duration_s``). Collectors: ``ort``
when a model is given, the scheduler collector for the watched pids
(``sched`` if that plugin is installed, it picks eBPF or /proc; else
``proc``), ``gpu`` when installed, ``rocprof`` / ``kineto`` when their directory is given,
plus any named with ``--collector``.

Host scoping: on a shared bus the daemon folds in and exports only its own
host's subjects (``aaco.v1.<signal>.<host>``, ``host`` from ``--host``,
default the machine's hostname); ``aaco-exporter aggregate`` serves the
fleet (:mod:`exporter.aggregate`). With ``analytics=False`` it runs no
analytics consumer (a standalone ``analytics`` worker serves its host).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import PlatformCollector, ProcessCollector

from collectors.base import Collector, CollectorContext, available, create
from exporter import schema
from exporter.bus import BusConfig
from exporter.extras import require
from exporter.fleet import FLEET_SIGNALS, host_subjects
from exporter.natsserver import DEFAULT_PORT
from exporter.pipeline import Pipeline
from exporter.sinks.prometheus import PromState, gauge_family
from exporter.webconfig import load_web_config, serve_metrics
from stream_analytics.consumer import AnalyticsConsumer

if TYPE_CHECKING:  # the OpenTelemetry SDK is imported only when OTLP is on
    from exporter.sinks.otlp import OtlpConfig

log = logging.getLogger("aaco.daemon")
VERSION = "0.1.0"
IDLE_FETCH_S = 5.0
"""How long the analytics consumer's pull may linger with nothing to flush (s):
a message ends it at once, so this only sets how often an idle daemon asks
the server (two pull requests per fetch); stop ends it too."""
EMBEDDED_NATS_GOMAXPROCS = 1
"""``GOMAXPROCS`` of the nats-server ``run`` starts itself (``GOMAXPROCS`` in the
environment wins): the always-on background needs one Go thread."""


@dataclass
class DaemonOptions:
    model: str | None = None
    model_name: str | None = None
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 9464
    pids: list[int] = field(default_factory=list)
    collectors: list[str] = field(default_factory=list)
    collector_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    window_s: float = 30.0
    duration_s: float | None = None
    state_dir: str | None = None
    rocprof_dir: str | None = None
    kineto_dir: str | None = None  # follow a Kineto (PyTorch profiler) trace dir
    host: str = field(default_factory=socket.gethostname)
    otlp: OtlpConfig | None = None  # export spans and metrics to an OTLP backend
    otlp_bus: bool = False  # also publish OTLP protobuf on aaco.v1.otlp.*
    otlp_interval_s: float = 5.0
    web_config: str | None = None  # exporter-toolkit style TLS / basic auth file
    watch: str | None = None  # "auto" | "none"; None: auto unless a model is given
    watch_comm: str | None = None  # regex on /proc/PID/comm
    watch_cgroup: str | None = None  # cgroup directory (absolute or under /sys/fs/cgroup)
    max_watched: int = 64
    watch_interval_s: float = 5.0
    nats_listen: tuple[str, int] = ("127.0.0.1", DEFAULT_PORT)  # the embedded server
    explicit: set[str] = field(default_factory=set)  # run flags set by flag, env or [run]
    attach_pids: list[int] = field(default_factory=list)  # rocprofv3 --attach sampling
    attach_every_s: float = 60.0
    attach_window_s: float = 2.0
    attach_discovered: bool = False
    rocprofv3: str = "rocprofv3"
    analytics: bool = True  # False: no own consumer; a standalone worker serves this host
    flush_interval_s: float = 1.0  # analytics results at most this often
    checkpoint_interval_s: float = 30.0  # analytics checkpoint, then input acks, this often
    publish_interval_s: float = 5.0  # background samples (gauges, sched) published this often

    def watch_mode(self) -> str:
        """``auto`` or ``none``: auto by default, except as a lab load generator
        (``--model``), where the exporter runs its own copy of the model."""
        return self.watch or ("none" if self.model else "auto")

    def discovers(self) -> bool:
        """Whether the ``discovery`` collector runs (any selector is set, or a
        ``[collectors.discovery]`` section)."""
        return (self.watch_mode() == "auto" or bool(self.watch_comm or self.watch_cgroup)
                or bool(self.pids) or "discovery" in self.collector_options)


_FLAG_OPTIONS: dict[str, Callable[[DaemonOptions], tuple[tuple[str, str, Any], ...]]] = {
    "rocprof": lambda o: (("dir", "rocprof_dir", o.rocprof_dir),),
    "kineto": lambda o: (("dir", "kineto_dir", o.kineto_dir),),
    "discovery": lambda o: (
        ("auto", "watch", o.watch_mode() == "auto"), ("comm", "watch_comm", o.watch_comm),
        ("cgroup", "watch_cgroup", o.watch_cgroup), ("pids", "pid", list(o.pids)),
        ("max_watched", "max_watched", o.max_watched),
        ("interval_s", "watch_interval", o.watch_interval_s)),
    "attach": lambda o: (
        ("pids", "attach", list(o.attach_pids)), ("every_s", "attach_every", o.attach_every_s),
        ("window_s", "attach_window", o.attach_window_s),
        ("discovered", "attach_discovered", o.attach_discovered),
        ("rocprofv3", "rocprofv3", o.rocprofv3)),
}
"""Collector option <- ``run`` flag (parameter name) <- its value, per collector."""


def _apply_flags(o: dict[str, Any], explicit: set[str],
                 rows: Iterable[tuple[str, str, Any]]) -> None:
    """A flag (or ``[run]`` key) beats ``[collectors.NAME]``, which beats the
    flag's default; ``None`` (flag not given, no default) leaves the option."""
    for key, param, value in rows:
        if value is not None and (param in explicit or key not in o):
            o[key] = value


def _build_collectors(opts: DaemonOptions, pids: set[int]) -> list[Collector]:
    names: list[str] = []
    if opts.discovers():
        names.append("discovery")
    if opts.model:
        names.append("ort")
    names.append("sched" if "sched" in available() else "proc")
    if "gpu" in available():
        names.append("gpu")
    if opts.rocprof_dir:
        names.append("rocprof")
    if opts.kineto_dir:
        names.append("kineto")
    if opts.attach_pids or opts.attach_discovered:
        names.append("attach")
    names += [n for n in opts.collectors if n not in names]
    names += [n for n in opts.collector_options if n not in names]  # a config section turns it on
    out: list[Collector] = []
    for name in names:
        o = dict(opts.collector_options.get(name, {}))
        if name == "ort":
            o.setdefault("model", opts.model)
            o.setdefault("model_name", opts.model_name)
        if name in ("sched", "proc") and opts.publish_interval_s >= 1.0:
            # Scheduler counters are cumulative and their samples wait for the
            # publish anyway: sampling once per publish interval keeps every
            # total and costs a fifth (config interval_s wins).
            o.setdefault("interval_s", opts.publish_interval_s)
        if name in _FLAG_OPTIONS:
            _apply_flags(o, opts.explicit, _FLAG_OPTIONS[name](opts))
        out.append(create(name, CollectorContext(opts.host, pids, o, log.info)))
    return out


async def run_daemon(opts: DaemonOptions, bus_cfg: BusConfig,
                     ready: asyncio.Event | None = None) -> None:
    """Run until a signal or ``opts.duration_s``; never exits on bad input."""
    # A bad web config stops start-up before anything runs.
    web = load_web_config(Path(opts.web_config) if opts.web_config else None)
    if opts.otlp_bus:  # so is a missing extra (MissingExtra, one line)
        require("opentelemetry.proto", "otlp", "OTLP on the bus (--otlp-bus)")
    pids: set[int] = set(opts.pids)
    if opts.state_dir and bus_cfg.outbox_dir is None:  # held messages survive a restart
        bus_cfg.outbox_dir = str(Path(opts.state_dir) / "outbox")
    pipe = Pipeline(opts.host, bus_cfg,
                    state_dir=Path(opts.state_dir) if opts.state_dir else None,
                    listen=opts.nats_listen, publish_interval_s=opts.publish_interval_s,
                    # a node's background traffic needs one Go thread; fewer idle
                    # scheduler wake-ups (-0.05 % of a core, benchmarks/README.md)
                    nats_go_max_procs=EMBEDDED_NATS_GOMAXPROCS,
                    watched=pids)  # a discovered pid is sampled at once, not a sched interval later
    for c in _build_collectors(opts, pids):
        pipe.add(c)
        log.info("collector %s: source %s", c.name, c.source)
    bus = await pipe.open()
    consumer: AnalyticsConsumer | None = None
    if opts.analytics:  # only this host's inputs: a shared bus is not folded in by every node
        consumer = AnalyticsConsumer(
            bus, durable=f"aaco-analytics-{schema.sanitize_token(opts.host)}",
            window_s=opts.window_s, checkpoint=True, hosts=[opts.host],
            sched_keys=True, flush_interval_s=opts.flush_interval_s,
            checkpoint_interval_s=opts.checkpoint_interval_s,
            idle_flush=False,  # one flush per interval, however the collectors interleave
            idle_fetch_s=IDLE_FETCH_S)
        await consumer.start()

    def self_metrics() -> Any:
        yield from pipe.health_metrics(
            lambda: (consumer.drops + consumer.engine.drops if consumer else Counter())
            + state.drops,
            lambda: Counter(consumer.received if consumer else {}))
        info = gauge_family("aaco_exporter_build_info", ["version", "schema_version"])
        info.add_metric([VERSION, str(schema.SCHEMA_VERSION)], 1.0)
        yield info

    state = PromState(self_metrics=self_metrics)
    pipe.registry.register(state)
    ProcessCollector(registry=pipe.registry)
    PlatformCollector(registry=pipe.registry)

    otlp_sink = bridge = None
    if opts.otlp is not None:
        from exporter.sinks.otlp import OtlpSink

        otlp_cfg = opts.otlp
        k8s = next((c for c in pipe.collectors if c.name == "k8s"), None)
        node = getattr(k8s, "node", None)
        if node and "k8s.node.name" not in otlp_cfg.resource_attributes:
            otlp_cfg = replace(otlp_cfg, resource_attributes={
                **otlp_cfg.resource_attributes, "k8s.node.name": str(node)})
        otlp_sink = OtlpSink(otlp_cfg)
    if opts.otlp_bus:
        from exporter.sinks.otlp_bus import OtlpBusBridge

        bridge = OtlpBusBridge()

    async def on_msg(msg: Any) -> None:
        try:
            sig, _, host, batch = schema.decode(msg.data, msg.headers)
        except schema.SchemaError as e:
            state.drops[e.reason] += 1
            return
        state.ingest(sig, host, batch)
        if otlp_sink is not None:
            otlp_sink.ingest(sig, batch, host)
        if bridge is not None:
            bridge.ingest(sig, host, batch)

    sigs = list(FLEET_SIGNALS)
    if otlp_sink is not None or bridge is not None:
        sigs += ["kernel_span", "iteration_span"]
    for sig in sigs:  # this host's subjects only (core NATS sees them untransformed)
        for subj in host_subjects(sig, opts.host):
            await bus.nc.subscribe(subj, cb=on_msg, pending_msgs_limit=1_000_000)
    await bus.nc.flush()  # subscribed on the server before /metrics answers
    server = serve_metrics(pipe.registry, opts.metrics_host, opts.metrics_port, web)
    log.info("serving /metrics on %s:%d", opts.metrics_host, opts.metrics_port)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(s, stop.set)
    tasks = [asyncio.create_task(consumer.run(stop))] if consumer is not None else []
    tasks += [asyncio.create_task(pipe.run_collector(c, stop)) for c in pipe.collectors]
    tasks.append(asyncio.create_task(pipe.run_publisher(stop)))

    async def export_otlp() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), opts.otlp_interval_s)
            try:
                if otlp_sink is not None:
                    await asyncio.to_thread(otlp_sink.flush)
                if bridge is not None:
                    await bridge.flush(bus)
            except Exception as e:  # an unreachable backend must not stop the daemon
                pipe.drops["otlp_export_error"] += 1
                log.warning("OTLP export failed: %s", e)
            for out in (otlp_sink, bridge):  # generate calls over the model cap, failed exports
                if out is not None:
                    pipe.drops.update(out.take_drops())

    if otlp_sink is not None or bridge is not None:
        tasks.append(asyncio.create_task(export_otlp()))
    if ready is not None:
        ready.set()
    try:
        if opts.duration_s is not None:
            try:
                await asyncio.wait_for(stop.wait(), opts.duration_s)
            except TimeoutError:
                stop.set()
        else:
            await stop.wait()
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        server.shutdown()
        if otlp_sink is not None:
            await asyncio.to_thread(otlp_sink.close)
        if bridge is not None:
            try:
                await bridge.flush(bus, final=True)
            except Exception as e:  # the bus may be gone at shutdown
                pipe.drops["otlp_export_error"] += 1
                log.warning("OTLP-on-bus final flush failed: %s", e)
        await pipe.close()


