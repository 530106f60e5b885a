"""Put a tracer's timestamps on the wall clock the bus uses (``CLOCK_REALTIME`` ns).

rocprofv3 and rocprof write kernel and API timestamps on the HSA system
clock, a boot-relative clock (``CLOCK_BOOTTIME``; equal to ``CLOCK_MONOTONIC``
on a host that never suspended), while every other ``*_ns`` on the bus is
wall-clock time (:mod:`exporter.schema`). For files written on this host
while we watch (``run --rocprof-dir``, ``capture -- CMD``) the clock is
identified from the data: the first candidate (``realtime``, ``boottime``,
``monotonic``) whose offset puts the first kernel inside the time window in
which it must have run. Files recorded elsewhere (``replay``) keep their own
clock: there is no window to test them against.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.compute as pc

TIME_COLUMNS = ("start_ns", "end_ns")
"""KERNEL_SPAN columns that are points in time (``launch_api_ns`` and
``launch_delay_ns`` are durations)."""


def offsets_now() -> dict[str, int]:
    """``CLOCK_REALTIME - clock`` (ns) for each candidate clock, read now."""
    real = time.clock_gettime_ns(time.CLOCK_REALTIME)
    return {
        "realtime": 0,
        "boottime": real - time.clock_gettime_ns(time.CLOCK_BOOTTIME),
        "monotonic": real - time.clock_gettime_ns(time.CLOCK_MONOTONIC),
    }


def detect(first_ns: int, window: tuple[int, int], slack_ns: int = 60_000_000_000,
           offsets: dict[str, int] | None = None) -> tuple[str, int] | None:  # fmt: skip
    """``(clock, offset_ns)`` whose offset puts ``first_ns`` in ``window``
    (wall-clock ns, widened by ``slack_ns``), or ``None`` when none does.

    >>> detect(5_000, (1_000_000, 2_000_000), slack_ns=0,
    ...        offsets={"realtime": 0, "boottime": 1_500_000, "monotonic": 1_500_000})
    ('boottime', 1500000)
    >>> detect(1_200_000, (1_000_000, 2_000_000), slack_ns=0, offsets={"realtime": 0})
    ('realtime', 0)
    >>> detect(5, (1_000_000, 2_000_000), slack_ns=0, offsets={"realtime": 0}) is None
    True
    """
    lo, hi = window[0] - slack_ns, window[1] + slack_ns
    for name, off in (offsets if offsets is not None else offsets_now()).items():
        if lo <= first_ns + off <= hi:
            return name, off
    return None


def shift(batch: pa.RecordBatch, offset_ns: int) -> pa.RecordBatch:
    """``batch`` with ``offset_ns`` added to its :data:`TIME_COLUMNS` (nulls stay null)."""
    if offset_ns == 0:
        return batch
    cols = []
    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        if name in TIME_COLUMNS:
            col = pc.add(col, pa.scalar(offset_ns, pa.int64()))
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, schema=batch.schema)


class ClockMapper:
    """Identifies the clock from the first non-empty batch, then shifts every batch.

    Each call passes the wall-clock window the first kernel must lie in (used
    once, when that batch arrives). ``clock`` is ``None`` until then, and
    ``"unknown"`` (batches kept as recorded) when no candidate fits.
    """

    def __init__(self) -> None:
        self.clock: str | None = None
        self.offset_ns = 0

    def __call__(self, batch: pa.RecordBatch, window: tuple[int, int]) -> pa.RecordBatch:
        if self.clock is None and batch.num_rows:
            first = pc.min(batch.column("start_ns")).as_py()
            got = detect(int(first), window) if first is not None else None
            self.clock, self.offset_ns = got if got is not None else ("unknown", 0)
        return shift(batch, self.offset_ns)
