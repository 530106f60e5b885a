"""Overhead of the sched eBPF probe on a context-switch-heavy workload.

Workload: two processes ping-pong one byte over two pipes, ``N`` round trips
(each round trip is two blocking reads, so about four context switches).
It runs four times in one invocation: without the probe, with the probe
attached but other pids watched (every switch still runs the program, which
only looks up two hash keys), with the ping-pong pids watched (the expensive
path: every switch is aggregated), and again without the probe, so drift
shows. The collector's own
cost is the ``getrusage(RUSAGE_THREAD)`` CPU time of a thread that drains the
maps every ``--interval`` seconds while the workload runs.

Usage (root, after ``scripts/setup-bcc.sh``)::

    python benchmarks/bench_sched_overhead.py [--round-trips 50000] [--interval 0.1]

Prints a table: wall time, ns per round trip, ratio to the first baseline,
and the drain thread's CPU seconds and drains.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.sched.probe import SchedProbe


def pingpong(n: int, on_start: object = None) -> tuple[float, list[int]]:
    """Run ``n`` round trips between two forked processes; ``(seconds, pids)``."""
    a_r, a_w = os.pipe()
    b_r, b_w = os.pipe()
    go_r, go_w = os.pipe()
    pids = []
    for role in (0, 1):
        pid = os.fork()
        if pid == 0:
            try:
                os.read(go_r, 1)
                src, dst = (a_r, b_w) if role == 0 else (b_r, a_w)
                if role == 1:
                    os.write(a_w, b"x")
                for _ in range(n):
                    os.read(src, 1)
                    os.write(dst, b"x")
            finally:
                os._exit(0)
        pids.append(pid)
    if callable(on_start):
        on_start(pids)
    t = time.perf_counter()
    os.write(go_w, b"gg")
    for p in pids:
        os.waitpid(p, 0)
    dt = time.perf_counter() - t
    for fd in (a_r, a_w, b_r, b_w, go_r, go_w):
        os.close(fd)
    return dt, pids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--round-trips", type=int, default=50_000)
    ap.add_argument("--interval", type=float, default=0.1, help="drain period, s")
    args = ap.parse_args()
    n = args.round_trips

    base1, _ = pingpong(n)
    probe = SchedProbe()
    stop = threading.Event()
    usage: dict[str, float] = {}

    def drainer() -> None:
        drains = switches = 0
        r0 = resource.getrusage(resource.RUSAGE_THREAD)
        while not stop.wait(args.interval):
            d = probe.drain()
            drains += 1
            switches += sum(t.switch_ins for t in d.threads)
        d = probe.drain()
        switches += sum(t.switch_ins for t in d.threads)
        r1 = resource.getrusage(resource.RUSAGE_THREAD)
        usage["cpu_s"] = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        usage["drains"] = drains + 1
        usage["switch_ins"] = switches

    th = threading.Thread(target=drainer)
    try:
        unwatched, _ = pingpong(n)
        probe.drain()
        t0 = time.perf_counter()
        th.start()
        watched, _ = pingpong(n, on_start=lambda pids: probe.set_tgids(pids))
        stop.set()
        th.join()
        wall = time.perf_counter() - t0
    finally:
        stop.set()
        probe.close()
    base2, _ = pingpong(n)

    rows = [
        ("baseline (no probe)", base1, None),
        ("probe attached, not watched", unwatched, None),
        ("probe attached, pids watched", watched, usage),
        ("baseline again", base2, None),
    ]
    print(f"round trips: {n}   drain interval: {args.interval}s   cpus: {os.cpu_count()}")
    print(f"{'run':32} {'wall s':>8} {'ns/rt':>8} {'ratio':>6} {'drain cpu s':>12} {'drains':>7}")
    for name, dt, u in rows:
        extra = f"{u['cpu_s']:12.3f} {int(u['drains']):7d}" if u else f"{'':12} {'':7}"
        print(f"{name:32} {dt:8.3f} {dt / n * 1e9:8.0f} {dt / base1:6.2f} {extra}")
    mean_base = (base1 + base2) / 2
    print(f"overhead vs mean baseline: {watched / mean_base:.3f}x")
    print(
        f"switch-ins aggregated in kernel: {int(usage['switch_ins'])}; "
        f"drain thread CPU: {usage['cpu_s'] / wall * 100:.2f}% of one core "
        f"({usage['cpu_s'] / usage['drains'] * 1e3:.2f} ms per drain)"
    )


if __name__ == "__main__":
    main()
