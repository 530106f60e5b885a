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

from collectors.procfs import read_small
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


def _switches(status: bytes, key: bytes) -> int:
    """The count on the line ``key`` (``b"\\nvoluntary_ctxt_switches:"``...)
    of a ``status`` file; 0 when absent."""
    i = status.find(key)
    if i < 0:
        return 0
    return int(status[i + len(key):].split(b"\n", 1)[0])


def read_thread(task_dir: Path | str) -> ThreadCounters | None:
    """Read one ``/proc/<pid>/task/<tid>`` directory; ``None`` if it vanished.

    Raises ``ValueError`` naming the file when a file has an unexpected shape.
    Files are read as bytes with :func:`collectors.procfs.read_small` (this
    runs for every watched thread every interval); a ``comm`` that is not
    UTF-8 gets U+FFFD.
    """
    d = str(task_dir)
    try:
        sched = read_small(f"{d}/schedstat")
        status = read_small(f"{d}/status")
        stat = read_small(f"{d}/stat")
    except (FileNotFoundError, ProcessLookupError):
        return None
    parts = sched.split()
    if len(parts) < 2:
        got = sched.decode(errors="replace")
        raise ValueError(f"{d}/schedstat: expected 3 fields, got {got!r}")
    vol = _switches(status, b"\nvoluntary_ctxt_switches:")
    invol = _switches(status, b"\nnonvoluntary_ctxt_switches:")
    lp, rp = stat.find(b"("), stat.rfind(b")")
    if lp < 0 or rp < 0:
        raise ValueError(f"{d}/stat: no (comm) field")
    comm = stat[lp + 1 : rp].decode("utf-8", "replace")
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
        root = str(self.root)
        for pid in sorted(pids):
            task = f"{root}/{pid}/task"
            try:
                tids = [int(t) for t in os.listdir(task)]
            except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
                continue
            for tid in tids:
                c = read_thread(f"{task}/{tid}")
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
