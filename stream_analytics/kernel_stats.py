"""Per-kernel duration statistics (the ``--stats`` table of rocprof).

:func:`kernel_stats` groups a KERNEL_SPAN table by ``kernel_name`` with one
Arrow ``group_by`` (columnar). ``avg_ns`` is ``total_ns // calls`` (integer
floor), the convention of rocprof v1's ``results.stats.csv`` ``AverageNs``
(e.g. 2608618986 ns / 1001 calls -> 2606012).

>>> import pyarrow as pa
>>> t = pa.table({"kernel_name": ["a", "b", "a"], "duration_ns": [10, 7, 5]})
>>> kernel_stats(t).to_pylist()[0]
{'kernel_name': 'a', 'calls': 2, 'total_ns': 15, 'avg_ns': 7, 'min_ns': 5, 'max_ns': 10}
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

STATS_SCHEMA = pa.schema(
    [
        pa.field("kernel_name", pa.string(), nullable=False),
        pa.field("calls", pa.int64(), nullable=False),
        pa.field("total_ns", pa.int64(), nullable=False),
        pa.field("avg_ns", pa.int64(), nullable=False),
        pa.field("min_ns", pa.int64(), nullable=False),
        pa.field("max_ns", pa.int64(), nullable=False),
    ]
)


def kernel_stats(table: pa.Table) -> pa.Table:
    """One row per kernel name: ``kernel_name, calls, total_ns, avg_ns,
    min_ns, max_ns`` (ns, int64), sorted by ``total_ns`` descending then name.

    ``table`` needs ``kernel_name`` (string or dictionary) and
    ``duration_ns`` (int64; rows with a null duration are ignored). Raises
    ``KeyError`` naming a missing column."""
    for c in ("kernel_name", "duration_ns"):
        if c not in table.column_names:
            raise KeyError(f"kernel_stats: column {c!r} missing")
    name = table["kernel_name"]
    dur = table["duration_ns"].cast(pa.int64())
    if pa.types.is_dictionary(name.type):
        # Arrow groups a dictionary key by index (no string per row), with one
        # dictionary for all chunks; one that repeats a value is grouped as strings
        name = name.unify_dictionaries() if isinstance(name, pa.ChunkedArray) else name
        chunks = name.chunks if isinstance(name, pa.ChunkedArray) else [name]
        if not chunks or pc.count_distinct(chunks[0].dictionary, mode="all").as_py() < len(
                chunks[0].dictionary):
            name = name.cast(pa.string())
    t = pa.table({"kernel_name": name, "d": dur}).filter(pc.is_valid(dur))
    g = t.group_by("kernel_name").aggregate(
        [("d", "count"), ("d", "sum"), ("d", "min"), ("d", "max")]
    )
    names = g["kernel_name"].cast(pa.string())
    calls = g["d_count"].cast(pa.int64())
    total = g["d_sum"]
    out = pa.table(
        {
            "kernel_name": names,
            "calls": calls,
            "total_ns": total,
            "avg_ns": pc.divide(total, calls),  # int64 / int64 -> floor for non-negative
            "min_ns": g["d_min"],
            "max_ns": g["d_max"],
        }
    )
    out = out.sort_by([("total_ns", "descending"), ("kernel_name", "ascending")])
    return out.cast(STATS_SCHEMA)


def kernel_stats_batches(batches: Iterable[pa.RecordBatch]) -> pa.Table:
    """:func:`kernel_stats` of the concatenation of ``batches``, folded batch by
    batch (memory grows with distinct kernel names, not with rows).

    >>> b = pa.record_batch({"kernel_name": ["a", "b"], "duration_ns": [10, 7]})
    >>> c = pa.record_batch({"kernel_name": ["a"], "duration_ns": [5]})
    >>> kernel_stats_batches([b, c]).to_pylist()[0]
    {'kernel_name': 'a', 'calls': 2, 'total_ns': 15, 'avg_ns': 7, 'min_ns': 5, 'max_ns': 10}
    """
    return merge_stats([kernel_stats(pa.Table.from_batches([b])) for b in batches])


def merge_stats(parts: Iterable[pa.Table]) -> pa.Table:
    """One :func:`kernel_stats` table from the stats of several parts of the
    kernels (each a :func:`kernel_stats` result): calls and totals added,
    minimum of minima, maximum of maxima, same order and schema."""
    parts = list(parts)
    if not parts:
        return STATS_SCHEMA.empty_table()
    t = pa.concat_tables(parts)
    g = t.group_by("kernel_name").aggregate(
        [("calls", "sum"), ("total_ns", "sum"), ("min_ns", "min"), ("max_ns", "max")]
    )
    calls, total = g["calls_sum"], g["total_ns_sum"]
    out = pa.table(
        {
            "kernel_name": g["kernel_name"],
            "calls": calls,
            "total_ns": total,
            "avg_ns": pc.divide(total, calls),
            "min_ns": g["min_ns_min"],
            "max_ns": g["max_ns_max"],
        }
    )
    out = out.sort_by([("total_ns", "descending"), ("kernel_name", "ascending")])
    return out.cast(STATS_SCHEMA)


def busy_ns(table: pa.Table) -> int:
    """Length in ns of the union of ``[start_ns, end_ns]`` intervals (GPU busy
    time; overlapping kernels on several queues count once): :func:`busy_union_ns`
    of the two columns.

    >>> busy_ns(pa.table({"start_ns": [0, 5, 20], "end_ns": [10, 12, 25]}))
    17
    """
    import numpy as np

    if table.num_rows == 0:
        return 0
    return busy_union_ns(np.asarray(table["start_ns"].to_numpy(), dtype=np.int64),
                         np.asarray(table["end_ns"].to_numpy(), dtype=np.int64))


def busy_union_ns(start: npt.NDArray[np.int64], end: npt.NDArray[np.int64]) -> int:
    """Length in ns of the union of the intervals ``[start[i], end[i]]`` (int64
    ns arrays of one length). Intervals already in start order are taken as
    they are; others are sorted first, into a copy of both arrays (``start``
    and ``end`` are never written).

    >>> import numpy as np
    >>> busy_union_ns(np.array([20, 0, 5]), np.array([25, 10, 12]))
    17
    """
    import numpy as np

    if len(start) == 0:
        return 0
    if bool(np.all(start[1:] >= start[:-1])):
        cm = np.maximum.accumulate(end)
    else:
        order = np.argsort(start, kind="stable")
        start, cm = start[order], end[order]
        del order
        np.maximum.accumulate(cm, out=cm)  # in the sorted copy: no third array
    first = np.flatnonzero(np.r_[True, start[1:] > cm[:-1]])
    last = np.r_[first[1:] - 1, len(start) - 1]
    return int((cm[last] - start[first]).sum())
