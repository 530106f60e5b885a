"""``stream_analytics.engine._col``: the column reader of every fold. A
one-chunk column without nulls is handed on as it is (no copy per column per
batch); nulls are filled, dictionaries decoded, chunks combined, and a
missing column is its default repeated."""

from __future__ import annotations

import pyarrow as pa

from stream_analytics.engine import _col


def test_a_one_chunk_column_without_nulls_is_not_copied() -> None:
    t = pa.table({"start_ns": pa.array(range(100), pa.int64())})
    got = _col(t, "start_ns", 0, 100)
    assert got.buffers()[1].address == t.column("start_ns").chunk(0).buffers()[1].address


def test_nulls_are_filled_and_chunks_combined() -> None:
    t = pa.Table.from_batches(pa.table({"pid": pa.array([1, None, 3, None], pa.int64())})
                              .to_batches(max_chunksize=2))
    assert t.column("pid").num_chunks == 2
    assert _col(t, "pid", -1, 4).to_pylist() == [1, -1, 3, -1]
    assert _col(t, "pid", None, 4).to_pylist() == [1, None, 3, None]


def test_a_dictionary_is_decoded_and_a_missing_column_repeats_its_default() -> None:
    t = pa.table({"m": pa.array(["a", None, "a"]).dictionary_encode()})
    assert _col(t, "m", "x", 3).to_pylist() == ["a", "x", "a"]
    assert _col(t, "absent", 7, 3).to_pylist() == [7, 7, 7]
    assert _col(t, "absent", None, 3).null_count == 3
