"""roctx marker ranges around inference runs -> iterations of GPU kernels.

An application that wraps each run in a roctx range (``roctxRangePush`` /
``roctxRangePop`` or ``roctxRangeStart`` / ``roctxRangeStop``) lets GPU
kernels be counted per iteration, so KAR is computed from GPU dispatches.
rocprofv3 ``--marker-trace`` writes the ranges to ``*_marker_api_trace.csv``
(columns ``Domain, Function, Process_Id, Thread_Id, Correlation_Id,
Start_Timestamp, End_Timestamp``; ``Function`` is the range's message); a
rocpd database has them in its regions. Both become a *regions* table:

=========  =======  ==============================================
column     type     meaning
=========  =======  ==============================================
pid        int64    process that emitted the range
tid        int64    thread (0 for start/stop ranges), informative
name       string   the range message
start_ns   int64    range start, tracer clock ns
end_ns     int64    range end, tracer clock ns
=========  =======  ==============================================

Rules (:func:`iteration_ranges`):

* A range is an iteration when its name matches :data:`ITERATION_PATTERN`
  (configurable): optionally ``aaco.``, then ``iteration``, ``inference``,
  ``infer``, ``run`` or ``step`` as a whole word (``run``, ``run:bert``,
  ``inference 12`` match; ``running``, ``run_setup`` do not), case
  insensitive; or PyTorch's ``ProfilerStep#N``.
* Model: the text after the first ``:`` of the name (``inference:resnet50``
  -> ``resnet50``, surrounding spaces stripped), else the ``model`` option,
  else ``""`` (unknown: an empty ``model`` label). Use the model name the
  instrumented process reports in ``graph_info`` to get KAR (it needs that
  graph's node count); without a graph KAR stays null and
  ``kernels_per_iteration`` is still given.
* Zero-length ranges (``roctxMark`` instants) are not iterations. Of the
  matching ranges of one pid that overlap, only the first (earliest start)
  is kept; the others count ``overlapping_marker`` (one run at a time per
  process; nested matching ranges would otherwise split a run).
* ``iteration`` numbers a pid's kept ranges in start order from 0 (from
  ``first_index[pid]`` when a follower continues a file).

Kernels (:func:`attribute_kernels`) of the same pid whose HIP launch call
started inside a range (else whose start is inside it;
:func:`exporter.ranges.kernel_join_time`) take its ``iteration`` and
``model``; a kernel without a pid takes the ranges' pid when they all have
one. The resulting ITERATION_SPAN rows have ``source`` ``roctx``; the engine
reports their KAR with ``kar_source`` ``roctx``.

Readers: :func:`read_marker_regions` (CSV); a rocpd database's ``markers``
table (:func:`collectors.rocprof.rocpd.read_table`, regions of category
``MARKER_*``: ``start_ns, end_ns, pid, tid, name, category``) is a regions
table as it is. :func:`join_batches` applies the ranges to a run's kernel
batches.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from collectors.rocprof.launch import read_api_trace
from collectors.rocprof.rejects import Rejects
from exporter.ranges import join_ranges, kernel_join_time
from exporter.schema import conform

ITERATION_PATTERN = r"^(aaco\.)?(iteration|inference|infer|run|step)\b(?!_)|^ProfilerStep#\d+$"
"""Default pattern of range names that are iterations (``re.IGNORECASE``)."""

ITERATION_RE = re.compile(ITERATION_PATTERN, re.IGNORECASE)

SOURCE = "roctx"
"""``source`` of the ITERATION_SPAN rows made from marker ranges."""

REGIONS = pa.schema([
    pa.field("pid", pa.int64()), pa.field("tid", pa.int64()), pa.field("name", pa.string()),
    pa.field("start_ns", pa.int64()), pa.field("end_ns", pa.int64()),
])
"""The regions table (see the module doc)."""

RANGES = pa.schema([
    pa.field("start_ns", pa.int64()), pa.field("end_ns", pa.int64()),
    pa.field("duration_ns", pa.int64()), pa.field("source", pa.string()),
    pa.field("model", pa.string()), pa.field("pid", pa.int64()), pa.field("tid", pa.int64()),
    pa.field("iteration", pa.int64()), pa.field("kernel_count", pa.int64()),
])
"""Iteration ranges: ITERATION_SPAN columns (``conform("iteration_span", t)``)."""


def is_marker_trace(path: Path) -> bool:
    """A rocprofv3 marker trace by its name (``*marker_api_trace.csv``)."""
    return path.name.endswith("marker_api_trace.csv")


def read_marker_regions(path: Path | bytes, rejects: Rejects, *, name: str | None = None,
                        line_base: int = 0) -> pa.Table:
    """The regions (:data:`REGIONS`) of a rocprofv3 marker trace CSV (a file
    or an in-memory chunk with its header). Bad rows are counted in
    ``rejects`` as for any API trace (:func:`~collectors.rocprof.launch.read_api_trace`)."""
    api = read_api_trace(path, rejects, name=name, line_base=line_base)
    if api.num_rows == 0:
        return REGIONS.empty_table()
    fn = api["function"]
    if pa.types.is_dictionary(fn.type):
        fn = fn.cast(pa.string())
    return pa.table({"pid": api["pid"], "tid": api["tid"], "name": fn,
                     "start_ns": api["start_ns"], "end_ns": api["end_ns"]}).cast(REGIONS)


def iteration_ranges(regions: pa.Table, rejects: Rejects | None = None, *,
                     pattern: re.Pattern[str] = ITERATION_RE, model: str | None = None,
                     first_index: Mapping[int, int] | None = None,
                     where: str = "<markers>") -> pa.Table:
    """Iteration ranges (:data:`RANGES`, sorted by pid then start) of a regions
    table (:data:`REGIONS` columns; extra columns ignored), by the module
    doc's rules. ``pattern`` is matched (``search``) once per distinct name,
    never per row. Overlapping ranges count ``overlapping_marker`` in
    ``rejects``; rows without a pid are skipped (``missing_value``)."""
    rejects = rejects if rejects is not None else Rejects()
    if regions.num_rows == 0:
        return RANGES.empty_table()
    names = regions["name"].combine_chunks()
    if pa.types.is_dictionary(names.type):
        names = names.cast(pa.string())
    enc = pc.dictionary_encode(names.fill_null(""))
    values = enc.dictionary.to_pylist()
    matches = np.array([pattern.search(v) is not None for v in values], bool)
    suffix = [v.split(":", 1)[1].strip() if ":" in v else "" for v in values]
    codes = enc.indices.to_numpy(zero_copy_only=False)
    start = np.asarray(pc.fill_null(regions["start_ns"], 0).to_numpy(), np.int64)
    end = np.asarray(pc.fill_null(regions["end_ns"], 0).to_numpy(), np.int64)
    pidc = regions["pid"]
    if pidc.null_count:
        rejects.add("missing_value", where, None, "marker range without a process id")
        rejects.count("missing_value", pidc.null_count - 1)
    pid = np.asarray(pc.fill_null(pidc, -1).to_numpy(), np.int64)
    keep = matches[codes] & (end > start) & (pid >= 0)
    rows = np.flatnonzero(keep)
    rows = rows[np.lexsort((start[rows], pid[rows]))]
    p, s, e = pid[rows], start[rows], end[rows]
    new_pid = np.ones(len(rows), bool)
    new_pid[1:] = p[1:] != p[:-1]
    # a range overlaps an earlier kept one when it starts before that one ends
    ok = np.ones(len(rows), bool)
    for a, b in _segments(new_pid):
        seg_s, seg_e = s[a:b], e[a:b]
        if b - a < 2 or bool(np.all(seg_s[1:] >= np.maximum.accumulate(seg_e)[:-1])):
            continue  # the common case: no overlap in this pid
        last = np.iinfo(np.int64).min
        for i in range(a, b):  # only a pid with overlapping ranges: one step per range
            ok[i] = s[i] >= last
            if ok[i]:
                last = int(e[i])
    bad = int((~ok).sum())
    if bad:
        rejects.add("overlapping_marker", where, None,
                    f"{bad} iteration range(s) overlap an earlier one of the same process")
        rejects.count("overlapping_marker", bad - 1)
    rows, p, s, e = rows[ok], p[ok], s[ok], e[ok]
    new_pid = np.ones(len(rows), bool)
    new_pid[1:] = p[1:] != p[:-1]
    it = np.arange(len(rows), dtype=np.int64)
    first = np.flatnonzero(new_pid)
    it -= np.repeat(first, np.diff(np.append(first, len(rows))))
    if first_index:
        it += np.array([first_index.get(int(x), 0) for x in p[first]], np.int64).repeat(
            np.diff(np.append(first, len(rows))))
    default = model or ""
    mdl = [suffix[c] or default for c in codes[rows].tolist()]  # one per iteration
    tid = regions["tid"].combine_chunks().take(pa.array(rows)) if len(rows) else \
        pa.array([], pa.int64())
    return pa.table({
        "start_ns": s, "end_ns": e, "duration_ns": e - s,
        "source": pa.array([SOURCE] * len(rows), pa.string()),
        "model": pa.array(mdl, pa.string()), "pid": p, "tid": tid.cast(pa.int64()),
        "iteration": it, "kernel_count": np.zeros(len(rows), np.int64),
    }, schema=RANGES)


def _segments(new: np.ndarray[Any, Any]) -> list[tuple[int, int]]:
    starts = np.flatnonzero(new).tolist()
    if not starts:
        return []
    return list(zip(starts, [*starts[1:], len(new)], strict=True))


def attribute_kernels(kernels: pa.Table, ranges: pa.Table,
                      ) -> tuple[pa.Table, np.ndarray[Any, Any]]:
    """``kernels`` (KERNEL_SPAN columns; needs ``start_ns``) with ``model``
    and ``iteration`` set where an iteration range (:func:`iteration_ranges`)
    of the kernel's pid holds its join time
    (:func:`exporter.ranges.kernel_join_time`); rows already carrying an
    iteration, or held by no range, keep their values. A kernel without a pid
    takes the ranges' pid when there is exactly one (and keeps it only when
    a range holds it). Returns the table and, per range, the number of
    kernels joined to it (int64 array, ``len(ranges)``). Columnar: one
    ``searchsorted`` per pid (:func:`exporter.ranges.join_ranges`)."""
    n = kernels.num_rows
    counts = np.zeros(ranges.num_rows, np.int64)
    if n == 0 or ranges.num_rows == 0:
        return kernels, counts
    r_pid = ranges["pid"].to_numpy()
    pid_col = kernels["pid"] if "pid" in kernels.column_names else pa.nulls(n, pa.int64())
    pid = np.asarray(pc.fill_null(pid_col, -1).to_numpy(), np.int64)
    only = np.unique(r_pid)
    if len(only) == 1:
        pid = np.where(pid < 0, only[0], pid)
    free = np.ones(n, bool)
    if "iteration" in kernels.column_names:
        free = np.asarray(pc.is_null(kernels["iteration"]).to_numpy(zero_copy_only=False), bool)
    idx = join_ranges(pid, kernel_join_time(kernels), r_pid, ranges["start_ns"].to_numpy(),
                      ranges["end_ns"].to_numpy(), valid=free)
    hit = idx >= 0
    if not hit.any():
        return kernels, counts
    np.add.at(counts, idx[hit], 1)
    pos = np.maximum(idx, 0)
    mask = pa.array(~hit)
    new = {
        "iteration": pa.array(ranges["iteration"].to_numpy()[pos], mask=~hit),
        "model": ranges["model"].combine_chunks().take(pa.array(pos)),
        "pid": pa.array(pid, mask=pid < 0),
    }
    out = kernels
    for name, arr in new.items():
        if name in out.column_names:
            old = out[name].combine_chunks()
            if pa.types.is_dictionary(old.type):
                old = old.cast(old.type.value_type)
            arr = pc.if_else(mask, old.cast(arr.type), arr) if name != "pid" else \
                pc.coalesce(old.cast(pa.int64()), pc.if_else(mask, pa.nulls(n, pa.int64()), arr))
            out = out.set_column(out.column_names.index(name), name, arr)
        else:
            out = out.append_column(name, pc.if_else(mask, pa.nulls(n, arr.type), arr))
    return out, counts


def join_batches(batches: Iterable[pa.RecordBatch], ranges: pa.Table | None,
                 ) -> Iterator[tuple[str, pa.RecordBatch]]:
    """``("kernel_span", batch)`` for each KERNEL_SPAN batch with its kernels
    placed in ``ranges`` (:func:`attribute_kernels`), then, when ``ranges`` has
    rows, one ``("iteration_span", batch)`` of them with ``kernel_count`` the
    kernels joined to each. ``ranges`` ``None`` passes the batches through.
    Used by replay and the follower for CSV runs and rocpd databases alike."""
    counts = np.zeros(0 if ranges is None else ranges.num_rows, np.int64)
    for batch in batches:
        if ranges is not None and ranges.num_rows:
            joined, c = attribute_kernels(pa.Table.from_batches([batch]), ranges)
            batch, counts = conform("kernel_span", joined), counts + c
        yield "kernel_span", batch
    if ranges is not None and ranges.num_rows:
        spans = ranges.set_column(ranges.schema.get_field_index("kernel_count"),
                                  "kernel_count", pa.array(counts))
        yield "iteration_span", conform("iteration_span", spans)
