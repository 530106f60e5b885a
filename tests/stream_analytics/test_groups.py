"""group_reduce: Arrow's group_by results for integer keys, without loading Acero.

Arrow's own ``group_by`` is the reference: the same table through both gives
the same schema and the same rows (values and nulls; Arrow's row order is not
documented, so rows are compared sorted). The tables are generated with a
fixed seed (synthetic, not recorded data).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from stream_analytics.groups import group_reduce

ROOT = Path(__file__).resolve().parents[2]


def _table(rng: np.random.Generator, n: int, null_keys: bool) -> pa.Table:
    """pid (int64), ts (int64), gpu (int32, nulls when ``null_keys``), and
    values with nulls, NaN, negatives and an all-null column stretch."""
    def nulls(p: float) -> np.ndarray:
        return rng.random(n) < p

    ivals = rng.integers(-10**12, 10**12, n)
    fvals = rng.normal(size=n)
    fvals[rng.random(n) < 0.1] = np.nan
    return pa.table({
        "pid": pa.array(rng.integers(1, 6, n), pa.int64()),
        "ts": pa.array(rng.integers(0, 3, n) * 10**9, pa.int64()),
        "gpu": pa.array(rng.integers(0, 4, n), pa.int32(),
                        mask=nulls(0.2) if null_keys else None),
        "i": pa.array(ivals, pa.int64(), mask=nulls(0.3)),
        "s": pa.array(rng.integers(0, 100, n), pa.int32(), mask=nulls(0.5)),
        "f": pa.array(fvals, pa.float64(), mask=nulls(0.3)),
        "u": pa.array(rng.integers(0, 2**40, n), pa.uint64()),
    })


AGGS = [("i", "sum"), ("i", "max"), ("i", "count"), ("s", "sum"), ("s", "max"),
        ("f", "sum"), ("f", "max"), ("f", "count"), ("u", "sum"), ("u", "max")]


@pytest.mark.parametrize("keys", [["pid"], ["pid", "ts"], ["ts", "gpu"], ["gpu"]])
@pytest.mark.parametrize("n", [1, 7, 500])
def test_equals_arrows_group_by(keys: list[str], n: int) -> None:
    """For one, two and nullable keys, the rows Arrow's group_by gives."""
    rng = np.random.default_rng(1000 * n + len(keys))
    t = _table(rng, n, null_keys=True)
    want = t.group_by(keys, use_threads=False).aggregate(AGGS)
    got = group_reduce(t, keys, AGGS)
    assert got.schema == want.schema

    def rows(x: pa.Table) -> list[tuple[object, ...]]:  # NaN as a string: NaN != NaN
        return sorted((tuple("nan" if v != v else v for v in r.values())
                       for r in x.to_pylist()), key=repr)

    assert rows(got) == rows(want)


@pytest.mark.parametrize("spread", ["small", "wide", "overflowing"])
def test_groups_of_small_wide_and_overflowing_key_ranges_are_arrows_in_first_appearance_order(
        spread: str) -> None:
    """Key tuples ranked through a lookup table (small ranges), by hashing
    (a range far wider than the rows), and with the combined code re-ranked
    because two keys' ranges together overflow int64: the same groups as
    Arrow's, numbered in order of first appearance."""
    from stream_analytics import groups

    rng = np.random.default_rng(11)
    n = 3000
    a, b = rng.integers(0, 5, n), rng.integers(-3, 4, n)
    if spread == "wide":
        b = b * 10**12
    elif spread == "overflowing":
        a = a * 2**60 - 2**61
        b = b * 2**60
    t = pa.table({"a": a, "b": b, "v": rng.integers(0, 100, n)})
    wide = (int(b.max()) - int(b.min())) >= max(groups.DENSE_LUT_MIN, 4 * n)
    assert wide == (spread != "small")
    got = group_reduce(t, ["a", "b"], [("v", "sum"), ("v", "count")])
    first: dict[tuple[int, int], None] = {}
    for k in zip(a.tolist(), b.tolist(), strict=True):
        first.setdefault(k, None)
    assert list(zip(got["a"].to_pylist(), got["b"].to_pylist(), strict=True)) == list(first)
    want = t.group_by(["a", "b"], use_threads=False).aggregate([("v", "sum"), ("v", "count")])
    assert sorted(got.to_pylist(), key=repr) == sorted(want.to_pylist(), key=repr)


def test_groups_come_in_order_of_first_appearance() -> None:
    """A null key is one group, placed where it first appears."""
    t = pa.table({"gpu": pa.array([3, None, 0, 3, 1, None, 0], pa.int64()),
                  "v": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]})
    got = group_reduce(t, ["gpu"], [("v", "max")]).to_pylist()
    assert got == [{"gpu": 3, "v_max": 4.0}, {"gpu": None, "v_max": 6.0},
                   {"gpu": 0, "v_max": 7.0}, {"gpu": 1, "v_max": 5.0}]


def test_a_group_whose_values_are_all_null_sums_and_maxes_to_null() -> None:
    """Arrow's rule: no value in a group gives a null sum and max, and count 0."""
    t = pa.table({"pid": [1, 1, 2], "x": pa.array([None, None, 4], pa.int64())})
    got = group_reduce(t, ["pid"], [("x", "sum"), ("x", "max"), ("x", "count")])
    assert got.to_pylist() == [{"pid": 1, "x_sum": None, "x_max": None, "x_count": 0},
                               {"pid": 2, "x_sum": 4, "x_max": 4, "x_count": 1}]


def test_an_empty_table_gives_an_empty_table_of_the_same_schema_as_arrow() -> None:
    t = pa.table({"pid": pa.array([], pa.int64()), "v": pa.array([], pa.float64())})
    want = t.group_by(["pid"]).aggregate([("v", "max"), ("v", "sum")])
    got = group_reduce(t, ["pid"], [("v", "max"), ("v", "sum")])
    assert got.num_rows == 0
    assert got.schema == want.schema


def test_bad_arguments_name_the_column_or_op() -> None:
    t = pa.table({"pid": [1], "name": ["a"], "v": [1.0]})
    with pytest.raises(TypeError, match="'name'"):
        group_reduce(t, ["name"], [("v", "sum")])
    with pytest.raises(TypeError, match="'name'"):
        group_reduce(t, ["pid"], [("name", "max")])
    with pytest.raises(ValueError, match=r"'mean'.*'v'"):
        group_reduce(t, ["pid"], [("v", "mean")])
    with pytest.raises(KeyError):
        group_reduce(t, ["pid"], [("missing", "sum")])


def test_it_does_not_import_acero_dataset_or_parquet() -> None:
    """In a fresh interpreter, a grouping leaves pyarrow.acero, pyarrow.dataset
    and pyarrow.parquet unloaded (Arrow's own group_by loads all three)."""
    code = ("import sys, pyarrow as pa\n"
            "from stream_analytics.groups import group_reduce\n"
            "t = pa.table({'pid': [1, 2, 1], 'v': [1.0, 2.0, 3.0]})\n"
            "assert group_reduce(t, ['pid'], [('v', 'max')]).num_rows == 2\n"
            "print(sorted(m for m in ('pyarrow.acero', 'pyarrow.dataset', 'pyarrow.parquet')"
            " if m in sys.modules))\n"
            "t.group_by('pid').aggregate([('v', 'max')])\n"
            "print('pyarrow.acero' in sys.modules)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["[]", "True"]  # and Arrow's own group_by does load it
