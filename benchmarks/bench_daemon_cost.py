"""The always-on cost of ``aaco-exporter run``: CPU share of one core and memory.

Setup, the daemon as a node would run it without a model:

* ``--procs`` (8) idle children to watch: copies of ``sleep`` named
  ``aaco-idle`` (their ``comm``), selected with ``--watch-comm '^aaco-idle$'``
  and ``--watch none`` (the discovery rescan still lists every process every
  5 s); ``--watch auto`` adds auto-discovery (the fd and maps scan of every
  process), whose picks on a shared machine vary (reported as ``watched``);
* GPU gauges at 1 Hz from the ``rocm-smi`` test double
  (``collectors/gpu/testdata/smi_ok_synthetic.sh`` printing the real 4x MI100
  recording ``smi/telegraf/mi100_rocm602.json``) through ``[collectors.gpu]
  source = "rocm-smi"`` in a config file;
* the scheduler collector on ``/proc`` (``--sched auto`` lets it pick eBPF,
  which a baseline tree without ``.bcc-headers`` cannot: not comparable);
* no model (no ORT), the embedded nats-server, analytics on, ``/metrics`` on
  a free port, scraped once every 15 s (a Prometheus default) during the run.

After ``/metrics`` shows every idle child and GPU gauges, and ``--warmup``
more seconds, the CPU time (user + system, psutil ``cpu_times()``, i.e.
``/proc/PID/stat``) of the daemon and of its nats-server child is read over
``--seconds``; ``cpu %`` is CPU seconds / wall seconds x 100 (percent of one
core). The rocm-smi double's processes (a shell and ``cat`` per poll) are
reported apart (``smi``: the daemon's reaped-children times): a real rocm-smi
costs what it costs whatever calls it. Memory: RSS and PSS (psutil
``memory_full_info``, ``/proc/PID/smaps_rollup``) of daemon + nats-server at
the end; RSS counts shared library pages in full, PSS divides them among the
processes that map them. ``anon`` is the anonymous part of that RSS
(``RssAnon`` of ``/proc/PID/status``): the daemon's own memory. The rest, its
libraries' pages, depends on the page cache: library files written recently
(a fresh ``pip install``) sit in large folios that the kernel maps whole, so
the same daemon read RSS 169 MB right after ``make setup`` and 136 MB after
``echo 3 > /proc/sys/vm/drop_caches`` (kernel 6.18, 2026-11-29).

Baselines measured in the same run, the same way:

* ``python-idle``: a bare ``python -c 'import time; time.sleep(...)'`` (the
  floor of any Python daemon);
* ``--baseline-ref REF`` (optional): the daemon of git revision REF
  (``git archive`` into a temporary directory, same interpreter), e.g. the
  revision before the always-on cost work; ratios are this tree / REF;
* ``--publish-interval N`` (optional): this tree again with ``run
  --publish-interval N`` (``0``: every sample published after its collect,
  the behaviour before that flag; this tree's own leg runs the default).

Goals (``benchmarks/README.md``): daemon + nats-server <= 1 % of one core,
RSS <= 150 MB. Writes ``benchmarks/results/daemon_cost.json``.

Usage::

    python benchmarks/bench_daemon_cost.py [--seconds 60] [--warmup 10] [--procs 8]
                                           [--baseline-ref fb47f91] [--publish-interval 0]
                                           [--sched-interval 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchcommon import ROOT, machine_busy_s, stop_process

SMI = ROOT / "collectors/gpu/testdata/smi_ok_synthetic.sh"
FIXTURE = ROOT / "collectors/gpu/testdata/smi/telegraf/mi100_rocm602.json"
IDLE_COMM = "aaco-idle"
GOAL_CPU_PCT, GOAL_RSS_MB = 1.0, 150.0


@dataclass
class Figures:
    """One leg's measurement (CPU in % of one core, memory in MB = 2**20 bytes)."""

    name: str
    wall_s: float
    cpu_pct: float  # daemon + nats-server
    daemon_pct: float
    nats_pct: float
    smi_pct: float  # the rocm-smi double's processes (reaped children)
    rss_mb: float  # daemon + nats-server
    pss_mb: float
    anon_mb: float  # the anonymous part of rss_mb (RssAnon)
    daemon_rss_mb: float
    nats_rss_mb: float
    watched: int
    modules: int  # sys.modules of the daemon (-1 when not known)
    others_cores: float  # cores other processes kept busy meanwhile


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as r:
        return str(r.read().decode())


