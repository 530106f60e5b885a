"""Format detection for rocprof-family outputs.

:func:`detect` looks at a file's first bytes (gunzipped for ``.gz``): JSON
by its top-level key, CSV by its header columns, a rocpd database by the SQLite
magic header plus the presence of ``rocpd_*`` tables (its schema version is
checked when it is read, :mod:`collectors.rocprof.rocpd`). A file it cannot place
raises :class:`UnknownFormat` naming every format in :data:`KNOWN`.

>>> detect_header(["Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Kernel_Name",
...                "Start_Timestamp", "End_Timestamp"])
'rocprofv3_kernel_trace'
>>> detect_header(["Index", "KernelName", "DispatchNs", "BeginNs", "EndNs"])
'rocprof_v1_results'
"""

from __future__ import annotations

import gzip
import sqlite3
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from collectors.rocprof.csvstream import read_header

SQLITE_MAGIC = b"SQLite format 3\x00"

KNOWN: dict[str, str] = {
    "rocprofv3_kernel_trace": "rocprofv3 *_kernel_trace.csv (current: 'Agent 4' + Stream_Id; "
    "2024: integer Agent_Id + Private/Group_Segment_Size)",
    "rocprofv3_api_trace": "rocprofv3 *_hip_api_trace.csv / *_hip_trace.csv / hsa / marker / "
    "rccl API traces (Domain,Function,...,Correlation_Id,Start_Timestamp,End_Timestamp)",
    "rocprofv3_memory_copy": "rocprofv3 *_memory_copy_trace.csv",
    "rocprofv3_counter_collection": "rocprofv3 *_counter_collection.csv",
    "rocprofv3_agent_info": "rocprofv3 *_agent_info.csv",
    "rocprof_stats": "rocprof v1 results.stats.csv / rocprofv3 *_stats.csv "
    "(Name,Calls,TotalDurationNs,AverageNs,Percentage)",
    "rocprof_v1_results": "rocprof v1 results.csv (KernelName,DispatchNs,BeginNs,EndNs)",
    "rocprof_compute_timestamps": "rocprof-compute timestamps.csv "
    "(Dispatch_ID,Kernel_Name,Start_Timestamp,End_Timestamp)",
    "rocprof_compute_pmc_perf": "rocprof-compute pmc_perf.csv (one row per dispatch, one "
    "column per counter: SQ_*, TCC_*, TCP_*)",
    "rocprofv3_json": "rocprofv3 --output-format json (top key 'rocprofiler-sdk-tool')",
    "kineto_json": "Kineto / PyTorch profiler Chrome trace JSON(.gz) with 'traceEvents'",
    "rocpd": "rocprofv3 rocpd SQLite database (default output since ROCm 7.0, "
    "*_results.db; schema_version 3)",
}
"""Format id -> human description (also the text of :class:`UnknownFormat`)."""

KERNEL_FORMATS = frozenset(
    {
        "rocprofv3_kernel_trace",
        "rocprof_v1_results",
        "rocprof_compute_timestamps",
        "rocprofv3_json",
        "kineto_json",
        "rocpd",
    }
)
"""Formats that carry kernel dispatches (-> ``kernel_span``)."""


class UnknownFormat(ValueError):
    """The file matches none of :data:`KNOWN`; the message lists them."""

    reason = "unknown_format"

    def __init__(self, path: str, detail: str) -> None:
        known = "; ".join(f"{k}: {v}" for k, v in KNOWN.items())
        super().__init__(f"{path}: unrecognised rocprof output ({detail}); known formats: {known}")


def detect_header(header: Sequence[str]) -> str | None:
    """Format id for a CSV header, or ``None``."""
    h = set(header)
    if {"KernelName", "BeginNs", "EndNs"} <= h:
        return "rocprof_v1_results"
    if {"Name", "Calls", "TotalDurationNs"} <= h:
        return "rocprof_stats"
    if {"Dispatch_ID", "Kernel_Name"} <= h and any(c.startswith(("SQ_", "TCC_", "TCP_"))
                                                   for c in h):
        return "rocprof_compute_pmc_perf"  # counters, not kernels: timestamps.csv has those
    if {"Dispatch_ID", "Kernel_Name", "Start_Timestamp", "End_Timestamp"} <= h:
        return "rocprof_compute_timestamps"
    if {"Counter_Name", "Counter_Value"} <= h:
        return "rocprofv3_counter_collection"
    if {"Kernel_Name", "Start_Timestamp", "End_Timestamp", "Agent_Id"} <= h:
        return "rocprofv3_kernel_trace"
    if {"Direction", "Source_Agent_Id", "Destination_Agent_Id"} <= h:
        return "rocprofv3_memory_copy"
    if {"Function", "Correlation_Id", "Start_Timestamp", "End_Timestamp"} <= h:
        return "rocprofv3_api_trace"
    if ("Node_Id" in h or "Logical_Node_Id" in h) and ("Agent_Type" in h or "Name" in h):
        return "rocprofv3_agent_info"
    return None


def read_head(path: Path, n: int = 1 << 16) -> bytes:
    """First ``n`` bytes of ``path`` (decompressed when it ends in ``.gz``)."""
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as g:
            return g.read(n)
    with path.open("rb") as f:
        return f.read(n)


def detect(path: Path) -> str:
    """Format id of ``path`` (a key of :data:`KNOWN`).

    Raises :class:`UnknownFormat` (message lists the known formats) or
    ``OSError`` when the file cannot be read."""
    try:
        head = read_head(path)
    except (OSError, EOFError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise UnknownFormat(str(path), f"unreadable: {e}") from e
    if head.startswith(SQLITE_MAGIC):
        return _detect_sqlite(path)
    stripped = head.lstrip()
    if stripped[:1] in (b"{", b"["):
        if b'"rocprofiler-sdk-tool"' in head:
            return "rocprofv3_json"
        if b'"traceEvents"' in head:
            return "kineto_json"
        raise UnknownFormat(str(path), "JSON without 'rocprofiler-sdk-tool' or 'traceEvents'")
    if not head or b"\x00" in head:
        raise UnknownFormat(str(path), "empty or binary file")
    fmt = detect_header(read_header(head))
    if fmt is None:
        first = head.split(b"\n", 1)[0][:120].decode("utf-8", "replace")
        raise UnknownFormat(str(path), f"header {first!r}")
    return fmt


def _detect_sqlite(path: Path) -> str:
    """``"rocpd"`` for a SQLite file with ``rocpd_*`` tables (opened read-only)."""
    try:
        con = sqlite3.connect("file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro",
                              uri=True)
        con.text_factory = lambda b: b.decode("utf-8", "replace")  # a corrupt name: no raise
        try:
            n = con.execute("SELECT count(*) FROM sqlite_master WHERE type IN "
                            "('table', 'view') AND name LIKE 'rocpd%'").fetchone()[0]
        finally:
            con.close()
    except (sqlite3.Error, UnicodeDecodeError) as e:  # corrupt: SQLite's message not UTF-8
        raise UnknownFormat(str(path), f"unreadable SQLite database: {e}") from e
    if not n:
        raise UnknownFormat(str(path), "SQLite database without rocpd tables")
    return "rocpd"
