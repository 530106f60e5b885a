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
calls are ``cat`` ``cuda_runtime``/``cuda_driver``/``hip_runtime``/``hip_driver``
events named in ``LAUNCH_FUNCTIONS`` (e.g. ``hipLaunchKernel``), joined by
``correlation``; a joined kernel also takes the call's host ``pid``/``tid``.
``ProfilerStep#N`` ranges become ITERATION_SPAN rows and set the kernels'
``iteration`` (:func:`kineto_emits` gives the join rule); every row carries
``model`` (default: the file name up to its first ``.``, :func:`kineto_model`).
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from collectors.rocprof.kernels import SOURCE, finish_spans
from collectors.rocprof.launch import LAUNCH_FUNCTIONS, LaunchIndex
from collectors.rocprof.rejects import Rejects
from exporter.ranges import join_ranges
from exporter.schema import conform


def _load(path: Path, rejects: Rejects) -> Any:
    try:
        return load_json(path)
    except ValueError as e:
        cause = e.__cause__
        rejects.add("bad_json", str(path), getattr(cause, "lineno", None), str(cause)[:200])
        return None


I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


def _i64(v: int | None) -> int | None:
    """``v`` when it fits an int64 column, else ``None`` (a missing value)."""
    return v if v is not None and I64_MIN <= v <= I64_MAX else None


def _add(*xs: int | None) -> int | None:
    """Sum of ``xs`` as int64 (``None`` when one is missing or the sum overflows)."""
    if any(x is None for x in xs):
        return None
    return _i64(sum(x for x in xs if x is not None))


def _int(v: Any) -> int | None:
    """An int64 from JSON (int, Decimal, numeric text); ``None`` for anything else,
    including NaN, infinities and values outside int64."""
    try:
        return _i64(int(v)) if v is not None and not isinstance(v, bool) else None
    except (TypeError, ValueError, InvalidOperation, OverflowError):
        return None


def _us_to_ns(v: Any) -> int | None:
    """Microseconds (int, Decimal or numeric text) -> exact integer ns (``None`` when
    not a finite number in int64 range)."""
    if v is None or isinstance(v, bool | dict | list):
        return None
    try:
        return _i64(int((Decimal(str(v)) * 1000).to_integral_value()))
    except (InvalidOperation, ValueError, OverflowError):
        return None


def _key(v: Any) -> Any:
    """``v`` when it can be a lookup key (a JSON scalar), else ``None``."""
    return v if isinstance(v, int | str | float | Decimal) else None


def _list(v: Any) -> list[Any]:
    """``v`` when it is a JSON array, else ``[]``."""
    return v if isinstance(v, list) else []


