"""rocpd (rocprofv3's SQLite output, the default since ROCm 7.0) -> Arrow.

A rocpd database holds its data in tables named ``rocpd_<x><uuid>`` (one set per
``guid``) and exposes them through views; only the views are read here, never the
suffixed tables. Every query streams in record batches of at most ``batch_rows``
rows (default :data:`BATCH_ROWS`), so memory does not grow with the database.

Schema versions: rocprofiler-sdk stores ``schema_version`` in ``rocpd_metadata``.
Supported: :data:`SUPPORTED_SCHEMA_VERSIONS` (``"3"``: the schema SQL of
rocprofiler-sdk copied in ``testdata/rocpd-schema/``, ROCm 7.x). Any other version,
a file that is not SQLite, or a SQLite file without the rocpd views raises
:class:`RocpdError` with one message naming the file (and the version).

Opening: always read-only (``file:<path>?mode=ro`` URI), through the ADBC SQLite
driver (``adbc-driver-sqlite``, Arrow out of the driver) when installed, else the
standard library ``sqlite3`` (:data:`ENGINE`; ``benchmarks/bench_rocpd.py``
compares them). Never open a database rocprofv3 is still writing: see
:func:`collectors.rocprof.follow.db_complete`.

What is read (times are ns on the tracer's clock, as in the CSVs):

=================  ========================================================
function           view: columns -> output
=================  ========================================================
iter_kernel_spans  ``kernels``: start, end, name, pid, tid, agent_abs_index,
                   queue_id, stream_id, dispatch_id, corr_id, grid_*,
                   workgroup_* -> ``KERNEL_SPAN`` batches; launch_api_ns /
                   launch_delay_ns joined from ``regions`` rows of category
                   ``HIP*`` whose name is a HIP launch call (:data:`launch.LAUNCH_FUNCTIONS`), on
                   (pid, corr_id), as :mod:`collectors.rocprof.launch` does
api_calls          ``regions`` whose category is not ``MARKER_*``: domain
                   (category, e.g. ``HIP_RUNTIME_API_EXT``), function, pid,
                   tid, correlation_id, start_ns, end_ns (the columns of
                   :func:`launch.read_api_trace`)
markers            ``regions`` of category ``MARKER_*`` (roctx): start_ns,
                   end_ns, pid, tid, name, category
memory_copies      ``memory_copies``: start_ns, end_ns, pid, tid, direction
                   (name), src_agent_id, dst_agent_id (absolute indexes),
                   size (bytes), stream_id, queue_id, correlation_id
counters           ``counters_collection``: dispatch_id, correlation_id, pid,
                   tid, agent_id (absolute index), queue_id, kernel_name,
                   counter_name, counter_value (float64, summed over
                   dimensions by the view), start_ns, end_ns
=================  ========================================================

``pid``/``tid`` are the OS ids (the views join ``rocpd_info_process/thread``).
Correlation ids restart in every process, so the launch join and the dispatch-id
duplicate check run per pid.
"""

from __future__ import annotations

import functools
import importlib.util
import sqlite3
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from collectors.rocprof.formats import SQLITE_MAGIC
from collectors.rocprof.kernels import finish_spans
from collectors.rocprof.launch import LAUNCH_FUNCTIONS, LaunchIndex, launch_calls
from collectors.rocprof.rejects import Rejects
from exporter.schema import conform

HAVE_ADBC = importlib.util.find_spec("adbc_driver_sqlite") is not None
"""``adbc-driver-sqlite`` (optional extra ``rocpd``) is installed. It is imported
only when a database is read (:func:`_adbc`): 35-45 ms that a replay of CSVs,
and every other command, does not pay at start."""


@functools.cache
def _adbc() -> Any:
    """The ``adbc_driver_sqlite.dbapi`` module (``None`` when not installed)."""
    if not HAVE_ADBC:
        return None
    import adbc_driver_sqlite.dbapi as dbapi

    return dbapi


def _db_errors() -> tuple[type[Exception], ...]:
    """What a broken database raises: ``sqlite3.Error``, undecodable text, and
    ADBC's ``Error`` when the ADBC driver is installed."""
    base: tuple[type[Exception], ...] = (sqlite3.Error, UnicodeDecodeError)
    return base if _adbc() is None else (*base, _adbc().Error)

SUPPORTED_SCHEMA_VERSIONS = frozenset({"3"})
"""``rocpd_metadata.schema_version`` values this reader knows."""

