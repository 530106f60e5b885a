"""``PidJoin``'s minima of the held kernels, kept per appended part, equal
the minima of the held table itself after any sequence of holds and
releases (prefix slices or filters, as ``Analytics._resolve`` makes them)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_analytics.engine import _HELD, PidJoin, split_rows


def _part(rng: np.random.Generator, n: int, now: int) -> pa.Table:
    cols = {f.name: pa.nulls(n, f.type) for f in _HELD}
    cols |= {"t_ns": pa.array(rng.integers(0, 10**6, n), pa.int64()),
             "arrived_ns": pa.array(np.full(n, now), pa.int64()),
             "start_ns": pa.array(np.zeros(n, np.int64)), "end_ns": pa.array(np.zeros(n, np.int64)),
             "pid": pa.array(np.ones(n, np.int64))}
    return pa.table(cols, schema=_HELD)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1),
       st.lists(st.tuples(st.integers(1, 40), st.sampled_from(["none", "prefix", "filter"]),
                          st.integers(0, 60)), min_size=1, max_size=25))
def test_held_minima_match_the_held_table(seed: int, steps: list[tuple[int, str, int]]) -> None:
    """After every hold and release, ``held_min()`` is ``(min t_ns, min
    arrived_ns)`` of ``held`` (arrival times that go down as well as up)."""
    rng = np.random.default_rng(seed)
    j = PidJoin()
    for i, (rows, release, k) in enumerate(steps):
        now = int(rng.integers(0, 100)) + i  # a wall clock that may step back
        j.hold(_part(rng, rows, now), now)
        h = j.held
        assert h is not None
        n = h.num_rows
        if release == "prefix":
            go = np.arange(n) < min(k, n)
        elif release == "filter":
            go = rng.random(n) < 0.3
        else:
            go = np.zeros(n, bool)
        if go.any():
            out, j.held = split_rows(h, go)
            j.released(out.num_rows, prefix=not go[int(np.argmin(go)):].any())
        if j.held is not None and j.held.num_rows:
            assert j.held_min() == (pc.min(j.held["t_ns"]).as_py(),
                                    pc.min(j.held["arrived_ns"]).as_py())