def _cpu(p: psutil.Process) -> tuple[float, float]:
    """(own user+system, reaped children user+system) CPU seconds."""
    t = p.cpu_times()
    return t.user + t.system, t.children_user + t.children_system


def _mem(p: psutil.Process) -> tuple[float, float, float]:
    """(RSS, PSS, RssAnon) of ``p`` in MB."""
    m = p.memory_full_info()
    anon = 0.0
    with open(f"/proc/{p.pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                anon = int(line.split()[1]) / 1024  # kB
    return m.rss / 2**20, getattr(m, "pss", m.rss) / 2**20, anon


def _measure(name: str, proc: psutil.Process, seconds: float, port: int | None,
             nats: psutil.Process | None = None) -> Figures:
    """CPU of ``proc`` (+ ``nats``) over ``seconds``, memory at the end."""
    d0, c0 = _cpu(proc)
    n0 = _cpu(nats)[0] if nats else 0.0
    busy0, w0 = machine_busy_s(), time.monotonic()
    watched = 0
    next_scrape = w0
    while (now := time.monotonic()) < w0 + seconds:
        if port is not None and now >= next_scrape:  # Prometheus' default 15 s scrape
            text = _scrape(port)
            watched = sum(1 for ln in text.splitlines()
                          if ln.startswith("aaco_watched_process_info{"))
            next_scrape += 15.0
        time.sleep(min(0.5, max(0.0, w0 + seconds - now)))
    wall = time.monotonic() - w0
    d1, c1 = _cpu(proc)
    n1 = _cpu(nats)[0] if nats else 0.0
    others = max(0.0, machine_busy_s() - busy0 - (d1 - d0) - (n1 - n0) - (c1 - c0)) / wall
    rss, pss, anon = _mem(proc)
    nrss, npss, nanon = _mem(nats) if nats else (0.0, 0.0, 0.0)
    pct = 100.0 / wall
    return Figures(name, wall, (d1 - d0 + n1 - n0) * pct, (d1 - d0) * pct, (n1 - n0) * pct,
                   (c1 - c0) * pct, rss + nrss, pss + npss, anon + nanon, rss, nrss, watched, -1,
                   others)


def _idle_children(tmp: Path, n: int) -> list[subprocess.Popen[bytes]]:
    exe = tmp / IDLE_COMM
    shutil.copy(shutil.which("sleep") or "/bin/sleep", exe)
    return [subprocess.Popen([str(exe), "100000"]) for _ in range(n)]


def _daemon_leg(name: str, tree: Path, tmp: Path, args: argparse.Namespace,
                extra: tuple[str, ...] = (), sched_interval_s: float | None = None) -> Figures:
    """Start the daemon of source tree ``tree``, wait until it sees everything,
    warm up, measure; always stops it (SIGTERM, then SIGKILL). ``sched_interval_s``
    sets ``[collectors.sched] interval_s`` (default: the tree's own)."""
    conf = tmp / f"{name}.toml"
    sched_rate = "" if sched_interval_s is None else f"interval_s = {sched_interval_s}\n"
    conf.write_text(f'[collectors.gpu]\nsource = "rocm-smi"\nrocm_smi = "{SMI}"\n'
                    f'interval_s = 1.0\n\n[collectors.sched]\nsource = "{args.sched}"\n'
                    f"{sched_rate}")
    port, nats_port = _free_port(), _free_port()
    path = os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "SMI_FIXTURE": str(FIXTURE)}
    cmd = [sys.executable, "-c", "from exporter.cli import main; main()", "run",
           "--config", str(conf), "--watch", args.watch, "--watch-comm", f"^{IDLE_COMM}$",
           "--metrics-addr", f"127.0.0.1:{port}", "--nats-listen", f"127.0.0.1:{nats_port}",
           "--state-dir", str(tmp / f"{name}-state"), "--log-level", "WARNING", *extra]
    log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115 (closed in finally)
    popen = subprocess.Popen(cmd, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        proc = psutil.Process(popen.pid)
        deadline, text = time.monotonic() + 60, ""
        while time.monotonic() < deadline:
            if popen.poll() is not None:
                raise RuntimeError(f"{name}: daemon exited: "
                                   f"{(tmp / f'{name}.log').read_text()[-2000:]}")
            try:
                text = _scrape(port)
            except OSError:
                text = ""
            seen = text.count(f'comm="{IDLE_COMM}"')
            if seen >= args.procs and "hw_gpu_" in text:
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"{name}: /metrics did not show {args.procs} idle children "
                               f"and GPU gauges within 60 s")
        nats = next((c for c in proc.children() if c.name() == "nats-server"), None)
        if nats is None:
            raise RuntimeError(f"{name}: no nats-server child")
        time.sleep(args.warmup)
        return _measure(name, proc, args.seconds, port, nats)
    finally:
        stop_process(popen)
        log.close()