BATCH_ROWS = 65536
"""Default rows per record batch."""

ENGINE = "adbc" if HAVE_ADBC else "sqlite3"
"""Default engine: ``"adbc"`` when ``adbc-driver-sqlite`` is installed."""

REQUIRED_VIEWS = ("rocpd_metadata", "kernels", "regions")

_I64 = pa.int64()
KERNEL_SQL = (
    "SELECT start AS start_ns, end AS end_ns, name AS kernel_name, pid, tid, "
    "agent_abs_index AS agent_id, queue_id, stream_id, dispatch_id, "
    "corr_id AS correlation_id, grid_x, grid_y, grid_z, workgroup_x, workgroup_y, "
    "workgroup_z FROM kernels"
)
_KERNEL_TYPES = {"kernel_name": pa.string()}

_LAUNCH_SQL = (
    "SELECT pid, name AS function, corr_id AS correlation_id, start AS start_ns, "
    "end AS end_ns FROM regions WHERE category LIKE 'HIP%' AND name IN ({})".format(
        ", ".join(f"'{f}'" for f in sorted(LAUNCH_FUNCTIONS)))
)

TABLE_SQL: dict[str, str] = {
    "api_calls": "SELECT category AS domain, name AS function, pid, tid, "
    "corr_id AS correlation_id, start AS start_ns, end AS end_ns FROM regions "
    "WHERE category NOT LIKE 'MARKER%'",
    "markers": "SELECT start AS start_ns, end AS end_ns, pid, tid, name, category "
    "FROM regions WHERE category LIKE 'MARKER%'",
    "memory_copies": "SELECT start AS start_ns, end AS end_ns, pid, tid, name AS direction, "
    "src_agent_abs_index AS src_agent_id, dst_agent_abs_index AS dst_agent_id, size, "
    "stream_id, queue_id, corr_id AS correlation_id FROM memory_copies",
    "counters": "SELECT dispatch_id, correlation_id, pid, tid, agent_abs_index AS agent_id, "
    "queue_id, kernel_name, counter_name, value AS counter_value, start AS start_ns, "
    "end AS end_ns FROM counters_collection",
}
"""Non-kernel tables: name -> query on the rocpd views (see the module doc)."""

_TABLE_TYPES: dict[str, dict[str, pa.DataType]] = {
    "api_calls": {"domain": pa.string(), "function": pa.string()},
    "markers": {"name": pa.string(), "category": pa.string()},
    "memory_copies": {"direction": pa.string()},
    "counters": {"kernel_name": pa.string(), "counter_name": pa.string(),
                 "counter_value": pa.float64()},
}


class RocpdError(ValueError):
    """The file is not a readable rocpd database of a supported schema version.

    ``reason`` is the :class:`~collectors.rocprof.rejects.Rejects` token."""

    reason = "unknown_format"


def ro_uri(path: Path) -> str:
    """``file:<absolute path>?mode=ro``: SQLite opens it read-only, never creates it."""
    return "file:" + urllib.parse.quote(str(Path(path).resolve())) + "?mode=ro"


