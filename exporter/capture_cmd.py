"""``aaco-exporter capture -- COMMAND ARGS``: profile any workload.

The command runs under ``rocprofv3 --kernel-trace --hip-runtime-trace
--output-format csv`` when ``rocprofv3`` is on ``PATH`` (else as is, with
scheduler data only). While it runs, the scheduler collector (``sched``:
eBPF or /proc) watches its whole process tree. When it exits, the kernel
traces rocprofv3 wrote are pushed through the same bus and analytics as
``replay`` (HIP launch API joined on the correlation id), and the same
session bundle is written, with the rocprof outputs kept under ``rocprof/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from collectors.base import CollectorContext, available, create
from collectors.rocprof.rejects import Rejects
from collectors.rocprof.replay import load_paths
from collectors.rocprof.runner import find_outputs, rocprofv3_available, rocprofv3_command
from exporter import schema
from exporter.bus import BusConfig
from exporter.capture import _env, derived_metrics
from exporter.pipeline import Pipeline
from exporter.sinks.bundle import BundleSink, finish, write_json
from stream_analytics.consumer import AnalyticsConsumer


def descendants(pid: int, proc: Path = Path("/proc")) -> set[int]:
    """``pid`` and every process below it (``/proc/<pid>/task/*/children``)."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p in out:
            continue
        out.add(p)
        for task in (proc / str(p) / "task").glob("*/children"):
            with contextlib.suppress(OSError, ValueError):
                todo += [int(c) for c in task.read_text().split()]
    return out


async def capture_command(cmd: Sequence[str], out_parent: Path, bus_cfg: BusConfig,
                          rocprofv3: str = "rocprofv3",
                          sched_interval_s: float = 0.2) -> tuple[Path, dict[str, Any], int]:
    """Run ``cmd``; returns the session dir, derived metrics and its exit status.

    Raises ``FileNotFoundError`` when the command cannot be started.
    """
    host = socket.gethostname()
    session = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    out = out_parent / f"{session}_{schema.sanitize_token(Path(cmd[0]).name)}"
    prof_dir = out / "rocprof"
    prof_dir.mkdir(parents=True, exist_ok=True)
    use_rocprof = rocprofv3_available(rocprofv3)
    argv = rocprofv3_command(prof_dir, cmd, rocprofv3=rocprofv3) if use_rocprof else list(cmd)
    pipe = Pipeline(host, bus_cfg, session=session)
    pids: set[int] = set()
    sched = create("sched" if "sched" in available() else "proc",
                   CollectorContext(host, pids, {"interval_s": sched_interval_s}))
    pipe.add(sched)
    rejects = Rejects()
    try:
        bus = await pipe.open()
        sink = BundleSink(bus, session)
        await sink.start()
        consumer = AnalyticsConsumer(bus, durable=f"capture-{session}", window_s=None,
                                     checkpoint=False, session=schema.sanitize_token(session))
        await consumer.start()
        child = await asyncio.create_subprocess_exec(*argv)
        pids.add(child.pid)
        await pipe.collect_once(sched)  # prime
        while child.returncode is None:
            pids.update(descendants(child.pid))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(child.wait(), sched_interval_s)
            await pipe.collect_once(sched)
            await consumer.step(timeout=0.01)
        rc = child.returncode
        for emit in load_paths(find_outputs(prof_dir), rejects):
            await bus.publish_table(emit.signal, emit.batch, emit.key)
        await consumer.drain()
        await sink.drain()
    finally:
        await pipe.close()
    counts = sink.write(out)
    last: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in sink.table("analytics_result").to_pylist():
        last[(r["host"], r["pid"], r["model"])] = r
    keys = sorted(last.values(), key=lambda r: -int(r["kernel_spans_total"]))
    derived = derived_metrics(keys[0]) if keys else derived_metrics({})
    write_json(out / "metrics/derived_metrics.json", derived)
    derived["bottleneck"] = finish(out, sink, keys[0] if keys else None).get("class")
    write_json(out / "rejects.json", {"dropped": rejects.counts, "notes": rejects.notes,
                                      "examples": rejects.examples})
    write_json(out / "env.json", _env())
    write_json(out / "session.json", {
        "session_id": session, "host": host, "kind": "command", "command": list(cmd),
        "argv": argv, "rocprofv3": use_rocprof, "exit_status": rc,
        "schema_version": schema.SCHEMA_VERSION, "nats": bus_cfg.url or "embedded",
        "rows": counts,
        "drops": dict(consumer.drops + consumer.engine.drops + sink.drops + pipe.drops),
    })
    return out, derived, int(rc if rc is not None else -1)
