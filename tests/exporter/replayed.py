"""Replay bundles of real recorded GPU traces, made through the console script.

The inputs are the real rocprof v1 traces in ``collectors/rocprof/testdata``
(seismic stencils and finite difference on an MI250X, see its PROVENANCE.md)
and the real rocprofv3 kernel trace in ``tests/exporter/sinks/testdata``.
:func:`slowed_copy` derives a SYNTHETIC variant of a real trace (one
kernel's durations scaled), named ``*_synthetic.csv``.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROCPROF = ROOT / "collectors/rocprof/testdata"
SEISMIC = ROCPROF / "seismic_stencils_results.csv"
FINITE_DIFF = ROCPROF / "finite_difference_results.csv"
V3_KERNELS = ROOT / "tests/exporter/sinks/testdata/rocprofv3_kernel_trace.csv"
EXE = str(Path(sys.executable).parent / "aaco-exporter")


def run_cli(args: list[str], env: dict[str, str],
            timeout: int = 240) -> subprocess.CompletedProcess[str]:
    """``aaco-exporter ARGS`` in a subprocess (text output, no check)."""
    return subprocess.run([EXE, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def replay(inputs: list[Path], out: Path, env: dict[str, str]) -> Path:
    """``aaco-exporter replay INPUTS --out OUT``; returns the bundle (last stdout line)."""
    r = run_cli(["replay", *map(str, inputs), "--out", str(out)], env)
    assert r.returncode == 0, r.stderr
    return Path(r.stdout.strip().splitlines()[-1])


def slowed_copy(src: Path, kernel: str, factor: float, out_dir: Path) -> Path:
    """SYNTHETIC: a copy of the rocprof v1 trace ``src`` where every dispatch of
    ``kernel`` lasts ``factor`` times as long (EndNs, CompleteNs and DurationNs
    moved; later dispatches unchanged). Returns ``<stem>_slowed_synthetic.csv``."""
    out = out_dir / f"{src.stem}_slowed_synthetic.csv"
    with src.open(newline="") as f, out.open("w", newline="") as g:
        rows = csv.DictReader(f)
        assert rows.fieldnames is not None
        w = csv.DictWriter(g, rows.fieldnames, quoting=csv.QUOTE_NONNUMERIC)
        w.writeheader()
        hit = 0
        for r in rows:
            if r["KernelName"] == kernel:
                hit += 1
                d = int(r["EndNs"]) - int(r["BeginNs"])
                extra = int(d * (factor - 1.0))
                r["EndNs"] = str(int(r["EndNs"]) + extra)
                r["CompleteNs"] = str(int(r["CompleteNs"]) + extra)
                r["DurationNs"] = str(int(r["DurationNs"]) + extra)
            w.writerow({k: int(v) if v.lstrip("-").isdigit() else v for k, v in r.items()})
    assert hit, f"{src}: no dispatch of {kernel}"
    return out
