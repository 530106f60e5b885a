"""HIP launch join: kernel dispatch <- HIP launch API call, by correlation id.

Definitions (as in HTA's ``get_cuda_kernel_launch_stats``: for each kernel
joined to its runtime launch event by correlation id, *launch delay* is the
kernel's start minus the end of the launch call):

* ``launch_api_ns``   = API ``End_Timestamp`` - API ``Start_Timestamp``
  (CPU time spent inside ``hipLaunchKernel`` & co.)
* ``launch_delay_ns`` = kernel ``Start_Timestamp`` - API ``End_Timestamp``
  (may be negative when the GPU starts the kernel before the call returns)

Only calls in :data:`LAUNCH_FUNCTIONS` join. Within one launch table a
correlation id must be unique: later duplicates are dropped as
``duplicate_id``. Kernels without a matching call keep nulls, and so does a
kernel whose matched call is implausible: one that starts more than
:data:`MAX_LAUNCH_DELAY_NS` after the call returned, or that long before it
(a call of another run or clock with the same correlation id, e.g. two files
of different runs side by side; rocprofiler-sdk's documentation samples
``kernel_trace.csv`` and ``hip_runtime_trace.csv`` pair correlation ids 4.1
days apart). Such kernels are counted as the note ``launch_mismatch``.

The join is columnar: the launch table is sorted once by correlation id
(:class:`LaunchIndex`) and each kernel batch is matched with
``numpy.searchsorted``; memory is 3 int64 per launch call.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from collectors.rocprof.csvstream import DEFAULT_BLOCK, Column, CsvStream
from collectors.rocprof.rejects import Rejects

LAUNCH_FUNCTIONS: frozenset[str] = frozenset(
    {
        "hipLaunchKernel",
        "hipLaunchKernel_spt",
        "hipExtLaunchKernel",
        "hipModuleLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipHccModuleLaunchKernel",
        "hipModuleLaunchKernelEx",
        "hipLaunchKernelExC",
        "hipDrvLaunchKernelEx",
        "hipLaunchCooperativeKernel",
        "hipLaunchCooperativeKernel_spt",
        "hipModuleLaunchCooperativeKernel",
        "hipLaunchCooperativeKernelMultiDevice",
        "hipModuleLaunchCooperativeKernelMultiDevice",
        "hipExtLaunchMultiKernelMultiDevice",
        "hipLaunchByPtr",
        "hipGraphLaunch",
        "hipGraphLaunch_spt",
        "cudaLaunchKernel",  # Kineto on CUDA, for completeness
    }
)
"""HIP runtime calls that enqueue kernels."""

API_COLUMNS = (
    Column("domain", ("Domain",), "name"),
    Column("function", ("Function",), "name", required=True),
    Column("pid", ("Process_Id",), "int"),
    Column("tid", ("Thread_Id",), "int"),
    Column("correlation_id", ("Correlation_Id",), "int", required=True),
    Column("start_ns", ("Start_Timestamp",), "int", required=True),
    Column("end_ns", ("End_Timestamp",), "int", required=True),
)
"""rocprofv3 API trace columns (hip_api_trace, hip_trace, hsa, marker, rccl)."""

MAX_LAUNCH_DELAY_NS = 600 * 10**9
"""Largest ``|launch_delay_ns|`` taken as a kernel's own launch (10 min): a
real launch delay is microseconds to seconds (negative only by clock
calibration, microseconds)."""

LAUNCH_SCHEMA = pa.schema(
    [
        pa.field("correlation_id", pa.int64(), nullable=False),
        pa.field("api_start_ns", pa.int64(), nullable=False),
        pa.field("api_end_ns", pa.int64(), nullable=False),
    ]
)


def read_api_trace(
    path: Path | bytes,
    rejects: Rejects,
    *,
    name: str | None = None,
    block_size: int = DEFAULT_BLOCK,
    line_base: int = 0,
) -> pa.Table:
    """All rows of a rocprofv3 API trace CSV as a table with columns
    ``domain, function, pid, tid, correlation_id, start_ns, end_ns`` (ns),
    always all of them (an optional column absent from the header is all null;
    a file without rows gives an empty table of these columns).

    Rows with empty ids/timestamps (``missing_value``) or end < start
    (``end_before_start``) are dropped with file:line."""
    stream = CsvStream(path, API_COLUMNS, rejects, name=name, block_size=block_size,
                       line_base=line_base)
    parts = []
    for b in stream.batches():
        t = pa.Table.from_batches([b])
        t = _drop_bad_times(t, stream, rejects, ("correlation_id", "start_ns", "end_ns"))
        parts.append(t.drop_columns(["_row"]))
    if not parts:
        return pa.table({c.out: pa.array([], _API_TYPES[c.kind]) for c in API_COLUMNS})
    t = pa.concat_tables(parts, promote_options="permissive")
    for c in API_COLUMNS:  # optional columns the header lacks: all null
        if c.out not in t.column_names:
            t = t.append_column(c.out, pa.nulls(t.num_rows, _API_TYPES[c.kind]))
    return t.select([c.out for c in API_COLUMNS])


_API_TYPES = {"name": pa.string(), "int": pa.int64()}


def _drop_bad_times(
    t: pa.Table, stream: CsvStream, rejects: Rejects, required: tuple[str, ...]
) -> pa.Table:
    bad_null = None
    for c in required:
        m = pc.is_null(t[c])
        bad_null = m if bad_null is None else pc.or_(bad_null, m)
    assert bad_null is not None
    _report(t, bad_null, "missing_value", stream, rejects, "empty required field")
    t = t.filter(pc.invert(bad_null))
    back = pc.less(t["end_ns"], t["start_ns"])
    _report(t, back, "end_before_start", stream, rejects, "end timestamp < start timestamp")
    return t.filter(pc.invert(back))


def _report(
    t: pa.Table, mask: pa.ChunkedArray | pa.Array, reason: str, stream: CsvStream,
    rejects: Rejects, detail: str,
) -> None:
    idx = pc.indices_nonzero(pc.fill_null(mask, False)).to_pylist()
    if not idx:
        return
    rows = t["_row"]
    for i in idx[:3]:
        rejects.add(reason, stream.name, stream.line_of(rows[i].as_py()), detail)
    rejects.count(reason, len(idx) - min(3, len(idx)))


def launch_calls(api: pa.Table, rejects: Rejects, name: str = "<api>") -> pa.Table:
    """Launch calls of ``api`` (a :func:`read_api_trace` table) in
    :data:`LAUNCH_SCHEMA`; calls without a correlation id or timestamps are
    dropped as ``missing_value``, duplicate correlation ids after the first as
    ``duplicate_id``."""
    fn = api["function"]
    if pa.types.is_dictionary(fn.type):
        fn = fn.cast(pa.string())
    t = api.filter(pc.is_in(fn, value_set=pa.array(sorted(LAUNCH_FUNCTIONS))))
    ok = pc.and_(pc.and_(pc.is_valid(t["correlation_id"]), pc.is_valid(t["start_ns"])),
                 pc.is_valid(t["end_ns"]))
    nbad = t.num_rows - pc.sum(ok).as_py() if t.num_rows else 0
    if nbad:
        rejects.add("missing_value", name, None,
                    "launch call without correlation id or timestamps", n=nbad)
        t = t.filter(ok)
    t = pa.table(
        {
            "correlation_id": t["correlation_id"],
            "api_start_ns": t["start_ns"],
            "api_end_ns": t["end_ns"],
        }
    ).cast(LAUNCH_SCHEMA)
    ids = t["correlation_id"].to_numpy()
    _, first = np.unique(ids, return_index=True)
    if len(first) != len(ids):
        keep = np.zeros(len(ids), dtype=bool)
        keep[first] = True
        dups = ids[~keep]
        for d in dups[:3].tolist():
            rejects.add("duplicate_id", name, None, f"launch correlation id {d} repeated")
        rejects.count("duplicate_id", len(dups) - min(3, len(dups)))
        t = t.filter(pa.array(keep))
    return t


class LaunchIndex:
    """Launch calls sorted by correlation id, for repeated batch joins.

    >>> li = LaunchIndex(pa.table({"correlation_id": [7, 3], "api_start_ns": [100, 10],
    ...                            "api_end_ns": [150, 20]}))
    >>> b = pa.table({"start_ns": [40, 170, 5], "correlation_id": [3, 7, 9]})
    >>> out = li.join(b)
    >>> out["launch_api_ns"].to_pylist(), out["launch_delay_ns"].to_pylist()
    ([10, 50, None], [20, 20, None])
    """

    def __init__(self, launches: pa.Table | Iterable[pa.Table] = ()) -> None:
        self.mismatched = 0
        """Kernels whose matched call was implausible (see :meth:`join`)."""
        self._ids = np.empty(0, np.int64)
        self._start = np.empty(0, np.int64)
        self._end = np.empty(0, np.int64)
        if isinstance(launches, pa.Table):
            launches = [launches]
        for t in launches:
            self.add(t)

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, launches: pa.Table) -> None:
        """Add launch calls (:data:`LAUNCH_SCHEMA` columns); ids already present
        keep their first call."""
        if launches.num_rows == 0:
            return
        ids = np.concatenate([self._ids, launches["correlation_id"].to_numpy()])
        st = np.concatenate([self._start, launches["api_start_ns"].to_numpy()])
        en = np.concatenate([self._end, launches["api_end_ns"].to_numpy()])
        ids, first = np.unique(ids, return_index=True)
        self._ids, self._start, self._end = ids, st[first], en[first]

    def trim(self, max_calls: int) -> None:
        """Keep only the ``max_calls`` highest correlation ids (live follow)."""
        if len(self._ids) > max_calls:
            self._ids = self._ids[-max_calls:]
            self._start = self._start[-max_calls:]
            self._end = self._end[-max_calls:]

    def join(self, batch: pa.Table, rejects: Rejects | None = None,
             where: str = "<kernels>") -> pa.Table:
        """``batch`` (needs ``start_ns``, ``correlation_id``) with
        ``launch_api_ns`` and ``launch_delay_ns`` set where a call matches
        (existing non-null values are kept where none does). A match whose
        ``|launch_delay_ns|`` exceeds :data:`MAX_LAUNCH_DELAY_NS` is not
        joined: counted in :attr:`mismatched` and, with ``rejects``, as the
        note ``launch_mismatch`` (an example naming ``where`` and the
        correlation id)."""
        n = batch.num_rows
        corr = batch["correlation_id"]
        if len(self._ids) == 0 or n == 0:
            return batch
        c = pc.fill_null(corr, -1).to_numpy() if corr.null_count else corr.to_numpy()
        c = np.asarray(c, dtype=np.int64)
        pos = np.searchsorted(self._ids, c)
        pos_c = np.minimum(pos, len(self._ids) - 1)
        hit = (self._ids[pos_c] == c) & (c >= 0) if corr.null_count else self._ids[pos_c] == c
        start = np.asarray(batch["start_ns"].to_numpy(), dtype=np.int64)
        gap = start - self._end[pos_c]
        bad = hit & (np.abs(gap) > MAX_LAUNCH_DELAY_NS)
        if bad.any():
            hit &= ~bad
            k = int(np.argmax(bad))
            self.mismatched += int(bad.sum())
            if rejects is not None:
                rejects.add("launch_mismatch", where, None,
                            f"correlation id {int(c[k])}: the kernel starts "
                            f"{gap[k] / 1e9:,.0f} s from the end of its launch call "
                            f"(over {MAX_LAUNCH_DELAY_NS // 10**9} s: a call of another run "
                            f"or clock); not joined", n=int(bad.sum()))
        api = pa.array(self._end[pos_c] - self._start[pos_c], mask=~hit)
        delay = pa.array(gap, mask=~hit)
        for name, arr in (("launch_api_ns", api), ("launch_delay_ns", delay)):
            if name in batch.column_names:
                arr = pc.coalesce(arr, batch[name].combine_chunks())
                batch = batch.set_column(batch.column_names.index(name), name, arr)
            else:
                batch = batch.append_column(name, arr)
        return batch
