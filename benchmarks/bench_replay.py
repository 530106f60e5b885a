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
  included); **peak RSS per process**: each process's own high-water mark
  (``VmHWM`` in ``/proc/<pid>/status``, read every 20 ms while it lives; the
  kernel keeps the maximum, so a spike between two reads is not missed) for
  the replay (Python) process and for nats-server separately, the Python
  process's also as it wrote it into ``session.json`` (its VmHWM at the end);
  for comparison ``wait4``'s ``ru_maxrss`` and the process tree's summed RSS
  sampled every 20 ms (``/proc/<pid>/status`` of the processes psutil found
  in the tree, listed every 0.5 s: listing them every 20 ms took a quarter of
  a core from the replay it measured, until 2026-11-28).
  ``ru_maxrss`` is **not** the command's peak:
  a process started with ``vfork`` + ``exec`` (``subprocess``) begins with
  its parent's peak as its own ``ru_maxrss``, so every replay this script
  started after parsing a 2M-slice trace (which took this script to about
  3.1 GiB; the trace is now parsed in a child process) "peaked" at 3.1 GiB
  whatever it used (the 3,142 MiB once reported for 10M rows), and the
  children's (``uname -p``, which ``platform.platform()`` runs) count too; the
  phase timings the command records in
  ``session.json`` (``timings_s``); kernel slices in the bundle's
  ``trace.pftrace`` counted by parsing it with perfetto's ``Trace`` proto
  (asserted equal to the input rows) at the 2M size; the 1-minute load
  average before and after each run (the machine may be shared);
* ``--baseline-ref REF``: the same command of git revision REF (``git archive``
  into the temp dir, same interpreter) on the same input, next to this
  tree's run of each size, so before/after compare within one run (both
  trees byte-compiled first, so neither run pays for compiling); the two
  take turns at running first in each repetition (until 2026-11-29 the
  reference always ran first, right after the baseline, and an A/A run of
  one tree read 1.08x faster and 1.11x less CPU for the second run: every
  "vs ref" figure measured before then is biased by that much);
* **baseline** (same run): ``csv.DictReader`` -> one OpenTelemetry SDK span per
  row (``BatchSpanProcessor``, queue as large as the input) ->
  ``OTLPSpanExporter`` over gRPC to a real OTLP/gRPC receiver child counting
  spans, on ``--baseline-rows`` rows (``bench_rocprof.bench_otel_real``);
  spans/s = spans / wall until the receiver has them all. Measured again
  before each repetition (``--repeat``) on the first input, and each run's
  ratio (``x otel``) is taken against the baseline of its own repetition: a
  shared VM's speed drifts by tens of percent within minutes, and a baseline
  measured once at the start made the ratio drift with it.

Goals (issue 14): whole command >= 50x the baseline's spans/s at 2M rows (the
median of this tree's per-run ratios); peak
RSS <= 1 GiB at 2M and 10M rows. Both are printed as met or not.

Usage: ``python benchmarks/bench_replay.py [--rows 2000000] [--big-rows 10000000]
[--baseline-rows 50000] [--no-big] [--no-parse-trace] [--baseline-ref REF] [--json F]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
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
    peak_rss_bytes: int  # the replay (Python) process's own peak: its VmHWM
    tree_peak_rss_bytes: int  # sampled sum over the process tree
    wait4_maxrss_bytes: int = 0  # wait4's ru_maxrss: max over the command and its children
    children_peak_rss_bytes: dict[str, int] = field(default_factory=dict)  # name -> VmHWM
    timings_s: dict[str, float] = field(default_factory=dict)
    trace_bytes: int = 0
    kernel_slices: int | None = None
    code: str = "this tree"
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average before, after
    base_spans_per_s: float = 0.0  # the OTel baseline of this run's repetition
    first: bool = True  # the first replay after the baseline (see --baseline-ref)

    @property
    def nats_peak_rss_bytes(self) -> int:
        return self.children_peak_rss_bytes.get("nats-server", 0)

    @property
    def spans_per_s(self) -> float:
        return self.rows / self.wall_s


SCAN_CHILDREN_S = 0.5
"""How often the replay's child processes (nats-server) are listed while it runs."""


