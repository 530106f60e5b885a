"""``stream_analytics.engine.split_rows`` and the held-kernel join that uses it:
resolving a batch takes the leaving rows as zero-copy slices when they are a
prefix (arrival order), with the same rows and results as filtering."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_analytics import engine as eng_mod
from stream_analytics.engine import Analytics, split_rows


def _table(n: int) -> pa.Table:
    return pa.table({"a": np.arange(n, dtype=np.int64),
                     "s": pa.array([f"k{i % 7}" for i in range(n)])})


def _filtered(t: pa.Table, go: np.ndarray) -> tuple[pa.Table, pa.Table | None]:  # type: ignore[type-arg]
    """The reference: two filters (what _resolve did before)."""
    return t.filter(pa.array(go)), (t.filter(pa.array(~go)) if not go.all() else None)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=40))
def test_split_rows_returns_the_rows_filter_returns_in_order(mask: list[bool]) -> None:
    """Any mask: the rows where it is True, then the others (None when none), in
    the table's order, as two filters would give them."""
    go = np.array(mask)
    t = _table(len(go))
    out, rest = split_rows(t, go)
    ref_out, ref_rest = _filtered(t, go)
    assert out.to_pylist() == ref_out.to_pylist()
    assert (rest is None) == (ref_rest is None)
    if rest is not None and ref_rest is not None:
        assert rest.to_pylist() == ref_rest.to_pylist()


@pytest.mark.parametrize("k", [1, 5, 999])
def test_split_rows_slices_a_prefix_without_copying(k: int) -> None:
    """A prefix mask of k rows gives two slices sharing the table's buffers."""
    t = _table(1000)
    go = np.arange(1000) < k
    out, rest = split_rows(t, go)
    assert rest is not None
    assert (out.num_rows, rest.num_rows) == (k, 1000 - k)
    base = t.column("a").chunk(0).buffers()[1].address
    assert out.column("a").chunk(0).buffers()[1].address == base
    assert rest.column("a").chunk(0).buffers()[1].address == base
    assert rest.column("a").chunk(0).offset == k


def _kernel_batches(n_batches: int, rows: int) -> list[pa.Table]:
    """rocprof-like kernels of one pid, no iteration, 1 us apart, a few
    overlapping (the busy union must carry across batch splits)."""
    out = []
    for b in range(n_batches):
        i = np.arange(b * rows, (b + 1) * rows, dtype=np.int64)
        start = 1_000_000_000 + i * 1_000
        out.append(pa.table({
            "pid": np.full(rows, 42, np.int64), "start_ns": start,
            "end_ns": start + 600 + (i % 5) * 300, "duration_ns": 600 + (i % 5) * 300,
            "kernel_family": pa.array(["gemm", "copy", "elementwise"] * (rows // 3)
                                      + ["gemm"] * (rows % 3)),
            "launch_api_ns": pa.array(np.where(i % 4 == 0, 50, 0), pa.int64()),
            "launch_delay_ns": pa.array(i % 3, pa.int64())}))
    return out


def test_held_kernels_over_the_cap_give_the_same_results_as_filtering(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels without iteration spans held past max_held leave oldest first;
    with the slicing split the engine's results and drops equal those of
    the filtering split, batch after batch and after settle()."""
    def run(split: object) -> list[object]:
        monkeypatch.setattr(eng_mod, "split_rows", split)
        eng = Analytics(window_s=None, max_held=2_500)
        seen = []
        for t in _kernel_batches(12, 999):
            eng.ingest("kernel_span", "h", t)
            seen.append((eng.held_kernels(), eng.results(now_ns=0).to_pylist()))
        eng.settle()
        seen.append((eng.held_kernels(), eng.results(now_ns=0).to_pylist(), dict(eng.drops)))
        return seen

    fast = run(split_rows)
    ref = run(_filtered)
    assert fast == ref
    assert fast[3][0] == 2_500  # the cap held, so rows left through the split
    assert fast[-1][2] == {"unattributed_kernel": 12 * 999}
