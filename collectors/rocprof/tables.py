"""Non-kernel rocprof CSVs as small Arrow tables (not put on the bus).

=============================  ==============================================
format                         columns (ns for times)
=============================  ==============================================
``rocprofv3_api_trace``        domain, function, pid, tid, correlation_id,
                               start_ns, end_ns (:func:`launch.read_api_trace`)
``rocprofv3_memory_copy``      kind, direction, stream_id, src_agent_id,
                               dst_agent_id, correlation_id, start_ns, end_ns
``rocprofv3_counter_collection``  correlation_id, dispatch_id, agent_id,
                               queue_id, pid, tid, kernel_name, counter_name,
                               counter_value (float64), start_ns, end_ns
``rocprof_stats``              name, calls, total_ns, avg_ns (float64),
                               percentage, min_ns, max_ns (v3 only)
``rocprofv3_agent_info``       the file's own columns, types inferred
=============================  ==============================================
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv

from collectors.rocprof.csvstream import Column, CsvStream
from collectors.rocprof.formats import detect
from collectors.rocprof.launch import read_api_trace
from collectors.rocprof.rejects import Rejects

SPECS: dict[str, tuple[Column, ...]] = {
    "rocprofv3_memory_copy": (
        Column("kind", ("Kind",), "name"),
        Column("direction", ("Direction",), "name"),
        Column("stream_id", ("Stream_Id",), "int"),
        Column("src_agent_id", ("Source_Agent_Id",), "agent"),
        Column("dst_agent_id", ("Destination_Agent_Id",), "agent"),
        Column("correlation_id", ("Correlation_Id",), "int"),
        Column("start_ns", ("Start_Timestamp",), "int", required=True),
        Column("end_ns", ("End_Timestamp",), "int", required=True),
    ),
    "rocprofv3_counter_collection": (
        Column("correlation_id", ("Correlation_Id",), "int"),
        Column("dispatch_id", ("Dispatch_Id",), "int"),
        Column("agent_id", ("Agent_Id",), "agent"),
        Column("queue_id", ("Queue_Id",), "int"),
        Column("pid", ("Process_Id",), "int"),
        Column("tid", ("Thread_Id",), "int"),
        Column("kernel_name", ("Kernel_Name",), "name"),
        Column("counter_name", ("Counter_Name",), "name", required=True),
        Column("counter_value", ("Counter_Value",), "float", required=True),
        Column("start_ns", ("Start_Timestamp",), "int"),
        Column("end_ns", ("End_Timestamp",), "int"),
    ),
    "rocprof_stats": (
        Column("name", ("Name",), "str", required=True),
        Column("calls", ("Calls",), "int", required=True),
        Column("total_ns", ("TotalDurationNs",), "int", required=True),
        Column("avg_ns", ("AverageNs",), "float"),
        Column("percentage", ("Percentage",), "float"),
        Column("min_ns", ("MinNs",), "int"),
        Column("max_ns", ("MaxNs",), "int"),
    ),
}


def read_table(path: Path, rejects: Rejects, fmt: str | None = None) -> pa.Table:
    """Read a non-kernel rocprof CSV (format auto-detected) as one table.

    Raises :class:`~collectors.rocprof.formats.UnknownFormat` for an unknown
    file and ``ValueError`` for a kernel format (use :mod:`replay`)."""
    fmt = fmt or detect(path)
    if fmt == "rocprofv3_api_trace":
        return read_api_trace(path, rejects)
    if fmt == "rocprofv3_agent_info":
        return pcsv.read_csv(path)
    if fmt not in SPECS:
        raise ValueError(f"{path}: {fmt} carries kernel spans; use replay.iter_file_spans")
    parts = [pa.Table.from_batches([b]).drop_columns(["_row"])
             for b in CsvStream(path, SPECS[fmt], rejects).batches()]
    if not parts:
        return pa.table({c.out: pa.array([], pa.null()) for c in SPECS[fmt]})
    return pa.concat_tables(parts, promote_options="permissive")
