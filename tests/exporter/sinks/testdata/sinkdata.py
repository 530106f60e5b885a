"""Realistic sink test input: a real ONNX Runtime profile and rocprofv3 CSVs.

:func:`magika_tables` runs magika's ONNX model (``standard_v3_3``) on the CPU
execution provider with ``enable_profiling`` and converts the profile JSON
(``cat=Node`` ``*_kernel_time`` events -> ``KERNEL_SPAN`` rows, ``cat=Session``
``model_run`` -> ``ITERATION_SPAN`` rows; ``ts``/``dur`` are microseconds since
profiling start, shifted to CLOCK_REALTIME ns). :func:`rocprof_kernels` and
:func:`rocprof_hip_api` read the rocprofv3 CSVs next to this file (see
PROVENANCE.md).
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from exporter.schema import conform

HERE = Path(__file__).parent
MAGIKA_MODEL = "magika-standard_v3_3"


def _magika_path() -> Path:
    import magika

    return Path(magika.__file__).parent / "models" / "standard_v3_3" / "model.onnx"


MAGIKA_PROFILE = HERE / "ort_profile_onnxruntime-1.32.0_magika_standard_v3_3_cpu.json"
"""Real ORT CPU-EP profile of 6 magika inferences (see PROVENANCE.md)."""
MAGIKA_EPOCH_NS = 1_764_000_000_000_000_000
"""CLOCK_REALTIME ns the recorded profile's time 0 is placed at."""
MAGIKA_PID = 4242
"""pid the recorded profile's rows are given."""


def magika_profile(runs: int = 6, batch: int = 2) -> tuple[list[dict[str, Any]], int]:
    """``(profile events, CLOCK_REALTIME ns at profiling start)`` of ``runs``
    magika inferences profiled now (ORT CPU execution provider, one thread)."""
    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.enable_profiling = True
        so.profile_file_prefix = str(Path(tmp) / "magika")
        so.intra_op_num_threads = 1
        epoch_ns = time.time_ns()
        sess = ort.InferenceSession(str(_magika_path()), so, providers=["CPUExecutionProvider"])
        x = np.random.default_rng(7).integers(0, 257, (batch, 2048)).astype(np.int32)
        for _ in range(runs):
            sess.run(None, {"bytes": x})
        events = json.loads(Path(sess.end_profiling()).read_text())
    return events, epoch_ns


@functools.lru_cache(maxsize=4)
def magika_tables(runs: int = 6, batch: int = 2) -> tuple[pa.Table, pa.Table]:
    """``(kernels, iterations)`` from ``runs`` magika inferences profiled now."""
    events, epoch_ns = magika_profile(runs, batch)
    return tables_from_profile(events, epoch_ns, os.getpid())


def magika_recorded() -> tuple[pa.Table, pa.Table]:
    """``(kernels, iterations)`` of the recorded profile :data:`MAGIKA_PROFILE`
    (fixed epoch and pid, so the tables are the same on every run)."""
    events = json.loads(MAGIKA_PROFILE.read_text())
    return tables_from_profile(events, MAGIKA_EPOCH_NS, MAGIKA_PID)


