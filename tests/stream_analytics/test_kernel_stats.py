"""kernel_stats groups spans per kernel name; busy_ns is the union of intervals."""

from __future__ import annotations

import pyarrow as pa
import pytest

from stream_analytics.kernel_stats import busy_ns, kernel_stats


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
