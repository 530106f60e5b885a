"""CSV kernel-dispatch formats -> ``kernel_span`` batches (streaming).

Column mappings (CSV header -> KERNEL_SPAN field); timestamps are ns on the
tracer's clock (rocprofv3/rocprof: the boot-relative HSA system clock; live
sources move them onto the wall clock, :mod:`collectors.rocprof.clock`):

=================  =====================  ================  ====================
field              rocprofv3 kernel_trace  rocprof v1         rocprof-compute
                                          results.csv        timestamps.csv
=================  =====================  ================  ====================
start_ns           Start_Timestamp        BeginNs            Start_Timestamp
end_ns             End_Timestamp          EndNs              End_Timestamp
kernel_name        Kernel_Name            KernelName         Kernel_Name
agent_id           Agent_Id ("Agent 4"    gpu-id             GPU_ID
                   or 4 in 2024 schema)
queue_id           Queue_Id               queue-id           Queue_ID / queue-id
stream_id          Stream_Id (current)    -                  -
pid                directory <pid>/       pid                PID / pid
tid                Thread_Id              tid                TID / tid
dispatch_id        Dispatch_Id            Index              Dispatch_ID
correlation_id     Correlation_Id         -                  Correlation_ID
grid_x/y/z         Grid_Size_X/Y/Z        grd (-> grid_x)    Grid_Size (-> x)
workgroup_x/y/z    Workgroup_Size_X/Y/Z   wgr (-> x)         Workgroup_Size (-> x)
launch_delay_ns    HIP join (launch.py)   BeginNs-DispatchNs BeginNs-DispatchNs
                                                             (only if DispatchNs)
=================  =====================  ================  ====================

rocprof-compute on MI300 writes timestamps in exponent notation
(``8.1097E+14``); those are parsed as floats and rounded (precision is what
the file holds: 5 significant digits).

Row rules (drops counted in :class:`~collectors.rocprof.rejects.Rejects`
with file:line): empty start/end/name -> ``missing_value``; end < start ->
``end_before_start``; a dispatch id repeated within one batch ->
``duplicate_id`` (first kept); a kernel name longer than
:data:`MAX_NAME_CHARS` is cut to that length and counted as the note
``name_truncated`` (the row is kept).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from collectors.rocprof.csvstream import DEFAULT_BLOCK, Column, CsvStream
from collectors.rocprof.families import classify
from collectors.rocprof.launch import LaunchIndex
from collectors.rocprof.rejects import Rejects
from exporter.schema import conform

MAX_NAME_CHARS = 4096
"""Longer kernel names are truncated to this many characters."""

SOURCE = {
    "rocprofv3_kernel_trace": "rocprofv3",
    "rocprof_v1_results": "rocprof",
    "rocprof_compute_timestamps": "rocprof-compute",
    "rocprofv3_json": "rocprofv3",
    "kineto_json": "kineto",
}
"""Format id -> ``source`` column value."""

_xyz = ("x", "y", "z")
SPECS: dict[str, tuple[Column, ...]] = {
    "rocprofv3_kernel_trace": (
        Column("start_ns", ("Start_Timestamp",), "int", required=True),
        Column("end_ns", ("End_Timestamp",), "int", required=True),
        Column("kernel_name", ("Kernel_Name",), "name", required=True),
        Column("agent_id", ("Agent_Id",), "agent"),
        Column("queue_id", ("Queue_Id",), "int"),
        Column("stream_id", ("Stream_Id",), "int"),
        Column("tid", ("Thread_Id",), "int"),
        Column("dispatch_id", ("Dispatch_Id",), "int"),
        Column("correlation_id", ("Correlation_Id",), "int"),
        *(Column(f"grid_{a}", (f"Grid_Size_{a.upper()}",), "int") for a in _xyz),
        *(Column(f"workgroup_{a}", (f"Workgroup_Size_{a.upper()}",), "int") for a in _xyz),
    ),
    "rocprof_v1_results": (
        Column("start_ns", ("BeginNs",), "int", required=True),
        Column("end_ns", ("EndNs",), "int", required=True),
        Column("kernel_name", ("KernelName",), "name", required=True),
        Column("dispatch_ns", ("DispatchNs",), "int"),
        Column("agent_id", ("gpu-id",), "agent"),
        Column("queue_id", ("queue-id",), "int"),
        Column("pid", ("pid",), "int"),
        Column("tid", ("tid",), "int"),
        Column("dispatch_id", ("Index",), "int"),
        Column("grid_x", ("grd",), "int"),
        Column("workgroup_x", ("wgr",), "int"),
    ),
    "rocprof_compute_timestamps": (
        Column("start_ns", ("Start_Timestamp",), "float_int", required=True),
        Column("end_ns", ("End_Timestamp",), "float_int", required=True),
        Column("kernel_name", ("Kernel_Name",), "name", required=True),
        Column("dispatch_ns", ("DispatchNs",), "float_int"),
        Column("agent_id", ("GPU_ID",), "agent"),
        Column("queue_id", ("Queue_ID", "queue-id"), "int"),
        Column("pid", ("PID", "pid"), "int"),
        Column("tid", ("TID", "tid"), "int"),
        Column("dispatch_id", ("Dispatch_ID",), "int"),
        Column("correlation_id", ("Correlation_ID",), "int"),
        Column("grid_x", ("Grid_Size",), "int"),
        Column("workgroup_x", ("Workgroup_Size",), "int"),
    ),
}
"""Per CSV kernel format: output column <- CSV column (kind)."""


def iter_csv_kernel_spans(
    data: Path | bytes,
    fmt: str,
    rejects: Rejects,
    *,
    launches: LaunchIndex | None = None,
    pid: int | None = None,
    name: str | None = None,
    block_size: int = DEFAULT_BLOCK,
    line_base: int = 0,
) -> Iterator[pa.RecordBatch]:
    """Stream ``data`` (a file or an in-memory chunk with header) of CSV
    kernel format ``fmt`` (a key of :data:`SPECS`) as KERNEL_SPAN batches.

    ``launches`` fills ``launch_api_ns``/``launch_delay_ns``; ``pid`` is used
    when the file has no pid column (rocprofv3 puts it in the directory
    name). At most ``block_size`` bytes of CSV are held at once."""
    stream = CsvStream(data, SPECS[fmt], rejects, name=name, block_size=block_size,
                       line_base=line_base)
    for raw in stream.batches():
        t = finish_spans(pa.Table.from_batches([raw]), SOURCE[fmt], rejects, stream, pid=pid)
        if launches is not None and "correlation_id" in t.column_names:
            t = launches.join(t, rejects, stream.name)
        if t.num_rows:
            yield conform("kernel_span", t)


def finish_spans(
    t: pa.Table,
    source: str,
    rejects: Rejects,
    stream: CsvStream | None = None,
    *,
    pid: int | None = None,
    file: str = "<input>",
) -> pa.Table:
    """Validate rows and add derived columns (duration, family, source...).

    ``t`` has at least ``start_ns``, ``end_ns``, ``kernel_name`` and, when
    ``stream`` is given, ``_row``; optional ``dispatch_ns`` becomes
    ``launch_delay_ns = start_ns - dispatch_ns``. Returns the kept rows."""
    where = stream.name if stream else file

    def line(i: int) -> int | None:
        if stream is None or "_row" not in t.column_names:
            return None
        return stream.line_of(t["_row"][i].as_py())

    def drop(mask: pa.ChunkedArray | pa.Array, reason: str, detail: str) -> None:
        nonlocal t
        m = pc.fill_null(mask, False)
        if not pc.any(m).as_py():
            return
        idx = pc.indices_nonzero(m).to_pylist()
        for i in idx[:3]:
            rejects.add(reason, where, line(i), detail)
        rejects.count(reason, len(idx) - min(3, len(idx)))
        t = t.filter(pc.invert(m))

    nulls = pc.or_(pc.or_(pc.is_null(t["start_ns"]), pc.is_null(t["end_ns"])),
                   pc.is_null(t["kernel_name"]))
    drop(nulls, "missing_value", "empty start/end timestamp or kernel name")
    drop(pc.less(t["end_ns"], t["start_ns"]), "end_before_start", "end timestamp < start")
    if "dispatch_id" in t.column_names and t.num_rows and t["dispatch_id"].null_count == 0:
        ids = t["dispatch_id"].to_numpy()
        _, first = np.unique(ids, return_index=True)
        if len(first) != len(ids):
            dup = np.ones(len(ids), dtype=bool)
            dup[first] = False
            drop(pa.array(dup), "duplicate_id", "dispatch id repeated")
    name = t["kernel_name"].combine_chunks()
    if not pa.types.is_dictionary(name.type):
        name = name.dictionary_encode()
    dictionary = name.dictionary
    lengths = pc.utf8_length(dictionary)
    if len(dictionary) and pc.max(lengths).as_py() > MAX_NAME_CHARS:
        long_vals = pc.greater(lengths, MAX_NAME_CHARS)
        long_rows = pc.take(long_vals, name.indices)
        idx = pc.indices_nonzero(pc.fill_null(long_rows, False)).to_pylist()
        for i in idx[:3]:
            rejects.add("name_truncated", where, line(i),
                        f"kernel name of {lengths[name.indices[i].as_py()].as_py()} chars "
                        f"cut to {MAX_NAME_CHARS}")
        rejects.count("name_truncated", len(idx) - min(3, len(idx)))
        dictionary = pc.utf8_slice_codeunits(dictionary, 0, MAX_NAME_CHARS)
        name = pa.DictionaryArray.from_arrays(name.indices, dictionary)
    n = t.num_rows
    cols: dict[str, pa.Array | pa.ChunkedArray] = {
        c: t[c] for c in t.column_names if c not in ("_row", "dispatch_ns", "kernel_name")
    }
    cols["kernel_name"] = name
    cols["duration_ns"] = pc.subtract(t["end_ns"], t["start_ns"])
    cols["kernel_family"] = classify(name)
    cols["source"] = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(n, np.int32)), pa.array([source])
    )
    cols["device_type"] = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(n, np.int32)), pa.array(["gpu"])
    )
    if "dispatch_ns" in t.column_names:
        cols["launch_delay_ns"] = pc.subtract(t["start_ns"], t["dispatch_ns"])
    if pid is not None and "pid" not in cols:
        cols["pid"] = pa.array(np.full(n, pid, np.int64))
    return pa.table(cols)
