"""Where the always-on daemon's CPU goes: milliseconds of CPU per second,
per function, in the setup of ``bench_daemon_cost.py``.

``aaco-exporter run`` watching ``--procs`` idle children, GPU gauges at 1 Hz
from the rocm-smi test double, the scheduler collector on ``/proc``, the
embedded nats-server, analytics on, ``/metrics`` scraped every 15 s, run
through ``daemon_fn_runner.py``: each function it names is timed with the
CPU clock of the thread that calls it, over ``--seconds`` after
``--warmup``, and so are Python's garbage collections (``gc (generation
N)``). Prints one row per function (ms of CPU per second of wall
time, calls per second, ms per call) and the CPU % of one core of each of
the daemon's threads; writes ``benchmarks/results/daemon_cpu_by_function.json``.

This is a diagnostic, not a goal: the goal is ``bench_daemon_cost.py``'s
(daemon + nats-server <= 1 % of one core). Inclusive times: a function
and its callee both count the callee's CPU. A call costs about twice in the
daemon what it costs in a loop (cold caches once a second).

Usage::

    python benchmarks/daemon_cpu_by_function.py [--seconds 60] [--warmup 30] [--procs 8]
                                                [--publish-interval 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_daemon_cost import FIXTURE, IDLE_COMM, SMI, _free_port, _idle_children
from benchcommon import ROOT, stop_process

RUNNER = Path(__file__).resolve().parent / "daemon_fn_runner.py"


def measure(seconds: float, warmup: float, procs: int, publish_interval: float | None,
            tmp: Path) -> dict[str, object]:
    """Start the daemon under the runner, wait for its report, stop it."""
    conf = tmp / "run.toml"
    conf.write_text(f'[collectors.gpu]\nsource = "rocm-smi"\nrocm_smi = "{SMI}"\n'
                    'interval_s = 1.0\n\n[collectors.sched]\nsource = "proc"\n')
    report = tmp / "report.json"
    extra = [] if publish_interval is None else ["--publish-interval", str(publish_interval)]
    cmd = [sys.executable, str(RUNNER), str(report), str(warmup), str(seconds), "--", "run",
           "--config", str(conf), "--watch", "none", "--watch-comm", f"^{IDLE_COMM}$",
           "--metrics-addr", f"127.0.0.1:{_free_port()}",
           "--nats-listen", f"127.0.0.1:{_free_port()}", "--state-dir", str(tmp / "state"),
           "--log-level", "WARNING", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SMI_FIXTURE": str(FIXTURE)}
    kids = _idle_children(tmp, procs)
    log = open(tmp / "daemon.log", "wb")  # noqa: SIM115 (closed in finally)
    daemon = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + warmup + seconds + 120
        while not report.exists():
            if daemon.poll() is not None:
                raise RuntimeError(f"daemon exited: {(tmp / 'daemon.log').read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError("no report from the runner in time")
            time.sleep(0.5)
        got: dict[str, object] = json.loads(report.read_text())
        return got
    finally:
        stop_process(daemon)
        log.close()
        for k in kids:
            k.kill()
            k.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="measured window")
    ap.add_argument("--warmup", type=float, default=30.0, help="seconds after start-up")
    ap.add_argument("--procs", type=int, default=8, help="idle processes to watch")
    ap.add_argument("--publish-interval", type=float, default=None,
                    help="run --publish-interval N (default: run's own)")
    ap.add_argument("--out", type=Path,
                    default=ROOT / "benchmarks" / "results" / "daemon_cpu_by_function.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="aaco-bench-fn-") as t:
        rep = measure(args.seconds, args.warmup, args.procs, args.publish_interval, Path(t))
    funcs = rep["functions"]
    threads = rep["threads"]
    assert isinstance(funcs, dict) and isinstance(threads, dict)
    print(f"aaco-exporter run, {args.procs} idle processes, GPU gauges at 1 Hz (rocm-smi "
          f"double); {rep['seconds']:.0f} s after {args.warmup:.0f} s; daemon process "
          f"{rep['process_pct']:.2f} % of one core")
    print(f"{'ms/s':>8}{'calls/s':>9}{'ms/call':>9}  function (inclusive, thread CPU)")
    for name, f in funcs.items():
        print(f"{f['ms_per_s']:8.3f}{f['calls_per_s']:9.2f}{f['ms_per_call']:9.2f}  {name}")
    print("threads (% of one core): " + ", ".join(
        f"{k} {v:.2f}" for k, v in sorted(threads.items(), key=lambda kv: -kv[1]) if v > 0))
    if rep.get("skipped"):
        print(f"not found (skipped): {rep['skipped']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rep, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
