"""Run ``aaco-exporter run`` with CPU accounting per function (for
``daemon_cpu_by_function.py``; not a user command).

Usage::

    python benchmarks/daemon_fn_runner.py REPORT.json WARMUP_S SECONDS -- run ARGS...

Each function of :data:`TARGETS` (``module:qualname``; synchronous ones
only, the ones that are missing are listed as ``skipped``) is wrapped so
that every call adds the CPU time of the thread that made it
(``time.thread_time()``, i.e. ``CLOCK_THREAD_CPUTIME_ID``) to its total:
inclusive times, so a function and its callee both count the callee's time.
Python's cyclic garbage collections are counted apart, per generation
(``gc (generation N)``, from ``gc.callbacks``), in whichever function
triggered them.
``WARMUP_S`` seconds after start-up the totals are zeroed; ``SECONDS``
later they are written to ``REPORT.json`` as ``{"functions": {name:
{"ms_per_s", "calls_per_s", "ms_per_call"}}, "threads": {name: cpu % of one
core}, "process_pct": ..., "skipped": [...]}``, where the per-thread figures
come from ``/proc/self/task/*/stat`` (utime + stime, clock ticks) over the
same window. The daemon goes on running until the caller stops it.

Wrapping costs two ``thread_time()`` calls (about 1 us together) a call: the
accounting is exact for functions called a few times a second, and adds
nothing a sampling profiler's bias would (a sampler overweights
Python-heavy code several times over in this daemon).
"""

from __future__ import annotations

import functools
import gc
import importlib
import inspect
import json
import os
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

TARGETS = (
    "collectors.gpu:GpuCollector.collect",
    "collectors.gpu.rocm_smi:parse_rocm_smi",
    "collectors.gpu.rows:TableCache.build",
    "collectors.discovery:DiscoveryCollector.collect",
    "collectors.sched:SchedCollector.collect",
    "stream_analytics.consumer:AnalyticsConsumer._fold",
    "stream_analytics.verdicts:OnlineVerdicts.ingest_gauges",
    "stream_analytics.bottleneck:gauge_parts_split",
    "stream_analytics.drift:DriftMonitor.update_gauges",
    "stream_analytics.engine:Analytics.ingest",
    "stream_analytics.verdicts:OnlineVerdicts.update",
    "stream_analytics.bottleneck:features_from_parts",
    "stream_analytics.engine:Analytics.results",
    "exporter.sinks.prometheus:PromState.ingest",
    "exporter.schema:decode",
    "exporter.schema:encode_chunks",
    "exporter.fleet:split_by_host",
    "exporter.publish_buffer:PublishBuffer.take",
)
"""What is accounted: the collectors' polls, the analytics fold and flush,
the Prometheus sink and the bus codec (see benchmarks/README.md)."""

_cpu: defaultdict[str, float] = defaultdict(float)
_calls: Counter[str] = Counter()
_lock = threading.Lock()  # the executor threads and the event loop call some targets both


def _wrap(spec: str) -> bool:
    """Wrap ``spec`` in place (and where a module imported it by name);
    False when it is absent or a coroutine function."""
    mod_name, _, attr = spec.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError:
        return False
    owner: Any = mod
    name = attr
    if "." in attr:
        cls, name = attr.split(".", 1)
        owner = getattr(mod, cls, None)
    fn = getattr(owner, name, None) if owner is not None else None
    if fn is None or inspect.iscoroutinefunction(fn):
        return False

    @functools.wraps(fn)
    def timed(*a: Any, **k: Any) -> Any:
        t0 = time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            spent = time.thread_time() - t0
            with _lock:
                _cpu[spec] += spent
                _calls[spec] += 1

    setattr(owner, name, timed)
    if owner is mod:  # `from module import fn` elsewhere
        for other in list(sys.modules.values()):
            if other is not None and getattr(other, name, None) is fn:
                setattr(other, name, timed)
    return True


_gc_t0: dict[int, float] = {}


def _on_gc(phase: str, info: dict[str, int]) -> None:
    """``gc.callbacks`` hook: the thread CPU of each collection, counted as
    ``gc (generation N)`` (the thread that allocated runs it)."""
    tid = threading.get_ident()
    if phase == "start":
        _gc_t0[tid] = time.thread_time()
        return
    t0 = _gc_t0.pop(tid, None)
    if t0 is not None:
        spec = f"gc (generation {info['generation']})"
        spent = time.thread_time() - t0
        with _lock:
            _cpu[spec] += spent
            _calls[spec] += 1


def _thread_ticks() -> dict[str, int]:
    """utime + stime (clock ticks) of each thread of this process, by tid and name."""
    out: dict[str, int] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            comm = (task / "comm").read_text().strip()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        out[f"{task.name} {comm}"] = int(fields[11]) + int(fields[12])
    return out


def _report(path: Path, warmup_s: float, seconds: float) -> None:
    time.sleep(warmup_s)
    with _lock:
        _cpu.clear()
        _calls.clear()
    ticks0, proc0, w0 = _thread_ticks(), time.process_time(), time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - w0
    ticks1, proc1 = _thread_ticks(), time.process_time()
    with _lock:
        cpu, calls = dict(_cpu), Counter(_calls)
    hz = os.sysconf("SC_CLK_TCK")
    report = {
        "seconds": wall,
        "process_pct": 100.0 * (proc1 - proc0) / wall,
        "threads": {k: 100.0 * (v - ticks0.get(k, 0)) / hz / wall for k, v in ticks1.items()},
        "functions": {k: {"ms_per_s": 1e3 * v / wall, "calls_per_s": calls[k] / wall,
                          "ms_per_call": 1e3 * v / max(calls[k], 1)}
                      for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])},
        "skipped": SKIPPED,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1))
    tmp.replace(path)


SKIPPED: list[str] = []


def main() -> None:
    report, warmup, seconds, sep, *run_args = sys.argv[1:]
    assert sep == "--", "usage: REPORT WARMUP_S SECONDS -- run ARGS..."
    import exporter.cli  # the modules the targets live in, imported as run would
    import exporter.daemon  # noqa: F401

    SKIPPED.extend(t for t in TARGETS if not _wrap(t))
    gc.callbacks.append(_on_gc)
    threading.Thread(target=_report, args=(Path(report), float(warmup), float(seconds)),
                     name="aaco-fn-report", daemon=True).start()
    sys.argv = ["aaco-exporter", *run_args]
    from exporter.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
