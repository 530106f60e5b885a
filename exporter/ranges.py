"""Point-in-range join: which time range of its process holds each event.

One helper shared by every place that attributes kernels to iterations by
time: the Kineto ``ProfilerStep#N`` join (:mod:`collectors.rocprof.jsonfmt`),
the roctx marker join (:mod:`collectors.rocprof.markers`) and the engine's
online join of instrumented iteration spans (:mod:`stream_analytics.engine`).

Columnar: the ranges are sorted once by (pid, start) and each pid's events
are placed with one ``numpy.searchsorted``; Python loops over pids only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Arr = np.ndarray[Any, Any]


def kernel_join_time(t: pa.Table) -> Arr:
    """Per kernel row of ``t`` (KERNEL_SPAN columns), the instant an iteration
    must contain, int64 ns: the start of its HIP launch call, ``start_ns -
    launch_delay_ns - launch_api_ns`` (the launch join's definitions,
    :mod:`collectors.rocprof.launch`), or ``start_ns - launch_delay_ns``
    (rocprof v1: the dispatch time) when only the delay is known, else
    ``start_ns``. Missing columns count as unknown.

    >>> kernel_join_time(pa.table({"start_ns": [100, 100, 100],
    ...     "launch_api_ns": [5, None, None], "launch_delay_ns": [20, 30, None]})).tolist()
    [75, 70, 100]
    """
    n = t.num_rows
    out = np.asarray(t.column("start_ns").to_numpy(), np.int64).copy()
    for name in ("launch_delay_ns", "launch_api_ns"):
        if name in t.column_names and n:
            c = t.column(name)
            if c.null_count < n:
                out -= np.asarray(pc.fill_null(c, 0).to_numpy(), np.int64)
    return out


def join_ranges(pid: Arr, t: Arr, r_pid: Arr, r_start: Arr, r_end: Arr,
                valid: Arr | None = None) -> Arr:
    """Index (into the ``r_*`` arrays) of the range holding each event, or -1.

    ``pid``, ``t``: int64 arrays of length n (event process and time, ns);
    ``r_pid``, ``r_start``, ``r_end``: int64 arrays of length m (ranges,
    closed ``[r_start, r_end]``, any order); ``valid``: optional bool mask of
    the events to place (others get -1). An event belongs to the range of its
    pid with the latest start at or before ``t``, if that range has not ended
    before ``t``: ranges of one pid are expected not to overlap (one run at a
    time per process); with nested ranges an event after the inner one ends
    belongs to none. Returns an int64 array of length n.

    >>> join_ranges(np.array([1, 1, 2, 1]), np.array([5, 25, 5, 12]),
    ...             np.array([1, 1, 2]), np.array([10, 0, 0]), np.array([20, 9, 3])).tolist()
    [1, -1, -1, 0]
    """
    n = len(t)
    out = np.full(n, -1, np.int64)
    if n == 0 or len(r_start) == 0:
        return out
    order = np.lexsort((r_start, r_pid))
    sp, ss, se = r_pid[order], r_start[order], r_end[order]
    bounds = np.flatnonzero(np.diff(sp)) + 1
    lo = np.concatenate([[0], bounds])
    hi = np.append(bounds, len(sp))
    ok_evt = np.ones(n, bool) if valid is None else valid
    for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
        sel = np.flatnonzero(ok_evt & (pid == sp[a]))
        if len(sel) == 0:
            continue
        j = np.searchsorted(ss[a:b], t[sel], side="right") - 1
        hit = (j >= 0) & (t[sel] <= se[a:b][np.maximum(j, 0)])
        out[sel[hit]] = order[a + j[hit]]
    return out