def _modules(tree: Path) -> int:
    """How many modules ``run`` would have imported after building the daemon
    (collectors, analytics, sinks) with default options, without running it."""
    code = ("import sys\nfrom exporter.cli import app\nfrom exporter import daemon\n"
            "daemon._build_collectors(daemon.DaemonOptions(), set())\n"
            "print(len(sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(tree)}, timeout=120)
    return int(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else -1


def _python_idle(args: argparse.Namespace) -> Figures:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(100000)"])
    try:
        time.sleep(1.0)
        return _measure("python-idle", psutil.Process(p.pid), min(args.seconds, 20.0), None)
    finally:
        p.kill()
        p.wait()


def _checkout(ref: str, tmp: Path) -> Path | None:
    """``git archive REF`` into ``tmp/ref``; None (with a note) when git cannot."""
    dest = tmp / "ref"
    dest.mkdir()
    arch = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True)
    if arch.returncode != 0:
        print(f"note: cannot check out {ref}: {arch.stderr.decode().strip()}; "
              "no revision baseline", file=sys.stderr)
        return None
    subprocess.run(["tar", "-x", "-C", str(dest)], input=arch.stdout, check=True)
    return dest


def _row(f: Figures) -> str:
    return (f"{f.name:<14}{f.cpu_pct:>8.2f}{f.daemon_pct:>8.2f}{f.nats_pct:>7.2f}"
            f"{f.smi_pct:>7.2f}{f.rss_mb:>8.0f}{f.pss_mb:>8.0f}{f.anon_mb:>6.0f}{f.daemon_rss_mb:>8.0f}"
            f"{f.nats_rss_mb:>7.0f}{f.watched:>8}{f.modules:>8}{f.others_cores:>8.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="measured window per leg")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds after start-up")
    ap.add_argument("--procs", type=int, default=8, help="idle processes to watch")
    ap.add_argument("--baseline-ref", default="", help="git revision to compare with")
    ap.add_argument("--sched", choices=("proc", "auto"), default="proc",
                    help="[collectors.sched] source: proc (default, the same in every "
                         "tree and machine) or auto (eBPF where bcc and headers allow)")
    ap.add_argument("--flush-interval", type=float, default=0.0,
                    help="also measure this tree with run --flush-interval N")
    ap.add_argument("--publish-interval", type=float, default=None,
                    help="also measure this tree with run --publish-interval N "
                         "(0: every sample published at once, as before that flag)")
    ap.add_argument("--sched-interval", type=float, default=None,
                    help="also measure this tree with [collectors.sched] interval_s = N "
                         "(run's default samples once per publish interval, 5 s)")
    ap.add_argument("--watch", choices=("none", "auto"), default="none",
                    help="none: exactly the idle children; auto: plus every process "
                         "auto-discovery picks on this machine (fd and maps scan of all)")
    args = ap.parse_args()
    legs: list[Figures] = []
    with tempfile.TemporaryDirectory(prefix="aaco-bench-cost-") as t:
        tmp = Path(t)
        kids = _idle_children(tmp, args.procs)
        try:
            legs.append(_python_idle(args))
            trees = [("this-tree", ROOT)]
            if args.baseline_ref:
                ref_tree = _checkout(args.baseline_ref, tmp)
                if ref_tree is not None:
                    trees.append((f"ref-{args.baseline_ref}"[:14], ref_tree))
            for name, tree in trees:
                f = _daemon_leg(name, tree, tmp, args)
                f.modules = _modules(tree)
                legs.append(f)
                if name == "this-tree" and args.publish_interval is not None:
                    f = _daemon_leg(f"publish-{args.publish_interval:g}s", tree, tmp, args,
                                    ("--publish-interval", str(args.publish_interval)))
                    f.modules = legs[-1].modules
                    legs.append(f)
                if name == "this-tree" and args.sched_interval is not None:
                    f = _daemon_leg(f"sched-{args.sched_interval:g}s", tree, tmp, args,
                                    sched_interval_s=args.sched_interval)
                    f.modules = legs[-1].modules
                    legs.append(f)
                if name == "this-tree" and args.flush_interval:
                    f = _daemon_leg(f"flush-{args.flush_interval:g}s", tree, tmp, args,
                                    ("--flush-interval", str(args.flush_interval)))
                    f.modules = legs[-1].modules
                    legs.append(f)
        finally:
            for k in kids:
                k.kill()
                k.wait()
    print(f"aaco-exporter run, {args.procs} idle processes watched (--watch-comm, "
          f"--watch {args.watch}), "
          f"GPU gauges at 1 Hz (rocm-smi double, 4x MI100 recording), no model; "
          f"{args.seconds:.0f} s after {args.warmup:.0f} s warm-up; {os.cpu_count()} cores")
    import importlib.util

    extras = [m for m in ("aiohttp", "river", "onnxruntime", "opentelemetry")
              if importlib.util.find_spec(m) is not None]
    print(f"interpreter {sys.executable}; installed of note: {', '.join(extras) or 'none'} "
          "(exporter/nats_import.py keeps nats-py from importing aiohttp, which "
          "kubernetes pulls into .[dev])")
    print(f"{'leg':<14}{'cpu %':>8}{'daemon':>8}{'nats':>7}{'smi':>7}{'RSS MB':>8}"
          f"{'PSS MB':>8}{'anon':>6}{'d RSS':>8}{'n RSS':>7}{'watched':>8}{'modules':>8}"
          f"{'others':>8}")
    for f in legs:
        print(_row(f))
    cur = next(f for f in legs if f.name == "this-tree")
    base = legs[0]
    print(f"this tree: {cur.cpu_pct:.2f} % of one core (goal <= {GOAL_CPU_PCT} %: "
          f"{'met' if cur.cpu_pct <= GOAL_CPU_PCT else 'NOT met'}), RSS {cur.rss_mb:.0f} MB "
          f"(goal <= {GOAL_RSS_MB:.0f} MB: {'met' if cur.rss_mb <= GOAL_RSS_MB else 'NOT met'}); "
          f"RSS {cur.rss_mb / base.rss_mb:.1f}x a bare idle python")
    ref = next((f for f in legs if f.name.startswith("ref-")), None)
    if ref is not None:
        print(f"this tree / {ref.name}: cpu {cur.cpu_pct / ref.cpu_pct:.2f}x, "
              f"RSS {cur.rss_mb / ref.rss_mb:.2f}x, PSS {cur.pss_mb / ref.pss_mb:.2f}x")
    out = ROOT / "benchmarks/results"
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"args": vars(args), "legs": [asdict(f) for f in legs]}
    (out / "daemon_cost.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
