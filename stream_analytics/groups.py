"""Grouped sums, maxima and counts over integer keys, without Arrow's Acero.

``pa.Table.group_by`` runs on Acero, Arrow's query engine. Its first use
imports ``pyarrow.acero`` and, with it, ``pyarrow.dataset``, Parquet, S3 and
Substrait: 9.6 MB more RSS (pyarrow 26) in the always-on daemon, which writes
no Parquet. The daemon's own groupings are small: scheduler samples by pid
(tens of rows a publish) and GPU throttle ratios by timestamp and GPU. Their
keys are integers. :func:`group_reduce` does them with numpy (the key tuples
ranked by :func:`tuple_codes`, without a sort of the rows; ``ufunc.at``),
exactly, with Arrow's output names, types and null rules.
So do the analytics' kernel totals by model, pid and family codes (one call
per reduced batch of a replay: no Acero call each time). Groupings by
string keys (kernel names, families) keep ``group_by``. The Perfetto
trace's track ids use :func:`tuple_codes` too.

>>> import pyarrow as pa
>>> t = pa.table({"pid": [7, 3, 7], "x": [1, None, 5]})
>>> group_reduce(t, ["pid"], [("x", "sum"), ("x", "count")]).to_pylist()
[{'pid': 7, 'x_sum': 6, 'x_count': 2}, {'pid': 3, 'x_sum': None, 'x_count': 0}]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

OPS = ("sum", "max", "count")
"""The aggregations :func:`group_reduce` knows, as Arrow names them."""
_SUM_DTYPE = {"i": np.int64, "u": np.uint64, "f": np.float64}
"""Arrow's type of a sum, by numpy kind of the column: signed, unsigned, float."""


def _valid(col: pa.ChunkedArray) -> np.ndarray[Any, Any]:
    """Per row, True where ``col`` is not null."""
    if col.null_count == 0:
        return np.ones(len(col), dtype=bool)
    return np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)


def _values(col: pa.ChunkedArray) -> np.ndarray[Any, Any]:
    """``col`` as numpy, nulls as 0 (masked by :func:`_valid` where it matters)."""
    return np.asarray(col.fill_null(0).to_numpy() if col.null_count else col.to_numpy())


DENSE_LUT_MIN = 1 << 16
"""Value range up to which :func:`dense_codes` ranks through a lookup table
(at least this, or 4 entries per value)."""


def dense_codes(values: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], int]:
    """``(code per value, number of distinct values)`` of int64 ``values``:
    codes ranked as the distinct values sort. Values within a small range
    (agent, queue ids; pids; the combined codes of :func:`tuple_codes`) are
    ranked through a table indexed by value; others are hash-encoded with
    pyarrow, then only the few distinct values are sorted. No sort of the rows.

    >>> dense_codes(np.array([7, 3, 7, 9]))
    (array([1, 0, 1, 2]), 3)
    >>> dense_codes(np.array([1 << 40, -5, 1 << 40]))
    (array([1, 0, 1]), 2)
    """
    if len(values) == 0:
        return np.empty(0, np.int64), 0
    lo, hi = int(values.min()), int(values.max())
    if hi - lo < max(DENSE_LUT_MIN, 4 * len(values)):
        off = values - lo
        seen = np.zeros(hi - lo + 1, np.bool_)
        seen[off] = True
        lut = np.cumsum(seen, dtype=np.int64) - 1
        return lut[off], int(lut[-1]) + 1
    enc = pc.dictionary_encode(pa.array(values, pa.int64()))
    order = np.argsort(enc.dictionary.to_numpy(), kind="stable")
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    return rank[enc.indices.to_numpy()], len(order)


def tuple_codes(columns: Sequence[np.ndarray[Any, Any]]) -> tuple[np.ndarray[Any, Any], int]:
    """:func:`dense_codes` of the rows of int64 ``columns`` (equal lengths, at
    least one): equal tuples get equal codes, ranked as a lexicographic sort
    of the tuples would. Each column is ranked and the ranks combined into
    one mixed-radix code (re-ranked first whenever the next column could
    overflow int64), which is ranked again.

    >>> tuple_codes([np.array([2, 1, 2, 1]), np.array([5, 9, 5, 0])])
    (array([2, 1, 2, 0]), 3)
    """
    code = np.zeros(len(columns[0]), np.int64)
    span = 1  # every code is below span
    for c in columns:
        rank, m = dense_codes(c)
        if span * m >= 1 << 62:
            code, span = dense_codes(code)  # order kept, span <= rows
        code = code * m + rank
        span *= m
    return dense_codes(code)


