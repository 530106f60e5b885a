"""Replay recorded rocprof outputs as ``kernel_span`` emits.

``load_paths(paths)`` is the input side of ``aaco-exporter replay PATH...``:
each path is a file or a directory (walked recursively, sorted, so the
order and the keys are deterministic). For every kernel-format file the
HIP API traces in the *same directory* with the same run prefix
(:func:`run_prefix`; rocprofv3 writes
``<dir>/<host>/<pid>/<name>_kernel_trace.csv`` next to
``<name>_hip_api_trace.csv``) are loaded first and joined
(:mod:`collectors.rocprof.launch`). A rocprofv3 CSV in a directory named by
digits takes that number as ``pid``. Marker traces with the same run prefix
(``<name>_marker_api_trace.csv``, roctx ranges) give iterations: matching
ranges become ``iteration_span`` emits (``source`` ``roctx``) and set the
kernels' ``iteration`` and ``model`` (:mod:`collectors.rocprof.markers`).

A rocpd database (``.db``, :mod:`collectors.rocprof.rocpd`) carries its own HIP
API calls and is joined inside. Non-kernel files (stats, counters, memory
copies...) are skipped; a ``.csv``/``.json``/``.json.gz``/``.db`` file of
unknown format (or a rocpd database of an unsupported schema version), or an
unreadable one, is counted in ``rejects`` (``unknown_format``/``io_error``) and
skipped; other extensions in a directory are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from collectors.base import Emit
from collectors.rocprof import rocpd
from collectors.rocprof.csvstream import DEFAULT_BLOCK
from collectors.rocprof.formats import KERNEL_FORMATS, UnknownFormat, detect
from collectors.rocprof.jsonfmt import iter_kineto, iter_kineto_json, iter_rocprofv3_json
from collectors.rocprof.kernels import SPECS, iter_csv_kernel_spans
from collectors.rocprof.launch import LaunchIndex, launch_calls, read_api_trace
from collectors.rocprof.markers import (
    ITERATION_RE,
    is_marker_trace,
    iteration_ranges,
    join_batches,
    read_marker_regions,
)
from collectors.rocprof.rejects import Rejects

_SUFFIXES = (".csv", ".json", ".json.gz", ".db")


def iter_file_spans(
    path: Path,
    rejects: Rejects,
    *,
    fmt: str | None = None,
    launches: LaunchIndex | None = None,
    pid: int | None = None,
    block_size: int = DEFAULT_BLOCK,
) -> Iterator[pa.RecordBatch]:
    """KERNEL_SPAN batches of one kernel-format file (format auto-detected).

    Raises :class:`~collectors.rocprof.formats.UnknownFormat` for an unknown
    file and ``ValueError`` for a known non-kernel format."""
    fmt = fmt or detect(path)
    if fmt in SPECS:
        yield from iter_csv_kernel_spans(path, fmt, rejects, launches=launches, pid=pid,
                                         block_size=block_size)
    elif fmt == "rocprofv3_json":
        yield from iter_rocprofv3_json(path, rejects)
    elif fmt == "kineto_json":
        yield from iter_kineto_json(path, rejects)
    elif fmt == "rocpd":
        yield from rocpd.iter_kernel_spans(path, rejects)
    else:
        raise ValueError(f"{path}: {fmt} has no kernel dispatches")


def expand(paths: Sequence[Path]) -> list[Path]:
    """Files named by ``paths``; directories walked recursively (sorted)
    keeping ``.csv``/``.json``/``.json.gz`` files."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(sorted(f for f in p.rglob("*")
                              if f.is_file() and f.name.endswith(_SUFFIXES)))
        else:
            out.append(p)
    return out


def run_prefix(path: Path) -> str:
    """``"NAME_"`` of ``NAME_kernel_trace.csv`` / ``NAME_hip_api_trace.csv``
    (``""`` for ``kernel_trace.csv``): files of one rocprofv3 run share it."""
    for tail in ("kernel_trace.csv", "hip_api_trace.csv", "hip_runtime_trace.csv",
                 "hip_trace.csv", "marker_api_trace.csv"):
        if path.name.endswith(tail):
            return path.name[: -len(tail)]
    return path.name


