"""kernel_stats groups spans per kernel name; busy_ns is the union of intervals."""

from __future__ import annotations

import pyarrow as pa
import pytest

from stream_analytics.kernel_stats import busy_ns, kernel_stats, kernel_stats_batches


def test_kernel_stats_floor_average_and_order_by_total() -> None:
    t = pa.table({"kernel_name": pa.array(["a", "b", "a", "a"]).dictionary_encode(),
                  "duration_ns": [10, 100, 5, 6]})
    rows = kernel_stats(t).to_pylist()
    assert [r["kernel_name"] for r in rows] == ["b", "a"]  # b: 100 > a: 21
    assert rows[1] == {"kernel_name": "a", "calls": 3, "total_ns": 21, "avg_ns": 7,
                       "min_ns": 5, "max_ns": 10}


def test_kernel_stats_missing_column_names_it() -> None:
    with pytest.raises(KeyError, match="duration_ns"):
        kernel_stats(pa.table({"kernel_name": ["a"]}))


def test_busy_ns_counts_overlap_once_and_gaps_not_at_all() -> None:
    t = pa.table({"start_ns": [100, 0, 50, 300], "end_ns": [200, 60, 120, 310]})
    # [0,60] u [50,120] u [100,200] = [0,200] -> 200; plus [300,310] -> 10
    assert busy_ns(t) == 210


def test_kernel_stats_batches_equals_kernel_stats_of_the_whole_table() -> None:
    """Folding batch by batch (each with its own dictionary) gives the same rows
    as one group_by over the concatenation, including the floor average."""
    names = ["a", "b", "a", "c", "a", "b", "c", "c"]
    durs = [10, 100, 5, 7, 6, None, 1, 2]
    t = pa.table({"kernel_name": pa.array(names).dictionary_encode(), "duration_ns": durs})
    batches = [pa.record_batch({"kernel_name": pa.array(names[i:i + 3]).dictionary_encode(),
                                "duration_ns": pa.array(durs[i:i + 3], pa.int64())})
               for i in range(0, len(names), 3)]
    assert kernel_stats_batches(batches).to_pylist() == kernel_stats(t).to_pylist()
    assert kernel_stats_batches([]).num_rows == 0


@pytest.mark.parametrize("dictionary", [
    pa.array(["x", "y", "x", "z"]),  # a dictionary that repeats a value
    pa.array(["x", "y", "z"]),
])
def test_kernel_stats_of_a_dictionary_column_equals_that_of_its_strings(
        dictionary: pa.Array) -> None:
    """A dictionary column is grouped by index, not by a string per row; the
    rows equal those of the same names as plain strings, also when the
    dictionary repeats a value or the column has chunks with other dictionaries."""
    idx = [0, 1, 2, 0, 1, 2, 2, 0]
    names = pa.DictionaryArray.from_arrays(pa.array(idx, pa.int32()), dictionary)
    other = pa.array(["z", "w", "x"]).dictionary_encode()
    col = pa.chunked_array([names, other])
    durs = pa.chunked_array([pa.array([3, 4, 5, 6, 7, 8, None, 10]), pa.array([1, 2, 3])])
    plain = pa.table({"kernel_name": col.cast(pa.string()), "duration_ns": durs})
    got = kernel_stats(pa.table({"kernel_name": col, "duration_ns": durs})).to_pylist()
    assert got == kernel_stats(plain).to_pylist()
    assert {r["kernel_name"] for r in got} == {"x", "y", "z", "w"}