def first_rows(codes: np.ndarray[Any, Any], m: int) -> np.ndarray[Any, Any]:
    """The first row of each of the ``m`` codes of :func:`dense_codes` or
    :func:`tuple_codes` (each code in ``0..m-1`` occurs).

    >>> first_rows(np.array([1, 0, 1, 2]), 3)
    array([1, 0, 3])
    """
    first = np.full(m, len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes), dtype=np.int64))
    return first


def _groups(table: pa.Table, keys: Sequence[str]) -> tuple[np.ndarray[Any, Any],
                                                            np.ndarray[Any, Any]]:
    """(group of each row, first row of each group), groups numbered in order
    of first appearance. A null key is a group of its own. The key tuples are
    coded with :func:`tuple_codes` (no sort of the rows: numpy's ``unique``
    of the rows, ``axis=0``, took 1.4 s for 2M rows of 3 keys)."""
    parts: list[np.ndarray[Any, Any]] = []
    for k in keys:
        col = table.column(k)
        if col.null_count:
            parts.append(_valid(col).astype(np.int64))
        parts.append(_values(col).astype(np.int64, copy=False))
    code, m = tuple_codes(parts)
    first = first_rows(code, m)
    order = np.argsort(first, kind="stable")
    rank = np.empty(m, dtype=np.int64)
    rank[order] = np.arange(m, dtype=np.int64)
    return rank[code], first[order]


def group_reduce(table: pa.Table, keys: Sequence[str],
                 aggs: Sequence[tuple[str, str]]) -> pa.Table:
    """``table.group_by(keys).aggregate(aggs)`` for integer ``keys`` and the
    ops of :data:`OPS`, without loading Acero.

    One row per distinct key tuple, in order of first appearance (Arrow's
    order is not documented, and differs with null keys): the key columns
    (their type; a null key is one group), then ``<column>_<op>`` per
    aggregate, as Arrow names them.

    * ``sum``: int64 (uint64 for unsigned integers, float64 for floats); NaN
      included, nulls skipped, null where a group has no value;
    * ``max``: the column's type; NaN and nulls skipped, null where a group
      has no value;
    * ``count``: int64, the values that are not null.

    Raises ``TypeError`` naming a key that is not an integer column or a
    value column that is not a number, ``ValueError`` naming an op it does
    not know, and ``KeyError`` for a missing column.
    """
    for k in keys:
        if not pa.types.is_integer(t := table.column(k).type):
            raise TypeError(f"group_reduce: key column {k!r} is {t}, not an integer")
    for name, op in aggs:
        if op not in OPS:
            raise ValueError(f"group_reduce: op {op!r} of column {name!r} not one of {OPS}")
        t = table.column(name).type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
            raise TypeError(f"group_reduce: column {name!r} is {t}, not a number")
    if table.num_rows == 0:
        gid, rep = np.zeros(0, np.int64), np.zeros(0, np.int64)
    else:
        gid, rep = _groups(table, keys)
    n = len(rep)
    out: dict[str, pa.Array | pa.ChunkedArray] = {k: table.column(k).take(rep) for k in keys}
    for name, op in aggs:
        col = table.column(name)
        valid = _valid(col)
        count = np.bincount(gid[valid], minlength=n)
        if op == "count":
            out[f"{name}_count"] = pa.array(count, pa.int64())
            continue
        values = _values(col)
        if op == "sum":
            acc = np.zeros(n, dtype=_SUM_DTYPE[values.dtype.kind])
            np.add.at(acc, gid[valid], values[valid])
            out[f"{name}_sum"] = pa.array(acc, mask=count == 0)
        elif values.dtype.kind == "f":
            acc = np.full(n, -np.inf, dtype=values.dtype)
            np.fmax.at(acc, gid[valid], values[valid])
            numbers = valid & ~np.isnan(values)
            acc[(count > 0) & (np.bincount(gid[numbers], minlength=n) == 0)] = np.nan
            out[f"{name}_max"] = pa.array(acc, type=col.type, mask=count == 0)
        else:
            acc = np.full(n, np.iinfo(values.dtype).min, dtype=values.dtype)
            np.maximum.at(acc, gid[valid], values[valid])
            out[f"{name}_max"] = pa.array(acc, type=col.type, mask=count == 0)
    return pa.table(out)

