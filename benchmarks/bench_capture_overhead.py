"""The capture's overhead on inference latency, against the same model without it.

* **plain** (A): the ``magika`` model under plain ONNX Runtime, same session
  options, execution provider and generated inputs as the ORT collector, no
  profiling, no exporter: ``warmup`` untimed runs, then ``--iterations``
  runs, each timed with ``time.perf_counter_ns`` around ``session.run``.
* **capture** (B): the same number of runs through
  ``exporter.capture.capture(CaptureOptions(model="magika", iterations=N,
  progress=False), BusConfig())``: ORT profiling on, embedded nats-server,
  the proc collector, the analytics consumer and the bundle sink all running
  in the same process. Latency is read two ways:

  - ``ort``: ``duration_ns`` of ``metrics/inference_iters.parquet``, ORT's
    own ``model_run`` profiler events (what the capture reports);
  - ``wall``: ``time.perf_counter_ns`` around each ``InferenceSession.run``
    call inside the capture (the same measurement as the plain side), matched
    to the measured runs by time so warm-up runs are excluded.

* **profiler only** (C, for attribution): A with ORT's profiler turned on and
  nothing else (no bus, no analytics, no other collector).

A, B and C alternate (A B C A B C ...) ``--repeats`` times to spread the noise
of a shared machine over all of them. Ratios are capture / plain (and
profiler-only / plain) per repeat; the report gives their mean, median and
spread (min..max over repeats) for the mean and the p50 latency.

Usage::

    python benchmarks/bench_capture_overhead.py [--iterations 300] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import onnxruntime as ort
import pyarrow.parquet as pq

# benchmarks/ is not a package; benchcommon also puts the repository root on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchcommon import machine_busy_s

from collectors.ort import best_providers, resolve_model
from collectors.ort.inputs import make_inputs
from exporter.bus import BusConfig
from exporter.capture import CaptureOptions, capture

RESULTS = Path(__file__).resolve().parent / "results"
MODEL = "magika"
Arr = np.ndarray[Any, Any]


def own_cpu_s() -> float:
    """CPU seconds of this process and its reaped children (the nats-server)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


T = TypeVar("T")


def others_cores(fn: Callable[[], T]) -> tuple[T, float]:
    """``fn()`` and how many cores other processes kept busy meanwhile."""
    b0, o0, w0 = machine_busy_s(), own_cpu_s(), time.perf_counter()
    out = fn()
    wall = time.perf_counter() - w0
    others = (machine_busy_s() - b0) - (own_cpu_s() - o0)
    return out, max(0.0, others) / wall


@dataclass
class Stats:
    n: int
    mean_ms: float
    p50_ms: float
    p99_ms: float

    @classmethod
    def of(cls, ns: Arr) -> Stats:
        ms = ns.astype(np.float64) / 1e6
        return cls(len(ms), float(ms.mean()), float(np.percentile(ms, 50)),
                   float(np.percentile(ms, 99)))


def plain(iterations: int, warmup: int, profiling: bool = False) -> Arr:
    """Per-run latency (ns) of the model under plain ONNX Runtime.

    ``profiling=True`` turns on ORT's own profiler (and nothing else), to
    show how much of the capture's overhead is the profiler itself.
    """
    so = ort.SessionOptions()
    so.intra_op_num_threads = 0  # as the ORT collector's default
    with tempfile.TemporaryDirectory(prefix="aaco-bench-prof-") as d:
        if profiling:
            so.enable_profiling = True
            so.profile_file_prefix = str(Path(d) / "ort_profile")
        sess = ort.InferenceSession(str(resolve_model(MODEL)), so, providers=best_providers())
        feed = make_inputs(sess.get_inputs(), None, None)
        for _ in range(warmup):
            sess.run(None, feed)
        out = np.empty(iterations, np.int64)
        for i in range(iterations):
            t0 = time.perf_counter_ns()
            sess.run(None, feed)
            out[i] = time.perf_counter_ns() - t0
        if profiling:
            sess.end_profiling()
    return out


