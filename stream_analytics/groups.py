"""Grouped sums, maxima and counts over integer keys, without Arrow's Acero.

``pa.Table.group_by`` runs on Acero, Arrow's query engine. Its first use
imports ``pyarrow.acero`` and, with it, ``pyarrow.dataset``, Parquet, S3 and
Substrait: 9.6 MB more RSS (pyarrow 26) in the always-on daemon, which writes
no Parquet. The daemon's own groupings are small: scheduler samples by pid
(tens of rows a publish) and GPU throttle ratios by timestamp and GPU. Their
keys are integers. :func:`group_reduce` does them with numpy (the keys folded
into one int64, grouped by direct addressing or ``unique``; ``ufunc.at``),
exactly, with Arrow's output names, types and null rules.
So do the analytics' kernel totals by model, pid and family codes (one call
per reduced batch of a replay: no Acero call each time). Groupings by
string keys (kernel names, families) keep ``group_by``.

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
DIRECT_SPAN = 1
"""Keys spanning at most this many values per row (plus 1,024) are grouped by
direct addressing: two int64 tables of the span's size (at most 16 bytes a
row, as much as a sort's temporaries) instead of a sort of the rows."""


def _valid(col: pa.ChunkedArray) -> np.ndarray[Any, Any]:
    """Per row, True where ``col`` is not null."""
    if col.null_count == 0:
        return np.ones(len(col), dtype=bool)
    return np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)


def _values(col: pa.ChunkedArray) -> np.ndarray[Any, Any]:
    """``col`` as numpy, nulls as 0 (masked by :func:`_valid` where it matters)."""
    return np.asarray(col.fill_null(0).to_numpy() if col.null_count else col.to_numpy())


def _one_key(parts: Sequence[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any] | None:
    """The key columns as one int64 per row (mixed radix over each column's
    range), or None when the product of the ranges does not fit in 62 bits."""
    if len(parts) == 1:
        return parts[0]
    key = np.zeros(len(parts[0]), dtype=np.int64)
    span = 1
    for p in parts:
        lo, hi = int(p.min()), int(p.max())
        if span * (hi - lo + 1) >= 1 << 62:
            return None
        key += (p - lo) * span
        span *= hi - lo + 1
    return key


def _dense(key: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None:
    """:func:`_groups` of one int64 key whose values span at most
    :data:`DIRECT_SPAN` times the rows, by direct addressing (no sort of
    the rows); None when they span more."""
    n = len(key)
    lo = int(key.min())
    span = int(key.max()) - lo + 1
    if span > DIRECT_SPAN * n + 1024:
        return None
    k = key - lo
    first = np.full(span, n, dtype=np.int64)
    np.minimum.at(first, k, np.arange(n, dtype=np.int64))
    present = np.flatnonzero(first < n)
    order = np.argsort(first[present], kind="stable")
    gid = np.empty(span, dtype=np.int64)
    gid[present[order]] = np.arange(len(order), dtype=np.int64)
    return gid[k], first[present[order]]


def _groups(table: pa.Table, keys: Sequence[str]) -> tuple[np.ndarray[Any, Any],
                                                            np.ndarray[Any, Any]]:
    """(group of each row, first row of each group), groups numbered in order
    of first appearance. A null key is a group of its own.

    The key columns are folded into one int64 (:func:`_one_key`) and grouped
    by direct addressing (:func:`_dense`) or, over a wider span, by numpy's
    ``unique`` of that int64; ``unique`` of the rows (``axis=0``, a sort of
    structured rows: 1.4 s for 2M rows of 3 keys) only where the ranges do
    not fit in 62 bits."""
    parts: list[np.ndarray[Any, Any]] = []
    for k in keys:
        col = table.column(k)
        if col.null_count:
            parts.append(_valid(col).astype(np.int64))
        parts.append(_values(col).astype(np.int64, copy=False))
    key = _one_key(parts)
    if key is not None and (dense := _dense(key)) is not None:
        return dense
    if key is not None:
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    else:
        _, first, inv = np.unique(np.stack(parts, axis=1), axis=0, return_index=True,
                                  return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[inv.reshape(-1)], first[order]


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

