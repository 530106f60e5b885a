"""``exporter.malloc_tuning``: the batch commands' glibc malloc settings cut
the page faults of a batch-like allocation pattern, and the user's own
``MALLOC_*_`` environment wins; pyarrow's mimalloc reads the purge setting
(its own ``MIMALLOC_VERBOSE`` report), unless the user set it or pyarrow was
already loaded. Each case runs in a fresh interpreter (the
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


# mimalloc prints every option it read when MIMALLOC_VERBOSE=1, as pyarrow loads
ARROW = """
import sys
if sys.argv[1] == "late":
    import pyarrow
from exporter.malloc_tuning import keep_arrow_memory
print(keep_arrow_memory())
import pyarrow as pa
pa.allocate_buffer(1 << 20)
"""


def _arrow(mode: str, **env: str) -> tuple[str, str]:
    """(keep_arrow_memory()'s result, mimalloc's purge_delay as it read it)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("MIMALLOC_")}
    r = subprocess.run([sys.executable, "-c", ARROW, mode], cwd=ROOT, capture_output=True,
                       text=True, check=True, env={**e, "MIMALLOC_VERBOSE": "1", **env})
    delay = [ln.split(":")[1].strip() for ln in r.stderr.splitlines()
             if ln.startswith("option 'purge_delay'")]
    return r.stdout.strip(), delay[0] if delay else "not reported"


def test_arrows_mimalloc_keeps_freed_memory_when_set_before_pyarrow_loads() -> None:
    """Called before the first import of pyarrow, keep_arrow_memory() makes
    mimalloc read purge_delay -1 (never return freed memory)."""
    assert _arrow("early") == ("True", "-1")


def test_the_users_mimalloc_purge_delay_wins_and_a_late_call_changes_nothing() -> None:
    """A purge delay the user set is kept; after pyarrow has loaded, the call
    returns False and mimalloc keeps its default (1000 ms in pyarrow 26)."""
    assert _arrow("early", MIMALLOC_PURGE_DELAY="250") == ("False", "250")
    late, delay = _arrow("late")
    assert (late, delay != "-1", delay.lstrip("-").isdigit()) == ("False", True, True)
