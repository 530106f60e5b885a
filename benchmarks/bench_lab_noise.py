"""Latency noise (coefficient of variation) of a capture with and without ``--lab``.

Both arms run ``exporter.capture.capture`` on the real ``magika`` model in this
process, with the same ``--iterations``/``--warmup``:

* **plain** (baseline): ``CaptureOptions(lab=False)``;
* **lab**: ``CaptureOptions(lab=True, lab_cpus=...)``: dedicated cpuset cgroup,
  threads pinned, cpufreq recorded, GPU clocks locked when a GPU exists
  (``exporter/labmode.py``); every step that the machine refuses is listed.

The arms alternate (plain lab plain lab ...) ``--repeats`` times so the load of
a shared machine falls on both. Per capture: the CV (population std / mean) of
the measured iterations' ``duration_ns`` (``metrics/inference_iters.parquet``,
ORT's own ``model_run`` events) plus mean and p99 latency. The report gives,
per arm, the median CV over repeats, the ratio lab / plain of the medians and
of each alternating pair, the 1-minute load average before and after, and the
share of the machine's CPU used by other processes during the run.

Usage::

    python benchmarks/bench_lab_noise.py [--iterations 150] [--warmup 5] [--repeats 4]
                                         [--lab-cpus 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchcommon import machine_busy_s, self_cpu_s

from exporter.bus import BusConfig
from exporter.capture import CaptureOptions, capture
from exporter.labmode import parse_cpus

RESULTS = Path(__file__).resolve().parent / "results"


def one(lab: bool, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    opts = CaptureOptions(model="magika", iterations=args.iterations, warmup=args.warmup,
                          out=out, progress=False, lab=lab,
                          lab_cpus=parse_cpus(args.lab_cpus) if args.lab_cpus else None)
    session, _ = asyncio.run(capture(opts, BusConfig()))
    d = pq.read_table(session / "metrics/inference_iters.parquet").column(
        "duration_ns").to_numpy().astype(np.float64) / 1e6
    rec: dict[str, Any] = {"arm": "lab" if lab else "plain", "iterations": len(d),
                           "cv": float(d.std() / d.mean()), "mean_ms": float(d.mean()),
                           "p50_ms": float(np.percentile(d, 50)),
                           "p99_ms": float(np.percentile(d, 99))}
    if lab:
        steps = json.loads((session / "lab.json").read_text())["steps"]
        rec["lab_steps"] = {s["name"]: s["ok"] for s in steps}
        rec["lab_refused"] = [s["detail"] for s in steps if not s["ok"]]
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--lab-cpus", default=None, help="CPUs for the lab arm (default: "
                    "all but the lowest)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    load0 = os.getloadavg()
    b0, s0, w0 = machine_busy_s(), self_cpu_s(), time.perf_counter()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench_lab_") as tmp:
        for i in range(args.repeats):
            for lab in (False, True):
                r = one(lab, args, Path(tmp))
                r["repeat"] = i
                runs.append(r)
                print(f"repeat {i} {r['arm']:<5} CV {r['cv']:.4f}  mean {r['mean_ms']:.2f} ms"
                      f"  p99 {r['p99_ms']:.2f} ms", flush=True)
    wall = time.perf_counter() - w0
    others = (machine_busy_s() - b0) - (self_cpu_s() - s0)
    load1 = os.getloadavg()
    cv = {a: [r["cv"] for r in runs if r["arm"] == a] for a in ("plain", "lab")}
    med = {a: statistics.median(v) for a, v in cv.items()}
    pairs = [lab / plain for plain, lab in zip(cv["plain"], cv["lab"], strict=True)]
    refused = sorted({d for r in runs for d in r.get("lab_refused", [])})
    report = {
        "iterations": args.iterations, "warmup": args.warmup, "repeats": args.repeats,
        "cpus": os.cpu_count(), "load_average_before": load0, "load_average_after": load1,
        "other_processes_cpu_share": others / (wall * (os.cpu_count() or 1)),
        "median_cv": med, "ratio_lab_over_plain_median_cv": med["lab"] / med["plain"],
        "ratio_per_pair": pairs, "lab_refused": refused, "runs": runs,
    }
    print()
    print(f"load average 1/5/15 min: before {load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f}, "
          f"after {load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f} on {os.cpu_count()} CPUs; "
          f"other processes used {100 * report['other_processes_cpu_share']:.0f}% of the "
          "machine's CPU during the run")
    for a in ("plain", "lab"):
        print(f"{a:<5} median CV {med[a]:.4f}  (per repeat: "
              f"{', '.join(f'{x:.4f}' for x in cv[a])})")
    print(f"lab / plain: median CV ratio {report['ratio_lab_over_plain_median_cv']:.3f}; "
          f"per pair {', '.join(f'{x:.2f}' for x in pairs)}")
    for d in refused:
        print(f"lab step refused: {d}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_lab_noise.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