class RunTimer:
    """Wraps ``InferenceSession.run`` to time every call (wall clock)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []  # (realtime start, realtime end, perf ns)
        self._orig: Callable[..., Any] | None = None

    def __enter__(self) -> RunTimer:
        orig = self._orig = ort.InferenceSession.run
        calls = self.calls

        def timed(sess: ort.InferenceSession, *args: Any, **kwargs: Any) -> Any:
            r0, t0 = time.time_ns(), time.perf_counter_ns()
            try:
                return orig(sess, *args, **kwargs)
            finally:
                t1 = time.perf_counter_ns()
                calls.append((r0, r0 + (t1 - t0), t1 - t0))

        ort.InferenceSession.run = timed
        return self

    def __exit__(self, *exc: object) -> None:
        ort.InferenceSession.run = self._orig

    def match(self, start_ns: Arr, end_ns: Arr) -> Arr:
        """Wall duration of the call around each ORT ``model_run`` span."""
        calls = sorted(self.calls)
        c0 = np.array([c[0] for c in calls], np.int64)
        c1 = np.array([c[1] for c in calls], np.int64)
        dur = np.array([c[2] for c in calls], np.int64)
        mid = (start_ns + end_ns) // 2
        idx = np.searchsorted(c0, mid, side="right") - 1
        ok = (idx >= 0) & (mid <= c1[np.clip(idx, 0, None)] + 1_000_000)  # 1 ms clock slack
        if not ok.all() or len(np.unique(idx)) != len(idx):
            raise RuntimeError(f"matched {int(ok.sum())} of {len(idx)} runs to run() calls")
        out: Arr = dur[idx]
        return out


def captured(iterations: int, tmp: Path) -> tuple[Arr, Arr, float]:
    """(ORT model_run ns, wall ns per run, capture wall s) of one capture."""
    opts = CaptureOptions(model=MODEL, iterations=iterations, progress=False, out=tmp)
    t0 = time.perf_counter()
    with RunTimer() as timer:
        out, _ = asyncio.run(capture(opts, BusConfig()))
    total = time.perf_counter() - t0
    it = pq.read_table(out / "metrics/inference_iters.parquet")
    ort_ns = it.column("duration_ns").to_numpy()
    wall_ns = timer.match(it.column("start_ns").to_numpy(), it.column("end_ns").to_numpy())
    if len(ort_ns) != iterations:
        raise RuntimeError(f"capture recorded {len(ort_ns)} runs, expected {iterations}")
    return ort_ns, wall_ns, total


def spread(xs: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(xs), "median": statistics.median(xs),
            "min": min(xs), "max": max(xs),
            "stdev": statistics.stdev(xs) if len(xs) > 1 else 0.0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--iterations", type=int, default=300, help="measured runs per side")
    ap.add_argument("--repeats", type=int, default=5, help="A-B pairs")
    ap.add_argument("--json", type=Path, default=RESULTS / "bench_capture_overhead.json")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    warmup = CaptureOptions(model=MODEL).warmup

    def say(msg: str) -> None:
        print(msg, flush=True)

    pairs: list[dict[str, Stats]] = []
    loads: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="aaco-bench-") as d:
        for r in range(a.repeats):
            pn, load_p = others_cores(lambda: plain(a.iterations, warmup))
            (o, w, total), load_c = others_cores(
                lambda: captured(a.iterations, Path(d) / f"r{r}"))  # noqa: B023
            prn, load_f = others_cores(lambda: plain(a.iterations, warmup, profiling=True))
            p, prof = Stats.of(pn), Stats.of(prn)
            loads.append({"plain": load_p, "capture": load_c, "profiling_only": load_f})
            pair = {"plain": p, "capture_ort": Stats.of(o), "capture_wall": Stats.of(w),
                    "profiling_only": prof}
            pairs.append(pair)
            say(f"repeat {r + 1}/{a.repeats}: plain mean {p.mean_ms:.3f} p50 {p.p50_ms:.3f} ms | "
                f"ORT profiler only mean {prof.mean_ms:.3f} p50 {prof.p50_ms:.3f} ms | "
                f"capture ort mean {pair['capture_ort'].mean_ms:.3f} "
                f"p50 {pair['capture_ort'].p50_ms:.3f} ms, wall mean "
                f"{pair['capture_wall'].mean_ms:.3f} p50 {pair['capture_wall'].p50_ms:.3f} ms "
                f"(capture took {total:.1f} s) | other processes' cores busy: plain "
                f"{load_p:.2f}, capture {load_c:.2f}, profiler {load_f:.2f}")

    ratios: dict[str, dict[str, float]] = {}
    for side in ("capture_ort", "capture_wall", "profiling_only"):
        for stat in ("mean", "p50"):
            xs = [getattr(pp[side], f"{stat}_ms") / getattr(pp["plain"], f"{stat}_ms")
                  for pp in pairs]
            ratios[f"{side}/{stat}"] = spread(xs)
    # Noise on a shared machine only ever adds latency: the best repeat of
    # each side is the least disturbed estimate of it.
    best = {side: {stat: min(getattr(pp[side], f"{stat}_ms") for pp in pairs)
                   for stat in ("mean", "p50")} for side in pairs[0]}
    best_ratio = {f"{side}/{stat}": best[side][stat] / best["plain"][stat]
                  for side in ("capture_ort", "capture_wall", "profiling_only")
                  for stat in ("mean", "p50")}
    say("")
    say(f"{MODEL} on {best_providers()[0]}, {a.iterations} runs per side, {a.repeats} repeats; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} "
        "(other processes may be running)")
    hdr = f"{'latency':<25}{'mean ms':>10}{'p50 ms':>10}{'p99 ms':>10}"
    say(hdr)
    say("-" * len(hdr))
    for side, label in (("plain", "plain ORT (wall)"), ("capture_ort", "capture (ORT model_run)"),
                        ("capture_wall", "capture (wall)"),
                        ("profiling_only", "ORT profiler only (wall)")):
        m = statistics.fmean(pp[side].mean_ms for pp in pairs)
        p50 = statistics.fmean(pp[side].p50_ms for pp in pairs)
        p99 = statistics.fmean(pp[side].p99_ms for pp in pairs)
        say(f"{label:<25}{m:>10.3f}{p50:>10.3f}{p99:>10.3f}")
    say("")
    say("ratio to plain: per-repeat mean, median [min..max]; best repeat / best repeat")
    for key, s in ratios.items():
        side, stat = key.split("/")
        say(f"  {side:<15} {stat:<5} {s['mean']:.3f}  {s['median']:.3f}  "
            f"[{s['min']:.3f}..{s['max']:.3f}]  best {best_ratio[key]:.3f}")
    out = {
        "benchmark": "bench_capture_overhead",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "loadavg_end": os.getloadavg(),
                    "onnxruntime": ort.__version__, "provider": best_providers()[0]},
        "model": MODEL, "iterations": a.iterations, "repeats": a.repeats, "warmup": warmup,
        "repeats_detail": [{**{k: vars(v) for k, v in pp.items()},
                            "other_processes_cores": ld} for pp, ld in zip(pairs, loads,
                                                                           strict=True)],
        "ratios": ratios,
        "best_ms": best,
        "best_ratios": best_ratio,
    }
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(out, indent=2) + "\n")
    say(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