def tables_from_profile(events: list[dict[str, Any]], epoch_ns: int,
                        pid: int) -> tuple[pa.Table, pa.Table]:
    """``(KERNEL_SPAN, ITERATION_SPAN)`` tables of an ORT profile's events."""
    runs_ev = [e for e in events if e.get("cat") == "Session" and e["name"] == "model_run"]
    nodes = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    r_start = np.array([e["ts"] for e in runs_ev], dtype=np.int64) * 1000 + epoch_ns
    r_dur = np.array([e["dur"] for e in runs_ev], dtype=np.int64) * 1000
    k_start = np.array([e["ts"] for e in nodes], dtype=np.int64) * 1000 + epoch_ns
    k_dur = np.array([e["dur"] for e in nodes], dtype=np.int64) * 1000
    # iteration = index of the model_run whose interval contains the node start
    it = np.searchsorted(r_start, k_start, side="right") - 1
    names = [e["name"].removesuffix("_kernel_time") for e in nodes]
    ops = [e["args"].get("op_name", "unknown") for e in nodes]
    kernels = conform(
        "kernel_span",
        pa.table(
            {
                "start_ns": k_start,
                "end_ns": k_start + k_dur,
                "duration_ns": k_dur,
                "source": ["ort"] * len(nodes),
                "model": [MAGIKA_MODEL] * len(nodes),
                "pid": [pid] * len(nodes),
                "tid": [int(e["tid"]) for e in nodes],
                "device_type": ["cpu"] * len(nodes),
                "kernel_name": names,
                "kernel_family": ops,
                "op_type": ops,
                "node_name": names,
                "iteration": it,
            }
        ),
    )
    counts = np.bincount(it, minlength=len(runs_ev))
    iterations = conform(
        "iteration_span",
        pa.table(
            {
                "start_ns": r_start,
                "end_ns": r_start + r_dur,
                "duration_ns": r_dur,
                "source": ["ort"] * len(runs_ev),
                "model": [MAGIKA_MODEL] * len(runs_ev),
                "pid": [pid] * len(runs_ev),
                "iteration": np.arange(len(runs_ev)),
                "kernel_count": counts,
            }
        ),
    )
    return pa.Table.from_batches([kernels]), pa.Table.from_batches([iterations])


def _read(name: str) -> pa.Table:
    return pacsv.read_csv(HERE / name)


def rocprof_kernels() -> pa.Table:
    """``KERNEL_SPAN`` rows of ``rocprofv3_kernel_trace.csv`` (no model/pid/iteration)."""
    t = _read("rocprofv3_kernel_trace.csv")
    agent = pc.cast(pc.replace_substring(t.column("Agent_Id"), "Agent ", ""), pa.int64())
    name = t.column("Kernel_Name")
    family = pc.replace_substring_regex(
        pc.replace_substring_regex(name, r"\(.*$", ""), r"^void |<.*>", ""
    )
    start, end = t.column("Start_Timestamp"), t.column("End_Timestamp")
    batch = conform(
        "kernel_span",
        pa.table(
            {
                "start_ns": start,
                "end_ns": end,
                "duration_ns": pc.subtract(end, start),
                "source": pa.array(["rocprofv3"] * t.num_rows),
                "tid": t.column("Thread_Id"),
                "device_type": pa.array(["gpu"] * t.num_rows),
                "agent_id": agent,
                "queue_id": t.column("Queue_Id"),
                "stream_id": t.column("Stream_Id"),
                "correlation_id": t.column("Correlation_Id"),
                "dispatch_id": t.column("Dispatch_Id"),
                "kernel_name": name,
                "kernel_family": family,
                "grid_x": t.column("Grid_Size_X"),
                "grid_y": t.column("Grid_Size_Y"),
                "grid_z": t.column("Grid_Size_Z"),
                "workgroup_x": t.column("Workgroup_Size_X"),
                "workgroup_y": t.column("Workgroup_Size_Y"),
                "workgroup_z": t.column("Workgroup_Size_Z"),
            }
        ),
    )
    return pa.Table.from_batches([batch])


def rocprof_hip_api() -> pa.Table:
    """HIP API rows of ``rocprofv3_hip_runtime_trace.csv`` in the hip_api layout
    (start_ns, end_ns, pid, tid, correlation_id, function)."""
    t = _read("rocprofv3_hip_runtime_trace.csv")
    return pa.table(
        {
            "start_ns": pc.cast(t.column("Start_Timestamp"), pa.int64()),
            "end_ns": pc.cast(t.column("End_Timestamp"), pa.int64()),
            "pid": pc.cast(t.column("Process_Id"), pa.int64()),
            "tid": pc.cast(t.column("Thread_Id"), pa.int64()),
            "correlation_id": pc.cast(t.column("Correlation_Id"), pa.int64()),
            "function": t.column("Function"),
        }
    )