def dir_launches(kernel_file: Path, rejects: Rejects, formats: dict[Path, str]) -> LaunchIndex:
    """Launch calls from the HIP API trace CSVs in ``kernel_file``'s directory
    with the same run prefix (:func:`run_prefix`)."""
    index = LaunchIndex()
    want = run_prefix(kernel_file)
    for f in _hip_api_files(kernel_file.parent, formats):
        if run_prefix(f) == want:
            index.add(launch_calls(read_api_trace(f, rejects), rejects, str(f)))
    return index


def dir_markers(kernel_file: Path, rejects: Rejects, *,
                pattern: re.Pattern[str] = ITERATION_RE,
                model: str | None = None) -> tuple[pa.Table, Path] | None:
    """Iteration ranges (:func:`collectors.rocprof.markers.iteration_ranges`)
    of the marker trace CSVs in ``kernel_file``'s directory with the same run
    prefix, and the first such file; ``None`` when there is none or no range
    matches."""
    want = run_prefix(kernel_file)
    files = [f for f in sorted(kernel_file.parent.glob("*marker_api_trace.csv"))
             if is_marker_trace(f) and run_prefix(f) == want]
    parts = [read_marker_regions(f, rejects, name=str(f)) for f in files]
    if not parts:
        return None
    ranges = iteration_ranges(pa.concat_tables(parts), rejects, pattern=pattern, model=model,
                              where=str(files[0]))
    return (ranges, files[0]) if ranges.num_rows else None


def db_markers(db: Path, rejects: Rejects, *, pattern: re.Pattern[str] = ITERATION_RE,
               model: str | None = None) -> tuple[pa.Table, Path] | None:
    """Iteration ranges of a rocpd database's marker regions (``markers`` table
    of :mod:`collectors.rocprof.rocpd`), as :func:`dir_markers` gives them for
    CSV runs; ``None`` when no region matches. Raises
    :class:`~collectors.rocprof.rocpd.RocpdError` for an unreadable database."""
    ranges = iteration_ranges(rocpd.read_table(db, "markers", rejects=rejects), rejects,
                              pattern=pattern,
                              model=model, where=str(db))
    return (ranges, db) if ranges.num_rows else None


def _hip_api_files(directory: Path, formats: dict[Path, str]) -> list[Path]:
    """HIP API trace CSVs in ``directory``, whether or not they were among the
    paths given (``capture -- CMD`` passes the kernel files only); ``formats``
    holds formats already detected."""
    out = []
    for f in sorted(directory.glob("*.csv")):
        if "hip" not in f.name:
            continue
        fmt = formats.get(f)
        if fmt is None:
            try:
                fmt = detect(f)
            except (UnknownFormat, OSError):
                continue
        if fmt == "rocprofv3_api_trace":
            out.append(f)
    return out


def hip_api_table(paths: Sequence[Path], rejects: Rejects | None = None,
                  offset_ns: int = 0) -> pa.Table | None:
    """Every HIP API call in the rocprofv3 API trace CSVs and rocpd databases
    (``regions`` of category ``HIP*``) among ``paths`` (files or directories)
    as ``start_ns, end_ns, pid, tid, correlation_id, function``
    for the Perfetto trace, times moved by ``offset_ns`` (the kernels' clock
    offset, :mod:`collectors.rocprof.clock`); ``None`` when there is none.
    Bad rows are counted in ``rejects`` (file:line), as for kernels."""
    rejects = rejects if rejects is not None else Rejects()
    parts = []
    files = expand(paths)
    dirs = sorted({f.parent for f in files})
    for f in (a for d in dirs for a in _hip_api_files(d, {})):
        t = read_api_trace(f, rejects, name=str(f))
        if t.num_rows:
            parts.append(t)
    for f in (f for f in files if f.suffix == ".db"):
        try:
            t = rocpd.read_table(f, "api_calls", rejects=rejects)
        except rocpd.RocpdError:
            continue  # counted by load_paths
        t = t.filter(pc.starts_with(t["domain"], "HIP"))
        if t.num_rows:
            parts.append(t)
    if not parts:
        return None
    t = pa.concat_tables(parts, promote_options="permissive")
    if offset_ns:
        off = pa.scalar(offset_ns, pa.int64())
        t = t.set_column(t.schema.get_field_index("start_ns"), "start_ns",
                         pc.add(t.column("start_ns"), off))
        t = t.set_column(t.schema.get_field_index("end_ns"), "end_ns",
                         pc.add(t.column("end_ns"), off))  # fmt: skip
    return t.select(["start_ns", "end_ns", "pid", "tid", "correlation_id", "function"])