def is_sqlite(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes) starts with the SQLite 3 magic."""
    return head.startswith(SQLITE_MAGIC)


def schema_version(path: Path) -> str:
    """``rocpd_metadata.schema_version`` of ``path`` after checking it is a rocpd
    database this module reads.

    Raises :class:`RocpdError` naming ``path``: not SQLite / corrupt, no rocpd
    views, or a schema version outside :data:`SUPPORTED_SCHEMA_VERSIONS`."""
    try:
        con = connect_ro(path)
        try:
            names = {r[0] for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
            missing = [v for v in REQUIRED_VIEWS if v not in names]
            if missing:
                raise RocpdError(f"{path}: SQLite database without the rocpd views "
                                 f"{', '.join(missing)}: not rocprofv3 rocpd output")
            row = con.execute("SELECT value FROM rocpd_metadata "
                              "WHERE tag = 'schema_version'").fetchone()
        finally:
            con.close()
    except (sqlite3.Error, UnicodeDecodeError) as e:  # a corrupt page: message not UTF-8
        raise RocpdError(f"{path}: not a readable SQLite database ({e})") from e
    version = str(row[0]) if row else "<none>"
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        raise RocpdError(
            f"{path}: rocpd schema_version {version} is not supported (supported: "
            f"{', '.join(sorted(SUPPORTED_SCHEMA_VERSIONS))}, rocprofiler-sdk of ROCm 7.x)")
    return version


def iter_query(path: Path, sql: str, *, batch_rows: int = BATCH_ROWS,
               engine: str | None = None,
               types: dict[str, pa.DataType] | None = None,
               rejects: Rejects | None = None) -> Iterator[pa.RecordBatch]:
    """Record batches (<= ``batch_rows`` rows) of ``sql`` on ``path`` opened
    read-only. Integer columns come out int64, the columns in ``types`` as given.
    ``engine``: ``"adbc"`` or ``"sqlite3"`` (default :data:`ENGINE`).

    SQLite columns are not typed: a value that does not fit its column (text or
    a fraction in an integer column, an integer outside int64, a blob in a text
    column) becomes null and is counted ``not_numeric`` in ``rejects`` naming the
    file and the column. Text that is not UTF-8 is read with U+FFFD replacements.

    Raises ``sqlite3.Error`` / ADBC errors on a broken database."""
    engine = engine or ENGINE
    types = types or {}
    fix = _Coerce(str(path), rejects if rejects is not None else Rejects())
    if engine == "adbc":
        if not HAVE_ADBC:
            raise RuntimeError("engine 'adbc' needs the adbc-driver-sqlite package")
        yield from _iter_adbc(path, sql, batch_rows, types, fix)
    else:
        yield from _iter_sqlite3(path, sql, batch_rows, types, fix)


def connect_ro(path: Path) -> sqlite3.Connection:
    """``path`` opened read-only with the stdlib driver; TEXT that is not UTF-8 is
    decoded with replacement characters instead of raising UnicodeDecodeError."""
    con = sqlite3.connect(ro_uri(path), uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    return con


class _Coerce:
    """Column conversion with per-value fallback (see :func:`iter_query`)."""

    def __init__(self, where: str, rejects: Rejects) -> None:
        self.where, self.rejects = where, rejects

    def __call__(self, col: pa.Array | Sequence[Any], want: pa.DataType,
                 name: str) -> pa.Array:
        try:
            if isinstance(col, pa.Array):
                return col if col.type.equals(want) else col.cast(want)
            if not pa.types.is_integer(want) or all(type(v) is int or v is None for v in col):
                return pa.array(col, want)  # (pa.array would truncate a float silently)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError,
                OverflowError):
            pass
        vals = col.to_pylist() if isinstance(col, pa.Array) else list(col)
        out = [_fit(v, want) for v in vals]
        bad = sum(1 for v, o in zip(vals, out, strict=True) if v is not None and o is None)
        if bad:
            self.rejects.add("not_numeric", self.where, None,
                             f"column {name!r}: {bad} value(s) not {want}", n=bad)
        return pa.array(out, want)


def _fit(v: Any, want: pa.DataType) -> Any:
    """``v`` as a value of ``want`` (int64 or string), ``None`` when it is not one."""
    if pa.types.is_string(want):
        if isinstance(v, bytes):
            return v.decode("utf-8", "replace")
        return v if isinstance(v, str) else None
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if isinstance(v, str):  # ADBC types a column by its first value: text, then all text
        try:
            v = int(v.strip())
        except ValueError:
            return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, int) and not isinstance(v, bool) and -(1 << 63) <= v < 1 << 63:
        return v
    return None


def _iter_adbc(path: Path, sql: str, batch_rows: int,
               types: dict[str, pa.DataType], fix: _Coerce) -> Iterator[pa.RecordBatch]:
    with _adbc().connect(ro_uri(path)) as con, con.cursor() as cur:
        cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(batch_rows)})
        cur.execute(sql)
        for b in cur.fetch_record_batch():
            yield _typed(b, types, fix)


def _iter_sqlite3(path: Path, sql: str, batch_rows: int,
                  types: dict[str, pa.DataType], fix: _Coerce) -> Iterator[pa.RecordBatch]:
    con = connect_ro(path)
    try:
        cur = con.execute(sql)
        names = [d[0] for d in cur.description]
        while rows := cur.fetchmany(batch_rows):
            cols = list(zip(*rows, strict=True))
            yield pa.RecordBatch.from_arrays(
                [fix(c, types.get(n, _I64), n) for c, n in zip(cols, names, strict=True)],
                names=names)
    finally:
        con.close()


def _typed(b: pa.RecordBatch, types: dict[str, pa.DataType], fix: _Coerce) -> pa.RecordBatch:
    """ADBC infers each column's type from its values (all-NULL -> null type; mixed
    values -> the first batch's type): cast to int64 / the given types."""
    arrays, changed = [], False
    for name, col in zip(b.schema.names, b.columns, strict=True):
        want = types.get(name, _I64)
        if not col.type.equals(want):
            col = fix(col, want, name)
            changed = True
        arrays.append(col)
    return pa.RecordBatch.from_arrays(arrays, names=b.schema.names) if changed else b