def _str(v: Any) -> str | None:
    """``v`` when it is a JSON string (lone surrogates from ``\\udXXX`` escapes
    replaced by ``?``, so Arrow can encode it as UTF-8), else ``None``."""
    if not isinstance(v, str):
        return None
    try:
        v.encode()
    except UnicodeEncodeError:
        return v.encode("utf-8", "replace").decode()
    return v


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _emit(cols: dict[str, list[Any]], fmt: str, rejects: Rejects, file: str,
          launches: LaunchIndex | None, model: str | None = None) -> Iterator[pa.RecordBatch]:
    if not cols["start_ns"]:
        return
    t = pa.table({k: pa.array(v, pa.string() if k == "kernel_name" else pa.int64())
                  for k, v in cols.items()})
    if model is not None:
        t = t.append_column("model", pa.array([model] * t.num_rows, pa.string()))
    t = finish_spans(t, SOURCE[fmt], rejects, file=file)
    if launches is not None and len(launches):
        t = launches.join(t, rejects, file)
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
        agents = {_key(_get(a, "id", "handle")): i for i, a in enumerate(_list(proc.get("agents")))}
        names: dict[Any, str] = {}
        for s in _list(proc.get("kernel_symbols")):
            if isinstance(s, dict):
                names[_key(s.get("kernel_id"))] = _str(str(
                    s.get("formatted_kernel_name") or s.get("demangled_kernel_name")
                    or s.get("kernel_name") or ""
                )) or ""
        kinds = _list(_get(proc, "strings", "buffer_records"))
        launch_rows: dict[str, list[int]] = {"correlation_id": [], "api_start_ns": [],
                                             "api_end_ns": []}
        for rec in _list(_get(proc, "buffer_records", "hip_api")):
            kind, op = _int(_get(rec, "kind")), _int(_get(rec, "operation"))
            fn = None
            if kind is not None and 0 <= kind < len(kinds):
                ops = _list(_get(kinds[kind], "operations"))
                if op is not None and 0 <= op < len(ops):
                    fn = ops[op]
            corr = _int(_get(rec, "correlation_id", "internal"))
            st, en = _int(_get(rec, "start_timestamp")), _int(_get(rec, "end_timestamp"))
            if isinstance(fn, str) and fn in LAUNCH_FUNCTIONS and None not in (corr, st, en):
                launch_rows["correlation_id"].append(corr)  # type: ignore[arg-type]
                launch_rows["api_start_ns"].append(st)  # type: ignore[arg-type]
                launch_rows["api_end_ns"].append(en)  # type: ignore[arg-type]
        launches = LaunchIndex(pa.table({k: pa.array(v, pa.int64())
                                         for k, v in launch_rows.items()}))
        pid = _int(_get(proc, "metadata", "pid"))
        cols: dict[str, list[Any]] = {k: [] for k in _V3_FIELDS}
        for rec in _list(_get(proc, "buffer_records", "kernel_dispatch")):
            info = _get(rec, "dispatch_info") or {}
            vals = {
                "start_ns": _int(_get(rec, "start_timestamp")),
                "end_ns": _int(_get(rec, "end_timestamp")),
                "kernel_name": names.get(_key(_get(info, "kernel_id"))),
                "pid": pid,
                "tid": _int(_get(rec, "thread_id")),
                "agent_id": agents.get(_key(_get(info, "agent_id", "handle"))),
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
             "correlation_id", "pid", "tid", "iteration")

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
"""Name of a PyTorch profiler step range; group 1 is the step number N."""

STEP_CATS = frozenset({"user_annotation", "cpu_op"})
"""``cat`` of the CPU-side ``ProfilerStep#N`` range (``cpu_op`` in older PyTorch)."""

GPU_STEP_CAT = "gpu_user_annotation"
"""``cat`` of the same range projected on the GPU timeline."""

LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver"})
"""``cat`` of host runtime calls that may launch kernels (ROCm builds write ``cuda_runtime``)."""


def kineto_model(path: Path) -> str:
    """Default ``model`` label of a Kineto trace: its file name up to the first
    ``.`` (vLLM writes ``<worker>.<ts>.pt.trace.json[.gz]``), else ``"pytorch"``.

    >>> kineto_model(Path("/t/rank0-worker.1712345.pt.trace.json.gz"))
    'rank0-worker'
    >>> kineto_model(Path(".pt.trace.json"))
    'pytorch'
    """
    return path.name.split(".", 1)[0] or "pytorch"


def load_json(path: Path) -> Any:
    """The whole JSON document of ``path`` (gunzipped when it ends in ``.gz``),
    floats as :class:`~decimal.Decimal`.

    Raises ``ValueError`` naming the file when it cannot be read or parsed
    (a truncated file, or one nested deeper than Python's recursion limit, fails here)."""
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            return json.load(f, parse_float=Decimal)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a complete JSON document: {str(e)[:200]}") from e
    except RecursionError as e:  # '[[[[...' deeper than the interpreter's stack
        raise ValueError(f"{path}: JSON nested too deeply to parse") from e


