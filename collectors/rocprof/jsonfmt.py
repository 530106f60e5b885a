"""JSON kernel formats: rocprofv3 ``--output-format json`` and Kineto traces.

Both are single JSON documents, so they are loaded whole (not streamed);
columns are then built once per field, never one Arrow row at a time.

rocprofv3 JSON (schema: ``rocprofv3-schema.json``, top key
``rocprofiler-sdk-tool``, one element per process):

* ``buffer_records.kernel_dispatch[]`` -> one span: ``start_timestamp``,
  ``end_timestamp``, ``thread_id`` -> tid, ``correlation_id.internal`` ->
  correlation_id, ``dispatch_info.{dispatch_id, queue_id.handle,
  grid_size.{x,y,z}, workgroup_size.{x,y,z}}``; ``dispatch_info.agent_id.handle``
  -> agent_id = index of the agent with that ``id.handle`` in ``agents[]``;
  ``dispatch_info.kernel_id`` -> name via ``kernel_symbols[]``
  (``formatted_kernel_name``, else ``demangled_kernel_name``, else
  ``kernel_name``); ``metadata.pid`` -> pid.
* ``buffer_records.hip_api[]`` -> launch calls: the function name is
  ``strings.buffer_records[kind].operations[operation]`` (kind indexes the
  array in the tool's enum order); calls in
  :data:`~collectors.rocprof.launch.LAUNCH_FUNCTIONS` are joined.

Kineto (PyTorch profiler Chrome trace, ROCm build): events with ``cat ==
"kernel"`` and ``ph == "X"`` are spans; ``ts``/``dur`` are microseconds with
3 decimals, converted exactly to ns (decimal text, no float rounding) and
offset by ``baseTimeNanoseconds`` when present. ``args.device`` -> agent_id,
``args.stream`` -> stream_id, ``args.correlation`` -> correlation_id. Launch
calls are ``cat`` ``cuda_runtime``/``cuda_driver`` events named in
``LAUNCH_FUNCTIONS`` (e.g. ``hipLaunchKernel``), joined by ``correlation``;
a joined kernel also takes the call's host ``pid``/``tid``.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import pyarrow as pa

from collectors.rocprof.kernels import SOURCE, finish_spans
from collectors.rocprof.launch import LAUNCH_FUNCTIONS, LaunchIndex
from collectors.rocprof.rejects import Rejects
from exporter.schema import conform


def _load(path: Path, rejects: Rejects) -> Any:
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            return json.load(f, parse_float=Decimal)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as e:
        rejects.add("bad_json", str(path), getattr(e, "lineno", None), str(e)[:200])
        return None


def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None and not isinstance(v, bool) else None
    except (TypeError, ValueError, InvalidOperation):
        return None


def _us_to_ns(v: Any) -> int | None:
    """Microseconds (int, Decimal or numeric text) -> exact integer ns."""
    if v is None or isinstance(v, bool):
        return None
    try:
        return int((Decimal(str(v)) * 1000).to_integral_value())
    except (InvalidOperation, ValueError):
        return None


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _emit(cols: dict[str, list[Any]], fmt: str, rejects: Rejects, file: str,
          launches: LaunchIndex | None) -> Iterator[pa.RecordBatch]:
    if not cols["start_ns"]:
        return
    t = pa.table({k: pa.array(v, pa.string() if k == "kernel_name" else pa.int64())
                  for k, v in cols.items()})
    t = finish_spans(t, SOURCE[fmt], rejects, file=file)
    if launches is not None and len(launches):
        t = launches.join(t)
    if t.num_rows:
        yield conform("kernel_span", t)


_V3_FIELDS = ("start_ns", "end_ns", "kernel_name", "pid", "tid", "agent_id", "queue_id",
              "dispatch_id", "correlation_id", "grid_x", "grid_y", "grid_z",
              "workgroup_x", "workgroup_y", "workgroup_z")


def iter_rocprofv3_json(path: Path, rejects: Rejects) -> Iterator[pa.RecordBatch]:
    """KERNEL_SPAN batches (one per process element) of a rocprofv3 JSON file.

    A missing top key or a non-list element counts ``bad_json``; a dispatch
    without timestamps counts ``missing_value``."""
    doc = _load(path, rejects)
    if doc is None:
        return
    procs = doc.get("rocprofiler-sdk-tool") if isinstance(doc, dict) else None
    if not isinstance(procs, list):
        rejects.add("bad_json", str(path), None, "no 'rocprofiler-sdk-tool' list")
        return
    for proc in procs:
        if not isinstance(proc, dict):
            rejects.add("bad_json", str(path), None, "process element is not an object")
            continue
        agents = {_get(a, "id", "handle"): i for i, a in enumerate(proc.get("agents") or [])}
        names: dict[Any, str] = {}
        for s in proc.get("kernel_symbols") or []:
            if isinstance(s, dict):
                names[s.get("kernel_id")] = str(
                    s.get("formatted_kernel_name") or s.get("demangled_kernel_name")
                    or s.get("kernel_name") or ""
                )
        kinds = _get(proc, "strings", "buffer_records") or []
        launch_rows: dict[str, list[int]] = {"correlation_id": [], "api_start_ns": [],
                                             "api_end_ns": []}
        for rec in _get(proc, "buffer_records", "hip_api") or []:
            kind, op = _int(_get(rec, "kind")), _int(_get(rec, "operation"))
            fn = None
            if kind is not None and 0 <= kind < len(kinds):
                ops = _get(kinds[kind], "operations") or []
                if op is not None and 0 <= op < len(ops):
                    fn = ops[op]
            corr = _int(_get(rec, "correlation_id", "internal"))
            st, en = _int(_get(rec, "start_timestamp")), _int(_get(rec, "end_timestamp"))
            if fn in LAUNCH_FUNCTIONS and None not in (corr, st, en):
                launch_rows["correlation_id"].append(corr)  # type: ignore[arg-type]
                launch_rows["api_start_ns"].append(st)  # type: ignore[arg-type]
                launch_rows["api_end_ns"].append(en)  # type: ignore[arg-type]
        launches = LaunchIndex(pa.table({k: pa.array(v, pa.int64())
                                         for k, v in launch_rows.items()}))
        pid = _int(_get(proc, "metadata", "pid"))
        cols: dict[str, list[Any]] = {k: [] for k in _V3_FIELDS}
        for rec in _get(proc, "buffer_records", "kernel_dispatch") or []:
            info = _get(rec, "dispatch_info") or {}
            vals = {
                "start_ns": _int(_get(rec, "start_timestamp")),
                "end_ns": _int(_get(rec, "end_timestamp")),
                "kernel_name": names.get(_get(info, "kernel_id")),
                "pid": pid,
                "tid": _int(_get(rec, "thread_id")),
                "agent_id": agents.get(_get(info, "agent_id", "handle")),
                "queue_id": _int(_get(info, "queue_id", "handle")),
                "dispatch_id": _int(_get(info, "dispatch_id")),
                "correlation_id": _int(_get(rec, "correlation_id", "internal")),
            }
            for a in ("x", "y", "z"):
                vals[f"grid_{a}"] = _int(_get(info, "grid_size", a))
                vals[f"workgroup_{a}"] = _int(_get(info, "workgroup_size", a))
            for k in _V3_FIELDS:
                cols[k].append(vals[k])
        yield from _emit(cols, "rocprofv3_json", rejects, str(path), launches)


_K_FIELDS = ("start_ns", "end_ns", "kernel_name", "agent_id", "stream_id",
             "correlation_id", "pid", "tid")


def iter_kineto_json(path: Path, rejects: Rejects) -> Iterator[pa.RecordBatch]:
    """KERNEL_SPAN batch of a Kineto/PyTorch-profiler trace (``.json`` or
    ``.json.gz``); see the module doc for the mapping and the launch join."""
    doc = _load(path, rejects)
    if doc is None:
        return
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        rejects.add("bad_json", str(path), None, "no 'traceEvents' list")
        return
    base = _int(doc.get("baseTimeNanoseconds")) or 0
    calls: dict[int, tuple[int, int, int | None, int | None]] = {}
    kernels = []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if cat == "kernel":
            kernels.append(e)
        elif cat in ("cuda_runtime", "cuda_driver") and e.get("name") in LAUNCH_FUNCTIONS:
            corr = _int(_get(e, "args", "correlation"))
            ts, dur = _us_to_ns(e.get("ts")), _us_to_ns(e.get("dur"))
            if corr is None or ts is None or dur is None:
                continue
            if corr in calls:
                rejects.add("duplicate_id", str(path), None, f"launch correlation {corr} repeated")
                continue
            calls[corr] = (base + ts, base + ts + dur, _int(e.get("pid")), _int(e.get("tid")))
    cols: dict[str, list[Any]] = {k: [] for k in _K_FIELDS}
    for e in kernels:
        ts, dur = _us_to_ns(e.get("ts")), _us_to_ns(e.get("dur"))
        corr = _int(_get(e, "args", "correlation"))
        call = calls.get(corr) if corr is not None else None
        cols["start_ns"].append(None if ts is None else base + ts)
        cols["end_ns"].append(None if ts is None or dur is None else base + ts + dur)
        cols["kernel_name"].append(e.get("name"))
        cols["agent_id"].append(_int(_get(e, "args", "device")))
        cols["stream_id"].append(_int(_get(e, "args", "stream")))
        cols["correlation_id"].append(corr)
        cols["pid"].append(call[2] if call else None)
        cols["tid"].append(call[3] if call else None)
    launches = LaunchIndex(pa.table({
        "correlation_id": pa.array(list(calls), pa.int64()),
        "api_start_ns": pa.array([c[0] for c in calls.values()], pa.int64()),
        "api_end_ns": pa.array([c[1] for c in calls.values()], pa.int64()),
    }))
    yield from _emit(cols, "kineto_json", rejects, str(path), launches)


