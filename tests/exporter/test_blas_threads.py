"""``exporter.blas_threads``: numpy imported through :func:`import_numpy` leaves
OpenBLAS's worker threads asleep (a plain ``import numpy`` has them spin about
0.1 s of CPU), takes the variable out of the environment again, and leaves a
user's own setting alone. Each case runs in a fresh interpreter; counts of
clock ticks of the threads other than the main one, not durations."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import os, sys, time
from exporter.blas_threads import import_numpy
if sys.argv[1] == "quiet":
    applied = import_numpy()
else:
    import numpy
    applied = None
time.sleep(0.4)  # longer than the 2**28-cycle spin of a plain import
me, ticks = str(os.getpid()), 0
for t in os.listdir("/proc/self/task"):
    if t != me:
        f = open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()
        ticks += int(f[11]) + int(f[12])
import numpy as np
a = np.arange(9.0).reshape(3, 3)
print(applied, ticks, "OPENBLAS_THREAD_TIMEOUT" in os.environ, float((a @ a).sum()))
"""


def _run(mode: str, **env: str) -> tuple[str, int, str, float]:
    e = {k: v for k, v in os.environ.items() if not k.endswith("_THREAD_TIMEOUT")}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], env={**e, **env}, cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    return out[0], int(out[1]), out[2], float(out[3])


def test_import_numpy_leaves_openblas_workers_asleep() -> None:
    """Through import_numpy the worker threads use at most 2 ticks (20 ms) in
    0.4 s; a plain import of the same numpy spins them for 3 ticks or more
    (on two CPUs or more: OpenBLAS starts no worker on one).
    BLAS still computes, and the variable is gone from the environment."""
    applied, quiet, leaked, total = _run("quiet")
    assert applied == "True"
    assert quiet <= 2, quiet
    assert leaked == "False"
    assert total == 486.0  # the entries of A @ A, A = arange(9) as 3x3, summed
    if len(os.sched_getaffinity(0)) >= 2:  # one CPU: OpenBLAS starts no worker to spin
        _, plain, _, _ = _run("plain")
        assert plain >= 3, f"a plain numpy import spun only {plain} ticks: nothing to show"


def test_import_numpy_leaves_a_users_setting_alone() -> None:
    """A user's OPENBLAS_THREAD_TIMEOUT is theirs: nothing applied, and it stays set."""
    applied, _, kept, _ = _run("quiet", OPENBLAS_THREAD_TIMEOUT="20")
    assert applied == "False"
    assert kept == "True"