def _status(pid: int) -> tuple[str, int, int] | None:
    """``(name, VmHWM bytes, VmRSS bytes)`` of a live process from one read of
    ``/proc/<pid>/status``: its own peak resident set so far (the kernel's
    high-water mark, so a spike between two samples is not missed) and its
    resident set now; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    name, hwm, rss = "?", 0, 0
    for line in text.splitlines():
        if line.startswith("Name:"):
            name = line.split(None, 1)[1].strip()
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) * 1024
        elif line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    return name, hwm, rss


def _hwm(pid: int) -> tuple[str, int] | None:
    """``(name, VmHWM bytes)`` of a live process (:func:`_status`), or None once it is gone."""
    got = _status(pid)
    return None if got is None else got[:2]


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


def run_replay(input_dir: Path, out: Path, rows: int, parse_trace: bool,
               root: Path = ROOT) -> Run:
    """Run the whole ``aaco-exporter replay`` command of the tree ``root`` once
    and measure it."""
    env = dict(os.environ, PYTHONPATH=str(root))
    cmd = [sys.executable, "-c", "from exporter.cli import main; main()", "replay",
           str(input_dir), "--out", str(out), "--quiet"]
    peak = [0]
    hwm: dict[int, tuple[str, int]] = {}  # pid -> (name, VmHWM) of every process seen
    log_out, log_err = out.with_suffix(".stdout"), out.with_suffix(".stderr")
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    with log_out.open("w") as fo, log_err.open("w") as fe:
        # cwd: ``python -c`` puts the working directory first on sys.path, so
        # it must be the tree measured (a --baseline-ref run started from this
        # checkout would import this checkout's code)
        proc = subprocess.Popen(cmd, env=env, stdout=fo, stderr=fe, cwd=root)
    import psutil

    kids: list[int] = []
    next_scan = [0.0]

    def sample() -> None:
        # cheap reads only: psutil's children() scans every process on the
        # machine (5.5 ms of CPU per call here: at 50 Hz a quarter of a core,
        # taken from the replay it measures), so the children are listed
        # every SCAN_CHILDREN_S and the known pids' status files read each time
        now = time.monotonic()
        if now >= next_scan[0]:
            next_scan[0] = now + SCAN_CHILDREN_S
            try:
                kids[:] = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
            except psutil.Error:
                kids.clear()
        tree = 0
        for pid in (proc.pid, *kids):
            got = _status(pid)
            if got is not None:
                name, high, rss = got
                hwm[pid] = (name, max(high, hwm.get(pid, (name, 0))[1]))
                tree += rss
        peak[0] = max(peak[0], tree)

    # wait4: this child's rusage, its waited-for children included: CPU adds up,
    # but ru_maxrss is not the command's own peak (see the module doc)
    status, ru = wait_sampling(proc, sample)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    stdout, stderr = log_out.read_text(), log_err.read_text()
    if proc.returncode != 0:
        tb = stderr.find("Traceback")
        raise RuntimeError(f"replay exited {proc.returncode}: "
                           f"{stderr[max(tb, 0):][:3000]} ... {stderr[-1500:]}")
    bundle = Path(stdout.strip().splitlines()[-1])
    session = json.loads((bundle / "session.json").read_text())
    got = session["rows"]["kernel_span"]
    # the command's own VmHWM: sampled, and (this code) from session.json, read
    # there from /proc/self/status; older code wrote getrusage there, which
    # starts at this benchmark's own peak (see the module doc), so it is not used
    own = hwm.get(proc.pid, ("", 0))[1]
    if "nats_server" in session["peak_rss_bytes"]:
        own = max(own, session["peak_rss_bytes"]["self"])
    kids: dict[str, int] = {}
    for pid, (name, b) in hwm.items():
        if pid != proc.pid:
            kids[name] = max(kids.get(name, 0), b)
    print(f"  rows in the bundle {got:,} of {rows:,}; drops {session['drops']}; "
          f"timings {session.get('timings_s')}; wall {wall:.1f} s; "
          f"getrusage in the command at session.json {session.get('peak_rss_bytes')}; "
          f"VmHWM: command {own / 2**20:.0f} MiB, children "
          f"{ {k: round(v / 2**20) for k, v in kids.items()} } MiB; wait4 ru_maxrss "
          f"{ru.ru_maxrss / 1024:.0f} MiB; tree peak {peak[0] / 2**20:.0f} MiB", flush=True)
    assert got == rows, session["rows"]
    cpu = ru.ru_utime + ru.ru_stime
    trace = bundle / "trace.pftrace"
    r = Run(rows, wall, cpu, own, peak[0], timings_s=session.get("timings_s", {}),
            trace_bytes=trace.stat().st_size, wait4_maxrss_bytes=ru.ru_maxrss * 1024,
            children_peak_rss_bytes=kids, load=(load0, os.getloadavg()[0]))
    if parse_trace:  # in a child: parsing 2M slices takes about 3.1 GiB (see the module doc)
        code = ("import sys; sys.path.insert(0, sys.argv[1]); from bench_replay import "
                "count_kernel_slices as c; from pathlib import Path; print(c(Path(sys.argv[2])))")
        r.kernel_slices = int(subprocess.run(
            [sys.executable, "-c", code, str(Path(__file__).resolve().parent), str(trace)],
            capture_output=True, text=True, check=True, env=env).stdout)
        assert r.kernel_slices == rows, f"trace has {r.kernel_slices} kernel slices != {rows}"
    return r


def wait_sampling(proc: subprocess.Popen[Any], sample: Any,
                  every_s: float = 0.02) -> tuple[int, Any]:
    """Call ``sample()`` every ``every_s`` in a thread until ``proc`` has
    exited; returns its wait status and rusage (``os.wait4``)."""
    done = threading.Event()

    def loop() -> None:
        while not done.is_set():
            sample()
            time.sleep(every_s)

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    _, status, ru = os.wait4(proc.pid, 0)
    done.set()
    th.join()
    return status, ru


def _checkout(ref: str, tmp: Path) -> Path:
    """``git archive REF`` of this repository extracted into ``tmp/ref``."""
    dest = tmp / "ref"
    dest.mkdir()
    arch = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True,
                          check=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=arch.stdout, check=True)
    return dest


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--big-rows", type=int, default=10_000_000)
    ap.add_argument("--baseline-rows", type=int, default=50_000)
    ap.add_argument("--no-big", action="store_true", help="skip the --big-rows run")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--no-parse-trace", action="store_true",
                    help="skip parsing the first run's trace.pftrace back")
    ap.add_argument("--baseline-ref", default="",
                    help="also run the replay of this git revision on each input")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each tree per input, alternating, the tree that runs "
                         "first taking turns; goals and ratios use the median (a shared "
                         "VM's speed drifts between runs)")
    a = ap.parse_args()

    def say(msg: str) -> None:
        print(msg, flush=True)

    sizes = [a.rows] + ([] if a.no_big else [a.big_rows])
    runs: list[Run] = []
    bases: list[Any] = []  # bench_rocprof.Result of each repetition's OTel baseline
    with tempfile.TemporaryDirectory() as d:
        trees = [("this tree", ROOT)]
        if a.baseline_ref:
            trees.insert(0, (f"ref {a.baseline_ref}", _checkout(a.baseline_ref, Path(d))))
        for _, root in trees:  # byte-compile first: a fresh checkout would compile in its run
            subprocess.run([sys.executable, "-m", "compileall", "-q", "-x", r"/\.", *(
                str(root / pkg) for pkg in ("exporter", "collectors", "stream_analytics"))],
                check=False, stdout=subprocess.DEVNULL)
        for rows in sizes:
            src = Path(d) / f"in_{rows}" / str(E2E_PID)
            src.mkdir(parents=True)
            p = src / f"replay_{rows}_tiled_from_real_synthetic_kernel_trace.csv"
            t = time.perf_counter()
            make_file(p, rows)
            say(f"input: {rows:,} rows, {p.stat().st_size / 1e6:.0f} MB, real rocprofv3 rows "
                f"tiled with time-shifted copies ({time.perf_counter() - t:.1f} s)")
            for k in range(a.repeat):
                if rows == sizes[0]:  # a baseline per repetition, next to its runs
                    say(f"baseline {k + 1} of {a.repeat}: OTel SDK span per row + OTLP/gRPC "
                        f"to a receiver, {a.baseline_rows:,} rows ...")
                    bases.append(bench_otel_real(p, a.baseline_rows))
                    say(f"  baseline: {bases[-1].spans:,} spans in {bases[-1].wall_s:.2f} s = "
                        f"{bases[-1].spans_per_s:,.0f} spans/s")
                base_rate = (bases[k].spans_per_s if rows == sizes[0]
                             else sorted(b.spans_per_s for b in bases)[(len(bases) - 1) // 2])
                # the trees take turns at running first: the first replay after the
                # baseline runs slower (on this VM, memory another process freed seconds
                # before is handed back to the host, and touching it again costs: an A/A
                # run of one tree read "1.08x faster, CPU 1.11x less" for whichever ran second)
                turn = list(enumerate(trees))
                turn = turn if k % 2 == 0 else turn[::-1]
                for i, (code, root) in turn:
                    say(f"replay {rows:,} rows, {code} (run {k + 1} of {a.repeat}) ...")
                    parse = rows == sizes[0] and not a.no_parse_trace and k == 0
                    out = Path(d) / f"out_{rows}_{i}_{k}"
                    r = run_replay(src, out, rows, parse_trace=parse, root=root)
                    r.code = code
                    r.base_spans_per_s = base_rate
                    r.first = i == turn[0][0]  # right after the baseline (or the input)
                    runs.append(r)
                    shutil.rmtree(out, ignore_errors=True)
            p.unlink()
    say("")
    say(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
    rates = [b.spans_per_s for b in bases]
    say(f"baseline (OTel SDK span + OTLP/gRPC, receiver), {bases[0].spans:,} spans, before "
        f"each repetition: {', '.join(f'{x:,.0f}' for x in rates)} spans/s "
        f"(median {sorted(rates)[(len(rates) - 1) // 2]:,.0f}); x otel: against its own")
    say("peak RSS MiB: own VmHWM of the replay process / of nats-server; wait4 ru_maxrss "
        "(not the command's peak: a child starts at this script's own peak); tree: sampled sum")
    hdr = (f"{'code':<14} {'rows':>11} {'wall s':>7} {'cpu s':>7} {'spans/s':>9} "
           f"{'x otel':>6} {'replay':>6} {'nats':>5} {'wait4':>6} {'tree':>5} "
           f"{'trace MB':>8} {'load':>9}  phases (s)")
    say(hdr)
    for r in runs:
        ph = ", ".join(f"{k} {v:.1f}" for k, v in r.timings_s.items())
        say(f"{r.code:<14} {r.rows:>11,} {r.wall_s:7.1f} {r.cpu_s:7.1f} {r.spans_per_s:9,.0f} "
            f"{r.spans_per_s / r.base_spans_per_s:6.1f} {r.peak_rss_bytes / 2**20:6.0f} "
            f"{r.nats_peak_rss_bytes / 2**20:5.0f} {r.wait4_maxrss_bytes / 2**20:6.0f} "
            f"{r.tree_peak_rss_bytes / 2**20:5.0f} {r.trace_bytes / 1e6:8.0f} "
            f"{r.load[0]:4.1f}-{r.load[1]:<4.1f}  {ph}")
    def median(code: str, rows: int) -> Run:
        """The run of ``code`` at ``rows`` with the median wall time."""
        same = sorted((x for x in runs if x.code == code and x.rows == rows),
                      key=lambda x: x.wall_s)
        return same[(len(same) - 1) // 2]

    ratios = sorted(x.spans_per_s / x.base_spans_per_s for x in runs
                    if x.code == "this tree" and x.rows == sizes[0])
    ratio = ratios[(len(ratios) - 1) // 2]
    of = f" (median of {a.repeat}: {', '.join(f'{x:.1f}' for x in ratios)})" \
        if a.repeat > 1 else ""
    say(f"goal: >= {GOAL_RATIO:.0f}x the baseline's spans/s at {sizes[0]:,} rows: "
        f"{ratio:.1f}x{of}, {'met' if ratio >= GOAL_RATIO else 'NOT met'}")
    if a.baseline_ref:
        for first, where in ((True, "first after the baseline"), (False, "second")):
            xs = sorted(x.spans_per_s / x.base_spans_per_s for x in runs
                        if x.code == "this tree" and x.rows == sizes[0] and x.first == first)
            if xs:
                say(f"  this tree's runs {where}: {', '.join(f'{x:.1f}' for x in xs)}x")
    for rows in sizes:
        r = median("this tree", rows)
        peak = max((x for x in runs if x.code == "this tree" and x.rows == rows),
                   key=lambda x: x.peak_rss_bytes)  # a memory goal holds for every run
        ok = peak.peak_rss_bytes <= GIB
        say(f"goal: peak RSS <= 1 GiB at {rows:,} rows: "
            f"{peak.peak_rss_bytes / 2**20:.0f} MiB (replay process), "
            f"{peak.nats_peak_rss_bytes / 2**20:.0f} MiB (nats-server), "
            f"{'met' if ok else 'NOT met'}")
        if a.baseline_ref:
            ref = median(trees[0][0], rows)
            med = f" (median of {a.repeat})" if a.repeat > 1 else ""
            say(f"vs {ref.code} at {rows:,} rows{med}: wall {ref.wall_s / r.wall_s:.2f}x "
                f"faster, CPU {ref.cpu_s / r.cpu_s:.2f}x less, peak RSS "
                f"{ref.peak_rss_bytes / 2**20:.0f} -> {r.peak_rss_bytes / 2**20:.0f} MiB")
    for r in runs:
        if r.kernel_slices is not None:
            say(f"check: trace.pftrace at {r.rows:,} rows ({r.code}) has {r.kernel_slices:,} "
                f"kernel slices (parsed with perfetto's Trace proto)")
    if a.json:
        res: dict[str, Any] = {"baseline": sorted(bases, key=lambda b: b.spans_per_s)[
                                   (len(bases) - 1) // 2].as_dict(),
                               "baselines": [b.as_dict() for b in bases],
                               "runs": [r.__dict__ | {"spans_per_s": r.spans_per_s}
                                        for r in runs]}
        a.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
