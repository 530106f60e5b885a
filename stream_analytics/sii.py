"""SII, scheduler interference index: run-queue wait / wall time.

For a set of :data:`exporter.schema.SCHED_SAMPLE` rows (one per thread per
interval) SII is

    SII = sum(runq_wait_ns) / sum(interval_ns)   over *active* rows,

where a row is active when the thread wanted a CPU at all in that interval
(``run_ns + runq_wait_ns > 0``). Idle pool threads that slept through the
interval therefore do not dilute the index. The value is the share of the
workload threads' wall time spent runnable but not running; 0 on an idle
machine, about ``1 - cores/runnable_threads`` under CPU oversubscription.

Sources: ``/proc/<pid>/task/<tid>/schedstat`` field 2 (``proc`` source) or
``sched:sched_wakeup``/``sched:sched_switch`` tracepoints (``ebpf`` source);
both fill the same columns, so SII is computed the same way from either.

>>> import pyarrow as pa
>>> t = pa.table({"runq_wait_ns": [250, 0, 0], "run_ns": [750, 0, 500],
...               "interval_ns": [1000, 1000, 1000]})
>>> SII().update(t).get()
0.125
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def active_totals(table: pa.Table | pa.RecordBatch) -> tuple[int, int]:
    """``(runq_wait_ns, interval_ns)`` summed over active rows of ``table``."""
    if table.num_rows == 0:
        return 0, 0
    active = pc.greater(pc.add(table.column("run_ns"), table.column("runq_wait_ns")), 0)
    wait = pc.sum(pc.filter(table.column("runq_wait_ns"), active)).as_py() or 0
    wall = pc.sum(pc.filter(table.column("interval_ns"), active)).as_py() or 0
    return int(wait), int(wall)


class SII:
    """Running SII over everything passed to :meth:`update`."""

    def __init__(self) -> None:
        self.wait_ns = 0
        self.wall_ns = 0

    def update(self, table: pa.Table | pa.RecordBatch) -> SII:
        """Add a SCHED_SAMPLE batch (only the three columns above are read)."""
        w, t = active_totals(table)
        self.wait_ns += w
        self.wall_ns += t
        return self

    def get(self) -> float | None:
        """The index in [0, 1], or ``None`` before any active thread was seen."""
        return self.wait_ns / self.wall_ns if self.wall_ns else None
