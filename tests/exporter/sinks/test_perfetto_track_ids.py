"""``exporter.sinks.perfetto_trace._track_ids``: track uuid per row of key
tuples, made once per distinct tuple in sorted order (the order decides the
uuids and the descriptor packets, so it must be that of ``np.unique``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from exporter.sinks.perfetto_trace import _track_ids


def _reference(keys: np.ndarray, make: object) -> np.ndarray:  # type: ignore[type-arg]
    """What _track_ids did before: a row-wise np.unique."""
    u, inv = np.unique(keys, axis=0, return_inverse=True)
    lut = np.array([make(*map(int, k)) for k in u], dtype=np.int64)  # type: ignore[operator]
    return lut[inv.reshape(-1)]


def _recorder() -> tuple[list[tuple[int, ...]], object]:
    calls: list[tuple[int, ...]] = []

    def make(*key: int) -> int:
        calls.append(key)
        return 1000 + 7 * len(calls)

    return calls, make


@settings(max_examples=300, deadline=None)
@given(hnp.arrays(np.int64, st.tuples(st.integers(1, 60), st.integers(1, 4)),
                  elements=st.sampled_from([-1, 0, 1, 2, 3, 17, 1 << 40, -(1 << 62)])))
def test_track_ids_equal_the_row_unique_reference_and_its_make_order(
        keys: np.ndarray) -> None:  # type: ignore[type-arg]
    """Any [n, k] int64 keys: the same uuid per row as the np.unique reference,
    and make() called once per distinct tuple, in the same (sorted) order."""
    calls_ref, make_ref = _recorder()
    calls, make = _recorder()
    assert _track_ids(keys, make).tolist() == _reference(keys, make_ref).tolist()
    assert calls == calls_ref
    assert len(calls) == len({tuple(r) for r in keys.tolist()})


def test_track_ids_of_no_rows_is_empty_and_makes_nothing() -> None:
    """No rows: an empty int64 array and no track made."""
    calls, make = _recorder()
    out = _track_ids(np.empty((0, 2), np.int64), make)
    assert out.dtype == np.int64 and len(out) == 0 and calls == []


def test_track_ids_of_many_wide_columns_do_not_overflow_the_combined_code() -> None:
    """3,000 rows of 8 columns with up to 3,000 distinct values each (3000**8
    overflows int64): the same uuids and make() order as the reference."""
    keys = np.random.default_rng(7).integers(-1500, 1500, size=(3000, 8)).astype(np.int64)
    keys[::3] = keys[1::3]  # some repeated tuples
    calls_ref, make_ref = _recorder()
    calls, make = _recorder()
    assert _track_ids(keys, make).tolist() == _reference(keys, make_ref).tolist()
    assert calls == calls_ref