def read_table(path: Path, name: str, *, engine: str | None = None,
               rejects: Rejects | None = None) -> pa.Table:
    """The whole of table ``name`` (a key of :data:`TABLE_SQL`) from ``path``
    (values that do not fit their column: null, counted in ``rejects``).

    Raises :class:`RocpdError` for a file that is not a supported rocpd database."""
    schema_version(path)
    try:
        batches = list(iter_query(path, TABLE_SQL[name], engine=engine,
                                  types=_TABLE_TYPES[name], rejects=rejects))
    except _db_errors() as e:
        raise RocpdError(f"{path}: reading {name}: {e}") from e
    if not batches:
        return _empty(TABLE_SQL[name], _TABLE_TYPES[name])
    return pa.Table.from_batches(batches)


def _empty(sql: str, types: dict[str, pa.DataType]) -> pa.Table:
    cols = [c.rsplit(" AS ", 1)[-1].strip() for c in
            sql.split("SELECT ", 1)[1].split(" FROM ", 1)[0].split(",")]
    return pa.table({c: pa.array([], types.get(c, _I64)) for c in cols})


def launch_indexes(path: Path, rejects: Rejects, *,
                   engine: str | None = None) -> dict[int, LaunchIndex]:
    """pid -> :class:`LaunchIndex` of the HIP launch calls in ``regions``
    (duplicate correlation ids in one process counted as ``duplicate_id``)."""
    parts = list(iter_query(path, _LAUNCH_SQL, engine=engine,
                            types={"function": pa.string()}, rejects=rejects))
    if not parts:
        return {}
    t = pa.Table.from_batches(parts)
    if t["pid"].null_count:
        rejects.add("missing_value", str(path), None, "HIP launch region without a pid",
                    n=t["pid"].null_count)
        t = t.filter(pc.is_valid(t["pid"]))
    out: dict[int, LaunchIndex] = {}
    pids = t["pid"].to_numpy()
    for pid in np.unique(pids).tolist():
        sub = t.filter(pa.array(pids == pid))
        out[int(pid)] = LaunchIndex(launch_calls(sub, rejects, f"{path} (pid {pid})"))
    return out


def iter_kernel_spans(path: Path, rejects: Rejects, *, batch_rows: int = BATCH_ROWS,
                      engine: str | None = None, join: bool = True) -> Iterator[pa.RecordBatch]:
    """``KERNEL_SPAN`` batches (<= ``batch_rows`` rows each) of the ``kernels``
    view of ``path``; ``source`` = ``rocprofv3``, ``kernel_family`` from
    :mod:`collectors.rocprof.families`, HIP launch join unless ``join=False``.

    Raises :class:`RocpdError` naming the file when it is not a supported rocpd
    database (checked before the first batch) or breaks while being read."""
    schema_version(path)
    name = str(path)
    try:
        launches = launch_indexes(path, rejects, engine=engine) if join else {}
        for b in iter_query(path, KERNEL_SQL, batch_rows=batch_rows, engine=engine,
                            types=_KERNEL_TYPES, rejects=rejects):
            for t in _per_pid(pa.Table.from_batches([b])):
                pid = t["pid"][0].as_py() if t.num_rows else None
                t = finish_spans(t, "rocprofv3", rejects, file=name)
                li = launches.get(pid) if pid is not None else None
                if li is not None:
                    t = li.join(t, rejects, name)
                if t.num_rows:
                    yield conform("kernel_span", t)
    except _db_errors() as e:
        raise RocpdError(f"{path}: reading kernels: {e}") from e


def _per_pid(t: pa.Table) -> list[pa.Table]:
    """``t`` split by ``pid`` (one table when there is one pid, the usual case)."""
    pids = t["pid"]
    if t.num_rows == 0 or pc.min_max(pids)["min"] == pc.min_max(pids)["max"]:
        return [t]
    arr: Any = pids.to_numpy(zero_copy_only=False)
    return [t.filter(pa.array(arr == p)) for p in np.unique(arr).tolist()]
