"""Benchmark: the whole ``aaco-exporter replay`` command vs one OTel SDK span per kernel.

Issue 14: replay of a 2M-row rocprofv3 kernel trace took 159 s and 7.1 GB peak
RSS, most of it building the Perfetto trace in memory. This measures the
**whole command** as a subprocess (interpreter start, embedded nats-server,
parse, bus, analytics, Parquet bundle, ``trace.pftrace``):

* input: ``<tmp>/4242/replay_<rows>_tiled_from_real_synthetic_kernel_trace.csv``,
  the real rocprofv3 fixture rows (``collectors/rocprof/testdata/kernel_trace.csv``,
  see PROVENANCE.md there) tiled with time-shifted copies and unique ids
  (``bench_rocprof.make_file``), written at run time into a temp dir;
* ``aaco-exporter replay <dir> --out <tmp> --quiet`` (``python -c 'from
  exporter.cli import main; main()'``): **wall** clock around the subprocess;
  **CPU** = user + system of the command and everything it started (the
  nats-server), from ``os.wait4`` on the command (its rusage, waited children
  included); **peak RSS** of the replay process (that rusage's ``ru_maxrss``:
  the largest of the command and its children, the Python process) and of the
  whole process tree (psutil, sampled every 20 ms: Python + nats-server); the
  phase timings the command records in
  ``session.json`` (``timings_s``); kernel slices in the bundle's
  ``trace.pftrace`` counted by parsing it with perfetto's ``Trace`` proto
  (asserted equal to the input rows) at the 2M size;
* **baseline** (same run): ``csv.DictReader`` -> one OpenTelemetry SDK span per
  row (``BatchSpanProcessor``, queue as large as the input) ->
  ``OTLPSpanExporter`` over gRPC to a real OTLP/gRPC receiver child counting
  spans, on ``--baseline-rows`` rows (``bench_rocprof.bench_otel_real``);
  spans/s = spans / wall until the receiver has them all.

Goals (issue 14): whole command >= 50x the baseline's spans/s at 2M rows; peak
RSS <= 1 GiB at 2M and 10M rows. Both are printed as met or not.

Usage: ``python benchmarks/bench_replay.py [--rows 2000000] [--big-rows 10000000]
[--baseline-rows 50000] [--no-big] [--no-parse-trace] [--json F]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contextlib

from bench_rocprof import E2E_PID, bench_otel_real, make_file
from benchcommon import ROOT

GIB = 1 << 30
GOAL_RATIO = 50.0


@dataclass
class Run:
    """One ``replay`` subprocess run."""

    rows: int
    wall_s: float
    cpu_s: float
    peak_rss_bytes: int  # the largest process (ru_maxrss of the children)
    tree_peak_rss_bytes: int  # sampled sum over the process tree
    timings_s: dict[str, float] = field(default_factory=dict)
    trace_bytes: int = 0
    kernel_slices: int | None = None

    @property
    def spans_per_s(self) -> float:
        return self.rows / self.wall_s


def _tree_rss(pid: int) -> int:
    import psutil

    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for q in procs:
        with contextlib.suppress(psutil.Error):
            total += q.memory_info().rss
    return total


def count_kernel_slices(trace: Path) -> int:
    """Kernel slice begins in a ``.pftrace``, read with perfetto's ``Trace`` proto
    (concatenated ``Trace`` messages parse as one; names are interned)."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    t = Trace.FromString(trace.read_bytes())
    cats: dict[int, str] = {}
    n = 0
    for p in t.packet:
        cats |= {c.iid: c.name for c in p.interned_data.event_categories}
        ev = p.track_event
        if p.HasField("track_event") and ev.type == TrackEvent.TYPE_SLICE_BEGIN:
            names = list(ev.categories) + [cats[i] for i in ev.category_iids]
            n += names == ["kernel"]
    return n


