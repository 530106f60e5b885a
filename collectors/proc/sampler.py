"""Per-thread scheduler counters from ``/proc``, as deltas per interval.

Sources (``proc(5)``, ``Documentation/scheduler/sched-stats.rst``):

* ``/proc/<pid>/task/<tid>/schedstat``: ``run_ns runq_wait_ns timeslices``
  (time on CPU, time waiting on a run queue, both ns since thread start);
* ``/proc/<pid>/task/<tid>/status``: ``voluntary_ctxt_switches`` and
  ``nonvoluntary_ctxt_switches``;
* ``/proc/<pid>/task/<tid>/stat``: field 10 ``minflt`` and 12 ``majflt``
  (1-based, counted after the ``(comm)`` field), and ``comm``.

A thread seen for the first time yields no row (there is no previous value to
subtract); a thread or process that exits between two samples is forgotten
without error. One row per watched thread per interval, in
:data:`exporter.schema.SCHED_SAMPLE`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from exporter.schema import SCHED_SAMPLE


@dataclass(frozen=True)
class ThreadCounters:
    """Cumulative counters of one thread at one instant (ns and counts)."""

    comm: str
    run_ns: int
    runq_wait_ns: int
    voluntary: int
    involuntary: int
    minflt: int
    majflt: int


def read_thread(task_dir: Path) -> ThreadCounters | None:
    """Read one ``/proc/<pid>/task/<tid>`` directory; ``None`` if it vanished.

    Raises ``ValueError`` naming the file when a file has an unexpected shape.
    """
    try:
        sched = (task_dir / "schedstat").read_text()
        status = (task_dir / "status").read_text()
        stat = (task_dir / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    parts = sched.split()
    if len(parts) < 2:
        raise ValueError(f"{task_dir / 'schedstat'}: expected 3 fields, got {sched!r}")
    vol = invol = 0
    for line in status.splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            vol = int(line.split()[1])
        elif line.startswith("nonvoluntary_ctxt_switches:"):
            invol = int(line.split()[1])
    lp, rp = stat.find("("), stat.rfind(")")
    if lp < 0 or rp < 0:
        raise ValueError(f"{task_dir / 'stat'}: no (comm) field")
    comm = stat[lp + 1 : rp]
    rest = stat[rp + 2 :].split()
    # rest[0] is field 3 (state); minflt is field 10, majflt field 12.
    return ThreadCounters(
        comm, int(parts[0]), int(parts[1]), vol, invol, int(rest[7]), int(rest[9])
    )


class ProcSampler:
    """Stateful sampler: ``sample(pids)`` returns the deltas since last call.

    >>> s = ProcSampler()
    >>> s.sample({os.getpid()}).num_rows  # first call only primes the state
    0
    >>> s.sample({os.getpid()}).num_rows >= 1
    True
    """

    def __init__(self, proc_root: str | Path = "/proc") -> None:
        self.root = Path(proc_root)
        self._prev: dict[tuple[int, int], ThreadCounters] = {}
        self._prev_ts: int | None = None

    def sample(self, pids: set[int]) -> pa.Table:
        """Sample every thread of ``pids``; returns a SCHED_SAMPLE table."""
        now = time.time_ns()
        interval = now - self._prev_ts if self._prev_ts is not None else 0
        cur: dict[tuple[int, int], ThreadCounters] = {}
        for pid in sorted(pids):
            try:
                tids = [int(t) for t in os.listdir(self.root / str(pid) / "task")]
            except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
                continue
            for tid in tids:
                c = read_thread(self.root / str(pid) / "task" / str(tid))
                if c is not None:
                    cur[(pid, tid)] = c
        cols: dict[str, list[object]] = {f.name: [] for f in SCHED_SAMPLE}
        for (pid, tid), c in cur.items():
            p = self._prev.get((pid, tid))
            if p is None or interval <= 0:
                continue
            cols["ts_ns"].append(now)
            cols["interval_ns"].append(interval)
            cols["source"].append("proc")
            cols["pid"].append(pid)
            cols["tid"].append(tid)
            cols["comm"].append(c.comm)
            cols["runq_wait_ns"].append(c.runq_wait_ns - p.runq_wait_ns)
            cols["run_ns"].append(c.run_ns - p.run_ns)
            cols["voluntary_switches"].append(c.voluntary - p.voluntary)
            cols["involuntary_switches"].append(c.involuntary - p.involuntary)
            cols["migrations"].append(None)
            cols["minor_faults"].append(c.minflt - p.minflt)
            cols["major_faults"].append(c.majflt - p.majflt)
            cols["runq_hist_log2_ns"].append(None)
            cols["top_preemptors"].append(None)
        self._prev = cur
        self._prev_ts = now
        return pa.Table.from_pydict(cols, schema=SCHED_SAMPLE)
