"""``exporter.malloc_tuning``: the batch commands' glibc malloc settings cut
the page faults of a batch-like allocation pattern, and the user's own
``MALLOC_*_`` environment wins. Each case runs in a fresh interpreter (the
settings are process-wide); counts of minor faults, not durations."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# numpy arrays of 0.5-2 MiB made and freed in turn, as a replay's batches are
PATTERN = """
import resource, sys
import numpy as np
from exporter.malloc_tuning import tune_for_batch
applied = tune_for_batch() if sys.argv[1] == "tune" else None
r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(200):
    a = np.arange(65536 * (1 + i % 4), dtype=np.int64)
    b = (a * 3) >> 1
    c = np.concatenate([a, b])
    del a, b, c
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0)
"""


def _run(mode: str, **env: str) -> tuple[str, int]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    e.pop("GLIBC_TUNABLES", None)
    out = subprocess.run([sys.executable, "-c", PATTERN, mode], env={**e, **env}, cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    return out[0], int(out[1])


def test_tuned_batch_allocations_fault_far_less_than_glibc_defaults() -> None:
    """On glibc, 200 rounds of 0.5-2 MiB arrays: the tuned process takes
    under a quarter of the default process's minor page faults (measured:
    about 2,300 against 101,000)."""
    applied, tuned = _run("tune")
    _, plain = _run("plain")
    assert applied == "True"
    assert tuned * 4 < plain, (tuned, plain)


def test_the_users_malloc_environment_wins() -> None:
    """With ``MALLOC_TRIM_THRESHOLD_`` set by the user, nothing is applied."""
    applied, _ = _run("tune", MALLOC_TRIM_THRESHOLD_=str(1 << 20))
    assert applied == "False"
