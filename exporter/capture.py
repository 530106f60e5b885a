"""``aaco-exporter capture``: a bounded lab capture into a session bundle.

It runs the same collectors, bus and analytics consumer as the daemon (no
second implementation of any metric): the ``ort`` collector runs the model
for ``warmup`` + ``iterations`` runs, the ``proc`` collector samples the
process's threads, the analytics consumer evaluates one window spanning the
whole session, and the bundle sink writes what crossed the bus.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from collectors.base import Collector, CollectorContext, available, create
from exporter import schema
from exporter.bundle_dir import BundleDir
from exporter.bus import BusConfig
from exporter.labmode import latency_cv
from exporter.phases import Phases
from exporter.progress import bar
from exporter.session import Session, gpu_collector
from exporter.sinks.bundle import derived_metrics, env_info, finish, inference_summary, write_json


@dataclass
class CaptureOptions:
    """What to capture. ``model`` is a path or an alias such as ``magika``."""

    model: str
    iterations: int = 200
    warmup: int = 5
    out: Path = Path("sessions")
    model_name: str | None = None
    dims: dict[str, int] = field(default_factory=dict)
    fill: dict[str, float] = field(default_factory=dict)
    providers: list[str] | None = None
    sched_interval_s: float = 0.2
    progress: bool = True
    argv: list[str] = field(default_factory=list)
    calibration: Path | None = None  # calibration.json for HEU (default: exporter.calibrate)
    lab: bool = False  # run under exporter.labmode.LabMode (capture --lab)
    lab_cpus: list[int] | None = None
    phases: Phases = field(default_factory=Phases)
    """Seconds per phase: ``run`` (the model under the collectors), ``analytics``,
    ``bundle``, ``trace``; also written to ``session.json`` as ``timings_s``."""


async def capture(opts: CaptureOptions, bus_cfg: BusConfig) -> tuple[Path, dict[str, Any]]:
    """Run the capture; returns the session directory and derived metrics.

    The bundle is written atomically (:mod:`exporter.bundle_dir`): raises
    :class:`exporter.bundle_dir.BundleWriteError` when it cannot be written,
    leaving nothing behind.
    """
    with BundleDir() as bundle:
        if not opts.lab:
            _, derived = await _capture(opts, bus_cfg, bundle)
        else:
            from dataclasses import replace

            from exporter.labmode import LabMode, default_cpus, write_lab

            cpus = opts.lab_cpus or default_cpus()
            opts = replace(opts, lab_cpus=cpus)
            with LabMode(cpus=cpus, say=_stderr) as lab:
                lab.info["ort_intra_op_threads"] = len(cpus)
                out, derived = await _capture(opts, bus_cfg, bundle)
            write_lab(out, lab)  # after the restore, so lab.json shows it
    assert bundle.final is not None
    return bundle.final, derived


async def _capture(opts: CaptureOptions, bus_cfg: BusConfig,
                   bundle: BundleDir) -> tuple[Path, dict[str, Any]]:
    host = socket.gethostname()
    started = time.time_ns()
    pids: set[int] = set()
    with opts.phases.time("start"):  # the model into an ORT session; fails fast on a bad one
        ort_c = _ort_collector(opts, host, pids)
    graph = ort_c.graph  # type: ignore[attr-defined]
    try:
        s = await Session.open("capture", bus_cfg, opts.phases)
    except BaseException:
        ort_c.close()
        raise
    session = s.id
    try:
        out = bundle.create(opts.out / f"{session}_{schema.sanitize_token(graph.name)}")
    except BaseException:
        await s.close()
        ort_c.close()
        raise
    ort_c.runner.profile_dir = out / "profiler"  # type: ignore[attr-defined]
    ort_c.runner.profile_dir.mkdir(parents=True, exist_ok=True)  # type: ignore[attr-defined]
    ort_c.runner.keep_profiles = True  # type: ignore[attr-defined]
    with s.phases.time("start"):
        sched = create("sched" if "sched" in available() else "proc",
                       CollectorContext(host, pids, {"interval_s": opts.sched_interval_s}))
        gpu = gpu_collector(host, pids)
    pipe = s.pipe
    pipe.add(ort_c)
    pipe.add(sched)
    try:
        await pipe.collect_once(sched)  # prime the scheduler deltas
        stop = asyncio.Event()
        bg = [asyncio.create_task(pipe.run_collector(sched, stop)),
              asyncio.create_task(s.run_analytics(stop))]
        if gpu is not None:  # GPU gauges into telemetry/gauges.parquet
            pipe.add(gpu)
            bg.append(asyncio.create_task(pipe.run_collector(gpu, stop)))
        with bar(opts.progress) as shown:  # stderr only: stdout is for scripts
            task = shown.add_task(f"capture {graph.name}", total=opts.iterations) \
                if shown is not None else None
            while not ort_c.done:  # type: ignore[attr-defined]
                with s.phases.time("run"):
                    await pipe.collect_once(ort_c)
                if not pipe.health["ort"].up:
                    raise RuntimeError(pipe.health["ort"].last_error)
                if shown is not None and task is not None:
                    shown.update(task, completed=ort_c.runner.next_iteration)  # type: ignore[attr-defined]
        await pipe.collect_once(sched)  # the last partial interval
        stop.set()
        await asyncio.gather(*bg)
        await s.drain()
    finally:
        await s.close()
    sink = s.sink
    with s.phases.time("bundle"):
        counts = sink.write(out)
        results = sink.table("analytics_result").to_pylist()
        mine = [r for r in results if r["model"] == graph.name]
        final = mine[-1] if mine else {}
        derived = derived_metrics(final)
        derived["latency_cv"] = latency_cv(sink.table("iteration_span"))
        from exporter.heu import capture_heu  # onnx: the ort extra, as --model itself

        derived.update(capture_heu(sink.table("kernel_span"), sink.table("iteration_span"),
                                   graph.proto, graph.name, {k: list(v.shape) for k, v in
                                   ort_c.runner.feed.items()},  # type: ignore[attr-defined]
                                   opts.calibration))
        write_json(out / "metrics/derived_metrics.json", derived)
    try:
        derived["bottleneck"] = finish(out, sink, final or None, timer=s.phases.time).get("class")
    finally:
        sink.discard()
    with s.phases.time("bundle"):  # the attribution runs a graph-only ORT session
        iters = sink.table("iteration_span")
        recorded = {"iterations": iters.num_rows,
                    "kernels": sink.table("kernel_span").num_rows,
                    "kernels_expected": int(pc.sum(iters.column("kernel_count")).as_py() or 0)}
        derived["shortfall"] = shortfall(opts.iterations, recorded, s.loss())
        write_json(out / "metrics/inference_summary.json",
                   inference_summary(iters.column("duration_ns").to_numpy(), opts.warmup))
        write_json(out / "model/model_meta.json", {
            "name": graph.name, "path": str(graph.path), "sha256": graph.sha256,
            "node_count": graph.node_count, "total_nodes": graph.total_nodes,
            "node_count_excludes": ["Constant"], "edge_count": graph.edges.num_rows,
            "op_histogram": graph.op_histogram, "provider": ort_c.source,
            "inputs": {k: list(v.shape) for k, v in ort_c.runner.feed.items()},  # type: ignore[attr-defined]
        })
        from exporter.attribution_bundle import write_attribution  # needs the ort extra

        derived["attribution"] = write_attribution(out, ort_c.runner)  # type: ignore[attr-defined]
        pq.write_table(graph.nodes, out / "model/graph_nodes.parquet")
        pq.write_table(graph.edges, out / "model/graph_edges.parquet")
        write_json(out / "env.json", env_info())
    write_json(out / "session.json", {
        "session_id": session, "host": host, "argv": opts.argv, "model": graph.name,
        "started_ns": started, "ended_ns": time.time_ns(), "iterations": opts.iterations,
        "warmup": opts.warmup, "schema_version": schema.SCHEMA_VERSION,
        "nats": bus_cfg.url or "embedded", "rows": counts,
        "drops": s.drops(), "scheduler_source": sched.source,
        "recorded": recorded, "shortfall": derived["shortfall"], "outbox": s.outbox_stats(),
        "timings_s": s.phases.as_dict(),
    })
    return out, derived


def shortfall(requested: int, recorded: dict[str, int], loss: str | None) -> str | None:
    """``None`` for a complete capture, else one line saying what is missing.

    Complete: ``requested`` iteration spans and, for them, exactly the kernel
    spans their ``kernel_count`` says were published (``recorded`` holds the
    ``iterations``, ``kernels`` and ``kernels_expected`` counted in the
    bundle), and no message lost by the bus outbox (``loss``, from
    :meth:`exporter.session.Session.loss`).
    """
    parts = []
    if (recorded["iterations"] != requested
            or recorded["kernels"] != recorded["kernels_expected"]):
        parts.append(f"{requested} iterations requested, {recorded['iterations']} recorded "
                     f"({recorded['kernels']} kernel spans recorded, "
                     f"{recorded['kernels_expected']} published for them)")
    if loss:
        parts.append(loss)
    return "; ".join(parts) or None
def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def format_summary(d: dict[str, Any]) -> str:
    """One human line per headline metric."""
    def f(v: Any, spec: str) -> str:
        return "n/a" if v is None else format(v, spec)

    def n(k: str) -> str:  # a count, unknown without its input (no graph: no nodes)
        return "n/a" if d.get(k) is None else str(d[k])

    lat = d.get("latency_ms") or {}
    return "\n".join([
        f"KAR  (kernels/node)      {f(d.get('kar'), '.4f')}   "
        f"({n('kernel_count')} kernels, {n('iterations')} iterations, "
        f"{n('graph_node_count')} nodes)",
        f"LTS  (launch tax)        {f(d.get('launch_tax'), '.4f')}",
        f"SII  (sched interference){f(d.get('sii'), '.4f'):>7}",
        f"active ratio             {f(d.get('gpu_active_ratio'), '.4f')}",
        f"bottleneck               {d.get('bottleneck') or 'n/a'}",
        *([f"HEU  (FLOP/s / peak)     {f(d['heu'], '.4f')}"] if "heu" in d else []),
        *([str(d["heu_note"])] if d.get("heu_note") else []),
        *([f"latency CV (std/mean)    {f(d['latency_cv'], '.4f')}"] if "latency_cv" in d
          else []),
        f"latency ms mean/p50/p99  {f(lat.get('mean'), '.3f')} / {f(lat.get('p50'), '.3f')}"
        f" / {f(lat.get('p99'), '.3f')}",
    ])


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=str)


def _ort_collector(opts: CaptureOptions, host: str, pids: set[int]) -> Collector:
    """The ``ort`` collector of a ``capture --model`` run: the model loaded
    into an ONNX Runtime session (raises the collector's ``ModelError`` or
    ``InputError`` on a bad model or input)."""
    return create("ort", CollectorContext(host, pids, {
        "model": opts.model, "model_name": opts.model_name, "iterations": opts.iterations,
        "warmup": opts.warmup, "chunk_s": 1e9, "dims": opts.dims, "fill": opts.fill,
        "providers": opts.providers,
        # --lab: one intra-op thread per dedicated CPU (0: ORT's default)
        "intra_op_threads": len(opts.lab_cpus) if opts.lab and opts.lab_cpus else 0,
        "chunk_iterations": max(10, opts.iterations // 20),
    }))