def kineto_emits(doc: Any, path: Path, rejects: Rejects, model: str | None = None,
                 ) -> list[tuple[str, pa.RecordBatch]]:
    """``[("kernel_span", batch), ("iteration_span", batch)]`` (each only when
    it has rows) of one parsed Kineto trace ``doc`` read from ``path``.

    Kernel rows as in the module doc; each also gets ``model`` (``model`` or
    :func:`kineto_model`) and ``iteration`` = N of the ``ProfilerStep#N`` range
    it belongs to (null outside every step). Join rule, in order:

    1. the kernel's launch call (same ``args.correlation``) has its ``ts``
       inside a CPU ``ProfilerStep#N`` range (``cat`` in :data:`STEP_CATS`,
       ``[ts, ts + dur]``) of the launch call's ``pid`` (any thread: autograd
       launches from its own thread);
    2. no launch call found: the kernel's ``ts`` is inside a
       ``gpu_user_annotation`` ``ProfilerStep#N`` range and exactly one CPU
       step N exists; the kernel takes that step's ``pid``.

    Iteration rows (ITERATION_SPAN): one per CPU ``ProfilerStep#N`` range,
    ``start_ns``/``end_ns``/``duration_ns`` from its ``ts``/``dur`` (us ->
    ns, + ``baseTimeNanoseconds``), ``pid`` its event ``pid``, ``iteration``
    N, ``kernel_count`` the kept kernel rows joined to it, ``source``
    ``kineto``. A second range with the same (pid, N) counts
    ``duplicate_id``; a document without a ``traceEvents`` list counts
    ``bad_json``."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        rejects.add("bad_json", str(path), None, "no 'traceEvents' list")
        return []
    model = model or kineto_model(path)
    base = _int(doc.get("baseTimeNanoseconds")) or 0
    calls: dict[int, tuple[int, int, int | None, int | None]] = {}
    kernels = []
    steps: dict[tuple[int, int], tuple[int, int]] = {}  # (pid, N) -> (start, end) ns
    gpu_steps: list[tuple[int, int, int]] = []  # (start, end, N) ns
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = _str(e.get("cat"))
        if cat == "kernel":
            kernels.append(e)
        elif cat in LAUNCH_CATS and _str(e.get("name")) in LAUNCH_FUNCTIONS:
            corr = _int(_get(e, "args", "correlation"))
            ts, dur = _us_to_ns(e.get("ts")), _us_to_ns(e.get("dur"))
            if corr is None or ts is None or dur is None:
                continue
            if corr in calls:
                rejects.add("duplicate_id", str(path), None, f"launch correlation {corr} repeated")
                continue
            start, end = _add(base, ts), _add(base, ts, dur)
            if start is None or end is None:
                continue
            calls[corr] = (start, end, _int(e.get("pid")), _int(e.get("tid")))
        elif cat in STEP_CATS or cat == GPU_STEP_CAT:
            m = STEP_RE.match(str(e.get("name")))
            ts, dur = _us_to_ns(e.get("ts")), _us_to_ns(e.get("dur"))
            if m is None or ts is None or dur is None or dur < 0:
                continue
            n, start, end = _i64(int(m.group(1))), _add(base, ts), _add(base, ts, dur)
            if n is None or start is None or end is None:
                rejects.add("not_numeric", str(path), None,
                            f"{m.group(0)[:40]} ts/dur/N outside int64 ns")
                continue
            rng = (start, end)
            if cat == GPU_STEP_CAT:
                gpu_steps.append((*rng, n))
                continue
            pid = _int(e.get("pid"))
            if pid is None:
                rejects.add("missing_value", str(path), None, f"{m.group(0)} without a pid")
            elif (pid, n) in steps:
                rejects.add("duplicate_id", str(path), None, f"{m.group(0)} repeated in pid {pid}")
            else:
                steps[(pid, n)] = rng
    cols: dict[str, list[Any]] = {k: [] for k in _K_FIELDS}
    launch_ts: list[int | None] = []
    for e in kernels:
        ts, dur = _us_to_ns(e.get("ts")), _us_to_ns(e.get("dur"))
        corr = _int(_get(e, "args", "correlation"))
        call = calls.get(corr) if corr is not None else None
        cols["start_ns"].append(_add(base, ts))
        cols["end_ns"].append(_add(base, ts, dur))
        cols["kernel_name"].append(_str(e.get("name")))
        cols["agent_id"].append(_int(_get(e, "args", "device")))
        cols["stream_id"].append(_int(_get(e, "args", "stream")))
        cols["correlation_id"].append(corr)
        cols["pid"].append(call[2] if call else None)
        cols["tid"].append(call[3] if call else None)
        launch_ts.append(call[0] if call else None)
    cols["iteration"] = _join_steps(cols, launch_ts, steps, gpu_steps)
    launches = LaunchIndex(pa.table({
        "correlation_id": pa.array(list(calls), pa.int64()),
        "api_start_ns": pa.array([c[0] for c in calls.values()], pa.int64()),
        "api_end_ns": pa.array([c[1] for c in calls.values()], pa.int64()),
    }))
    out: list[tuple[str, pa.RecordBatch]] = []
    kb = next(_emit(cols, "kineto_json", rejects, str(path), launches, model=model), None)
    if kb is not None:
        out.append(("kernel_span", kb))
    if steps:
        keys = sorted(steps)
        counts: dict[tuple[int, int], int] = {}
        if kb is not None:
            for p, n in zip(kb.column("pid").to_pylist(), kb.column("iteration").to_pylist(),
                            strict=True):
                if n is not None:
                    counts[(p, n)] = counts.get((p, n), 0) + 1
        st = np.array([steps[k][0] for k in keys], np.int64)
        en = np.array([steps[k][1] for k in keys], np.int64)
        out.append(("iteration_span", conform("iteration_span", pa.table({
            "start_ns": st, "end_ns": en, "duration_ns": en - st,
            "source": pa.array(["kineto"] * len(keys)),
            "model": pa.array([model] * len(keys)),
            "pid": pa.array([k[0] for k in keys], pa.int64()),
            "iteration": pa.array([k[1] for k in keys], pa.int64()),
            "kernel_count": pa.array([counts.get(k, 0) for k in keys], pa.int64()),
        }))))
    return out


def _join_steps(cols: dict[str, list[Any]], launch_ts: list[int | None],
                steps: dict[tuple[int, int], tuple[int, int]],
                gpu_steps: list[tuple[int, int, int]]) -> list[int | None]:
    """Step number N per kernel (see :func:`kineto_emits`); fills ``cols["pid"]``
    for kernels placed by the GPU-annotation fallback. Columnar: one
    ``searchsorted`` per pid over that pid's step starts
    (:func:`exporter.ranges.join_ranges`, shared with the roctx marker join)."""
    n = len(launch_ts)
    it = np.full(n, -1, np.int64)
    lts = np.array([-1 if t is None else t for t in launch_ts], np.int64)
    has = np.array([t is not None for t in launch_ts], bool)
    pid = np.array([-1 if p is None else p for p in cols["pid"]], np.int64)
    if steps:  # one record per step, then the shared columnar join
        keys = list(steps)
        j = join_ranges(pid, lts, np.array([k[0] for k in keys], np.int64),
                        np.array([steps[k][0] for k in keys], np.int64),
                        np.array([steps[k][1] for k in keys], np.int64), valid=has)
        num = np.array([k[1] for k in keys], np.int64)
        it[j >= 0] = num[j[j >= 0]]
    if gpu_steps:
        owner: dict[int, list[int]] = {}
        for p, num_ in steps:
            owner.setdefault(num_, []).append(p)
        g = sorted(gpu_steps)
        gs = np.array([x[0] for x in g], np.int64)
        ge = np.array([x[1] for x in g], np.int64)
        start = np.array([-1 if t is None else t for t in cols["start_ns"]], np.int64)
        sel = np.flatnonzero(~has & (start >= 0))
        j = np.searchsorted(gs, start[sel], side="right") - 1
        ok = (j >= 0) & (start[sel] <= ge[np.maximum(j, 0)])
        for i, jj in zip(sel[ok].tolist(), j[ok].tolist(), strict=True):
            ps = owner.get(g[jj][2], [])
            if len(ps) == 1:
                it[i] = g[jj][2]
                cols["pid"][i] = ps[0]
    return [None if v < 0 else int(v) for v in it.tolist()]


def iter_kineto_json(path: Path, rejects: Rejects, model: str | None = None,
                     ) -> Iterator[pa.RecordBatch]:
    """KERNEL_SPAN batch of a Kineto/PyTorch-profiler trace (``.json`` or
    ``.json.gz``), ``iteration`` and ``model`` set as in :func:`kineto_emits`;
    an unreadable file counts ``bad_json``."""
    for signal, batch in iter_kineto(path, rejects, model):
        if signal == "kernel_span":
            yield batch


def iter_kineto(path: Path, rejects: Rejects, model: str | None = None,
                ) -> Iterator[tuple[str, pa.RecordBatch]]:
    """``(signal, batch)`` pairs of a Kineto trace file: its kernel spans and
    its ``ProfilerStep#N`` iteration spans (:func:`kineto_emits`); an
    unreadable or truncated file counts ``bad_json`` and yields nothing."""
    doc = _load(path, rejects)
    if doc is not None:
        yield from kineto_emits(doc, path, rejects, model)