def _pid_of(path: Path) -> int | None:
    return int(path.parent.name) if path.parent.name.isdigit() else None


def load_paths(
    paths: Sequence[Path],
    rejects: Rejects | None = None,
    *,
    block_size: int = DEFAULT_BLOCK,
    marker_pattern: re.Pattern[str] = ITERATION_RE,
    marker_model: str | None = None,
) -> Iterator[Emit]:
    """Yield ``Emit("kernel_span", batch, key)`` for every kernel dispatch in
    ``paths`` (files or directories; see the module doc), and for a Kineto
    trace also ``Emit("iteration_span", ...)`` for its ``ProfilerStep#N``
    ranges (:func:`collectors.rocprof.jsonfmt.kineto_emits`); for a CSV kernel
    trace with a marker trace beside it, ``Emit("iteration_span", ...)`` of
    its roctx iteration ranges after the kernels (``marker_pattern``,
    ``marker_model``: :func:`collectors.rocprof.markers.iteration_ranges`;
    key ``"rocprof:<marker file>:roctx"``, once per run). Keys are
    ``"rocprof:<file>:<batch index>"``, stable across replays of the same
    files. Bad rows and unknown files are counted in ``rejects``; nothing
    raises except for a path that does not exist (``FileNotFoundError``)."""
    rejects = rejects if rejects is not None else Rejects()
    for p in paths:
        if not p.exists():
            raise FileNotFoundError(f"replay: {p} does not exist")
    formats: dict[Path, str] = {}
    for f in expand(paths):
        try:
            formats[f] = detect(f)
        except UnknownFormat as e:
            rejects.add("unknown_format", str(f), None, str(e).split("; known")[0])
        except OSError as e:
            rejects.add("io_error", str(f), None, str(e))
        except rocpd.RocpdError as e:
            rejects.add(e.reason, str(f), None, str(e))
    cache: dict[tuple[Path, str], LaunchIndex] = {}
    markers: dict[tuple[Path, str], tuple[pa.Table, Path] | None] = {}
    for f, fmt in formats.items():
        if fmt not in KERNEL_FORMATS:
            continue
        launches, ranges = None, None
        if fmt in SPECS:
            ck = (f.parent, run_prefix(f))
            if ck not in cache:
                cache[ck] = dir_launches(f, rejects, formats)
                markers[ck] = dir_markers(f, rejects, pattern=marker_pattern, model=marker_model)
            launches, ranges = cache[ck], markers.pop(ck, None)  # a run's ranges: emitted once
        pid = _pid_of(f) if fmt == "rocprofv3_kernel_trace" else None
        try:
            if fmt == "kineto_json":  # kernel spans, then ProfilerStep#N iteration spans
                for i, (signal, batch) in enumerate(iter_kineto(f, rejects)):
                    yield Emit(signal, batch, f"rocprof:{f}:{i}")
                continue
            if fmt == "rocpd":  # marker regions of the database itself
                ranges = db_markers(f, rejects, pattern=marker_pattern, model=marker_model)
            batches = iter_file_spans(f, rejects, fmt=fmt, launches=launches, pid=pid,
                                      block_size=block_size)
            for i, (signal, batch) in enumerate(join_batches(
                    batches, None if ranges is None else ranges[0])):
                key = f"rocprof:{f}:{i}" if signal == "kernel_span" else \
                    f"rocprof:{ranges[1] if ranges else f}:roctx"
                yield Emit(signal, batch, key)
        except OSError as e:
            rejects.add("io_error", str(f), None, str(e))
        except rocpd.RocpdError as e:
            rejects.add(e.reason, str(f), None, str(e))
