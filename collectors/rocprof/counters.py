"""Hardware counters per kernel dispatch, from every counter format, as one wide table.

=================================  =============================================
input (format id)                  layout
=================================  =============================================
``rocprofv3_counter_collection``   rocprofv3 ``*_counter_collection.csv``: one
                                   row per (dispatch, counter), the value summed
                                   over the counter's dimensions
``rocpd``                          rocprofv3 SQLite: ``counters_collection`` view
                                   (``rocpd_pmc_event`` x ``rocpd_info_pmc`` x
                                   kernel dispatches), summed over dimensions
``rocprof_compute_pmc_perf``       rocprof-compute ``pmc_perf.csv``: one row per
                                   dispatch, one column per counter; per-instance
                                   columns ``X[i]`` are summed into ``X_sum``
                                   when the file has no ``X_sum``
=================================  =============================================

:func:`read_counters` returns one row per dispatch: ``source`` (file),
``dispatch_id``, ``kernel_name``, ``start_ns``, ``end_ns`` and one float64
column per counter (null where that dispatch has no value). A rocprofv3 counter
of a per-instance block (``TCC_EA0_RDREQ``) holds its sum over instances, so
:func:`counter` also answers ``X_sum`` with ``X``. Errors: unreadable rows are
counted in ``rejects`` by the underlying readers; a file of another format
raises ``ValueError`` naming it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from collectors.rocprof import rocpd
from collectors.rocprof.formats import UnknownFormat, detect
from collectors.rocprof.rejects import Rejects
from collectors.rocprof.tables import read_table

COUNTER_FORMATS = frozenset({"rocprofv3_counter_collection", "rocpd",
                             "rocprof_compute_pmc_perf"})
_INSTANCE = re.compile(r"^(?P<name>[A-Z][A-Z0-9_]*)\[(?P<i>\d+)\]$")
_BLOCKS = ("SQ_", "SQC_", "TCC_", "TCP_", "TA_", "TD_", "GRBM_", "SPI_", "CPC_", "CPF_")
_KEYS = ("source", "dispatch_id", "kernel_name", "start_ns", "end_ns")


def _pivot(long: pa.Table, source: str) -> pa.Table:
    """Long (dispatch, counter_name, counter_value) rows -> one row per dispatch."""
    if long.num_rows == 0:
        return pa.table({"source": pa.array([], pa.string())})
    disp = long["dispatch_id"].to_numpy(zero_copy_only=False).astype(np.int64)
    uniq, first, inv = np.unique(disp, return_index=True, return_inverse=True)
    names = long["counter_name"].to_pylist()
    vals = long["counter_value"].to_numpy(zero_copy_only=False).astype(np.float64)
    cols: dict[str, pa.Array] = {
        "source": pa.array([source] * len(uniq)),
        "dispatch_id": pa.array(uniq, pa.int64()),
        "kernel_name": long["kernel_name"].take(pa.array(first)).cast(pa.string()),
        "start_ns": long["start_ns"].take(pa.array(first)).cast(pa.int64()),
        "end_ns": long["end_ns"].take(pa.array(first)).cast(pa.int64()),
    }
    name_arr = np.array(names, dtype=object)
    for name in sorted(set(names)):
        m = name_arr == name
        out = np.full(len(uniq), np.nan)
        out[inv[m]] = 0.0  # present: 0, then the sum of its values
        np.add.at(out, inv[m], vals[m])
        cols[name] = pa.array(out, pa.float64(), mask=np.isnan(out))
    return pa.table(cols)


def _pmc_perf(path: Path) -> pa.Table:
    t = pcsv.read_csv(path, convert_options=pcsv.ConvertOptions(
        column_types={"Kernel_Name": pa.string()}))
    cols: dict[str, pa.Array | pa.ChunkedArray] = {
        "source": pa.array([str(path)] * t.num_rows),
        "dispatch_id": t["Dispatch_ID"].cast(pa.int64()),
        "kernel_name": t["Kernel_Name"],
    }
    for ts, out in (("Start_Timestamp", "start_ns"), ("End_Timestamp", "end_ns")):
        cols[out] = (t[ts].cast(pa.float64()).cast(pa.int64(), safe=False)
                     if ts in t.column_names else pa.nulls(t.num_rows, pa.int64()))
    inst: dict[str, list[str]] = {}
    for c in t.column_names:
        m = _INSTANCE.match(c)
        if m:
            inst.setdefault(m["name"], []).append(c)
        elif c.startswith(_BLOCKS) and (pa.types.is_integer(t[c].type)
                                        or pa.types.is_floating(t[c].type)):
            cols[c] = t[c].cast(pa.float64())
    for name, parts in inst.items():
        if f"{name}_sum" not in cols:
            total = np.zeros(t.num_rows)
            for c in parts:
                total += t[c].cast(pa.float64()).fill_null(0).to_numpy()
            cols[f"{name}_sum"] = pa.array(total)
    return pa.table(cols)


def read_counter_file(path: Path, fmt: str, rejects: Rejects) -> pa.Table:
    """One counter file (``fmt`` a member of :data:`COUNTER_FORMATS`) -> wide table."""
    if fmt == "rocprof_compute_pmc_perf":
        return _pmc_perf(path)
    if fmt == "rocprofv3_counter_collection":
        return _pivot(read_table(path, rejects, fmt), str(path))
    if fmt == "rocpd":
        return _pivot(rocpd.read_table(path, "counters"), str(path))
    raise ValueError(f"{path}: {fmt} holds no hardware counters")


def counter_files(paths: Sequence[Path], rejects: Rejects) -> list[tuple[Path, str]]:
    """(file, format) of every counter file among ``paths`` (directories walked)."""
    from collectors.rocprof.replay import expand

    out: list[tuple[Path, str]] = []
    for f in expand(paths) + [p for p in paths if p.suffix == ".db"] + [
            q for p in paths if p.is_dir() for q in sorted(p.rglob("*.db"))]:
        try:
            fmt = detect(f)
        except (UnknownFormat, OSError, rocpd.RocpdError):
            continue
        if fmt in COUNTER_FORMATS and (f, fmt) not in out:
            out.append((f, fmt))
    return out


def read_counters(paths: Sequence[Path], rejects: Rejects | None = None) -> pa.Table | None:
    """Every dispatch's counters from the counter files among ``paths``, or
    None when there are none (or they hold no rows)."""
    rejects = rejects if rejects is not None else Rejects()
    tables = []
    for f, fmt in counter_files(paths, rejects):
        try:
            t = read_counter_file(f, fmt, rejects)
        except (rocpd.RocpdError, pa.ArrowInvalid, KeyError) as e:
            rejects.add("bad_counters", str(f), None, str(e))
            continue
        if t.num_rows:
            tables.append(t)
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="permissive")


def counter(t: pa.Table, name: str) -> npt.NDArray[np.float64] | None:
    """Column ``name`` as float64 (nulls as 0), also found as ``name`` without
    ``_sum`` (rocprofv3 sums instances itself); None when the table lacks it."""
    for n in (name, name.removesuffix("_sum")):
        if n in t.column_names and n not in _KEYS:
            return np.asarray(t[n].cast(pa.float64()).fill_null(0.0), np.float64)
    return None


def durations_ns(t: pa.Table) -> npt.NDArray[np.int64]:
    """``end_ns - start_ns`` per dispatch (0 where unknown or not positive)."""
    d = np.asarray(pc.subtract(t["end_ns"], t["start_ns"]).fill_null(0), np.int64)
    return np.maximum(d, 0)