def run_replay(input_dir: Path, out: Path, rows: int, parse_trace: bool) -> Run:
    """Run the whole ``aaco-exporter replay`` command once and measure it."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-c", "from exporter.cli import main; main()", "replay",
           str(input_dir), "--out", str(out), "--quiet"]
    peak = [0]
    log_out, log_err = out.with_suffix(".stdout"), out.with_suffix(".stderr")
    t0 = time.perf_counter()
    with log_out.open("w") as fo, log_err.open("w") as fe:
        proc = subprocess.Popen(cmd, env=env, stdout=fo, stderr=fe)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss(proc.pid))
            time.sleep(0.02)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    # wait4: this child's own rusage (CPU and ru_maxrss, its waited children included)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    th.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    stdout, stderr = log_out.read_text(), log_err.read_text()
    if proc.returncode != 0:
        tb = stderr.find("Traceback")
        raise RuntimeError(f"replay exited {proc.returncode}: "
                           f"{stderr[max(tb, 0):][:3000]} ... {stderr[-1500:]}")
    bundle = Path(stdout.strip().splitlines()[-1])
    session = json.loads((bundle / "session.json").read_text())
    got = session["rows"]["kernel_span"]
    print(f"  rows in the bundle {got:,} of {rows:,}; drops {session['drops']}; "
          f"timings {session.get('timings_s')}; wall {wall:.1f} s; "
          f"peak RSS by getrusage in the command {session.get('peak_rss_bytes')}; "
          f"ru_maxrss {ru.ru_maxrss / 1024:.0f} MiB; tree peak {peak[0] / 2**20:.0f} MiB",
          flush=True)
    assert got == rows, session["rows"]
    cpu = ru.ru_utime + ru.ru_stime
    trace = bundle / "trace.pftrace"
    r = Run(rows, wall, cpu, ru.ru_maxrss * 1024, peak[0], session.get("timings_s", {}),
            trace.stat().st_size)
    if parse_trace:
        r.kernel_slices = count_kernel_slices(trace)
        assert r.kernel_slices == rows, f"trace has {r.kernel_slices} kernel slices != {rows}"
    return r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--big-rows", type=int, default=10_000_000)
    ap.add_argument("--baseline-rows", type=int, default=50_000)
    ap.add_argument("--no-big", action="store_true", help="skip the --big-rows run")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--no-parse-trace", action="store_true",
                    help="skip parsing the first run's trace.pftrace back")
    a = ap.parse_args()

    def say(msg: str) -> None:
        print(msg, flush=True)

    sizes = [a.rows] + ([] if a.no_big else [a.big_rows])
    runs: list[Run] = []
    with tempfile.TemporaryDirectory() as d:
        for rows in sizes:
            src = Path(d) / f"in_{rows}" / str(E2E_PID)
            src.mkdir(parents=True)
            p = src / f"replay_{rows}_tiled_from_real_synthetic_kernel_trace.csv"
            t = time.perf_counter()
            make_file(p, rows)
            say(f"input: {rows:,} rows, {p.stat().st_size / 1e6:.0f} MB, real rocprofv3 rows "
                f"tiled with time-shifted copies ({time.perf_counter() - t:.1f} s)")
            if rows == sizes[0]:
                say(f"baseline: OTel SDK span per row + OTLP/gRPC to a receiver, "
                    f"{a.baseline_rows:,} rows ...")
                base = bench_otel_real(p, a.baseline_rows)
                say(f"  baseline: {base.spans:,} spans in {base.wall_s:.2f} s = "
                    f"{base.spans_per_s:,.0f} spans/s")
            say(f"replay {rows:,} rows ...")
            parse = rows == sizes[0] and not a.no_parse_trace
            r = run_replay(src, Path(d) / f"out_{rows}", rows, parse_trace=parse)
            runs.append(r)
            p.unlink()
    say("")
    say(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
    say(f"baseline (OTel SDK span + OTLP/gRPC, receiver): {base.spans:,} spans in "
        f"{base.wall_s:.2f} s wall = {base.spans_per_s:,.0f} spans/s")
    hdr = (f"{'rows':>11} {'wall s':>8} {'cpu s':>8} {'spans/s':>11} {'x otel':>7} "
           f"{'peak RSS MiB':>12} {'tree MiB':>9} {'trace MB':>9}  phases (s)")
    say(hdr)
    for r in runs:
        rss = f"{r.peak_rss_bytes / 2**20:12.0f}" if r.peak_rss_bytes > 0 else f"{'n/a':>12}"
        ph = ", ".join(f"{k} {v:.1f}" for k, v in r.timings_s.items())
        say(f"{r.rows:>11,} {r.wall_s:8.1f} {r.cpu_s:8.1f} {r.spans_per_s:11,.0f} "
            f"{r.spans_per_s / base.spans_per_s:7.1f} {rss} "
            f"{r.tree_peak_rss_bytes / 2**20:9.0f} {r.trace_bytes / 1e6:9.0f}  {ph}")
    first = runs[0]
    ratio = first.spans_per_s / base.spans_per_s
    say(f"goal: >= {GOAL_RATIO:.0f}x the baseline's spans/s at {first.rows:,} rows: "
        f"{ratio:.1f}x, {'met' if ratio >= GOAL_RATIO else 'NOT met'}")
    for r in runs:
        if r.peak_rss_bytes > 0:
            ok = r.peak_rss_bytes <= GIB
            say(f"goal: peak RSS <= 1 GiB at {r.rows:,} rows: "
                f"{r.peak_rss_bytes / 2**20:.0f} MiB (Python process), "
                f"{r.tree_peak_rss_bytes / 2**20:.0f} MiB (with nats-server), "
                f"{'met' if ok else 'NOT met'}")
    if first.kernel_slices is not None:
        say(f"check: trace.pftrace at {first.rows:,} rows has {first.kernel_slices:,} kernel "
            f"slices (parsed with perfetto's Trace proto)")
    if a.json:
        out: dict[str, Any] = {"baseline": base.as_dict(),
                               "runs": [r.__dict__ | {"spans_per_s": r.spans_per_s}
                                        for r in runs]}
        a.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
